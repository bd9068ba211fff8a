// Command ctldrestart compares a cold restart of Loom's scheduler with one of
// real Slurm's slurmctld (Debian's 22.05), at the same number of pending jobs,
// on this machine, in one run (the house rule: a ratio against a real
// reference, both measured under the same load).
//
// Slurm: it starts a real Slurm (bench/slurm: munged, slurmctld, one slurmd
// per node; 4 nodes of 8 fake GPUs by default) with a second partition that
// is down, and submits the pending jobs there with a few parallel sbatch
// processes (they stay pending: PartitionDown). For each count it then
// restarts slurmctld (SIGTERM, so that it saves its state; started again
// without -c, so that it recovers it) and times, from the new process's
// start: its log's "Recovered information about N jobs" (its state loaded),
// the first `squeue -h -t PD` that lists all N (it answers with them), and
// its log's first "sched: Running job scheduler" (its first scheduling pass
// begins; SlurmctldDebug=debug for that line).
//
// Loom: it runs the scheduler's BenchmarkRestartFromRedis
// (services/scheduler/internal/adapters) at the same count and node shape
// (LOOM_RESTART_PENDING, LOOM_RESTART_NODES): the schedcycle state after its
// first pass, stored in a real redis-server as the scheduler's Applies leave
// it, read back and decoded (read), built into a fresh state (load), and
// scheduled once (pass), one after the other as a restarted scheduler does.
//
// Results go to stdout and, with -report, into the ctldrestart section of a
// Markdown report. Needs root, the Slurm packages (see bench/slurm) and
// redis-server. Run from the repository (it finds the workspace with go env
// GOWORK):
//
//	go run ./bench/cmd/ctldrestart -jobs 10000,30000 -report bench/REPORT.md
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/loom-ml/loom/bench/internal/report"
	"github.com/loom-ml/loom/bench/slurm"
)

// options are the program's settings.
type options struct {
	jobs       []int
	nodes      int
	submitters int
	benchtime  string
	dir        string
	report     string
	timeout    time.Duration
}

// maxJobs bounds -jobs: slurmctld's MaxJobCount is set above it.
const maxJobs = 1000000

func main() {
	var o options
	var jobs string
	flag.StringVar(&jobs, "jobs", "10000,30000", "pending-job counts, comma-separated, ascending (each adds jobs to the last)")
	flag.IntVar(&o.nodes, "nodes", 4, "Slurm nodes (8 fake GPUs each); Loom's state has as many")
	flag.IntVar(&o.submitters, "submitters", 4, "parallel sbatch processes")
	flag.StringVar(&o.benchtime, "benchtime", "3x", "go test -benchtime for Loom's restarts")
	flag.StringVar(&o.dir, "dir", "", "Slurm's directory (default: a fresh temporary one, removed at the end)")
	flag.StringVar(&o.report, "report", "", "Markdown file to write the results into (the section between the ctldrestart markers is replaced)")
	flag.DurationVar(&o.timeout, "timeout", 90*time.Minute, "give up after this long")
	flag.Parse()
	var err error
	if o.jobs, err = parseJobs(jobs); err == nil {
		err = run(o)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "ctldrestart:", err)
		os.Exit(1)
	}
}

// parseJobs reads -jobs: positive counts, strictly ascending, at most maxJobs.
func parseJobs(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > maxJobs {
			return nil, fmt.Errorf("-jobs: %q is not a count of 1..%d", f, maxJobs)
		}
		if len(out) > 0 && n <= out[len(out)-1] {
			return nil, fmt.Errorf("-jobs: counts must be ascending, got %d after %d", n, out[len(out)-1])
		}
		out = append(out, n)
	}
	return out, nil
}

// logf reports progress on stderr.
func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "ctldrestart: "+format+"\n", args...)
}

// ctlRestart is one slurmctld restart, each figure from the new process's start.
type ctlRestart struct {
	jobs      int
	submitted time.Duration // how long submitting this count's new jobs took
	save      time.Duration // SIGTERM until the old slurmctld exited (saving its state)
	loaded    time.Duration // "Recovered information about N jobs"
	answered  time.Duration // squeue lists all N
	firstPass time.Duration // first "sched: Running job scheduler"; 0 when not seen
}

