package series

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

const (
	gJob   = "projects/p/jobs/7"
	gNodeA = "projects/p/clusters/c/nodes/a"
	gNodeB = "projects/p/clusters/c/nodes/b"
)

var gNow = time.Unix(1800000000, 0)

func admit(t *testing.T, s *Store, w Write, now time.Time) Verdict {
	t.Helper()
	v, err := s.Admit(context.Background(), w, now)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// collect is a Release apply function that keeps what it is given.
type collect struct{ got []Write }

func (c *collect) apply(w Write) error {
	c.got = append(c.got, w)
	return nil
}

// TestGuardPlacement: before the placement, a node's write is held; once
// placed, a held write of the run's node is applied in order and one of
// another node refused (once, though two releasers run); afterwards the
// run's node is admitted and another node refused; a trusted writer
// (node "") is admitted without a placement.
func TestGuardPlacement(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t, Limits{})
	for i, n := range []string{gNodeA, gNodeB, gNodeA} {
		v := admit(t, s, Write{Job: gJob, Node: n, Attempt: 1, Data: []byte{byte('0' + i)}}, gNow)
		if !v.Held || v.Reason != "" {
			t.Fatalf("write %d before the placement: %+v, want held", i, v)
		}
	}
	var c collect
	if r, err := s.Release(ctx, gJob, gNow, c.apply); err != nil || len(r) != 0 || len(c.got) != 0 {
		t.Fatalf("release before the placement: %v %v %v, want nothing done", r, c.got, err)
	}
	if err := s.Place(ctx, gJob, []Run{{Attempt: 1, Nodes: []string{gNodeA}}}); err != nil {
		t.Fatal(err)
	}
	r, err := s.Release(ctx, gJob, gNow, c.apply)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.got) != 2 || string(c.got[0].Data) != "0" || string(c.got[1].Data) != "2" {
		t.Errorf("applied %v, want node a's writes 0 and 2 in order", c.got)
	}
	if len(r) != 1 || r[0].Reason != ReasonNotPlaced || r[0].Write.Node != gNodeB {
		t.Errorf("refused %v, want node b's write, not-placed", r)
	}
	if r, _ := s.Release(ctx, gJob, gNow, c.apply); len(r) != 0 || len(c.got) != 2 {
		t.Errorf("a second release did something: %v %v", r, c.got)
	}
	if v := admit(t, s, Write{Job: gJob, Node: gNodeA, Attempt: 1}, gNow); v.Held || v.Reason != "" {
		t.Errorf("the run's node after the placement: %+v, want admitted", v)
	}
	if v := admit(t, s, Write{Job: gJob, Node: gNodeB, Attempt: 1}, gNow); v.Reason != ReasonNotPlaced {
		t.Errorf("another node after the placement: %+v, want not-placed", v)
	}
	if v := admit(t, s, Write{Job: gJob, Node: gNodeA, Attempt: 2}, gNow); !v.Held {
		t.Errorf("attempt 2, not placed yet: %+v, want held", v)
	}
	if v := admit(t, s, Write{Job: "projects/p/jobs/8"}, gNow); v.Held || v.Reason != "" {
		t.Errorf("a trusted writer: %+v, want admitted", v)
	}
	// A failing apply keeps the write held for the next release.
	if err := s.Place(ctx, gJob, []Run{{Attempt: 2, Nodes: []string{gNodeA}}}); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	if _, err := s.Release(ctx, gJob, gNow, func(Write) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("release with a failing apply: %v", err)
	}
	c.got = nil
	if _, err := s.Release(ctx, gJob, gNow, c.apply); err != nil || len(c.got) != 1 || c.got[0].Attempt != 2 {
		t.Errorf("after a failed apply: %v %v, want attempt 2's write applied", c.got, err)
	}
}

