package slurmspec

import (
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
		"gres/gpu=0":                 "a limit of 0 is not supported",
		"gres/gpu=x":                 `"x" is not a count`,
		"gres/gpu=-2":                "outside 1..1073741824",
		"gres/gpu=1073741825":        "outside 1..1073741824 (the limit)",
		"mem=1099511627777M":         "outside 1..1099511627776 megabytes",
		"mem=1048577T":               "1048577T is outside 1..1099511627776 megabytes",
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
	for in, want := range map[string]int32{"24:00:00": 1440, "1-00:00:00": 1440, "90": 90, "1:30": 2} {
		if got, clear, err := ParseMaxWall(in); err != nil || clear || got != want {
			t.Errorf("ParseMaxWall(%q) = %d %v %v, want %d", in, got, clear, err, want)
		}
	}
	for _, in := range []string{"-1", "UNLIMITED"} {
		if _, clear, err := ParseMaxWall(in); err != nil || !clear {
			t.Errorf("ParseMaxWall(%q) = %v %v, want a clear", in, clear, err)
		}
	}
	for in, want := range map[string]string{"x": "is not a time", "0": "MaxWall of 0", "36600-00:00:00": "longer than 36500 days (the limit)"} {
		if _, _, err := ParseMaxWall(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseMaxWall(%q): %v, want %q", in, err, want)
		}
	}
}

func TestTRESCheck(t *testing.T) {
	t.Parallel()
	var got []string
	TRES{CPU: -1, MemMB: MaxTRESMemMB, Node: MaxTRESCount + 1, GPU: 64}.Check(func(f, m string) { got = append(got, f+": "+m) })
	if len(got) != 2 || got[0] != "cpu: -1 is outside 0..1073741824 (0: no limit; 1073741824 is the limit)" || !strings.HasPrefix(got[1], "node: 1073741825 is outside") {
		t.Fatalf("problems: %q", got)
	}
}
