package domain

import (
	"math"
	"testing"
	"time"
)

// A look at a run reports only what moved: the step or the checkpoint went
// on, or the output grew; last_progress is when it was seen to.
func TestObserve(t *testing.T) {
	t.Parallel()
	t1, t2, t3 := t0.Add(5*time.Second), t0.Add(10*time.Second), t0.Add(15*time.Second)
	if p, ev := Observe(self, "projects/p/jobs/7", 1, Progress{}, ProgressReport{}, 0, t1); ev != nil || p != (Progress{}) {
		t.Fatalf("nothing reported, no output: %v, %+v; want no report", ev, p)
	}
	r := ProgressReport{Step: 10, CheckpointStep: 8, CheckpointTime: t0}
	p, ev := Observe(self, "projects/p/jobs/7", 1, Progress{}, r, 100, t1)
	if ev == nil || ev.Step != 10 || ev.CheckpointStep != 8 || !ev.CheckpointTime.AsTime().Equal(t0) || ev.OutputBytes != 100 ||
		!ev.LastProgress.AsTime().Equal(t1) || ev.Node != self.Node || ev.Attempt != 1 || p.LastProgress != t1 {
		t.Fatalf("first move: %v, %+v", ev, p)
	}
	if q, ev := Observe(self, "projects/p/jobs/7", 1, p, r, 100, t2); ev != nil || q != p {
		t.Fatalf("nothing moved: %v, %+v; want no report, the state kept", ev, q)
	}
	if _, ev := Observe(self, "projects/p/jobs/7", 1, p, r, 160, t3); ev == nil || ev.OutputBytes != 160 || ev.Step != 10 {
		t.Fatalf("output grew: %v, want a report", ev)
	}
	if _, ev := Observe(self, "projects/p/jobs/7", 1, p, ProgressReport{Step: 10, CheckpointStep: 10}, 100, t3); ev == nil || ev.CheckpointStep != 10 {
		t.Fatalf("a new checkpoint: %v, want a report", ev)
	}
	// The time spent checkpointing is forwarded; nonsense is not.
	ck := ProgressReport{Step: 10, CheckpointStep: 8, CheckpointTime: t0, CheckpointSeconds: 2.5}
	if _, ev := Observe(self, "projects/p/jobs/7", 1, p, ck, 100, t3); ev == nil || ev.CheckpointDuration.AsDuration() != 2500*time.Millisecond {
		t.Fatalf("checkpointing time: %v, want a report of 2.5s", ev)
	}
	for _, bad := range []float64{-1, math.NaN()} {
		bad := ProgressReport{Step: 11, CheckpointSeconds: bad}
		if _, ev := Observe(self, "projects/p/jobs/7", 1, p, bad, 100, t3); ev == nil || ev.CheckpointDuration != nil {
			t.Fatalf("checkpoint_seconds %v: %v, want no duration", bad.CheckpointSeconds, ev)
		}
	}
	huge := ProgressReport{Step: 11, CheckpointSeconds: math.Inf(1)}
	if _, ev := Observe(self, "projects/p/jobs/7", 1, p, huge, 100, t3); ev == nil ||
		ev.CheckpointDuration.AsDuration() != MaxCheckpointSeconds*time.Second {
		t.Fatalf("checkpoint_seconds +Inf: %v, want it clipped to a year", ev)
	}
}
