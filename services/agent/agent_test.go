package agent

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"
	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/auth"
	"github.com/loom-ml/loom/libs/config"
	"github.com/loom-ml/loom/libs/embedded"
	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/proc"
	"github.com/loom-ml/loom/libs/store"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	"github.com/loom-ml/loom/services/agent/internal/adapters"
	"github.com/loom-ml/loom/services/agent/internal/app"
	"github.com/loom-ml/loom/services/agent/internal/domain"
)

const (
	cluster = "projects/p/clusters/c1"
	node    = cluster + "/nodes/gpu-0001"
	wait    = 30 * time.Second
)

// env is one test's infrastructure and the agent's directories.
type env struct {
	broker, redisAddr string
	rdb               *redis.Client
	work, shared      string
	jobNice           int    // Config.JobNice
	slurmBin          string // Config.SlurmBin
	gateway           string // Config.Gateway
	noRoot            bool   // !Config.AllowRootJobs
	progressInterval  time.Duration
	acctInterval      time.Duration      // Config.AcctInterval
	containerRuntime  string             // Config.ContainerRuntime
	metrics           app.MetricsOptions // Config.Metrics
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{broker: testkit.Broker(t), work: t.TempDir(), shared: t.TempDir()}
	e.redisAddr, e.rdb = testkit.Redis(t)
	giveIdentity(t, e.work, node)
	return e
}

