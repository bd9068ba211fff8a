package trace

import (
	"compress/gzip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// dataDir returns the real traces, or skips when this checkout has none.
func dataDir(t *testing.T) string {
	t.Helper()
	d, err := DataDir()
	if err != nil {
		t.Skipf("real traces not available: %v", err)
	}
	return d
}

func TestAlibabaRealTrace(t *testing.T) {
	t.Parallel()
	tr, err := Load(filepath.Join(dataDir(t), "alibaba-gpu-v2023"), "", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Nodes) != 1523 || tr.Capacity() != 6212 {
		t.Fatalf("nodes %d, GPUs %d; want 1523, 6212", len(tr.Nodes), tr.Capacity())
	}
	if len(tr.Jobs) != 8152 {
		t.Fatalf("jobs %d, want 8152", len(tr.Jobs))
	}
	pools := map[string]int{}
	for _, n := range tr.Nodes {
		pools[n.Pool]++
	}
	if pools["cpu"] != 310 {
		t.Errorf("CPU-only nodes %d, want 310 (pools %v)", pools["cpu"], pools)
	}
	var cancelled, cpuOnly, failed int
	accounts := map[string]int{}
	for i, j := range tr.Jobs {
		if j.ID != int64(i+1) {
			t.Fatalf("job %d has id %d", i, j.ID)
		}
		if i > 0 && j.Submit < tr.Jobs[i-1].Submit {
			t.Fatalf("job %d submitted before job %d", j.ID, j.ID-1)
		}
		if j.Nodes != 1 || j.PerNode < 0 || j.PerNode > 8 {
			t.Fatalf("job %+v: want one node of 0..8 GPUs", j)
		}
		if j.TimeLimit < j.Runtime || j.TimeLimit < MinTimeLimit {
			t.Fatalf("job %+v: time limit below runtime", j)
		}
		if j.Cancelled {
			cancelled++
		}
		if j.PerNode == 0 {
			cpuOnly++
		}
		if j.ExitCode != 0 {
			failed++
		}
		accounts[j.Account]++
	}
	if cancelled != 897 || cpuOnly != 1088 || failed != 1870 {
		t.Errorf("cancelled %d, CPU-only %d, failed %d; want 897, 1088, 1870", cancelled, cpuOnly, failed)
	}
	if accounts["ls"] != 4647 || accounts["be"] != 3398 || len(accounts) != 4 {
		t.Errorf("accounts %v", accounts)
	}
	// openb-pod-0001: 1 GPU at gpu_milli 460, created and scheduled at 427061, deleted at 12902960.
	var p1 *Job
	for i := range tr.Jobs {
		if tr.Jobs[i].Name == "openb-pod-0001" {
			p1 = &tr.Jobs[i]
		}
	}
	if p1 == nil || p1.PerNode != 1 || p1.Runtime != 12902960-427061 || p1.Submit != 427061 || p1.CPUsPerTask != 6 {
		t.Errorf("openb-pod-0001 = %+v", p1)
	}
	if !strings.Contains(strings.Join(tr.Notes, " "), "3078 GPU-sharing pods") {
		t.Errorf("notes do not count the GPU-sharing pods: %q", tr.Notes)
	}
}

func TestPhillyRealTrace(t *testing.T) {
	t.Parallel()
	tr, err := Load(filepath.Join(dataDir(t), "philly", "philly_jobs_4gpu_sample.json"), "", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Jobs) != 3034 {
		t.Fatalf("jobs %d, want 3034", len(tr.Jobs))
	}
	// The trace's attempts hold 852 GPUs at their peak: 107 nodes of 8.
	if len(tr.Nodes) != 107 || tr.Capacity() != 856 {
		t.Errorf("nodes %d, GPUs %d; want 107, 856", len(tr.Nodes), tr.Capacity())
	}
	gangs := map[int32]int{}
	for _, j := range tr.Jobs {
		if j.Slots() < 4 || j.PerNode > PhillyGPUsPerNode {
			t.Fatalf("job %+v", j)
		}
		gangs[j.Nodes]++
	}
	// 148 jobs of 16 GPUs and 61 of 32 among the multi-node gangs.
	if gangs[2] < 148 || gangs[4] < 61 || gangs[16] != 2 {
		t.Errorf("gang sizes %v", gangs)
	}
	if tr.Jobs[0].Submit != 0 {
		t.Errorf("first submit %d, want 0", tr.Jobs[0].Submit)
	}
}

func TestSWFRealTraces(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(dataDir(t), "pwa-swf")
	for _, c := range []struct {
		file        string
		jobs, nodes int
		slots       int64
	}{
		{"NASA-iPSC-1993-3.1-cln.swf.gz", 18239, 128, 128},
		{"LCG.swf.gz", 188041, 3065, 24515},
	} {
		t.Run(c.file, func(t *testing.T) {
			t.Parallel()
			tr, err := Load(filepath.Join(dir, c.file), "", Options{})
			if err != nil {
				t.Fatal(err)
			}
			if len(tr.Jobs) != c.jobs || len(tr.Nodes) != c.nodes || tr.Capacity() != c.slots {
				t.Fatalf("jobs %d, nodes %d, processors %d; want %d, %d, %d", len(tr.Jobs), len(tr.Nodes), tr.Capacity(), c.jobs, c.nodes, c.slots)
			}
			for _, j := range tr.Jobs {
				if j.Slots() <= 0 || int(j.Nodes) > c.nodes || j.TimeLimit <= 0 {
					t.Fatalf("job %+v", j)
				}
			}
		})
	}
}

func TestSWFSmallLog(t *testing.T) {
	t.Parallel()
	log := `; Version: 2.2
; MaxNodes: 4
; MaxProcs: 8
    1     10  -1   100   4  -1 -1   4   300 -1 1  7 1 -1 -1 -1 -1 -1
    2      5  -1    50  -1  -1 -1   3    -1 -1 0  8 1 -1 -1 -1 -1 -1
    3     20  -1    -1   2  -1 -1   2   100 -1 1  7 1 -1 -1 -1 -1 -1
    4     30  -1    10  16  -1 -1  16   100 -1 1  7 1 -1 -1 -1 -1 -1
`
	path := filepath.Join(t.TempDir(), "small.swf.gz")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	gz := gzip.NewWriter(f)
	if _, err := gz.Write([]byte(log)); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	tr, err := Load(path, "swf", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Nodes) != 4 || tr.Capacity() != 8 {
		t.Fatalf("nodes %d, procs %d; want 4 of 2", len(tr.Nodes), tr.Capacity())
	}
	// Job 3 has no run time, job 4 is larger than the cluster; job 2 (submitted first) comes first.
	if len(tr.Jobs) != 2 {
		t.Fatalf("jobs %+v, want 2", tr.Jobs)
	}
	a, b := tr.Jobs[0], tr.Jobs[1]
	if a.Name != "2" || a.Submit != 0 || a.Nodes != 3 || a.PerNode != 1 || a.TimeLimit != 120 || a.ExitCode != 1 || a.Account != "user-8" {
		t.Errorf("first job %+v", a)
	}
	if b.Name != "1" || b.Submit != 5 || b.Nodes != 2 || b.PerNode != 2 || b.TimeLimit != 300 || b.Runtime != 100 || b.Account != "user-7" {
		t.Errorf("second job %+v", b)
	}
}

func TestLoadErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bad := filepath.Join(dir, "pods.csv")
	if err := os.WriteFile(bad, []byte("name,num_gpu\np,1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, AlibabaNodeList), []byte("sn,cpu_milli,memory_mib,gpu,model\nn1,1000,1000,8,V100\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path, format string
		opts         Options
		want         string
	}{
		{bad, "alibaba", Options{}, "no cpu_milli column"},
		{bad, "slurm", Options{}, `unknown trace format "slurm"`},
		{filepath.Join(dir, "x.txt"), "", Options{}, "cannot tell the format"},
		{bad, "alibaba", Options{TimeLimitFactor: 0.5}, "time limit factor must be at least 1"},
		{bad, "alibaba", Options{Limit: -1}, "limit must not be negative"},
		{filepath.Join(dir, "missing.json"), "philly", Options{}, "no such file"},
	} {
		_, err := Load(c.path, c.format, c.opts)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Load(%s, %q): %v, want %q", c.path, c.format, err, c.want)
		}
	}
}

