package main

import (
	"os"
	"path/filepath"
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
