package domain

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/scheduler/internal/domain/goodput"
	"github.com/loom-ml/loom/services/scheduler/internal/domain/jobstore"
)

// TestEndedIndexFollowsTheRecords: however compact records come and go (a
// load, prunes that expire and add them, a follower's updates that replace
// and delete them), a cluster's goodput since any time, and the records
// Prune expires, are those a walk of every record gives, and the index
// holds each record once, in its cluster's bucket of its end, with the
// bucket's sum.
func TestEndedIndexFollowsTheRecords(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(7, 11))
	now := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	clusters := []string{cl, "projects/default/clusters/c2", ""}
	s := NewState(Config{})
	for _, c := range clusters[:2] {
		s.clusters[c] = &Cluster{}
	}
	id := 0
	record := func() *Ended {
		id++
		end := now.Add(-time.Duration(rng.Int64N(int64(40 * 24 * time.Hour))))
		if rng.IntN(10) == 0 {
			end = end.Truncate(time.Hour) // on a bucket's edge
		}
		e := &Ended{Name: jobName(id), State: loomv1.JobState_COMPLETED, End: end, Cluster: clusters[rng.IntN(len(clusters))]}
		if rng.IntN(8) != 0 { // some records predate goodput
			e.Goodput = &jobstore.EndedGoodput{Wall: time.Duration(rng.Int64N(1e12)), Productive: time.Duration(rng.Int64N(1e12)),
				Restarts: rng.Int32N(3), Failures: rng.Int32N(2)}
		}
		return e
	}
	batch := func(n int) []*Ended {
		out := make([]*Ended, n)
		for i := range out {
			out[i] = record()
		}
		return out
	}
	check := func(step string) {
		t.Helper()
		held := 0
		for c, idx := range s.endedIdx {
			for k, b := range idx {
				var sum goodput.Total
				if len(b.recs) == 0 {
					t.Fatalf("%s: empty bucket %s/%d kept", step, c, k)
				}
				for _, e := range b.recs {
					if s.ended[e.Name] != e || e.Cluster != c || endedKey(e.End) != k {
						t.Fatalf("%s: bucket %s/%d holds %s (cluster %q, end %v), not as kept", step, c, k, e.Name, e.Cluster, e.End)
					}
					if e.Goodput != nil {
						sum.Add(e.Goodput)
					}
				}
				if sum != b.total {
					t.Fatalf("%s: bucket %s/%d sums %+v, its records %+v", step, c, k, b.total, sum)
				}
				held += len(b.recs)
			}
		}
		if held != len(s.ended) {
			t.Fatalf("%s: the index holds %d records, the state %d", step, held, len(s.ended))
		}
		for range 20 {
			since := now.Add(-time.Duration(rng.Int64N(int64(45 * 24 * time.Hour))))
			if rng.IntN(4) == 0 {
				since = since.Truncate(time.Hour)
			}
			for _, c := range clusters[:2] {
				var want goodput.Total
				for _, e := range s.ended {
					if e.Cluster == c && e.Goodput != nil && !e.End.Before(since) {
						want.Add(e.Goodput)
					}
				}
				var got goodput.Total
				s.endedGoodput(c, since, &got)
				if got != want {
					t.Fatalf("%s: %s since %v: %+v, a walk of the records %+v", step, c, since, got, want)
				}
			}
			var want []string
			for name, e := range s.ended {
				if !e.End.After(since) {
					want = append(want, name)
				}
			}
			got := s.expiredEnded(since, 0)
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Fatalf("%s: expired as of %v: %d records, a walk %d", step, since, len(got), len(want))
			}
			if n := len(s.expiredEnded(since, 5)); n != min(5, len(want)) {
				t.Fatalf("%s: expired at most 5: %d", step, n)
			}
		}
	}

	s.LoadEnded(batch(3000))
	check("load")
	for round := range 30 {
		switch rng.IntN(3) {
		case 0: // a prune: expiry, and new records
			p := s.Prune(now, Retention{EndedAge: time.Duration(30+rng.IntN(10)) * 24 * time.Hour}, 200)
			p.Ended = batch(rng.IntN(300))
			s.CommitPrune(p)
		case 1: // a follower's update: new, replaced and deleted records
			u := &Update{Ended: map[string]*Ended{}}
			for _, e := range batch(rng.IntN(100)) {
				u.Ended[e.Name] = e
			}
			for name := range s.ended {
				switch rng.IntN(40) {
				case 0:
					u.Ended[name] = nil
				case 1:
					e := record()
					e.Name = name
					u.Ended[name] = e
				}
			}
			s.Follow(u)
		case 2: // loaded again over what is kept
			again := batch(50)
			for name := range s.ended {
				if rng.IntN(50) == 0 {
					e := record()
					e.Name = name
					again = append(again, e)
				}
			}
			s.LoadEnded(again)
		}
		check(fmt.Sprintf("round %d", round))
	}
	if len(s.ended) == 0 {
		t.Fatal("every record gone: the test proves little")
	}
}

// TestEndedGoodputFarSince: a window's start far in the past or future
// (any timestamp a caller may send) counts the records it should: all of
// them, or none.
func TestEndedGoodputFarSince(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	s := NewState(Config{})
	s.LoadEnded([]*Ended{{Name: jobName(1), State: loomv1.JobState_COMPLETED, End: now, Cluster: cl,
		Goodput: &jobstore.EndedGoodput{Wall: time.Hour}}})
	for since, want := range map[time.Time]int32{
		time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC):    1,
		time.Date(1600, 1, 1, 0, 0, 0, 0, time.UTC): 1,
		time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC): 0,
		time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC): 0,
	} {
		var got goodput.Total
		s.endedGoodput(cl, since, &got)
		if g := got.Goodput(cl).GetJobs(); g != want {
			t.Errorf("since %v: %d jobs counted, want %d", since, g, want)
		}
	}
}
