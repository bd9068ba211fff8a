package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/loom-ml/loom/bench/slurm"
	"github.com/loom-ml/loom/services/agent"
)

func TestReplaceSection(t *testing.T) {
	t.Parallel()
	other := "# Report\n\n<!-- pathbench:begin -->\npath\n<!-- pathbench:end -->\n"
	got, err := replaceSection(other, "new one")
	if err != nil {
		t.Fatal(err)
	}
	want := other + "\n" + beginMarker + "\nnew one\n" + endMarker + "\n"
	if got != want {
		t.Fatalf("appended:\n%q\nwant\n%q", got, want)
	}
	again, err := replaceSection(got+"tail\n", "newer")
	if err != nil {
		t.Fatal(err)
	}
	if want := other + "\n" + beginMarker + "\nnewer\n" + endMarker + "\ntail\n"; again != want {
		t.Fatalf("replaced:\n%q\nwant\n%q", again, want)
	}
	if strings.Count(again, beginMarker) != 1 || !strings.Contains(again, "<!-- pathbench:begin -->\npath") {
		t.Fatalf("other sections or markers not kept: %q", again)
	}
	if _, err := replaceSection("x\n"+beginMarker+"\nno end\n", "s"); err == nil {
		t.Fatal("a begin marker without an end was accepted")
	}
	if got, _ := replaceSection("", "s"); got != beginMarker+"\ns\n"+endMarker+"\n" {
		t.Fatalf("empty file: %q", got)
	}
}

func TestWriteReportCreatesAndKeepsOtherSections(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "REPORT.md")
	if err := writeReport(path, "first"); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	if err := os.WriteFile(path, append([]byte("# Other\nkept\n\n"), b...), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writeReport(path, "second"); err != nil {
		t.Fatal(err)
	}
	b, _ = os.ReadFile(path)
	if s := string(b); !strings.HasPrefix(s, "# Other\nkept\n") || !strings.Contains(s, "\nsecond\n") || strings.Contains(s, "first") {
		t.Fatalf("report:\n%s", s)
	}
}

func TestRenderSectionShowsRatiosAndVerdicts(t *testing.T) {
	t.Parallel()
	s := result{N: 1000, Concurrency: 8, Accept: 10 * time.Second, Complete: 20 * time.Second,
		PerNode: map[string]int{"node1": 600, "node2": 400}}
	l := result{N: 1000, Concurrency: 8, Accept: time.Second, Complete: 10 * time.Second, JobNice: 10,
		PerNode: map[string]int{"cpu-0001": 1000}, Redis: []redisStat{{Cmd: "evalsha", Calls: 100, Usec: 5000}}}
	l0 := result{N: 1000, Concurrency: 8, Accept: 4 * time.Second, Complete: 8 * time.Second, JobNice: 0}
	// Round 2 is the median by completed ratio (2.0× between 1.0× and 4.0×).
	slow := result{N: 1000, Concurrency: 8, Accept: 2 * time.Second, Complete: 20 * time.Second}
	fast := result{N: 1000, Concurrency: 8, Accept: 2 * time.Second, Complete: 5 * time.Second}
	rounds := []round{
		{S: s, L: slow, CreateLoom: "10 µs", CreateSlurm: "20 µs"},
		{S: s, L: l, Others: []result{l0}, CreateLoom: "12 µs", CreateSlurm: "300 µs"},
		{S: s, L: fast},
	}
	out := renderSection(env{Nodes: 4, CPUs: 16, GPUs: 8, Command: "go run ./bench/cmd/slurmbench"}, rounds)
	for _, want := range []string{
		"| jobs accepted per second | 100 | 500 | 5.0× | met |", // medians
		"| trivial jobs completed per second, end to end | 50 | 100 | 2.0× | **missed** |",
		"| jobs accepted per second | 100 | 1000 | 10.0× |\n", // round 2 in detail
		"| 1 | 100 | 50 | 500 | 50 | 5.0× | 1.0× | 10 µs / 20 µs |",
		"| 2 | 100 | 50 | 1000 | 100 | 10.0× | 2.0× | 12 µs / 300 µs |",
		"| 3 | 100 | 50 | 500 | 200 | 5.0× | 4.0× | ? / ? |",
		"Round 2, the median one",
		"node1 600, node2 400", "cpu-0001 1000", "evalsha 100 calls × 50 µs",
		"```\ngo run ./bench/cmd/slurmbench\n```",
		"ran `LOOM_JOB_NICE=10` below",
		"| `LOOM_JOB_NICE=10` | 1000 | 100 | 10.0× | 2.0× |", "| `LOOM_JOB_NICE=0` | 250 | 125 | 2.5× | 2.5× |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("section lacks %q:\n%s", want, out)
		}
	}
}

