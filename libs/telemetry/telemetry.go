// Package telemetry sets up OpenTelemetry traces and metrics, structured logs,
// and the HTTP endpoints every service serves: /metrics (Prometheus), /healthz
// and /readyz. Trace context travels between services in the traceparent header
// of Kafka records.
//
// Nothing here is global but the W3C propagator: each Setup has its own tracer
// provider and its own metric registry, so that several services in one process
// (`loom up`) keep their spans and metrics apart.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/localsite"
)

// EnvOTLPEndpoint names the variable holding the OTLP/gRPC collector address
// ("host:port", plaintext, or a URL such as "https://collector:4317").
const EnvOTLPEndpoint = "LOOM_OTLP_ENDPOINT"

// EnvHTTPHosts names the variable listing, comma-separated, further Host
// names the HTTP ports answer (ScrapeNames): the domain names a site's
// Prometheus scrapes its targets by ("scheduler.prod.example"). Unset: none.
const EnvHTTPHosts = "LOOM_HTTP_HOSTS"

// Propagator is the W3C tracecontext propagator Loom uses everywhere.
var Propagator propagation.TextMapPropagator = propagation.TraceContext{}

// Telemetry is one service's tracer, meter and logger.
type Telemetry struct {
	Service string
	Logger  *slog.Logger
	Tracer  trace.Tracer
	Meter   metric.Meter
	// Metrics serves this service's metrics in Prometheus text format.
	Metrics http.Handler

	// TracerProvider and MeterProvider are this service's providers, for
	// instrumentation that takes them (otelgrpc, for one).
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider
	// Registry is this service's Prometheus registry, for collectors that
	// are not OpenTelemetry instruments.
	Registry *prometheus.Registry

	tp   *sdktrace.TracerProvider
	mp   *sdkmetric.MeterProvider
	once sync.Once
	err  error
}

// Setup builds the service's telemetry. Traces are exported over OTLP/gRPC when
// LOOM_OTLP_ENDPOINT is set, and only propagated otherwise. Each call gets its
// own metric registry, so several services in one process keep apart.
// level is debug, info, warn or error ("" means info); anything else is an
// InvalidArgument error naming log_level.
func Setup(ctx context.Context, service, level string) (*Telemetry, error) {
	return setup(ctx, service, level, os.Getenv(EnvOTLPEndpoint))
}

// setup is Setup with the OTLP endpoint given ("" for none).
func setup(ctx context.Context, service, level, otlpEndpoint string) (*Telemetry, error) {
	if _, err := ParseLevel(level); err != nil {
		return nil, fmt.Errorf("telemetry setup for %s: %w", service, err)
	}
	// The global propagator is the same for every service, so setting it
	// again is harmless; it serves instrumentation that reads the global.
	otel.SetTextMapPropagator(Propagator)

	res, err := resource.Merge(resource.Default(),
		resource.NewWithAttributes(semconv.SchemaURL, semconv.ServiceName(service)))
	if err != nil {
		return nil, fmt.Errorf("telemetry setup for %s: resource: %w", service, err)
	}

	// Without an exporter the provider still samples and makes real span ids,
	// so a traceparent started here names a span and propagates.
	topts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res)}
	if ep := otlpEndpoint; ep != "" {
		exp, err := otlptracegrpc.New(ctx, otlpOptions(ep)...)
		if err != nil {
			return nil, fmt.Errorf("telemetry setup for %s: otlp exporter for %s: %w", service, ep, err)
		}
		topts = append(topts, sdktrace.WithBatcher(exp))
	}
	if exp, ok := ctx.Value(spanExporterKey{}).(sdktrace.SpanExporter); ok {
		// Synchronous, so that a test sees a span as soon as it ended.
		topts = append(topts, sdktrace.WithSyncer(exp))
	}
	tp := sdktrace.NewTracerProvider(topts...)

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if err := registerBuildInfo(reg, service); err != nil {
		_ = tp.Shutdown(ctx)
		return nil, fmt.Errorf("telemetry setup for %s: build info: %w", service, err)
	}
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		_ = tp.Shutdown(ctx)
		return nil, fmt.Errorf("telemetry setup for %s: prometheus exporter: %w", service, err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp), sdkmetric.WithResource(res))

	const scope = "github.com/loom-ml/loom"
	return &Telemetry{
		Service:        service,
		Logger:         Logger(service, level),
		Tracer:         tp.Tracer(scope + "/" + service),
		Meter:          mp.Meter(scope + "/" + service),
		Metrics:        promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}),
		TracerProvider: tp,
		MeterProvider:  mp,
		Registry:       reg,
		tp:             tp,
		mp:             mp,
	}, nil
}

// spanExporterKey is the context key of WithSpanExporter.
type spanExporterKey struct{}

// WithSpanExporter returns ctx telling Setup to send every span of the
// telemetry it sets up to exp as well, synchronously, as each span ends. Tests
// give a tracetest.InMemoryExporter to see the spans of services they run;
// the services' own code does not change.
func WithSpanExporter(ctx context.Context, exp sdktrace.SpanExporter) context.Context {
	return context.WithValue(ctx, spanExporterKey{}, exp)
}

func otlpOptions(ep string) []otlptracegrpc.Option {
	if strings.Contains(ep, "://") {
		// The URL's scheme says whether to use TLS.
		return []otlptracegrpc.Option{otlptracegrpc.WithEndpointURL(ep)}
	}
	return []otlptracegrpc.Option{otlptracegrpc.WithEndpoint(ep), otlptracegrpc.WithInsecure()}
}

