package slurm

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/testkit/need"
)

// TestStartRunStop starts a real 2-node Slurm with fake GPUs, runs a job to
// COMPLETED (seen in the jobcomp file, which `sacct -c` reads), and stops
// every daemon.
func TestStartRunStop(t *testing.T) {
	t.Parallel()
	if err := Installed(); err != nil {
		need.Missing(t, err.Error())
	}
	if v, err := Version(); err != nil || !strings.HasPrefix(v, "slurm") {
		t.Fatalf("Version: %q, %v", v, err)
	}
	ctx := testkit.Context(t, 2*time.Minute)
	dir := t.TempDir()
	c, err := Start(ctx, Options{Dir: dir, Nodes: 2, CPUsPerNode: 4, GPUsPerNode: 2})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = c.Stop()
		}
	})
	if got := strings.Join(c.Nodes, ","); got != "node1,node2" {
		t.Fatalf("nodes %s, want node1,node2", got)
	}
	out, err := c.Sinfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out, "PARTITION AVAIL  TIMELIMIT  NODES  STATE NODELIST") ||
		!strings.Contains(out, "debug*") || !strings.Contains(out, "idle node[1-2]") {
		t.Fatalf("sinfo:\n%s", out)
	}

	// A two-node job with a GPU per node: both nodes run it and see a GPU.
	id, err := c.Sbatch(ctx, "--nodes=2", "--gpus-per-node=1", "--job-name=probe",
		"--wrap", `srun sh -c 'echo "$SLURMD_NODENAME gpu=$CUDA_VISIBLE_DEVICES"'`)
	if err != nil {
		t.Fatal(err)
	}
	var rec JobRecord
	testkit.WaitFor(t, 60*time.Second, "job "+id+" in the jobcomp file", func() (bool, error) {
		recs, err := c.Completed()
		for _, r := range recs {
			if r.JobID == id {
				rec = r
				return true, nil
			}
		}
		return false, err
	})
	if rec.State != "COMPLETED" || rec.ExitCode != "0:0" || rec.Name != "probe" || rec.NodeList != "node[1-2]" {
		t.Fatalf("job record %+v, want probe COMPLETED 0:0 on node[1-2]", rec)
	}
	sacct, err := c.Output(ctx, "sacct", "-c", "-n", "-j", id, "-o", "JobID,State")
	if err != nil {
		t.Fatal(err)
	}
	if f := strings.Fields(sacct); len(f) != 2 || f[0] != id || f[1] != "COMPLETED" {
		t.Fatalf("sacct -c: %q, want %s COMPLETED", sacct, id)
	}
	outFile, err := os.ReadFile(filepath.Join(c.Work, "slurm-"+id+".out"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"node1 gpu=0", "node2 gpu=0"} {
		if !strings.Contains(string(outFile), want) {
			t.Errorf("job output lacks %q:\n%s", want, outFile)
		}
	}
	// The job leaves the queue (it may show CG, completing, for a moment
	// after its jobcomp line).
	header := "JOBID PARTITION     NAME     USER ST       TIME  NODES NODELIST(REASON)"
	testkit.WaitFor(t, 30*time.Second, "squeue to show only its header", func() (bool, error) {
		q, err := c.Squeue(ctx)
		return strings.TrimSpace(q) == header, err
	})

	// A second Start on the same directory is refused while this one runs.
	if _, err := Start(ctx, Options{Dir: dir}); err == nil || !strings.Contains(err.Error(), "still run") {
		t.Errorf("second Start on a live directory: %v, want a refusal", err)
	}

	pids := map[string]int{}
	for _, d := range c.procs {
		pids[d.name+" "+d.pidfile] = d.cmd.Process.Pid
	}
	if len(pids) != 4 { // munged, slurmctld, 2 slurmd
		t.Fatalf("%d daemons started, want 4: %v", len(pids), pids)
	}
	stopped = true
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	for name, pid := range pids {
		if isProcess(pid, strings.Fields(name)[0]) {
			t.Errorf("%s (pid %d) still runs after Stop", name, pid)
		}
	}
	if live := c.livePids(); len(live) > 0 {
		t.Errorf("live pidfiles after Stop: %v", live)
	}
}