// TestGuardHeldBounds: a job holds at most Held writes and HeldBytes
// bytes; past either the write is refused held-full, and the hold is
// free again once released.
func TestGuardHeldBounds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t, Limits{Held: 3, HeldBytes: 1000})
	for i := range 3 {
		if v := admit(t, s, Write{Job: gJob, Node: gNodeA, Attempt: 1, Data: []byte("x")}, gNow); !v.Held {
			t.Fatalf("write %d: %+v, want held", i, v)
		}
	}
	if v := admit(t, s, Write{Job: gJob, Node: gNodeA, Attempt: 1}, gNow); v.Reason != ReasonHeldFull {
		t.Errorf("4th held write: %+v, want held-full", v)
	}
	big := []byte(strings.Repeat("x", 1000))
	if v := admit(t, s, Write{Job: "projects/p/jobs/9", Node: gNodeA, Attempt: 1, Data: big}, gNow); v.Reason != ReasonHeldFull {
		t.Errorf("a write past HeldBytes: %+v, want held-full", v)
	}
	if v := admit(t, s, Write{Job: "projects/p/jobs/9", Node: gNodeA, Attempt: 1, Data: big[:900]}, gNow); !v.Held {
		t.Errorf("a write within HeldBytes: %+v, want held", v)
	}
	if err := s.Place(ctx, gJob, []Run{{Attempt: 1, Nodes: []string{gNodeA}}}); err != nil {
		t.Fatal(err)
	}
	var c collect
	if _, err := s.Release(ctx, gJob, gNow, c.apply); err != nil || len(c.got) != 3 {
		t.Fatalf("release: %d applied, %v; want 3", len(c.got), err)
	}
	if n, _ := s.rdb.Exists(ctx, s.key(gJob, "heldsize")).Result(); n != 0 {
		t.Error("the held size outlived the held writes")
	}
}

// TestGuardHeldOnce: a record admitted twice before its placement (the
// same ID: a redelivery) is held once, taking one slot of Held; released,
// it is applied once, and its ID held again is a new entry; writes without
// an ID are held once per delivery; an ID with a space is refused.
func TestGuardHeldOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t, Limits{Held: 2})
	w := Write{Job: gJob, Node: gNodeA, Attempt: 1, Data: []byte("x"), ID: "loom.step.events.v1/3:7"}
	for range 3 {
		if v := admit(t, s, w, gNow); !v.Held {
			t.Fatalf("verdict %+v, want held", v)
		}
	}
	other := Write{Job: gJob, Node: gNodeA, Attempt: 1, Data: []byte("y"), ID: "loom.step.events.v1/3:8"}
	if v := admit(t, s, other, gNow); !v.Held {
		t.Fatalf("another record: %+v, want held (the redeliveries took no slot)", v)
	}
	if n, _ := s.rdb.LLen(ctx, s.key(gJob, "held")).Result(); n != 2 {
		t.Fatalf("%d entries held, want 2 (one per record)", n)
	}
	if err := s.Place(ctx, gJob, []Run{{Attempt: 1, Nodes: []string{gNodeA}}}); err != nil {
		t.Fatal(err)
	}
	var c collect
	if r, err := s.Release(ctx, gJob, gNow, c.apply); err != nil || len(r) != 0 || len(c.got) != 2 ||
		c.got[0].ID != w.ID || string(c.got[0].Data) != "x" || c.got[1].ID != other.ID {
		t.Fatalf("released %v (refused %v, %v), want each record once, in order", c.got, r, err)
	}
	for _, k := range []string{"held", "heldsize", "heldids"} {
		if n, _ := s.rdb.Exists(ctx, s.key(gJob, k)).Result(); n != 0 {
			t.Errorf("%s left after the release", k)
		}
	}
	// Without an ID nothing says two deliveries are one record.
	g := newStore(t, Limits{})
	for range 2 {
		admit(t, g, Write{Job: gJob, Node: gNodeA, Attempt: 1, Data: []byte("z")}, gNow)
	}
	if n, _ := g.rdb.LLen(ctx, g.key(gJob, "held")).Result(); n != 2 {
		t.Errorf("%d entries held for two deliveries without an ID, want 2", n)
	}
	if _, err := g.Admit(ctx, Write{Job: gJob, Node: gNodeA, Attempt: 1, ID: "a b"}, gNow); err == nil {
		t.Error("an ID with a space was taken")
	}
}

