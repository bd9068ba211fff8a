package agent

import (
	"context"
	"flag"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/proc"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
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
	publish(t, e.broker, command(&eventsv1.StopStep{Job: "projects/p/jobs/3", Attempt: 1, Node: node, Reason: "job cancelled"}))
	waitStep(t, e.broker, "3", eventsv1.StepState_STEP_KILLED)
	testkit.WaitFor(t, wait, "adopted job 3's processes to be gone", func() (bool, error) {
		return !proc.GroupAlive(pids["3"]), nil
	})
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
