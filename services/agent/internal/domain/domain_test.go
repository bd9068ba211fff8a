package domain

import (
	"strings"
	"testing"
	"time"

	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
)

var (
	t0   = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	self = Self{Node: "projects/p/clusters/c/nodes/gpu-0001", Cluster: "projects/p/clusters/c"}
)

func startCmd(node string) *eventsv1.StartStep {
	return &eventsv1.StartStep{Job: "projects/p/jobs/7", JobId: "7", Attempt: 1, Node: node, Script: "true"}
}

func TestStart(t *testing.T) {
	t.Parallel()
	rec, skip := Start(self, nil, startCmd(self.Node), t0)
	if skip != "" || rec.Phase != Starting || rec.Key() != "projects/p/jobs/7#1" || rec.JobID != "7" {
		t.Fatalf("Start = %+v, %q", rec, skip)
	}
	if _, skip := Start(self, nil, startCmd("projects/p/clusters/c/nodes/gpu-0002"), t0); skip == "" {
		t.Fatal("started another node's step")
	}
	for _, ph := range []Phase{Starting, Running, Exited, Killed, Lost, FailedToStart} {
		if _, skip := Start(self, &Step{Job: "projects/p/jobs/7", Attempt: 1, Phase: ph}, startCmd(self.Node), t0); skip == "" {
			t.Fatalf("started a step already %s", ph)
		}
	}
}

func TestRunAndExit(t *testing.T) {
	t.Parallel()
	rec, _ := Start(self, nil, startCmd(self.Node), t0)
	run := Started(rec, 4242, 99, "/shared/slurm-7.out")
	ev := run.Event(self)
	if ev.State != eventsv1.StepState_STEP_RUNNING || ev.Pid != 4242 || ev.Node != self.Node || ev.Cluster != self.Cluster || ev.Attempt != 1 {
		t.Fatalf("running event = %v", ev)
	}
	if rec.Phase != Starting {
		t.Fatal("Started modified its input")
	}

	tests := []struct {
		name  string
		stop  string
		exit  Exit
		state eventsv1.StepState
		code  int32
		msg   string
	}{
		{"exit 3", "", Exit{Code: 3}, eventsv1.StepState_STEP_EXITED, 3, "exited with code 3"},
		{"exit 0", "", Exit{Code: 0}, eventsv1.StepState_STEP_EXITED, 0, "exited with code 0"},
		{"signal", "", Exit{Code: 137, Signal: "killed"}, eventsv1.StepState_STEP_EXITED, 137, "signal killed"},
		{"out of memory", "", Exit{Code: 137, Signal: "killed", OOM: true}, eventsv1.StepState_STEP_EXITED, 137, "out of memory (exit code 137)"},
		{"stopped", "job cancelled", Exit{Code: 143, Signal: "terminated"}, eventsv1.StepState_STEP_KILLED, 143, "killed: job cancelled"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := run
			if tc.stop != "" {
				d := Stop(self, run, &eventsv1.StopStep{Job: run.Job, Attempt: 1, Node: self.Node, Reason: tc.stop}, t0)
				if !d.Kill || d.Rec.StopReason != tc.stop || d.Rec.Phase != Running {
					t.Fatalf("stop = %+v", d)
				}
				r = d.Rec
			}
			end := Ended(r, tc.exit, t0.Add(time.Second))
			ev := end.Event(self)
			if ev.State != tc.state || ev.ExitCode != tc.code || !strings.Contains(ev.Message, tc.msg) || !end.Phase.Terminal() || end.Ended.IsZero() {
				t.Fatalf("exit event = %v (record %+v)", ev, end)
			}
		})
	}
}

func TestStop(t *testing.T) {
	t.Parallel()
	stop := &eventsv1.StopStep{Job: "projects/p/jobs/7", Attempt: 1, Node: self.Node}
	if d := Stop(Self{Node: "other"}, nil, stop, t0); d.Rec != nil || d.Kill {
		t.Fatalf("acted on another node's stop: %+v", d)
	}
	d := Stop(self, nil, stop, t0)
	if d.Kill || d.Rec == nil || d.Rec.Phase != Killed || d.Rec.Event(self).State != eventsv1.StepState_STEP_KILLED {
		t.Fatalf("stop of an unknown step = %+v", d)
	}
	if _, skip := Start(self, d.Rec, startCmd(self.Node), t0); skip == "" {
		t.Fatal("a step stopped before it started was started later")
	}
	running := &Step{Job: stop.Job, Attempt: 1, Phase: Running, PID: 10, StopReason: "x"}
	if d := Stop(self, running, stop, t0); d.Rec != nil || d.Kill {
		t.Fatalf("second stop acted again: %+v", d)
	}
	done := &Step{Job: stop.Job, Attempt: 1, Phase: Exited}
	if d := Stop(self, done, stop, t0); d.Rec != nil || d.Kill {
		t.Fatalf("stop of a finished step acted: %+v", d)
	}
}