// loomRestart is BenchmarkRestartFromRedis's figures, per restart.
type loomRestart struct {
	total, read, load, pass, readCPU float64 // ms
}

func run(o options) error {
	if o.nodes < 1 || o.nodes > slurm.MaxNodes {
		return fmt.Errorf("-nodes must be 1..%d, got %d", slurm.MaxNodes, o.nodes)
	}
	if o.submitters < 1 || o.submitters > 64 {
		return fmt.Errorf("-submitters must be 1..64, got %d", o.submitters)
	}
	out, err := exec.Command("go", "env", "GOWORK").Output()
	work := strings.TrimSpace(string(out))
	if err != nil || work == "" || work == "off" {
		return fmt.Errorf("find the workspace (go env GOWORK; run from the repository): %v", err)
	}
	root := filepath.Dir(work)
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()

	dir := o.dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "ctldrestart"); err != nil {
			return err
		}
		defer os.RemoveAll(dir)
	}
	load0 := loadAvg()
	ctl, err := measureSlurm(ctx, o, dir)
	if err != nil {
		return err
	}
	loom := make([]loomRestart, len(o.jobs))
	for i, n := range o.jobs {
		logf("Loom: BenchmarkRestartFromRedis at %d nodes, %d pending jobs", o.nodes, n)
		if loom[i], err = benchLoom(ctx, root, o, n); err != nil {
			return err
		}
	}
	version, _ := slurm.Version()
	text := render(o, ctl, loom, version, load0, loadAvg())
	fmt.Print(text)
	if o.report == "" {
		return nil
	}
	return report.WriteSection(o.report, "ctldrestart", "<!-- ctldrestart:begin -->\n"+text+"<!-- ctldrestart:end -->\n")
}

// measureSlurm starts Slurm under dir, fills its down partition up to each
// count of o.jobs and restarts slurmctld at each.
func measureSlurm(ctx context.Context, o options, dir string) (_ []ctlRestart, err error) {
	c, err := slurm.Start(ctx, slurm.Options{Dir: dir, Nodes: o.nodes, GPUsPerNode: 8,
		ExtraConfig: []string{
			// The later MaxJobCount wins (slurmctld logs that it was given twice).
			fmt.Sprintf("MaxJobCount=%d", maxJobs+1000),
			// For the "sched:" lines; the submissions run at info (setdebug).
			"SlurmctldDebug=debug",
			"PartitionName=parked Nodes=ALL MaxTime=INFINITE State=DOWN",
		}})
	if err != nil {
		return nil, err
	}
	defer func() {
		if serr := c.Stop(); serr != nil && err == nil {
			err = serr
		}
	}()
	var res []ctlRestart
	have := 0
	for _, n := range o.jobs {
		if _, err := c.Output(ctx, "scontrol", "setdebug", "info"); err != nil {
			return nil, err
		}
		began := time.Now()
		if err := submit(ctx, c, n-have, o.submitters); err != nil {
			return nil, err
		}
		r := ctlRestart{jobs: n, submitted: time.Since(began)}
		logf("Slurm: %d pending jobs (%d submitted in %v); restarting slurmctld", n, n-have, r.submitted.Round(time.Second))
		have = n
		logPath := filepath.Join(c.Log, "slurmctld.log")
		st, err := os.Stat(logPath)
		if err != nil {
			return nil, err
		}
		var started time.Time
		if r.save, started, err = c.RestartController(ctx); err != nil {
			return nil, err
		}
		// squeue run before slurmctld listens waits a second before it tries
		// again: first wait (finer) for the port to accept connections.
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(c.ControllerPort))
		if err := waitFor(ctx, 10*time.Minute, 10*time.Millisecond, "slurmctld to listen on "+addr, func() bool {
			conn, err := net.DialTimeout("tcp", addr, time.Second)
			if err == nil {
				conn.Close()
			}
			return err == nil
		}); err != nil {
			return nil, err
		}
		if err := waitFor(ctx, 10*time.Minute, 10*time.Millisecond, fmt.Sprintf("squeue to list %d pending jobs", n), func() bool {
			out, err := c.Squeue(ctx, "-h", "-t", "PD", "-o", "%i")
			return err == nil && strings.Count(out, "\n") >= n
		}); err != nil {
			return nil, err
		}
		r.answered = time.Since(started)
		recovered := regexp.MustCompile(`Recovered information about ` + strconv.Itoa(n) + ` jobs`)
		sched := regexp.MustCompile(`sched: Running job scheduler`)
		var at map[*regexp.Regexp]time.Time
		// The first pass follows within seconds (slurmctld's timers); not seeing it is reported, not fatal.
		_ = waitFor(ctx, time.Minute, 500*time.Millisecond, "slurmctld's first scheduling pass in its log", func() bool {
			at, err = logTimes(logPath, st.Size(), started, recovered, sched)
			return err == nil && !at[sched].IsZero()
		})
		if err != nil {
			return nil, err
		}
		if at[recovered].IsZero() {
			return nil, fmt.Errorf("%s has no %q after the restart at %s", logPath, recovered, started.Format(time.RFC3339Nano))
		}
		r.loaded = at[recovered].Sub(started)
		if !at[sched].IsZero() {
			r.firstPass = at[sched].Sub(started)
		}
		logf("Slurm: %+v", r)
		res = append(res, r)
	}
	return res, nil
}

