package domain

import (
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
)

// TestQueueReusedAcrossPasses checks that a pass over a queue the last pass
// ordered (nothing committed in between) reuses that queue, and decides
// exactly what a freshly restored state decides: with the priorities
// unchanged, and after hours of aging moved them.
func TestQueueReusedAcrossPasses(t *testing.T) {
	t.Parallel()
	s, now := benchCluster(200, 3000, 0.9, 3)
	s.Commit(s.Schedule(now))
	s.Schedule(now.Add(time.Second)) // orders the queue as committed
	for _, at := range []time.Time{now.Add(2 * time.Second), now.Add(5 * time.Hour), now.Add(5*time.Hour + time.Second)} {
		before := s.scratch.reorders
		got := s.Schedule(at)
		if s.scratch.reorders != before+1 {
			t.Fatalf("pass at %v: the queue was not reused", at)
		}
		fresh := NewState(s.Config())
		fresh.Restore(s.Snapshot())
		want := fresh.Schedule(at)
		if fresh.scratch.reorders != 0 {
			t.Fatalf("a restored state reused a queue it never ordered")
		}
		sameChange(t, fmt.Sprint(at), got, want)
	}
	// Pass after pass a second apart, as a live scheduler's come: aging
	// and fair share move jobs each second, and the last order is mended.
	mends := s.scratch.mends
	for step := range 20 {
		at := now.Add(5*time.Hour + time.Duration(2+step)*time.Second)
		got := s.Schedule(at)
		fresh := NewState(s.Config())
		fresh.Restore(s.Snapshot())
		sameChange(t, fmt.Sprint(at), got, fresh.Schedule(at))
	}
	if s.scratch.mends == mends {
		t.Error("twenty passes a second apart never mended the last order")
	}
	// A commit that changes the queue makes the next pass build it anew.
	c := s.Schedule(now.Add(6 * time.Hour))
	ver := s.byCluster[cl].pendVer
	s.Commit(c)
	if s.byCluster[cl].pendVer == ver {
		t.Fatalf("six hours on, the pass changed no pending job (%d jobs edited)", c.JobCount())
	}
	before := s.scratch.reorders
	s.Schedule(now.Add(6*time.Hour + time.Second))
	if s.scratch.reorders != before {
		t.Fatal("a pass reused a queue that a commit changed")
	}
}

// sameChange fails unless got and want emit the same events and record the
// same decisions and reservations.
func sameChange(t *testing.T, label string, got, want *Change) {
	t.Helper()
	if len(got.Emits) != len(want.Emits) || len(got.Decisions) != len(want.Decisions) ||
		fmt.Sprint(got.Reservations) != fmt.Sprint(want.Reservations) {
		t.Fatalf("%s: %d emits, %d decisions, reservations %v; want %d, %d, %v", label, len(got.Emits),
			len(got.Decisions), got.Reservations, len(want.Emits), len(want.Decisions), want.Reservations)
	}
	for i := range got.Emits {
		g, w := got.Emits[i], want.Emits[i]
		if g.Key != w.Key || g.Subject != w.Subject || !proto.Equal(g.Message(), w.Message()) {
			t.Fatalf("%s: emit %d is %v, want %v", label, i, g, w)
		}
	}
	for i := range got.Decisions {
		if g, w := got.Decisions[i], want.Decisions[i]; fmt.Sprint(g) != fmt.Sprint(w) {
			t.Fatalf("%s: decision %d is %+v, want %+v", label, i, g, w)
		}
	}
}
