package dashboards

import (
	"context"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/loom-ml/loom/libs/errs"
)

// ScrapeTarget is one /metrics endpoint the gateway scrapes for the
// console's dashboards.
type ScrapeTarget struct {
	// Service is the dashboard it feeds (one of Services).
	Service string
	// URL is the full URL of its /metrics, http or https.
	URL string
}

// MaxTargets bounds the targets of one Scraper (ParseTargets).
const MaxTargets = 256

// ParseTargets parses the gateway's -metrics-targets setting:
// "service=url,service=url,..." (a service may repeat: agents). Empty
// means none. Anything else is an InvalidArgument error naming field.
func ParseTargets(field, s string) ([]ScrapeTarget, error) {
	var out []ScrapeTarget
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		svc, raw, ok := strings.Cut(item, "=")
		if !ok {
			return nil, errs.Invalid(field, "%q is not service=url", item)
		}
		svc = strings.TrimSpace(svc)
		if !Known(svc) {
			return nil, errs.Invalid(field, "%q is not a service with a dashboard (want one of %s)", svc, strings.Join(Services, ", "))
		}
		u, err := url.Parse(strings.TrimSpace(raw))
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, errs.Invalid(field, "%q: want an http(s) URL such as http://127.0.0.1:9170/metrics", raw)
		}
		if len(out) == MaxTargets {
			return nil, errs.Invalid(field, "more than %d targets", MaxTargets)
		}
		out = append(out, ScrapeTarget{Service: svc, URL: u.String()})
	}
	return out, nil
}

// ScraperOptions configure a Scraper. Zero fields get the defaults.
type ScraperOptions struct {
	// Interval is how often every target is scraped (default 5s).
	Interval time.Duration
	// Points is how many scrapes are kept, oldest dropped first (default
	// 120: ten minutes at 5s; at most 10000).
	Points int
	// Window is the range of rate, increase and p99 (default one minute,
	// at least two scrapes).
	Window time.Duration
	// MaxSeries bounds the distinct series kept (default 50000); a series
	// beyond it is not recorded (Dropped counts them).
	MaxSeries int
	// MaxBytes bounds one scrape's body (default 16 MiB).
	MaxBytes int64
	// Client makes the requests (default: one with a timeout of Interval).
	Client *http.Client
}

func (o ScraperOptions) withDefaults() ScraperOptions {
	if o.Interval <= 0 {
		o.Interval = 5 * time.Second
	}
	if o.Points <= 0 {
		o.Points = 120
	}
	o.Points = min(o.Points, 10000)
	if o.Window <= 0 {
		o.Window = time.Minute
	}
	o.Window = max(o.Window, 2*o.Interval)
	if o.MaxSeries <= 0 {
		o.MaxSeries = 50000
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = 16 << 20
	}
	if o.Client == nil {
		o.Client = &http.Client{Timeout: o.Interval}
	}
	return o
}

// Scraper scrapes the services' /metrics into a bounded ring and evaluates
// the dashboards' panels over it, as Prometheus would over its own
// storage: the console's dashboards where no Prometheus runs (`loom up`).
// Only the metrics some panel uses are kept. It is safe for concurrent use.
type Scraper struct {
	targets []ScrapeTarget
	o       ScraperOptions
	wanted  map[string]bool

	mu      sync.RWMutex
	series  []seriesInfo
	ids     map[string]int
	ticks   []tick // oldest first, at most o.Points
	dropped int

	cacheMu sync.Mutex
	cache   map[string]cached // by dashboard service
}

type seriesInfo struct {
	name   string
	labels map[string]string
}

type tick struct {
	t time.Time
	v map[int]float64
}

// NewScraper returns a Scraper of targets. Run it, or call Scrape.
func NewScraper(targets []ScrapeTarget, o ScraperOptions) *Scraper {
	s := &Scraper{targets: slices.Clone(targets), o: o.withDefaults(), wanted: map[string]bool{"up": true}, ids: map[string]int{}}
	for _, d := range All() {
		for _, p := range d.Panels() {
			s.wanted[p.Metric] = true
			if p.Fn == P99 {
				s.wanted[p.Metric+"_bucket"] = true
			}
		}
	}
	return s
}

