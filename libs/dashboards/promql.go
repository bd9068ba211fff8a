package dashboards

import (
	"strconv"
	"strings"
)

// GrafanaWindow is the range Grafana's queries use: Grafana's own rate
// interval, at least four scrape intervals.
const GrafanaWindow = "$__rate_interval"

// Selector returns the matchers that tie p to the dashboard of service:
// job="svc" (none on the fleet's), then p.Match.
func (p Panel) Selector(service string) []Matcher {
	var out []Matcher
	if p.Scope != Fleet && service != FleetService {
		out = append(out, Matcher{"job", "=", service})
	}
	return append(out, p.Match...)
}

// PromQL returns p's query on service's dashboard with range window w
// ("5m", or GrafanaWindow).
func (p Panel) PromQL(service, w string) string {
	sel := p.Selector(service)
	var q string
	switch p.Fn {
	case Value:
		q = sum(p.By, p.Metric+braces(sel))
	case Rate:
		q = sum(p.By, "rate("+p.Metric+braces(sel)+"["+w+"])")
	case Increase:
		q = sum(p.By, "increase("+p.Metric+braces(sel)+"["+w+"])")
	case P99:
		q = "histogram_quantile(0.99, " + sum(append([]string{"le"}, p.By...), "rate("+p.Metric+"_bucket"+braces(sel)+"["+w+"])") + ")"
	case Ratio:
		all := sum(p.By, "rate("+p.Metric+braces(sel)+"["+w+"])")
		num := sum(p.By, "rate("+p.Metric+braces(append(append([]Matcher{}, sel...), p.Num...))+"["+w+"])")
		// Where no series matches Num the ratio is 0, not nothing: the
		// denominator's groups times 0 fill in.
		q = "(" + num + " or " + all + " * 0) / " + all
	}
	if p.OrZero {
		q += " or on() vector(0)"
	}
	return q
}

// Legend returns Grafana's legend format of p: its By labels.
func (p Panel) Legend() string {
	var parts []string
	for _, l := range p.By {
		parts = append(parts, "{{"+l+"}}")
	}
	if len(parts) == 0 {
		return p.Title
	}
	return strings.Join(parts, " ")
}

// sum wraps e in sum by (by) (...), or sum(...) without labels.
func sum(by []string, e string) string {
	if len(by) == 0 {
		return "sum(" + e + ")"
	}
	return "sum by (" + strings.Join(by, ", ") + ") (" + e + ")"
}

// braces renders matchers as {a="b",c=~"d"} ("" for none).
func braces(ms []Matcher) string {
	if len(ms) == 0 {
		return ""
	}
	parts := make([]string, len(ms))
	for i, m := range ms {
		parts[i] = m.Label + m.Op + strconv.Quote(m.Value)
	}
	return "{" + strings.Join(parts, ",") + "}"
}
