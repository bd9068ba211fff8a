package app

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/health/internal/domain"
	"github.com/loom-ml/loom/services/health/internal/remedy"
)

// TestRemediationSurvivesRestart checks on a real Redis that a repair in
// flight is stored with the RemediateNode it sent: a restarted app knows the
// repair's id, takes the provisioner's answer to it, asks for the confirming
// check, and puts the node back when it passes; every event goes out once.
func TestRemediationSurvivesRestart(t *testing.T) {
	t.Parallel()
	st, clk, ctx := onRedis(t)
	cfg := domain.Config{Timeout: 15 * time.Second, Remedy: remedy.Config{Seed: 42}}

	a := NewWith(st, cfg, clk.now, slog.Default())
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	must := func(app *App, ev envelope.Event) {
		t.Helper()
		if err := app.Handle(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	must(a, event(topics.NodeEvents, &eventsv1.NodeChanged{Node: &loomv1.Node{Name: node, Hostname: "gpu-0001", State: loomv1.Node_READY}}))
	xid := event(topics.NodeTelemetry, &eventsv1.XidObserved{Node: node, Gpu: 2, Xid: 79})
	must(a, xid)
	must(a, xid) // redelivered: nothing more
	rec := a.Remedy(node)
	if rec == nil || rec.State != loomv1.RemediationState_NODE_REBOOTING || rec.RepairID == "" {
		t.Fatalf("after Xid 79: %+v", rec)
	}
	if n, _ := st.OutboxLen(ctx); n != 3 {
		t.Fatalf("outbox %d, want DRAINING, REBOOTING and RemediateNode", n)
	}

	b := NewWith(st, cfg, clk.now, slog.Default())
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	got := b.Remedy(node)
	if got == nil || got.RepairID != rec.RepairID || got.State != rec.State {
		t.Fatalf("restored %+v, want %+v", got, rec)
	}
	must(b, event(topics.NodeEvents, &eventsv1.RemediationFinished{Node: node, RemediationId: rec.RepairID, Ok: true}))
	got = b.Remedy(node)
	if !got.Confirming || got.ConfirmID == "" {
		t.Fatalf("after the repair: %+v", got)
	}
	must(b, event(topics.NodeTelemetry, &eventsv1.HealthCheckCompleted{Result: &loomv1.HealthCheckResult{
		Name: "projects/default/clusters/c1/healthResults/" + got.ConfirmID, Node: node, Check: "gpu_diag",
		Outcome: loomv1.CheckOutcome_CHECK_PASS, Trigger: "confirm"}}))
	if s := b.Remedy(node).State; s != loomv1.RemediationState_NODE_HEALTHY {
		t.Fatalf("after the confirming check: %v", s)
	}
	if n, _ := st.OutboxLen(ctx); n != 5 {
		t.Fatalf("outbox %d, want 5 (3, the confirm check, HEALTHY)", n)
	}
	views := b.ListNodeHealth("projects/default/clusters/c1")
	if len(views) != 1 || views[0].GetState() != loomv1.RemediationState_NODE_HEALTHY || views[0].GetHostname() != "gpu-0001" {
		t.Fatalf("ListNodeHealth: %v", views)
	}
}

// An Xid its node signed on a GPU index the node does not have (8 GPUs,
// Xid 79 on GPU 99, or on -5) is dropped and counted
// (loom_health_dropped_total{reason="gpu-index"}): the node is not
// drained, nothing is emitted. Its real GPUs' Xids still are judged.
func TestXidOnAGPUTheNodeLacksIsDropped(t *testing.T) {
	t.Parallel()
	st, clk, ctx := onRedis(t)
	a := NewWith(st, domain.Config{Timeout: 15 * time.Second, Remedy: remedy.Config{Seed: 42}}, clk.now, slog.Default())
	if err := a.RegisterMetrics(prometheus.NewRegistry()); err != nil {
		t.Fatal(err)
	}
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Handle(ctx, event(topics.NodeEvents, &eventsv1.NodeChanged{Node: &loomv1.Node{Name: node, Hostname: "gpu-0001",
		State: loomv1.Node_READY, Gpus: 8}})); err != nil {
		t.Fatal(err)
	}
	signedXid := func(gpu int32) envelope.Event {
		ev := envelope.New(topics.NodeTelemetry, node, "loom/agent", &eventsv1.XidObserved{Node: node, Gpu: gpu, Xid: 79})
		ev.Signer = "nodes/" + node
		return ev
	}
	for _, gpu := range []int32{8, 99, -5} {
		if err := a.Handle(ctx, signedXid(gpu)); err != nil {
			t.Fatal(err)
		}
	}
	if rec := a.Remedy(node); rec != nil && rec.State != loomv1.RemediationState_NODE_HEALTHY {
		t.Fatalf("after Xids on GPUs the node lacks: %+v", rec)
	}
	if n, _ := st.OutboxLen(ctx); n != 0 {
		t.Fatalf("outbox %d after Xids on GPUs the node lacks, want 0", n)
	}
	if d := testutil.ToFloat64(a.metrics.dropped.WithLabelValues(domain.DropGPUIndex)); d != 3 {
		t.Fatalf("loom_health_dropped_total{reason=gpu-index} = %v, want 3", d)
	}
	if err := a.Handle(ctx, signedXid(7)); err != nil {
		t.Fatal(err)
	}
	if rec := a.Remedy(node); rec == nil || rec.State != loomv1.RemediationState_NODE_REBOOTING {
		t.Fatalf("after Xid 79 on GPU 7: %+v", rec)
	}
}

// TestRepairWaitsForTheProvisionersDeadline checks on a real Redis that
// health waits for a repair's answer as long as the provisioner said it
// gives the repair (RemediationProgress, plus remedy.RepairMargin) when that
// is longer than -repair-timeout: a sim replacement takes an hour, a
// cloud's reimage 45 minutes. A repair the provisioner said nothing of
// (an older provisioner) is given up at -repair-timeout, as before, and
// the late answer to it still reaches the cluster's history.
func TestRepairWaitsForTheProvisionersDeadline(t *testing.T) {
	t.Parallel()
	st, clk, ctx := onRedis(t)
	cfg := domain.Config{Timeout: 24 * time.Hour, Remedy: remedy.Config{Seed: 7, RepairTimeout: 30 * time.Minute}}
	a := NewWith(st, cfg, clk.now, slog.Default())
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	must := func(ev envelope.Event) {
		t.Helper()
		if err := a.Handle(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	const slow, old = "projects/default/clusters/c1/nodes/gpu-0001", "projects/default/clusters/c2/nodes/gpu-0001"
	for _, n := range []string{slow, old} {
		must(envelope.New(topics.NodeEvents, n, "loom/test", &eventsv1.NodeChanged{Node: &loomv1.Node{Name: n, Hostname: "gpu-0001", State: loomv1.Node_READY}}))
		must(envelope.New(topics.NodeTelemetry, n, "loom/test", &eventsv1.XidObserved{Node: n, Gpu: 0, Xid: 79}))
	}
	slowID, oldID := a.Remedy(slow).RepairID, a.Remedy(old).RepairID
	if slowID == "" || oldID == "" {
		t.Fatalf("no repair started: %+v %+v", a.Remedy(slow), a.Remedy(old))
	}
	// The provisioner booted slow's node expecting it to take 50 minutes.
	must(envelope.New(topics.NodeEvents, slow, "loom/test", &eventsv1.RemediationProgress{Node: slow, RemediationId: slowID,
		Action: loomv1.RemediationAction_ACTION_REBOOT, DeadlineIn: durationpb.New(50 * time.Minute)}))
	// Progress of another repair says nothing of this one.
	must(envelope.New(topics.NodeEvents, old, "loom/test", &eventsv1.RemediationProgress{Node: old, RemediationId: "not-" + oldID,
		DeadlineIn: durationpb.New(50 * time.Minute)}))

	clk.advance(31 * time.Minute)
	if err := a.Check(ctx); err != nil {
		t.Fatal(err)
	}
	if r := a.Remedy(slow); r.State != loomv1.RemediationState_NODE_REBOOTING || r.RepairID != slowID {
		t.Fatalf("30m into a repair the provisioner gives 50m: %v %q, want still REBOOTING", r.State, r.Reason)
	}
	if r := a.Remedy(old); r.State != loomv1.RemediationState_NODE_REIMAGING || r.Reason != "reboot not finished within 30m0s" {
		t.Fatalf("30m into a repair with no progress: %v %q, want given up (REIMAGING)", r.State, r.Reason)
	}
	clk.advance(25 * time.Minute) // 56m: past 50m + the margin
	if err := a.Check(ctx); err != nil {
		t.Fatal(err)
	}
	if r := a.Remedy(slow); r.State != loomv1.RemediationState_NODE_REIMAGING || r.Reason != "reboot not finished within 55m0s" {
		t.Fatalf("past the provisioner's deadline and the margin: %v %q", r.State, r.Reason)
	}
	// The first repair's answer comes late: the ladder went on, but the
	// history says how it ended.
	must(envelope.New(topics.NodeEvents, old, "loom/test", &eventsv1.RemediationFinished{Node: old, Cluster: "projects/default/clusters/c2",
		RemediationId: oldID, Action: loomv1.RemediationAction_ACTION_REBOOT, Ok: true, Message: "rebooted: gpu-0001 is back"}))
	if r := a.Remedy(old); r.State != loomv1.RemediationState_NODE_REIMAGING || r.RepairID == oldID {
		t.Fatalf("a late answer changed the repair in flight: %+v", r)
	}
	evs, _, err := a.NodeHealthEvents(ctx, "projects/default/clusters/c2")
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) == 0 || evs[0].GetReason() != "reboot finished after health gave up waiting: rebooted: gpu-0001 is back" {
		t.Fatalf("history after the late answer: %v", evs)
	}
}

// TestRepairDeadlineBounded: a RemediationProgress whose deadline_in is
// past remedy.MaxRepairDeadline is refused naming the field and the
// limit, and does not keep the repair from escalating at -repair-timeout.
func TestRepairDeadlineBounded(t *testing.T) {
	t.Parallel()
	st, clk, ctx := onRedis(t)
	cfg := domain.Config{Timeout: 24 * time.Hour, Remedy: remedy.Config{Seed: 7, RepairTimeout: 30 * time.Minute}}
	a := NewWith(st, cfg, clk.now, slog.Default())
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	const n = "projects/default/clusters/c1/nodes/gpu-0001"
	for _, ev := range []envelope.Event{
		envelope.New(topics.NodeEvents, n, "loom/test", &eventsv1.NodeChanged{Node: &loomv1.Node{Name: n, Hostname: "gpu-0001", State: loomv1.Node_READY}}),
		envelope.New(topics.NodeTelemetry, n, "loom/test", &eventsv1.XidObserved{Node: n, Gpu: 0, Xid: 79}),
	} {
		if err := a.Handle(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	id := a.Remedy(n).RepairID
	if id == "" {
		t.Fatalf("no repair started: %+v", a.Remedy(n))
	}
	err := a.Handle(ctx, envelope.New(topics.NodeEvents, n, "loom/test", &eventsv1.RemediationProgress{Node: n, RemediationId: id,
		Action: loomv1.RemediationAction_ACTION_REBOOT, DeadlineIn: durationpb.New(100 * 365 * 24 * time.Hour)}))
	if err == nil || !strings.Contains(err.Error(), "deadline_in") || !strings.Contains(err.Error(), "24h0m0s") {
		t.Fatalf("a century's deadline: %v, want refused naming deadline_in and 24h0m0s", err)
	}
	clk.advance(31 * time.Minute)
	if err := a.Check(ctx); err != nil {
		t.Fatal(err)
	}
	if r := a.Remedy(n); r.State != loomv1.RemediationState_NODE_REIMAGING || r.Reason != "reboot not finished within 30m0s" {
		t.Fatalf("30m into a repair given a century: %v %q, want given up (REIMAGING)", r.State, r.Reason)
	}
}