// Targets returns the scraper's targets.
func (s *Scraper) Targets() []ScrapeTarget { return slices.Clone(s.targets) }

// Dropped returns how many series were not recorded for MaxSeries.
func (s *Scraper) Dropped() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.dropped
}

// Run scrapes every Interval until ctx ends. Without targets (or on a nil
// Scraper) it returns at once: there is nothing to scrape.
func (s *Scraper) Run(ctx context.Context) error {
	if s == nil || len(s.targets) == 0 {
		return nil
	}
	t := time.NewTicker(s.o.Interval)
	defer t.Stop()
	for {
		s.Scrape(ctx, time.Now())
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Scrape scrapes every target once, concurrently, and records the result
// as the ring's newest point at now. A target that fails is up 0.
func (s *Scraper) Scrape(ctx context.Context, now time.Time) {
	type result struct {
		target  ScrapeTarget
		samples model.Vector
		err     error
	}
	results := make([]result, len(s.targets))
	var wg sync.WaitGroup
	for i, tg := range s.targets {
		wg.Go(func() {
			v, err := s.scrapeOne(ctx, tg, now)
			results[i] = result{tg, v, err}
		})
	}
	wg.Wait()

	s.mu.Lock()
	defer s.mu.Unlock()
	tk := tick{t: now, v: map[int]float64{}}
	for _, r := range results {
		instance := r.target.URL
		if u, err := url.Parse(r.target.URL); err == nil {
			instance = u.Host
		}
		up := 1.0
		if r.err != nil {
			up = 0
		}
		s.record(tk, "up", map[string]string{"job": r.target.Service, "instance": instance}, up)
		for _, smp := range r.samples {
			name := string(smp.Metric[model.MetricNameLabel])
			if !s.wanted[name] {
				continue
			}
			labels := make(map[string]string, len(smp.Metric)+1)
			for k, v := range smp.Metric {
				if k != model.MetricNameLabel {
					labels[string(k)] = string(v)
				}
			}
			// Prometheus' own target labels win (honor_labels: false).
			labels["job"], labels["instance"] = r.target.Service, instance
			s.record(tk, name, labels, float64(smp.Value))
		}
	}
	s.ticks = append(s.ticks, tk)
	if len(s.ticks) > s.o.Points {
		s.ticks = slices.Delete(s.ticks, 0, len(s.ticks)-s.o.Points)
	}
}

// record sets a series' value in tk, interning the series (s.mu held).
func (s *Scraper) record(tk tick, name string, labels map[string]string, v float64) {
	key := seriesKey(name, labels)
	id, ok := s.ids[key]
	if !ok {
		if len(s.series) >= s.o.MaxSeries {
			s.dropped++
			return
		}
		id = len(s.series)
		s.ids[key] = id
		s.series = append(s.series, seriesInfo{name: name, labels: labels})
	}
	tk.v[id] = v
}

func seriesKey(name string, labels map[string]string) string {
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString(name)
	for _, k := range keys {
		b.WriteString("\xff" + k + "\xfe" + labels[k])
	}
	return b.String()
}

func (s *Scraper) scrapeOne(ctx context.Context, tg ScrapeTarget, now time.Time) (model.Vector, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, tg.URL, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := s.o.Client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape %s: %s", tg.URL, resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, s.o.MaxBytes+1))
	if err != nil {
		return nil, err
	}
	if int64(len(body)) > s.o.MaxBytes {
		return nil, fmt.Errorf("scrape %s: larger than %d bytes", tg.URL, s.o.MaxBytes)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", tg.URL, err)
	}
	return expfmt.ExtractSamples(&expfmt.DecodeOptions{Timestamp: model.TimeFromUnixNano(now.UnixNano())}, slices.Collect(maps.Values(fams))...)
}

// Series is one line of a panel: its legend and its points, each
// [unix seconds, value]. A point whose value is not a number (a quantile of
// no observations) is left out.
type Series struct {
	Legend string       `json:"legend"`
	Points [][2]float64 `json:"points"`
}

// Evaluate returns p's series on dashboard service over the ring, as p's
// PromQL would give them, sorted by legend.
func (s *Scraper) Evaluate(service string, p Panel) []Series {
	s.mu.RLock()
	defer s.mu.RUnlock()
	match, err := compile(p.Selector(service))
	if err != nil {
		return []Series{}
	}
	num, err := compile(p.Num)
	if err != nil {
		return []Series{}
	}
	name := p.Metric
	if p.Fn == P99 {
		name += "_bucket"
	}
	var ls []*line
	for id, si := range s.series {
		if si.name == name && match(si.labels) {
			ls = append(ls, s.line(id, p))
		}
	}
	var numLines []*line
	if p.Fn == Ratio {
		for _, l := range ls {
			if num(s.series[l.id].labels) {
				numLines = append(numLines, l)
			}
		}
	}
	var hs []histogram
	var scratch []bucket
	if p.Fn == P99 {
		hs = histograms(ls)
	}
	window := int(s.o.Window / s.o.Interval)
	lines := map[string]*Series{}
	add := func(legend string, t time.Time, v float64) {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return
		}
		l := lines[legend]
		if l == nil {
			l = &Series{Legend: legend, Points: [][2]float64{}}
			lines[legend] = l
		}
		l.Points = append(l.Points, [2]float64{float64(t.Unix()), v})
	}
	for i, tk := range s.ticks {
		from := max(0, i-window)
		var groups map[string]float64
		switch p.Fn {
		case Value:
			groups = map[string]float64{}
			for _, l := range ls {
				if l.ok[i] {
					groups[l.legend] += l.v[i]
				}
			}
		case Rate, Increase:
			groups = s.increases(ls, from, i, p.Fn == Rate)
		case Ratio:
			all := s.increases(ls, from, i, true)
			n := s.increases(numLines, from, i, true)
			groups = map[string]float64{}
			for g, d := range all {
				groups[g] = n[g] / d // 0/0 is NaN: left out
			}
		case P99:
			groups = s.quantile(0.99, hs, from, i, scratch)
		}
		if len(groups) == 0 && p.OrZero {
			groups = map[string]float64{p.Title: 0}
		}
		for g, v := range groups {
			add(g, tk.t, v)
		}
	}
	out := make([]Series, 0, len(lines))
	for _, l := range lines {
		out = append(out, *l)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Legend < out[b].Legend })
	return out
}

