package app

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/loom-ml/loom/libs/store/storetest"
	"github.com/loom-ml/loom/libs/testkit"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	"github.com/loom-ml/loom/services/agent/internal/adapters"
	"github.com/loom-ml/loom/services/agent/internal/domain"
)

// TestRecordsKeepTheOwnersUID: a step's record and a job step's tasks'
// record keep the uid their owner resolved to when they were sent, from
// the record written before any process exists (Starting) through their
// end, so that a restarted agent looks for their processes among that
// uid's even where the owner's name no longer resolves (Runtime.Adopt).
// The owner here is the agent's own user ("").
func TestRecordsKeepTheOwnersUID(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 60*time.Second)
	f := faultyAgent(t, ctx, storetest.DropApplyRequests, nil) // never armed: no write lost
	a, st, dir, self := f.app, f.st, f.dir, f.self
	want := uint32(os.Geteuid())
	uidOf := func(what string, got *uint32) {
		t.Helper()
		if got == nil || *got != want {
			t.Fatalf("%s: owner uid %v, want %d (the agent's own user's)", what, got, want)
		}
	}

	step := &eventsv1.StartStep{Job: "projects/p/jobs/1", JobId: "1", Attempt: 1, Node: self.Node,
		Script: "exit 0", OutputPath: filepath.Join(dir, "out")}
	key := domain.Key(step.GetJob(), step.GetAttempt())
	if err := a.StartStep(ctx, "ev-start", step); err != nil {
		t.Fatal(err)
	}
	steps, err := adapters.LoadSteps(ctx, st)
	if err != nil || steps[key] == nil {
		t.Fatalf("the step's record once StartStep returned: %v, %v", steps, err)
	}
	uidOf("the step's record as StartStep returned ("+string(steps[key].Phase)+")", steps[key].OwnerUID)

	// Another job's: tasks of a run that has ended here are not started.
	tasks := &eventsv1.LaunchTasks{Job: "projects/p/jobs/2", JobId: "2", Attempt: 1, StepId: 0, Node: self.Node,
		Ntasks: 1, TotalTasks: 1, Command: []string{"true"}, OutputDir: filepath.Join(dir, "tasks")}
	if err := a.LaunchTasks(ctx, "ev-launch", tasks); err != nil {
		t.Fatal(err)
	}
	all, err := adapters.LoadTasks(ctx, st)
	if err != nil || len(all) != 1 {
		t.Fatalf("the tasks' record once LaunchTasks returned: %v, %v", all, err)
	}
	for _, rec := range all {
		uidOf("the tasks' record as LaunchTasks returned ("+string(rec.Phase)+")", rec.OwnerUID)
	}

	testkit.WaitFor(t, 20*time.Second, "the step and the tasks ended", func() (bool, error) {
		steps, err := adapters.LoadSteps(ctx, st)
		if err != nil || steps[key] == nil || !steps[key].Phase.Terminal() {
			return false, err
		}
		all, err := adapters.LoadTasks(ctx, st)
		for _, rec := range all {
			if !rec.Phase.Terminal() {
				return false, err
			}
		}
		return err == nil, err
	})
	steps, _ = adapters.LoadSteps(ctx, st)
	uidOf("the step's ended record ("+string(steps[key].Phase)+")", steps[key].OwnerUID)
	all, _ = adapters.LoadTasks(ctx, st)
	for _, rec := range all {
		uidOf("the tasks' ended record ("+string(rec.Phase)+")", rec.OwnerUID)
	}
	a.watchers.Wait()
}