// TestGuardHeldExpire: a write whose placement never comes is refused
// held-expired by SweepHeld after HoldFor, not before; the job leaves the
// held index, and a job with a newer held write stays in it.
func TestGuardHeldExpire(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t, Limits{HoldFor: time.Hour})
	admit(t, s, Write{Job: gJob, Node: gNodeA, Attempt: 1, Data: []byte("old")}, gNow)
	admit(t, s, Write{Job: gJob, Node: gNodeA, Attempt: 1, Data: []byte("new")}, gNow.Add(30*time.Minute))
	var c collect
	if r, err := s.SweepHeld(ctx, gNow.Add(59*time.Minute), 10, c.apply); err != nil || len(r) != 0 {
		t.Fatalf("before HoldFor: %v %v, want nothing refused", r, err)
	}
	r, err := s.SweepHeld(ctx, gNow.Add(61*time.Minute), 10, c.apply)
	if err != nil || len(r) != 1 || r[0].Reason != ReasonHeldExpired || string(r[0].Write.Data) != "old" {
		t.Fatalf("after HoldFor: %v %v, want the old write refused held-expired", r, err)
	}
	if sc, err := s.rdb.ZScore(ctx, s.heldIndexKey(), gJob).Result(); err != nil || int64(sc) != gNow.Add(30*time.Minute).UnixMilli() {
		t.Errorf("held index: %v %v, want the newer write's time", sc, err)
	}
	r, _ = s.SweepHeld(ctx, gNow.Add(2*time.Hour), 10, c.apply)
	if len(r) != 1 || len(c.got) != 0 {
		t.Errorf("second sweep: %v refused, %v applied; want the newer write refused", r, c.got)
	}
	if n, _ := s.rdb.ZCard(ctx, s.heldIndexKey()).Result(); n != 0 {
		t.Errorf("%d jobs left in the held index, want 0", n)
	}
}

// TestGuardNodeRate: a node's NodeRate+1st write in an hour is over, another
// node's is not, and the next hour starts afresh.
func TestGuardNodeRate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t, Limits{NodeRate: 3})
	hour := gNow.Truncate(time.Hour)
	for i := range 4 {
		over, err := s.CountNodeWrite(ctx, gNodeA, Source{}, hour.Add(time.Duration(i)*time.Minute))
		if err != nil || over != (i == 3) {
			t.Fatalf("write %d: over %v, %v", i+1, over, err)
		}
	}
	if over, _ := s.CountNodeWrite(ctx, gNodeB, Source{}, hour); over {
		t.Error("another node is over the first node's rate")
	}
	if over, _ := s.CountNodeWrite(ctx, gNodeA, Source{}, hour.Add(time.Hour)); over {
		t.Error("the next hour is still over")
	}
}

// TestGuardNodeRateCountsARecordOnce: a record delivered again (its source
// and sequence already counted) is not counted again and gets its first
// verdict, taken or refused, also in the next hour; its source's later
// records and other sources are counted; a record without a source is
// counted every time.
func TestGuardNodeRateCountsARecordOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t, Limits{NodeRate: 3})
	hour := gNow.Truncate(time.Hour)
	p0, p1 := "loom.step.events.v1/0", "loom.step.events.v1/1"
	count := func(name string, seq int64, at time.Time, want bool) {
		t.Helper()
		over, err := s.CountNodeWrite(ctx, gNodeA, Source{Name: name, Seq: seq}, at)
		if err != nil || over != want {
			t.Fatalf("%s:%d at %v: over %v, %v; want %v", name, seq, at, over, err, want)
		}
	}
	count(p0, 10, hour, false)
	count(p0, 10, hour, false) // redelivered: not counted again
	count(p0, 11, hour, false)
	count(p0, 10, hour, false) // a restart's redelivery of both
	count(p0, 11, hour, false)
	count(p1, 10, hour, false) // another partition's offset 10: another record, the third
	count(p1, 12, hour, true)  // the fourth: over
	count(p1, 13, hour, true)
	count(p1, 12, hour, true) // redelivered: refused again, not counted
	count(p0, 11, hour, false)
	next := hour.Add(time.Hour)
	count(p1, 13, next, true)  // a redelivery the next hour keeps its verdict
	count(p1, 11, next, false) // a record of the source between two counted ones was counted (read in order)
	count(p1, 14, next, false) // the next hour's first record
	count(p0, 12, next, false)
	count(p0, 13, next, false)
	count(p1, 15, next, true)
	count(p1, 14, next, false) // the refused run of the hour before is passed; this hour's taken record stays taken
	count(p1, 16, next, true)
	count(p1, 15, next, true) // the refused run goes on through 16
	for range 2 {
		count("", 0, next, true) // no source: counted each time, over
	}
	if _, err := s.CountNodeWrite(ctx, gNodeA, Source{Name: "a b"}, next); err == nil {
		t.Error("a source with a space was counted")
	}
}

