package bus_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/loom-ml/loom/libs/bus"
	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/telemetry"
	"github.com/loom-ml/loom/libs/testkit"
)

// metricsServer sets up telemetry named service, the bus metrics on its
// registry and its /metrics server, and returns them with the address.
func metricsServer(t *testing.T, ctx context.Context, service string) (*telemetry.Telemetry, *bus.Metrics, string) {
	t.Helper()
	tel, err := telemetry.Setup(ctx, service, "error")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	m, err := bus.NewMetrics(tel.ServiceRegisterer())
	if err != nil {
		t.Fatal(err)
	}
	srv := telemetry.NewServer("127.0.0.1:0", tel, nil)
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	return tel, m, srv.Addr()
}

// TestConsumerLagCountsRecordsProducedWhileStopped stops a consumer, produces
// N records, and expects the very next scrape to say the group lags N
// records, each lagging partition by more than 0 seconds.
func TestConsumerLagCountsRecordsProducedWhileStopped(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 60*time.Second)
	broker := startBroker(t)
	topic := newTopic(t, broker, 3)
	_, m, addr := metricsServer(t, ctx, "lagtest")
	cfg := bus.ConsumerConfig{Brokers: []string{broker}, GroupID: "lag-group", Topics: []string{topic},
		Metrics: m, CommitInterval: -1}
	// The watch outlives the consumer, as a service's does while its
	// consumer is stalled.
	defer m.WatchLag(cfg)()

	var handled atomic.Int64
	r := startConsumer(t, cfg, nil, func(context.Context, envelope.Event) error { handled.Add(1); return nil })
	p := newProducer(t, broker)
	for i := range 3 {
		publish(t, p, event(topic, fmt.Sprintf("node-%d", i), 1))
	}
	testkit.WaitFor(t, 30*time.Second, "3 records handled and no lag", func() (bool, error) {
		s, err := testkit.ScrapeErr(addr)
		if err != nil {
			return false, err
		}
		return handled.Load() == 3 && len(s.Find("loom_consumer_lag_records", "group", "lag-group")) == 3 &&
			s.Sum("loom_consumer_lag_records", "group", "lag-group") == 0, nil
	})
	if err := r.stop(t); err != nil {
		t.Fatalf("stop: %v", err)
	}

	const n = 7
	for i := range n {
		publish(t, p, event(topic, fmt.Sprintf("node-%d", i), 2))
	}
	s := testkit.Scrape(t, addr)
	if got := s.Sum("loom_consumer_lag_records", "group", "lag-group", "topic", topic, "service", "lagtest"); got != n {
		t.Fatalf("lag = %v records, want %d: %v", got, n, s.Find("loom_consumer_lag_records"))
	}
	for _, x := range s.Find("loom_consumer_lag_records", "group", "lag-group") {
		sec := s.Sum("loom_consumer_lag_seconds", "group", "lag-group", "topic", topic, "partition", x.Labels["partition"])
		if (x.Value > 0) != (sec > 0) {
			t.Errorf("partition %s: lag %v records but %v seconds", x.Labels["partition"], x.Value, sec)
		}
	}
	if s.Sum("loom_consumer_lag_seconds", "group", "lag-group") <= 0 {
		t.Errorf("no lag in seconds: %v", s.Find("loom_consumer_lag_seconds"))
	}
	if got := s.Sum("loom_consumer_records_total", "group", "lag-group", "topic", topic); got != 3 {
		t.Errorf("records_total = %v, want 3", got)
	}
}

// TestPublishAndProcessSpans checks one record's trace across the bus: the
// publish span is the caller's child, the process span the publish span's,
// both with the messaging conventions' names and attributes, and the
// handler's context carries the process span.
func TestPublishAndProcessSpans(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 60*time.Second)
	broker := startBroker(t)
	topic := newTopic(t, broker, 2)
	exp := tracetest.NewInMemoryExporter()
	tel, err := telemetry.Setup(telemetry.WithSpanExporter(ctx, exp), "tracetest", "error")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	p := newProducer(t, broker)
	p.SetTracerProvider(tel.TracerProvider)

	got := make(chan trace.SpanContext, 1)
	startConsumer(t, bus.ConsumerConfig{Brokers: []string{broker}, GroupID: "trace-group", Topics: []string{topic},
		TracerProvider: tel.TracerProvider}, nil, func(ctx context.Context, ev envelope.Event) error {
		select {
		case got <- trace.SpanContextFromContext(ctx):
		default:
		}
		return nil
	})
	rctx, root := tel.Tracer.Start(ctx, "request")
	if err := p.Publish(rctx, event(topic, "node-1", 1)); err != nil {
		t.Fatal(err)
	}
	root.End()
	var hc trace.SpanContext
	select {
	case hc = <-got:
	case <-ctx.Done():
		t.Fatal("event not handled")
	}
	// The process span ends when the handler has returned, after it
	// signalled: wait for it to be exported.
	var pub, proc, req tracetest.SpanStub
	testkit.WaitFor(t, 30*time.Second, "publish and process spans of "+topic+" exported", func() (bool, error) {
		byName := map[string]tracetest.SpanStub{}
		for _, s := range exp.GetSpans() {
			byName[s.Name] = s
		}
		var ok1, ok2 bool
		pub, ok1 = byName["publish "+topic]
		proc, ok2 = byName["process "+topic]
		req = byName["request"]
		return ok1 && ok2, nil
	})
	if pub.Parent.SpanID() != req.SpanContext.SpanID() || pub.SpanKind != trace.SpanKindProducer {
		t.Errorf("publish span: parent %v kind %v, want the request's child, a producer", pub.Parent.SpanID(), pub.SpanKind)
	}
	if proc.Parent.SpanID() != pub.SpanContext.SpanID() || proc.SpanKind != trace.SpanKindConsumer {
		t.Errorf("process span: parent %v kind %v, want the publish span's child, a consumer", proc.Parent.SpanID(), proc.SpanKind)
	}
	if hc.SpanID() != proc.SpanContext.SpanID() || hc.TraceID() != req.SpanContext.TraceID() {
		t.Errorf("handler's span %v, want the process span %v in the request's trace", hc, proc.SpanContext)
	}
	wantAttrs(t, pub, map[string]string{"messaging.system": "kafka", "messaging.destination.name": topic,
		"messaging.operation.type": "publish", "messaging.kafka.message.key": "node-1"})
	wantAttrs(t, proc, map[string]string{"messaging.system": "kafka", "messaging.destination.name": topic,
		"messaging.operation.type": "process", "messaging.kafka.message.key": "node-1",
		"messaging.consumer.group.name": "trace-group"})
}

