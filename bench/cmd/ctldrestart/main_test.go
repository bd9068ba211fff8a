package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestParseJobs(t *testing.T) {
	t.Parallel()
	got, err := parseJobs("10000, 30000,100000")
	if err != nil || len(got) != 3 || got[0] != 10000 || got[2] != 100000 {
		t.Fatalf("parseJobs: %v, %v", got, err)
	}
	for in, want := range map[string]string{
		"":            "not a count",
		"0":           "not a count of 1..1000000",
		"2000000":     "not a count of 1..1000000",
		"10,x":        `"x" is not a count`,
		"30000,10000": "ascending, got 10000 after 30000",
		"5,5":         "ascending",
	} {
		if _, err := parseJobs(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("parseJobs(%q): %v, want an error with %q", in, err, want)
		}
	}
}

func TestParseBench(t *testing.T) {
	t.Parallel()
	out := "goos: linux\nBenchmarkRestartFromRedis-2   \t       3\t 134904693 ns/op\t         0.6593 decode-ms/op\t" +
		"        12.59 load-ms/op\t        11.54 pass-ms/op\t        40.21 read-cpu-ms/op\t       110.8 read-ms/op\t" +
		"        19.22 redis-busy-ms/op\t        12.74 redis-longest-ms\nPASS\n"
	r, err := parseBench(out)
	if err != nil {
		t.Fatal(err)
	}
	if r.total < 134.9 || r.total > 134.91 || r.read != 110.8 || r.load != 12.59 || r.pass != 11.54 || r.readCPU != 40.21 {
		t.Fatalf("parseBench: %+v", r)
	}
	if _, err := parseBench("PASS\n"); err == nil || !strings.Contains(err.Error(), "no BenchmarkRestartFromRedis line") {
		t.Fatalf("no line: %v", err)
	}
	if _, err := parseBench("BenchmarkRestartFromRedis-2 3 100 ns/op\n"); err == nil || !strings.Contains(err.Error(), "lacks") {
		t.Fatalf("missing metrics: %v", err)
	}
}

// TestLogTimes finds each pattern's first line at or after the restart, not
// the earlier process's lines nor those before the offset.
func TestLogTimes(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "slurmctld.log")
	old := "[2026-12-07T15:36:19.700] Recovered information about 10 jobs\n" // before the offset
	log := old + "[2026-12-07T15:36:11.473] Recovered information about 10 jobs\n" +
		"[2026-12-07T15:36:19.055] slurmctld version 22.05.8 started on cluster loombench\n" +
		"not a log line\n" +
		"[2026-12-07T15:36:19.658] Recovered information about 10 jobs\n" +
		"[2026-12-07T15:36:24.816] debug:  sched: Running job scheduler for default depth.\n" +
		"[2026-12-07T15:36:27.000] debug:  sched: Running job scheduler for default depth.\n"
	if err := os.WriteFile(path, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	since := time.Date(2026, 12, 7, 15, 36, 19, 10e6, time.Local)
	rec, sched, never := regexp.MustCompile(`Recovered information about 10 jobs`), regexp.MustCompile(`sched: Running`), regexp.MustCompile(`never`)
	at, err := logTimes(path, int64(len(old)), since, rec, sched, never)
	if err != nil {
		t.Fatal(err)
	}
	if got := at[rec].Sub(since); got != 648*time.Millisecond {
		t.Errorf("recovered %v after the start, want 648ms", got)
	}
	if got := at[sched].Sub(since); got != 5806*time.Millisecond {
		t.Errorf("first pass %v after the start, want 5.806s", got)
	}
	if !at[never].IsZero() {
		t.Errorf("a pattern never logged found at %v", at[never])
	}
}
