package app

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/gpu"
	"github.com/loom-ml/loom/libs/store"
	"github.com/loom-ml/loom/libs/store/storetest"
	"github.com/loom-ml/loom/libs/testkit"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/agent/internal/domain"
)

func newTestNode(t *testing.T, clock ...clockwork.Clock) (*Node, *gpu.Simulated) {
	t.Helper()
	dev, err := gpu.OpenSimulated(gpu.Options{Count: 2, StateDir: t.TempDir(), Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	n, err := NewNode(NodeOptions{Device: dev, Self: domain.Self{Node: "projects/p/clusters/c/nodes/h1", Cluster: "projects/p/clusters/c"},
		Hostname: "h1", WorkDir: t.TempDir(), Clock: append(clock, nil)[0]})
	if err != nil {
		t.Fatal(err)
	}
	return n, dev
}

// metric finds name's sample for GPU gpu in families.
func metric(fams []*dto.MetricFamily, name, gpuIdx string) *dto.Metric {
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "gpu" && l.GetValue() == gpuIdx {
					return m
				}
			}
		}
	}
	return nil
}

func TestCollectorServesDCGMNames(t *testing.T) {
	t.Parallel()
	n, dev := newTestNode(t)
	if err := dev.Inject(&loomv1.Fault{Kind: loomv1.FaultKind_FAULT_XID, Gpu: 1, Xid: 31}); err != nil {
		t.Fatal(err)
	}
	if err := dev.Inject(&loomv1.Fault{Kind: loomv1.FaultKind_FAULT_ECC_DBE, Gpu: 0, Value: 3}); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(n.Collector()); err != nil {
		t.Fatal(err)
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	x := metric(fams, "DCGM_FI_DEV_XID_ERRORS", "1")
	if x == nil || x.GetGauge().GetValue() != 31 {
		t.Fatalf("DCGM_FI_DEV_XID_ERRORS{gpu=1} = %v", x)
	}
	labels := map[string]string{}
	for _, l := range x.GetLabel() {
		labels[l.GetName()] = l.GetValue()
	}
	if labels["UUID"] != dev.Info()[1].UUID || labels["modelName"] != "NVIDIA H200" || labels["Hostname"] != "h1" ||
		labels["device"] != "nvidia1" || labels["pci_bus_id"] != dev.Info()[1].PCIBusID || labels["DCGM_FI_DRIVER_VERSION"] == "" {
		t.Errorf("labels %v", labels)
	}
	// Counters are counters, as dcgm-exporter types them.
	if d := metric(fams, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "0"); d == nil || d.GetCounter().GetValue() != 3 {
		t.Errorf("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{gpu=0} = %v", d)
	}
	// The simulated H200's driver reserves 616 MiB, as a real one's does;
	// free is what is neither used nor reserved.
	used, res, free := metric(fams, "DCGM_FI_DEV_FB_USED", "0"), metric(fams, "DCGM_FI_DEV_FB_RESERVED", "0"), metric(fams, "DCGM_FI_DEV_FB_FREE", "0")
	if used == nil || res == nil || free == nil || res.GetGauge().GetValue() != 616 ||
		used.GetGauge().GetValue()+res.GetGauge().GetValue()+free.GetGauge().GetValue() != 143771 {
		t.Errorf("frame buffer: used %v reserved %v free %v", used, res, free)
	}
	for _, name := range []string{"DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_SM_CLOCK",
		"DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "DCGM_FI_DEV_ROW_REMAP_FAILURE", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER"} {
		if metric(fams, name, "0") == nil {
			t.Errorf("no %s", name)
		}
	}
	for _, f := range fams {
		if strings.HasPrefix(f.GetName(), "DCGM_") && f.GetHelp() == "" {
			t.Errorf("%s has no help text", f.GetName())
		}
	}
}

// capture is a Publisher that keeps what it is given.
type capture struct{ evs []envelope.Event }

func (c *capture) Publish(_ context.Context, evs ...envelope.Event) error {
	c.evs = append(c.evs, evs...)
	return nil
}

func TestHeartbeatGate(t *testing.T) {
	t.Parallel()
	clk := clockwork.NewFakeClock()
	n, _ := newTestNode(t, clk)
	var c capture
	p := n.HeartbeatGate(&c)
	hb, _ := envelope.Route("n", "t", &eventsv1.Heartbeat{Node: "n"})
	other, _ := envelope.Route("n", "t", &eventsv1.AgentRegistered{Node: "n"})
	send := func() { _ = p.Publish(context.Background(), hb, other) }
	send()
	if err := n.Inject(&loomv1.Fault{Kind: loomv1.FaultKind_FAULT_NO_HEARTBEAT, Gpu: -1, Value: 3600}); err != nil {
		t.Fatal(err)
	}
	send()
	if !n.HeartbeatsMuted() {
		t.Fatal("not muted")
	}
	if err := n.Inject(&loomv1.Fault{Kind: loomv1.FaultKind_FAULT_CLEAR, Gpu: -1}); err != nil {
		t.Fatal(err)
	}
	send()
	var kinds []string
	for _, e := range c.evs {
		kinds = append(kinds, strings.TrimPrefix(e.Type, "loom.events.v1."))
	}
	if got := strings.Join(kinds, ","); got != "Heartbeat,AgentRegistered,AgentRegistered,Heartbeat,AgentRegistered" {
		t.Errorf("published %s", got)
	}
	// A muting that ends by itself.
	if err := n.Inject(&loomv1.Fault{Kind: loomv1.FaultKind_FAULT_NO_HEARTBEAT, Gpu: -1, Value: 30}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(29 * time.Second)
	if !n.HeartbeatsMuted() {
		t.Fatal("unmuted before its 30 s")
	}
	clk.Advance(time.Second)
	if n.HeartbeatsMuted() {
		t.Fatal("still muted after its 30 s")
	}
}

// While FAULT_NO_HEARTBEAT holds, GPU telemetry is not published either:
// health takes it for a sign of life, and an agent that went on sending it
// (every 10s by default, inside health's 15s timeout) would never be seen
// silent. /metrics still serves the reading.
func TestNoHeartbeatMutesTelemetry(t *testing.T) {
	t.Parallel()
	n, _ := newTestNode(t)
	var c capture
	n.opts.Publisher = &c
	n.opts.Interval = time.Second
	n.opts.GPUs = 2
	ctx := context.Background()
	n.publishTelemetry(ctx)
	// Each reading says how many GPUs the node offers, for health to
	// compare with the GPUs listed.
	if tel, ok := c.evs[0].Payload.(*eventsv1.GpuTelemetry); !ok || tel.GetOfferedGpus() != 2 || len(tel.GetGpus()) != 2 {
		t.Fatalf("telemetry %v", c.evs[0].Payload)
	}
	if err := n.Inject(&loomv1.Fault{Kind: loomv1.FaultKind_FAULT_NO_HEARTBEAT, Gpu: -1}); err != nil {
		t.Fatal(err)
	}
	n.publishTelemetry(ctx)
	if len(c.evs) != 1 {
		t.Fatalf("%d telemetry events with heartbeats muted, want the 1 from before", len(c.evs))
	}
	n.mu.Lock()
	kept := len(n.last)
	n.mu.Unlock()
	if kept != 2 {
		t.Errorf("the muted reading is not kept for /metrics: %d GPUs", kept)
	}
	if err := n.Inject(&loomv1.Fault{Kind: loomv1.FaultKind_FAULT_CLEAR, Gpu: -1}); err != nil {
		t.Fatal(err)
	}
	n.publishTelemetry(ctx)
	if len(c.evs) != 2 {
		t.Fatalf("%d telemetry events after the fault cleared, want 2", len(c.evs))
	}
}

// fakeChecks answers every check with outcome and records what it ran.
type fakeChecks struct {
	outcome loomv1.CheckOutcome
	ran     chan *eventsv1.RunHealthCheck
}

func (f *fakeChecks) Run(ctx context.Context, cmd *eventsv1.RunHealthCheck) *loomv1.HealthCheckResult {
	f.ran <- cmd
	return &loomv1.HealthCheckResult{Outcome: f.outcome, Summary: "ok", Gpu: -1}
}

// outboxResults reads the HealthCheckCompleted results in st's outbox.
func outboxResults(t *testing.T, rdb *redis.Client) []*loomv1.HealthCheckResult {
	t.Helper()
	msgs, err := rdb.XRange(context.Background(), "agent-test:outbox", "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	var out []*loomv1.HealthCheckResult
	for _, m := range msgs {
		for _, v := range m.Values {
			b, ok := v.(string)
			if !ok {
				continue
			}
			var h eventsv1.HealthCheckCompleted
			if proto.Unmarshal([]byte(b), &h) == nil && h.GetResult().GetCheck() != "" {
				out = append(out, h.GetResult())
			}
		}
	}
	return out
}

func TestRunHealthCheckOnceThroughTheOutbox(t *testing.T) {
	t.Parallel()
	_, rdb := testkit.Redis(t)
	n, _ := newTestNode(t)
	n.opts.Store = store.New(rdb, "agent-test:")
	checks := &fakeChecks{outcome: loomv1.CheckOutcome_CHECK_PASS, ran: make(chan *eventsv1.RunHealthCheck, 4)}
	n.SetChecks(checks)
	cmd := &eventsv1.RunHealthCheck{Node: "projects/p/clusters/c/nodes/h1", Cluster: "projects/p/clusters/c", RunId: "r1", Check: "disk"}
	ctx := context.Background()
	for range 2 { // a redelivery runs nothing
		if err := n.RunHealthCheck(ctx, "ev-1", cmd, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	// Another node's command, and a stale one, run nothing.
	other := &eventsv1.RunHealthCheck{Node: "projects/p/clusters/c/nodes/h2", Check: "disk"}
	if err := n.RunHealthCheck(ctx, "ev-2", other, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := n.RunHealthCheck(ctx, "ev-3", cmd, time.Now().Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	n.WaitChecks(testkit.Context(t, 10*time.Second))
	if len(checks.ran) != 1 {
		t.Fatalf("the check ran %d times, want once", len(checks.ran))
	}
	var got []*loomv1.HealthCheckResult
	testkit.WaitFor(t, 10*time.Second, "the result in the outbox", func() (bool, error) {
		got = outboxResults(t, rdb)
		return len(got) > 0, nil
	})
	r := got[0]
	if len(got) != 1 || r.GetOutcome() != loomv1.CheckOutcome_CHECK_PASS || r.GetName() != "projects/p/clusters/c/healthResults/r1" ||
		r.GetHostname() != "h1" || r.GetCheck() != "disk" || r.GetStartTime() == nil {
		t.Errorf("results %v", got)
	}
}

// A check's result whose write got no answer is written again: the write
// may not have reached Redis (nothing redelivers a check that has run, so
// giving up on an unknown outcome loses the result).
func TestHealthCheckResultSurvivesALostWrite(t *testing.T) {
	t.Parallel()
	_, rdb := testkit.Redis(t)
	dropped := storetest.DropApplyRequests(rdb, "agent-test:")
	n, _ := newTestNode(t)
	n.opts.Store = store.New(rdb, "agent-test:")
	checks := &heldChecks{ran: make(chan struct{}), release: make(chan struct{})}
	n.SetChecks(checks)
	cmd := &eventsv1.RunHealthCheck{Node: "projects/p/clusters/c/nodes/h1", Cluster: "projects/p/clusters/c", RunId: "r1", Check: "disk"}
	if err := n.RunHealthCheck(context.Background(), "ev-1", cmd, time.Now()); err != nil {
		t.Fatal(err)
	}
	<-checks.ran
	dropped.Arm(1) // the result's write is lost on its way
	close(checks.release)
	n.WaitChecks(testkit.Context(t, 30*time.Second))
	if dropped.Lost() != 1 {
		t.Fatalf("%d writes lost, want the result's", dropped.Lost())
	}
	if got := outboxResults(t, rdb); len(got) != 1 {
		t.Fatalf("%d results in the outbox after a lost write, want 1", len(got))
	}
}

// heldChecks says when a check runs and answers it once released.
type heldChecks struct{ ran, release chan struct{} }

func (h *heldChecks) Run(ctx context.Context, cmd *eventsv1.RunHealthCheck) *loomv1.HealthCheckResult {
	h.ran <- struct{}{}
	<-h.release
	return &loomv1.HealthCheckResult{Outcome: loomv1.CheckOutcome_CHECK_PASS, Summary: "ok", Gpu: -1}
}

// byteChecks answers every check with a result that says what a program
// printed, bytes that are not UTF-8 included.
type byteChecks struct{}

func (byteChecks) Run(ctx context.Context, cmd *eventsv1.RunHealthCheck) *loomv1.HealthCheckResult {
	return &loomv1.HealthCheckResult{Outcome: loomv1.CheckOutcome_CHECK_FAIL, Summary: "exit 1: port \xff down", Detail: "latin-1 \xe9t\xe9\n",
		Metrics: map[string]float64{"ports\xfe": 1}, Gpu: -1}
}

// A site check program may print bytes that are not UTF-8 (a tool's
// Latin-1 output, a cut multi-byte character): the result is still sent,
// with those bytes replaced, and keeps its outcome. Before, the result
// failed to encode and was dropped: health waited out the check's timeout
// and took a failure for an unanswered check.
func TestHealthCheckResultWithInvalidUTF8IsSent(t *testing.T) {
	t.Parallel()
	_, rdb := testkit.Redis(t)
	n, _ := newTestNode(t)
	n.opts.Store = store.New(rdb, "agent-test:")
	n.SetChecks(byteChecks{})
	cmd := &eventsv1.RunHealthCheck{Node: "projects/p/clusters/c/nodes/h1", Cluster: "projects/p/clusters/c", RunId: "r1", Check: "ib_ports"}
	if err := n.RunHealthCheck(context.Background(), "ev-1", cmd, time.Now()); err != nil {
		t.Fatal(err)
	}
	n.WaitChecks(testkit.Context(t, 10*time.Second))
	got := outboxResults(t, rdb)
	if len(got) != 1 {
		t.Fatalf("%d results in the outbox, want 1", len(got))
	}
	r := got[0]
	if r.GetOutcome() != loomv1.CheckOutcome_CHECK_FAIL || r.GetSummary() != "exit 1: port \uFFFD down" ||
		r.GetDetail() != "latin-1 \uFFFDt\uFFFD\n" || r.GetMetrics()["ports\uFFFD"] != 1 {
		t.Errorf("result %v", r)
	}
}