// submit sbatches n jobs to the down partition from par parallel workers.
func submit(ctx context.Context, c *slurm.Cluster, n, par int) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, par)
	for w := range par {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				if _, err := c.Sbatch(ctx, "-p", "parked", "--job-name=parked", "--wrap", "true"); err != nil {
					errs[w] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// logTimes finds, in slurmctld's log from byte offset on (where it ended
// before the restart), the first line at or after since that matches each
// pattern, by its timestamp ("[2006-01-02T15:04:05.000]", local time,
// millisecond precision; since is truncated to the millisecond).
func logTimes(path string, offset int64, since time.Time, pats ...*regexp.Regexp) (map[*regexp.Regexp]time.Time, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return nil, err
	}
	since = since.Truncate(time.Millisecond)
	found := map[*regexp.Regexp]time.Time{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if len(line) < 25 || line[0] != '[' || line[24] != ']' {
			continue
		}
		t, err := time.ParseInLocation("2006-01-02T15:04:05.000", line[1:24], time.Local)
		if err != nil || t.Before(since) {
			continue
		}
		for _, p := range pats {
			if _, ok := found[p]; !ok && p.MatchString(line) {
				found[p] = t
			}
		}
	}
	return found, sc.Err()
}

// waitFor polls cond every interval until it holds, ctx ends, or d passes.
func waitFor(ctx context.Context, d, every time.Duration, what string, cond func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	tick := time.NewTicker(every)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-tick.C:
		}
	}
	return nil
}

// benchLoom runs BenchmarkRestartFromRedis at n pending jobs on o.nodes nodes.
func benchLoom(ctx context.Context, root string, o options, n int) (loomRestart, error) {
	cmd := exec.CommandContext(ctx, "go", "test", "-count=1", "-run", "^$", "-bench", "^BenchmarkRestartFromRedis$",
		"-benchtime", o.benchtime, "./internal/adapters/")
	cmd.Dir = filepath.Join(root, "services", "scheduler")
	cmd.Env = append(os.Environ(), "LOOM_RESTART_NODES="+strconv.Itoa(o.nodes), "LOOM_RESTART_PENDING="+strconv.Itoa(n))
	out, err := cmd.CombinedOutput()
	if err != nil {
		return loomRestart{}, fmt.Errorf("go test -bench RestartFromRedis (%d jobs): %v\n%s", n, err, out)
	}
	return parseBench(string(out))
}

// parseBench reads the BenchmarkRestartFromRedis line of go test's output.
func parseBench(out string) (loomRestart, error) {
	for _, line := range strings.Split(out, "\n") {
		if !strings.HasPrefix(line, "BenchmarkRestartFromRedis") {
			continue
		}
		f := strings.Fields(line)
		m := map[string]float64{}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return loomRestart{}, fmt.Errorf("benchmark line %q: %q is not a number", line, f[i])
			}
			m[f[i+1]] = v
		}
		r := loomRestart{total: m["ns/op"] / 1e6, read: m["read-ms/op"], load: m["load-ms/op"],
			pass: m["pass-ms/op"], readCPU: m["read-cpu-ms/op"]}
		if r.total <= 0 || r.read <= 0 || r.load <= 0 || r.pass <= 0 {
			return loomRestart{}, fmt.Errorf("benchmark line %q lacks ns/op, read-ms/op, load-ms/op or pass-ms/op", line)
		}
		return r, nil
	}
	return loomRestart{}, fmt.Errorf("no BenchmarkRestartFromRedis line in:\n%s", out)
}

