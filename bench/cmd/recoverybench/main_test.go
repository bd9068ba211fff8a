package main

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestStats(t *testing.T) {
	for _, c := range []struct {
		in          []time.Duration
		lo, med, hi time.Duration
	}{
		{[]time.Duration{3, 1, 2}, 1, 2, 3},
		{[]time.Duration{4, 1, 3, 2}, 1, 2, 4}, // even: the mean of the middle two (2.5 → 2 in integer ns)
		{[]time.Duration{7}, 7, 7, 7},
	} {
		lo, med, hi := stats(c.in)
		if lo != c.lo || med != c.med || hi != c.hi {
			t.Errorf("stats(%v) = %v, %v, %v; want %v, %v, %v", c.in, lo, med, hi, c.lo, c.med, c.hi)
		}
	}
}

// TestWriteSection: the section replaces the old one between the markers
// and leaves the rest of the report as it was; a report without it gets it
// appended.
func TestWriteSection(t *testing.T) {
	path := filepath.Join(t.TempDir(), "REPORT.md")
	before := "# Report\n\n<!-- other:begin -->\nother\n<!-- other:end -->\n"
	if err := os.WriteFile(path, []byte(before), 0o644); err != nil {
		t.Fatal(err)
	}
	first := "<!-- recoverybench:begin -->\none\n<!-- recoverybench:end -->\n"
	second := "<!-- recoverybench:begin -->\ntwo\n<!-- recoverybench:end -->\n"
	if err := writeSection(path, first); err != nil {
		t.Fatal(err)
	}
	if err := writeSection(path, second); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), before+"\n"+second; got != want {
		t.Errorf("report:\n%s\nwant:\n%s", got, want)
	}
	if strings.Contains(string(b), "one") {
		t.Error("the old section is still there")
	}
}

// TestPlanCoversTheCluster: the plan is the seed's (the same seed, the
// same plan; another seed, another), each round's job is on two distinct
// nodes of the cluster with the fault on one of them, and over the rounds
// every node is faulted and every node carries a job, not only the two
// the scheduler would pack a job onto first.
func TestPlanCoversTheCluster(t *testing.T) {
	hosts := []string{"gpu-0001", "gpu-0002", "gpu-0003"}
	p := plan(1, hosts, 30)
	if !reflect.DeepEqual(p, plan(1, hosts, 30)) {
		t.Fatal("the same seed gave two plans")
	}
	if reflect.DeepEqual(p, plan(2, hosts, 30)) {
		t.Error("seeds 1 and 2 gave the same plan")
	}
	faulted, used := map[string]int{}, map[string]int{}
	for i, c := range p {
		if len(c.pair) != 2 || c.pair[0] == c.pair[1] || !slices.Contains(c.pair, c.target) {
			t.Fatalf("round %d: %+v", i+1, c)
		}
		for _, h := range c.pair {
			if !slices.Contains(hosts, h) {
				t.Fatalf("round %d: %s is not a node of the cluster", i+1, h)
			}
			used[h]++
		}
		faulted[c.target]++
	}
	for _, h := range hosts {
		if faulted[h] == 0 || used[h] == 0 {
			t.Errorf("%s: faulted %d times, in %d jobs, over 30 rounds", h, faulted[h], used[h])
		}
	}
	// Each node is faulted as often as the others, and every block of 3
	// rounds faults all three: the default 5 rounds fault every node.
	for _, h := range hosts {
		if faulted[h] != 10 {
			t.Errorf("%s faulted %d times in 30 rounds, want 10", h, faulted[h])
		}
	}
	for seed := range uint64(20) {
		five := map[string]bool{}
		for _, c := range plan(seed, hosts, 5) {
			five[c.target] = true
		}
		if len(five) != 3 {
			t.Errorf("5 rounds of seed %d fault only %v", seed, five)
		}
	}
}
