package agent

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/proc"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/testkit/need"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
)

// readFile returns path's content, "" while it does not exist.
func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return string(b)
}

func TestSignalStepSignalsGroupOrBatchShell(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.start(t)
	// The batch shell and a child of it, each noting the USR1s it gets.
	script := `trap 'echo shell >> sig.txt' USR1
sh -c 'trap "echo child >> sig.txt" USR1; echo ready > child.ready; while :; do sleep 0.05; done' &
while :; do sleep 0.05; done`
	publish(t, e.broker, command(startStep("1", script, nil, filepath.Join(e.shared, "slurm-1.out"))))
	running := waitStep(t, e.broker, "1", eventsv1.StepState_STEP_RUNNING)
	testkit.WaitFor(t, wait, "the step's child to set its trap", func() (bool, error) {
		return readFile(t, filepath.Join(e.shared, "child.ready")) != "", nil
	})
	sigs := filepath.Join(e.shared, "sig.txt")
	count := func(who string) int { return strings.Count(readFile(t, sigs), who+"\n") }

	signal := func(name string, batchOnly bool) {
		publish(t, e.broker, command(&eventsv1.SignalStep{Job: "projects/p/jobs/1", Attempt: 1, Node: node, Signal: name, BatchOnly: batchOnly}))
	}
	signal("USR1", true) // B:USR1, the batch shell only
	testkit.WaitFor(t, wait, "the batch shell to get USR1", func() (bool, error) { return count("shell") == 1, nil })
	signal("10", false) // USR1 by number, to the whole group
	testkit.WaitFor(t, wait, "the group to get USR1", func() (bool, error) {
		return count("shell") == 2 && count("child") >= 1, nil
	})
	// Signals change nothing: the step still runs, and only a stop ends it.
	publish(t, e.broker, command(&eventsv1.StopStep{Job: "projects/p/jobs/1", Attempt: 1, Node: node, Reason: "done"}))
	waitStep(t, e.broker, "1", eventsv1.StepState_STEP_KILLED)
	testkit.WaitFor(t, wait, "the step's processes to be gone", func() (bool, error) {
		return !proc.GroupAlive(int(running.Pid)), nil
	})
	if n := count("child"); n != 1 {
		t.Errorf("the child got USR1 %d times, want once (the batch-only signal must not reach it)", n)
	}
	var states []string
	for _, sc := range stepEvents(t, e.broker, "1") {
		states = append(states, sc.State.String())
	}
	if strings.Join(states, ",") != "STEP_RUNNING,STEP_KILLED" {
		t.Fatalf("step events = %v, want RUNNING then KILLED (signals report nothing)", states)
	}
}

func TestStepOutputAndWorkDir(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.start(t)
	work := filepath.Join(e.shared, "project", "run") // created for the step
	script := `echo "out $(pwd)"; echo "err line" >&2`

	t.Run("joined", func(t *testing.T) {
		st := startStep("1", script, nil, "logs/slurm-1.out") // relative: against work_dir
		st.WorkDir = work
		publish(t, e.broker, command(st))
		waitStep(t, e.broker, "1", eventsv1.StepState_STEP_EXITED)
		if got, want := readFile(t, filepath.Join(work, "logs", "slurm-1.out")), "out "+work+"\nerr line\n"; got != want {
			t.Fatalf("output = %q, want stdout and stderr together %q", got, want)
		}
	})
	t.Run("separate", func(t *testing.T) {
		st := startStep("2", script, nil, filepath.Join(e.shared, "slurm-2.out"))
		st.WorkDir = work
		st.ErrorPath = filepath.Join(e.shared, "slurm-2.err")
		publish(t, e.broker, command(st))
		waitStep(t, e.broker, "2", eventsv1.StepState_STEP_EXITED)
		if got := readFile(t, filepath.Join(e.shared, "slurm-2.out")); got != "out "+work+"\n" {
			t.Errorf("output = %q, want stdout only", got)
		}
		if got := readFile(t, filepath.Join(e.shared, "slurm-2.err")); got != "err line\n" {
			t.Errorf("error file = %q, want stderr only", got)
		}
	})
}

