package telemetry

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
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

// TestServerRefusesRebindingPages: /metrics, /healthz and /readyz answer a
// scraper that names the port by IP address, localhost, a one-label name
// or this machine's host name, and refuse, 403 with the reason, a name of
// a domain (a DNS-rebinding page's) and another site's page.
func TestServerRefusesRebindingPages(t *testing.T) {
	t.Parallel()
	base := startServer(t, newTelemetry(t, "svc"), nil)
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(base, "http://"))
	type hostCase struct {
		host, site string
		code       int
	}
	var cases []hostCase
	if h, _ := os.Hostname(); h != "" {
		cases = append(cases, hostCase{h + ":" + port, "", http.StatusOK})
	}
	for _, c := range append(cases, []hostCase{
		{"127.0.0.1:" + port, "", http.StatusOK},
		{"localhost:" + port, "", http.StatusOK},
		{"[::1]:" + port, "", http.StatusOK},
		{"scheduler:" + port, "", http.StatusOK},
		{"127.0.0.1:" + port, "none", http.StatusOK},
		{"rebind.evil.example:" + port, "", http.StatusForbidden},
		{"rebind.evil.example", "same-origin", http.StatusForbidden},
		{"127.0.0.1:" + port, "cross-site", http.StatusForbidden},
	}...) {
		for _, path := range []string{"/metrics", "/healthz", "/readyz"} {
			req, err := http.NewRequest("GET", base+path, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Host = c.host
			if c.site != "" {
				req.Header.Set("Sec-Fetch-Site", c.site)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatalf("GET %s Host %q: %v", path, c.host, err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != c.code {
				t.Errorf("GET %s Host %q Sec-Fetch-Site %q: %d %q, want %d", path, c.host, c.site, resp.StatusCode, b, c.code)
			}
			if c.code == http.StatusForbidden && (!strings.Contains(string(b), "answers only scrapers") || strings.Contains(string(b), "go_goroutines")) {
				t.Errorf("GET %s Host %q: refusal %q lacks the reason or carries metrics", path, c.host, b)
			}
		}
	}
}

func TestScrapeNamesAdmitTheBoundName(t *testing.T) {
	t.Parallel()
	r, _ := http.NewRequest("GET", "http://node01.cluster.example:9176/metrics", nil)
	if why := ScrapeNames("node01.cluster.example:9176").Refusal(r); why != "" {
		t.Fatalf("a port bound to node01.cluster.example refuses that name: %s", why)
	}
	if why := ScrapeNames("127.0.0.1:9176").Refusal(r); why == "" && !strings.EqualFold(mustHostname(t), "node01.cluster.example") {
		t.Fatal("a port bound to 127.0.0.1 admits the name of a domain")
	}
}

func mustHostname(t *testing.T) string {
	t.Helper()
	h, err := os.Hostname()
	if err != nil {
		t.Skip("no host name:", err)
	}
	return h
}

// TestScrapeNamesAdmitTheListedNames: a site whose Prometheus names its
// targets by domain lists those names in LOOM_HTTP_HOSTS; others stay
// refused. Not parallel: it sets the process's environment.
func TestScrapeNamesAdmitTheListedNames(t *testing.T) {
	t.Setenv(EnvHTTPHosts, " scheduler.prod.example ,, gateway.prod.example")
	names := ScrapeNames("0.0.0.0:9172")
	for host, admitted := range map[string]bool{
		"scheduler.prod.example:9172": true,
		"GATEWAY.prod.example:9172":   true,
		"rebind.evil.example:9172":    false,
	} {
		r, _ := http.NewRequest("GET", "http://"+host+"/metrics", nil)
		if why := names.Refusal(r); (why == "") != admitted {
			t.Errorf("Host %s: refusal %q, want admitted=%v", host, why, admitted)
		}
	}
}
