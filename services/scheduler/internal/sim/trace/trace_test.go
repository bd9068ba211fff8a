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

// TestHostileTraces: a malformed or absurd trace is refused with its line
// (or job) and the reason, never truncated to garbage, left to overflow,
// or sized into an allocation without bound (a Philly job of 10^9 GPUs
// once made 1.25×10^8 nodes, and its split a loop of as many steps).
func TestHostileTraces(t *testing.T) {
	t.Parallel()
	swfRow := func(over map[int]string) string {
		f := strings.Fields("1 10 -1 100 4 -1 -1 4 300 -1 1 7 1 -1 -1 -1 -1 -1")
		for i, v := range over {
			f[i-1] = v
		}
		return strings.Join(f, " ") + "\n"
	}
	const head = "; MaxNodes: 4\n; MaxProcs: 8\n"
	const pods = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"
	const pod = "p1,1000,1000,1,1000,LS,Running,0,10,5\n"
	const nodes = "sn,gpu,model\nn1,8,V100\nn2,8,V100\n"
	phillyJob := func(gpus, runtime string) string {
		return `[{"id":"a","num_gpus":4,"runtime":1,"submitted_time":"2017-10-01 00:00:00"},
{"id":"b","num_gpus":` + gpus + `,"runtime":` + runtime + `,"submitted_time":"2017-10-01 00:00:00"}]`
	}
	long := strings.Repeat("1", MaxLine+1)
	for _, c := range []struct {
		name, file, nodeList, want string
	}{
		{"swf NaN submit", head + swfRow(nil) + swfRow(map[int]string{2: "NaN"}), "", `line 4: field 2 "NaN" is not a number`},
		{"swf Inf processors", head + swfRow(map[int]string{5: "+Inf"}), "", `line 3: field 5 "+Inf" is not a number`},
		{"swf past int64", head + swfRow(map[int]string{4: "1e300"}), "", `line 3: field 4 "1e300" is out of range`},
		{"swf negative time", head + swfRow(map[int]string{4: "-5"}), "", "line 3: field 4 (run time) -5 is out of range: want 0..3153600000 seconds, or -1"},
		{"swf runtime past a century", head + swfRow(map[int]string{4: "9000000000000000000"}), "", "line 3: field 4 (run time) 9000000000000000000 is out of range"},
		{"swf processors past int32", head + swfRow(map[int]string{5: "-2", 8: "4294967300"}), "", "line 3: field 5 (allocated processors) -2"},
		{"swf line of more than 1 MiB", head + swfRow(nil) + long + "\n", "", "line 4: longer than 1048576 bytes"},
		{"swf MaxNodes past a cluster", "; MaxNodes: 1000000000000\n; MaxProcs: 1000000000000\n" + swfRow(nil), "", "header MaxNodes 1000000000000: the simulated cluster has at most 20000 nodes"},
		{"swf nodes past a node's slots", "; MaxNodes: 2\n; MaxProcs: 4096\n" + swfRow(nil), "", "is 2048 processors a node: a simulated node has at most 64"},
		{"swf MaxProcs past a cluster", "; MaxProcs: 9000000000000000000\n" + swfRow(nil), "", "the simulated cluster has at most 20000 nodes (--procs-per-node up to 64 makes fewer)"},
		{"swf times at a century", head + swfRow(map[int]string{2: "0"}) + swfRow(map[int]string{2: "3153600000", 4: "3153600000", 9: "-1"}), "", ""},
		{"swf submissions over centuries", head + swfRow(map[int]string{2: "0"}) + swfRow(map[int]string{2: "3153600001"}), "", "line 4: field 2 (submit time) 3153600001 is out of range"},
		{"philly job of 10^9 GPUs", phillyJob("999999937", "1"), "", "job b: num_gpus 999999937, runtime 1: want num_gpus 1..160000 (20000 nodes of 8)"},
		{"philly runtime past int64", phillyJob("4", "1e300"), "", "job b: num_gpus 4, runtime 1e+300: want num_gpus 1..160000 (20000 nodes of 8) and runtime 0..52560000 minutes"},
		{"philly submissions over centuries", strings.Replace(phillyJob("4", "1"), `"2017-10-01 00:00:00"}]`, `"9999-10-01 00:00:00"}]`, 1), "", "submitted over"},
		{"alibaba NaN time", pods + "p1,1000,1000,1,1000,LS,Running,NaN,10,5\n", nodes, `line 2: creation_time "NaN" is not a number`},
		{"alibaba negative time", pods + pod + "p2,1000,1000,1,1000,LS,Running,-7,10,5\n", nodes, "line 3: creation_time -7 is out of range: want 0..3153600000 seconds"},
		{"alibaba GPUs past int32", pods + "p1,1000,1000,5000000000,1000,LS,Running,0,10,5\n", nodes, "line 2: num_gpu 5000000000 is out of range: want 0..64"},
		{"alibaba pod larger than every node", pods + "p1,1000,1000,16,1000,LS,Running,0,10,5\n", nodes, "line 2: num_gpu 16 is more than the largest node's 8 GPUs"},
		{"alibaba CPUs past int32", pods + "p1,1e300,1000,1,1000,LS,Running,0,10,5\n", nodes, `line 2: cpu_milli "1e300" is out of range`},
		{"alibaba missing column value", pods + "p1,1000\n", nodes, "line 2: num_gpu is empty"},
		{"alibaba negative node", pods + pod, "sn,gpu,model\nn1,-8,V100\n", "line 2: gpu -8 is out of range: want 0..64"},
		{"alibaba duplicate node", pods + pod, nodes + "n1,8,V100\n", `line 4: sn "n1" is line 2's too`},
		{"alibaba line of more than 1 MiB", pods + pod + "p2," + long + "\n", nodes, "line 3: longer than 1048576 bytes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			name, format := "log.swf", "swf"
			if strings.HasPrefix(c.name, "philly") {
				name, format = "jobs.json", "philly"
			}
			if c.nodeList != "" {
				name, format = AlibabaPodList, "alibaba"
				if err := os.WriteFile(filepath.Join(dir, AlibabaNodeList), []byte(c.nodeList), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			path := filepath.Join(dir, name)
			if err := os.WriteFile(path, []byte(c.file), 0o644); err != nil {
				t.Fatal(err)
			}
			tr, err := Load(path, format, Options{})
			if c.want == "" {
				// At the bounds: accepted, every time within a century.
				if err != nil {
					t.Fatalf("Load: %v", err)
				}
				for _, j := range tr.Jobs {
					if j.Submit > MaxSeconds || j.Runtime > MaxSeconds || j.TimeLimit > MaxSeconds || j.TimeLimit < j.Runtime {
						t.Errorf("job %+v: times past %d", j, int64(MaxSeconds))
					}
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Load: %v; want an error with %q", err, c.want)
			}
		})
	}
}