// line is one series over the ring, laid out so that its increase over
// any range of scrapes is two lookups.
type line struct {
	id     int
	legend string
	v      []float64
	ok     []bool
	// cum[k] is the series' increase from its first point to scrape k (a
	// counter reset counts from 0); next[k] is its first point at or after
	// k and prev[k] its last at or before (-1: none).
	cum        []float64
	next, prev []int
	le         float64 // a bucket's bound (P99)
	leErr      error
}

// line lays series id out over the ring (s.mu held).
func (s *Scraper) line(id int, p Panel) *line {
	n := len(s.ticks)
	l := &line{id: id, legend: p.legend(s.series[id].labels), v: make([]float64, n), ok: make([]bool, n),
		cum: make([]float64, n), next: make([]int, n), prev: make([]int, n)}
	if p.Fn == P99 {
		l.le, l.leErr = parseLe(s.series[id].labels["le"])
	}
	last := -1
	for k, tk := range s.ticks {
		v, ok := tk.v[id]
		l.v[k], l.ok[k] = v, ok
		if k > 0 {
			l.cum[k] = l.cum[k-1]
		}
		if ok {
			if last >= 0 {
				if v >= l.v[last] {
					l.cum[k] += v - l.v[last]
				} else {
					l.cum[k] += v
				}
			}
			last = k
		}
		l.prev[k] = last
	}
	next := -1
	for k := n - 1; k >= 0; k-- {
		if l.ok[k] {
			next = k
		}
		l.next[k] = next
	}
	return l
}

