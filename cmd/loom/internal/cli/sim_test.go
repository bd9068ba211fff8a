package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// smallSWF is a tiny SWF log: 2 nodes of 2 processors; job 1 takes the whole
// machine for 100 s, so job 2 (1 processor, submitted at 10) waits 90 s
// under FIFO.
const smallSWF = `; Version: 2.2
; MaxNodes: 2
; MaxProcs: 4
    1      0  -1   100   4  -1 -1   4   200 -1 1  1 1 -1 -1 -1 -1 -1
    2     10  -1    50   1  -1 -1   1   100 -1 1  2 1 -1 -1 -1 -1 -1
`

func writeSWF(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "small.swf")
	if err := os.WriteFile(path, []byte(smallSWF), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestSimTable(t *testing.T) {
	t.Parallel()
	path := writeSWF(t)
	out, errOut, code := run(t, "127.0.0.1:1", "sim", "--trace", path, "--policy", "all")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{
		"small (swf): 2 nodes, 4 processors, 2 jobs",
		"FIFO", "EASY", "LOOM",
		"CPU utilisation", "mean wait", "p95 wait", "mean JCT", "mean bounded slowdown", "fairness",
		"Notes:",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// Waits 0 and 90 s under every policy: mean 45 s, p95 90 s.
	for _, row := range []string{"mean wait", "p95 wait"} {
		line := lineWith(out, row)
		want := map[string]string{"mean wait": "45s", "p95 wait": "1m30s"}[row]
		if strings.Count(line, want) != 3 {
			t.Errorf("%s row %q, want %s for each policy", row, line, want)
		}
	}
	if !strings.Contains(errOut, "simulating fifo") || !strings.Contains(errOut, "simulating loom") {
		t.Errorf("no progress on stderr: %q", errOut)
	}
}

func lineWith(out, prefix string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return ""
}

func TestSimJSON(t *testing.T) {
	t.Parallel()
	out, errOut, code := run(t, "127.0.0.1:1", "sim", "--trace", writeSWF(t), "--format", "swf", "--policy", "fifo", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rep struct {
		Trace struct {
			Jobs     int   `json:"jobs"`
			Capacity int64 `json:"capacity"`
		} `json:"trace"`
		Results []struct {
			Policy  string `json:"policy"`
			Metrics struct {
				Finished int     `json:"finished"`
				MeanWait float64 `json:"mean_wait_s"`
				Makespan float64 `json:"makespan_s"`
			} `json:"metrics"`
		} `json:"results"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if rep.Trace.Jobs != 2 || rep.Trace.Capacity != 4 || len(rep.Results) != 1 {
		t.Fatalf("report %+v", rep)
	}
	r := rep.Results[0]
	if r.Policy != "fifo" || r.Metrics.Finished != 2 || r.Metrics.MeanWait != 45 || r.Metrics.Makespan != 150 {
		t.Errorf("result %+v", r)
	}
}

func TestSimBadInput(t *testing.T) {
	t.Parallel()
	path := writeSWF(t)
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"sim"}, 2, "--trace is required"},
		{[]string{"sim", "--trace", path, "--policy", "sjf"}, 2, `--policy must be fifo, easy, loom or all, got "sjf"`},
		{[]string{"sim", "--trace", path, "--format", "csv"}, 2, `--format must be alibaba, philly, swf, got "csv"`},
		{[]string{"sim", "--trace", path, "--limit", "-1"}, 2, "--limit must not be negative"},
		{[]string{"sim", "--trace", path, "--arrival-scale", "0"}, 2, "--arrival-scale must be positive"},
		{[]string{"sim", "--trace", path, "--arrival-scale", "NaN"}, 2, "--arrival-scale must be positive, got NaN"},
		{[]string{"sim", "--trace", path, "--arrival-scale", "+Inf"}, 2, "--arrival-scale must be positive, got +Inf"},
		{[]string{"sim", "--trace", path, "--time-limit-factor", "0.5"}, 2, "--time-limit-factor must be at least 1"},
		{[]string{"sim", "--trace", path, "--time-limit-factor", "NaN"}, 2, "--time-limit-factor must be at least 1, got NaN"},
		{[]string{"sim", "--trace", path, "--procs-per-node", "65"}, 2, "--procs-per-node must be 1..64"},
		{[]string{"sim", "--trace", filepath.Join(t.TempDir(), "none.swf"), "--policy", "fifo"}, 1, "no such file"},
		{[]string{"sim", "--trace", path, "extra"}, 2, "loom sim takes no arguments"},
	} {
		_, errOut, code := run(t, "127.0.0.1:1", c.args...)
		if code != c.code || !strings.Contains(errOut, c.want) {
			t.Errorf("loom %v: exit %d, stderr %q; want exit %d and %q", c.args, code, errOut, c.code, c.want)
		}
	}
}
