package domain

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/timestamppb"

	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
)

// MetricFileEnv is set in every step's environment, unless the job sets
// it, to the file the step's program reports its metrics in, as
// cloudml-hypertune does: one JSON object a line, appended (or the whole
// file rewritten with the latest lines, as hypertune itself does).
const MetricFileEnv = "CLOUD_ML_HP_METRIC_FILE"

// Reasons a metrics line, or one value of it, is dropped
// (loom_agent_metric_lines_dropped_total's reason label).
const (
	DropTooLong = "too_long" // longer than MetricLimits.Line
	DropBadJSON = "bad_json" // not a JSON object
	// DropBadName is a value whose metric name is empty, too long or not
	// UTF-8: that value alone is dropped, the line's others kept (the
	// whole line only when it has no other value).
	DropBadName       = "bad_name"
	DropTooManyValues = "too_many_values" // more than MetricLimits.Values values
	DropBadStep       = "bad_step"        // global_step not a whole number >= 0
	DropBadTimestamp  = "bad_timestamp"   // timestamp not a number of seconds
	DropNoValues      = "no_values"       // no numeric value at all
)

// MetricLimits bound what one line may carry.
type MetricLimits struct {
	// Line is the longest line taken, in bytes (without its newline).
	Line int
	// Values is the most values one line (point) may carry.
	Values int
	// Name is the longest metric name, in bytes.
	Name int
}

// DefaultMetricLimits are the agent's defaults (-metrics-line-max,
// -metrics-values-max, -metrics-name-max).
var DefaultMetricLimits = MetricLimits{Line: 4 << 10, Values: 64, Name: 128}

// hypertune's fields that are not metrics: the trial (the job names it)
// and the checkpoint's path.
var notMetrics = map[string]bool{"timestamp": true, "trial": true, "global_step": true, "checkpoint_path": true}

// ParseMetricLine reads one line of a hypertune metrics file:
// {"timestamp": <unix s>, "trial": "<id>", "<metric>": <value>,
// "global_step": "<n>"}. A metric's value is a number or a string holding
// one (hypertune writes str(value), so "inf" and "-inf" too); a field whose
// value is no number (another string, a list, an object, null, true) is
// passed over, and so is NaN (no measurement; the series store cannot
// order it). ±Inf is kept, as the TensorBoard path and the store keep it:
// a loss that blows up is what a curve is read for, and the search judges
// only finite values (libs/hpo). A numeric value whose metric name is bad
// (empty, too long, not UTF-8) is dropped alone, its reason in badNames
// once per such value, so that one bad key does not lose the line's other
// values; a line whose every numeric value has a bad name is dropped as
// DropBadName. It returns the point, or nil and why the whole line is
// dropped (badNames 0). now is the point's time when the line has no
// timestamp.
func ParseMetricLine(line []byte, lim MetricLimits, now time.Time) (p *eventsv1.MetricsReported_Point, why string, badNames int) {
	if len(line) > lim.Line {
		return nil, DropTooLong, 0
	}
	var fields map[string]json.RawMessage
	d := json.NewDecoder(bytes.NewReader(line))
	if err := d.Decode(&fields); err != nil || fields == nil || d.More() {
		return nil, DropBadJSON, 0
	}
	p = &eventsv1.MetricsReported_Point{Time: timestamppb.New(now), Values: map[string]float64{}}
	if raw, ok := fields["global_step"]; ok {
		v, ok := number(raw)
		if !ok || v < 0 || v != math.Trunc(v) || v > 1<<53 {
			return nil, DropBadStep, 0
		}
		p.Step = int64(v)
	}
	if raw, ok := fields["timestamp"]; ok {
		v, ok := number(raw)
		// Seconds since 1970, before the year 5138.
		if !ok || v < 0 || v > 1e11 {
			return nil, DropBadTimestamp, 0
		}
		sec, frac := math.Modf(v)
		p.Time = timestamppb.New(time.Unix(int64(sec), int64(frac*1e9)).UTC())
	}
	for k, raw := range fields {
		if notMetrics[k] {
			continue
		}
		v, ok := number(raw)
		if !ok || math.IsNaN(v) {
			continue
		}
		if k == "" || len(k) > lim.Name || !utf8.ValidString(k) {
			badNames++
			continue
		}
		if len(p.Values) == lim.Values {
			return nil, DropTooManyValues, 0
		}
		p.Values[k] = v
	}
	switch {
	case len(p.Values) > 0:
		return p, "", badNames
	case badNames > 0:
		return nil, DropBadName, 0
	}
	return nil, DropNoValues, 0
}

// number reads a JSON number, or a string holding one.
func number(raw json.RawMessage) (float64, bool) {
	var f float64
	if json.Unmarshal(raw, &f) == nil {
		return f, true
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return 0, false
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	return f, err == nil
}

// MetricsReported is the event that carries points of a run's metrics from
// this node.
func MetricsReported(self Self, job string, attempt int32, points []*eventsv1.MetricsReported_Point) *eventsv1.MetricsReported {
	return &eventsv1.MetricsReported{Job: job, Attempt: attempt, Node: self.Node, Cluster: self.Cluster, Points: points}
}
