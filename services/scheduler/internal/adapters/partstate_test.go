package adapters

import (
	"testing"
	"time"

	"github.com/loom-ml/loom/libs/store"
	"github.com/loom-ml/loom/libs/testkit"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/scheduler/internal/domain"
	"github.com/loom-ml/loom/services/scheduler/internal/domain/views"
)

// TestPartitionStateSurvivesRestart: a partition's State (scontrol update
// PartitionName=P State=DOWN, from the cluster spec) is stored with the
// cluster, so a restarted scheduler or a follower taking over keeps the
// partition down: sinfo shows it and its jobs stay pending.
func TestPartitionStateSurvivesRestart(t *testing.T) {
	t.Parallel()
	_, rdb := testkit.Redis(t)
	st := store.New(rdb, "scheduler:")
	ctx := testkit.Context(t, 30*time.Second)
	const cl = "projects/default/clusters/c1"
	cluster := &loomv1.Cluster{Name: cl,
		Compute: &loomv1.ComputeResources{NodePools: []*loomv1.NodePool{{Id: "a", MachineType: "n2-standard-8"}}},
		Orchestrator: &loomv1.Orchestrator{Slurm: &loomv1.SlurmOrchestrator{
			NodeSets:   []*loomv1.SlurmNodeSet{{Id: "a", NodePoolId: "a"}},
			Partitions: []*loomv1.SlurmPartition{{Id: "pa", NodeSetIds: []string{"a"}, Default: true, State: "DOWN"}}}},
		Status: &loomv1.ClusterStatus{State: loomv1.Cluster_RUNNING, SharedDir: "/s"}}
	s := domain.NewState(domain.Config{Policy: domain.DefaultPolicy()})
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	persist(t, ctx, st, s, now, &eventsv1.ClusterChanged{Cluster: cluster})
	persist(t, ctx, st, s, now, &eventsv1.NodeChanged{Node: &loomv1.Node{Name: cl + "/nodes/a-0001", Cluster: cl, Hostname: "a-0001",
		State: loomv1.Node_READY, NodePool: "a", MachineType: "n2-standard-8", Role: "compute"}})
	persist(t, ctx, st, s, now, &eventsv1.SubmitJob{Job: &loomv1.Job{Name: "projects/default/jobs/1", JobId: "1", Cluster: cl,
		Partition: "pa", Command: []string{"/bin/true"}}})

	recs, err := NewRepo(st).Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	loaded := domain.NewState(domain.Config{Policy: domain.DefaultPolicy()})
	loaded.Load(recs.Clusters, recs.Nodes, recs.Jobs, recs.Runs, recs.Arrays, recs.Usage)
	ps := views.Partitions(loaded, cl)
	if len(ps) != 1 || ps[0].GetState() != "down" {
		t.Fatalf("loaded partitions %v, want pa down", ps)
	}
	// A pass of the loaded state (a node's heartbeat) keeps the job pending.
	c, err := loaded.Handle(now.Add(time.Minute), &eventsv1.NodeChanged{Node: &loomv1.Node{Name: cl + "/nodes/a-0001", Cluster: cl,
		Hostname: "a-0001", State: loomv1.Node_READY, NodePool: "a", MachineType: "n2-standard-8", Role: "compute"}})
	if err != nil {
		t.Fatal(err)
	}
	loaded.Commit(c)
	if j := loaded.Job("projects/default/jobs/1"); j.GetState() != loomv1.JobState_PENDING || j.GetStateReason() != domain.ReasonPartitionDown {
		t.Fatalf("job 1 after the restart: %v %q, want PENDING PartitionDown", j.GetState(), j.GetStateReason())
	}
}
