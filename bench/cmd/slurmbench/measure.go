package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// target is one system under test: it submits trivial jobs and tells how
// many of them have finished.
type target interface {
	// submit submits measured job i (0-based) and returns once the system has
	// accepted it (a job id is assigned).
	submit(ctx context.Context, i int) error
	// progress reports how many measured jobs have finished, the ids of those
	// that did not end COMPLETED, and when the last one finished by the
	// system's own record (zero when it keeps none precise enough).
	progress(ctx context.Context) (finished int, failed []string, lastEnd time.Time, err error)
}

// result is one system's measurement.
type result struct {
	N, Concurrency int
	// Accept is the time from the first submission to the last acceptance;
	// Complete the time from the first submission until every job finished.
	Accept, Complete time.Duration
	// SubmitP50 and SubmitP99 are per-submission latencies.
	SubmitP50, SubmitP99 time.Duration
	// CPU is the CPU time each component used during the measured window.
	CPU []cpuUse
	// PerNode counts the measured jobs by the node they ran on.
	PerNode map[string]int
	// Redis holds Loom's Redis commands in the window, server side.
	Redis []redisStat
	// Topics says how many bus records each topic got per job in the window
	// (Loom only).
	Topics string
	// JobNice is the agents' LOOM_JOB_NICE (Loom only).
	JobNice int
}

// AcceptRate is jobs accepted per second.
func (r result) AcceptRate() float64 { return rate(r.N, r.Accept) }

// CompleteRate is trivial jobs completed per second, end to end.
func (r result) CompleteRate() float64 { return rate(r.N, r.Complete) }

func rate(n int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// measure submits n jobs with conc concurrent submitters, then polls
// progress every poll until all n have finished. cpu, when set, is sampled
// before and after.
func measure(ctx context.Context, t target, n, conc int, poll time.Duration, cpu func() map[string]cpuSample) (result, error) {
	r := result{N: n, Concurrency: conc}
	var before map[string]cpuSample
	if cpu != nil {
		before = cpu()
	}
	lat := make([]time.Duration, n)
	var next atomic.Int64
	var firstErr error
	var errOnce sync.Once
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	t0 := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < conc; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || sctx.Err() != nil {
					return
				}
				s := time.Now()
				if err := t.submit(sctx, i); err != nil {
					errOnce.Do(func() { firstErr = fmt.Errorf("submission %d: %w", i, err); cancel() })
					return
				}
				lat[i] = time.Since(s)
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return r, firstErr
	}
	if err := ctx.Err(); err != nil {
		return r, err
	}
	r.Accept = time.Since(t0)
	sorted := append([]time.Duration(nil), lat...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	r.SubmitP50, r.SubmitP99 = percentile(sorted, 0.50), percentile(sorted, 0.99)

	tick := time.NewTicker(poll)
	defer tick.Stop()
	for {
		fin, failed, lastEnd, err := t.progress(ctx)
		seen := time.Now()
		if err != nil {
			return r, fmt.Errorf("progress: %w", err)
		}
		if len(failed) > 0 {
			return r, fmt.Errorf("%d jobs did not complete: %s", len(failed), strings.Join(first(failed, 10), ", "))
		}
		if fin >= n {
			if lastEnd.IsZero() || lastEnd.After(seen) {
				lastEnd = seen
			}
			r.Complete = lastEnd.Sub(t0)
			break
		}
		select {
		case <-ctx.Done():
			return r, fmt.Errorf("%d of %d jobs finished: %w", fin, n, ctx.Err())
		case <-tick.C:
		}
	}
	if cpu != nil {
		r.CPU = cpuDelta(before, cpu())
	}
	return r, nil
}

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p * float64(len(sorted)-1))
	return sorted[i]
}

func first(s []string, n int) []string {
	if len(s) > n {
		return append(s[:n:n], "…")
	}
	return s
}

// cpuSample is a process group's CPU time: its own and its waited-for
// children's (user + system).
type cpuSample struct {
	Procs     int
	Own, Kids time.Duration
}

// cpuUse is the CPU time one component used in a window.
type cpuUse struct {
	Name  string
	Procs int
	CPU   time.Duration
}

func cpuDelta(before, after map[string]cpuSample) []cpuUse {
	var out []cpuUse
	for name, a := range after {
		b := before[name]
		// Processes that exited unwaited-for take their time with them,
		// so a delta can be negative; count it as nothing.
		d := max((a.Own+a.Kids)-(b.Own+b.Kids), 0)
		out = append(out, cpuUse{Name: name, Procs: a.Procs, CPU: d})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CPU > out[j].CPU })
	return out
}

// clockTick is Linux's USER_HZ, the unit of /proc/<pid>/stat's times.
const clockTick = 100

// procStat reads a process's command name, parent pid and CPU times.
func procStat(pid int) (comm string, ppid int, own, kids time.Duration, ok bool) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return "", 0, 0, 0, false
	}
	s := string(b)
	open, closing := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || closing < open {
		return "", 0, 0, 0, false
	}
	comm = s[open+1 : closing]
	f := strings.Fields(s[closing+1:])
	// After the name: state(0) ppid(1) … utime(11) stime(12) cutime(13) cstime(14).
	if len(f) < 15 {
		return "", 0, 0, 0, false
	}
	ppid, _ = strconv.Atoi(f[1])
	t := func(i int) time.Duration {
		v, _ := strconv.ParseInt(f[i], 10, 64)
		return time.Duration(v) * time.Second / clockTick
	}
	return comm, ppid, t(11) + t(12), t(13) + t(14), true
}

// sampleProcs sums CPU time by component: this process ("self", its
// waited-for children counted as "clients"), and every other process
// classify names (empty: not counted).
func sampleProcs(classify func(pid int, comm string, ppid int) string) map[string]cpuSample {
	out := map[string]cpuSample{}
	if _, _, own, kids, ok := procStat(os.Getpid()); ok {
		out["self"] = cpuSample{Procs: 1, Own: own}
		out["clients"] = cpuSample{Procs: 1, Own: kids}
	}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		comm, ppid, own, kids, ok := procStat(pid)
		if !ok {
			continue
		}
		name := classify(pid, comm, ppid)
		if name == "" {
			continue
		}
		s := out[name]
		s.Procs++
		s.Own += own
		s.Kids += kids
		out[name] = s
	}
	return out
}

// loadAvg is the 1-minute load average, or "?".
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	if f := strings.Fields(string(b)); len(f) > 0 {
		return f[0]
	}
	return "?"
}
