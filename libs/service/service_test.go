package service

import (
	"context"
	"errors"
	"io"
	"math"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/loom-ml/loom/libs/bus"
	"github.com/loom-ml/loom/libs/config"
	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/store"
	"github.com/loom-ml/loom/libs/telemetry"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

func testConfig(t *testing.T) config.Common {
	t.Helper()
	broker := testkit.Broker(t)
	redisAddr, _ := testkit.Redis(t)
	return config.Common{
		ServiceKeyFile: testkit.ServiceKeyFile(t),
		Brokers:        []string{broker},
		RedisAddr:      redisAddr,
		GRPCAddr:       "127.0.0.1:0",
		HTTPAddr:       "127.0.0.1:0",
		LogLevel:       "warn",
		CreateTopics:   true,
	}
}

// running is a Base whose Run is in progress.
type running struct {
	base *Base
	svc  *testkit.Service
}

func start(t *testing.T, b *Base, consumers []Consume, loops ...func(context.Context) error) *running {
	t.Helper()
	return &running{base: b, svc: testkit.Start(t, "base", func(ctx context.Context) error { return b.Run(ctx, consumers, loops...) })}
}

// cancelHandler applies CancelJob: it records the job as cancelled and emits
// a JobChanged, as the scheduler would.
func cancelHandler(st func() *store.Store) func(context.Context, envelope.Event) error {
	return func(ctx context.Context, ev envelope.Event) error {
		c, ok := ev.Payload.(*eventsv1.CancelJob)
		if !ok {
			return nil
		}
		var tx store.Tx
		tx.Set("cancelled:"+c.GetJob(), []byte("1"))
		tx.Emit(envelope.New(topics.JobEvents, c.GetCluster(), "loom/test",
			&eventsv1.JobChanged{Job: &loomv1.Job{Name: c.GetJob(), Cluster: c.GetCluster(), State: loomv1.JobState_CANCELLED}}))
		_, err := st().Apply(ctx, ev.ID, &tx)
		return err
	}
}

func TestRunAppliesEventsServesHealthAndStops(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	ctx := testkit.Context(t, 60*time.Second)
	b, err := New(ctx, "svctest", cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	r := start(t, b, []Consume{{Topics: []string{topics.JobCommands}, Handler: cancelHandler(func() *store.Store { return b.Store })}})

	addr, err := b.GRPCAddr(ctx)
	if err != nil {
		t.Fatalf("GRPCAddr: %v", err)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	testkit.WaitFor(t, 10*time.Second, "health SERVING", func() (bool, error) {
		resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
		return err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING, nil
	})

	httpAddr, err := b.HTTPAddr(ctx)
	if err != nil {
		t.Fatalf("HTTPAddr: %v", err)
	}
	resp, err := http.Get("http://" + httpAddr + "/readyz")
	if err != nil {
		t.Fatalf("GET /readyz: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/readyz = %d, want 200 with Redis up", resp.StatusCode)
	}

	// An event that carries a trace: the emitted event must continue it.
	tel, err := telemetry.Setup(ctx, "client", "error")
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(context.Background())
	sctx, span := tel.Tracer.Start(ctx, "cancel")
	in := envelope.New(topics.JobCommands, "projects/default/clusters/c1", "loom/test",
		&eventsv1.CancelJob{Job: "projects/default/jobs/7", Cluster: "projects/default/clusters/c1"})
	in.TraceParent = telemetry.TraceParent(sctx)
	span.End()
	testkit.PublishAs(t, cfg.Brokers[0], "gateway", in) // a CancelJob is the gateway's (envelope.Senders)

	out := testkit.WaitEvent(t, cfg.Brokers[0], topics.JobEvents, 20*time.Second, func(e envelope.Event) bool {
		jc, ok := e.Payload.(*eventsv1.JobChanged)
		return ok && jc.GetJob().GetName() == "projects/default/jobs/7"
	})
	got := trace.SpanContextFromContext(telemetry.WithTraceParent(context.Background(), out.TraceParent))
	if got.TraceID() != span.SpanContext().TraceID() {
		t.Fatalf("emitted event's trace %s, want %s", got.TraceID(), span.SpanContext().TraceID())
	}
	if v, err := b.Store.Get(ctx, "cancelled:projects/default/jobs/7"); err != nil || string(v) != "1" {
		t.Fatalf("state after the event: %q, %v", v, err)
	}

	// The metrics endpoint reports the gRPC calls made above.
	mresp, err := http.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(mresp.Body)
	mresp.Body.Close()
	if !strings.Contains(string(body), "rpc_server") {
		t.Fatalf("/metrics lacks otelgrpc's rpc_server metrics")
	}

	started := time.Now()
	if err := r.svc.Stop(); err != nil {
		t.Fatalf("Run after cancel = %v, want nil", err)
	}
	t.Logf("stopped in %v", time.Since(started))
	if err := b.Redis.Ping(context.Background()).Err(); err == nil {
		t.Fatal("Redis client still open after Run returned")
	}
	if _, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		t.Fatal("gRPC port still accepting after Run returned")
	}
}

func TestRunReturnsLoopError(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	ctx := testkit.Context(t, 60*time.Second)
	b, err := New(ctx, "looptest", cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	boom := errors.New("boom")
	otherStopped := make(chan struct{})
	r := start(t, b, nil,
		func(ctx context.Context) error { return boom },
		func(ctx context.Context) error { <-ctx.Done(); close(otherStopped); return ctx.Err() },
	)
	select {
	case <-r.svc.Done():
		if err := r.svc.Stop(); !errors.Is(err, boom) {
			t.Fatalf("Run = %v, want boom", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return after a loop failed")
	}
	select {
	case <-otherStopped:
	default:
		t.Fatal("the other loop was still running when Run returned")
	}
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	_, err := New(context.Background(), "", config.Common{})
	var inv *errs.InvalidError
	if !errors.As(err, &inv) {
		t.Fatalf("New with empty config = %v, want InvalidArgument", err)
	}
	fields := map[string]bool{}
	for _, v := range inv.Violations {
		fields[v.Field] = true
	}
	for _, f := range []string{"name", "brokers", "redis_addr"} {
		if !fields[f] {
			t.Errorf("violation for %s missing in %v", f, inv)
		}
	}
}

// -bus-node-rate and -bus-node-burst out of bounds (negative, NaN,
// infinite, too great) stop New with the field named; every consumer Run
// starts holds each node to them, or to the defaults when they are 0.
func TestBusNodeRate(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cfg   config.Common
		field string
	}{
		{config.Common{BusNodeRate: -1}, "bus_node_rate"},
		{config.Common{BusNodeRate: math.NaN()}, "bus_node_rate"},
		{config.Common{BusNodeRate: math.Inf(1)}, "bus_node_rate"},
		{config.Common{BusNodeBurst: -1}, "bus_node_burst"},
		{config.Common{BusNodeBurst: bus.MaxNodeBurst + 1}, "bus_node_burst"},
	} {
		c.cfg.Brokers, c.cfg.RedisAddr = []string{"127.0.0.1:1"}, "127.0.0.1:1"
		_, err := New(context.Background(), "svc", c.cfg)
		var inv *errs.InvalidError
		if !errors.As(err, &inv) || len(inv.Violations) != 1 || inv.Violations[0].Field != c.field {
			t.Errorf("New with %+v = %v, want InvalidArgument on %s", c.cfg, err, c.field)
		}
	}
	h := func(context.Context, envelope.Event) error { return nil }
	b := &Base{Name: "svc", Telemetry: &telemetry.Telemetry{}}
	if cfg := b.consumerConfig(Consume{Topics: []string{"t"}, Handler: h}); cfg.NodeRate != bus.DefaultNodeRate || cfg.NodeBurst != bus.DefaultNodeBurst {
		t.Errorf("consumer's node rate %v/%d, want the defaults %v/%d", cfg.NodeRate, cfg.NodeBurst, bus.DefaultNodeRate, bus.DefaultNodeBurst)
	}
	b.Config.BusNodeRate, b.Config.BusNodeBurst = 5, 50
	if cfg := b.consumerConfig(Consume{Topics: []string{"t"}, Handler: h}); cfg.NodeRate != 5 || cfg.NodeBurst != 50 {
		t.Errorf("consumer's node rate %v/%d, want -bus-node-rate's 5/50", cfg.NodeRate, cfg.NodeBurst)
	}
}

// -bus-session-timeout out of bounds stops New with the field named;
// every consumer Run starts joins with it, or with the default when it is 0.
func TestBusSessionTimeout(t *testing.T) {
	t.Parallel()
	for _, d := range []time.Duration{-time.Second, bus.MinSessionTimeout - 1, bus.MaxSessionTimeout + 1} {
		cfg := config.Common{Brokers: []string{"127.0.0.1:1"}, RedisAddr: "127.0.0.1:1", BusSessionTimeout: d}
		_, err := New(context.Background(), "svc", cfg)
		var inv *errs.InvalidError
		if !errors.As(err, &inv) || len(inv.Violations) != 1 || inv.Violations[0].Field != "bus_session_timeout" {
			t.Errorf("New with -bus-session-timeout %v = %v, want InvalidArgument on bus_session_timeout", d, err)
		}
	}
	h := func(context.Context, envelope.Event) error { return nil }
	b := &Base{Name: "svc", Telemetry: &telemetry.Telemetry{}}
	if cfg := b.consumerConfig(Consume{Topics: []string{"t"}, Handler: h}); cfg.SessionTimeout != 0 {
		t.Errorf("consumer's session timeout %v, want 0 (bus.DefaultSessionTimeout)", cfg.SessionTimeout)
	}
	b.Config.BusSessionTimeout = 3 * time.Second
	if cfg := b.consumerConfig(Consume{Topics: []string{"t"}, Handler: h}); cfg.SessionTimeout != 3*time.Second {
		t.Errorf("consumer's session timeout %v, want -bus-session-timeout's 3s", cfg.SessionTimeout)
	}
	if cfg := b.consumerConfig(Consume{Topics: []string{"t"}, Handler: h, Config: &bus.ConsumerConfig{SessionTimeout: time.Minute}}); cfg.SessionTimeout != time.Minute {
		t.Errorf("consumer's session timeout %v, want its own 1m", cfg.SessionTimeout)
	}
}

func TestNewGivesUpWhenCtxEnds(t *testing.T) {
	t.Parallel()
	// Nothing listens on a port that was just free.
	dead := testkit.FreeAddr()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := New(ctx, "nowhere", config.Common{Brokers: []string{dead}, RedisAddr: dead, LogLevel: "error", ServiceKeyFile: testkit.ServiceKeyFile(t)})
	if err == nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("New without Redis = %v, want a deadline error", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("New took %v after a 500ms deadline", d)
	}
}

func TestRunFailsOnTakenAddress(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	cfg.GRPCAddr = taken.Addr().String()
	ctx := testkit.Context(t, 30*time.Second)
	b, err := New(ctx, "taken", cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := b.Run(ctx, nil); err == nil {
		t.Fatal("Run on a taken address succeeded")
	}
	if _, err := b.GRPCAddr(ctx); err == nil {
		t.Fatal("GRPCAddr after a failed Run succeeded")
	}
}
