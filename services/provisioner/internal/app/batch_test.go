package app

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/store"
	"github.com/loom-ml/loom/libs/store/storetest"
	"github.com/loom-ml/loom/libs/testkit"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// registrations returns a registration per node of demo, with its inbox id.
func registrations(a *App) ([]string, []proto.Message) {
	var ids []string
	var evs []proto.Message
	for _, n := range a.Nodes("default", "demo") {
		ids = append(ids, "reg-"+n.GetName())
		evs = append(evs, &eventsv1.AgentRegistered{Node: n.GetName()})
	}
	return ids, evs
}

// sameAsRedis fails unless a's memory holds what Redis does: the cluster
// and every node, as an app loaded from st sees them.
func sameAsRedis(t *testing.T, a *App, st *store.Store, c *clock) {
	t.Helper()
	fromRedis := newApp(t, st, newFake(), c)
	want, ok := fromRedis.Cluster(demo)
	if got, _ := a.Cluster(demo); !ok || !proto.Equal(got, want) {
		t.Fatalf("memory has cluster %v, Redis %v", got, want)
	}
	g, w := a.Nodes("default", "demo"), fromRedis.Nodes("default", "demo")
	if len(g) != len(w) {
		t.Fatalf("memory has %d nodes, Redis %d", len(g), len(w))
	}
	for i := range g {
		if !proto.Equal(g[i], w[i]) {
			t.Fatalf("memory has node %v, Redis %v", g[i], w[i])
		}
	}
}

func TestApplyBatchWritesOnceWithAMarkPerEvent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, rdb := testkit.Redis(t)
	st := store.New(rdb, "provisioner:")
	c := &clock{t: time.Now()}
	a := newApp(t, st, newFake(), c)
	create(t, a, 4)
	ids, evs := registrations(a)
	if err := a.ApplyBatch(ctx, ids[:3], evs[:3]); err != nil {
		t.Fatal(err)
	}
	// create: ClusterChanged + 4 NodeChanged; the batch: one ClusterChanged + 3 NodeChanged.
	if n, err := st.OutboxLen(ctx); err != nil || n != 9 {
		t.Fatalf("outbox = %d, %v; want 9", n, err)
	}
	for _, id := range ids[:3] {
		if seen, err := st.Seen(ctx, id); err != nil || !seen {
			t.Fatalf("inbox mark of %s: %v, %v", id, seen, err)
		}
	}
	sameAsRedis(t, a, st, c)

	// A batch with an event applied before writes nothing: the consumer
	// then applies its events one by one, and the inbox drops the seen one.
	if err := a.ApplyBatch(ctx, ids[2:], evs[2:]); !errors.Is(err, ErrBatchSeen) {
		t.Fatalf("batch with a seen event = %v, want ErrBatchSeen", err)
	}
	if seen, err := st.Seen(ctx, ids[3]); err != nil || seen {
		t.Fatalf("a refused batch marked %s: %v, %v", ids[3], seen, err)
	}
	if n := node(a, "gpu-0004"); n.GetState() != loomv1.Node_PROVISIONING {
		t.Fatalf("a refused batch changed gpu-0004 in memory: %v", n.GetState())
	}
	for i := 2; i < 4; i++ {
		if err := a.AgentRegistered(ctx, ids[i], evs[i].(*eventsv1.AgentRegistered)); err != nil {
			t.Fatal(err)
		}
	}
	if cl, _ := a.Cluster(demo); cl.GetStatus().GetState() != loomv1.Cluster_RUNNING {
		t.Fatalf("cluster %v after every registration", cl.GetStatus().GetState())
	}
	if err := a.ApplyBatch(ctx, nil, nil); err != nil {
		t.Fatalf("empty batch: %v", err)
	}
	if err := a.ApplyBatch(ctx, []string{"x"}, []proto.Message{&eventsv1.NodeDrained{Node: "n"}}); err == nil {
		t.Fatal("a batch with a NodeDrained was applied")
	}
}

// Fault injection: a batch whose Apply ran in Redis but whose answer was
// lost. Memory must then hold what Redis holds (the whole batch), and the
// batch redelivered (as a batch, or one by one) must change nothing.
func TestApplyBatchWithLostAnswerLeavesMemoryAsRedis(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, rdb := testkit.Redis(t)
	lost := storetest.LoseApplyReplies(rdb, "provisioner:")
	st := store.New(rdb, "provisioner:")
	c := &clock{t: time.Now()}
	a := newApp(t, st, newFake(), c)
	create(t, a, 3)
	ids, evs := registrations(a)
	lost.Arm(1)
	if err := a.ApplyBatch(ctx, ids, evs); !store.OutcomeUnknown(err) {
		t.Fatalf("ApplyBatch with a lost answer = %v, want the outcome unknown", err)
	}
	if lost.Lost() != 1 {
		t.Fatalf("%d answers lost, want 1", lost.Lost())
	}
	sameAsRedis(t, a, st, c)
	if cl, _ := a.Cluster(demo); cl.GetStatus().GetState() != loomv1.Cluster_RUNNING {
		t.Fatalf("memory after the lost answer: cluster %v, want RUNNING (the script ran)", cl.GetStatus().GetState())
	}
	n0, err := st.OutboxLen(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.ApplyBatch(ctx, ids, evs); !errors.Is(err, ErrBatchSeen) {
		t.Fatalf("redelivered batch = %v, want ErrBatchSeen", err)
	}
	for i, id := range ids {
		if err := a.AgentRegistered(ctx, id, evs[i].(*eventsv1.AgentRegistered)); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := st.OutboxLen(ctx); err != nil || n != n0 {
		t.Fatalf("outbox = %d, %v after the redeliveries; want %d (nothing new)", n, err, n0)
	}
	sameAsRedis(t, a, st, c)
}
