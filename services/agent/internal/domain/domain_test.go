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
	rec, skip := Start(self, nil, 0, startCmd(self.Node), t0)
	if skip != "" || rec.Phase != Starting || rec.Key() != "projects/p/jobs/7#1" || rec.JobID != "7" {
		t.Fatalf("Start = %+v, %q", rec, skip)
	}
	if _, skip := Start(self, nil, 0, startCmd("projects/p/clusters/c/nodes/gpu-0002"), t0); skip == "" {
		t.Fatal("started another node's step")
	}
	for _, ph := range []Phase{Starting, Running, Exited, Killed, Lost, FailedToStart} {
		if _, skip := Start(self, &Step{Job: "projects/p/jobs/7", Attempt: 1, Phase: ph}, 0, startCmd(self.Node), t0); skip == "" {
			t.Fatalf("started a step already %s", ph)
		}
	}
}

// A start of an attempt older than one this node has seen is refused:
// recorded FAILED_TO_START (reported), never started.
func TestStartRefusesAStaleAttempt(t *testing.T) {
	t.Parallel()
	rec, skip := Start(self, nil, 2, startCmd(self.Node), t0)
	if skip != "" || rec.Phase != FailedToStart || !strings.Contains(rec.Message, "stale attempt 1") || rec.Ended != t0 {
		t.Fatalf("Start of attempt 1 after attempt 2 = %+v, %q; want FAILED_TO_START, stale", rec, skip)
	}
	if rec, _ := Start(self, nil, 1, startCmd(self.Node), t0); rec.Phase != Starting {
		t.Fatalf("Start of the highest attempt = %+v, want STARTING", rec)
	}
}

// What a restarted agent does with a step its predecessor left: adopt it
// while it runs, report its real exit when it ended, LOST only when nothing
// remains.
func TestRecover(t *testing.T) {
	t.Parallel()
	starting, _ := Start(self, nil, 0, startCmd(self.Node), t0)
	running := Started(starting, 4242, 99, "")
	t1 := t0.Add(time.Minute)
	if recs, adopt := Recover(running, Remains{Running: true, PID: 4242, PIDStart: 99}, t1); !adopt || len(recs) != 0 {
		t.Fatalf("a running step still running: %v, adopt %v; want adopted, nothing written", recs, adopt)
	}
	recs, adopt := Recover(starting, Remains{Running: true, PID: 4242, PIDStart: 99}, t1)
	if !adopt || len(recs) != 1 || recs[0].Phase != Running || recs[0].PID != 4242 {
		t.Fatalf("a starting step found running: %v, adopt %v; want RUNNING reported and adopted", recs, adopt)
	}
	recs, adopt = Recover(running, Remains{Exit: &Exit{Code: 3}}, t1)
	if adopt || len(recs) != 1 || recs[0].Phase != Exited || recs[0].ExitCode != 3 || recs[0].Ended != t1 {
		t.Fatalf("a step that ended meanwhile: %v; want EXITED 3", recs)
	}
	recs, _ = Recover(starting, Remains{Exit: &Exit{Code: 0}}, t1)
	if len(recs) != 2 || recs[0].Phase != Running || recs[1].Phase != Exited {
		t.Fatalf("a starting step that ended meanwhile: %v; want RUNNING then EXITED", recs)
	}
	stopping := running.clone()
	stopping.StopReason = "job cancelled"
	if recs, _ = Recover(stopping, Remains{Exit: &Exit{Code: 143, Signal: "terminated"}}, t1); recs[0].Phase != Killed {
		t.Fatalf("a step being stopped that ended meanwhile: %v; want KILLED", recs)
	}
	if recs, _ = Recover(running, Remains{Why: "gone"}, t1); len(recs) != 1 || recs[0].Phase != Lost || recs[0].Message != "gone" {
		t.Fatalf("a step of which nothing remains: %v; want LOST", recs)
	}
	if end := Ended(running, Exit{Unknown: true}, t1); end.Phase != Lost {
		t.Fatalf("an adopted step whose end is unknown: %+v; want LOST", end)
	}
}

func TestRunAndExit(t *testing.T) {
	t.Parallel()
	rec, _ := Start(self, nil, 0, startCmd(self.Node), t0)
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
	if _, skip := Start(self, d.Rec, 0, startCmd(self.Node), t0); skip == "" {
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

// TestShutdownStop: the agent's own stop marks the step node_stopping, on
// its KILLED report only (a Running record's event does not say so yet); a
// stop Loom asked first stays Loom's.
func TestShutdownStop(t *testing.T) {
	t.Parallel()
	running := &Step{Job: "projects/p/jobs/7", Attempt: 1, Phase: Running, PID: 10}
	d := ShutdownStop(self, running, "agent shutting down", t0)
	if !d.Kill || d.Rec == nil || !d.Rec.NodeStopping || d.Rec.Event(self).GetNodeStopping() {
		t.Fatalf("shutdown stop of a running step = %+v", d)
	}
	ev := Ended(d.Rec, Exit{Code: 143}, t0).Event(self)
	if ev.GetState() != eventsv1.StepState_STEP_KILLED || !ev.GetNodeStopping() || ev.GetMessage() != "killed: agent shutting down" {
		t.Fatalf("its end = %v, want KILLED with node_stopping", ev)
	}
	if ev := Ended(running, Exit{Code: 1}, t0).Event(self); ev.GetNodeStopping() {
		t.Fatalf("a step that exited on its own: %v", ev)
	}
	starting := &Step{Job: "projects/p/jobs/8", Attempt: 2, Phase: Starting}
	if d := ShutdownStop(self, starting, "agent shutting down", t0); d.Rec == nil || !d.Rec.Event(self).GetNodeStopping() || d.Rec.Attempt != 2 {
		t.Fatalf("shutdown stop of a starting step = %+v", d)
	}
	loomStopped := &Step{Job: "projects/p/jobs/7", Attempt: 1, Phase: Running, PID: 10, StopReason: "scancel"}
	if d := ShutdownStop(self, loomStopped, "agent shutting down", t0); d.Rec != nil {
		t.Fatalf("a step Loom was already stopping was taken as the node's: %+v", d)
	}
	if d := ShutdownStop(self, nil, "agent shutting down", t0); d.Rec != nil || d.Kill {
		t.Fatalf("no step: %+v", d)
	}
}

func TestLostAndFailed(t *testing.T) {
	t.Parallel()
	rec, _ := Start(self, nil, 0, startCmd(self.Node), t0)
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