// TestStepsRunBelowTheAgentsPriority checks that a step runs JobNice below
// the agent's nice value from its first instruction (the shell's own child
// included), while the agent keeps its own.
func TestStepsRunBelowTheAgentsPriority(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.jobNice = 5
	e.start(t)
	out := filepath.Join(e.shared, "nice.out")
	publish(t, e.broker, command(startStep("1", "nice; sh -c nice", nil, out)))
	waitStep(t, e.broker, "1", eventsv1.StepState_STEP_EXITED)
	ownOut, err := exec.Command("nice").Output()
	if err != nil {
		t.Fatal(err)
	}
	own, err := strconv.Atoi(strings.TrimSpace(string(ownOut)))
	if err != nil {
		t.Fatal(err)
	}
	want := strconv.Itoa(min(own+5, 19))
	if got := readFile(t, out); got != want+"\n"+want+"\n" {
		t.Fatalf("step's nice values = %q, want %s twice (the agent's %d + 5)", got, want, own)
	}
}

// TestConcurrentStartsStartEachStepOnce sends many starts at once, with
// redeliveries and stops racing the starts, and checks that every step ran at
// most once and reported a consistent history.
func TestConcurrentStartsStartEachStepOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.start(t)
	const n = 40
	runs := filepath.Join(e.shared, "runs.txt")
	var cmds []*eventsv1.StartStep
	for i := 1; i <= n; i++ {
		cmds = append(cmds, startStep(fmt.Sprint(i), fmt.Sprintf(`echo %d >> "$HOME/runs.txt"; sleep 0.2`, i), nil,
			filepath.Join(e.shared, fmt.Sprintf("slurm-%d.out", i))))
	}
	// All in one write, so the agent finds them together: every start, a
	// stop for every fourth step right behind its start, then every start
	// again under new event ids.
	var evs []envelope.Event
	for i, c := range cmds {
		evs = append(evs, command(c))
		if i%4 == 0 {
			evs = append(evs, command(&eventsv1.StopStep{Job: c.Job, Attempt: 1, Node: node, Reason: "cancelled"}))
		}
	}
	for _, c := range cmds {
		evs = append(evs, command(c))
	}
	publish(t, e.broker, evs...)
	for i := 1; i <= n; i++ {
		job := fmt.Sprint(i)
		testkit.WaitFor(t, wait, "step "+job+" to end", func() (bool, error) {
			for _, sc := range stepEvents(t, e.broker, job) {
				if sc.State != eventsv1.StepState_STEP_RUNNING {
					return true, nil
				}
			}
			return false, nil
		})
	}
	ranCount := map[string]int{}
	for _, l := range strings.Fields(readFile(t, runs)) {
		ranCount[l]++
	}
	for i := 1; i <= n; i++ {
		job := fmt.Sprint(i)
		var states []string
		for _, sc := range stepEvents(t, e.broker, job) {
			states = append(states, sc.State.String())
		}
		got := strings.Join(states, ",")
		stopped := (i-1)%4 == 0
		switch {
		case ranCount[job] > 1:
			t.Errorf("step %s ran %d times", job, ranCount[job])
		case !stopped && (got != "STEP_RUNNING,STEP_EXITED" || ranCount[job] != 1):
			t.Errorf("step %s: events %s, ran %d times; want RUNNING,EXITED and one run", job, got, ranCount[job])
		case stopped && got != "STEP_KILLED" && got != "STEP_RUNNING,STEP_KILLED":
			t.Errorf("stopped step %s: events %s; want KILLED before it started, or RUNNING then KILLED", job, got)
		}
	}
}

