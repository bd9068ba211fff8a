package domain

import (
	"testing"

	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// fifoHarness is a harness under policy with cluster parts over the pools
// the partitions name (twoPoolCluster: n2-standard-8 nodes, 8 CPUs each).
func fifoHarness(t *testing.T, policy Policy, parts ...*loomv1.SlurmPartition) *harness {
	cfg := Config{}
	cfg.Policy = policy
	h := harnessWith(t, cfg)
	h.do(twoPoolCluster(parts...))
	return h
}

// TestFIFOBlockIsPerPartition: without backfill, a job that cannot start
// blocks the later jobs of its own partition, not those of the others
// (slurmctld's _schedule: fail_by_part adds its partition to failed_parts;
// a later job is held with Priority only when its partition is there).
// Job 2 of A waits for a-0001; job 3 of A, which would fit beside job 1,
// waits behind it with Priority; job 4 of B starts on b-0001.
func TestFIFOBlockIsPerPartition(t *testing.T) {
	t.Parallel()
	for _, pol := range []Policy{FIFOPolicy(), noBackfillPolicy()} {
		t.Run(pol.Name, func(t *testing.T) {
			t.Parallel()
			h := fifoHarness(t, pol,
				&loomv1.SlurmPartition{Id: "A", NodeSetIds: []string{"a"}, Default: true},
				&loomv1.SlurmPartition{Id: "B", NodeSetIds: []string{"b"}})
			h.poolNode("a-0001", "a")
			h.poolNode("b-0001", "b")
			h.submitJob(job(1, 1, 0, inPart("A", 4)))
			h.wantState(1, loomv1.JobState_RUNNING, "")
			h.submitJob(job(2, 1, 0, inPart("A", 8)))
			h.submitJob(job(3, 1, 0, inPart("A", 2)))
			h.submitJob(job(4, 1, 0, inPart("B", 8)))
			h.wantState(2, loomv1.JobState_PENDING, ReasonResources)
			h.wantState(3, loomv1.JobState_PENDING, ReasonPriority)
			h.wantState(4, loomv1.JobState_RUNNING, "")
			if j := h.job(4); j.GetPartition() != "B" || len(j.GetNodes()) != 1 || j.GetNodes()[0] != "b-0001" {
				t.Fatalf("job 4 runs in %q on %v; want B on b-0001", j.GetPartition(), j.GetNodes())
			}
			// A's order held: job 2 starts when job 1 ends; job 3 waits
			// for it to end.
			h.finish(1, 0)
			h.wantState(2, loomv1.JobState_RUNNING, "")
			h.wantState(3, loomv1.JobState_PENDING, ReasonResources)
		})
	}
}

// TestFIFOBlockKeepsSharedNodes: without backfill, the nodes of a blocked
// partition are kept from the later jobs of every partition, as slurmctld
// takes them out of avail_node_bitmap ("Do not schedule more jobs in this
// partition or on nodes in this partition"): job 4 of C (pools a and b)
// does not take the room left on a-0001 that job 3 of A waits for; it
// waits for Resources, the first of C to, and blocks C; job 5 of D (pool
// d, in no blocked partition) starts. When job 1 ends, job 3 starts on
// a-0001.
func TestFIFOBlockKeepsSharedNodes(t *testing.T) {
	t.Parallel()
	h := fifoHarness(t, FIFOPolicy(),
		&loomv1.SlurmPartition{Id: "A", NodeSetIds: []string{"a"}, Default: true},
		&loomv1.SlurmPartition{Id: "C", NodeSetIds: []string{"a", "b"}},
		&loomv1.SlurmPartition{Id: "D", NodeSetIds: []string{"d"}})
	h.poolNode("a-0001", "a")
	h.poolNode("b-0001", "b")
	h.poolNode("d-0001", "d")
	h.submitJob(job(1, 1, 0, inPart("A", 4)))
	h.wantState(1, loomv1.JobState_RUNNING, "")
	h.submitJob(job(2, 1, 0, inPart("C", 8))) // only b-0001 has 8 CPUs free
	h.wantState(2, loomv1.JobState_RUNNING, "")
	if j := h.job(2); len(j.GetNodes()) != 1 || j.GetNodes()[0] != "b-0001" {
		t.Fatalf("job 2 runs on %v; want b-0001", j.GetNodes())
	}
	h.submitJob(job(3, 1, 0, inPart("A", 8)))
	h.submitJob(job(4, 1, 0, inPart("C", 2)))
	h.submitJob(job(5, 1, 0, inPart("C", 1)))
	h.submitJob(job(6, 1, 0, inPart("D", 8)))
	h.wantState(3, loomv1.JobState_PENDING, ReasonResources)
	h.wantState(4, loomv1.JobState_PENDING, ReasonResources)
	h.wantState(5, loomv1.JobState_PENDING, ReasonPriority)
	h.wantState(6, loomv1.JobState_RUNNING, "")
	h.finish(1, 0)
	h.wantState(3, loomv1.JobState_RUNNING, "")
	if j := h.job(3); len(j.GetNodes()) != 1 || j.GetNodes()[0] != "a-0001" {
		t.Fatalf("job 3 runs on %v; want a-0001", j.GetNodes())
	}
}

// TestFIFOMultiPartitionBlocksItsPartitions: without backfill, a job of
// -p A,B that can start in neither blocks both, as slurmctld's record of
// it in each partition does (each one's fail_by_part), and no other: job
// 12 of B, which would fit beside job 10, waits with Priority; job 13 of D
// starts.
func TestFIFOMultiPartitionBlocksItsPartitions(t *testing.T) {
	t.Parallel()
	h := fifoHarness(t, FIFOPolicy(),
		&loomv1.SlurmPartition{Id: "A", NodeSetIds: []string{"a"}, Default: true},
		&loomv1.SlurmPartition{Id: "B", NodeSetIds: []string{"b"}},
		&loomv1.SlurmPartition{Id: "D", NodeSetIds: []string{"d"}})
	h.poolNode("a-0001", "a")
	h.poolNode("b-0001", "b")
	h.poolNode("d-0001", "d")
	h.submitJob(job(1, 1, 0, inPart("A", 8)))
	h.submitJob(job(10, 1, 0, inPart("B", 4)))
	h.wantState(1, loomv1.JobState_RUNNING, "")
	h.wantState(10, loomv1.JobState_RUNNING, "")
	h.submitJob(job(11, 1, 0, inPart("A,B", 8)))
	h.submitJob(job(12, 1, 0, inPart("B", 2)))
	h.submitJob(job(13, 1, 0, inPart("D", 8)))
	h.wantState(11, loomv1.JobState_PENDING, ReasonResources)
	h.wantState(12, loomv1.JobState_PENDING, ReasonPriority)
	h.wantState(13, loomv1.JobState_RUNNING, "")
}

// TestFIFOBlockKeepsSharedNodesFromPreemption: without backfill, a job
// does not preempt on the nodes kept for a blocked partition (slurmctld
// preempts within avail_node_bitmap, which no longer has them): job 4 of
// C, of QOS high, would requeue job 1 (QOS low) on a-0001, which job 3 of
// A waits for; it preempts nothing and waits for Resources.
func TestFIFOBlockKeepsSharedNodesFromPreemption(t *testing.T) {
	t.Parallel()
	pol := FIFOPolicy()
	pol.Name, pol.Preempt = "fifo-preempt", true
	h := fifoHarness(t, pol,
		&loomv1.SlurmPartition{Id: "A", NodeSetIds: []string{"a"}, Default: true},
		&loomv1.SlurmPartition{Id: "C", NodeSetIds: []string{"a", "b"}})
	h.poolNode("a-0001", "a")
	h.poolNode("b-0001", "b")
	h.submitJob(job(1, 1, 0, inPart("A", 8), qos("low")))
	h.submitJob(job(2, 1, 0, inPart("C", 8), qos("normal")))
	h.wantState(1, loomv1.JobState_RUNNING, "")
	h.wantState(2, loomv1.JobState_RUNNING, "")
	h.submitJob(job(3, 1, 0, inPart("A", 8), qos("normal")))
	c := h.submitJob(job(4, 1, 0, inPart("C", 8), qos("high")))
	if st := stops(c); len(st) != 0 {
		t.Fatalf("stops %v; want none (a-0001 is kept for job 3)", st)
	}
	h.wantState(1, loomv1.JobState_RUNNING, "")
	h.wantState(3, loomv1.JobState_PENDING, ReasonResources)
	h.wantState(4, loomv1.JobState_PENDING, ReasonResources)
}

// TestFIFOMultiPartitionKeepsSharedNodesFromLaterRecord: without backfill,
// a job of -p A,B whose records rank the same (FCFS) and that cannot
// start in A does not start in B on the node B shares with A: slurmctld's
// record in A fails first (fail_by_part) and takes A's nodes out of
// avail_node_bitmap before its record in B is tried, which then finds
// only b-0001 (too few nodes: Resources). Once a-0001 frees, it starts in A.
func TestFIFOMultiPartitionKeepsSharedNodesFromLaterRecord(t *testing.T) {
	t.Parallel()
	h := fifoHarness(t, FIFOPolicy(),
		&loomv1.SlurmPartition{Id: "X", NodeSetIds: []string{"a"}, Default: true},
		&loomv1.SlurmPartition{Id: "A", NodeSetIds: []string{"a", "s"}},
		&loomv1.SlurmPartition{Id: "B", NodeSetIds: []string{"s", "b"}})
	h.poolNode("a-0001", "a")
	h.poolNode("s-0001", "s")
	h.poolNode("b-0001", "b")
	h.submitJob(job(1, 1, 0, inPart("X", 8)))
	h.wantState(1, loomv1.JobState_RUNNING, "")
	h.submitJob(job(2, 2, 0, inPart("A,B", 8)))
	h.wantState(2, loomv1.JobState_PENDING, ReasonResources)
	h.finish(1, 0)
	h.wantState(2, loomv1.JobState_RUNNING, "")
	if j := h.job(2); j.GetPartition() != "A" || len(j.GetNodes()) != 2 || j.GetNodes()[0] != "a-0001" || j.GetNodes()[1] != "s-0001" {
		t.Fatalf("job 2 runs in %q on %v; want A on a-0001, s-0001", j.GetPartition(), j.GetNodes())
	}
}

// TestFIFOMultiPartitionPreemptsAtFirstRecord: without backfill, a job of
// -p A,B whose records rank the same, of QOS high, that can start in A
// only by preempting job 1 (QOS low) preempts there and is not tried in
// B, though b-0001 is free: slurmctld's record in A begins the preemption
// (preempt_in_progress) before its record in B is popped, which it then
// skips ("scheduled in another partition").
func TestFIFOMultiPartitionPreemptsAtFirstRecord(t *testing.T) {
	t.Parallel()
	pol := FIFOPolicy()
	pol.Name, pol.Preempt = "fifo-preempt", true
	h := fifoHarness(t, pol,
		&loomv1.SlurmPartition{Id: "A", NodeSetIds: []string{"a"}, Default: true},
		&loomv1.SlurmPartition{Id: "B", NodeSetIds: []string{"b"}})
	h.poolNode("a-0001", "a")
	h.poolNode("b-0001", "b")
	h.submitJob(job(1, 1, 0, inPart("A", 8), qos("low")))
	h.wantState(1, loomv1.JobState_RUNNING, "")
	c := h.submitJob(job(2, 1, 0, inPart("A,B", 8), qos("high")))
	if st := stops(c); len(st) != 1 || st[0].GetJob() != jobName(1) {
		t.Fatalf("stops %v; want job 1's alone", st)
	}
	h.wantState(2, loomv1.JobState_PENDING, ReasonResources)
}

// TestFIFOBlockKeepsPlacementReason: without backfill, a job held behind a
// blocked job of its partition keeps the reason placement gave it before
// (ReqNodeNotAvail: its only node is drained) rather than Priority, as
// slurmctld's _schedule sets WAIT_PRIORITY on a job of a failed partition
// only over no reason or Resources. A job that waited for Resources reads
// Priority there, and a released one (no reason of its own) too.
func TestFIFOBlockKeepsPlacementReason(t *testing.T) {
	t.Parallel()
	h := fifoHarness(t, FIFOPolicy(), &loomv1.SlurmPartition{Id: "A", NodeSetIds: []string{"a"}, Default: true})
	h.poolNode("a-0001", "a")
	h.poolNode("a-0002", "a")
	h.do(&eventsv1.UpdateSlurmNode{Cluster: cl, Hostname: "a-0002", State: "DRAIN", Reason: "checking"})
	h.submitJob(job(10, 1, 0, inPart("A", 8)))
	h.wantState(10, loomv1.JobState_RUNNING, "")
	h.submitJob(job(1, 1, 0, inPart("A", 8), func(j *loomv1.Job) { j.Hold = true }))
	h.submitJob(job(2, 1, 0, inPart("A", 8), func(j *loomv1.Job) { j.Nodelist = []string{"a-0002"} }))
	h.submitJob(job(3, 1, 0, inPart("A", 8), func(j *loomv1.Job) { j.Hold = true }))
	h.submitJob(job(4, 1, 0, inPart("A", 8)))
	h.wantState(1, loomv1.JobState_PENDING, ReasonHeldUser)
	h.wantState(2, loomv1.JobState_PENDING, ReasonReqNodeNotAvail)
	h.wantState(4, loomv1.JobState_PENDING, ReasonResources)
	h.do(&eventsv1.UpdateJob{Job: jobName(3), Cluster: cl, Action: ActionRelease})
	h.do(&eventsv1.UpdateJob{Job: jobName(1), Cluster: cl, Action: ActionRelease})
	h.wantState(1, loomv1.JobState_PENDING, ReasonResources)
	h.wantState(2, loomv1.JobState_PENDING, ReasonReqNodeNotAvail)
	h.wantState(3, loomv1.JobState_PENDING, ReasonPriority)
	h.wantState(4, loomv1.JobState_PENDING, ReasonPriority)
}