func TestMedian(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{5, 1, 3}, 3}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := median(tc.in); got != tc.want {
			t.Errorf("median(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestFlagsCheckNamesBadFlags(t *testing.T) {
	t.Parallel()
	f := flags{n: 0, conc: 0, nodes: 100, cpus: 1, gpus: 99, only: "pbs", report: "x", jobNice: "10,-1", rounds: 0, phaseTimeout: 0}
	err := f.check()
	if err == nil {
		t.Fatal("bad flags accepted")
	}
	for _, want := range []string{"-n ", "-concurrency", "-nodes", "-gpus", "-only", "-report", "-job-nice", "-rounds", "-phase-timeout"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	ok := flags{n: 10, conc: 2, nodes: 4, cpus: 16, gpus: 0, rounds: 1, phaseTimeout: time.Minute}
	if err := ok.check(); err != nil || ok.machineType != "n2-standard-16" || len(ok.jobNices) != 1 || ok.jobNices[0] != agent.DefaultJobNice {
		t.Fatalf("good flags: %v, machine type %q, job nice %v", err, ok.machineType, ok.jobNices)
	}
}

func TestParseCommandStats(t *testing.T) {
	t.Parallel()
	info := "# Commandstats\r\ncmdstat_hset:calls=20,usec=40,usec_per_call=2.00,rejected_calls=0\r\n" +
		"cmdstat_evalsha:calls=10,usec=600,usec_per_call=60.00\r\n"
	got := parseCommandStats(info)
	if len(got) != 2 || got[0] != (redisStat{Cmd: "evalsha", Calls: 10, Usec: 600}) || got[1].Cmd != "hset" {
		t.Fatalf("parsed %+v", got)
	}
	if line := redisLine(got, 1); line != "evalsha 10 calls × 60 µs" {
		t.Fatalf("line %q", line)
	}
}

// fakeTarget accepts every job at once and finishes it after a delay.
type fakeTarget struct {
	mu       sync.Mutex
	finished int
	fail     bool
}

func (f *fakeTarget) submit(context.Context, int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.finished++
	return nil
}

func (f *fakeTarget) progress(context.Context) (int, []string, time.Time, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail {
		return f.finished, []string{"7 FAILED"}, time.Time{}, nil
	}
	return f.finished, nil, time.Time{}, nil
}

func TestMeasureCountsEveryJob(t *testing.T) {
	t.Parallel()
	ft := &fakeTarget{}
	r, err := measure(context.Background(), ft, 500, 8, time.Millisecond, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ft.finished != 500 || r.N != 500 || r.Accept <= 0 || r.Complete < r.Accept || r.AcceptRate() <= 0 {
		t.Fatalf("result %+v after %d submissions", r, ft.finished)
	}
	if _, err := measure(context.Background(), &fakeTarget{fail: true}, 5, 2, time.Millisecond, nil); err == nil ||
		!strings.Contains(err.Error(), "7 FAILED") {
		t.Fatalf("a failed job: %v, want an error naming it", err)
	}
	bad := errTarget{}
	if _, err := measure(context.Background(), bad, 5, 2, time.Millisecond, nil); !errors.Is(err, errRefused) {
		t.Fatalf("a refused submission: %v", err)
	}
}

var errRefused = errors.New("refused")

type errTarget struct{}

func (errTarget) submit(context.Context, int) error { return errRefused }
func (errTarget) progress(context.Context) (int, []string, time.Time, error) {
	return 0, nil, time.Time{}, nil
}

// TestSlurmTargetReadsTheJobcompFileIncrementally feeds the jobcomp file as
// slurmctld writes it, including a line cut in the middle.
func TestSlurmTargetReadsTheJobcompFileIncrementally(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	c := &slurm.Cluster{Layout: slurm.NewLayout(dir)}
	st := &slurmTarget{c: c}
	if err := st.mark(); err != nil { // no file yet
		t.Fatal(err)
	}
	if n, _, _, err := st.progress(context.Background()); err != nil || n != 0 {
		t.Fatalf("no file: %d, %v", n, err)
	}
	warm := "JobId=1 Name=w JobState=COMPLETED NodeList=node1 ExitCode=0:0\n"
	if err := os.WriteFile(c.JobComp, []byte(warm), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := st.mark(); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(c.JobComp, os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	write := func(s string) {
		if _, err := f.WriteString(s); err != nil {
			t.Fatal(err)
		}
	}
	write("JobId=2 Name=a JobState=COMPLETED NodeList=node1 ExitCode=0:0\nJobId=3 Name=b JobSt")
	if n, failed, _, err := st.progress(context.Background()); err != nil || n != 1 || len(failed) != 0 {
		t.Fatalf("after one line and a half: %d %v %v", n, failed, err)
	}
	write("ate=FAILED NodeList=node2 ExitCode=1:0\n")
	n, failed, _, err := st.progress(context.Background())
	if err != nil || n != 2 || len(failed) != 1 || failed[0] != "3 FAILED" {
		t.Fatalf("after two lines: %d %v %v", n, failed, err)
	}
	if st.perNode["node1"] != 1 || st.perNode["node2"] != 1 {
		t.Fatalf("per node %v", st.perNode)
	}
}

func TestProcStatReadsThisProcess(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc here")
	}
	comm, ppid, _, _, ok := procStat(os.Getpid())
	if !ok || comm == "" || ppid != os.Getppid() {
		t.Fatalf("procStat: %q ppid %d ok %v, want ppid %d", comm, ppid, ok, os.Getppid())
	}
	m := sampleProcs(func(int, string, int) string { return "" })
	if m["self"].Procs != 1 {
		t.Fatalf("sample %+v lacks this process", m)
	}
}

func TestCeilingOfARound(t *testing.T) {
	t.Parallel()
	r := round{
		S: result{N: 1000, CPU: []cpuUse{{Name: "sbatch processes", CPU: 4 * time.Second}, {Name: "slurmctld", CPU: time.Second}}},
		L: result{N: 1000, CPU: []cpuUse{{Name: loomJobsCPU, CPU: 2 * time.Second}, {Name: "agents", CPU: time.Second},
			{Name: "redis-server", CPU: 500 * time.Millisecond}}},
	}
	c := ceilingOf(2, jobCost{Script: 2 * time.Millisecond, Exec: time.Millisecond, Runs: 10}, 100, r)
	// 2 cores ÷ 2 ms = 1000 jobs/s; 5 × 100/s = 500/s, half of it; at 500/s
	// each job may use 4 ms in all, 2 of them its own.
	want := ceiling{Cores: 2, Bound: 1000, Need: 500, NeedPct: 50, LoomJobs: 2, LoomCtl: 1.5, Budget: 2, SlurmCtl: 5}
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9*math.Max(1, math.Abs(b)) }
	if c.Cores != want.Cores || !near(c.Bound, want.Bound) || !near(c.Need, want.Need) || !near(c.NeedPct, want.NeedPct) ||
		!near(c.LoomJobs, want.LoomJobs) || !near(c.LoomCtl, want.LoomCtl) || !near(c.Budget, want.Budget) || !near(c.SlurmCtl, want.SlurmCtl) {
		t.Fatalf("ceilingOf = %+v, want %+v", c, want)
	}
	// Jobs that take all the CPU the target needs leave nothing.
	if c := ceilingOf(2, jobCost{Script: 2 * time.Millisecond}, 1000, r); c.Budget != 0 {
		t.Fatalf("budget %v with jobs over the cores' share, want 0", c.Budget)
	}
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	renderCeiling(w, env{Cost: jobCost{Script: 2 * time.Millisecond, Exec: time.Millisecond, Runs: 10}}, c, 2)
	for _, want := range []string{"costs 2.00 ms of CPU", "`/bin/true` 1.00 ms", "≈ 1000 trivial jobs per second",
		"500 jobs per second, 50 % of that bound", "= 2.00 ms of CPU per job", "In round 2 it used 1.50 ms", "the benchmark 5.00 ms"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("ceiling text lacks %q:\n%s", want, b.String())
		}
	}
	b.Reset()
	renderCeiling(w, env{}, c, 2)
	if b.Len() != 0 {
		t.Fatalf("ceiling rendered without a measured job cost:\n%s", b.String())
	}
}

func TestProbeJobCostRunsTheJob(t *testing.T) {
	t.Parallel()
	c, err := probeJobCost(t.TempDir(), 5)
	if err != nil {
		t.Fatal(err)
	}
	if c.Script <= 0 || c.Exec <= 0 || c.Runs != 5 {
		t.Fatalf("probeJobCost = %+v, want positive CPU per run", c)
	}
}