// TestBatchScriptRunsWithItsInterpreter checks that a script with an
// interpreter line is executed as Slurm executes it, by the interpreter it
// names with its argument, and that one without stays a /bin/sh -c script.
func TestBatchScriptRunsWithItsInterpreter(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.start(t)
	need.Tools(t, "apt-get install bash", "bash")
	cases := []struct {
		job, script, out string
		exit             int32
	}{
		// Arrays and [[ ]] are bash's: /bin/sh (dash here) refuses them.
		{"1", "#!/bin/bash\narr=(a b c)\n[[ ${arr[1]} == b ]] && echo \"bash ${arr[2]} $#\"\n", "bash c 0\n", 0},
		// The interpreter's argument counts: -e stops at the first failure.
		{"2", "#!/bin/sh -e\necho before\nfalse\necho after\n", "before\n", 1},
		// Through env, as scripts for other interpreters are written.
		{"3", "#!/usr/bin/env bash\necho \"via env ${BASH_VERSINFO[0]:+bash}\"\n", "via env bash\n", 0},
		// No interpreter line: a /bin/sh -c script, as the API allows.
		{"4", "echo plain $0", "plain /bin/sh\n", 0},
	}
	for _, tc := range cases {
		out := filepath.Join(e.shared, "slurm-"+tc.job+".out")
		publish(t, e.broker, command(startStep(tc.job, tc.script, nil, out)))
		ex := waitStep(t, e.broker, tc.job, eventsv1.StepState_STEP_EXITED)
		if got := readFile(t, out); got != tc.out || ex.ExitCode != tc.exit {
			t.Errorf("script %q: output %q, exit %d; want %q, exit %d", tc.script, got, ex.ExitCode, tc.out, tc.exit)
		}
	}
	// A missing interpreter is the script's exit, as under Slurm 22.05's
	// slurmstepd (checked with scripts/slurm-local.sh): the job's output
	// says what is missing, and it exits 2 (ENOENT): ExitCode=2:0.
	out := filepath.Join(e.shared, "slurm-5.out")
	publish(t, e.broker, command(startStep("5", "#!/no/such/interpreter -x\necho x\n", nil, out)))
	ex := waitStep(t, e.broker, "5", eventsv1.StepState_STEP_EXITED)
	want := "slurmstepd-gpu-0001: error: execve(): bad interpreter(/no/such/interpreter -x): No such file or directory\n"
	if got := readFile(t, out); got != want || ex.ExitCode != 2 {
		t.Fatalf("a missing interpreter: output %q, exit %d; want %q, exit 2", got, ex.ExitCode, want)
	}
}

// TestStopWritesSlurmsLineToTheErrorOutput checks that a stop with a cause
// leaves slurmstepd's line in the step's error file before the kill, and
// that a stop without one leaves none.
func TestStopWritesSlurmsLineToTheErrorOutput(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.start(t)
	for _, tc := range []struct {
		job   string
		cause eventsv1.StopCause
		want  string // "" = no line
	}{
		{"1", eventsv1.StopCause_STOP_CAUSE_TIME_LIMIT, " DUE TO TIME LIMIT ***\n"},
		{"2", eventsv1.StopCause_STOP_CAUSE_CANCELLED, " ***\n"},
		{"3", eventsv1.StopCause_STOP_CAUSE_UNSPECIFIED, ""},
	} {
		st := startStep(tc.job, "echo up; sleep 60", nil, filepath.Join(e.shared, "out-"+tc.job))
		st.ErrorPath = filepath.Join(e.shared, "err-"+tc.job)
		publish(t, e.broker, command(st))
		waitStep(t, e.broker, tc.job, eventsv1.StepState_STEP_RUNNING)
		testkit.WaitFor(t, wait, "the step's first output", func() (bool, error) { return readFile(t, st.OutputPath) == "up\n", nil })
		publish(t, e.broker, command(&eventsv1.StopStep{Job: st.Job, Attempt: 1, Node: node, Reason: "test", Cause: tc.cause}))
		waitStep(t, e.broker, tc.job, eventsv1.StepState_STEP_KILLED)
		got := readFile(t, st.ErrorPath)
		prefix := "slurmstepd-gpu-0001: error: *** JOB " + tc.job + " ON gpu-0001 CANCELLED AT "
		switch {
		case tc.want == "" && got != "":
			t.Errorf("cause %s: error file %q, want nothing", tc.cause, got)
		case tc.want != "" && (!strings.HasPrefix(got, prefix) || !strings.HasSuffix(got, tc.want)):
			t.Errorf("cause %s: error file %q, want %q...%q", tc.cause, got, prefix, tc.want)
		}
		if out := readFile(t, st.OutputPath); out != "up\n" {
			t.Errorf("cause %s: output file %q: the line belongs in the error file only", tc.cause, out)
		}
	}
}

