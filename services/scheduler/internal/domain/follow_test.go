package domain

import (
	"encoding/json"
	"maps"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// followUpdate is what a follower reads from the change log after the
// leader committed c: the stored version of every record c wrote (copies,
// as decoding gives), nil for those it deleted.
func followUpdate(s *State, c *Change) *Update {
	u := &Update{Clusters: map[string]*Cluster{}, Nodes: map[string]*Node{}, Jobs: map[string]*Job{}, Runs: map[string]*Run{},
		Arrays: map[string]*Array{}, Usage: map[string]*Usage{}, Assocs: map[string]*AssocLimit{}}
	for name := range c.Clusters {
		u.Clusters[name] = copyOf(s.clusters[name])
	}
	for name := range c.Nodes {
		u.Nodes[name] = copyOf(s.nodes[name])
	}
	for name := range c.AllJobs() {
		if j := s.jobs[name]; j != nil {
			jj := *j
			jj.why, jj.placed, jj.tmpl = nil, nil, nil
			jj.Job = proto.Clone(j.Job).(*loomv1.Job) // as decoding gives: not the leader's
			if jj.Job.GetArrayJobId() != "" {
				jj.Job.Env = nil // as stored: the task's environment is its array's
			}
			u.Jobs[name] = &jj
		} else {
			u.Jobs[name] = nil
		}
	}
	for key := range c.Runs {
		if r := s.runs[key]; r != nil {
			u.Runs[key] = r.clone()
		} else {
			u.Runs[key] = nil
		}
	}
	for name := range c.Arrays {
		u.Arrays[name] = copyOf(s.arrays[name])
	}
	for key := range c.Usage {
		u.Usage[key] = copyOf(s.usage[key])
	}
	for key, l := range c.Assocs {
		u.Assocs[key] = copyOf(l)
	}
	return u
}

func copyOf[T any](r *T) *T {
	if r == nil {
		return nil
	}
	c := *r
	return &c
}

// TestFollowMatchesRestored drives random mixes of everything the scheduler
// does (randomFeatures) and has a follower take each committed change as
// the change log gives it (Follow, from the state it restored at the
// start): every few events, and at the end, the follower must hold the same
// records as the leader, keep the invariants, and decide in passes at
// several instants exactly what a state restored afresh from the leader's
// records decides.
func TestFollowMatchesRestored(t *testing.T) {
	t.Parallel()
	at := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC) // after every event of the mix
	for seed := uint64(1); seed <= 8; seed++ {
		var f *State
		events := 0
		compare := func(s *State) {
			t.Helper()
			if g, w := slices.Sorted(maps.Keys(f.jobs)), slices.Sorted(maps.Keys(s.jobs)); !slices.Equal(g, w) {
				t.Fatalf("seed %d, event %d: the follower holds jobs %v, the leader %v", seed, events, g, w)
			}
			for name, j := range s.jobs {
				if !proto.Equal(f.jobs[name].Job, j.Job) || f.jobs[name].Attempt != j.Attempt {
					t.Fatalf("seed %d, event %d: job %s differs: follower %v, leader %v", seed, events, name, f.jobs[name].Job, j.Job)
				}
			}
			if g, w := slices.Sorted(maps.Keys(f.runs)), slices.Sorted(maps.Keys(s.runs)); !slices.Equal(g, w) {
				t.Fatalf("seed %d, event %d: the follower holds runs %v, the leader %v", seed, events, g, w)
			}
			for key, r := range s.runs {
				g, _ := json.Marshal(f.runs[key])
				w, _ := json.Marshal(r)
				if string(g) != string(w) {
					t.Fatalf("seed %d, event %d: run %s differs:\n follower %s\n leader   %s", seed, events, key, g, w)
				}
			}
			checkAllocIndex(t, f)
			checkInvariants(t, f)
			fresh := NewState(s.Config())
			fresh.Restore(s.Snapshot())
			for _, d := range []time.Duration{0, time.Minute, 3 * time.Hour} {
				if g, w := changeText(f.Schedule(at.Add(d))), changeText(fresh.Schedule(at.Add(d))); g != w {
					t.Fatalf("seed %d, event %d, pass at +%v: the follower decides otherwise than a restored state\n got  %.2000s\n want %.2000s",
						seed, events, d, g, w)
				}
			}
		}
		h := randomFeatures(t, seed, 250, func(s *State, c *Change) {
			events++
			if f == nil {
				f = NewState(s.Config())
				f.Restore(s.Snapshot())
				return
			}
			f.Follow(followUpdate(s, c))
			if events%25 == 0 {
				compare(s)
			}
		})
		compare(h.s)
	}
}

// TestFollowDeletesAssocLimits: an association limit deleted in the store
// (nil in the update, under its AssocLimitKey) leaves the follower, which
// then holds what a state loaded afresh would; a key that is not one
// deletes nothing. The leader writes no such delete today; a follower must
// still read one as a delete, not keep enforcing a limit that is gone.
func TestFollowDeletesAssocLimits(t *testing.T) {
	t.Parallel()
	s := NewState(Config{})
	s.LoadAssocLimits([]*AssocLimit{
		{Project: "p", Account: "ml", User: "alice", MaxJobs: 1},
		{Project: "p", Account: "ml", User: "bob", MaxJobs: 2},
	})
	s.Follow(&Update{Assocs: map[string]*AssocLimit{
		AssocLimitKey("p", "ml", "alice"): nil,
		"not-a-key":                       nil,
		AssocLimitKey("p", "ml", "carol"): {Project: "p", Account: "ml", User: "carol", MaxJobs: 3},
	}})
	got := map[string]int32{}
	for _, l := range s.AssocLimits() {
		got[AssocLimitKey(l.Project, l.Account, l.User)] = l.MaxJobs
	}
	want := map[string]int32{AssocLimitKey("p", "ml", "bob"): 2, AssocLimitKey("p", "ml", "carol"): 3}
	if !maps.Equal(got, want) {
		t.Fatalf("limits after the follow: %v, want %v", got, want)
	}
}
