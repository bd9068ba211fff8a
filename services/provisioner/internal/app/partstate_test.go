package app

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/store"
	"github.com/loom-ml/loom/libs/testkit"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// setPartitionState sends what scontrol update PartitionName=all State=st
// sends: the partitions of the cluster as read, one state changed, with
// the etag of that read.
func setPartitionState(t *testing.T, a *App, id, op, st string) {
	t.Helper()
	read, _ := a.Cluster(demo)
	next := proto.Clone(read).(*loomv1.Cluster)
	next.Status, next.CreateTime, next.UpdateTime = nil, nil, nil
	next.Orchestrator.Slurm.Partitions[0].State = st
	if err := a.UpdateCluster(context.Background(), id, &eventsv1.UpdateCluster{Operation: op, Cluster: next,
		UpdateMask: []string{"orchestrator.slurm.partitions"}, Etag: read.GetEtag()}); err != nil {
		t.Fatal(err)
	}
}

// opEvents returns the ClusterChanged events that finish op and the
// failures of op in st's outbox.
func opEvents(t *testing.T, st *store.Store, op string) (done []*eventsv1.ClusterChanged, failures []*eventsv1.ClusterOperationFailed) {
	t.Helper()
	for _, ev := range outboxOf(t, st, func() *eventsv1.ClusterChanged { return &eventsv1.ClusterChanged{} }) {
		if ev.GetOperation() == op && ev.GetOperationDone() {
			done = append(done, ev)
		}
	}
	for _, ev := range outboxOf(t, st, func() *eventsv1.ClusterOperationFailed { return &eventsv1.ClusterOperationFailed{} }) {
		if ev.GetOperation() == op {
			failures = append(failures, ev)
		}
	}
	return done, failures
}

func partitionState(c *loomv1.Cluster) string {
	return c.GetOrchestrator().GetSlurm().GetPartitions()[0].GetState()
}

// During a resize (UPDATING), a partition goes DOWN at once: stored,
// emitted and its operation done, while the resize goes on and ends as
// before; any other change is still refused until the resize ends, and a
// stale etag still refuses the state change.
func TestPartitionStateDuringAResize(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, rdb := testkit.Redis(t)
	st := store.New(rdb, "provisioner:")
	c := &clock{t: time.Now()}
	a := newApp(t, st, newFake(), c)
	create(t, a, 2)
	a.ReconcileOnce(ctx)
	registerAll(t, a)
	if err := a.UpdateCluster(ctx, "ev-grow", &eventsv1.UpdateCluster{Operation: "grow", Cluster: clusterSpec(demo, 3)}); err != nil {
		t.Fatal(err)
	}
	stale, _ := a.Cluster(demo)
	if stale.GetStatus().GetState() != loomv1.Cluster_UPDATING {
		t.Fatalf("after the grow: %v, want UPDATING", stale.GetStatus())
	}

	setPartitionState(t, a, "ev-down", "down", "DOWN")
	done, failures := opEvents(t, st, "down")
	if len(failures) != 0 || len(done) != 1 || partitionState(done[0].GetCluster()) != "DOWN" {
		t.Fatalf("State=DOWN during the resize: done %v, failed %v; want done at once with the partition DOWN", done, failures)
	}
	got, _ := a.Cluster(demo)
	if partitionState(got) != "DOWN" || got.GetStatus().GetState() != loomv1.Cluster_UPDATING || got.GetEtag() == stale.GetEtag() {
		t.Fatalf("cluster = %v; want the partition DOWN, still UPDATING (the grow), a new etag", got)
	}
	if again, _ := newApp(t, st, newFake(), c).Cluster(demo); partitionState(again) != "DOWN" {
		t.Fatalf("after a restart: partition %q, want DOWN", partitionState(again))
	}

	// Anything else waits for the resize, as before.
	labels := proto.Clone(got).(*loomv1.Cluster)
	labels.Status, labels.Labels = nil, map[string]string{"team": "vision"}
	if err := a.UpdateCluster(ctx, "ev-labels", &eventsv1.UpdateCluster{Operation: "labels", Cluster: labels,
		UpdateMask: []string{"labels"}, Etag: got.GetEtag()}); err != nil {
		t.Fatal(err)
	}
	if _, failures := opEvents(t, st, "labels"); len(failures) != 1 || !strings.Contains(failures[0].GetMessage(), "is UPDATING (operation grow)") {
		t.Fatalf("labels during the resize: %v, want refused as UPDATING", failures)
	}
	// A state change from a stale read is refused by its etag.
	back := proto.Clone(stale).(*loomv1.Cluster)
	back.Status = nil
	back.Orchestrator.Slurm.Partitions[0].State = "DRAIN"
	if err := a.UpdateCluster(ctx, "ev-stale", &eventsv1.UpdateCluster{Operation: "stale", Cluster: back,
		UpdateMask: []string{"orchestrator.slurm.partitions"}, Etag: stale.GetEtag()}); err != nil {
		t.Fatal(err)
	}
	if _, failures := opEvents(t, st, "stale"); len(failures) != 1 || !strings.Contains(failures[0].GetMessage(), "does not match the cluster's current etag") {
		t.Fatalf("a stale state change: %v, want refused by its etag", failures)
	}

	// The resize ends as before, the partition still DOWN.
	a.ReconcileOnce(ctx)
	registerAll(t, a)
	if done, _ := opEvents(t, st, "grow"); len(done) != 1 || partitionState(done[0].GetCluster()) != "DOWN" ||
		done[0].GetCluster().GetStatus().GetState() != loomv1.Cluster_RUNNING {
		t.Fatalf("the grow's end: %v, want RUNNING with the partition DOWN", done)
	}
}

