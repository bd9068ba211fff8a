package domain

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
)

// TestGoodputTakesTheCheckpointReportedAheadOfTheEnd: a program that saves
// a checkpoint and fails at once has that checkpoint reported by its agent
// ahead of its step's end (the agent's last read of its progress file): the
// run is still the scheduler's, and goodput loses only the time after the
// checkpoint to recomputation. The same report after the end (what the
// agent's periodic look alone would send) finds the run released and is
// passed over: the whole run counts as lost. The agent's order is what
// makes the difference.
func TestGoodputTakesTheCheckpointReportedAheadOfTheEnd(t *testing.T) {
	t.Parallel()
	h := newHealthHarness(t, Config{})
	h.node("gpu-0001", 8)
	h.node("gpu-0002", 8)
	h.submit(1, 1, 8)
	h.submit(2, 1, 8)
	hosts := map[int]string{1: h.job(1).GetNodes()[0], 2: h.job(2).GetNodes()[0]}
	start := map[int]time.Time{1: h.s.Run(jobName(1), 1).Start, 2: h.s.Run(jobName(2), 1).Start}
	h.tick(15 * time.Minute)
	end := h.now
	// Each saved 10 minutes into its run, and reports it now.
	report := func(id int) {
		h.do(&eventsv1.StepProgress{Job: jobName(id), Attempt: 1, Node: nodeName(hosts[id]), Step: 1000, CheckpointStep: 1000,
			CheckpointTime: timestamppb.New(start[id].Add(10 * time.Minute)), LastProgress: timestamppb.New(end), Time: timestamppb.New(end)})
	}
	report(1)
	h.step(1, 1, hosts[1], eventsv1.StepState_STEP_EXITED, 1)
	h.step(2, 1, hosts[2], eventsv1.StepState_STEP_EXITED, 1)
	report(2)
	for id, kept := range map[int]time.Duration{1: 10 * time.Minute, 2: 0} {
		r := h.s.Run(jobName(id), 1)
		want := r.End.Sub(r.Start) - kept
		g := h.s.JobGoodput(jobName(id), h.now)
		if !r.Ended() || g.GetFailures() != 1 || g.GetLostRecompute().AsDuration() != want {
			t.Errorf("job %d: goodput %v, want 1 failure and %v lost to recomputation", id, g, want)
		}
	}
}