// TestTraceInDirectory: a directory stands for the trace it holds:
// Alibaba's pod list first, else its one Philly or SWF file (of the format
// asked for, when one is); none or several say what to give instead.
func TestTraceInDirectory(t *testing.T) {
	t.Parallel()
	mk := func(files ...string) string {
		dir := t.TempDir()
		for _, f := range files {
			if err := os.WriteFile(filepath.Join(dir, f), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	ali := mk(AlibabaPodList, AlibabaNodeList, "README.md")
	philly := mk("README.md", "philly_jobs.json")
	swf := mk("a.swf.gz", "b.swf")
	mixed := mk("jobs.json", "log.swf")
	for _, c := range []struct {
		dir, format, wantPath, wantFormat, wantErr string
	}{
		{ali, "", ali, "alibaba", ""},
		{philly, "", filepath.Join(philly, "philly_jobs.json"), "philly", ""},
		{philly, "philly", filepath.Join(philly, "philly_jobs.json"), "philly", ""},
		{mixed, "swf", filepath.Join(mixed, "log.swf"), "swf", ""},
		{swf, "", "", "", "holds 2 traces (a.swf.gz, b.swf): name one with --trace " + filepath.Join(swf, "a.swf.gz")},
		{mk("notes.txt"), "", "", "", "holds no trace: want Alibaba's " + AlibabaPodList},
		{philly, "swf", "", "", "holds no trace"},
	} {
		path, format, err := traceIn(c.dir, c.format)
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("traceIn(%s, %q) = %q, %q, %v; want an error with %q", c.dir, c.format, path, format, err, c.wantErr)
			}
			continue
		}
		if err != nil || path != c.wantPath || format != c.wantFormat {
			t.Errorf("traceIn(%s, %q) = %q, %q, %v; want %q, %q", c.dir, c.format, path, format, err, c.wantPath, c.wantFormat)
		}
	}
}

func TestSplit(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		n, per        int64
		nodes, perNod int32
	}{{4, 8, 1, 4}, {8, 8, 1, 8}, {12, 8, 2, 6}, {20, 8, 4, 5}, {24, 8, 3, 8}, {7, 8, 1, 7}, {5, 1, 5, 1}, {0, 8, 1, 0}} {
		if n, p := split(c.n, c.per); n != c.nodes || p != c.perNod {
			t.Errorf("split(%d, %d) = %d×%d, want %d×%d", c.n, c.per, n, p, c.nodes, c.perNod)
		}
	}
}
