package ports

import (
	"context"
	"testing"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/store"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/provisioner/internal/app"
)

const demo = "projects/default/clusters/demo"

func TestBatchHandlerAppliesNodeReportsAndRefusesCommands(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, rdb := testkit.Redis(t)
	st := store.New(rdb, "provisioner:")
	a, err := app.New(ctx, app.Options{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	h, bh := Handler(a), BatchHandler(a)
	spec := &loomv1.Cluster{Name: demo, Compute: &loomv1.ComputeResources{NodePools: []*loomv1.NodePool{
		{Id: "gpu", MachineType: "a3-highgpu-8g", NodeCount: 2}}}}
	if err := h(ctx, envelope.New(topics.ClusterCommands, demo, "test", &eventsv1.CreateCluster{Operation: "op1", Cluster: spec})); err != nil {
		t.Fatal(err)
	}
	reg := func(host string) envelope.Event {
		return envelope.New(topics.NodeTelemetry, demo+"/nodes/"+host, "test", &eventsv1.AgentRegistered{Node: demo + "/nodes/" + host})
	}
	hb := envelope.New(topics.NodeTelemetry, demo+"/nodes/gpu-0001", "test", &eventsv1.Heartbeat{Node: demo + "/nodes/gpu-0001"})

	// A command in the batch: refused, nothing written.
	del := envelope.New(topics.ClusterCommands, demo, "test", &eventsv1.DeleteCluster{Operation: "op2", Cluster: demo})
	r1 := reg("gpu-0001")
	if err := bh(ctx, []envelope.Event{r1, del}); err == nil {
		t.Fatal("a batch with a DeleteCluster was applied")
	}
	if seen, err := st.Seen(ctx, r1.ID); err != nil || seen {
		t.Fatalf("a refused batch marked its registration: %v, %v", seen, err)
	}

	// Registrations and a heartbeat: the registrations applied with their
	// marks, the heartbeat skipped (as Handler skips it).
	r2 := reg("gpu-0002")
	if err := bh(ctx, []envelope.Event{r1, hb, r2}); err != nil {
		t.Fatal(err)
	}
	for _, ev := range []envelope.Event{r1, r2} {
		if seen, err := st.Seen(ctx, ev.ID); err != nil || !seen {
			t.Fatalf("registration %s not marked: %v, %v", ev.ID, seen, err)
		}
	}
	if seen, err := st.Seen(ctx, hb.ID); err != nil || seen {
		t.Fatalf("the heartbeat was marked: %v, %v", seen, err)
	}
	if c, ok := a.Cluster(demo); !ok || c.GetStatus().GetState() != loomv1.Cluster_RUNNING {
		t.Fatalf("cluster after the batch: %v", c.GetStatus())
	}
	// Heartbeats alone: nothing to write.
	if err := bh(ctx, []envelope.Event{hb, hb}); err != nil {
		t.Fatal(err)
	}

	// Health's repair: applied on its own, never in a batch.
	rem := envelope.New(topics.RemediationCommand, demo+"/nodes/gpu-0001", "test", &eventsv1.RemediateNode{Node: demo + "/nodes/gpu-0001",
		Action: loomv1.RemediationAction_ACTION_REBOOT, RemediationId: "r1"})
	if err := bh(ctx, []envelope.Event{reg("gpu-0002"), rem}); err == nil {
		t.Fatal("a batch with a RemediateNode was applied")
	}
	if err := h(ctx, rem); err != nil {
		t.Fatal(err)
	}
	for _, n := range a.Nodes("default", "demo") {
		if want := n.GetName() == demo+"/nodes/gpu-0001"; want != (n.GetState() == loomv1.Node_REBOOTING) {
			t.Fatalf("after RemediateNode: %v", n)
		}
	}
}
