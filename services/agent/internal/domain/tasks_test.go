package domain

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
)

func TestLaunchDecisions(t *testing.T) {
	t.Parallel()
	self := Self{Node: "c/nodes/a", Cluster: "c"}
	now := time.Unix(100, 0)
	cmd := &eventsv1.LaunchTasks{Job: "p/jobs/1", JobId: "1", Attempt: 2, StepId: 3, Node: self.Node, FirstRank: 4, Ntasks: 2,
		Command: []string{"true"}}
	rec, ended, skip := Launch(self, nil, nil, 0, cmd, now)
	if skip != "" || ended || rec.Phase != Starting || rec.Key() != "p/jobs/1#2.3" || rec.RunKey() != "p/jobs/1#2" || rec.FirstRank != 4 || rec.NTasks != 2 {
		t.Fatalf("Launch = %+v %v %q", rec, ended, skip)
	}
	if _, _, skip := Launch(self, rec, nil, 0, cmd, now); skip == "" {
		t.Error("a second launch of the same tasks was not skipped")
	}
	other := proto.Clone(cmd).(*eventsv1.LaunchTasks)
	other.Node = "c/nodes/b"
	if _, _, skip := Launch(self, nil, nil, 0, other, now); skip == "" {
		t.Error("another node's tasks were not skipped")
	}
	// The run ended here: KILLED at once, never started.
	run := &Step{Job: "p/jobs/1", Attempt: 2, Phase: Killed}
	if rec, ended, _ := Launch(self, nil, run, 0, cmd, now); !ended || rec.Phase != Killed {
		t.Errorf("launch after the run ended: %+v", rec)
	}
	// Bad commands fail to start, exit code 1 per task.
	bad := proto.Clone(cmd).(*eventsv1.LaunchTasks)
	bad.Command = nil
	if rec, ended, _ := Launch(self, nil, nil, 0, bad, now); !ended || rec.Phase != FailedToStart || !reflect.DeepEqual(rec.ExitCodes, []int32{1, 1}) {
		t.Errorf("no command: %+v", rec)
	}
	bad = proto.Clone(cmd).(*eventsv1.LaunchTasks)
	bad.Ntasks = 0
	if rec, ended, _ := Launch(self, nil, nil, 0, bad, now); !ended || rec.Phase != FailedToStart || !strings.Contains(rec.Message, "bad launch") {
		t.Errorf("no tasks: %+v", rec)
	}
	// A cyclic layout's ranks (srun -m cyclic): one per task, each a
	// rank of the step once; else refused before anything runs.
	for _, ranks := range [][]int32{{1}, {1, 1}, {1, -1}, {1, 99}} {
		bad = proto.Clone(cmd).(*eventsv1.LaunchTasks)
		bad.TotalTasks, bad.Ranks = 4, ranks
		if rec, ended, _ := Launch(self, nil, nil, 0, bad, now); !ended || rec.Phase != FailedToStart || !strings.Contains(rec.Message, "bad launch") {
			t.Errorf("ranks %v: %+v", ranks, rec)
		}
	}
	good := proto.Clone(cmd).(*eventsv1.LaunchTasks)
	good.TotalTasks, good.Ranks = 4, []int32{1, 3}
	if rec, ended, _ := Launch(self, nil, nil, 0, good, now); ended || rec.Phase != Starting || TaskRank(good, 1) != 3 {
		t.Errorf("ranks 1, 3: %+v, task 1 rank %d", rec, TaskRank(good, 1))
	}
	if TaskRank(cmd, 1) != cmd.GetFirstRank()+1 {
		t.Errorf("without ranks: task 1 rank %d, first %d", TaskRank(cmd, 1), cmd.GetFirstRank())
	}
}

func TestTasksLifecycle(t *testing.T) {
	t.Parallel()
	self := Self{Node: "c/nodes/a", Cluster: "c"}
	now := time.Unix(100, 0)
	rec := &Tasks{Job: "p/jobs/1", Attempt: 1, StepID: 0, FirstRank: 2, NTasks: 2, Phase: Starting}
	run := TasksStarted(rec, []int{10, 11}, []uint64{1, 2})
	if ev := run.Event(self); ev.State != eventsv1.StepState_STEP_RUNNING || ev.FirstRank != 2 || len(ev.ExitCodes) != 0 {
		t.Fatalf("running event %v", ev)
	}
	end := TasksEnded(run, []Exit{{Code: 0}, {Code: 137, Signal: "killed"}}, now)
	if ev := end.Event(self); ev.State != eventsv1.StepState_STEP_EXITED || !reflect.DeepEqual(ev.ExitCodes, []int32{0, 137}) {
		t.Fatalf("exit event %v", ev)
	}
	if oom := TasksEnded(run, []Exit{{Code: 0}, {Code: 137, Signal: "killed", OOM: true}}, now); oom.Phase != Exited ||
		!strings.Contains(oom.Message, "1 of 2 task(s) failed, 1 out of memory") {
		t.Fatalf("end with a task out of memory: %+v", oom)
	}
	d := StopTasks(run, run.Job, 1, 0, "", now)
	if !d.Kill || d.Rec.StopReason != "stop requested" {
		t.Fatalf("stop of running tasks: %+v", d)
	}
	if k := TasksEnded(d.Rec, []Exit{{Code: 143}, {Code: 143}}, now); k.Phase != Killed {
		t.Fatalf("end after a stop: %+v", k)
	}
	if d := StopTasks(end, end.Job, 1, 0, "x", now); d.Rec != nil || d.Kill {
		t.Fatalf("stop of ended tasks changed them: %+v", d)
	}
	if d := StopTasks(nil, "p/jobs/1", 1, 5, "job ended", now); d.Kill || d.Rec.Phase != Killed || d.Rec.Key() != "p/jobs/1#1.5" {
		t.Fatalf("stop before launch: %+v", d)
	}
	if l := MarkTasksLost(run, "gone", now); l.Phase != Lost || !reflect.DeepEqual(l.ExitCodes, []int32{1, 1}) {
		t.Fatalf("lost: %+v", l)
	}
}
