package domain

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"

	"github.com/loom-ml/loom/services/scheduler/internal/domain/jobstore"
)

// TestVictimListOrderAsSort: a victim list read in order, however far and
// in whatever pattern, gives the victims in the order one sort by
// victimCmp gives (ties on priority, nodes and job number included), past
// the point where it sorts the rest as well.
func TestVictimListOrderAsSort(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(12, 5))
	for _, n := range []int{0, 1, 2, 3, 10, 100, 1000, 5000, 20000} {
		vs := make([]victim, n)
		for i := range vs {
			r := &Run{RunRecord: jobstore.RunRecord{Job: "projects/p/jobs/" + strconv.Itoa(rng.IntN(n+1)), Attempt: int32(i)}}
			vs[i] = victim{run: r, prio: rng.Int64N(20), nodes: int32(1 + rng.IntN(3)), id: -rng.Int64N(int64(n/4 + 1))}
		}
		want := slices.Clone(vs)
		slices.SortFunc(want, func(a, b victim) int { return victimCmp(&a, &b) })
		// Read as preemptors do: each from the start, a few further each time.
		l := newVictimList(slices.Clone(vs))
		for stop := 0; stop <= n+1; stop += 1 + rng.IntN(n/3+1) {
			for k := 0; k <= stop; k++ {
				v, ok := l.at(k)
				if k >= n {
					if ok {
						t.Fatalf("n=%d: at(%d) gave a victim past the end", n, k)
					}
					break
				}
				if !ok || v != want[k] {
					t.Fatalf("n=%d: at(%d) = %+v, %v; want %+v", n, k, v, ok, want[k])
				}
			}
		}
		// And straight to the end, from a fresh list.
		l = newVictimList(slices.Clone(vs))
		var got []victim
		for k := 0; ; k++ {
			v, ok := l.at(k)
			if !ok {
				break
			}
			got = append(got, v)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("n=%d: read to the end, the order differs from the sort's", n)
		}
		if n >= 8192 && !l.sorted {
			t.Errorf("n=%d: read to the end without sorting the rest", n)
		}
	}
}

// TestVictimsAsComputedFromJobs: the victims a pass lists from the job
// fields kept on the runs (victimIn) have the priority and number their jobs
// give when computed from the jobs themselves, and are every live run the
// preemptor may take; after a Commit that edits a running job, and one
// that ends some runs and starts others, they follow.
func TestVictimsAsComputedFromJobs(t *testing.T) {
	t.Parallel()
	base, now := benchCluster(60, 300, 0.9, 7)
	cfg := base.Config()
	cfg.QOS = []QOS{{Name: "low"}, {Name: "normal", Priority: 50}, {Name: "high", Priority: 100, Preempt: []string{"normal"}}}
	s := NewState(cfg)
	s.Restore(base.Snapshot())
	check := func(step string) {
		t.Helper()
		tx := writerTxn(s, now)
		p := tx.newPass(cl, tx.cluster(cl))
		p.prio = tx.newPrioCtx(p.name, p.cluster, p.views, tx.pendingEntries(cl))
		_, pi := p.cluster.Partition("")
		l := p.victims("high", 2, pi)
		n := 0
		for k := 0; ; k++ {
			v, ok := l.at(k)
			if !ok {
				break
			}
			n++
			vj := s.jobs[v.run.Job]
			_, vpi := p.cluster.Partition(vj.Job.GetPartition())
			var a jobAttrs
			s.prioAttrs(vj, &a, nil)
			if want := p.prio.sum(&a, vpi); v.prio != want || v.id != -jobNumber(vj) || v.nodes != int32(len(v.run.Nodes)) {
				t.Fatalf("%s: victim %s: prio %d id %d nodes %d; from its job %d, %d, %d",
					step, v.run.Key(), v.prio, v.id, v.nodes, want, -jobNumber(vj), len(v.run.Nodes))
			}
		}
		live := 0
		for _, r := range s.byCluster[cl].active {
			if j := s.jobs[r.Job]; r.PreemptBy == "" && j != nil && j.Running() && j.Attempt == r.Attempt && !r.Ended() {
				live++
			}
		}
		if n == 0 || n != live {
			t.Fatalf("%s: %d victims, want the %d live runs", step, n, live)
		}
	}
	check("loaded")
	// A new version of a running job (the state's records are never
	// edited in place): its victim fields come from the new version.
	var edited *Job
	for _, r := range s.byCluster[cl].active {
		if r.live {
			edited = s.jobs[r.Job]
			break
		}
	}
	nv := *edited
	nv.Job = proto.Clone(edited.Job).(*loomv1.Job)
	nv.Job.JobId, nv.Job.SubmitTime = "99999", timestamppb.New(now.Add(-40*24*time.Hour))
	s.Commit(&Change{Jobs: map[string]*Job{edited.Name(): &nv}})
	if r := s.runs[RunKey(edited.Name(), edited.Attempt)]; r.victim.job != &nv {
		t.Fatalf("the run of the edited job mirrors %p, want the new version %p", r.victim.job, &nv)
	}
	check("a job edited")
	// A reader's look fills in a copy and leaves the run as it was.
	r := s.runs[RunKey(edited.Name(), edited.Attempt)]
	r.victim.of = nil
	if m := s.fillVictim(r, false); m == &r.victim || m.num != 99999 || r.victim.of != nil {
		t.Fatalf("a reader's fill: %+v, the run's %+v", m, r.victim)
	}
	// A later clock (ages move) and a pass committed: runs end, jobs start.
	now = now.Add(90 * 60e9)
	s.Commit(s.Tick(now))
	s.Commit(s.Schedule(now))
	check("after a pass")
}
