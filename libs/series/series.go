// Package series keeps jobs' metric series (experiment tracking): points of
// (step, time, value) per metric name, with the limits MLflow puts on its
// tracking API, and reads them back downsampled.
//
// The pure parts are here (names, limits, encoding, step filter,
// downsampling); Store keeps series in Redis (store.go).
//
// Limits (Limits, DefaultLimits), after MLflow's (mlflow/utils/validation.py:
// MAX_METRICS_PER_BATCH 1000, MAX_ENTITY_KEY_LENGTH 250, MAX_ENTITIES_PER_BATCH
// 1000) plus what a store of unbounded series needs:
//   - a metric name is 1..250 characters of letters, digits, '_', '-', '.',
//     ' ', '/' and ':' (MLflow's grammar, plus TensorBoard's and Keras's ':'),
//     not starting or ending with '/', without "..": InvalidArgument names it.
//   - one append carries at most 1000 metrics and 10,000 points in all.
//   - a job keeps at most 1000 series: a new metric beyond is dropped whole
//     and counted.
//   - a series keeps at most 1,000,000 points: its first million, a job
//     at most 10,000,000 across its series, and a project at most
//     100,000,000 across its jobs. Points past a limit are dropped and
//     counted in the series' Dropped, never an error (a long run's late
//     points must not fail its agent's stream), and List shows how many
//     were dropped.
package series

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/loom-ml/loom/libs/errs"
)

// Point is one measurement of a metric.
type Point struct {
	Step  int64
	Time  time.Time
	Value float64
}

// Limits bound what is kept. Zero fields take DefaultLimits' values.
type Limits struct {
	// Points is the most points one series keeps.
	Points int64
	// JobPoints is the most points one job keeps across its series: the
	// per-series bound times Series (a billion points, 24 GB) is no
	// bound for a store every service shares.
	JobPoints int64
	// ProjectPoints is the most points one project's jobs keep together
	// (a job's own bound times the jobs a project may run is no bound).
	// Writers of one project's jobs that append at the same instant may
	// each add up to one batch (BatchPoints) past it: the project's count
	// is read before the append (projectKey).
	ProjectPoints int64
	// Series is the most series one job keeps.
	Series int
	// BatchMetrics and BatchPoints bound one Append.
	BatchMetrics int
	BatchPoints  int
	// Name is the longest metric name.
	Name int
	// Held and HeldBytes bound the batches one job holds while its run's
	// placement is unknown (Admit); HoldFor is how long one is held before
	// it is refused (ReasonHeldExpired).
	Held      int
	HeldBytes int
	HoldFor   time.Duration
	// NodeRate is the most batches one node may write an hour
	// (CountNodeWrite). The default, 65,536 (about 18 a second), takes
	// nine steps at the agent's own default rate (2 records a second a
	// step, -metrics-rate) for the whole hour, and stops a node that
	// floods.
	NodeRate int64
	// Late is how long after its run's end a batch is still taken.
	Late time.Duration
}

// DefaultLimits are the limits a Limits' zero fields take.
var DefaultLimits = Limits{Points: 1_000_000, JobPoints: 10_000_000, ProjectPoints: 100_000_000, Series: 1000, BatchMetrics: 1000, BatchPoints: 10_000, Name: 250,
	Held: 256, HeldBytes: 1 << 20, HoldFor: time.Hour, NodeRate: 65536, Late: 8 * 24 * time.Hour}

// Read bounds: how many points one read returns by default and at most.
const (
	DefaultReadPoints = 1000
	MaxReadPoints     = 10_000
)

func (l Limits) fill() Limits {
	d := DefaultLimits
	if l.Points <= 0 {
		l.Points = d.Points
	}
	if l.Series <= 0 {
		l.Series = d.Series
	}
	if l.JobPoints <= 0 {
		l.JobPoints = d.JobPoints
	}
	if l.ProjectPoints <= 0 {
		l.ProjectPoints = d.ProjectPoints
	}
	if l.BatchMetrics <= 0 {
		l.BatchMetrics = d.BatchMetrics
	}
	if l.BatchPoints <= 0 {
		l.BatchPoints = d.BatchPoints
	}
	if l.Name <= 0 {
		l.Name = d.Name
	}
	if l.Held <= 0 {
		l.Held = d.Held
	}
	if l.HeldBytes <= 0 {
		l.HeldBytes = d.HeldBytes
	}
	if l.HoldFor <= 0 {
		l.HoldFor = d.HoldFor
	}
	if l.NodeRate <= 0 {
		l.NodeRate = d.NodeRate
	}
	if l.Late <= 0 {
		l.Late = d.Late
	}
	return l
}

