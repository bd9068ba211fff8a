package domain

import (
	"testing"

	"google.golang.org/protobuf/proto"

	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/scheduler/internal/domain/views"
)

// TestPartitionState: a partition's State (scontrol update PartitionName=P
// State=..., the cluster spec's) decides what it starts, as slurmctld's
// PARTITION_SCHED: DOWN keeps its pending jobs pending with reason
// PartitionDown and leaves its running ones running; INACTIVE the same
// with PartitionInactive; DRAIN (refused at submission, by the gateway)
// starts what it has queued; UP again starts them. A job of -p pa,pb
// runs in pb while pa is DOWN. sinfo's view shows each state.
func TestPartitionState(t *testing.T) {
	t.Parallel()
	h := harnessWith(t, Config{Policy: DefaultPolicy()})
	pa := &loomv1.SlurmPartition{Id: "pa", NodeSetIds: []string{"a"}, Default: true}
	pb := &loomv1.SlurmPartition{Id: "pb", NodeSetIds: []string{"b"}}
	with := func(p *loomv1.SlurmPartition, state string) *loomv1.SlurmPartition {
		c := proto.Clone(p).(*loomv1.SlurmPartition)
		c.State = state
		return c
	}
	h.do(twoPoolCluster(pa, pb))
	h.poolNode("a-0001", "a")
	h.poolNode("a-0002", "a")
	h.poolNode("b-0001", "b")
	h.submitJob(job(1, 1, 0, inPart("pa", 8)))
	h.wantState(1, loomv1.JobState_RUNNING, "")
	h.step(1, 1, h.job(1).GetNodes()[0], eventsv1.StepState_STEP_RUNNING, 0)

	h.do(twoPoolCluster(with(pa, "DOWN"), pb))
	h.submitJob(job(2, 1, 0, inPart("pa", 8)))
	h.submitJob(job(3, 1, 0, inPart("pa,pb", 8)))
	h.wantExact(2, loomv1.JobState_PENDING, ReasonPartitionDown)
	h.wantState(3, loomv1.JobState_RUNNING, "") // in pb
	if n := h.job(3).GetNodes(); len(n) != 1 || n[0] != "b-0001" {
		t.Fatalf("job 3 on %v, want b-0001 (pb)", n)
	}
	h.wantState(1, loomv1.JobState_RUNNING, "") // running jobs go on
	h.wantPartitionStates(map[string]string{"pa": "down", "pb": "up"})

	h.do(twoPoolCluster(with(pa, "INACTIVE"), pb))
	h.wantExact(2, loomv1.JobState_PENDING, ReasonPartitionInactive)
	h.wantState(1, loomv1.JobState_RUNNING, "")
	h.wantPartitionStates(map[string]string{"pa": "inactive", "pb": "up"})

	// Both of -p pa,pb stopped: the first record's reason, as Slurm's.
	h.do(twoPoolCluster(with(pa, "DOWN"), with(pb, "DOWN")))
	h.submitJob(job(4, 1, 0, inPart("pa,pb", 8)))
	h.wantExact(4, loomv1.JobState_PENDING, ReasonPartitionDown)

	// DRAIN starts what it has queued; UP the rest.
	h.do(twoPoolCluster(with(pa, "DRAIN"), with(pb, "DOWN")))
	h.wantState(2, loomv1.JobState_RUNNING, "")
	h.wantPartitionStates(map[string]string{"pa": "drain", "pb": "down"})
	h.do(twoPoolCluster(pa, with(pb, "UP")))
	h.wantPartitionStates(map[string]string{"pa": "up", "pb": "up"})
	h.wantState(1, loomv1.JobState_RUNNING, "")
	h.wantExact(4, loomv1.JobState_PENDING, ReasonResources) // every node is busy
	h.finish(3, 0)
	h.wantState(4, loomv1.JobState_RUNNING, "")
}

// wantPartitionStates checks sinfo's view of the partitions' states.
func (h *harness) wantPartitionStates(want map[string]string) {
	h.t.Helper()
	got := map[string]string{}
	for _, p := range views.Partitions(h.s, cl) {
		got[p.GetName()] = p.GetState()
	}
	for name, st := range want {
		if got[name] != st {
			h.t.Fatalf("partition states %v, want %v", got, want)
		}
	}
}
