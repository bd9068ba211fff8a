package agent

import (
	"context"
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/proc"
	"github.com/loom-ml/loom/libs/store"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	"github.com/loom-ml/loom/services/agent/internal/adapters"
)

// agentProcessEnv makes the test binary run TestAgentProcess as an agent
// of its own: a process a test can kill -9 or SIGSTOP.
const agentProcessEnv = "LOOM_TEST_AGENT_PROCESS"

// TestAgentProcess is not a test: it is the agent of agentProcess, run in
// a process of its own, its command line after "--".
func TestAgentProcess(t *testing.T) {
	if os.Getenv(agentProcessEnv) == "" {
		t.Skip("the agent of a test that kills it: run by agentProcess")
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()
	if err := RunArgs(ctx, flag.Args()); err != nil {
		t.Fatal(err)
	}
}

// agentProcess starts e's agent as a process of its own (the test binary
// running TestAgentProcess), killed at the test's end.
func (e *env) agentProcess(t *testing.T) *exec.Cmd {
	t.Helper()
	c := e.config()
	args := []string{"-test.run=^TestAgentProcess$", "--",
		"-node", c.Node, "-work-dir", c.WorkDir, "-shared-dir", c.SharedDir, "-brokers", e.broker, "-redis", e.redisAddr,
		"-heartbeat-interval", c.HeartbeatInterval.String(), "-step-kill-grace", c.StepKillGrace.String(),
		"-allow-root-jobs", "-gpus", "8", "-log-level", "warn"}
	if c.ContainerRuntime != "" {
		args = append(args, "-container-runtime", c.ContainerRuntime)
	}
	if c.ProgressInterval > 0 {
		args = append(args, "-progress-interval", c.ProgressInterval.String())
	}
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), agentProcessEnv+"=1")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	return cmd
}

// killAgent kills the agent process at once (SIGKILL: no shutdown of its
// own) and waits until it is gone.
func killAgent(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	pid := cmd.Process.Pid
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, wait, "the killed agent to be gone", func() (bool, error) { return !proc.Alive(pid, 0), nil })
}