// ValidName checks a metric name against the grammar and max length.
// field names the field in the error.
func ValidName(field, name string, max int) error {
	if max <= 0 {
		max = DefaultLimits.Name
	}
	if name == "" {
		return errs.Invalid(field, "is empty: name a metric (letters, digits, _ - . / : and spaces)")
	}
	if len(name) > max {
		return errs.Invalid(field, "is %d characters, over the limit of %d", len(name), max)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '_' || c == '-' || c == '.' || c == ' ' || c == '/' || c == ':'
		if !ok {
			return errs.Invalid(field, "%q has %q at %d: a metric name is letters, digits, _ - . / : and spaces", name, c, i)
		}
	}
	if name[0] == '/' || name[len(name)-1] == '/' || containsDotDot(name) {
		return errs.Invalid(field, "%q: a metric name neither starts nor ends with / and has no ..", name)
	}
	return nil
}

func containsDotDot(s string) bool {
	for i := 0; i+1 < len(s); i++ {
		if s[i] == '.' && s[i+1] == '.' {
			return true
		}
	}
	return false
}

// recordLen is one point's size in the store: step, unix nanoseconds and
// value, each 8 bytes little-endian.
const recordLen = 24

// appendPoint appends p's record to dst.
func appendPoint(dst []byte, p Point) []byte {
	dst = binary.LittleEndian.AppendUint64(dst, uint64(p.Step))
	var ns int64
	if !p.Time.IsZero() {
		ns = p.Time.UnixNano()
	}
	dst = binary.LittleEndian.AppendUint64(dst, uint64(ns))
	return binary.LittleEndian.AppendUint64(dst, math.Float64bits(p.Value))
}

// rec is a stored point as it is read: reads sort, filter and downsample
// these, and make Points (with their time.Time) of the few kept only.
type rec struct {
	step, ns int64
	value    float64
}

func decodeRec(b []byte) rec {
	return rec{step: int64(binary.LittleEndian.Uint64(b)), ns: int64(binary.LittleEndian.Uint64(b[8:])),
		value: math.Float64frombits(binary.LittleEndian.Uint64(b[16:]))}
}

func (r rec) point() Point {
	p := Point{Step: r.step, Value: r.value}
	if r.ns != 0 {
		p.Time = time.Unix(0, r.ns).UTC()
	}
	return p
}

// decodeRecs parses records into recs.
func decodeRecs(b []byte) []rec {
	out := make([]rec, len(b)/recordLen)
	for i := range out {
		out[i] = decodeRec(b[i*recordLen:])
	}
	return out
}

// Range bounds steps, both ends inclusive; a nil end is unbounded.
type Range struct {
	From, To *int64
}

// Filter keeps pts' points within r, in place.
func (r Range) Filter(pts []Point) []Point { return filter(r, pts, Point.stepOf) }

func filter[T any](r Range, pts []T, step func(T) int64) []T {
	if r.From == nil && r.To == nil {
		return pts
	}
	out := pts[:0]
	for _, p := range pts {
		if s := step(p); (r.From == nil || s >= *r.From) && (r.To == nil || s <= *r.To) {
			out = append(out, p)
		}
	}
	return out
}

func (p Point) stepOf() int64    { return p.Step }
func (p Point) valueOf() float64 { return p.Value }
func (r rec) stepOf() int64      { return r.step }
func (r rec) valueOf() float64   { return r.value }

// SortByStep orders pts by step, points of one step in the order they came
// (a value logged twice at a step keeps both, as MLflow does). Already
// ordered input, the usual case, costs one pass.
func SortByStep(pts []Point) { sortByStep(pts, Point.stepOf) }

func sortByStep[T any](pts []T, step func(T) int64) {
	cmp := func(a, b T) int {
		switch sa, sb := step(a), step(b); {
		case sa < sb:
			return -1
		case sa > sb:
			return 1
		}
		return 0
	}
	if slices.IsSortedFunc(pts, cmp) {
		return
	}
	slices.SortStableFunc(pts, cmp)
}

