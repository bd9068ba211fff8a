package app

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/store"
	"github.com/loom-ml/loom/libs/store/storetest"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/health/internal/domain"
)

const node = "projects/default/clusters/c1/nodes/gpu-0001"

// clock is a fake clock safe to read from the app.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

// onRedis is what an app test on a real Redis starts from: health's store
// on a Redis of its own, a fake clock at 2025-01-01, and a context of 30 s.
func onRedis(t *testing.T) (*store.Store, *clock, context.Context) {
	t.Helper()
	_, rdb := testkit.Redis(t)
	return store.New(rdb, "health:"), &clock{t: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}, testkit.Context(t, 30*time.Second)
}
func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func event(topic string, payload proto.Message) envelope.Event {
	return envelope.New(topic, node, "loom/test", payload)
}

// TestVerdictSurvivesRestart checks, on a real Redis with a fake clock, that
// a verdict is stored with its event, that a restarted app keeps it and gives
// the node a full timeout of grace, and that a heartbeat then heals it.
func TestVerdictSurvivesRestart(t *testing.T) {
	t.Parallel()
	st, clk, ctx := onRedis(t)
	const timeout = 15 * time.Second

	a := New(st, timeout, clk.now, slog.Default())
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Handle(ctx, event(topics.NodeEvents, &eventsv1.NodeChanged{Node: &loomv1.Node{Name: node, State: loomv1.Node_READY}})); err != nil {
		t.Fatal(err)
	}
	clk.advance(timeout)
	if err := a.Check(ctx); err != nil {
		t.Fatal(err)
	}
	if n, _ := a.Node(node); !n.Unhealthy {
		t.Fatal("not UNHEALTHY after the timeout")
	}
	if n, err := st.OutboxLen(ctx); err != nil || n != 1 {
		t.Fatalf("outbox holds %d events (%v), want the one verdict", n, err)
	}
	if err := a.Check(ctx); err != nil {
		t.Fatal(err)
	}
	if n, _ := st.OutboxLen(ctx); n != 1 {
		t.Fatalf("outbox holds %d events after a second check, want 1", n)
	}

	b := New(st, timeout, clk.now, slog.Default())
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if n, ok := b.Node(node); !ok || !n.Unhealthy || n.Cluster != "projects/default/clusters/c1" {
		t.Fatalf("after restart: %+v %v, want the member UNHEALTHY", n, ok)
	}
	hb := event(topics.NodeTelemetry, &eventsv1.Heartbeat{Node: node})
	if err := b.Handle(ctx, hb); err != nil {
		t.Fatal(err)
	}
	if n, _ := b.Node(node); n.Unhealthy {
		t.Fatal("heartbeat did not heal the node")
	}
	// Redelivered, the heartbeat changes nothing more.
	if err := b.Handle(ctx, hb); err != nil {
		t.Fatal(err)
	}
	if n, _ := st.OutboxLen(ctx); n != 2 {
		t.Fatalf("outbox holds %d events, want UNHEALTHY and HEALTHY", n)
	}

	c := New(st, timeout, clk.now, slog.Default())
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	clk.advance(timeout - time.Millisecond)
	if err := c.Check(ctx); err != nil {
		t.Fatal(err)
	}
	if n, _ := c.Node(node); n.Unhealthy {
		t.Fatal("flagged inside the restart grace")
	}
	clk.advance(time.Millisecond)
	if err := c.Check(ctx); err != nil {
		t.Fatal(err)
	}
	if n, _ := c.Node(node); !n.Unhealthy {
		t.Fatal("not flagged after the restart grace")
	}
}

// Fault injection: an Apply whose script ran in Redis but whose answer was
// lost (a timeout). The app reloads, so memory holds what Redis holds: the
// membership the lost answer was for, and the verdict of a check whose
// answer was lost, which the next check therefore does not emit again.
func TestApplyWithLostAnswerLeavesMemoryAsRedis(t *testing.T) {
	t.Parallel()
	_, rdb := testkit.Redis(t)
	lost := storetest.LoseApplyReplies(rdb, "health:")
	st := store.New(rdb, "health:")
	ctx := testkit.Context(t, 30*time.Second)
	clk := &clock{t: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
	const timeout = 15 * time.Second
	a := New(st, timeout, clk.now, slog.Default())
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	fromRedis := func() (domain.Node, bool) {
		t.Helper()
		b := New(st, timeout, clk.now, slog.Default())
		if err := b.Start(ctx); err != nil {
			t.Fatal(err)
		}
		return b.Node(node)
	}

	joined := event(topics.NodeEvents, &eventsv1.NodeChanged{Node: &loomv1.Node{Name: node, State: loomv1.Node_READY}})
	lost.Arm(1)
	if err := a.Handle(ctx, joined); !store.OutcomeUnknown(err) {
		t.Fatalf("Handle with a lost answer = %v, want the outcome unknown", err)
	}
	if _, ok := fromRedis(); !ok {
		t.Fatal("the script did not run: Redis lacks the member")
	}
	if _, ok := a.Node(node); !ok {
		t.Fatal("memory lacks the member Redis has")
	}
	if err := a.Handle(ctx, joined); err != nil { // the redelivery: seen
		t.Fatal(err)
	}

	clk.advance(timeout)
	lost.Arm(1)
	if err := a.Check(ctx); !store.OutcomeUnknown(err) {
		t.Fatalf("Check with a lost answer = %v, want the outcome unknown", err)
	}
	mem, _ := a.Node(node)
	red, _ := fromRedis()
	if !red.Unhealthy || mem.Unhealthy != red.Unhealthy || mem.Reason != red.Reason {
		t.Fatalf("memory %+v, Redis %+v; want both UNHEALTHY", mem, red)
	}
	if err := a.Check(ctx); err != nil {
		t.Fatal(err)
	}
	if n, _ := st.OutboxLen(ctx); n != 1 {
		t.Fatalf("outbox holds %d verdicts, want 1 (the lost answer's, not emitted again)", n)
	}
}
