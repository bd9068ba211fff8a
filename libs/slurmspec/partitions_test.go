package slurmspec

import (
	"reflect"
	"strings"
	"testing"
)

func TestParsePartitions(t *testing.T) {
	t.Parallel()
	many := strings.Repeat("p,", MaxJobPartitions) // MaxJobPartitions names "p" plus an empty one
	var sixteen, seventeen []string
	for i := range MaxJobPartitions + 1 {
		seventeen = append(seventeen, "p"+string(rune('a'+i)))
	}
	sixteen = seventeen[:MaxJobPartitions]
	for _, tc := range []struct {
		in   string
		want []string
		bad  string
	}{
		{in: "", want: nil},
		{in: "a", want: []string{"a"}},
		{in: "a,b", want: []string{"a", "b"}},
		{in: "b,a", want: []string{"b", "a"}},
		{in: "a,b,a", want: []string{"a", "b"}},
		{in: "a,a,a", want: []string{"a"}},
		{in: strings.Join(sixteen, ","), want: sixteen},
		{in: strings.Join(seventeen, ","), bad: "more than the 16 a job may name"},
		{in: strings.Join(append(sixteen, "pa"), ","), want: sixteen}, // a repeat is not counted
		{in: "a,,b", bad: "partition 2 of the list is empty"},
		{in: "a,", bad: "partition 2 of the list is empty"},
		{in: ",a", bad: "partition 1 of the list is empty"},
		{in: many, bad: "is empty"},
		{in: "a, b", bad: `partition " b" has a space`},
		{in: "a,b=c", bad: "has a space or '='"},
	} {
		got, err := ParsePartitions(tc.in)
		if tc.bad != "" {
			if err == nil || !strings.Contains(err.Error(), tc.bad) {
				t.Errorf("ParsePartitions(%q) = %v, %v; want an error with %q", tc.in, got, err, tc.bad)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParsePartitions(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	if s, err := NormalizePartitions("b,a,b"); err != nil || s != "b,a" {
		t.Errorf(`NormalizePartitions("b,a,b") = %q, %v; want "b,a"`, s, err)
	}
	for _, tc := range []struct {
		list  string
		names []string
		want  bool
	}{
		{"a", []string{"a"}, true}, {"a", []string{"b"}, false}, {"a,b", []string{"b"}, true},
		{"a,b", []string{"c", "a"}, true}, {"a,b", []string{"c"}, false}, {"a,b", []string{"a,b"}, false},
	} {
		if got := AnyPartitionOf(tc.list, tc.names); got != tc.want {
			t.Errorf("AnyPartitionOf(%q, %q) = %v", tc.list, tc.names, got)
		}
	}
	if IsPartitionList("a") || !IsPartitionList("a,b") {
		t.Error("IsPartitionList")
	}
}

func TestPartitionState(t *testing.T) {
	t.Parallel()
	// scontrol 22.05 (scripts/slurm-local.sh): "d" is DOWN, "dr" DRAIN,
	// "i" INACTIVE, "u"/"up" UP; "" and "bogus" are refused.
	for in, want := range map[string]string{"d": "DOWN", "dr": "DRAIN", "i": "INACTIVE", "u": "UP", "up": "UP", "Down": "DOWN", "inactive": "INACTIVE", "DRAIN": "DRAIN"} {
		if got, ok := ParsePartitionState(in); !ok || got != want {
			t.Errorf("ParsePartitionState(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
	for _, in := range []string{"", "bogus", "downs", "upx"} {
		if got, ok := ParsePartitionState(in); ok {
			t.Errorf("ParsePartitionState(%q) = %q, want refused", in, got)
		}
	}
	for _, s := range []string{"", "UP", "DOWN", "DRAIN", "INACTIVE"} {
		if err := CheckPartitionState(s); err != nil {
			t.Errorf("CheckPartitionState(%q): %v", s, err)
		}
	}
	for _, s := range []string{"up", "d", "OFF"} {
		if err := CheckPartitionState(s); err == nil {
			t.Errorf("CheckPartitionState(%q) passed", s)
		}
	}
	if !PartitionSubmits("DOWN") || PartitionSubmits("DRAIN") || PartitionSubmits("INACTIVE") || !PartitionSubmits("") {
		t.Error("PartitionSubmits")
	}
	if PartitionSchedules("DOWN") || !PartitionSchedules("DRAIN") || PartitionSchedules("INACTIVE") || !PartitionSchedules("") {
		t.Error("PartitionSchedules")
	}
}
