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
// that ends some runs and starts others, they follow; so do the victim rows
// kept beside the active runs (checkVictimRows) and the nodes the walk
// reads of each run from the kept views (checkHeldViews).
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
		checkVictimRows(t, step, s)
		checkHeldViews(t, step, p)
		checkPreemptPos(t, step, s)
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

// checkVictimRows checks that each cluster's victim rows say of the active
// run beside them (same index) what the run says: its own fields, its
// mirrored live and job, and, once filled, what fillVictim finds of its job.
func checkVictimRows(t *testing.T, step string, s *State) {
	t.Helper()
	for name, ci := range s.byCluster {
		if len(ci.victims) != len(ci.active) {
			t.Fatalf("%s: cluster %s: %d victim rows for %d active runs", step, name, len(ci.victims), len(ci.active))
		}
		for i, r := range ci.active {
			row, want := ci.victims[i], victimRowOf(r)
			if row.qos != want.qos || row.part != want.part || row.nodes != want.nodes || row.preempting != want.preempting ||
				row.keyed != want.keyed || row.live != want.live || row.v.job != want.v.job {
				t.Fatalf("%s: run %s: row %+v, the run's %+v", step, r.Key(), row, want)
			}
			if m := row.v; m.of == m.job && m.s == s {
				if f := s.fillVictim(r, false); f.num != m.num || f.part != m.part || f.in != m.in {
					t.Fatalf("%s: run %s: row's job fields %+v, fillVictim's %+v", step, r.Key(), m, *f)
				}
			}
		}
	}
}

// checkHeldViews checks that the nodes the preemption walk reads of each
// active run from the kept views (heldViews) are those the run holds that
// have a view, in its order, as at and Holds say.
func checkHeldViews(t *testing.T, step string, p *pass) {
	t.Helper()
	at := p.viewIndex()
	if p.viewCache == nil {
		t.Fatalf("%s: a writer's pass without its kept views", step)
	}
	for pos, r := range p.t.s.byCluster[p.name].active {
		var want []heldView
		for _, node := range r.Nodes {
			if i, ok := at[node]; ok && r.Holds(node) {
				want = append(want, heldView{node, i})
			}
		}
		if got := p.viewCache.heldViews(r, int32(pos)); !slices.Equal(got, want) {
			t.Fatalf("%s: run %s at %d: held views %v, want %v", step, r.Key(), pos, got, want)
		}
	}
}

// checkPreemptPos checks that each cluster's preemptPos holds the indexes
// of its active runs being preempted, each once, and no other.
func checkPreemptPos(t *testing.T, step string, s *State) int {
	t.Helper()
	n := 0
	for name, ci := range s.byCluster {
		var want []int32
		for i, r := range ci.active {
			if r.PreemptBy != "" {
				want = append(want, int32(i))
			}
		}
		got := slices.Sorted(slices.Values(ci.preemptPos))
		if !slices.Equal(got, want) {
			t.Fatalf("%s: cluster %s: preemptPos %v, want %v", step, name, got, want)
		}
		n += len(want)
	}
	return n
}

// TestPreemptPosFollowsTheRuns: the indexes of the runs being preempted
// kept beside the active runs (clusterIndex.preemptPos) follow them as
// victims enter their grace period, as other runs end (the last active
// run moves into the freed index) and as the victims end; each pass, which
// reads them, decides as a pass on the state restored afresh.
func TestPreemptPosFollowsTheRuns(t *testing.T) {
	t.Parallel()
	h := newSpecHarness(t, Config{PreemptGrace: time.Minute})
	for _, host := range []string{"a3-0001", "a3-0002", "a3-0003", "a3-0004"} {
		h.gpuNode(host, "b1")
	}
	check := func(step string, want int) {
		t.Helper()
		if n := checkPreemptPos(t, step, h.s); n != want {
			t.Fatalf("%s: %d runs being preempted, want %d", step, n, want)
		}
		at := h.now.Add(time.Second)
		got := h.s.Schedule(at)
		fresh := NewState(h.s.Config())
		fresh.Restore(h.s.Snapshot())
		sameChange(t, step, got, fresh.Schedule(at))
	}
	for id := 1; id <= 4; id++ {
		h.submitJob(job(id, 1, 8, qos("low"), signalOpt("B:USR1@60")))
		h.wantState(id, loomv1.JobState_RUNNING, "")
	}
	check("no victims", 0)
	h.submitJob(job(5, 2, 8, qos("high")))
	h.wantState(5, loomv1.JobState_PENDING, ReasonResources)
	check("two in their grace", 2)
	h.finish(1, 0) // the last active run moves into its index
	h.finish(2, 0)
	check("two others ended", checkPreemptPos(t, "count", h.s))
	h.tick(2 * time.Minute)
	check("past the grace", checkPreemptPos(t, "count", h.s))
}
