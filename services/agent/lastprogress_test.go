package agent

import (
	"fmt"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/loom-ml/loom/libs/proc"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
)

// saveCheckpoint is shell that writes a progress report of a checkpoint at
// step n to the step's LOOM_PROGRESS_FILE, by rename, as the trainer does.
func saveCheckpoint(n int) string {
	return fmt.Sprintf(`printf '{"step": %d, "checkpoint_step": %d, "checkpoint_time": "2026-12-01T10:00:00Z"}' > "$LOOM_PROGRESS_FILE.tmp" && mv "$LOOM_PROGRESS_FILE.tmp" "$LOOM_PROGRESS_FILE"`, n, n)
}

// runEvents is the sequence of job's step events on the bus, in the order
// the scheduler reads them (one partition: keyed by job): its step's
// states, its tasks' as "tasks-STATE", and "progress@N" for a StepProgress
// at checkpoint step N.
func runEvents(t *testing.T, broker, job string) string {
	t.Helper()
	var s []string
	for _, ev := range testkit.Delivered(t, broker, topics.StepEvents) {
		switch p := ev.Payload.(type) {
		case *eventsv1.StepChanged:
			if p.Job == "projects/p/jobs/"+job {
				s = append(s, strings.TrimPrefix(p.State.String(), "STEP_"))
			}
		case *eventsv1.TasksChanged:
			if p.Job == "projects/p/jobs/"+job {
				s = append(s, "tasks-"+strings.TrimPrefix(p.State.String(), "STEP_"))
			}
		case *eventsv1.StepProgress:
			if p.Job == "projects/p/jobs/"+job {
				s = append(s, fmt.Sprintf("progress@%d", p.CheckpointStep))
			}
		}
	}
	return strings.Join(s, ",")
}

// TestLastProgressGoesOutBeforeTheEnd: with a progress interval of an
// hour, so that no periodic look can report it, a checkpoint a program
// writes just before it ends is reported, and ahead of its end on the
// step's partition (where the scheduler still takes it: it drops progress
// of a run it has released): a program that exits by itself (EXITED), one
// that saves on its stop's SIGTERM (KILLED), and one that saves on a
// signal and exits (the checkpoint-aware drain's USR1; there the signal's
// quicker looks may report it too, but never only after the end).
func TestLastProgressGoesOutBeforeTheEnd(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.progressInterval = time.Hour
	e.start(t)
	out := func(job string) string { return filepath.Join(e.shared, "slurm-"+job+".out") }
	publish(t, e.broker,
		command(startStep("1", saveCheckpoint(12)+"; exit 3", nil, out("1"))),
		command(startStep("2", `trap '`+strings.ReplaceAll(saveCheckpoint(20), `'`, `'\''`)+`; exit 143' TERM
echo ready > ready-2
while :; do sleep 0.05; done`, nil, out("2"))),
		command(startStep("3", `trap '`+strings.ReplaceAll(saveCheckpoint(30), `'`, `'\''`)+`; exit 0' USR1
echo ready > ready-3
while :; do sleep 0.05; done`, nil, out("3"))))
	if ev := waitStep(t, e.broker, "1", eventsv1.StepState_STEP_EXITED); ev.ExitCode != 3 {
		t.Fatalf("job 1 ended %v, want EXITED 3", ev)
	}
	for _, job := range []string{"2", "3"} {
		waitStep(t, e.broker, job, eventsv1.StepState_STEP_RUNNING)
		testkit.WaitFor(t, wait, "job "+job+" to set its trap", func() (bool, error) {
			return readFile(t, filepath.Join(e.shared, "ready-"+job)) != "", nil
		})
	}
	publish(t, e.broker,
		command(&eventsv1.StopStep{Job: "projects/p/jobs/2", Attempt: 1, Node: node, Reason: "requeued",
			Cause: eventsv1.StopCause_STOP_CAUSE_REQUEUED}),
		command(&eventsv1.SignalStep{Job: "projects/p/jobs/3", Attempt: 1, Node: node, Signal: "USR1"}))
	waitStep(t, e.broker, "2", eventsv1.StepState_STEP_KILLED)
	waitStep(t, e.broker, "3", eventsv1.StepState_STEP_EXITED)
	for job, want := range map[string]string{"1": "RUNNING,progress@12,EXITED", "2": "RUNNING,progress@20,KILLED"} {
		if got := runEvents(t, e.broker, job); got != want {
			t.Errorf("job %s's events = %s, want %s: its last checkpoint, once, ahead of its end", job, got, want)
		}
	}
	// Job 3: its checkpoint before its end; a periodic look that raced
	// with the end may repeat it after.
	if got := runEvents(t, e.broker, "3"); !strings.HasPrefix(got, "RUNNING,progress@30,") || !strings.Contains(got, ",EXITED") ||
		strings.Index(got, "progress@30") > strings.Index(got, "EXITED") {
		t.Errorf("job 3's events = %s, want its checkpoint at step 30 ahead of its end", got)
	}
}