// TestSignalledStepReportsItsCheckpointAtOnce: with a progress interval of
// an hour, a checkpoint a step writes on its USR1 (as the trainer does for
// a checkpoint-aware drain or checkpoint on failure) is still reported
// promptly: after a SignalStep the agent looks at progress every
// SignalledProgressInterval. Only that path can report within the test.
func TestSignalledStepReportsItsCheckpointAtOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.progressInterval = time.Hour
	e.start(t)
	script := `trap 'printf "{\"step\": 7, \"checkpoint_step\": 7}" > "$LOOM_PROGRESS_FILE.tmp" && mv "$LOOM_PROGRESS_FILE.tmp" "$LOOM_PROGRESS_FILE"' USR1
echo ready > ckpt.ready
while :; do sleep 0.05; done`
	publish(t, e.broker, command(startStep("1", script, nil, filepath.Join(e.shared, "slurm-1.out"))))
	waitStep(t, e.broker, "1", eventsv1.StepState_STEP_RUNNING)
	testkit.WaitFor(t, wait, "the step to set its trap", func() (bool, error) {
		return readFile(t, filepath.Join(e.shared, "ckpt.ready")) != "", nil
	})
	publish(t, e.broker, command(&eventsv1.SignalStep{Job: "projects/p/jobs/1", Attempt: 1, Node: node, Signal: "USR1"}))
	p := testkit.WaitEvent(t, e.broker, topics.StepEvents, wait, func(ev envelope.Event) bool {
		p, ok := ev.Payload.(*eventsv1.StepProgress)
		return ok && p.Job == "projects/p/jobs/1" && p.CheckpointStep == 7
	}).Payload.(*eventsv1.StepProgress)
	if p.Step != 7 || p.Attempt != 1 || p.Node != node {
		t.Fatalf("progress after the signal = %v", p)
	}
	publish(t, e.broker, command(&eventsv1.StopStep{Job: "projects/p/jobs/1", Attempt: 1, Node: node, Reason: "done"}))
	waitStep(t, e.broker, "1", eventsv1.StepState_STEP_KILLED)
}

// TestSignalBeforeTheProgramIsUpIsSentAgain: a signal that reaches a step
// before its program handles it is lost when the program catches it and
// drops it, as a Go program does until its signal.Notify (`loom train`
// for its first ~0.1-0.5 s): checkpoint on failure then waited its whole
// -failure-checkpoint-wait for a checkpoint that could not come. The agent
// sends it again once the program has written its progress file, which
// the trainer does only after it handles the signal. Here the script drops
// the first USR1, then sets its checkpoint trap and writes its progress.
// The first USR1 goes once the script's first trap is set, as a Go
// program's handlers are from its start: RUNNING is the process started,
// not its trap set, and a USR1 before the trap would end the shell.
func TestSignalBeforeTheProgramIsUpIsSentAgain(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.progressInterval = time.Hour
	e.start(t)
	script := `trap 'echo dropped > early.signal' USR1
echo ready > ready
while [ ! -e early.signal ]; do sleep 0.02; done
trap 'printf "{\"step\": 7, \"checkpoint_step\": 7}" > "$LOOM_PROGRESS_FILE.tmp" && mv "$LOOM_PROGRESS_FILE.tmp" "$LOOM_PROGRESS_FILE"' USR1
printf '{"step": 1}' > "$LOOM_PROGRESS_FILE.tmp" && mv "$LOOM_PROGRESS_FILE.tmp" "$LOOM_PROGRESS_FILE"
while :; do sleep 0.05; done`
	publish(t, e.broker, command(startStep("1", script, nil, filepath.Join(e.shared, "slurm-1.out"))))
	waitStep(t, e.broker, "1", eventsv1.StepState_STEP_RUNNING)
	testkit.WaitFor(t, wait, "the step to set its first trap", func() (bool, error) {
		return readFile(t, filepath.Join(e.shared, "ready")) != "", nil
	})
	publish(t, e.broker, command(&eventsv1.SignalStep{Job: "projects/p/jobs/1", Attempt: 1, Node: node, Signal: "USR1"}))
	testkit.WaitFor(t, wait, "the step to drop the first signal", func() (bool, error) {
		return readFile(t, filepath.Join(e.shared, "early.signal")) != "", nil
	})
	p := testkit.WaitEvent(t, e.broker, topics.StepEvents, wait, func(ev envelope.Event) bool {
		p, ok := ev.Payload.(*eventsv1.StepProgress)
		return ok && p.Job == "projects/p/jobs/1" && p.CheckpointStep == 7
	}).Payload.(*eventsv1.StepProgress)
	if p.Step != 7 || p.Attempt != 1 || p.Node != node {
		t.Fatalf("progress after the signal = %v", p)
	}
	publish(t, e.broker, command(&eventsv1.StopStep{Job: "projects/p/jobs/1", Attempt: 1, Node: node, Reason: "done"}))
	waitStep(t, e.broker, "1", eventsv1.StepState_STEP_KILLED)
}