// ms formats a duration in milliseconds.
func ms(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d.Microseconds())/1e3) }

// render writes the section's text (without its markers).
func render(o options, ctl []ctlRestart, loom []loomRestart, version, load0, load1 string) string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("## A cold restart beside slurmctld's (ctldrestart)\n\n")
	w("The same number of pending jobs, in one run on this machine: real Slurm's slurmctld (%s; %d nodes of 8 fake GPUs, "+
		"the jobs pending in a partition that is down) restarted with SIGTERM and started again on its saved state; Loom's "+
		"scheduler restarted from its records in a real redis-server (`BenchmarkRestartFromRedis`: the schedcycle state on as "+
		"many nodes after its first pass; the mean of `-benchtime %s` restarts). Slurm's figures are from the new process's start, "+
		"each once: its log's \"Recovered information about N jobs\" (loaded), the first `squeue -h -t PD` listing all N "+
		"(answers), its log's first `sched: Running job scheduler` (first pass begins; slurmctld starts it on a timer, not "+
		"when it is ready). Loom's: reading and decoding the records (read), building the state (load), the first pass (pass); "+
		"\"ready\" is the three together. Ratios are Slurm's time over Loom's (above 1: Loom is faster).\n\n",
		version, o.nodes, o.benchtime)
	w("| pending jobs | slurmctld: loaded | answers | first pass begins | Loom: read | load | pass | ready | loaded: Slurm / Loom | answers / ready: Slurm / Loom |\n")
	w("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for i, c := range ctl {
		l := loom[i]
		first := "not seen"
		if c.firstPass > 0 {
			first = ms(c.firstPass)
		}
		loomLoaded := l.read + l.load
		w("| %d | %s | %s | %s | %.1f ms | %.1f ms | %.1f ms | %.1f ms | %.1f | %.1f |\n", c.jobs, ms(c.loaded), ms(c.answered), first,
			l.read, l.load, l.pass, l.total,
			float64(c.loaded.Microseconds())/1e3/loomLoaded, float64(c.answered.Microseconds())/1e3/l.total)
	}
	w("\nslurmctld's SIGTERM (saving its state) took")
	for i, c := range ctl {
		sep := ","
		if i == 0 {
			sep = ""
		}
		w("%s %s at %d jobs", sep, ms(c.save), c.jobs)
	}
	w("; submitting the jobs (%d sbatch processes) took", o.submitters)
	for i, c := range ctl {
		sep := ","
		if i == 0 {
			sep = ""
		}
		w("%s %s", sep, c.submitted.Round(time.Second))
	}
	w(".\n\nMachine: %s, %d CPUs available; 1-minute load average %s at the start, %s at the end (the machine is shared); %s; measured %s UTC.\n\n",
		cpuModel(), runtime.NumCPU(), load0, load1, runtime.Version(), time.Now().UTC().Format("2006-01-02 15:04"))
	w("Rerun (from the repository root, as root, with Slurm 22.05 and redis-server installed; slurmctld takes submissions more slowly as its queue grows, " +
		"here ~220/s up to 10,000 jobs, ~90/s up to 30,000, ~25/s past 70,000, so 100,000 takes over half an hour):\n\n")
	w("```\ngo run ./bench/cmd/ctldrestart -jobs %s -report bench/REPORT.md\n```\n", joinInts(o.jobs))
	return b.String()
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

// loadAvg is the 1-minute load average ("?" where /proc/loadavg is missing).
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) > 0 {
		return f[0]
	}
	return "?"
}

// cpuModel is /proc/cpuinfo's first model name ("unknown CPU" without one).
func cpuModel() string {
	b, _ := os.ReadFile("/proc/cpuinfo")
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}
