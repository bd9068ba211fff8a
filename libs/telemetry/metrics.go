package telemetry

import (
	"context"
	"runtime"
	"runtime/debug"
	"sort"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Version is the release Loom was built as, set at link time
// (-ldflags "-X github.com/loom-ml/loom/libs/telemetry.Version=v1.2.3"); when
// empty, loom_build_info reports the main module's version from the build
// information ("(devel)" for a build from a work tree).
var Version string

// ServiceRegisterer returns t's registry wrapped so that every metric
// registered through it carries the constant label service=<t.Service>: the
// one label every base metric shares, so that the services of one `loom up`
// process, each on its own /metrics, still tell apart on a shared dashboard.
func (t *Telemetry) ServiceRegisterer() prometheus.Registerer {
	return prometheus.WrapRegistererWith(prometheus.Labels{"service": t.Service}, t.Registry)
}

// buildInfo returns version, revision and Go version of this binary.
func buildInfo() (version, revision, goversion string) {
	version, revision, goversion = Version, "unknown", runtime.Version()
	if bi, ok := debug.ReadBuildInfo(); ok {
		if version == "" {
			version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && s.Value != "" {
				revision = s.Value
			}
		}
	}
	if version == "" {
		version = "(devel)"
	}
	return version, revision, goversion
}

// registerBuildInfo registers loom_build_info{service,version,revision,goversion} = 1.
func registerBuildInfo(reg prometheus.Registerer, service string) error {
	v, r, g := buildInfo()
	info := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "loom_build_info",
		Help:        "Always 1: the labels say which service, release, VCS revision and Go version this process runs.",
		ConstLabels: prometheus.Labels{"service": service, "version": v, "revision": r, "goversion": g},
	})
	info.Set(1)
	return reg.Register(info)
}

// LatencyBuckets are the histogram buckets, in seconds, of Loom's latency
// metrics (gRPC, consumer handling, Redis): 0.5 ms to 10 s, about three
// buckets per decade, so that a p99 is readable from a Redis GET to a slow
// scheduling pass.
var LatencyBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

// GRPCMetrics counts and times the calls a gRPC server handles:
// loom_grpc_server_handled_total{service,method,code} and
// loom_grpc_server_handling_seconds{service,method}. method is the full
// method name ("/loom.v1.JobService/CreateJob"), which the server's
// registered services bound; code is the gRPC status code's name.
type GRPCMetrics struct {
	handled *prometheus.CounterVec
	seconds *prometheus.HistogramVec
}

// NewGRPCMetrics registers the gRPC server metrics on reg (a
// ServiceRegisterer, which adds the service label).
func NewGRPCMetrics(reg prometheus.Registerer) (*GRPCMetrics, error) {
	m := &GRPCMetrics{
		handled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loom_grpc_server_handled_total",
			Help: "gRPC calls the server finished, by full method name and status code.",
		}, []string{"method", "code"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "loom_grpc_server_handling_seconds",
			Help:    "Time from a gRPC call's arrival to its status, by full method name (streams: the stream's whole life).",
			Buckets: LatencyBuckets,
		}, []string{"method"}),
	}
	for _, c := range []prometheus.Collector{m.handled, m.seconds} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Init creates the series of every method srv serves (handled with code OK,
// and the latency histogram) at zero, so that rates and ratios exist before
// the first call. Call it after the services are registered.
func (m *GRPCMetrics) Init(srv *grpc.Server) {
	info := srv.GetServiceInfo()
	names := make([]string, 0, len(info))
	for n := range info {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, svc := range names {
		for _, meth := range info[svc].Methods {
			full := "/" + svc + "/" + meth.Name
			m.handled.WithLabelValues(full, codes.OK.String())
			m.seconds.WithLabelValues(full)
		}
	}
}

func (m *GRPCMetrics) observe(method string, start time.Time, err error) {
	m.handled.WithLabelValues(method, status.Code(err).String()).Inc()
	m.seconds.WithLabelValues(method).Observe(time.Since(start).Seconds())
}

// Unary is the unary server interceptor. It must run outside the
// interceptor that maps Loom's errors to gRPC statuses, so that it counts the
// code the client gets.
func (m *GRPCMetrics) Unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	start := time.Now()
	resp, err := h(ctx, req)
	m.observe(info.FullMethod, start, err)
	return resp, err
}

// Stream is Unary for streams.
func (m *GRPCMetrics) Stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	start := time.Now()
	err := h(srv, ss)
	m.observe(info.FullMethod, start, err)
	return err
}
