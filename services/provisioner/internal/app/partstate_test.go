package app

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/store"
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

// updateSpec sends an update of the cluster as read, changed by change,
// under mask, with the etag of that read.
func updateSpec(t *testing.T, a *App, id, op string, change func(*loomv1.Cluster), mask ...string) {
	t.Helper()
	read, _ := a.Cluster(demo)
	next := proto.Clone(read).(*loomv1.Cluster)
	next.Status, next.CreateTime, next.UpdateTime = nil, nil, nil
	change(next)
	if err := a.UpdateCluster(context.Background(), id, &eventsv1.UpdateCluster{Operation: op, Cluster: next,
		UpdateMask: mask, Etag: read.GetEtag()}); err != nil {
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
	a, st, c := createdOnRedis(t)
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

	// Any other change that moves no node applies at once too; one that
	// moves nodes waits for the resize, as before.
	updateSpec(t, a, "ev-labels", "labels", func(c *loomv1.Cluster) { c.Labels = map[string]string{"team": "vision"} }, "labels")
	if done, failures := opEvents(t, st, "labels"); len(failures) != 0 || len(done) != 1 || done[0].GetCluster().GetLabels()["team"] != "vision" {
		t.Fatalf("labels during the resize: done %v, failed %v; want done at once", done, failures)
	}
	updateSpec(t, a, "ev-grow2", "grow2", func(c *loomv1.Cluster) { c.Compute.NodePools[0].NodeCount = 4 }, "compute.node_pools")
	if _, failures := opEvents(t, st, "grow2"); len(failures) != 1 || !strings.Contains(failures[0].GetMessage(), "is UPDATING (operation grow)") {
		t.Fatalf("a second grow during the resize: %v, want refused as UPDATING", failures)
	}
	got, _ = a.Cluster(demo)
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
	a, st, c := createdOnRedis(t)
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

// A pool below target (a node that never came up) holds no update that
// moves no node, field by field: each is done at once and the cluster stays
// RUNNING, not UPDATING until the operation timeout passes. An update that
// moves nodes still goes UPDATING.
func TestUpdateThatMovesNoNodeWithAPoolBelowTarget(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, st, c := createdOnRedis(t)
	if err := a.AgentRegistered(ctx, "reg-1", &eventsv1.AgentRegistered{Node: node(a, "gpu-0001").GetName()}); err != nil {
		t.Fatal(err)
	}
	c.add(31 * time.Minute) // past the create's deadline: RUNNING with 1 of 2
	a.ReconcileOnce(ctx)
	if cl, _ := a.Cluster(demo); cl.GetStatus().GetState() != loomv1.Cluster_RUNNING || cl.GetStatus().GetReadyNodes() != 1 {
		t.Fatalf("cluster = %v, want RUNNING with 1 of 2 ready", cl.GetStatus())
	}

	type C = *loomv1.Cluster
	part := func(c C) *loomv1.SlurmPartition { return c.Orchestrator.Slurm.Partitions[0] }
	for _, tc := range []struct {
		op     string
		mask   string
		change func(C)
		check  func(C) bool
	}{
		{"display-name", "display_name", func(c C) { c.DisplayName = "Demo <b>" }, func(c C) bool { return c.GetDisplayName() == "Demo <b>" }},
		{"description", "description", func(c C) { c.Description = "for the demo" }, func(c C) bool { return c.GetDescription() == "for the demo" }},
		{"labels", "labels", func(c C) { c.Labels = map[string]string{"team": "vision"} }, func(c C) bool { return c.GetLabels()["team"] == "vision" }},
		{"pool-labels", "compute.node_pools", func(c C) { c.Compute.NodePools[0].Labels = map[string]string{"tier": "a"} },
			func(c C) bool { return c.GetCompute().GetNodePools()[0].GetLabels()["tier"] == "a" }},
		{"max-time", "orchestrator.slurm.partitions", func(c C) { part(c).MaxTime = "1:00:00" }, func(c C) bool { return part(c).GetMaxTime() == "1:00:00" }},
		{"priority", "orchestrator.slurm.partitions", func(c C) { part(c).PriorityTier = 3 }, func(c C) bool { return part(c).GetPriorityTier() == 3 }},
		{"features", "orchestrator.slurm.node_sets", func(c C) { c.Orchestrator.Slurm.NodeSets[0].Features = []string{"ib"} },
			func(c C) bool { return len(c.GetOrchestrator().GetSlurm().GetNodeSets()[0].GetFeatures()) == 1 }},
		{"prolog", "orchestrator.slurm.prolog_scripts", func(c C) { c.Orchestrator.Slurm.PrologScripts = []string{"#!/bin/sh\ntrue\n"} },
			func(c C) bool { return len(c.GetOrchestrator().GetSlurm().GetPrologScripts()) == 1 }},
	} {
		updateSpec(t, a, "ev-"+tc.op, tc.op, tc.change, tc.mask)
		done, failures := opEvents(t, st, tc.op)
		if len(failures) != 0 || len(done) != 1 || !tc.check(done[0].GetCluster()) {
			t.Fatalf("%s with a pool below target: done %v, failed %v; want done at once", tc.op, done, failures)
		}
		if cl, _ := a.Cluster(demo); cl.GetStatus().GetState() != loomv1.Cluster_RUNNING || !tc.check(cl) {
			t.Fatalf("%s: cluster = %v, want RUNNING (no UPDATING of its own) with the change", tc.op, cl)
		}
	}
	for _, ev := range outboxOf(t, st, func() *eventsv1.ClusterChanged { return &eventsv1.ClusterChanged{} }) {
		if ev.GetCluster().GetStatus().GetState() == loomv1.Cluster_UPDATING {
			t.Fatalf("emitted %v for %s: an update that moves no node went UPDATING", ev.GetCluster().GetStatus(), ev.GetOperation())
		}
	}

	// A grow moves nodes: UPDATING, not done until the pool is at target.
	updateSpec(t, a, "ev-grow", "grow", func(c C) { c.Compute.NodePools[0].NodeCount = 3 }, "compute.node_pools")
	if done, failures := opEvents(t, st, "grow"); len(done) != 0 || len(failures) != 0 {
		t.Fatalf("grow: done %v, failed %v; want it going on", done, failures)
	}
	if cl, _ := a.Cluster(demo); cl.GetStatus().GetState() != loomv1.Cluster_UPDATING {
		t.Fatalf("after a grow: %v, want UPDATING", cl.GetStatus())
	}
}