// TestRestartController starts a Slurm with a second partition and restarts
// slurmctld under a held job: the job is still queued afterwards (its state was saved and recovered, not started
// clean) and the next job's id follows it.
func TestRestartController(t *testing.T) {
	t.Parallel()
	if err := Installed(); err != nil {
		need.Missing(t, err.Error())
	}
	ctx := testkit.Context(t, 2*time.Minute)
	// A second partition lists each node twice in sinfo -N: Start still
	// sees every node idle once.
	c, err := Start(ctx, Options{Dir: t.TempDir(), Nodes: 1, CPUsPerNode: 2,
		ExtraConfig: []string{"PartitionName=parked Nodes=ALL MaxTime=INFINITE State=DOWN"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	held, err := c.Sbatch(ctx, "--hold", "--wrap", "true")
	if err != nil {
		t.Fatal(err)
	}
	stop, started, err := c.RestartController(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if stop <= 0 || started.IsZero() {
		t.Fatalf("RestartController: stop %v, started %v", stop, started)
	}
	testkit.WaitFor(t, 60*time.Second, "the held job listed by the restarted slurmctld", func() (bool, error) {
		out, err := c.Squeue(ctx, "-h", "-t", "PD", "-o", "%i")
		return err == nil && strings.TrimSpace(out) == held, nil
	})
	next, err := c.Sbatch(ctx, "--hold", "--wrap", "true")
	if err != nil {
		t.Fatal(err)
	}
	h, _ := strconv.Atoi(held)
	if n, _ := strconv.Atoi(next); n != h+1 {
		t.Fatalf("job after the restart got id %s, want %d (the held job was %s)", next, h+1, held)
	}
	if _, _, err := c.RestartController(ctx); err != nil {
		t.Fatalf("second restart: %v", err)
	}
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	if live := c.livePids(); len(live) > 0 {
		t.Fatalf("daemons still running after Stop: %v", live)
	}
}

// TestScriptStopCancelsEveryUsersJobs: scripts/slurm-local.sh stop cancels
// the jobs of every user, not only its own (root's): a job left running
// outlives its slurmd, and slurmstepd and the job's processes stay behind
// after stop (how the conformance suite's Slurm, whose jobs run as the
// tests' users, left them).
func TestScriptStopCancelsEveryUsersJobs(t *testing.T) {
	t.Parallel()
	if err := Installed(); err != nil {
		need.Missing(t, err.Error())
	}
	script, err := filepath.Abs("../../scripts/slurm-local.sh")
	if err != nil {
		t.Fatal(err)
	}
	ports, err := pickPorts(0, 0, 1, false, 0)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	// munged wants every directory above its socket searchable.
	if err := os.Chmod(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "NODES=1", "CPUS=2", "GPUS=0",
		"CTL_PORT="+strconv.Itoa(ports[0]), "NODE_PORT="+strconv.Itoa(ports[1]))
	sh := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("bash", append([]string{script}, args...)...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("slurm-local.sh %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	sh("start", dir)
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			sh("stop", dir)
		}
	})
	const user = "uslurmstop"
	acct := testkit.OSUserNamed(t, user)
	work := filepath.Join(dir, "work")
	if err := os.Chmod(work, 0o777); err != nil {
		t.Fatal(err)
	}
	slurm := func(name string, args ...string) string {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir, cmd.Env = work, append(os.Environ(), "SLURM_CONF="+filepath.Join(dir, "slurm.conf"))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	slurm("sbatch", "--uid="+user, "--gid="+user, "-o", "/dev/null", "--wrap", "exec sleep 300")
	testkit.WaitFor(t, 60*time.Second, "the user's job running", func() (bool, error) {
		return len(processesOf(t, acct.UID)) > 0, nil
	})
	sh("stop", dir)
	stopped = true
	left := processesOf(t, acct.UID)
	// The job's processes once stop has returned: a few seconds' grace
	// for slurmstepd's kill to land, no more.
	deadline := time.Now().Add(10 * time.Second)
	for len(left) > 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		left = processesOf(t, acct.UID)
	}
	if len(left) > 0 {
		// Ours (this test's user's job): end them, then fail.
		for _, pid := range left {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		t.Fatalf("processes %v of %s's job outlived slurm-local.sh stop", left, user)
	}
}

// TestStopCancelsEveryUsersJobs: Cluster.Stop, like the script's stop,
// cancels every user's jobs (cancelAll), not only its own: the Slurm
// backend's tests run theirs as test users, and a job left running
// outlives its slurmd. Held jobs, so that none has to be scheduled.
func TestStopCancelsEveryUsersJobs(t *testing.T) {
	t.Parallel()
	if err := Installed(); err != nil {
		need.Missing(t, err.Error())
	}
	ctx := testkit.Context(t, 2*time.Minute)
	c, err := Start(ctx, Options{Dir: t.TempDir(), Nodes: 1, CPUsPerNode: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	const user = "uslurmgostop"
	testkit.OSUserNamed(t, user)
	for _, as := range [][]string{nil, {"--uid=" + user, "--gid=" + user}} {
		if _, err := c.Sbatch(ctx, append(as, "--hold", "-D", "/", "-o", "/dev/null", "--wrap", "true")...); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := c.Squeue(ctx, "-h", "-o", "%u"); err != nil || len(strings.Fields(out)) != 2 {
		t.Fatalf("squeue before: %q, %v", out, err)
	}
	c.cancelAll()
	if out, err := c.Squeue(ctx, "-h", "-o", "%i %u %T"); err != nil || strings.TrimSpace(out) != "" {
		t.Fatalf("jobs left after cancelAll: %q, %v", out, err)
	}
}

// processesOf lists the processes whose real uid is uid (/proc).
func processesOf(t *testing.T, uid uint32) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		if err != nil {
			continue // ended meanwhile
		}
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) >= 2 && f[0] == "Uid:" && f[1] == strconv.FormatUint(uint64(uid), 10) {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}
