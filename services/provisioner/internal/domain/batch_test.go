package domain

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// TestBatchEndsWhereOneByOneEnds decides the same registrations and health
// verdicts one by one and as one batch: the records end the same, and the
// batch writes each node and the cluster once, announcing each once with
// its final record.
func TestBatchEndsWhereOneByOneEnds(t *testing.T) {
	t.Parallel()
	pools := []*loomv1.NodePool{gpuPool("gpu", 4), gpuPool("gpu2", 2)}
	one, batched := created(t, pools...), created(t, pools...)
	var evs []proto.Message
	for _, n := range one.ClusterNodes(demo) {
		evs = append(evs, &eventsv1.AgentRegistered{Node: n.GetName(), Cluster: demo, Hostname: n.GetHostname()})
	}
	// A node registered twice, and one that goes DOWN after registering.
	evs = append(evs, evs[0], &eventsv1.NodeHealthChanged{Node: demo + "/nodes/gpu2-0002", Cluster: demo,
		Health: eventsv1.NodeHealth_UNHEALTHY, Reason: "no heartbeat for 30s"})
	at := t0.Add(time.Minute)
	var oneByOne []Change
	for _, ev := range evs {
		var ch Change
		switch ev := ev.(type) {
		case *eventsv1.AgentRegistered:
			ch = one.AgentRegistered(p, ev, at)
		case *eventsv1.NodeHealthChanged:
			ch = one.NodeHealthChanged(p, ev, at)
		}
		oneByOne = append(oneByOne, apply(one, ch))
	}
	ch, err := batched.Batch(p, evs, at)
	if err != nil {
		t.Fatal(err)
	}
	apply(batched, ch)

	for name, n := range one.Nodes {
		if !proto.Equal(n, batched.Nodes[name]) {
			t.Fatalf("node %s: one by one %v, batched %v", name, n, batched.Nodes[name])
		}
	}
	if len(one.Nodes) != len(batched.Nodes) {
		t.Fatalf("%d nodes one by one, %d batched", len(one.Nodes), len(batched.Nodes))
	}
	// One by one, the create finished with the last registration and the
	// verdict came after; in the batch the verdict is in before the
	// statuses are: gpu2 has one ready node of two, so the create waits.
	if st := one.Clusters[demo].State(); st != loomv1.Cluster_RUNNING {
		t.Fatalf("one by one: cluster %v, want RUNNING", st)
	}
	b := batched.Clusters[demo].Cluster.GetStatus()
	if b.GetState() != loomv1.Cluster_CREATING || b.GetReadyNodes() != 5 || b.GetMessage() != "5 of 6 nodes ready" {
		t.Fatalf("batched: cluster %v %q (%d ready), want CREATING with 5 of 6 ready", b.GetState(), b.GetMessage(), b.GetReadyNodes())
	}
	if k := cond(t, batched.Clusters[demo].Cluster, CondDegraded); k.GetStatus() != "True" || !strings.Contains(k.GetMessage(), "gpu2-0002") {
		t.Fatalf("batched: Degraded = %v", k)
	}

	// One write per record, one event per record, in that order: the
	// cluster's, then the nodes'.
	if len(ch.PutClusters) != 1 || len(ch.PutNodes) != 6 || len(ch.PutSlurm) != 0 {
		t.Fatalf("batch writes %d clusters, %d nodes, %d Slurm files; want 1, 6, 0", len(ch.PutClusters), len(ch.PutNodes), len(ch.PutSlurm))
	}
	cc := clusterChanged(t, ch)
	if cc == nil || cc.Operation != "op1" || cc.OperationDone || !proto.Equal(cc.Cluster, batched.Clusters[demo].Cluster) {
		t.Fatalf("ClusterChanged = %v, want the final record, operation in progress", cc)
	}
	ncs := eventsOf[*eventsv1.NodeChanged](ch)
	if len(ch.Events) != 7 || len(ncs) != 6 {
		t.Fatalf("batch emits %d events (%d NodeChanged); want 7 (6)", len(ch.Events), len(ncs))
	}
	for _, nc := range ncs {
		if !proto.Equal(nc.Node, batched.Nodes[nc.Node.GetName()]) {
			t.Fatalf("NodeChanged %v is not the final record", nc.Node)
		}
	}
	total := 0
	for _, c := range oneByOne {
		total += len(eventsOf[*eventsv1.ClusterChanged](c))
	}
	if total != 7 {
		t.Fatalf("one by one emitted %d ClusterChanged, want 7 (the batch: 1)", total)
	}

	// The verdict's node recovers: the batch finishes the create, and its
	// one ClusterChanged says so.
	ch, err = batched.Batch(p, []proto.Message{&eventsv1.NodeHealthChanged{Node: demo + "/nodes/gpu2-0002", Cluster: demo,
		Health: eventsv1.NodeHealth_HEALTHY}}, at.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	apply(batched, ch)
	if cc := clusterChanged(t, ch); cc == nil || !cc.OperationDone || cc.Cluster.GetStatus().GetState() != loomv1.Cluster_RUNNING {
		t.Fatalf("after recovery ClusterChanged = %v, want the create done", cc)
	}
}

func TestBatchAcrossClustersAndRefusals(t *testing.T) {
	t.Parallel()
	s := created(t)
	other := "projects/default/clusters/other"
	apply(s, s.CreateCluster(p, createCmd("op2", clusterSpec(other)), t0))
	var evs []proto.Message
	for _, c := range []string{demo, other} {
		for _, n := range s.ClusterNodes(c) {
			evs = append(evs, &eventsv1.AgentRegistered{Node: n.GetName(), Cluster: c})
		}
	}
	// Reports about nodes nobody knows change nothing, in a batch too.
	evs = append(evs, &eventsv1.AgentRegistered{Node: demo + "/nodes/gpu-0099"})
	ch, err := s.Batch(p, evs, t0.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	apply(s, ch)
	ccs := eventsOf[*eventsv1.ClusterChanged](ch)
	if len(ccs) != 2 || !ccs[0].OperationDone || !ccs[1].OperationDone {
		t.Fatalf("ClusterChanged = %v, want one per cluster, each finishing its create", ccs)
	}
	for _, c := range []string{demo, other} {
		if st := s.Clusters[c].State(); st != loomv1.Cluster_RUNNING {
			t.Fatalf("%s is %v", c, st)
		}
	}

	if !Batched(&eventsv1.AgentRegistered{}) || !Batched(&eventsv1.NodeHealthChanged{}) || Batched(&eventsv1.CreateCluster{}) ||
		Batched(&eventsv1.NodeDrained{}) {
		t.Fatal("Batched: want registrations and health verdicts only")
	}
	before := proto.Clone(s.Nodes[demo+"/nodes/gpu-0001"])
	ch, err = s.Batch(p, []proto.Message{
		&eventsv1.NodeHealthChanged{Node: demo + "/nodes/gpu-0001", Health: eventsv1.NodeHealth_UNHEALTHY},
		&eventsv1.NodeDrained{Node: demo + "/nodes/gpu-0001"},
	}, t0)
	if err == nil || !ch.Empty() {
		t.Fatalf("Batch with a NodeDrained = %+v, %v; want an error and no change", ch, err)
	}
	if !proto.Equal(before, s.Nodes[demo+"/nodes/gpu-0001"]) {
		t.Fatal("a refused batch changed the state")
	}
}