// Shutdown flushes and stops the exporters. Calling it again returns the
// first result.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	t.once.Do(func() {
		t.err = errors.Join(t.tp.Shutdown(ctx), t.mp.Shutdown(ctx))
		if t.err != nil {
			t.err = fmt.Errorf("telemetry shutdown for %s: %w", t.Service, t.err)
		}
	})
	return t.err
}

// TraceParent returns the W3C traceparent of the span in ctx, or "".
func TraceParent(ctx context.Context) string {
	c := propagation.MapCarrier{}
	Propagator.Inject(ctx, c)
	return c.Get("traceparent")
}

// WithTraceParent returns ctx carrying the remote span context in tp (ctx
// unchanged when tp is empty or invalid).
func WithTraceParent(ctx context.Context, tp string) context.Context {
	if tp == "" {
		return ctx
	}
	out := Propagator.Extract(ctx, propagation.MapCarrier{"traceparent": tp})
	sc := trace.SpanContextFromContext(out)
	if !sc.IsValid() || !sc.IsRemote() {
		return ctx
	}
	return out
}

// ParseLevel maps debug, info, warn or error ("" is info; case does not
// matter) to a slog level; anything else is an InvalidArgument error.
func ParseLevel(level string) (slog.Level, error) {
	switch strings.ToLower(level) {
	case "debug":
		return slog.LevelDebug, nil
	case "", "info":
		return slog.LevelInfo, nil
	case "warn", "warning":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return slog.LevelInfo, errs.Invalid("log_level", "must be debug, info, warn or error, got %q", level)
}

// Logger returns a JSON slog logger at level with the service attribute set,
// writing to stderr. An unknown level logs at info. Records logged with a
// context that holds a span carry its trace_id and span_id.
func Logger(service, level string) *slog.Logger {
	return LoggerTo(os.Stderr, service, level)
}

// LoggerTo is Logger writing to w. Warnings and errors are rate limited
// per message (LogBurst, LogPerSecond; see limited).
func LoggerTo(w io.Writer, service, level string) *slog.Logger {
	return loggerTo(w, service, level, nil)
}

func loggerTo(w io.Writer, service, level string, now func() time.Time) *slog.Logger {
	lvl, _ := ParseLevel(level)
	h := slog.NewJSONHandler(w, &slog.HandlerOptions{Level: lvl})
	return slog.New(limitHandler{traceHandler{h}, newLimited(now)}).With("service", service)
}

// traceHandler adds the trace and span ids of the context's span, so that
// logs and traces of one operation can be joined.
type traceHandler struct{ slog.Handler }

func (h traceHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	return h.Handler.Handle(ctx, r)
}

func (h traceHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return traceHandler{h.Handler.WithAttrs(as)}
}

func (h traceHandler) WithGroup(name string) slog.Handler {
	return traceHandler{h.Handler.WithGroup(name)}
}

// readyTimeout bounds one /readyz check.
const readyTimeout = 2 * time.Second

// Server serves /metrics, /healthz (always 200 while the process runs) and
// /readyz (200 when ready returns nil, else 503 with the error) on addr, to
// scrapers only (ScrapeNames): a request that a web page could have made
// is 403 with the reason.
type Server struct {
	addr  string
	srv   *http.Server
	mu    sync.Mutex
	bound string
}

// ScrapeNames are the Host names, besides IP addresses and localhost, that
// a Server on addr answers: a name of one label (a container network's
// "scheduler:9172", as docker-compose's Prometheus scrapes), this machine's
// host name (what RegisterFileSD advertises for a port on every
// interface), the name addr itself binds, if any, and the names an
// operator lists in LOOM_HTTP_HOSTS (EnvHTTPHosts). Anything else (an
// FQDN of a domain, "rebind.evil.example:9172") is what a DNS-rebinding
// page in a browser on a machine that reaches the port would send to read
// the metrics; localsite.Names says why these names are not.
func ScrapeNames(addr string) localsite.Names {
	n := localsite.Names{OneLabel: true}
	if h, err := os.Hostname(); err == nil {
		n.Exact = append(n.Exact, h)
	}
	if h, _, err := net.SplitHostPort(addr); err == nil && net.ParseIP(h) == nil {
		n.Exact = append(n.Exact, h)
	}
	for _, h := range strings.Split(os.Getenv(EnvHTTPHosts), ",") {
		if h = strings.TrimSpace(h); h != "" {
			n.Exact = append(n.Exact, h)
		}
	}
	return n
}

// NewServer returns an HTTP server for t's metrics on addr ("127.0.0.1:0" picks
// a port). A nil ready means always ready.
func NewServer(addr string, t *Telemetry, ready func(context.Context) error) *Server {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", t.Metrics)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if ready != nil {
			ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
			defer cancel()
			if err := ready(ctx); err != nil {
				http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		_, _ = io.WriteString(w, "ok\n")
	})
	// Every path, / and a 404 included: what a page could read here at all
	// is the point, not which path it asked for.
	names := ScrapeNames(addr)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if why := names.Refusal(r); why != "" {
			http.Error(w, "this port answers only scrapers and this machine's clients: "+why, http.StatusForbidden)
			return
		}
		mux.ServeHTTP(w, r)
	})
	return &Server{addr: addr, srv: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}}
}

// Start listens and serves in the background.
func (s *Server) Start() error {
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		return fmt.Errorf("telemetry server: listen on %s: %w", s.addr, err)
	}
	s.mu.Lock()
	s.bound = ln.Addr().String()
	s.mu.Unlock()
	go func() { _ = s.srv.Serve(ln) }()
	return nil
}

// Addr returns the bound address after Start ("" before).
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bound
}

// Shutdown stops the server gracefully.
func (s *Server) Shutdown(ctx context.Context) error {
	if err := s.srv.Shutdown(ctx); err != nil {
		return fmt.Errorf("telemetry server shutdown: %w", err)
	}
	return nil
}