// giveIdentity writes a node identity for node, signed with the test's
// services' key, into work dir, as the provisioner does for its local
// agents: the agent signs its events with it and trusts commands the
// test's services' key signed (testkit.Publish).
func giveIdentity(t testing.TB, work, node string) {
	t.Helper()
	id, err := auth.IssueNodeIdentity(testkit.ServiceKey(), node, cluster, "gpu", "", time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := auth.WriteNodeIdentity(filepath.Join(work, IdentityFile), id); err != nil {
		t.Fatal(err)
	}
}

func (e *env) config() Config {
	return Config{
		Common: config.Common{Brokers: []string{e.broker}, RedisAddr: e.redisAddr, GRPCAddr: "127.0.0.1:0",
			HTTPAddr: "127.0.0.1:0", LogLevel: "warn"},
		Node: node, WorkDir: e.work, SharedDir: e.shared, GPUs: 8,
		HeartbeatInterval: 100 * time.Millisecond, StepKillGrace: 2 * time.Second, JobNice: e.jobNice,
		SlurmBin: e.slurmBin, Gateway: e.gateway, CheckAddr: "127.0.0.1:0", ProgressInterval: e.progressInterval, AcctInterval: e.acctInterval,
		// These steps name no owner and the tests run as root: they run
		// as the agent's own user, which the node must allow (as `loom up`
		// does). owner_test.go runs jobs as real users, and refuses root.
		AllowRootJobs:    !e.noRoot,
		ContainerRuntime: e.containerRuntime, Metrics: e.metrics,
	}
}

// start runs an agent until the returned stop is called (or the test ends).
func (e *env) start(t *testing.T) (stop func() error) {
	t.Helper()
	cfg := e.config()
	return testkit.Start(t, "agent", func(ctx context.Context) error { return Run(ctx, cfg) }).Stop
}

func startStep(job string, script string, stepEnv map[string]string, out string) *eventsv1.StartStep {
	return &eventsv1.StartStep{
		Job: "projects/p/jobs/" + job, JobId: job, Attempt: 1, Node: node, NodeIndex: 0,
		NodeHostnames: []string{"gpu-0001"}, Script: script, Env: stepEnv, OutputPath: out, JobName: "test",
	}
}

// command is a step command keyed by its node, as the scheduler sends it.
func command(p interface {
	proto.Message
	GetNode() string
}) envelope.Event {
	return envelope.New(topics.StepCommands, p.GetNode(), "loom/test", p)
}

// publish writes evs as their senders do: each command signed by the one
// service that sends it (envelope.Senders: the scheduler, health),
// anything else as the test's service, and a StartStep or LaunchTasks sealed
// for its node as the scheduler seals it (one sealed already is left as it
// is). publishAs writes them as they are, signed as service.
func publish(t *testing.T, broker string, evs ...envelope.Event) {
	t.Helper()
	msgs := make([]kafka.Message, 0, len(evs))
	for _, ev := range evs {
		if envelope.IsSealable(ev.Payload) && !envelope.IsSealed(ev.Payload) {
			sealed, err := envelope.SealCommand(auth.CommandKey(testkit.ServiceSecret(), commandNode(ev), commandRegistration(ev)), ev.Payload)
			if err != nil {
				t.Fatal(err)
			}
			ev.Payload = sealed
		}
		service := "test"
		if s := envelope.Senders[envelope.TypeOf(ev.Payload)]; len(s) > 0 {
			service = strings.TrimPrefix(s[0], "services/")
		}
		msgs = append(msgs, signedAs(t, service, ev))
	}
	testkit.PublishMessages(t, broker, msgs...)
}

func publishAs(t *testing.T, broker, service string, evs ...envelope.Event) {
	t.Helper()
	msgs := make([]kafka.Message, 0, len(evs))
	for _, ev := range evs {
		msgs = append(msgs, signedAs(t, service, ev))
	}
	testkit.PublishMessages(t, broker, msgs...)
}

func signedAs(t *testing.T, service string, ev envelope.Event) kafka.Message {
	t.Helper()
	m, err := envelope.Encode(ev)
	if err != nil {
		t.Fatal(err)
	}
	testkit.SignerAs(service).Sign(&m)
	return m
}

func waitStep(t *testing.T, broker, job string, state eventsv1.StepState) *eventsv1.StepChanged {
	t.Helper()
	ev := testkit.WaitEvent(t, broker, topics.StepEvents, wait, func(ev envelope.Event) bool {
		sc, ok := ev.Payload.(*eventsv1.StepChanged)
		return ok && sc.Job == "projects/p/jobs/"+job && sc.State == state
	})
	return ev.Payload.(*eventsv1.StepChanged)
}

func stepEvents(t *testing.T, broker, job string) []*eventsv1.StepChanged {
	t.Helper()
	var out []*eventsv1.StepChanged
	for _, ev := range testkit.Delivered(t, broker, topics.StepEvents) {
		if sc, ok := ev.Payload.(*eventsv1.StepChanged); ok && sc.Job == "projects/p/jobs/"+job {
			out = append(out, sc)
		}
	}
	return out
}

func TestRegistersAndHeartbeats(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.start(t)
	reg := testkit.WaitEvent(t, e.broker, topics.NodeTelemetry, wait, func(ev envelope.Event) bool {
		_, ok := ev.Payload.(*eventsv1.AgentRegistered)
		return ok
	}).Payload.(*eventsv1.AgentRegistered)
	if reg.Node != node || reg.Cluster != cluster || reg.Hostname != "gpu-0001" || reg.Gpus != 8 || reg.Pid != int32(os.Getpid()) || reg.BootId == "" {
		t.Fatalf("AgentRegistered = %v", reg)
	}
	// The advertised health-check endpoint answers.
	if c, err := net.DialTimeout("tcp", reg.CheckAddr, wait); err != nil {
		t.Fatalf("check_addr %q: %v", reg.CheckAddr, err)
	} else {
		_ = c.Close()
	}
	hb := testkit.WaitEvent(t, e.broker, topics.NodeTelemetry, wait, func(ev envelope.Event) bool {
		h, ok := ev.Payload.(*eventsv1.Heartbeat)
		return ok && h.BootId == reg.BootId
	})
	if h := hb.Payload.(*eventsv1.Heartbeat); h.Node != node || h.Cluster != cluster || h.Time == nil || hb.Key != node {
		t.Fatalf("Heartbeat = %v (key %q)", h, hb.Key)
	}
}

func TestStepRunsWithEnvAndReportsExit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.start(t)
	out := filepath.Join(e.shared, "logs", "slurm-1.out")
	script := `echo $SLURM_PROCID; echo "HOME=$HOME PWD=$(pwd) FOO=$FOO"; env > "$HOME/env.txt"; exit 3`
	publish(t, e.broker, command(startStep("1", script, map[string]string{"SLURM_PROCID": "0", "FOO": "bar baz"}, out)))

	running := waitStep(t, e.broker, "1", eventsv1.StepState_STEP_RUNNING)
	if running.Pid <= 0 || running.Node != node || running.Cluster != cluster || running.Attempt != 1 {
		t.Fatalf("running = %v", running)
	}
	exited := waitStep(t, e.broker, "1", eventsv1.StepState_STEP_EXITED)
	if exited.ExitCode != 3 || exited.Pid != running.Pid {
		t.Fatalf("exited = %v", exited)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if want := "0\nHOME=" + e.shared + " PWD=" + e.shared + " FOO=bar baz\n"; string(b) != want {
		t.Fatalf("output = %q, want %q", b, want)
	}
	envb, err := os.ReadFile(filepath.Join(e.shared, "env.txt"))
	if err != nil {
		t.Fatal(err)
	}
	// A clean base: nothing of the agent's environment but PATH leaks in.
	// LOOM_GPU_STATE_DIR: the node's simulated GPUs, for its nvidia-smi.
	// CLOUD_ML_HP_METRIC_FILE: where the step reports its metrics;
	// LOOM_TENSORBOARD_LOG_DIR: where it may write TensorBoard event files.
	allowed := []string{"PATH", "HOME", "SLURM_PROCID", "FOO", "LOOM_STEP_ID", "LOOM_PROGRESS_FILE", "LOOM_GPU_STATE_DIR",
		"CLOUD_ML_HP_METRIC_FILE", "LOOM_TENSORBOARD_LOG_DIR", "PWD", "OLDPWD", "SHLVL", "_"}
	for _, line := range strings.Split(strings.TrimSpace(string(envb)), "\n") {
		name, _, _ := strings.Cut(line, "=")
		if !slices.Contains(allowed, name) {
			t.Errorf("step env has %q", line)
		}
	}
	if !strings.Contains(string(envb), "LOOM_GPU_STATE_DIR="+filepath.Join(e.work, GPUStateDir)+"\n") {
		t.Errorf("step env lacks the simulated GPUs' state dir:\n%s", envb)
	}
	if !strings.Contains(string(envb), "LOOM_STEP_ID="+node+"#projects/p/jobs/1#1\n") {
		t.Errorf("step env lacks its step id:\n%s", envb)
	}
}

// A batch script's srun is the node's Loom srun (SlurmBin), whatever PATH
// the job was submitted with: a login session's links are gone once it
// ends, and a real Slurm's srun may be installed here.
func TestSlurmBinLeadsTheJobsPath(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.slurmBin = t.TempDir()
	testkit.WriteExecutable(t, filepath.Join(e.slurmBin, "srun"), []byte("#!/bin/sh\necho \"loom srun $*\"\n"), 0o755)
	e.start(t)
	script := `echo "$PATH"; command -v srun; srun hostname`
	submitted := "/tmp/loom-login-gone:/usr/bin:/bin"
	out1, out2 := filepath.Join(e.shared, "slurm-1.out"), filepath.Join(e.shared, "slurm-2.out")
	publish(t, e.broker, command(startStep("1", script, map[string]string{"PATH": submitted}, out1)),
		command(startStep("2", script, nil, out2)))
	waitStep(t, e.broker, "1", eventsv1.StepState_STEP_EXITED)
	waitStep(t, e.broker, "2", eventsv1.StepState_STEP_EXITED)
	srun := filepath.Join(e.slurmBin, "srun")
	if b, err := os.ReadFile(out1); err != nil || string(b) != e.slurmBin+":"+submitted+"\n"+srun+"\nloom srun hostname\n" {
		t.Fatalf("job 1 (submitted with PATH %s) wrote %q (%v)", submitted, b, err)
	}
	// Without a PATH of its own, the agent's, led by SlurmBin.
	if b, err := os.ReadFile(out2); err != nil || !strings.HasPrefix(string(b), e.slurmBin+":") || !strings.HasSuffix(string(b), srun+"\nloom srun hostname\n") {
		t.Fatalf("job 2 (no PATH) wrote %q (%v)", b, err)
	}
	// srun's tasks get the same PATH.
	outDir := filepath.Join(e.shared, ".loom", "steps", "3.0")
	l := launch("3", 0, 0, 1, outDir, "sh", "-c", `echo "$PATH"`)
	l.Env["PATH"] = e.slurmBin + ":" + submitted // already led by it: not twice
	publish(t, e.broker, command(l))
	waitTasks(t, e.broker, "3", 0, eventsv1.StepState_STEP_EXITED)
	if b, err := os.ReadFile(filepath.Join(outDir, "task-0.out")); err != nil || string(b) != e.slurmBin+":"+submitted+"\n" {
		t.Fatalf("task wrote %q (%v), want PATH %s:%s", b, err, e.slurmBin, submitted)
	}
}

// A Slurm job's processes get what they learn from the node: SLURM_JOB_UID
// and SLURM_JOB_GID, the ids they run as here (the agent's), the gateway
// their srun talks to, and their owner's USER, LOGNAME and HOME
// (<shared>/<user>, as a login session has it, made when missing: an
// --export=NONE job's env has none), unless their env has them.
func TestSlurmJobNodeVars(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.gateway = "10.0.0.5:7070"
	e.start(t)
	script := `echo "$SLURM_JOB_UID $SLURM_JOB_GID $LOOM_GATEWAY $USER $LOGNAME $HOME"; test -d "$HOME"`
	out, own := filepath.Join(e.shared, "slurm-1.out"), filepath.Join(e.shared, "slurm-3.out")
	publish(t, e.broker, command(startStep("1", script, map[string]string{"SLURM_JOB_ID": "1", "SLURM_JOB_USER": "ada"}, out)),
		command(startStep("3", script, map[string]string{"SLURM_JOB_ID": "3", "SLURM_JOB_USER": "ada", "LOOM_GATEWAY": "mine:7070",
			"USER": "bob", "LOGNAME": "bob", "HOME": e.shared}, own)),
		// An owner whose name cannot name a directory: the shared dir.
		command(startStep("4", script, map[string]string{"SLURM_JOB_ID": "4", "SLURM_JOB_USER": "../x"}, filepath.Join(e.shared, "slurm-4.out"))))
	for _, job := range []string{"1", "3", "4"} {
		if ev := waitStep(t, e.broker, job, eventsv1.StepState_STEP_EXITED); ev.ExitCode != 0 {
			t.Fatalf("step %s exited %d: its HOME is not a directory", job, ev.ExitCode)
		}
	}
	ids := fmt.Sprintf("%d %d", os.Getuid(), os.Getgid())
	want := ids + " 10.0.0.5:7070 ada ada " + filepath.Join(e.shared, "ada") + "\n"
	if b, err := os.ReadFile(out); err != nil || string(b) != want {
		t.Fatalf("step wrote %q (%v), want %q", b, err, want)
	}
	if b, err := os.ReadFile(own); err != nil || string(b) != ids+" mine:7070 bob bob "+e.shared+"\n" {
		t.Fatalf("step with its own LOOM_GATEWAY, USER and HOME wrote %q (%v)", b, err)
	}
	if b, err := os.ReadFile(filepath.Join(e.shared, "slurm-4.out")); err != nil || string(b) != ids+" 10.0.0.5:7070 ../x ../x "+e.shared+"\n" {
		t.Fatalf("step of an owner whose name is no login name wrote %q (%v), want HOME the shared dir", b, err)
	}
	outDir := filepath.Join(e.shared, ".loom", "steps", "2.0")
	l := launch("2", 0, 0, 1, outDir, "sh", "-c", script)
	l.Env["SLURM_JOB_ID"], l.Env["SLURM_JOB_USER"] = "2", "ada"
	publish(t, e.broker, command(l))
	if ev := waitTasks(t, e.broker, "2", 0, eventsv1.StepState_STEP_EXITED); !reflect.DeepEqual(ev.ExitCodes, []int32{0}) {
		t.Fatalf("task exited %v: its HOME is not a directory", ev.ExitCodes)
	}
	if b, err := os.ReadFile(filepath.Join(outDir, "task-0.out")); err != nil || string(b) != want {
		t.Fatalf("task wrote %q (%v), want %q", b, err, want)
	}
}

// TestFailedToStart: a step that cannot be started (it has nothing to
// run) is FAILED_TO_START with why; a program that does not exist is no
// such failure but the step's exit 2, as under Slurm.
func TestFailedToStart(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.start(t)
	publish(t, e.broker, command(startStep("1", "", nil, filepath.Join(e.shared, "slurm-1.out"))))
	f := waitStep(t, e.broker, "1", eventsv1.StepState_STEP_FAILED_TO_START)
	if !strings.Contains(f.Message, "neither a script nor a command") {
		t.Fatalf("failed = %v", f)
	}
	out := filepath.Join(e.shared, "slurm-2.out")
	st := startStep("2", "", nil, out)
	st.Command = []string{filepath.Join(e.shared, "no-such-binary")}
	publish(t, e.broker, command(st))
	ex := waitStep(t, e.broker, "2", eventsv1.StepState_STEP_EXITED)
	want := "slurmstepd-gpu-0001: error: execve(): " + filepath.Join(e.shared, "no-such-binary") + ": No such file or directory\n"
	if got := readFile(t, out); got != want || ex.ExitCode != 2 {
		t.Fatalf("a missing program: output %q, exit %d; want %q, exit 2", got, ex.ExitCode, want)
	}
}

func TestStopStepKillsProcessGroup(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.start(t)
	childFile := filepath.Join(e.shared, "child.pid")
	publish(t, e.broker, command(startStep("1", `sleep 60 & echo $! > "$HOME/child.pid"; sleep 60`, nil, filepath.Join(e.shared, "slurm-1.out"))))
	running := waitStep(t, e.broker, "1", eventsv1.StepState_STEP_RUNNING)
	var child int
	testkit.WaitFor(t, wait, "the step's background child", func() (bool, error) {
		b, err := os.ReadFile(childFile)
		if err != nil || !strings.HasSuffix(string(b), "\n") {
			return false, nil
		}
		child, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil, err
	})
	if !proc.Alive(int(running.Pid), 0) || !proc.Alive(child, 0) {
		t.Fatal("step processes not running before the stop")
	}

	publish(t, e.broker, command(&eventsv1.StopStep{Job: "projects/p/jobs/1", Attempt: 1, Node: node, Reason: "job cancelled"}))
	killed := waitStep(t, e.broker, "1", eventsv1.StepState_STEP_KILLED)
	if !strings.Contains(killed.Message, "job cancelled") {
		t.Fatalf("killed = %v", killed)
	}
	testkit.WaitFor(t, wait, "the step's processes to be gone", func() (bool, error) {
		return !proc.Alive(int(running.Pid), 0) && !proc.Alive(child, 0), nil
	})
	if evs := stepEvents(t, e.broker, "1"); len(evs) != 2 {
		t.Fatalf("step events = %v, want RUNNING and KILLED only", evs)
	}
}

// TestCancelledStepLeavesNoDetachedProcess: a job that detaches processes
// from its step (setsid, then a fork: a daemon's double fork) that ignore
// SIGTERM, and goes on detaching more while it is stopped, ignoring
// SIGTERM too, is cancelled: once the step is KILLED (SIGTERM, SIGKILL
// after the grace) no process it started is left, the detached ones
// included.
func TestCancelledStepLeavesNoDetachedProcess(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.start(t)
	dir := filepath.Join(e.shared, "detach-8")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	script := `cd "$HOME/detach-8" && trap '' TERM
setsid sh -c '(trap "" TERM; exec sleep 300) &'
echo ready > ready
while :; do setsid sh -c '(trap "" TERM; exec sleep 300) &'; sleep 0.01; done`
	publish(t, e.broker, command(startStep("8", script, nil, filepath.Join(e.shared, "slurm-8.out"))))
	waitStep(t, e.broker, "8", eventsv1.StepState_STEP_RUNNING)
	// Every process of the step works in dir.
	inDir := func() []int { return testkit.ProcessesIn(dir) }
	t.Cleanup(func() { // not left running, whatever the outcome
		for _, pid := range inDir() {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	testkit.WaitFor(t, wait, "the job detached processes", func() (bool, error) {
		_, err := os.Stat(filepath.Join(dir, "ready"))
		return err == nil && len(inDir()) > 3, nil
	})
	publish(t, e.broker, command(&eventsv1.StopStep{Job: "projects/p/jobs/8", Attempt: 1, Node: node, Reason: "job cancelled"}))
	waitStep(t, e.broker, "8", eventsv1.StepState_STEP_KILLED)
	testkit.WaitFor(t, wait, "no process of the cancelled step left", func() (bool, error) {
		return len(inDir()) == 0, nil
	})
}

func TestRedeliveredStartStepStartsOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.start(t)
	runs := filepath.Join(e.shared, "runs.txt")
	first := command(startStep("1", `echo run >> "$HOME/runs.txt"`, nil, filepath.Join(e.shared, "slurm-1.out")))
	again := command(startStep("1", `echo run >> "$HOME/runs.txt"`, nil, filepath.Join(e.shared, "slurm-1.out")))
	other := startStep("3", `echo other >> "$HOME/runs.txt"`, nil, filepath.Join(e.shared, "slurm-3.out"))
	other.Node = cluster + "/nodes/gpu-0002"
	publish(t, e.broker, first)
	publish(t, e.broker, first) // the same event id again
	publish(t, e.broker, again) // another event id, same (job, attempt)
	// The other node's step on this node's partition (so that it is handled
	// before the marker), and a stop for a step never started.
	publish(t, e.broker, envelope.New(topics.StepCommands, node, "loom/test", other))
	publish(t, e.broker, command(&eventsv1.StopStep{Job: "projects/p/jobs/4", Attempt: 1, Node: node}))
	publish(t, e.broker, command(startStep("2", `echo marker`, nil, filepath.Join(e.shared, "slurm-2.out"))))

	waitStep(t, e.broker, "2", eventsv1.StepState_STEP_EXITED)
	waitStep(t, e.broker, "1", eventsv1.StepState_STEP_EXITED)
	if b, err := os.ReadFile(runs); err != nil || string(b) != "run\n" {
		t.Fatalf("runs.txt = %q, %v; want exactly one run", b, err)
	}
	var states []string
	for _, sc := range stepEvents(t, e.broker, "1") {
		states = append(states, sc.State.String())
	}
	if strings.Join(states, ",") != "STEP_RUNNING,STEP_EXITED" {
		t.Fatalf("job 1 events = %v", states)
	}
	if evs := stepEvents(t, e.broker, "4"); len(evs) != 1 || evs[0].State != eventsv1.StepState_STEP_KILLED {
		t.Fatalf("stop of a never-started step: events %v, want one STEP_KILLED", evs)
	}
	if evs := stepEvents(t, e.broker, "3"); len(evs) != 0 {
		t.Fatalf("another node's step was acted on: %v", evs)
	}
}

// TestShutdownWithoutRedisKillsSteps: an agent stopped after its Redis
// went away (a stopped `loom up` took it along; `loom down` ends the agent
// with a 15 s grace) still kills its steps within that grace, though the
// records it keeps writing (the step's progress) and its KILLED record
// cannot be written: they must not hold the step past the stop.
func TestShutdownWithoutRedisKillsSteps(t *testing.T) {
	t.Parallel()
	e := &env{broker: testkit.Broker(t), work: t.TempDir(), shared: t.TempDir(), progressInterval: 100 * time.Millisecond}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := embedded.StartRedis(ctx, "", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	e.redisAddr = r.Addr
	giveIdentity(t, e.work, node)
	stop := e.start(t)
	publish(t, e.broker, command(startStep("5", `sleep 60`, nil, filepath.Join(e.shared, "slurm-5.out"))))
	running := waitStep(t, e.broker, "5", eventsv1.StepState_STEP_RUNNING)
	pid := int(running.GetPid())
	t.Cleanup(func() { _ = syscall.Kill(-pid, syscall.SIGKILL) })
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = stop() }()
	testkit.WaitFor(t, 15*time.Second, "the step killed within loom down's grace, with no Redis", func() (bool, error) {
		return !proc.Alive(pid, 0), nil
	})
}

func TestShutdownKillsStepsAndRestartReportsLost(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	stop := e.start(t)
	publish(t, e.broker, command(startStep("5", `sleep 60`, nil, filepath.Join(e.shared, "slurm-5.out"))))
	running := waitStep(t, e.broker, "5", eventsv1.StepState_STEP_RUNNING)
	if err := stop(); err != nil {
		t.Fatalf("agent stop: %v", err)
	}
	if proc.Alive(int(running.Pid), 0) {
		t.Fatal("step still runs after the agent stopped")
	}
	killed := waitStep(t, e.broker, "5", eventsv1.StepState_STEP_KILLED)
	if !strings.Contains(killed.Message, "agent shutting down") || !killed.GetNodeStopping() {
		t.Fatalf("killed = %v, want the agent's shutdown as its cause (node_stopping)", killed)
	}

	// What a crashed agent leaves: a step recorded running whose process is
	// gone, and one whose process survives (no longer the agent's child).
	// Recorded as the agent records a step, with its start time: by pid
	// alone, another process given the pid since (pids wrap at 32768 on
	// many machines) would be the step's, and the agent would kill it.
	gone := exec.Command("/bin/sleep", "60")
	if err := gone.Start(); err != nil {
		t.Fatal(err)
	}
	goneStart, ok := proc.StartTime(gone.Process.Pid)
	_ = gone.Process.Kill()
	_ = gone.Wait()
	if !ok {
		t.Fatalf("no start time for pid %d, just started", gone.Process.Pid)
	}
	orphan := exec.Command("/bin/sleep", "60")
	orphan.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := orphan.Start(); err != nil {
		t.Fatal(err)
	}
	orphanDone := make(chan struct{})
	go func() { _ = orphan.Wait(); close(orphanDone) }()
	t.Cleanup(func() { _ = proc.KillGroup(orphan.Process.Pid, syscall.SIGKILL) })
	start, _ := proc.StartTime(orphan.Process.Pid)

	st := store.New(e.rdb, ServiceName("c1", "gpu-0001")+":")
	var tx store.Tx
	for _, s := range []*domain.Step{
		{Job: "projects/p/jobs/6", Attempt: 1, Phase: domain.Running, PID: gone.Process.Pid, PIDStart: goneStart, Created: time.Now()},
		{Job: "projects/p/jobs/7", Attempt: 1, Phase: domain.Running, PID: orphan.Process.Pid, PIDStart: start, Created: time.Now()},
	} {
		if err := adapters.PutStep(&tx, s, domain.Self{}, false); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.Apply(context.Background(), "", &tx); err != nil {
		t.Fatal(err)
	}

	e.start(t)
	if lost := waitStep(t, e.broker, "6", eventsv1.StepState_STEP_LOST); !strings.Contains(lost.Message, "was gone") {
		t.Fatalf("lost = %v", lost)
	}
	if lost := waitStep(t, e.broker, "7", eventsv1.StepState_STEP_LOST); !strings.Contains(lost.Message, "killed") {
		t.Fatalf("lost = %v", lost)
	}
	select {
	case <-orphanDone:
	case <-time.After(wait):
		t.Fatal("the surviving step process was not killed")
	}
	// Job 5 ended before the restart: it is not reported again.
	if evs := stepEvents(t, e.broker, "5"); len(evs) != 2 {
		t.Fatalf("job 5 events after restart = %v", evs)
	}
}

func TestConfig(t *testing.T) {
	t.Parallel()
	c := Config{Node: node, WorkDir: "rel"}
	id, err := c.validate()
	if err != nil || id != "c1" || c.Cluster != cluster || c.Hostname != "gpu-0001" || !filepath.IsAbs(c.WorkDir) ||
		c.SharedDir != c.WorkDir || c.HeartbeatInterval != 2*time.Second || c.StepKillGrace != 10*time.Second || c.Runtime != "process" {
		t.Fatalf("validate() = %q, %v; config %+v", id, err, c)
	}
	if ServiceName(id, c.Hostname) != "agent-c1-gpu-0001" {
		t.Fatalf("ServiceName = %s", ServiceName(id, c.Hostname))
	}
	for _, bad := range []Config{
		{Node: "gpu-0001"},
		{Node: node, Cluster: "projects/p/clusters/other"},
		{Node: node, Hostname: "gpu-0002"},
		{Node: node, GPUs: -1},
	} {
		if _, err := bad.validate(); err == nil {
			t.Errorf("validate(%+v) accepted it", bad)
		}
	}
	for _, nice := range []int{-1, 20} {
		if _, err := (&Config{Node: node, JobNice: nice}).validate(); err == nil || !strings.Contains(err.Error(), "job_nice") {
			t.Errorf("validate(job nice %d) = %v, want an error naming job_nice", nice, err)
		}
	}
	if _, err := (&Config{Node: node, Runtime: "docker"}).validate(); err == nil || !strings.Contains(err.Error(), "runtime") ||
		!strings.Contains(err.Error(), `"docker"`) {
		t.Errorf("validate(runtime docker) = %v, want an error naming runtime and the value", err)
	}
	// A container runtime template must run the job's image.
	if _, err := (&Config{Node: node, ContainerRuntime: "podman run --rm busybox"}).validate(); err == nil ||
		!strings.Contains(err.Error(), "container_runtime") || !strings.Contains(err.Error(), "has no {image}") {
		t.Errorf("validate(a template without {image}) = %v, want an error naming container_runtime and {image}", err)
	}
	if _, err := (&Config{Node: node, ContainerRuntime: "podman run --rm {image}"}).validate(); err != nil {
		t.Errorf("validate(a podman template) = %v", err)
	}
	if _, err := (&Config{Node: node, Metrics: app.MetricsOptions{Batch: -1}}).validate(); err == nil || !strings.Contains(err.Error(), "metrics") {
		t.Errorf("validate(metrics batch -1) = %v, want an error naming metrics", err)
	}
	missing := filepath.Join(t.TempDir(), "no-such-dir")
	if _, err := (&Config{Node: node, SlurmBin: missing}).validate(); err == nil || !strings.Contains(err.Error(), "slurm_bin") ||
		!strings.Contains(err.Error(), missing) {
		t.Errorf("validate(slurm bin %s) = %v, want an error naming slurm_bin and the directory", missing, err)
	}
	if c := (Config{Node: node, SlurmBin: t.TempDir()}); func() error { _, err := c.validate(); return err }() != nil {
		t.Errorf("validate refused an existing slurm bin directory")
	}
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	var fromFlags Config
	fromFlags.RegisterFlags(fs)
	if err := fs.Parse(nil); err != nil || fromFlags.JobNice != DefaultJobNice {
		t.Errorf("job nice without LOOM_JOB_NICE = %d (%v), want %d", fromFlags.JobNice, err, DefaultJobNice)
	}
	if m := fromFlags.Metrics; fromFlags.ContainerRuntime != "process" || m.Interval != time.Second || m.Batch != 100 ||
		m.Rate != 2 || m.Limits != domain.DefaultMetricLimits || m.Limits.Line != 4096 || m.Limits.Values != 64 || m.Limits.Name != 128 {
		t.Errorf("container runtime and metrics defaults: %q, %+v", fromFlags.ContainerRuntime, m)
	}
	if err := Run(context.Background(), Config{}); err == nil || !strings.Contains(err.Error(), "node") {
		t.Fatalf("Run without a node = %v", err)
	}
}

// TestMistypedVariableStopsTheAgent: a LOOM_* value that does not parse
// stops the agent with a message naming it, instead of the default being
// used silently. Not parallel: it sets the environment.
func TestMistypedVariableStopsTheAgent(t *testing.T) {
	t.Setenv("LOOM_JOB_NICE", "ten")
	var cfg Config
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	if err := fs.Parse([]string{"-node", node, "-work-dir", t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	err := Run(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), `LOOM_JOB_NICE: must be an integer, got "ten"`) {
		t.Fatalf("Run with LOOM_JOB_NICE=ten = %v, want an error naming the variable", err)
	}
}
