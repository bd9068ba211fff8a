package app

import (
	"testing"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

func TestHubFansOutAndDropsSlowWatchers(t *testing.T) {
	t.Parallel()
	h := newHub()
	a, b := h.subscribe("projects/default/jobs/1"), h.subscribe("projects/default/jobs/1")
	other := h.subscribe("projects/default/jobs/2")
	h.publish(&loomv1.Job{Name: "projects/default/jobs/1", State: loomv1.JobState_RUNNING})
	for _, s := range []*sub{a, b} {
		if j := <-s.C; j.GetState() != loomv1.JobState_RUNNING {
			t.Fatalf("watcher got %v", j)
		}
	}
	if len(other.C) != 0 {
		t.Fatal("a watcher of another job got the change")
	}
	h.unsubscribe(b)
	// a never reads: after watchBuffer changes it is cut off, closed once.
	for i := 0; i <= watchBuffer; i++ {
		h.publish(&loomv1.Job{Name: "projects/default/jobs/1"})
	}
	n := 0
	for range a.C {
		n++
	}
	if n != watchBuffer {
		t.Fatalf("slow watcher drained %d changes before the close, want %d", n, watchBuffer)
	}
	h.unsubscribe(a) // after the drop: a no-op, not a double close
	if len(b.C) != 0 {
		t.Fatal("an unsubscribed watcher got changes")
	}
	if len(h.subs) != 1 {
		t.Fatalf("hub keeps %d jobs, want only job 2's watcher", len(h.subs))
	}
}

func TestSignalsWakeWaitersOfTheName(t *testing.T) {
	t.Parallel()
	s := newSignals()
	ch, stop := s.wait("op-1")
	other, stopOther := s.wait("op-2")
	defer stopOther()
	s.notify("op-1")
	s.notify("op-1") // coalesced, never blocks
	select {
	case <-ch:
	default:
		t.Fatal("waiter was not woken")
	}
	if len(other) != 0 {
		t.Fatal("a waiter of another name was woken")
	}
	stop()
	if _, ok := s.waiters["op-1"]; ok {
		t.Fatal("stopped waiter still registered")
	}
}

// The watch feed decodes a record only when it is a JobChanged of a job
// watched here (or one without a subject, to be sure).
func TestWatchedOnlyForJobsWithAWatcher(t *testing.T) {
	t.Parallel()
	g := &Gateway{jobs: newHub()}
	const job = "projects/default/jobs/1"
	if g.Watched(jobChangedType, job) {
		t.Fatal("a job nobody watches counted as watched")
	}
	s := g.jobs.subscribe(job)
	if !g.Watched(jobChangedType, job) || !g.Watched(jobChangedType, "") {
		t.Fatal("a watched job (or a JobChanged without subject) not wanted")
	}
	if g.Watched("loom.events.v1.NodeDrained", job) || g.Watched(jobChangedType, "projects/default/jobs/2") {
		t.Fatal("another type, or another job, wanted")
	}
	g.jobs.unsubscribe(s)
	if g.Watched(jobChangedType, job) {
		t.Fatal("still watched after the last watcher left")
	}
}