// Downsample returns at most n of pts' points (ordered by step), keeping
// each bucket's extremes: the first and last points, then the points
// between cut into (n-2)/2 buckets of equal count, each giving its least
// and greatest value in step order (one point when they are the same).
// Fewer than 4 have no room for a bucket: n 3 and 2 give the first and
// last points, n 1 the last alone (the latest value, what a caller asking
// for one point wants to see); n below 1 counts as 1. pts is returned
// whole when it has at most n points.
//
// Why min/max rather than LTTB: a training curve is read for its spikes (a
// loss that jumps, a blow-up); min/max keeps every bucket's extremes
// exactly, so the drawn envelope is the true one at any zoom, while LTTB
// picks by triangle area and may drop a one-step spike. It is also one pass
// with no floating-point area arithmetic. Keeping the ends makes the curve
// span the whole step range read.
func Downsample(pts []Point, n int) []Point { return downsample(pts, n, Point.valueOf) }

func downsample[T any](pts []T, n int, value func(T) float64) []T {
	n = max(n, 1)
	switch {
	case len(pts) <= n:
		return pts
	case n == 1:
		return pts[len(pts)-1:]
	}
	out := make([]T, 0, n)
	out = append(out, pts[0])
	mid := pts[1 : len(pts)-1]
	buckets := (n - 2) / 2
	for b := 0; b < buckets; b++ {
		lo := b * len(mid) / buckets
		hi := (b + 1) * len(mid) / buckets
		if lo >= hi {
			continue
		}
		mi, ma := lo, lo
		for i := lo + 1; i < hi; i++ {
			v := value(mid[i])
			if v < value(mid[mi]) {
				mi = i
			}
			if v > value(mid[ma]) {
				ma = i
			}
		}
		first, second := min(mi, ma), max(mi, ma)
		out = append(out, mid[first])
		if second != first {
			out = append(out, mid[second])
		}
	}
	return append(out, pts[len(pts)-1])
}

// Summary describes one series: its point count, the values at its lowest
// (First) and highest (Last) steps, its least and greatest values, and how
// many points were dropped at the limit.
type Summary struct {
	Metric              string
	Count               int64
	FirstStep, LastStep int64
	First, Last         float64
	Min, Max            float64
	Dropped             int64
}

// summarise is the summary of pts in arrival order (ties of step: the
// first value is the earliest, the last value the latest).
func summarise(pts []Point) Summary {
	var s Summary
	for i, p := range pts {
		if i == 0 {
			s = Summary{Count: 0, FirstStep: p.Step, LastStep: p.Step, First: p.Value, Last: p.Value, Min: p.Value, Max: p.Value}
		}
		s.Count++
		if p.Step < s.FirstStep {
			s.FirstStep, s.First = p.Step, p.Value
		}
		if p.Step >= s.LastStep {
			s.LastStep, s.Last = p.Step, p.Value
		}
		s.Min = math.Min(s.Min, p.Value)
		s.Max = math.Max(s.Max, p.Value)
	}
	return s
}

// Batch is what one Append adds: points by metric name.
type Batch map[string][]Point

// Check validates b against l: names, counts, and no NaN (a value the
// store cannot order; callers drop or refuse it first). The error names the
// field and the limit.
func (l Limits) Check(b Batch) error {
	l = l.fill()
	if len(b) > l.BatchMetrics {
		return errs.Invalid("metrics", "%d metrics in one batch, over the limit of %d", len(b), l.BatchMetrics)
	}
	n := 0
	for name, pts := range b {
		if err := ValidName("metric", name, l.Name); err != nil {
			return err
		}
		n += len(pts)
		if n > l.BatchPoints {
			return errs.Invalid("points", "over %d points in one batch: split it", l.BatchPoints)
		}
		for _, p := range pts {
			if math.IsNaN(p.Value) {
				return errs.Invalid("value", "%s at step %d is NaN", name, p.Step)
			}
		}
	}
	return nil
}

// String formats s for logs.
func (s Summary) String() string {
	return fmt.Sprintf("%s: %d points, steps %d..%d, %g..%g", s.Metric, s.Count, s.FirstStep, s.LastStep, s.Min, s.Max)
}