// A pool below target (a node that never came up) does not hold a
// partition's state change: the cluster stays RUNNING and the operation is
// done at once, not when the operation timeout passes.
func TestPartitionStateWithAPoolBelowTarget(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, rdb := testkit.Redis(t)
	st := store.New(rdb, "provisioner:")
	c := &clock{t: time.Now()}
	a := newApp(t, st, newFake(), c)
	create(t, a, 2)
	a.ReconcileOnce(ctx)
	first := node(a, "gpu-0001")
	if err := a.AgentRegistered(ctx, "reg-1", &eventsv1.AgentRegistered{Node: first.GetName()}); err != nil {
		t.Fatal(err)
	}
	c.add(31 * time.Minute) // past the create's deadline: RUNNING with 1 of 2
	a.ReconcileOnce(ctx)
	if cl, _ := a.Cluster(demo); cl.GetStatus().GetState() != loomv1.Cluster_RUNNING || cl.GetStatus().GetReadyNodes() != 1 {
		t.Fatalf("cluster = %v, want RUNNING with 1 of 2 ready", cl.GetStatus())
	}

	setPartitionState(t, a, "ev-drain", "drain", "DRAIN")
	done, failures := opEvents(t, st, "drain")
	if len(failures) != 0 || len(done) != 1 || partitionState(done[0].GetCluster()) != "DRAIN" {
		t.Fatalf("State=DRAIN with a pool below target: done %v, failed %v; want done at once", done, failures)
	}
	if cl, _ := a.Cluster(demo); cl.GetStatus().GetState() != loomv1.Cluster_RUNNING || partitionState(cl) != "DRAIN" {
		t.Fatalf("cluster = %v, want RUNNING (no UPDATING of its own) with the partition DRAIN", cl)
	}
	for _, ev := range outboxOf(t, st, func() *eventsv1.ClusterChanged { return &eventsv1.ClusterChanged{} }) {
		if ev.GetCluster().GetStatus().GetState() == loomv1.Cluster_UPDATING {
			t.Fatalf("emitted %v: the state change went UPDATING", ev.GetCluster().GetStatus())
		}
	}
}
