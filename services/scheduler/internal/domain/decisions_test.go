package domain

import (
	"testing"

	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
)

// TestDecisionsKeptOnlyWhenEqual: a pass that decides a blocked job as the
// last one did leaves the job's explanation as it was (the same record);
// one that decides otherwise gives it the new decision; and the next pass,
// which reuses the decisions' array, never changes what a job's explanation
// says.
func TestDecisionsKeptOnlyWhenEqual(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.node("gpu-0001", 8)
	h.submit(1, 1, 6)
	h.submit(2, 1, 4) // 2 GPUs free: blocked
	h.submit(3, 1, 1)
	why := h.s.jobs[jobName(2)].why
	if why == nil || why.Reason != ReasonResources || why.Filtered["InsufficientGPUs"] != 1 || why.Nodes != 1 {
		t.Fatalf("job 2's explanation: %+v", why)
	}

	// Nothing changed: the same decision, kept.
	var err error
	c := h.s.Schedule(h.now)
	var d *Decision
	for i := range c.Decisions {
		if c.Decisions[i].Job == jobName(2) {
			d = &c.Decisions[i]
		}
	}
	if d == nil || !sameDecision(d, why) {
		t.Fatalf("second pass decided %+v, want the same as %+v (filtered counts interned)", d, why)
	}
	h.commit(c)
	if got := h.s.jobs[jobName(2)].why; got != why {
		t.Fatalf("an equal decision was not kept: %p %+v, was %p %+v", got, got, why, why)
	}

	// A second node, too small for job 2: the counts and the nodes looked
	// at differ.
	h.node("gpu-0002", 2)
	now := h.s.jobs[jobName(2)].why
	if now == why {
		t.Fatal("a changed decision kept the old record")
	}
	if now.Nodes != 2 || now.Reason != ReasonResources || now.Job != jobName(2) {
		t.Fatalf("job 2's explanation after a node joined: %+v", now)
	}
	saved := *now
	h.submit(4, 1, 3) // smaller: decided after job 2
	if c := h.s.Schedule(h.now); len(c.Decisions) != 2 || c.Decisions[0].Job != jobName(2) {
		t.Fatalf("want job 2's decision first, then job 4's: %+v", c.Decisions)
	}

	// A pass that is not committed (job 2 held: job 4's decision comes
	// first) writes the reused array where job 2's was: the committed
	// explanation must not move.
	c = nil
	if c, err = h.s.Handle(h.now, &eventsv1.UpdateJob{Job: jobName(2), Cluster: cl, Action: ActionHold, User: "root", Admin: true}); err != nil {
		t.Fatal(err)
	}
	if len(c.Decisions) == 0 || c.Decisions[0].Job != jobName(4) {
		t.Fatalf("want job 4's decision first: %+v", c.Decisions)
	}
	if got := h.s.jobs[jobName(2)].why; got != now || !sameDecision(got, &saved) || got.Note != saved.Note {
		t.Fatalf("an uncommitted pass changed job 2's explanation: %+v, want %+v", got, saved)
	}
}