// TestEarlyStopSignalIsNotSentAgain: only a signal a program may have
// dropped before it was up is sent again (USR1 for a checkpoint). A TERM,
// INT or HUP ends a program that has not caught it yet, and one that has
// often takes a second as "now, without cleaning up"; STOP and CONT sent
// again would undo a later user's signal. A user's scancel --signal=TERM
// that came before the progress file, whose handler then writes it, must
// reach the program once, as Slurm sends it.
func TestEarlyStopSignalIsNotSentAgain(t *testing.T) {
	t.Parallel()
	// bash runs pending traps by signal number: a TERM sent again before
	// the WINCH (28 > 15) is in the log before it.
	log := earlySignalLog(t, `trap 'echo TERM >> sig.log; printf "{\"step\": 1}" > "$LOOM_PROGRESS_FILE.tmp" && mv "$LOOM_PROGRESS_FILE.tmp" "$LOOM_PROGRESS_FILE"' TERM
trap 'echo WINCH >> sig.log; trap - TERM' WINCH
echo ready > ready
while :; do sleep 0.05; done`, "TERM")
	if n := strings.Count(log, "TERM"); n != 1 {
		t.Fatalf("the step got TERM %d times, want 1 (log %q)", n, log)
	}
}

// TestEarlySignalIsNotSentAfterALaterOne: the last signal decides. A USR1
// that came before the progress file, then a TERM (whose handler writes
// the file and cleans up), must not be followed by that USR1 again: sent
// after the TERM it would start a checkpoint in a program told to stop.
func TestEarlySignalIsNotSentAfterALaterOne(t *testing.T) {
	t.Parallel()
	// bash runs pending traps by signal number: a USR1 (10) sent again
	// before the WINCH (28) is in the log before it.
	log := earlySignalLog(t, `trap 'echo USR1 >> sig.log' USR1
trap 'echo TERM >> sig.log; printf "{\"step\": 1}" > "$LOOM_PROGRESS_FILE.tmp" && mv "$LOOM_PROGRESS_FILE.tmp" "$LOOM_PROGRESS_FILE"' TERM
trap 'echo WINCH >> sig.log; trap - TERM' WINCH
echo ready > ready
while :; do sleep 0.05; done`, "USR1", "TERM")
	if n := strings.Count(log, "USR1"); n != 1 {
		t.Fatalf("the step got USR1 %d times, want 1 (log %q)", n, log)
	}
}