// TestLastProgressOfWhatEndedWhileTheAgentWasDown: a step, and srun tasks
// on a node where their run has no step, that write a checkpoint and end
// while their agent is dead (kill -9) have that checkpoint reported by the
// restarted agent, ahead of their end.
func TestLastProgressOfWhatEndedWhileTheAgentWasDown(t *testing.T) {
	t.Parallel()
	// Jobs 140 and 142, used by no other test here: a restarted agent
	// kills whatever a step that ended while it was down left behind, found
	// by its LOOM_STEP_ID (node, job, attempt), and the tests of this
	// package share the node name — with job 1 it killed a parallel test's
	// job 1.
	for _, c := range []struct {
		what, job  string
		checkpoint int
		launch     func(e *env, script string) *eventsv1.LaunchTasks // nil: a step
		want       string
	}{
		{what: "a step", job: "140", checkpoint: 40, want: "RUNNING,progress@40,EXITED"},
		{what: "tasks", job: "142", checkpoint: 42, want: "tasks-RUNNING,progress@42,tasks-EXITED", launch: func(e *env, script string) *eventsv1.LaunchTasks {
			return launch("142", 0, 0, 1, filepath.Join(e.shared, ".loom", "steps", "142.0"), "sh", "-c", script)
		}},
	} {
		t.Run(c.what, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.progressInterval = time.Hour
			first := e.agentProcess(t)
			script := `while [ ! -e "` + e.shared + `/go" ]; do sleep 0.05; done; ` + saveCheckpoint(c.checkpoint) + `; exit 5`
			var pid int
			if c.launch == nil {
				publish(t, e.broker, command(startStep(c.job, script, nil, filepath.Join(e.shared, "slurm-"+c.job+".out"))))
				pid = int(waitStep(t, e.broker, c.job, eventsv1.StepState_STEP_RUNNING).Pid)
			} else {
				publish(t, e.broker, command(c.launch(e, script)))
				waitTasks(t, e.broker, c.job, 0, eventsv1.StepState_STEP_RUNNING)
				var err error
				if pid, _, err = proc.ReadPIDFile(filepath.Join(e.work, StepsDir, url.PathEscape("projects/p/jobs/"+c.job+"#1.0/0")+".pid")); err != nil {
					t.Fatalf("the task has no pidfile: %v", err)
				}
			}
			killAgent(t, first)
			e.touch(t, "go")
			testkit.WaitFor(t, wait, "the shim to end while no agent runs", func() (bool, error) { return !proc.Alive(pid, 0), nil })
			e.start(t)
			if c.launch == nil {
				if ev := waitStep(t, e.broker, c.job, eventsv1.StepState_STEP_EXITED); ev.ExitCode != 5 {
					t.Fatalf("step ended while the agent was down: %v, want EXITED 5", ev)
				}
			} else if ev := waitTasks(t, e.broker, c.job, 0, eventsv1.StepState_STEP_EXITED); !slices.Equal(ev.ExitCodes, []int32{5}) {
				t.Fatalf("tasks ended while the agent was down: %v, want EXITED [5]", ev)
			}
			if got := runEvents(t, e.broker, c.job); got != c.want {
				t.Fatalf("events = %s, want %s: the checkpoint written ahead of the end", got, c.want)
			}
		})
	}
}

// TestLastProgressOfTasksGoesOutBeforeTheirEnd: srun tasks on a node where
// their run has no step (the batch step runs on another node) have the
// checkpoint they wrote just before they ended reported ahead of their
// end, with a progress interval of an hour (no periodic look reports it),
// and once: a later job step of the run that wrote nothing new reports no
// progress.
func TestLastProgressOfTasksGoesOutBeforeTheirEnd(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.progressInterval = time.Hour
	e.start(t)
	dir := filepath.Join(e.shared, ".loom", "steps")
	publish(t, e.broker, command(launch("141", 0, 0, 1, filepath.Join(dir, "141.0"), "sh", "-c", saveCheckpoint(41)+"; exit 0")))
	waitTasks(t, e.broker, "141", 0, eventsv1.StepState_STEP_EXITED)
	publish(t, e.broker, command(launch("141", 1, 0, 1, filepath.Join(dir, "141.1"), "true")))
	waitTasks(t, e.broker, "141", 1, eventsv1.StepState_STEP_EXITED)
	if got, want := runEvents(t, e.broker, "141"), "tasks-RUNNING,progress@41,tasks-EXITED,tasks-RUNNING,tasks-EXITED"; got != want {
		t.Fatalf("events = %s, want %s: the tasks' checkpoint, once, ahead of their end", got, want)
	}
}
