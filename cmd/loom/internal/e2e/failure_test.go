package e2e

import (
	"bytes"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/loom-ml/loom/cmd/loom/stack"
	"github.com/loom-ml/loom/libs/testkit"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/provisioner"
)

// The "what a failure must not do", each with real processes: an
// agent killed, an agent paused past the heartbeat timeout, the health
// service paused. Services run as their own processes (so that one can be
// paused), and so do the agents.

// agentOf returns the running agent of node cluster/host of the stack.
func agentOf(t *testing.T, s *stack.Stack, clusterID, host string) (provisioner.LocalAgent, bool) {
	t.Helper()
	agents, err := stack.Agents(s.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range agents {
		if a.Node == clusterID+"/"+host {
			return a, true
		}
	}
	return provisioner.LocalAgent{}, false
}

// sendSignal sends sig to pid, failing the test when it cannot.
func sendSignal(t *testing.T, pid int, sig syscall.Signal) {
	t.Helper()
	if err := syscall.Kill(pid, sig); err != nil {
		t.Fatalf("kill -%d %d: %v", sig, pid, err)
	}
}

// servicePID finds the process of one of a process-mode stack's services
// (its binary, serving on its gRPC address).
func servicePID(t *testing.T, s *stack.Stack, name, grpcAddr string) int {
	t.Helper()
	exe := filepath.Join(binaries(t), name)
	if pid, ok := pidServing(exe, grpcAddr); ok {
		return pid
	}
	t.Fatalf("no %s process serving %s", name, grpcAddr)
	return 0
}

// pidServing returns the process running exe with -grpc-addr=grpcAddr
// among its arguments. It reads the command line only of the processes
// whose executable (the link /proc/<pid>/exe, read without the process's
// memory map lock) is exe: a read of /proc/<pid>/cmdline waits on that
// lock, which a process can hold for as long as it likes, and in `make
// test` another package's test holds one so on purpose (libs/testkit/stall)
// while this one runs (TestServicePIDIsNotHeldUpByAStalledProcess).
func pidServing(exe, grpcAddr string) (int, bool) {
	if real, err := filepath.EvalSymlinks(exe); err == nil {
		exe = real // as the link names it
	}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		if l, err := os.Readlink(filepath.Join(d, "exe")); err != nil || l != exe {
			continue
		}
		b, err := os.ReadFile(filepath.Join(d, "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		for _, a := range args[1:] {
			if a == "-grpc-addr="+grpcAddr {
				pid, _ := strconv.Atoi(filepath.Base(d))
				return pid, true
			}
		}
	}
	return 0, false
}

// count is how often sub occurs in the file at path (0 when it is missing).
func count(path, sub string) int {
	b, _ := os.ReadFile(path)
	return bytes.Count(b, []byte(sub))
}

// TestAgentKilledJobRunsOn: kill -9 of an agent while its job runs does not
// fail the job. The restarted agent adopts the running step; the job's
// process runs on and the job completes with exit 0 (not "step lost"), in
// its first run.
func TestAgentKilledJobRunsOn(t *testing.T) {
	t.Parallel()
	s := startStackWith(t, processes, func(o *stack.Options) {
		// Long enough that the agent is back before health would call the node dead.
		o.HeartbeatTimeout = 60 * time.Second
	})
	gw := dialGateway(t, s)
	cl := createCluster(t, gw, "akill", &loomv1.NodePool{Id: "gpu", MachineType: "a2-highgpu-1g",
		NodeCount: 1, AcceleratorType: "nvidia-tesla-a100", AcceleratorCount: 1})
	shared := cl.GetStatus().GetSharedDir()
	jobs := loomv1.NewJobServiceClient(gw)
	// The job runs until the test lets it end (a file appears), so that it is
	// surely running across the agent's death and restart.
	script := `echo $$ > pid-$SLURM_JOB_ID
while [ ! -e go-$SLURM_JOB_ID ]; do sleep 0.1; done
echo finished`
	job, err := jobs.SubmitJob(waitCtx(t, 10*time.Second), &loomv1.SubmitJobRequest{Parent: "projects/default",
		Job: &loomv1.Job{Cluster: cl.Name, Script: script, NodeCount: 1, GpusPerNode: 1, DisplayName: "akill"}})
	if err != nil {
		t.Fatal(err)
	}
	pidFile := filepath.Join(shared, "pid-"+job.JobId)
	var jobPID int
	testkit.WaitFor(t, 60*time.Second, "the job's process running", func() (bool, error) {
		b, err := os.ReadFile(pidFile)
		if err != nil {
			return false, nil
		}
		jobPID, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil, nil
	})
	j, err := jobs.GetJob(waitCtx(t, 5*time.Second), &loomv1.GetJobRequest{Name: job.Name})
	if err != nil || len(j.Nodes) != 1 {
		t.Fatalf("job %v (%v), want it on one node", j, err)
	}
	host := j.Nodes[0]
	a, ok := agentOf(t, s, "akill", host)
	if !ok {
		t.Fatalf("no agent runs node %s", host)
	}
	agentLog := filepath.Join(a.WorkDir, "agent.log")
	registered := count(agentLog, "agent registered")
	sendSignal(t, a.PID, syscall.SIGKILL)

	// The provisioner starts the agent again; it registers, adopting the step.
	testkit.WaitFor(t, 60*time.Second, "the restarted agent registered, the step adopted", func() (bool, error) {
		return count(agentLog, "agent registered") > registered && count(agentLog, "step adopted") > 0, nil
	})
	if b, ok := agentOf(t, s, "akill", host); !ok || b.PID == a.PID {
		t.Fatalf("agent of %s after kill -9 of pid %d: %+v (running: %v)", host, a.PID, b, ok)
	}
	if err := syscall.Kill(jobPID, 0); err != nil {
		t.Fatalf("the job's process %d is gone after the agent restarted: %v", jobPID, err)
	}
	if err := os.WriteFile(filepath.Join(shared, "go-"+job.JobId), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	end := waitJob(t, jobs, job.Name, 60*time.Second)
	if end.State != loomv1.JobState_COMPLETED || end.ExitCode != 0 {
		t.Fatalf("job ended %v exit %d (%s), want COMPLETED exit 0", end.State, end.ExitCode, end.StateReason)
	}
	if end.RestartCount != 0 || len(end.Runs) > 1 {
		t.Errorf("job restarted %d times, runs %v: the agent's crash cost it its run", end.RestartCount, end.Runs)
	}
	out, err := os.ReadFile(end.OutputPath)
	if err != nil || !strings.Contains(string(out), "finished") {
		t.Errorf("job output %q (%v), want the process's own last line", out, err)
	}
}

// interval is one run of a job as it logged itself.
type interval struct {
	start, end float64
	node       string
}

// runIntervals reads the "start T NODE" / "end T NODE" lines runs append to
// path, pairing each end with its node's open start.
func runIntervals(t *testing.T, path string) []interval {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []interval
	open := map[string]int{}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(l)
		if len(f) != 3 {
			t.Fatalf("bad line %q in %s", l, path)
		}
		ts, err := strconv.ParseFloat(f[1], 64)
		if err != nil {
			t.Fatalf("bad time in %q: %v", l, err)
		}
		switch f[0] {
		case "start":
			open[f[2]] = len(out)
			out = append(out, interval{start: ts, end: -1, node: f[2]})
		case "end":
			i, ok := open[f[2]]
			if !ok {
				t.Fatalf("end without start in %s:\n%s", path, b)
			}
			out[i].end = ts
			delete(open, f[2])
		}
	}
	return out
}

// TestAgentPausedPastTimeoutRunsNeverOverlap: an agent paused (SIGSTOP) past
// the heartbeat timeout is declared dead and its job requeued. The two runs
// never overlap: the next one starts only once the old one has ended, which
// the resumed agent does (it stops its old run before anything else).
func TestAgentPausedPastTimeoutRunsNeverOverlap(t *testing.T) {
	t.Parallel()
	const timeout = 4 * time.Second
	s := startStackWith(t, processes, func(o *stack.Options) {
		o.HeartbeatTimeout = timeout
		// Silence is all this test is about: no repair, which would end the
		// paused agent (and its steps) by itself.
		o.HealthArgs = append(o.HealthArgs, "-remediation=off")
	})
	gw := dialGateway(t, s)
	// Three nodes: one silent node of three is a failed node, not health's
	// own trouble (mass silence).
	cl := createCluster(t, gw, "apause", &loomv1.NodePool{Id: "gpu", MachineType: "a2-highgpu-1g",
		NodeCount: 3, AcceleratorType: "nvidia-tesla-a100", AcceleratorCount: 1})
	shared := cl.GetStatus().GetSharedDir()
	jobs := loomv1.NewJobServiceClient(gw)
	// Each run logs its start and its end (also when it is stopped); the
	// first runs until stopped, a later one ends by itself.
	script := `log() { echo "$1 $(date +%s.%N) $SLURMD_NODENAME" >> runs-$SLURM_JOB_ID; }
log start
trap 'log end; exit 143' TERM INT HUP
if [ -e first-$SLURM_JOB_ID ]; then sleep 1; log end; exit 0; fi
touch first-$SLURM_JOB_ID
sleep 600 & wait $!`
	job, err := jobs.SubmitJob(waitCtx(t, 10*time.Second), &loomv1.SubmitJobRequest{Parent: "projects/default",
		Job: &loomv1.Job{Cluster: cl.Name, Script: script, NodeCount: 1, GpusPerNode: 1, DisplayName: "apause"}})
	if err != nil {
		t.Fatal(err)
	}
	runs := filepath.Join(shared, "runs-"+job.JobId)
	testkit.WaitFor(t, 60*time.Second, "the first run started", func() (bool, error) {
		return count(runs, "start") > 0, nil
	})
	j, err := jobs.GetJob(waitCtx(t, 5*time.Second), &loomv1.GetJobRequest{Name: job.Name})
	if err != nil || len(j.Nodes) != 1 {
		t.Fatalf("job %v (%v), want it on one node", j, err)
	}
	host := j.Nodes[0]
	a, ok := agentOf(t, s, "apause", host)
	if !ok {
		t.Fatalf("no agent runs node %s", host)
	}
	sendSignal(t, a.PID, syscall.SIGSTOP)
	paused := true
	t.Cleanup(func() {
		if paused {
			_ = syscall.Kill(a.PID, syscall.SIGCONT)
		}
	})
	// Declared dead: the first run ends NODE_FAIL and the job is requeued.
	testkit.WaitFor(t, 60*time.Second, "the run on the paused node ended NODE_FAIL", func() (bool, error) {
		j, err := jobs.GetJob(waitCtx(t, 5*time.Second), &loomv1.GetJobRequest{Name: job.Name})
		if err != nil {
			return false, nil
		}
		return j.RestartCount >= 1 || (len(j.Runs) > 0 && j.Runs[0].State == loomv1.JobState_NODE_FAIL), nil
	})
	// The old run still goes on, on the paused node: the next run must not start beside it.
	if count(runs, "start") != 1 || count(runs, "end") != 0 {
		b, _ := os.ReadFile(runs)
		t.Fatalf("a second run started while the first went on, on a paused node:\n%s", b)
	}
	resumed := float64(time.Now().UnixNano()) / 1e9
	sendSignal(t, a.PID, syscall.SIGCONT)
	paused = false

	end := waitJob(t, jobs, job.Name, 90*time.Second)
	if end.State != loomv1.JobState_COMPLETED {
		t.Fatalf("job ended %v (%s), want COMPLETED", end.State, end.StateReason)
	}
	iv := runIntervals(t, runs)
	if len(iv) != 2 {
		b, _ := os.ReadFile(runs)
		t.Fatalf("%d runs logged, want 2:\n%s", len(iv), b)
	}
	sort.Slice(iv, func(i, k int) bool { return iv[i].start < iv[k].start })
	b, _ := os.ReadFile(runs)
	if iv[0].node != host {
		t.Errorf("first run on %s, want %s", iv[0].node, host)
	}
	// A run that never logged its end ran on past everything (killed outright).
	if iv[0].end < 0 || iv[1].start < iv[0].end {
		t.Errorf("runs overlap: the first ran from %.3f on %s, ended %.3f (-1: never), the second started %.3f on %s:\n%s",
			iv[0].start, iv[0].node, iv[0].end, iv[1].start, iv[1].node, b)
	}
	if iv[1].end < 0 {
		t.Errorf("the second run never logged its end:\n%s", b)
	}
	// The resumed agent stopped its old run first thing: within seconds of SIGCONT, not by a timeout.
	if iv[0].end >= 0 && (iv[0].end < resumed || iv[0].end > resumed+15) {
		t.Errorf("the old run ended at %.3f, want soon after the agent resumed at %.3f:\n%s", iv[0].end, resumed, b)
	}
}

// TestHealthPausedDeclaresNoNodeDead: the health service paused (SIGSTOP)
// for longer than the heartbeat timeout and resumed finds every node silent
// at once, which is its own stall, not the nodes': no node is declared dead
// and no job is requeued.
func TestHealthPausedDeclaresNoNodeDead(t *testing.T) {
	t.Parallel()
	const timeout = 3 * time.Second
	s := startStackWith(t, processes, func(o *stack.Options) { o.HeartbeatTimeout = timeout })
	gw := dialGateway(t, s)
	cl := createCluster(t, gw, "hpause", &loomv1.NodePool{Id: "gpu", MachineType: "a2-highgpu-1g",
		NodeCount: 2, AcceleratorType: "nvidia-tesla-a100", AcceleratorCount: 1})
	shared := cl.GetStatus().GetSharedDir()
	jobs := loomv1.NewJobServiceClient(gw)
	// A job on both nodes: a node declared dead would end its run and requeue it.
	job, err := jobs.SubmitJob(waitCtx(t, 10*time.Second), &loomv1.SubmitJobRequest{Parent: "projects/default",
		Job: &loomv1.Job{Cluster: cl.Name, NodeCount: 2, GpusPerNode: 1, DisplayName: "hpause",
			Command: []string{"/bin/sh", "-c", `touch up-$SLURM_JOB_ID-$SLURM_PROCID; while [ ! -e go-$SLURM_JOB_ID ]; do sleep 0.1; done`}}})
	if err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 60*time.Second, "the job running on both nodes", func() (bool, error) {
		m, _ := filepath.Glob(filepath.Join(shared, "up-"+job.JobId+"-*"))
		return len(m) == 2, nil
	})
	health := loomv1.NewHealthServiceClient(gw)
	pid := servicePID(t, s, "health", s.Addrs.Health)
	stopped := time.Now()
	sendSignal(t, pid, syscall.SIGSTOP)
	paused := true
	t.Cleanup(func() {
		if paused {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	})
	// The nodes heartbeat on; health hears none of it for 3 timeouts.
	testkit.WaitFor(t, 30*time.Second, "three heartbeat timeouts pass", func() (bool, error) {
		return time.Since(stopped) > 3*timeout, nil
	})
	sendSignal(t, pid, syscall.SIGCONT)
	paused = false
	resumed := time.Now()

	// Health has caught up once it shows heartbeats from after it resumed.
	testkit.WaitFor(t, 60*time.Second, "health caught up with both nodes' heartbeats", func() (bool, error) {
		resp, err := health.ListNodeHealth(waitCtx(t, 5*time.Second), &loomv1.ListNodeHealthRequest{Cluster: cl.Name})
		if err != nil || len(resp.Nodes) != 2 {
			return false, nil
		}
		for _, n := range resp.Nodes {
			if !n.LastHeartbeat.AsTime().After(resumed) {
				return false, nil
			}
		}
		return true, nil
	})
	resp, err := health.ListNodeHealth(waitCtx(t, 5*time.Second), &loomv1.ListNodeHealthRequest{Cluster: cl.Name})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range resp.Nodes {
		if n.State != loomv1.RemediationState_NODE_HEALTHY || n.Failures != 0 {
			t.Errorf("node %s is %v with %d failures (%s) after health's own stall", n.Hostname, n.State, n.Failures, n.Reason)
		}
	}
	if err := os.WriteFile(filepath.Join(shared, "go-"+job.JobId), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	end := waitJob(t, jobs, job.Name, 60*time.Second)
	if end.State != loomv1.JobState_COMPLETED || end.RestartCount != 0 || len(end.Runs) > 1 {
		t.Errorf("job ended %v after %d restarts, runs %v (%s): want COMPLETED in its first run",
			end.State, end.RestartCount, end.Runs, end.StateReason)
	}
}