// touch creates the file name in the shared dir (the steps' $HOME).
func (e *env) touch(t *testing.T, name string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(e.shared, name), nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

// until is a script that waits for the file name in $HOME (the shared dir)
// and exits code.
func until(name, code string) string {
	return `while [ ! -e "$HOME/` + name + `" ]; do sleep 0.05; done; echo done; exit ` + code
}

func states(evs []*eventsv1.StepChanged) string {
	var s []string
	for _, ev := range evs {
		s = append(s, strings.TrimPrefix(ev.State.String(), "STEP_"))
	}
	return strings.Join(s, ",")
}

// TestStepsOutliveAnAgentKill: kill -9 of an agent fails no job on its
// node. A restarted agent adopts the step still running (its process never
// killed), reports it when it ends with its real exit code, stops it when
// asked; a step that ended while the agent was down is reported EXITED with
// its real code, not LOST. AgentRegistered says how many steps were adopted
// and the node's host boot id.
func TestStepsOutliveAnAgentKill(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if err := os.WriteFile(filepath.Join(e.work, "host_boot_id"), []byte("boot-1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	first := e.agentProcess(t)
	out := func(job string) string { return filepath.Join(e.shared, "slurm-"+job+".out") }
	publish(t, e.broker,
		command(startStep("1", until("go1", "7"), nil, out("1"))),
		command(startStep("2", until("go2", "3"), nil, out("2"))),
		command(startStep("3", `sleep 60`, nil, out("3"))))
	pids := map[string]int{}
	for _, job := range []string{"1", "2", "3"} {
		pids[job] = int(waitStep(t, e.broker, job, eventsv1.StepState_STEP_RUNNING).Pid)
		if _, _, err := proc.ReadPIDFile(filepath.Join(e.work, StepsDir, pidName(job))); err != nil {
			t.Fatalf("step %s has no pidfile: %v", job, err)
		}
	}
	firstReg := registration(t, e.broker, "")

	killAgent(t, first)
	// The killed agent's outbox relay lease, made to outlive the test: only
	// the restarted agent's taking it over (it holds the node's lock, so
	// its predecessor is dead) lets its registration out.
	lease := ServiceName("c1", "gpu-0001") + ":outbox:lease"
	if ok, err := e.rdb.PExpire(context.Background(), lease, time.Hour).Result(); err != nil || !ok {
		t.Fatalf("the killed agent's relay lease %s: %v, %v", lease, ok, err)
	}
	// Job 2 ends while no agent runs.
	e.touch(t, "go2")
	testkit.WaitFor(t, wait, "job 2's shim to end", func() (bool, error) { return !proc.Alive(pids["2"], 0), nil })

	e.start(t)
	reg := registration(t, e.broker, firstReg.BootId)
	if reg.AdoptedSteps != 2 || reg.HostBootId != "boot-1" {
		t.Fatalf("AgentRegistered after the restart: adopted %d, host boot id %q; want 2 and boot-1", reg.AdoptedSteps, reg.HostBootId)
	}
	if ev := waitStep(t, e.broker, "2", eventsv1.StepState_STEP_EXITED); ev.ExitCode != 3 {
		t.Fatalf("job 2, ended while the agent was down: %v, want EXITED 3", ev)
	}
	for _, job := range []string{"1", "3"} {
		if !proc.Alive(pids[job], 0) {
			t.Fatalf("job %s's process was killed by the agent's restart", job)
		}
	}
	e.touch(t, "go1")
	if ev := waitStep(t, e.broker, "1", eventsv1.StepState_STEP_EXITED); ev.ExitCode != 7 || int(ev.Pid) != pids["1"] {
		t.Fatalf("adopted job 1 ended: %v, want EXITED 7 with its pid %d", ev, pids["1"])
	}
	if got := readFile(t, out("1")); got != "done\n" {
		t.Fatalf("job 1's output = %q", got)
	}
	publish(t, e.broker, command(&eventsv1.StopStep{Job: "projects/p/jobs/3", Attempt: 1, Node: node, Reason: "job cancelled",
		Cause: eventsv1.StopCause_STOP_CAUSE_CANCELLED}))
	waitStep(t, e.broker, "3", eventsv1.StepState_STEP_KILLED)
	testkit.WaitFor(t, wait, "adopted job 3's processes to be gone", func() (bool, error) {
		return !proc.GroupAlive(pids["3"]), nil
	})
	// The adopted step's log says why it ended, as a step the agent
	// started itself does (TestStopWritesSlurmsLineToTheErrorOutput).
	if got := readFile(t, out("3")); !regexp.MustCompile(`^slurmstepd-gpu-0001: error: \*\*\* JOB 3 ON gpu-0001 CANCELLED AT \S+ \*\*\*\n$`).MatchString(got) {
		t.Errorf("adopted job 3's output = %q, want Slurm's CANCELLED line", got)
	}
	for job, want := range map[string]string{"1": "RUNNING,EXITED", "2": "RUNNING,EXITED", "3": "RUNNING,KILLED"} {
		if got := states(stepEvents(t, e.broker, job)); got != want {
			t.Errorf("job %s events = %s, want %s", job, got, want)
		}
	}
	// Ended steps leave no state behind.
	testkit.WaitFor(t, wait, "the steps' state files to go", func() (bool, error) {
		ents, err := os.ReadDir(filepath.Join(e.work, StepsDir))
		return err == nil && len(ents) == 0, err
	})
}

// TestPausedAgentLosesNoStep: an agent SIGSTOPped past its heartbeats (a
// stall) loses nothing: a step that ended meanwhile is reported with its
// code, and a stop sent meanwhile stops its step once the agent goes on.
func TestPausedAgentLosesNoStep(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.agentProcess(t)
	out := func(job string) string { return filepath.Join(e.shared, "slurm-"+job+".out") }
	publish(t, e.broker, command(startStep("1", until("go1", "5"), nil, out("1"))),
		command(startStep("2", `sleep 60`, nil, out("2"))))
	p1 := int(waitStep(t, e.broker, "1", eventsv1.StepState_STEP_RUNNING).Pid)
	p2 := int(waitStep(t, e.broker, "2", eventsv1.StepState_STEP_RUNNING).Pid)
	if err := a.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	e.touch(t, "go1")
	testkit.WaitFor(t, wait, "job 1 to end under the paused agent", func() (bool, error) {
		_, running := proc.StartTime(p1)
		return !running, nil
	})
	publish(t, e.broker, command(&eventsv1.StopStep{Job: "projects/p/jobs/2", Attempt: 1, Node: node, Reason: "node failure"}))
	if !proc.Alive(p2, 0) {
		t.Fatal("job 2 ended while the agent was paused")
	}
	if err := a.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if ev := waitStep(t, e.broker, "1", eventsv1.StepState_STEP_EXITED); ev.ExitCode != 5 {
		t.Fatalf("job 1 = %v, want EXITED 5", ev)
	}
	waitStep(t, e.broker, "2", eventsv1.StepState_STEP_KILLED)
	testkit.WaitFor(t, wait, "job 2 to be gone", func() (bool, error) { return !proc.GroupAlive(p2), nil })
}

// pidName is the pidfile name of job's attempt 1 on the test's node.
func pidName(job string) string {
	return strings.ReplaceAll(strings.ReplaceAll("projects/p/jobs/"+job+"#1", "/", "%2F"), "#", "%23") + ".pid"
}

// registration waits for an AgentRegistered whose boot id is not notBoot.
func registration(t *testing.T, broker, notBoot string) *eventsv1.AgentRegistered {
	t.Helper()
	return testkit.WaitEvent(t, broker, topics.NodeTelemetry, wait, func(ev envelope.Event) bool {
		r, ok := ev.Payload.(*eventsv1.AgentRegistered)
		return ok && r.BootId != notBoot
	}).Payload.(*eventsv1.AgentRegistered)
}

// TestBacklogIsWorkedThroughBeforeAnythingStarts: a restarted agent handles
// the step commands that came while it was down before it starts any
// process: a start whose stop follows in the backlog never runs (reported
// KILLED once), and a start without one runs.
func TestBacklogIsWorkedThroughBeforeAnythingStarts(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	stop := e.start(t)
	registration(t, e.broker, "")
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	out := func(job string) string { return filepath.Join(e.shared, "slurm-"+job+".out") }
	// Other commands between the start and its stop: time enough for a
	// start to run, were it not held back.
	backlog := []envelope.Event{command(startStep("1", `touch "$HOME/ran1"; sleep 60`, nil, out("1")))}
	others := []string{"2", "3", "4", "5", "6"}
	for _, job := range others {
		backlog = append(backlog, command(startStep(job, `echo ran`, nil, out(job))))
	}
	backlog = append(backlog, command(&eventsv1.StopStep{Job: "projects/p/jobs/1", Attempt: 1, Node: node, Reason: "job cancelled"}))
	publish(t, e.broker, backlog...)
	e.start(t)
	for _, job := range others {
		waitStep(t, e.broker, job, eventsv1.StepState_STEP_EXITED)
	}
	waitStep(t, e.broker, "1", eventsv1.StepState_STEP_KILLED)
	if got := states(stepEvents(t, e.broker, "1")); got != "KILLED" {
		t.Fatalf("job 1, started and stopped in the backlog: events %s, want KILLED only", got)
	}
	if _, err := os.Stat(filepath.Join(e.shared, "ran1")); !os.IsNotExist(err) {
		t.Fatalf("job 1, stopped in the backlog, ran (%v)", err)
	}
}

// TestStaleAttemptsAreRefused: a start of an attempt older than one the node
// has seen is refused (FAILED_TO_START, stale), and a start of an attempt
// whose stop came first (a tombstone) does nothing.
func TestStaleAttemptsAreRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.start(t)
	out := func(job string) string { return filepath.Join(e.shared, "slurm-"+job+".out") }
	second := startStep("6", `sleep 60`, nil, out("6"))
	second.Attempt = 2
	publish(t, e.broker, command(second))
	waitStep(t, e.broker, "6", eventsv1.StepState_STEP_RUNNING)
	stale := startStep("6", `touch "$HOME/stale"`, nil, out("6"))
	task := launch("6", 0, 0, 1, filepath.Join(e.shared, ".loom", "steps", "6.0"), "touch", filepath.Join(e.shared, "stale-task"))
	publish(t, e.broker, command(stale), command(task),
		command(&eventsv1.StopStep{Job: "projects/p/jobs/7", Attempt: 1, Node: node, Reason: "requeued"}),
		command(startStep("7", `touch "$HOME/tombstoned"`, nil, out("7"))),
		command(startStep("8", `echo marker`, nil, out("8"))))
	waitStep(t, e.broker, "8", eventsv1.StepState_STEP_EXITED)
	refused := testkit.WaitEvent(t, e.broker, topics.StepEvents, wait, func(ev envelope.Event) bool {
		sc, ok := ev.Payload.(*eventsv1.StepChanged)
		return ok && sc.Job == "projects/p/jobs/6" && sc.Attempt == 1
	}).Payload.(*eventsv1.StepChanged)
	if refused.State != eventsv1.StepState_STEP_FAILED_TO_START || !strings.Contains(refused.Message, "stale attempt 1") {
		t.Fatalf("start of stale attempt 1: %v, want FAILED_TO_START, stale", refused)
	}
	if ev := waitTasks(t, e.broker, "6", 0, eventsv1.StepState_STEP_FAILED_TO_START); !strings.Contains(ev.Message, "stale attempt 1") {
		t.Fatalf("tasks of stale attempt 1: %v, want FAILED_TO_START, stale", ev)
	}
	if got := states(stepEvents(t, e.broker, "7")); got != "KILLED" {
		t.Fatalf("job 7, stopped before its start came: events %s, want KILLED only", got)
	}
	for _, f := range []string{"stale", "stale-task", "tombstoned"} {
		if _, err := os.Stat(filepath.Join(e.shared, f)); !os.IsNotExist(err) {
			t.Errorf("a refused start ran: %s exists (%v)", f, err)
		}
	}
}

// TestStepProgress: a program that writes its progress file (as the
// trainer does), or whose output grows, is reported in StepProgress, only
// when something moved.
func TestStepProgress(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.progressInterval = 100 * time.Millisecond
	e.start(t)
	report := func(step, ckpt int) string {
		return fmt.Sprintf(`printf '{"step": %d, "checkpoint_step": %d, "checkpoint_time": "2026-12-01T10:00:00Z", "checkpoint_seconds": %d.5}' > "$LOOM_PROGRESS_FILE.tmp" && mv "$LOOM_PROGRESS_FILE.tmp" "$LOOM_PROGRESS_FILE"; `, step, ckpt, ckpt)
	}
	hold := func(name string) string { return `while [ ! -e "$HOME/` + name + `" ]; do sleep 0.05; done; ` }
	script := report(5, 4) + hold("a") + "echo hello; " + hold("b") + report(9, 8) + hold("c")
	publish(t, e.broker, command(startStep("1", script, nil, filepath.Join(e.shared, "slurm-1.out"))))
	progress := func(match func(*eventsv1.StepProgress) bool) *eventsv1.StepProgress {
		t.Helper()
		return testkit.WaitEvent(t, e.broker, topics.StepEvents, wait, func(ev envelope.Event) bool {
			p, ok := ev.Payload.(*eventsv1.StepProgress)
			return ok && p.Job == "projects/p/jobs/1" && match(p)
		}).Payload.(*eventsv1.StepProgress)
	}
	p := progress(func(p *eventsv1.StepProgress) bool { return p.Step == 5 })
	if p.CheckpointStep != 4 || p.CheckpointTime.AsTime() != time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC) ||
		p.Attempt != 1 || p.Node != node || p.LastProgress == nil || p.OutputBytes != 0 || p.CheckpointDuration.AsDuration() != 4500*time.Millisecond {
		t.Fatalf("first progress = %v", p)
	}
	e.touch(t, "a")
	if p := progress(func(p *eventsv1.StepProgress) bool { return p.OutputBytes > 0 }); p.OutputBytes != 6 || p.Step != 5 {
		t.Fatalf("progress once the output grew = %v, want 6 bytes at step 5", p)
	}
	e.touch(t, "b")
	last := progress(func(p *eventsv1.StepProgress) bool { return p.Step == 9 })
	if last.CheckpointStep != 8 || !last.LastProgress.AsTime().After(p.LastProgress.AsTime()) ||
		last.CheckpointDuration.AsDuration() != 8500*time.Millisecond {
		t.Fatalf("progress at step 9 = %v", last)
	}
	// Nothing moves now: ten intervals' worth of heartbeats bring no report.
	testkit.WaitFor(t, wait, "ten progress intervals to pass", func() (bool, error) {
		n := 0
		for _, ev := range testkit.Events(t, e.broker, topics.NodeTelemetry) {
			if h, ok := ev.Payload.(*eventsv1.Heartbeat); ok && h.Time.AsTime().After(last.Time.AsTime().Add(time.Second)) {
				n++
			}
		}
		return n > 0, nil
	})
	e.touch(t, "c")
	waitStep(t, e.broker, "1", eventsv1.StepState_STEP_EXITED)
	var steps []int64
	for _, ev := range testkit.Events(t, e.broker, topics.StepEvents) {
		if p, ok := ev.Payload.(*eventsv1.StepProgress); ok && p.Job == "projects/p/jobs/1" {
			steps = append(steps, p.Step)
		}
	}
	if !slices.Equal(steps, []int64{5, 5, 9}) {
		t.Fatalf("progress reports at steps %v, want 5, 5 (output grew), 9: one per move", steps)
	}
}

// TestTasksOutliveAnAgentKill: a job step's tasks (srun) outlive kill -9 of
// their agent as steps do: adopted, and reported with every task's real
// exit code, whether a task ended while the agent was down or after.
func TestTasksOutliveAnAgentKill(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	first := e.agentProcess(t)
	outDir := filepath.Join(e.shared, ".loom", "steps", "1.0")
	// Task 0 waits for go-0 and exits 4; task 1 waits for go-1 and exits 0.
	l := launch("1", 0, 0, 2, outDir, "sh", "-c", `while [ ! -e "`+e.shared+`/go-$SLURM_LOCALID" ]; do sleep 0.05; done; exit $((4 * (1 - SLURM_LOCALID)))`)
	publish(t, e.broker, command(l))
	waitTasks(t, e.broker, "1", 0, eventsv1.StepState_STEP_RUNNING)
	var shims [2]int
	for i := range shims {
		pid, _, err := proc.ReadPIDFile(filepath.Join(e.work, StepsDir, url.PathEscape(fmt.Sprintf("projects/p/jobs/1#1.0/%d", i))+".pid"))
		if err != nil {
			t.Fatalf("task %d has no pidfile: %v", i, err)
		}
		shims[i] = pid
	}
	killAgent(t, first)
	e.touch(t, "go-1")
	testkit.WaitFor(t, wait, "task 1 to end while no agent runs", func() (bool, error) { return !proc.Alive(shims[1], 0), nil })
	e.start(t)
	if !proc.Alive(shims[0], 0) {
		t.Fatal("task 0 was killed by the agent's restart")
	}
	e.touch(t, "go-0")
	if ev := waitTasks(t, e.broker, "1", 0, eventsv1.StepState_STEP_EXITED); !slices.Equal(ev.ExitCodes, []int32{4, 0}) {
		t.Fatalf("adopted tasks ended with %v, want [4 0]", ev.ExitCodes)
	}
	if got := strings.Join(taskEvents(t, e.broker, "1", 0), ","); got != "STEP_RUNNING,STEP_EXITED" {
		t.Fatalf("task events = %s, want RUNNING then EXITED", got)
	}
}

// TestNodeBackFromTheDeadStopsItsRunFirst: an agent killed while its node
// was declared dead comes back to a stop for the run it held (the
// scheduler's fence) and a start of the job's next attempt: it adopts the
// old run, stops it, and only then starts the new attempt.
func TestNodeBackFromTheDeadStopsItsRunFirst(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	first := e.agentProcess(t)
	out := filepath.Join(e.shared, "slurm-9.out")
	publish(t, e.broker, command(startStep("9", `sleep 60`, nil, out)))
	old := waitStep(t, e.broker, "9", eventsv1.StepState_STEP_RUNNING)
	killAgent(t, first)
	next := startStep("9", until("go", "0"), nil, out)
	next.Attempt = 2
	publish(t, e.broker,
		command(&eventsv1.StopStep{Job: "projects/p/jobs/9", Attempt: 1, Node: node, Reason: "node failure", Cause: eventsv1.StopCause_STOP_CAUSE_NODE_FAILURE}),
		command(next))
	e.start(t)
	testkit.WaitEvent(t, e.broker, topics.StepEvents, wait, func(ev envelope.Event) bool {
		sc, ok := ev.Payload.(*eventsv1.StepChanged)
		return ok && sc.Job == "projects/p/jobs/9" && sc.Attempt == 2 && sc.State == eventsv1.StepState_STEP_RUNNING
	})
	// Attempt 2 runs: attempt 1 was stopped (recorded, then signalled)
	// before it started.
	steps, err := adapters.LoadSteps(context.Background(), store.New(e.rdb, ServiceName("c1", "gpu-0001")+":"))
	if err != nil {
		t.Fatal(err)
	}
	if s := steps["projects/p/jobs/9#1"]; s == nil || s.StopReason != "node failure" {
		t.Fatalf("attempt 1 when attempt 2 started: %+v, want it stopped", s)
	}
	killed := waitStep(t, e.broker, "9", eventsv1.StepState_STEP_KILLED)
	if killed.Attempt != 1 || killed.Pid != old.Pid {
		t.Fatalf("killed = %v, want attempt 1 (pid %d)", killed, old.Pid)
	}
	testkit.WaitFor(t, wait, "attempt 1's processes to be gone", func() (bool, error) { return !proc.GroupAlive(int(old.Pid)), nil })
	e.touch(t, "go")
	if ev := waitStep(t, e.broker, "9", eventsv1.StepState_STEP_EXITED); ev.Attempt != 2 || ev.ExitCode != 0 {
		t.Fatalf("attempt 2 ended %v", ev)
	}
}
