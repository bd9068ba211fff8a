package domain

import (
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
	p, why := ParseMetricLine([]byte(`{"checkpoint_path": "", "global_step": "12", "timestamp": 1764658800.25, "trial": "3", "val_loss": "0.125"}`), lim, now)
	if why != "" || p.Step != 12 || p.Time.AsTime() != time.Unix(1764658800, 25e7).UTC() ||
		len(p.Values) != 1 || p.Values["val_loss"] != 0.125 {
		t.Fatalf("hypertune's line: %v, %q", p, why)
	}
	// Numbers as numbers; no timestamp: now; no step: 0; non-numbers and
	// non-finite values passed over.
	p, why = ParseMetricLine([]byte(`{"accuracy": 0.5, "loss": 1e-3, "note": "fine", "tags": [1], "nan": "NaN", "inf": "inf", "ok": true}`), lim, now)
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
		`{"` + strings.Repeat("n", 129) + `": 1}`:    DropBadName,
		`{` + strings.Join(many, ",") + `}`:          DropTooManyValues,
		`{"a": "` + strings.Repeat("1", 4100) + `"}`: DropTooLong,
	} {
		if p, why := ParseMetricLine([]byte(line), lim, now); why != want || p != nil {
			t.Errorf("%.60s: %v, %q; want dropped %q", line, p, why, want)
		}
	}
	// 64 values and a 128-byte name are within the bounds.
	if _, why := ParseMetricLine([]byte(`{`+strings.Join(many[:64], ",")+`}`), lim, now); why != "" {
		t.Errorf("64 values: %q", why)
	}
	if _, why := ParseMetricLine([]byte(`{"`+strings.Repeat("n", 128)+`": 1}`), lim, now); why != "" {
		t.Errorf("a 128-byte name: %q", why)
	}
}

func FuzzParseMetricLine(f *testing.F) {
	f.Add(`{"timestamp": 1.5, "trial": "1", "val_loss": "0.5", "global_step": "3"}`)
	f.Add(`{"a": [1, {"b": 2}], "c": "1e400"}`)
	f.Add(`{"a":1}{`)
	f.Fuzz(func(t *testing.T, line string) {
		lim := MetricLimits{Line: 256, Values: 4, Name: 16}
		p, why := ParseMetricLine([]byte(line), lim, time.Unix(0, 0))
		if (p == nil) == (why == "") {
			t.Fatalf("point %v and reason %q", p, why)
		}
		if p != nil && (len(p.Values) == 0 || len(p.Values) > lim.Values || p.Step < 0) {
			t.Fatalf("point out of bounds: %v", p)
		}
	})
}
