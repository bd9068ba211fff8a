package dashboards

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// fakeService is a real Prometheus registry served over real HTTP, with
// metrics of the contract's names, which the test moves between scrapes.
type fakeService struct {
	handled *prometheus.CounterVec
	seconds *prometheus.HistogramVec
	lag     *prometheus.GaugeVec
	url     string
}

func newFakeService(t testing.TB, service string) *fakeService {
	reg := prometheus.NewRegistry()
	lbl := prometheus.Labels{"service": service}
	f := &fakeService{
		handled: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "loom_grpc_server_handled_total", ConstLabels: lbl}, []string{"method", "code"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "loom_grpc_server_handling_seconds", ConstLabels: lbl,
			Buckets: []float64{0.1, 1, 10}}, []string{"method"}),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "loom_consumer_lag_records", ConstLabels: lbl}, []string{"group", "topic", "partition"}),
	}
	reg.MustRegister(f.handled, f.seconds, f.lag, collectors.NewGoCollector())
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(srv.Close)
	f.url = srv.URL + "/metrics"
	return f
}

func points(t *testing.T, ss []Series, legend string) [][2]float64 {
	t.Helper()
	for _, s := range ss {
		if s.Legend == legend {
			return s.Points
		}
	}
	t.Fatalf("no series %q in %+v", legend, ss)
	return nil
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestScraperEvaluatesPanelsAsPromQLWould(t *testing.T) {
	t.Parallel()
	gw := newFakeService(t, "gateway")
	down := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(down.Close)
	s := NewScraper([]ScrapeTarget{{"gateway", gw.url}, {"scheduler", down.URL + "/metrics"}},
		ScraperOptions{Interval: 5 * time.Second, Points: 3, Window: time.Minute})
	ctx := context.Background()
	t0 := time.Unix(1_700_000_000, 0)

	gw.handled.WithLabelValues("/A", "OK").Add(10)
	gw.seconds.WithLabelValues("/A") // at zero, as services create them
	gw.lag.WithLabelValues("g", "t", "0").Set(7)
	s.Scrape(ctx, t0)
	// 5 s later: 50 more OK calls and 1 Internal error on /A; latencies.
	gw.handled.WithLabelValues("/A", "OK").Add(49)
	gw.handled.WithLabelValues("/A", "Internal").Add(1)
	for range 90 {
		gw.seconds.WithLabelValues("/A").Observe(0.05) // first bucket
	}
	for range 10 {
		gw.seconds.WithLabelValues("/A").Observe(5) // third bucket
	}
	gw.lag.WithLabelValues("g", "t", "0").Set(3)
	s.Scrape(ctx, t0.Add(5*time.Second))

	d, _ := Get("gateway")
	get := func(id string) []Series {
		p, ok := d.Panel(id)
		if !ok {
			t.Fatalf("no panel %s", id)
		}
		return s.Evaluate("gateway", p)
	}
	// rate: 50 calls in 5 s. The Internal series appears only in the second
	// scrape: one point, no rate yet (as Prometheus).
	if p := points(t, get("grpc_rate"), "/A"); len(p) != 1 || !near(p[0][1], 49.0/5) || p[0][0] != float64(t0.Unix()+5) {
		t.Errorf("grpc_rate = %v, want [[t0+5, 9.8]]", p)
	}
	// lag: the gauge's value at each scrape.
	if p := points(t, get("consumer_lag_records"), "g t 0"); len(p) != 2 || p[0][1] != 7 || p[1][1] != 3 {
		t.Errorf("consumer_lag_records = %v, want 7 then 3", p)
	}
	// p99 of 90 × 0.05 s and 10 × 5 s: rank 99 falls in (1, 10] at
	// (99-90)/10 of it: 1 + 9 × 0.9 = 9.1.
	if p := points(t, get("grpc_p99"), "/A"); len(p) != 1 || !near(p[0][1], 9.1) {
		t.Errorf("grpc_p99 = %v, want 9.1", p)
	}
	// The error ratio has no Internal rate yet (one point): 0, not nothing.
	if p := points(t, get("grpc_error_ratio"), "/A"); len(p) != 1 || p[0][1] != 0 {
		t.Errorf("grpc_error_ratio = %v, want 0", p)
	}
	// Dead letters never happened: 0 at every scrape (OrZero).
	if p := points(t, get("dead_letters"), "Dead letters by topic"); len(p) != 2 || p[1][1] != 0 {
		t.Errorf("dead_letters = %v, want zeros", p)
	}
	// The Go runtime's metrics select on the job.
	if ss := get("goroutines"); len(ss) != 1 || len(ss[0].Points) != 2 || ss[0].Points[0][1] < 1 {
		t.Errorf("goroutines = %+v", ss)
	}

	// A third scrape: 100 more errors, 100 OK in 5 s.
	gw.handled.WithLabelValues("/A", "OK").Add(100)
	gw.handled.WithLabelValues("/A", "Internal").Add(100)
	s.Scrape(ctx, t0.Add(10*time.Second))
	p := points(t, get("grpc_error_ratio"), "/A")
	// Each series' rate is over its own points in the window: OK 149 in
	// 10 s, Internal 100 in 5 s.
	if last := p[len(p)-1][1]; !near(last, 20/(14.9+20)) {
		t.Errorf("grpc_error_ratio = %v, want 20/34.9 at the end", p)
	}

	// The fleet's up: gateway 1, scheduler (404) 0.
	f, _ := Get(FleetService)
	up, _ := f.Panel("up")
	ss := s.Evaluate(FleetService, up)
	if p := points(t, ss, "gateway"); p[len(p)-1][1] != 1 {
		t.Errorf("up{job=gateway} = %v", p)
	}
	if p := points(t, ss, "scheduler"); p[len(p)-1][1] != 0 {
		t.Errorf("up{job=scheduler} = %v", p)
	}

	// The ring holds Points scrapes: a fourth drops the first.
	s.Scrape(ctx, t0.Add(15*time.Second))
	if p := points(t, get("consumer_lag_records"), "g t 0"); len(p) != 3 || p[0][0] != float64(t0.Unix()+5) {
		t.Errorf("after 4 scrapes the ring holds %v, want the last 3", p)
	}
	data := s.Dashboard(d)
	if len(data.Panels) != len(d.Panels()) || data.Panels[0].ID != "build_info" || data.Panels[0].Series == nil {
		t.Errorf("Dashboard = %+v", data.Panels[:1])
	}
	// The JSON is GET /v1/dashboards' (docs/observability.md "Dashboards and
	// alerts"), which the console reads: flat panels.
	raw, _ := json.Marshal(data)
	var shape struct {
		Service, Title string
		Panels         []map[string]json.RawMessage
	}
	if err := json.Unmarshal(raw, &shape); err != nil || shape.Service != "gateway" {
		t.Fatalf("%s: %v", raw, err)
	}
	for _, k := range []string{"id", "title", "unit", "kind", "series"} {
		if _, ok := shape.Panels[0][k]; !ok || len(shape.Panels[0]) != 5 {
			t.Errorf("panel JSON %v: want exactly id, title, unit, kind, series", shape.Panels[0])
		}
	}
	if want := `"legend":"g t 0","points":[[`; !strings.Contains(string(raw), want) {
		t.Errorf("series JSON lacks %s", want)
	}
}

func TestScraperBoundsSeries(t *testing.T) {
	t.Parallel()
	gw := newFakeService(t, "gateway")
	for i := range 20 {
		gw.lag.WithLabelValues("g", "t", string(rune('a'+i))).Set(1)
	}
	s := NewScraper([]ScrapeTarget{{"gateway", gw.url}}, ScraperOptions{MaxSeries: 10})
	s.Scrape(context.Background(), time.Now())
	if s.Dropped() == 0 {
		t.Fatal("no series dropped past MaxSeries 10")
	}
	d, _ := Get("gateway")
	p, _ := d.Panel("consumer_lag_records")
	if n := len(s.Evaluate("gateway", p)); n >= 10 {
		t.Errorf("%d lag series kept, want fewer than MaxSeries", n)
	}
	// A nil scraper (no targets) gives panels without series.
	var none *Scraper
	if data := none.Dashboard(d); len(data.Panels) == 0 || len(data.Panels[0].Series) != 0 {
		t.Errorf("nil scraper: %+v", data.Panels[:1])
	}
}

// BenchmarkDashboardEvaluation is one evaluation of the gateway's
// dashboard over a full ring (120 scrapes) of a service with 50 methods:
// what a poll of /v1/dashboards/{service} costs at most once per scrape.
//
//	go test -run XXX -bench DashboardEvaluation ./libs/dashboards
func BenchmarkDashboardEvaluation(b *testing.B) {
	gw := newFakeService(b, "gateway")
	s := NewScraper([]ScrapeTarget{{"gateway", gw.url}}, ScraperOptions{})
	t0 := time.Now()
	for i := range 120 {
		for m := range 50 {
			method := "/loom.v1.Svc/M" + string(rune('A'+m%26)) + string(rune('a'+m/26))
			gw.handled.WithLabelValues(method, "OK").Add(float64(m))
			gw.seconds.WithLabelValues(method).Observe(float64(m%10) / 100)
		}
		s.Scrape(context.Background(), t0.Add(time.Duration(i)*5*time.Second))
	}
	d, _ := Get("gateway")
	b.ReportAllocs()
	for b.Loop() {
		_ = evaluate(s, d)
	}
}