// increase is l's increase from scrape from to scrape to, per second when
// rate; ok is false without two points in the range.
func (s *Scraper) increase(l *line, from, to int, rate bool) (float64, bool) {
	f, t := l.next[from], l.prev[to]
	if f < 0 || t < 0 || f >= t {
		return 0, false
	}
	inc := l.cum[t] - l.cum[f]
	if rate {
		inc /= s.ticks[t].t.Sub(s.ticks[f].t).Seconds()
	}
	return inc, true
}

// legend is a series' line name on p: its By labels' values.
func (p Panel) legend(labels map[string]string) string {
	if len(p.By) == 0 {
		return p.Title
	}
	parts := make([]string, len(p.By))
	for i, l := range p.By {
		parts[i] = labels[l]
	}
	return strings.Join(parts, " ")
}

// increases sums the lines' increases (rates) from scrape from to scrape
// to by legend.
func (s *Scraper) increases(ls []*line, from, to int, rate bool) map[string]float64 {
	out := map[string]float64{}
	for _, l := range ls {
		if inc, ok := s.increase(l, from, to, rate); ok {
			out[l.legend] += inc
		}
	}
	return out
}

// histogram is one group's bucket lines, in order of their bound.
type histogram struct {
	legend string
	lines  []*line // sorted by le; several lines may share a bound
}

// histograms groups bucket lines by legend (P99's By labels).
func histograms(ls []*line) []histogram {
	by := map[string]*histogram{}
	var order []string
	for _, l := range ls {
		if l.leErr != nil {
			continue
		}
		h := by[l.legend]
		if h == nil {
			h = &histogram{legend: l.legend}
			by[l.legend] = h
			order = append(order, l.legend)
		}
		h.lines = append(h.lines, l)
	}
	out := make([]histogram, 0, len(order))
	for _, g := range order {
		h := by[g]
		sort.SliceStable(h.lines, func(a, b int) bool { return h.lines[a].le < h.lines[b].le })
		out = append(out, *h)
	}
	return out
}

// bucket is a bound and the rate of observations at or below it.
type bucket struct{ le, n float64 }

// quantile is histogram_quantile(q, sum by (le, By) (rate(bucket))) over
// the range, by Prometheus' rules: linear within the bucket, the highest
// finite bound when the rank falls in +Inf, NaN without observations. bs
// is scratch space.
func (s *Scraper) quantile(q float64, hs []histogram, from, to int, bs []bucket) map[string]float64 {
	out := map[string]float64{}
	for _, h := range hs {
		bs = bs[:0]
		seen := false
		for _, l := range h.lines {
			v, ok := s.increase(l, from, to, true)
			if !ok {
				continue
			}
			seen = true
			if n := len(bs); n > 0 && bs[n-1].le == l.le {
				bs[n-1].n += v
			} else {
				bs = append(bs, bucket{l.le, v})
			}
		}
		if seen {
			out[h.legend] = quantileOf(q, bs)
		}
	}
	return out
}

// quantileOf is the q-quantile of cumulative buckets sorted by bound.
func quantileOf(q float64, bs []bucket) float64 {
	if len(bs) < 2 || !math.IsInf(bs[len(bs)-1].le, 1) {
		return math.NaN()
	}
	total := bs[len(bs)-1].n
	if total == 0 {
		return math.NaN()
	}
	rank := q * total
	i := sort.Search(len(bs), func(i int) bool { return bs[i].n >= rank })
	switch {
	case i == len(bs)-1:
		return bs[len(bs)-2].le
	case i == 0 && bs[0].le <= 0:
		return bs[0].le
	}
	lower, below := 0.0, 0.0
	if i > 0 {
		lower, below = bs[i-1].le, bs[i-1].n
	}
	upper, count := bs[i].le, bs[i].n-below
	if count == 0 {
		return upper
	}
	return lower + (upper-lower)*((rank-below)/count)
}

func parseLe(s string) (float64, error) {
	if s == "+Inf" {
		return math.Inf(1), nil
	}
	var f float64
	_, err := fmt.Sscan(s, &f)
	return f, err
}

