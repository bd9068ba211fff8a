package telemetry

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Gauge names one gauge family of a GaugeSet.
type Gauge struct {
	Name, Help string
	// Labels are the names of its labels; each value given must come from
	// a bounded set (a state, a reason from a fixed list), never an id.
	Labels []string
}

// Emit reports one series of a GaugeSet's compute: the gauge's name, its
// value and its label values in the order of Gauge.Labels.
type Emit func(name string, value float64, labelValues ...string)

// GaugeSet is a collector of gauges a service computes together from the
// state it holds in memory (jobs by state, nodes by state), by one function
// called at most once per interval however often /metrics is scraped: a
// scrape between two computations serves the last values. So a count over
// a large set costs one pass over it per interval, not one per scrape.
type GaugeSet struct {
	every   time.Duration
	compute func(Emit)
	descs   map[string]*prometheus.Desc

	mu     sync.Mutex
	at     time.Time
	cached []prometheus.Metric
}

// NewGaugeSet returns a GaugeSet of gauges computed by compute at most once
// per every (0: on every scrape). compute must emit only names of gauges and
// the right number of label values; anything else is dropped.
func NewGaugeSet(every time.Duration, gauges []Gauge, compute func(Emit)) *GaugeSet {
	g := &GaugeSet{every: every, compute: compute, descs: map[string]*prometheus.Desc{}}
	for _, x := range gauges {
		g.descs[x.Name] = prometheus.NewDesc(x.Name, x.Help, x.Labels, nil)
	}
	return g
}

// Describe sends the gauges' descriptions.
func (g *GaugeSet) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range g.descs {
		ch <- d
	}
}

// Collect sends the gauges, computing them when the last computation is
// older than the interval.
func (g *GaugeSet) Collect(ch chan<- prometheus.Metric) {
	g.mu.Lock()
	if g.cached == nil || time.Since(g.at) >= g.every {
		var out []prometheus.Metric
		g.compute(func(name string, v float64, lvs ...string) {
			d, ok := g.descs[name]
			if !ok {
				return
			}
			if m, err := prometheus.NewConstMetric(d, prometheus.GaugeValue, v, lvs...); err == nil {
				out = append(out, m)
			}
		})
		if out == nil {
			out = []prometheus.Metric{}
		}
		g.cached, g.at = out, time.Now()
	}
	ms := g.cached
	g.mu.Unlock()
	for _, m := range ms {
		ch <- m
	}
}
