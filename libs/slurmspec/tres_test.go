package slurmspec

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestParseTRES(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   string
		base TRES
		want TRES
		str  string
	}{
		{"gres/gpu=64,cpu=512", TRES{}, TRES{CPU: 512, GPU: 64}, "cpu=512,gres/gpu=64"},
		{"GRES/GPU=8", TRES{CPU: 4}, TRES{CPU: 4, GPU: 8}, "cpu=4,gres/gpu=8"},
		{"gres/gpu=-1", TRES{CPU: 4, GPU: 8}, TRES{CPU: 4}, "cpu=4"},
		{"node=4,mem=100G", TRES{}, TRES{Node: 4, MemMB: 102400}, "mem=100G,node=4"},
		{"mem=1536", TRES{}, TRES{MemMB: 1536}, "mem=1536M"},
		{"mem=2T", TRES{}, TRES{MemMB: 2 << 20}, "mem=2T"},
		{"mem=1k", TRES{}, TRES{MemMB: 1}, "mem=1M"},
		{"gpu=2", TRES{}, TRES{GPU: 2}, "gres/gpu=2"},
		// 0 is a limit (none may use it), not none; -1 clears it.
		{"gres/gpu=0", TRES{CPU: 4, GPU: 8}, TRES{CPU: 4, Zero: 1 << TRESGPU}, "cpu=4,gres/gpu=0"},
		{"mem=0,cpu=0", TRES{}, TRES{Zero: 1<<TRESMem | 1<<TRESCPU}, "cpu=0,mem=0"},
		{"gres/gpu=16", TRES{Zero: 1 << TRESGPU}, TRES{GPU: 16}, "gres/gpu=16"},
		{"gres/gpu=-1", TRES{CPU: 1, Zero: 1 << TRESGPU}, TRES{CPU: 1}, "cpu=1"},
	} {
		got, err := ParseTRES(c.in)
		if err != nil {
			t.Errorf("ParseTRES(%q): %v", c.in, err)
			continue
		}
		if tr := c.base.With(got); tr != c.want || tr.String() != c.str {
			t.Errorf("ParseTRES(%q) on %+v: %+v %q, want %+v %q", c.in, c.base, tr, tr.String(), c.want, c.str)
		}
	}
	for in, want := range map[string]string{
		"":                           "empty TRES string",
		"gres/gpu":                   "is not name=count",
		"gres/gpu=x":                 `"x" is not a count`,
		"gres/gpu=-2":                "outside 0..1073741824",
		"gres/gpu=1073741825":        "outside 0..1073741824 (the limit)",
		"mem=1099511627777M":         "outside 0..1099511627776 megabytes",
		"mem=1048577T":               "1048577T is outside 0..1099511627776 megabytes",
		"billing=3":                  "Loom limits only cpu, mem, node, gres/gpu",
		"gres/gpu:a100=2":            "limits per GPU type are not supported",
		strings.Repeat("cpu=1,", 50): "the limit is 256",
	} {
		if _, err := ParseTRES(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseTRES(%q): %v, want %q", in, err, want)
		}
	}
}

func TestParseMaxWall(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int32{"24:00:00": 1440, "1-00:00:00": 1440, "90": 90, "1:30": 2, "0": 0, "00:00:00": 0} {
		if got, clear, err := ParseMaxWall(in); err != nil || clear || got != want {
			t.Errorf("ParseMaxWall(%q) = %d %v %v, want %d", in, got, clear, err, want)
		}
	}
	for _, in := range []string{"-1", "UNLIMITED"} {
		if _, clear, err := ParseMaxWall(in); err != nil || !clear {
			t.Errorf("ParseMaxWall(%q) = %v %v, want a clear", in, clear, err)
		}
	}
	for in, want := range map[string]string{"x": "is not a time", "36600-00:00:00": "longer than 36500 days (the limit)"} {
		if _, _, err := ParseMaxWall(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseMaxWall(%q): %v, want %q", in, err, want)
		}
	}
}

func TestTRESCheck(t *testing.T) {
	t.Parallel()
	var got []string
	TRES{CPU: -1, MemMB: MaxTRESMemMB, Node: MaxTRESCount + 1, GPU: 64}.Check(func(f, m string) { got = append(got, f+": "+m) })
	if len(got) != 2 || got[0] != "cpu: -1 is outside 0..1073741824 (absent: no limit; 0: none may use it; 1073741824 is the limit)" || !strings.HasPrefix(got[1], "node: 1073741825 is outside") {
		t.Fatalf("problems: %q", got)
	}
}

// TestTRESLimitOfZero: a limit of 0 is a limit (Limit reports it set),
// kept through the JSON the scheduler stores, and a record written before
// limits of 0 existed ({"gpu":64}, no "zero") reads as written: its other
// TRES have no limit.
func TestTRESLimitOfZero(t *testing.T) {
	t.Parallel()
	var tr TRES
	tr.SetLimit(TRESGPU, 0, true)
	if v, ok := tr.Limit(TRESGPU); v != 0 || !ok {
		t.Fatalf("gpu limit %d %v, want 0 set", v, ok)
	}
	if _, ok := tr.Limit(TRESCPU); ok || tr == (TRES{}) {
		t.Fatalf("cpu limit set, or the record reads as none: %+v", tr)
	}
	raw, err := json.Marshal(tr)
	if err != nil {
		t.Fatal(err)
	}
	var back TRES
	if err := json.Unmarshal(raw, &back); err != nil || back != tr {
		t.Fatalf("%s read back as %+v (%v), want %+v", raw, back, err, tr)
	}
	var old TRES
	if err := json.Unmarshal([]byte(`{"gpu":64}`), &old); err != nil || old != (TRES{GPU: 64}) {
		t.Fatalf("an older record: %+v %v", old, err)
	}
	for i := range TRESNames {
		if _, ok := old.Limit(i); ok != (i == TRESGPU) {
			t.Errorf("older record: TRES %s set %v", TRESNames[i], ok)
		}
	}
	tr.SetLimit(TRESGPU, 0, false)
	if tr != (TRES{}) {
		t.Fatalf("cleared: %+v", tr)
	}
}

// TestTRESOptional: the API's optional values convert both ways, a nil
// being no limit and 0 a limit of 0.
func TestTRESOptional(t *testing.T) {
	t.Parallel()
	zero, n := int64(0), int64(64)
	tr := TRESOf(nil, nil, &zero, &n)
	if tr != (TRES{GPU: 64, Zero: 1 << TRESNode}) || tr.String() != "node=0,gres/gpu=64" {
		t.Fatalf("TRESOf: %+v %q", tr, tr.String())
	}
	cpu, mem, node, gpu := tr.Optional()
	if cpu != nil || mem != nil || node == nil || *node != 0 || gpu == nil || *gpu != 64 {
		t.Fatalf("Optional: %v %v %v %v", cpu, mem, node, gpu)
	}
}