// earlySignalLog runs script as job 1's step on an agent that looks at
// progress only when asked (a step's first report, a signal), sends it
// signals in order before its progress file exists (each but the last
// waited for in its sig.log; the last, whose trap writes the progress
// file, waited for in the step's progress report, after which a signal
// sent again has gone), then WINCH, and returns sig.log once WINCH is
// in it. The step is stopped at the end. The script writes the file
// "ready" once its traps are set: the signals wait for it, since RUNNING
// is the process started, not its traps set, and a signal before them
// would end the shell (a program's handlers here stand for a Go
// program's, which are set from its start).
func earlySignalLog(t *testing.T, script string, signals ...string) string {
	t.Helper()
	e := newEnv(t)
	e.progressInterval = time.Hour
	e.start(t)
	sigLog := filepath.Join(e.shared, "sig.log")
	signal := func(name string) {
		publish(t, e.broker, command(&eventsv1.SignalStep{Job: "projects/p/jobs/1", Attempt: 1, Node: node, Signal: name}))
	}
	publish(t, e.broker, command(startStep("1", script, nil, filepath.Join(e.shared, "slurm-1.out"))))
	waitStep(t, e.broker, "1", eventsv1.StepState_STEP_RUNNING)
	testkit.WaitFor(t, wait, "the step to set its traps", func() (bool, error) {
		return readFile(t, filepath.Join(e.shared, "ready")) != "", nil
	})
	for i, name := range signals {
		signal(name)
		if i < len(signals)-1 {
			testkit.WaitFor(t, wait, "the step to log the "+name, func() (bool, error) {
				return strings.Contains(readFile(t, sigLog), name), nil
			})
		}
	}
	testkit.WaitEvent(t, e.broker, topics.StepEvents, wait, func(ev envelope.Event) bool {
		p, ok := ev.Payload.(*eventsv1.StepProgress)
		return ok && p.Job == "projects/p/jobs/1" && p.Step == 1
	})
	signal("WINCH")
	var log string
	testkit.WaitFor(t, wait, "the step to log the WINCH", func() (bool, error) {
		log = readFile(t, sigLog)
		return strings.Contains(log, "WINCH"), nil
	})
	publish(t, e.broker, command(&eventsv1.StopStep{Job: "projects/p/jobs/1", Attempt: 1, Node: node, Reason: "done"}))
	waitStep(t, e.broker, "1", eventsv1.StepState_STEP_KILLED)
	return log
}

// A batch script that exits 130 and one killed by SIGINT both end with code
// 130, but only the second was killed: the agent says which by the signal,
// as Slurm's ExitCode 130:0 and 0:2 (checked with scripts/slurm-local.sh);
// and so for each task of a job step (srun's "Exited with exit code 130"
// and "Killed").
func TestExitSignalApartFromExitCode(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.start(t)
	cases := []struct {
		job, script string
		code, sig   int32
	}{
		{"1", "exit 130", 130, 0},
		{"2", "kill -INT $$; sleep 5", 130, 2},
		{"3", "exit 3", 3, 0},
	}
	for _, tc := range cases {
		publish(t, e.broker, command(startStep(tc.job, tc.script, nil, filepath.Join(e.shared, "slurm-"+tc.job+".out"))))
	}
	for _, tc := range cases {
		ex := waitStep(t, e.broker, tc.job, eventsv1.StepState_STEP_EXITED)
		if ex.GetExitCode() != tc.code || ex.ExitSignal == nil || ex.GetExitSignal() != tc.sig {
			t.Errorf("script %q: exit %d, signal %v; want %d, signal %d", tc.script, ex.GetExitCode(), ex.ExitSignal, tc.code, tc.sig)
		}
	}
	outDir := filepath.Join(e.shared, ".loom", "steps", "9.0")
	publish(t, e.broker, command(launch("9", 0, 0, 3, outDir, "sh", "-c",
		`case $SLURM_PROCID in 0) exit 137;; 1) kill -KILL $$;; *) exit 0;; esac`)))
	tc := waitTasks(t, e.broker, "9", 0, eventsv1.StepState_STEP_EXITED)
	if !reflect.DeepEqual(tc.GetExitCodes(), []int32{137, 137, 0}) || !reflect.DeepEqual(tc.GetExitSignals(), []int32{0, 9, 0}) {
		t.Fatalf("tasks: exit codes %v, signals %v; want 137 137 0, signals 0 9 0", tc.GetExitCodes(), tc.GetExitSignals())
	}
}
