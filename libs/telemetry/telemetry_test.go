package telemetry

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"

	"github.com/loom-ml/loom/libs/errs"
)

func newTelemetry(t *testing.T, service string) *Telemetry {
	t.Helper()
	tel, err := setup(context.Background(), service, "debug", "")
	if err != nil {
		t.Fatalf("Setup: %v", err)
	}
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	return tel
}

func TestTraceParentCrossesProcessBoundary(t *testing.T) {
	t.Parallel()
	producer := newTelemetry(t, "producer")
	consumer := newTelemetry(t, "consumer")

	ctx, parent := producer.Tracer.Start(context.Background(), "publish")
	defer parent.End()
	header := TraceParent(ctx)
	if header == "" {
		t.Fatal("TraceParent of a context with a span is empty")
	}

	// Only the string crosses the boundary.
	remote := WithTraceParent(context.Background(), string([]byte(header)))
	_, child := consumer.Tracer.Start(remote, "handle")
	defer child.End()

	psc, csc := parent.SpanContext(), child.SpanContext()
	if csc.TraceID() != psc.TraceID() {
		t.Fatalf("child trace id %s, want %s", csc.TraceID(), psc.TraceID())
	}
	if !csc.SpanID().IsValid() || csc.SpanID() == psc.SpanID() {
		t.Fatalf("child span id %s must be new and valid (parent %s)", csc.SpanID(), psc.SpanID())
	}
	ro, ok := child.(sdktrace.ReadOnlySpan)
	if !ok {
		t.Fatalf("child span is %T, want an SDK span", child)
	}
	if ro.Parent().SpanID() != psc.SpanID() {
		t.Fatalf("child's parent %s, want %s", ro.Parent().SpanID(), psc.SpanID())
	}
}

func TestTraceParentEmptyAndInvalid(t *testing.T) {
	t.Parallel()
	if got := TraceParent(context.Background()); got != "" {
		t.Fatalf("TraceParent without a span = %q, want empty", got)
	}
	base := context.WithValue(context.Background(), struct{}{}, 1)
	for _, tp := range []string{"", "garbage", "00-00000000000000000000000000000000-0000000000000000-01"} {
		if got := WithTraceParent(base, tp); got != base {
			t.Errorf("WithTraceParent(%q) changed ctx", tp)
		}
	}
}

func TestSetupRejectsBadLevel(t *testing.T) {
	t.Parallel()
	_, err := setup(context.Background(), "svc", "loud", "")
	var inv *errs.InvalidError
	if !errors.As(err, &inv) || inv.Violations[0].Field != "log_level" {
		t.Fatalf("Setup with level loud: %v, want InvalidArgument on log_level", err)
	}
}

func startServer(t *testing.T, tel *Telemetry, ready func(context.Context) error) string {
	t.Helper()
	s := NewServer("127.0.0.1:0", tel, ready)
	if err := s.Start(); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	if s.Addr() == "" || strings.HasSuffix(s.Addr(), ":0") {
		t.Fatalf("Addr = %q after Start", s.Addr())
	}
	return "http://" + s.Addr()
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestMetricsShowsCounterPerService(t *testing.T) {
	t.Parallel()
	a := newTelemetry(t, "svc-a")
	b := newTelemetry(t, "svc-b")
	c, err := a.Meter.Int64Counter("loom_test_events_handled")
	if err != nil {
		t.Fatal(err)
	}
	c.Add(context.Background(), 3)

	code, body := get(t, startServer(t, a, nil)+"/metrics")
	if code != http.StatusOK || !strings.Contains(body, "loom_test_events_handled_total") {
		t.Fatalf("svc-a /metrics: %d, counter missing:\n%s", code, body)
	}
	if !strings.Contains(body, `loom_test_events_handled_total{otel_scope_name="github.com/loom-ml/loom/svc-a"`) ||
		!strings.Contains(body, "} 3\n") {
		t.Fatalf("svc-a /metrics lacks the counter's value 3:\n%s", body)
	}
	if !strings.Contains(body, "go_goroutines") {
		t.Fatalf("svc-a /metrics lacks the Go runtime metrics")
	}
	_, other := get(t, startServer(t, b, nil)+"/metrics")
	if strings.Contains(other, "loom_test_events_handled") {
		t.Fatalf("svc-b /metrics shows svc-a's counter")
	}
}

func TestReadyzAndHealthz(t *testing.T) {
	t.Parallel()
	tel := newTelemetry(t, "svc")
	var ready atomic.Bool
	base := startServer(t, tel, func(context.Context) error {
		if !ready.Load() {
			return errors.New("redis not answering")
		}
		return nil
	})
	if code, body := get(t, base+"/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "redis not answering") {
		t.Fatalf("/readyz before ready: %d %q, want 503 with the reason", code, body)
	}
	if code, _ := get(t, base+"/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz: %d, want 200", code)
	}
	ready.Store(true)
	if code, _ := get(t, base+"/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz when ready: %d, want 200", code)
	}
}

func TestLoggerJSONWithServiceAndTrace(t *testing.T) {
	t.Parallel()
	tel := newTelemetry(t, "svc")
	var buf bytes.Buffer
	log := LoggerTo(&buf, "scheduler", "info")
	log.Debug("hidden")
	ctx, span := tel.Tracer.Start(context.Background(), "op")
	defer span.End()
	log.InfoContext(ctx, "placed", "job", "projects/default/jobs/1")

	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 1 {
		t.Fatalf("want one line (debug filtered at info), got %d:\n%s", len(lines), buf.String())
	}
	var rec map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &rec); err != nil {
		t.Fatalf("not JSON: %v: %s", err, lines[0])
	}
	if rec["service"] != "scheduler" || rec["msg"] != "placed" || rec["job"] != "projects/default/jobs/1" {
		t.Fatalf("record %v lacks service/msg/job", rec)
	}
	if rec["trace_id"] != span.SpanContext().TraceID().String() {
		t.Fatalf("trace_id %v, want %s", rec["trace_id"], span.SpanContext().TraceID())
	}
}

// collector is an OTLP trace receiver that records the span names it got.
type collector struct {
	coltracepb.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans map[string]string // span name → service.name
}

func (c *collector) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		svc := ""
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				svc = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				c.spans[s.GetName()] = svc
			}
		}
	}
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

func TestOTLPExport(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	col := &collector{spans: map[string]string{}}
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, col)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)

	tel, err := setup(context.Background(), "exporter-test", "info", ln.Addr().String())
	if err != nil {
		t.Fatalf("Setup with OTLP: %v", err)
	}
	_, span := tel.Tracer.Start(context.Background(), "exported-span", trace.WithSpanKind(trace.SpanKindInternal))
	span.End()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// Shutdown flushes the batcher, so the span has arrived when it returns.
	if err := tel.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	col.mu.Lock()
	defer col.mu.Unlock()
	if got := col.spans["exported-span"]; got != "exporter-test" {
		t.Fatalf("collector got spans %v, want exported-span from exporter-test", col.spans)
	}
}
