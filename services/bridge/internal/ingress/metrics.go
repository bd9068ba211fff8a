package ingress

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the ingress's counters (nil before RegisterMetrics: counting
// is then skipped).
type metrics struct {
	messages *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	withheld *prometheus.CounterVec
}

// RegisterMetrics registers the ingress's domain row on reg:
//
//   - loom_bridge_ingress_messages_total{transport,outcome}: messages
//     handled, by transport ("kafka:loom.ingress.v1",
//     "pubsub:projects/p/subscriptions/s") and outcome (ACCEPTED, REFUSED,
//     INVALID, FAILED, and DUPLICATE for a redelivery of a decided one);
//   - loom_bridge_ingress_seconds{transport}: how long deciding one
//     message took, from its delivery to its record (the gateway's call,
//     the dead letter and the result included);
//   - loom_bridge_ingress_results_withheld_total{transport,outcome}: the
//     messages filed under no project, whose IngressResult is not
//     published (App.Handler).
//
// Transports are the configured ones, so the labels are bounded.
func (a *App) RegisterMetrics(reg prometheus.Registerer) error {
	m := &metrics{
		messages: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "loom_bridge_ingress_messages_total",
			Help: "Ingress messages handled, by transport and outcome (ACCEPTED, REFUSED, INVALID, FAILED, DUPLICATE)."},
			[]string{"transport", "outcome"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "loom_bridge_ingress_seconds",
			Help:    "Time to decide one ingress message, from delivery to record, by transport.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}},
			[]string{"transport"}),
		withheld: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "loom_bridge_ingress_results_withheld_total",
			Help: "Ingress messages filed under no project (no credential, or one of no member), whose result is not published, by transport and outcome."},
			[]string{"transport", "outcome"}),
	}
	for _, c := range []prometheus.Collector{m.messages, m.latency, m.withheld} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	a.metrics = m
	return nil
}

func (m *metrics) count(transport, outcome string, d time.Duration) {
	if m == nil {
		return
	}
	m.messages.WithLabelValues(transport, outcome).Inc()
	m.latency.WithLabelValues(transport).Observe(d.Seconds())
}

func (m *metrics) withhold(transport, outcome string) {
	if m == nil {
		return
	}
	m.withheld.WithLabelValues(transport, outcome).Inc()
}
