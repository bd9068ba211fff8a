package testkit

import (
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Sample is one series of a /metrics scrape: a counter's, gauge's or
// untyped value, or a histogram's _count and _sum (its buckets are left out).
type Sample struct {
	Name   string
	Labels map[string]string
	Value  float64
}

// String is the sample as the text format writes it, labels sorted.
func (s Sample) String() string {
	keys := slices.Sorted(maps.Keys(s.Labels))
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%q", k, s.Labels[k]))
	}
	return fmt.Sprintf("%s{%s} %g", s.Name, strings.Join(parts, ","), s.Value)
}

// Samples is a parsed scrape.
type Samples []Sample

// Scrape GETs http://addr/metrics and parses it; a failed request or an
// unparsable body fails the test.
func Scrape(t testing.TB, addr string) Samples {
	t.Helper()
	s, err := ScrapeErr(addr)
	if err != nil {
		t.Fatalf("scrape %s: %v", addr, err)
	}
	return s
}

// ScrapeErr is Scrape returning the error, for use inside WaitFor.
func ScrapeErr(addr string) (Samples, error) {
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
		return nil, fmt.Errorf("GET /metrics: %s: %s", resp.Status, b)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("parse /metrics: %w", err)
	}
	var out Samples
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				out = append(out, Sample{name, labels, m.GetCounter().GetValue()})
			case dto.MetricType_GAUGE:
				out = append(out, Sample{name, labels, m.GetGauge().GetValue()})
			case dto.MetricType_HISTOGRAM:
				h := m.GetHistogram()
				out = append(out, Sample{name + "_count", labels, float64(h.GetSampleCount())},
					Sample{name + "_sum", labels, h.GetSampleSum()})
			case dto.MetricType_SUMMARY:
				out = append(out, Sample{name + "_count", labels, float64(m.GetSummary().GetSampleCount())})
			default:
				out = append(out, Sample{name, labels, m.GetUntyped().GetValue()})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out, nil
}

// Find returns the samples named name whose labels include every pair of
// labels (given as "key", "value", ...).
func (s Samples) Find(name string, labels ...string) Samples {
	var out Samples
	for _, x := range s {
		if x.Name != name {
			continue
		}
		ok := true
		for i := 0; i+1 < len(labels); i += 2 {
			if v, has := x.Labels[labels[i]]; !has || v != labels[i+1] {
				ok = false
				break
			}
		}
		if ok {
			out = append(out, x)
		}
	}
	return out
}

// Sum adds the values of Find(name, labels...).
func (s Samples) Sum(name string, labels ...string) float64 {
	var v float64
	for _, x := range s.Find(name, labels...) {
		v += x.Value
	}
	return v
}

// LabelNames returns the sorted label names of the samples named name, or
// nil when there are none (all of a metric's series have the same names).
func (s Samples) LabelNames(name string) []string {
	for _, x := range s {
		if x.Name == name {
			return slices.Sorted(maps.Keys(x.Labels))
		}
	}
	return nil
}