func names(spans tracetest.SpanStubs) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name)
	}
	return out
}

// wantAttrs fails the test when s lacks one of want's attributes.
func wantAttrs(t *testing.T, s tracetest.SpanStub, want map[string]string) {
	t.Helper()
	have := map[string]string{}
	for _, a := range s.Attributes {
		have[string(a.Key)] = a.Value.Emit()
	}
	for k, v := range want {
		if have[k] != v {
			t.Errorf("span %q: %s = %q, want %q", s.Name, k, have[k], v)
		}
	}
}

// TestBatchProcessSpansPerRecord: a batch handler's events each carry the
// context of a process span of their own, the child of their own record's
// publish span, so that what the handler emits for one event continues
// that event's trace, not the batch's first.
func TestBatchProcessSpansPerRecord(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 60*time.Second)
	broker := startBroker(t)
	topic := newTopic(t, broker, 1)
	exp := tracetest.NewInMemoryExporter()
	tel, err := telemetry.Setup(telemetry.WithSpanExporter(ctx, exp), "batchtrace", "error")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	p := newProducer(t, broker)
	p.SetTracerProvider(tel.TracerProvider)
	roots := map[trace.TraceID]bool{}
	for i := range 3 {
		rctx, root := tel.Tracer.Start(ctx, fmt.Sprintf("request %d", i))
		roots[root.SpanContext().TraceID()] = true
		if err := p.Publish(rctx, event(topic, "node-1", int32(i))); err != nil {
			t.Fatal(err)
		}
		root.End()
	}
	batches := make(chan []envelope.Event, 4)
	// A record that arrives alone (the fetch split the three) goes to the
	// lone handler: it counts as a batch of one.
	c := bus.NewConsumer(bus.ConsumerConfig{Brokers: []string{broker}, GroupID: "batch-trace", Topics: []string{topic},
		TracerProvider: tel.TracerProvider, Logger: testLogger(t)}, nil, func(ctx context.Context, ev envelope.Event) error {
		ev.TraceParent = bus.TraceParent(ctx)
		batches <- []envelope.Event{ev}
		return nil
	}).
		WithBatch(func(_ context.Context, evs []envelope.Event) error {
			batches <- evs
			return nil
		}, 10)
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(cctx) }()
	t.Cleanup(func() { cancel(); <-done })
	var evs []envelope.Event
	for len(evs) < 3 {
		select {
		case b := <-batches:
			t.Logf("a batch of %d", len(b))
			evs = append(evs, b...)
		case <-ctx.Done():
			t.Fatalf("got %d events", len(evs))
		}
	}
	var publish = map[trace.TraceID]tracetest.SpanStub{}
	var process = map[trace.SpanID]tracetest.SpanStub{}
	testkit.WaitFor(t, 10*time.Second, "spans ended", func() (bool, error) {
		for _, s := range exp.GetSpans() {
			switch s.Name {
			case "publish " + topic:
				publish[s.SpanContext.TraceID()] = s
			case "process " + topic:
				process[s.SpanContext.SpanID()] = s
			}
		}
		return len(publish) == 3 && len(process) >= 3, nil
	})
	seen := map[trace.TraceID]bool{}
	for _, ev := range evs {
		sc := trace.SpanContextFromContext(bus.WithTraceParent(context.Background(), ev.TraceParent))
		s, ok := process[sc.SpanID()]
		if !ok || !roots[sc.TraceID()] {
			t.Fatalf("event %s carries %q, not a process span of a request's trace", ev.ID, ev.TraceParent)
		}
		if s.Parent.SpanID() != publish[sc.TraceID()].SpanContext.SpanID() {
			t.Errorf("event %s's process span is not its record's publish span's child", ev.ID)
		}
		seen[sc.TraceID()] = true
	}
	if len(seen) != 3 {
		t.Errorf("events in %d traces, want each in its own (3)", len(seen))
	}
}
