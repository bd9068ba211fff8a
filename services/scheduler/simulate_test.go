package scheduler

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Two Philly-format jobs of 4 GPUs: a runs 100 s from t=0, b 30 s from
// t=10. Their attempts overlap, so the cluster is one 8-GPU node and
// neither waits.
const tinyPhilly = `[
 {"id": "a", "num_gpus": 4, "runtime": 1.6666666666666667, "submitted_time": "2017-10-01 00:00:00",
  "attempts": [{"start_time": "2017-10-01 00:00:00", "end_time": "2017-10-01 00:01:40"}]},
 {"id": "b", "num_gpus": 4, "runtime": 0.5, "submitted_time": "2017-10-01 00:00:10",
  "attempts": [{"start_time": "2017-10-01 00:01:40", "end_time": "2017-10-01 00:02:10"}]}
]`

func TestSimulate(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "jobs.json")
	if err := os.WriteFile(path, []byte(tinyPhilly), 0o644); err != nil {
		t.Fatal(err)
	}
	var seen []string
	rep, err := Simulate(context.Background(), SimConfig{Trace: path, Progress: func(p string, done bool) {
		if done {
			seen = append(seen, p)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(seen, ",") != "fifo,easy,loom" || len(rep.Results) != 3 {
		t.Fatalf("policies run %v, results %d", seen, len(rep.Results))
	}
	// One 8-GPU node (the peak is 4 GPUs), jobs of 4: both fit at once.
	if rep.Trace.Nodes != 1 || rep.Trace.Capacity != 8 || rep.Trace.Jobs != 2 || rep.Trace.Format != "philly" {
		t.Fatalf("trace %+v", rep.Trace)
	}
	for _, r := range rep.Results {
		if r.Metrics.Finished != 2 || r.Metrics.MeanWait != 0 || r.Metrics.Makespan != 100 || r.Events == 0 {
			t.Errorf("%s: %+v", r.Policy, r.Metrics)
		}
	}
	var b bytes.Buffer
	if err := rep.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"philly (philly): 1 node, 8 GPUs, 2 jobs", "FIFO", "EASY", "LOOM", "GPU utilisation", "Notes:"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
	md := rep.Markdown()
	if !strings.HasPrefix(md, "| | fifo | easy | loom |\n|---|---:|---:|---:|\n") ||
		!strings.Contains(md, "| mean wait | 0s | 0s | 0s |") {
		t.Errorf("markdown:\n%s", md)
	}
	// Arrivals twice as fast: b arrives at 5 s.
	rep, err = Simulate(context.Background(), SimConfig{Trace: path, Format: "philly", Policies: []string{"fifo"}, ArrivalScale: 2})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(rep.Title(), "arrivals ×2") || rep.Results[0].Metrics.Makespan != 100 {
		t.Errorf("title %q, %+v", rep.Title(), rep.Results[0].Metrics)
	}
	for _, c := range []struct {
		cfg  SimConfig
		want string
	}{
		{SimConfig{}, "trace: a path is required"},
		{SimConfig{Trace: path, Policies: []string{"sjf"}}, `unknown policy "sjf"`},
		{SimConfig{Trace: path, ArrivalScale: -1}, "arrival scale must be positive"},
		{SimConfig{Trace: path, Format: "pbs"}, `unknown trace format "pbs"`},
	} {
		if _, err := Simulate(context.Background(), c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Simulate(%+v): %v, want %q", c.cfg, err, c.want)
		}
	}
}

func TestHumanSeconds(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		s    float64
		want string
	}{{0, "0s"}, {4.25, "4.2s"}, {45, "45s"}, {90, "1m30s"}, {3*3600 + 4*60, "3h04m"}, {2*86400 + 3*3600 + 59, "2d03h"}} {
		if got := HumanSeconds(c.s); got != c.want {
			t.Errorf("HumanSeconds(%v) = %q, want %q", c.s, got, c.want)
		}
	}
}

func TestBenchCycle(t *testing.T) {
	t.Parallel()
	r, err := BenchCycle(context.Background(), CycleConfig{Nodes: 16, Pending: 100, Repeat: 1})
	if err != nil {
		t.Fatal(err)
	}
	if r.GPUs != 128 || r.Config.Policy != "loom" || r.First <= 0 {
		t.Errorf("%+v", *r)
	}
}