// compile turns matchers into a predicate on a series' labels.
func compile(ms []Matcher) (func(map[string]string) bool, error) {
	type m struct {
		Matcher
		re *regexp.Regexp
	}
	cs := make([]m, len(ms))
	for i, x := range ms {
		cs[i].Matcher = x
		if x.Op == "=~" || x.Op == "!~" {
			re, err := regexp.Compile("^(?:" + x.Value + ")$")
			if err != nil {
				return nil, err
			}
			cs[i].re = re
		}
	}
	return func(labels map[string]string) bool {
		for _, c := range cs {
			v := labels[c.Label]
			var ok bool
			switch c.Op {
			case "=":
				ok = v == c.Value
			case "!=":
				ok = v != c.Value
			case "=~":
				ok = c.re.MatchString(v)
			case "!~":
				ok = !c.re.MatchString(v)
			}
			if !ok {
				return false
			}
		}
		return true
	}, nil
}

// Summary is a dashboard as GET /v1/dashboards lists it.
type Summary struct {
	Service string         `json:"service"`
	Title   string         `json:"title"`
	Panels  []PanelSummary `json:"panels"`
}

// PanelSummary is a panel without its data.
type PanelSummary struct {
	ID    string `json:"id"`
	Title string `json:"title"`
	Unit  string `json:"unit"`
	Kind  Kind   `json:"kind"`
}

// Data is a dashboard with its panels' series, as GET
// /v1/dashboards/{service} returns it.
type Data struct {
	Service string      `json:"service"`
	Title   string      `json:"title"`
	Panels  []PanelData `json:"panels"`
}

// PanelData is a panel with its series.
type PanelData struct {
	PanelSummary
	Series []Series `json:"series"`
}

// Summaries returns every dashboard's Summary, the fleet overview first.
func Summaries() []Summary {
	var out []Summary
	for _, d := range All() {
		sm := Summary{Service: d.Service, Title: d.Title, Panels: []PanelSummary{}}
		for _, p := range d.Panels() {
			sm.Panels = append(sm.Panels, PanelSummary{ID: p.ID, Title: p.Title, Unit: p.Unit, Kind: p.Kind})
		}
		out = append(out, sm)
	}
	return out
}

// Dashboard evaluates every panel of d over the ring. A nil Scraper (no
// targets configured) gives every panel no series. The result is kept until
// the next scrape: a console polling every second costs one evaluation per
// scrape, not one per poll. The Data is shared: read it, do not modify it.
func (s *Scraper) Dashboard(d Dashboard) Data {
	if s == nil {
		return evaluate(nil, d)
	}
	s.mu.RLock()
	var last time.Time
	if n := len(s.ticks); n > 0 {
		last = s.ticks[n-1].t
	}
	s.mu.RUnlock()
	s.cacheMu.Lock()
	c, ok := s.cache[d.Service]
	s.cacheMu.Unlock()
	if ok && c.at.Equal(last) && c.data.Title == d.Title {
		return c.data
	}
	data := evaluate(s, d)
	s.cacheMu.Lock()
	if s.cache == nil {
		s.cache = map[string]cached{}
	}
	s.cache[d.Service] = cached{at: last, data: data}
	s.cacheMu.Unlock()
	return data
}

// cached is a dashboard evaluated at the scrape of time at.
type cached struct {
	at   time.Time
	data Data
}

// evaluate evaluates every panel of d over s's ring (none when s is nil).
func evaluate(s *Scraper, d Dashboard) Data {
	out := Data{Service: d.Service, Title: d.Title, Panels: []PanelData{}}
	for _, p := range d.Panels() {
		pd := PanelData{PanelSummary: PanelSummary{ID: p.ID, Title: p.Title, Unit: p.Unit, Kind: p.Kind}, Series: []Series{}}
		if s != nil {
			pd.Series = s.Evaluate(d.Service, p)
		}
		out.Panels = append(out.Panels, pd)
	}
	return out
}