// TestFirstRefusal: a record's first refusal is first, its next ones are
// not (a redelivered copy), another record's is; the mark expires after
// RefusalTTL.
func TestFirstRefusal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t, Limits{})
	for i, c := range []struct {
		record string
		want   bool
	}{{"t/1:5", true}, {"t/1:5", false}, {"t/1:6", true}, {"t/2:5", true}, {"t/1:5", false}} {
		if got, err := s.FirstRefusal(ctx, c.record); err != nil || got != c.want {
			t.Fatalf("refusal %d of %s: first %v, %v; want %v", i+1, c.record, got, err, c.want)
		}
	}
	ttl, err := s.rdb.TTL(ctx, s.refusedKey("t/1:5")).Result()
	if err != nil || ttl <= RefusalTTL-time.Minute || ttl > RefusalTTL {
		t.Fatalf("the mark's TTL = %v, %v; want about %v", ttl, err, RefusalTTL)
	}
}

// TestGuardTooLate: a run that ended more than Late ago takes no write,
// from its node or a trusted writer; one that ended within Late does.
func TestGuardTooLate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	late := 8 * 24 * time.Hour
	s := newStore(t, Limits{Late: late})
	if err := s.Place(ctx, gJob, []Run{{Attempt: 1, Nodes: []string{gNodeA}, End: gNow.Add(-late - time.Minute)},
		{Attempt: 2, Nodes: []string{gNodeA}, End: gNow.Add(-late + time.Minute)}}); err != nil {
		t.Fatal(err)
	}
	if v := admit(t, s, Write{Job: gJob, Node: gNodeA, Attempt: 1}, gNow); v.Reason != ReasonTooLate {
		t.Errorf("run ended past Late: %+v, want too-late", v)
	}
	if v := admit(t, s, Write{Job: gJob, Attempt: 1}, gNow); v.Reason != ReasonTooLate {
		t.Errorf("trusted writer, run ended past Late: %+v, want too-late", v)
	}
	if v := admit(t, s, Write{Job: gJob, Node: gNodeA, Attempt: 2}, gNow); v.Reason != "" || v.Held {
		t.Errorf("run ended within Late: %+v, want admitted", v)
	}
}

// TestLateMetricsAfterSweep: once retention swept a job's series, a late
// append (one admitted before the sweep) recreates nothing, and a late
// write is refused swept, also from the run's own node; the job's
// placement and held writes went with the series.
func TestLateMetricsAfterSweep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t, Limits{})
	if err := s.Place(ctx, gJob, []Run{{Attempt: 1, Nodes: []string{gNodeA}, End: gNow.Add(-2 * time.Hour)}}); err != nil {
		t.Fatal(err)
	}
	seed(t, s, gJob)
	admit(t, s, Write{Job: gJob, Node: gNodeA, Attempt: 2, Data: []byte("held")}, gNow)
	if err := s.Ended(ctx, gJob, gNow.Add(-2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Sweep(ctx, gNow, time.Hour, 10); err != nil || n != 1 {
		t.Fatalf("sweep: %d, %v", n, err)
	}
	r, err := s.Append(ctx, gJob, Source{Name: "t/0", Seq: 9}, Batch{"loss": {{Step: 2, Value: 1}}})
	if err != nil || !r.Swept || r.Appended != 0 {
		t.Errorf("late append: %+v %v, want swept, nothing appended", r, err)
	}
	if kept(t, s, gJob) {
		t.Error("a late append recreated a partial series")
	}
	if v := admit(t, s, Write{Job: gJob, Node: gNodeA, Attempt: 1}, gNow); v.Reason != ReasonSwept {
		t.Errorf("late write of the run's node: %+v, want swept", v)
	}
	if v := admit(t, s, Write{Job: gJob, Attempt: 1}, gNow); v.Reason != ReasonSwept {
		t.Errorf("late trusted write: %+v, want swept", v)
	}
	for _, k := range []string{"runs", "held", "heldsize"} {
		if n, _ := s.rdb.Exists(ctx, s.key(gJob, k)).Result(); n != 0 {
			t.Errorf("%s outlived the sweep", k)
		}
	}
	if err := s.Place(ctx, gJob, []Run{{Attempt: 3, Nodes: []string{gNodeA}}}); err != nil {
		t.Fatal(err)
	}
	if n, _ := s.rdb.Exists(ctx, s.key(gJob, "runs")).Result(); n != 0 {
		t.Error("a placement after the sweep was recorded")
	}
	if ttl, _ := s.rdb.PTTL(ctx, s.key(gJob, "swept")).Result(); ttl <= 0 || ttl > DefaultLimits.Late {
		t.Errorf("the swept marker expires in %v, want within Late (%v)", ttl, DefaultLimits.Late)
	}
}
