package domain

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestParseMetricLine(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 2, 7, 0, 0, 0, time.UTC)
	lim := DefaultMetricLimits
	// What cloudml-hypertune writes: json.dumps(sort_keys=True), the value
	// and the step as strings.
	p, why, _ := ParseMetricLine([]byte(`{"checkpoint_path": "", "global_step": "12", "timestamp": 1764658800.25, "trial": "3", "val_loss": "0.125"}`), lim, now)
	if why != "" || p.Step != 12 || p.Time.AsTime() != time.Unix(1764658800, 25e7).UTC() ||
		len(p.Values) != 1 || p.Values["val_loss"] != 0.125 {
		t.Fatalf("hypertune's line: %v, %q", p, why)
	}
	// Numbers as numbers; no timestamp: now; no step: 0; non-numbers and
	// NaN passed over.
	p, why, _ = ParseMetricLine([]byte(`{"accuracy": 0.5, "loss": 1e-3, "note": "fine", "tags": [1], "nan": "NaN", "ok": true}`), lim, now)
	if why != "" || p.Step != 0 || p.Time.AsTime() != now || len(p.Values) != 2 || p.Values["loss"] != 1e-3 {
		t.Fatalf("numbers: %v, %q", p, why)
	}
	many := make([]string, 0, 70)
	for i := range 65 {
		many = append(many, `"m`+strings.Repeat("x", i)+`": 1`)
	}
	for line, want := range map[string]string{
		`{"a": 1`:                        DropBadJSON,
		`[1, 2]`:                         DropBadJSON,
		`null`:                           DropBadJSON,
		`{"a": 1} {"b": 2}`:              DropBadJSON,
		`not json`:                       DropBadJSON,
		`{"trial": "1", "note": "x"}`:    DropNoValues,
		`{}`:                             DropNoValues,
		`{"a": 1, "global_step": "1.5"}`: DropBadStep,
		`{"a": 1, "global_step": -1}`:    DropBadStep,
		`{"a": 1, "global_step": "x"}`:   DropBadStep,
		`{"a": 1, "timestamp": "soon"}`:  DropBadTimestamp,
		`{"a": 1, "timestamp": 1e300}`:   DropBadTimestamp,
		`{"": 1}`:                        DropBadName,
		`{"": 1, "note": "x"}`:           DropBadName,
		`{"` + strings.Repeat("n", 129) + `": 1}`:    DropBadName,
		`{` + strings.Join(many, ",") + `}`:          DropTooManyValues,
		`{"a": "` + strings.Repeat("1", 4100) + `"}`: DropTooLong,
	} {
		if p, why, bad := ParseMetricLine([]byte(line), lim, now); why != want || p != nil || bad != 0 {
			t.Errorf("%.60s: %v, %q, %d; want dropped %q", line, p, why, bad, want)
		}
	}
	// 64 values and a 128-byte name are within the bounds.
	if _, why, _ := ParseMetricLine([]byte(`{`+strings.Join(many[:64], ",")+`}`), lim, now); why != "" {
		t.Errorf("64 values: %q", why)
	}
	if _, why, _ := ParseMetricLine([]byte(`{"`+strings.Repeat("n", 128)+`": 1}`), lim, now); why != "" {
		t.Errorf("a 128-byte name: %q", why)
	}
}

// TestMetricLineKeepsWhatItCan (a tester found both): a line with one bad
// metric name keeps its other values, the bad one counted; ±Inf, which
// docs/metrics.md says is kept and the TensorBoard path keeps, is kept
// here too (hypertune writes it as "inf"), NaN is not.
func TestMetricLineKeepsWhatItCan(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 2, 7, 0, 0, 0, time.UTC)
	lim := DefaultMetricLimits
	long := strings.Repeat("n", lim.Name+1)
	p, why, bad := ParseMetricLine([]byte(`{"": 1, "`+long+`": 2, "loss": "0.5", "acc": 0.75, "global_step": "3"}`), lim, now)
	if why != "" || p == nil || bad != 2 || p.Step != 3 || len(p.Values) != 2 || p.Values["loss"] != 0.5 || p.Values["acc"] != 0.75 {
		t.Fatalf("a line with two bad names: %v, %q, %d bad; want loss and acc kept, 2 bad", p, why, bad)
	}
	p, why, bad = ParseMetricLine([]byte(`{"up": "inf", "down": "-inf", "also": "Infinity", "nan": "nan", "loss": 1}`), lim, now)
	if why != "" || bad != 0 || len(p.Values) != 4 || !math.IsInf(p.Values["up"], 1) || !math.IsInf(p.Values["down"], -1) ||
		!math.IsInf(p.Values["also"], 1) || p.Values["loss"] != 1 {
		t.Fatalf("infinities: %v, %q, %d; want ±Inf kept, NaN passed over", p, why, bad)
	}
	// A line of infinities alone is a point, not "no values".
	if p, why, _ := ParseMetricLine([]byte(`{"loss": "inf"}`), lim, now); p == nil || !math.IsInf(p.Values["loss"], 1) {
		t.Fatalf(`{"loss": "inf"}: %v, %q`, p, why)
	}
}

func FuzzParseMetricLine(f *testing.F) {
	f.Add(`{"timestamp": 1.5, "trial": "1", "val_loss": "0.5", "global_step": "3"}`)
	f.Add(`{"a": [1, {"b": 2}], "c": "1e400"}`)
	f.Add(`{"a":1}{`)
	f.Fuzz(func(t *testing.T, line string) {
		lim := MetricLimits{Line: 256, Values: 4, Name: 16}
		p, why, bad := ParseMetricLine([]byte(line), lim, time.Unix(0, 0))
		if (p == nil) == (why == "") || (p == nil && bad != 0) || bad < 0 {
			t.Fatalf("point %v, reason %q and %d bad names", p, why, bad)
		}
		if p != nil && (len(p.Values) == 0 || len(p.Values) > lim.Values || p.Step < 0) {
			t.Fatalf("point out of bounds: %v", p)
		}
	})
}
