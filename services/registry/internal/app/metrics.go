package app

import (
	"github.com/prometheus/client_golang/prometheus"
)

// RegisterMetrics registers the registry's domain row on reg:
// loom_registry_versions_registered_total, the model versions this process
// registered (from a finished job or an upload; a command sent again that
// registers nothing is not counted). Call it before the first Handle.
func (r *Registry) RegisterMetrics(reg prometheus.Registerer) error {
	c := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "loom_registry_versions_registered_total",
		Help: "Model versions registered (from finished jobs and uploads).",
	})
	if err := reg.Register(c); err != nil {
		return err
	}
	r.mu.Lock()
	r.versions = c
	r.mu.Unlock()
	return nil
}

// registered counts one version registered. Callers hold mu.
func (r *Registry) registered() {
	if r.versions != nil {
		r.versions.Inc()
	}
}