func TestLostAndFailed(t *testing.T) {
	t.Parallel()
	rec, _ := Start(self, nil, startCmd(self.Node), t0)
	if ev := MarkLost(Started(rec, 1, 2, ""), "agent restarted", t0).Event(self); ev.State != eventsv1.StepState_STEP_LOST || ev.Message != "agent restarted" {
		t.Fatalf("lost = %v", ev)
	}
	if ev := StartFailed(rec, "exec: nope", t0).Event(self); ev.State != eventsv1.StepState_STEP_FAILED_TO_START || ev.Message != "exec: nope" {
		t.Fatalf("failed = %v", ev)
	}
}

func TestTelemetry(t *testing.T) {
	t.Parallel()
	r := Registered(self, "gpu-0001", 10, 8, "boot")
	if r.Node != self.Node || r.Cluster != self.Cluster || r.Hostname != "gpu-0001" || r.Pid != 10 || r.Gpus != 8 || r.BootId != "boot" {
		t.Fatalf("registered = %v", r)
	}
	h := Heartbeat(self, "boot", t0, 2)
	if h.BootId != "boot" || !h.Time.AsTime().Equal(t0) || h.RunningSteps != 2 {
		t.Fatalf("heartbeat = %v", h)
	}
}

func TestSignal(t *testing.T) {
	t.Parallel()
	cmd := &eventsv1.SignalStep{Job: "projects/p/jobs/7", Attempt: 1, Node: self.Node, Signal: "USR1"}
	running := &Step{Job: "projects/p/jobs/7", Attempt: 1, Phase: Running, PID: 42}
	if send, skip := Signal(self, running, cmd); !send || skip != "" {
		t.Fatalf("Signal(running) = %v, %q; want it sent", send, skip)
	}
	other := &eventsv1.SignalStep{Job: cmd.Job, Attempt: 1, Node: "projects/p/clusters/c/nodes/gpu-0002", Signal: "USR1"}
	for name, tc := range map[string]struct {
		rec  *Step
		cmd  *eventsv1.SignalStep
		want string
	}{
		"other node": {running, other, "another node"},
		"never":      {nil, cmd, "never started"},
		"starting":   {&Step{Job: cmd.Job, Attempt: 1, Phase: Starting}, cmd, "STARTING, not running"},
		"exited":     {&Step{Job: cmd.Job, Attempt: 1, Phase: Exited}, cmd, "EXITED, not running"},
	} {
		if send, skip := Signal(self, tc.rec, tc.cmd); send || !strings.Contains(skip, tc.want) {
			t.Errorf("%s: Signal = %v, %q; want skipped with %q", name, send, skip, tc.want)
		}
	}
}

func TestStopLine(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 29, 21, 34, 33, 0, time.Local)
	for cause, want := range map[eventsv1.StopCause]string{
		eventsv1.StopCause_STOP_CAUSE_CANCELLED:    "slurmstepd-node1: error: *** JOB 3 ON node1 CANCELLED AT 2026-11-29T21:34:33 ***\n",
		eventsv1.StopCause_STOP_CAUSE_TIME_LIMIT:   "slurmstepd-node1: error: *** JOB 3 ON node1 CANCELLED AT 2026-11-29T21:34:33 DUE TO TIME LIMIT ***\n",
		eventsv1.StopCause_STOP_CAUSE_PREEMPTED:    "slurmstepd-node1: error: *** JOB 3 ON node1 CANCELLED AT 2026-11-29T21:34:33 DUE TO PREEMPTION ***\n",
		eventsv1.StopCause_STOP_CAUSE_REQUEUED:     "slurmstepd-node1: error: *** JOB 3 ON node1 CANCELLED AT 2026-11-29T21:34:33 DUE TO JOB REQUEUE ***\n",
		eventsv1.StopCause_STOP_CAUSE_NODE_FAILURE: "slurmstepd-node1: error: *** JOB 3 ON node1 CANCELLED AT 2026-11-29T21:34:33 DUE TO NODE FAILURE ***\n",
		eventsv1.StopCause_STOP_CAUSE_UNSPECIFIED:  "",
	} {
		if got := StopLine("3", "node1", cause, at); got != want {
			t.Errorf("StopLine(%s) = %q, want %q", cause, got, want)
		}
	}
	if got := StopLine("", "node1", eventsv1.StopCause_STOP_CAUSE_CANCELLED, at); got != "" {
		t.Errorf("a step without a job id: %q, want no line", got)
	}
}
