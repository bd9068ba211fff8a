package domain

import (
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
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

// TestPrioOfMendedQueue checks the priority a pass reads for each job of
// its queue (prioOf: the one a start records) against the job's priority
// computed afresh, over passes a second apart that mend the last order:
// mend leaves the moved jobs' entries with their last priority.
func TestPrioOfMendedQueue(t *testing.T) {
	t.Parallel()
	s, now := benchCluster(200, 3000, 0.9, 3)
	s.Commit(s.Schedule(now))
	mends, stale := s.scratch.mends, 0
	for step := range 20 {
		at := now.Add(5*time.Hour + time.Duration(step)*time.Second)
		// Schedule's pass up to its order of the queue.
		tx := writerTxn(s, at)
		tx.settle()
		tx.drain(cl)
		pend := tx.pendingEntries(cl)
		p := tx.newPass(cl, tx.cluster(cl))
		p.unedited = len(tx.c.Jobs) == 0
		queue := p.order(pend)
		if p.at == nil {
			t.Fatalf("pass at %v: no order by index", at)
		}
		for k := range queue {
			q := p.entry(queue, k)
			p.pos = p.at[k]
			want := p.prio.sum(&q.e.jobAttrs, int(q.part))
			if got := p.prioOf(q); got != want {
				t.Fatalf("pass at %v: job %s has priority %d, want %d", at, q.name, got, want)
			}
			if q.prio != want {
				stale++
			}
		}
	}
	if s.scratch.mends == mends {
		t.Fatal("twenty passes a second apart never mended the last order")
	}
	if stale == 0 {
		t.Error("no mended entry held an earlier pass's priority: prioOf was not put to the test")
	}
}

// TestNodePartitionsFollowTheCluster checks that the nodes' partitions a
// writer keeps across passes (with its static cache) are found anew once
// the cluster's layout changes: a job of the cpu partition that asks for a
// GPU starts once the GPU node set joins that partition.
func TestNodePartitionsFollowTheCluster(t *testing.T) {
	t.Parallel()
	h := newSpecHarness(t, Config{})
	h.gpuNode("a3-0001", "b1")
	h.cpuNode("cpu-0001")
	h.submitJob(job(1, 1, 1, func(j *loomv1.Job) { j.Partition = "cpu" }))
	h.wantState(1, loomv1.JobState_PENDING, ReasonBadConstraints)
	h.tick(time.Second) // a pass over the same layout: the kept partitions
	h.wantState(1, loomv1.JobState_PENDING, ReasonBadConstraints)
	h.do(&eventsv1.ClusterChanged{Cluster: &loomv1.Cluster{Name: cl,
		Compute: &loomv1.ComputeResources{NodePools: []*loomv1.NodePool{{Id: "a3", MachineType: "a3-highgpu-8g"}, {Id: "cpu", MachineType: "n2-standard-8"}}},
		Orchestrator: &loomv1.Orchestrator{Slurm: &loomv1.SlurmOrchestrator{
			NodeSets: []*loomv1.SlurmNodeSet{{Id: "a3", NodePoolId: "a3", Features: []string{"h100"}}, {Id: "cpu", NodePoolId: "cpu"}},
			Partitions: []*loomv1.SlurmPartition{
				{Id: "gpu", NodeSetIds: []string{"a3"}, MaxTime: "1-00:00:00", Default: true},
				{Id: "cpu", NodeSetIds: []string{"cpu", "a3"}, MaxTime: "UNLIMITED"},
			}}},
		Status: &loomv1.ClusterStatus{State: loomv1.Cluster_RUNNING, SharedDir: "/shared/c1"}}})
	h.wantState(1, loomv1.JobState_RUNNING, "")
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
