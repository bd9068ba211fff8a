package main

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/loom-ml/loom/services/agent"
)

// The report section's markers in bench/REPORT.md.
const (
	beginMarker = "<!-- slurmbench:begin -->"
	endMarker   = "<!-- slurmbench:end -->"
)

// target ratio of Loom over Slurm on both measures (issue 4).
const targetRatio = 5.0

// env describes the run for the report.
type env struct {
	Date, Machine, GoVersion, SlurmVersion string
	// Load and LoadEnd are the 1-minute load averages at the start and end.
	Load, LoadEnd             string
	Nodes, CPUs, GPUs, Warmup int
	LoomMachineType, Command  string
	// Cores is the CPUs this process may use; Cost what the job costs alone.
	Cores int
	Cost  jobCost
}

// replaceSection returns doc with the text between the markers replaced by
// section (markers kept), or section appended when doc has no markers. A
// begin without an end (or the other way round) is an error: the file was
// edited by hand and guessing could lose text.
func replaceSection(doc, section string) (string, error) {
	b, e := strings.Index(doc, beginMarker), strings.Index(doc, endMarker)
	block := beginMarker + "\n" + strings.TrimSpace(section) + "\n" + endMarker
	switch {
	case b < 0 && e < 0:
		if doc != "" && !strings.HasSuffix(doc, "\n") {
			doc += "\n"
		}
		if doc != "" {
			doc += "\n"
		}
		return doc + block + "\n", nil
	case b < 0 || e < 0 || e < b:
		return "", errors.New("the report has one slurmbench marker without the other (or in the wrong order); fix it by hand")
	}
	return doc[:b] + block + doc[e+len(endMarker):], nil
}

// writeReport puts section into the file at path, creating it if needed.
func writeReport(path, section string) error {
	old, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("read report: %w", err)
	}
	doc, err := replaceSection(string(old), section)
	if err != nil {
		return fmt.Errorf("report %s: %w", path, err)
	}
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	return nil
}

// orQ is s, or "?" when empty.
func orQ(s string) string {
	if s == "" {
		return "?"
	}
	return s
}

func ratio(loom, slurm float64) float64 {
	if slurm <= 0 {
		return 0
	}
	return loom / slurm
}

func verdict(r float64) string {
	if r >= targetRatio {
		return "met"
	}
	return "**missed**"
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }

func cpuLine(us []cpuUse) string {
	var parts []string
	for _, u := range us {
		if u.CPU < 10*time.Millisecond {
			continue
		}
		name := u.Name
		if u.Procs > 1 {
			name = fmt.Sprintf("%s ×%d", name, u.Procs)
		}
		parts = append(parts, fmt.Sprintf("%s %.1f s", name, u.CPU.Seconds()))
	}
	if len(parts) == 0 {
		return "—"
	}
	return strings.Join(parts, ", ")
}

// perNodeLine is "node1 500, node2 500, …" in node order.
func perNodeLine(m map[string]int) string {
	if len(m) == 0 {
		return "—"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

// round is one pass over both systems: Loom (its headline run L and the
// runs with other LOOM_JOB_NICE values, Others), then Slurm (S), with what
// creating a file cost before each.
type round struct {
	S, L                    result
	Others                  []result
	CreateLoom, CreateSlurm string
}

// ratios are a round's Loom/Slurm ratios: accepted and completed per second.
func (r round) ratios() (acc, done float64) {
	return ratio(r.L.AcceptRate(), r.S.AcceptRate()), ratio(r.L.CompleteRate(), r.S.CompleteRate())
}

// median returns the median of xs (the mean of the middle two for an even count).
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// medianRound returns the index of the round whose completed ratio is the
// median (the lower middle one for an even count).
func medianRound(rs []round) int {
	idx := make([]int, len(rs))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool {
		_, x := rs[idx[a]].ratios()
		_, y := rs[idx[b]].ratios()
		return x < y
	})
	return idx[(len(idx)-1)/2]
}

// renderSection is the Markdown for a run of one or more rounds: the
// verdicts on the medians of the rounds' ratios (each measured within one
// round), every round's rates, and the details of the median round.
func renderSection(e env, rounds []round) string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	var accs, dones, sAcc, sDone, lAcc, lDone []float64
	for _, r := range rounds {
		a, d := r.ratios()
		accs, dones = append(accs, a), append(dones, d)
		sAcc, sDone = append(sAcc, r.S.AcceptRate()), append(sDone, r.S.CompleteRate())
		lAcc, lDone = append(lAcc, r.L.AcceptRate()), append(lDone, r.L.CompleteRate())
	}
	ra, rc := median(accs), median(dones)
	mi := medianRound(rounds)
	m := rounds[mi]
	s, l, others := m.S, m.L, m.Others
	w("## Loom against a real Slurm: submissions and trivial jobs end to end (slurmbench)")
	w("")
	w("%d rounds in one run, on one machine; in each, one system after the other (each stopped before the next", len(rounds))
	w("starts), Loom first, because Slurm's daemons create and delete files for every job, which on ext4 slows")
	w("creating files nearby for minutes after; Loom deletes none while it runs. A ratio is measured within a")
	w("round; the verdict is on the median of the rounds' ratios (this machine is shared, and one system's rate")
	w("moves by 20 %% from one run to the next).")
	w("")
	w("| measure (median of %d rounds) | Slurm | Loom | Loom / Slurm | target ≥ %.0f× |", len(rounds), targetRatio)
	w("|---|---:|---:|---:|---|")
	w("| jobs accepted per second | %.0f | %.0f | %.1f× | %s |", median(sAcc), median(lAcc), ra, verdict(ra))
	w("| trivial jobs completed per second, end to end | %.0f | %.0f | %.1f× | %s |", median(sDone), median(lDone), rc, verdict(rc))
	w("")
	w("| round | Slurm accepted/s | Slurm completed/s | Loom accepted/s | Loom completed/s | accepted | completed | create before Loom / Slurm |")
	w("|---|---:|---:|---:|---:|---:|---:|---|")
	for i, r := range rounds {
		a, d := r.ratios()
		w("| %d | %.0f | %.0f | %.0f | %.0f | %.1f× | %.1f× | %s / %s |", i+1, r.S.AcceptRate(), r.S.CompleteRate(),
			r.L.AcceptRate(), r.L.CompleteRate(), a, d, orQ(r.CreateLoom), orQ(r.CreateSlurm))
	}
	w("")
	w("The create column is the median time to create a file in the round's working directory just before each")
	w("system ran (200 creates; every job of either system creates at least its output file there; on this")
	w("ext4 disk it takes 6–15 µs in a quiet directory and 250–350 µs where thousands of files were deleted in")
	w("the minutes before).")
	w("")
	w("Round %d, the median one (by completed ratio), in detail:", mi+1)
	w("")
	w("| measure | Slurm | Loom | Loom / Slurm |")
	w("|---|---:|---:|---:|")
	w("| jobs accepted per second | %.0f | %.0f | %.1f× |", s.AcceptRate(), l.AcceptRate(), ratio(l.AcceptRate(), s.AcceptRate()))
	w("| trivial jobs completed per second, end to end | %.0f | %.0f | %.1f× |", s.CompleteRate(), l.CompleteRate(), ratio(l.CompleteRate(), s.CompleteRate()))
	w("| time to accept all %d | %.2f s | %.2f s | |", s.N, s.Accept.Seconds(), l.Accept.Seconds())
	w("| time until all %d completed | %.2f s | %.2f s | |", s.N, s.Complete.Seconds(), l.Complete.Seconds())
	w("| one submission, p50 / p99 | %s / %s | %s / %s | |", ms(s.SubmitP50), ms(s.SubmitP99), ms(l.SubmitP50), ms(l.SubmitP99))
	w("")
	w("Loom's jobs ran `LOOM_JOB_NICE=%d` below its agents' CPU priority (default %d; services/agent/README.md", l.JobNice, agent.DefaultJobNice)
	w("says why). A nice value weighs each process on its own: with dozens of trivial jobs running at once on")
	w("two cores, as here, they still take most of the CPU, so the setting moves these rates little. Slurm")
	w("runs jobs at its daemons' priority.")
	w("")
	if len(others) > 0 {
		w("Loom measured in the same round with other values, one after the other:")
		w("")
		w("| Loom run | accepted/s | completed/s | accepted vs Slurm | completed vs Slurm | CPU |")
		w("|---|---:|---:|---:|---:|---|")
		for _, r := range append([]result{l}, others...) {
			w("| `LOOM_JOB_NICE=%d` | %.0f | %.0f | %.1f× | %.1f× | %s |", r.JobNice, r.AcceptRate(), r.CompleteRate(),
				ratio(r.AcceptRate(), s.AcceptRate()), ratio(r.CompleteRate(), s.CompleteRate()), cpuLine(r.CPU))
		}
		w("")
	}
	w("CPU time used during each measured window (from /proc; processes that exit unwaited-for, such as")
	w("slurmstepd, are not counted):")
	w("")
	w("- Slurm: %s", cpuLine(s.CPU))
	w("- Loom: %s", cpuLine(l.CPU))
	w("")
	w("Measured jobs per node — Slurm: %s; Loom: %s.", perNodeLine(s.PerNode), perNodeLine(l.PerNode))
	w("")
	renderCeiling(w, e, ceilingOf(e.Cores, e.Cost, median(sAcc), m), mi+1)
	if len(l.Redis) > 0 {
		w("Loom's Redis in the window, server side (calls × mean time): %s.", redisLine(l.Redis, 6))
		w("")
	}
	if l.Topics != "" {
		w("Loom's bus records per job in the window, by topic: %s.", l.Topics)
		w("")
	}
	w("Machine: %s; 1-minute load average %s at the start, %s at the end (the machine is shared);", e.Machine, e.Load, e.LoadEnd)
	w("%s; %s; measured %s.", e.GoVersion, e.SlurmVersion, e.Date)
	w("")
	w("Settings:")
	w("")
	w("- N = %d jobs per system, each running `%s` on one node with no GPU, submitted by %d concurrent", s.N, trivialScript, s.Concurrency)
	w("  submitters; %d warm-up jobs first (not counted).", e.Warmup)
	w("- Slurm: %d virtual nodes × %d CPUs × %d fake GPUs (one slurmd each, on localhost), select/cons_tres,", e.Nodes, e.CPUs, e.GPUs)
	w("  `SchedulerParameters=batch_sched_delay=0`, jobcomp/filetxt, no accounting daemon — the best setting")
	w("  of `../shared/design/SLURM.md`. Submitted with `sbatch --parsable --wrap %s` (one process each, as", trivialScript)
	w("  users submit); accepted = sbatch returned a job id; completed = slurmctld wrote the job's jobcomp line")
	w("  (polled every 20 ms).")
	w("- Loom: the embedded deployment (kfake broker, Redis, the five central services in the benchmark's")
	w("  process, as `loom up` runs them), a cluster of %d `%s` nodes with %d GPUs each, one agent process", e.Nodes, e.LoomMachineType, e.GPUs)
	w("  per node. Submitted with `SubmitJob` on the gateway's public gRPC API (one shared connection);")
	w("  accepted = SubmitJob returned the job; completed = the latest `end_time` the scheduler recorded,")
	w("  read with `ListJobs` once no job is active.")
	w("")
	w("Rerun (as root, with real Slurm installed: `apt-get install -y --no-install-recommends munge slurmctld")
	w("slurmd slurm-client slurm-wlm-basic-plugins`):")
	w("")
	w("```")
	w("%s", e.Command)
	w("```")
	w("")
	w("Flags: `-n` jobs, `-concurrency`, `-nodes`, `-cpus`, `-gpus`, `-rounds` (default 3), `-only slurm|loom`, `-job-nice` (Loom's runs:")
	w("`LOOM_JOB_NICE` of each, the first the headline; default `%d,0`); to see where Loom's time", agent.DefaultJobNice)
	w("goes: `-cpuprofile FILE` and `-trace FILE` (the in-process services during Loom's measured window) and")
	w("`-agent-profile DIR` (a CPU profile and an execution trace per agent process).")
	w("A real Slurm to try by hand, with the same configuration: `scripts/slurm-local.sh start|status|stop DIR`.")
	return b.String()
}

// renderCeiling says what the jobs' own CPU leaves the systems: a bound on
// any system's rates when its jobs share the cores with it, and the CPU per
// job Loom's control plane may use to be targetRatio × Slurm's accepted
// rate. Nothing when the job's cost was not measured.
func renderCeiling(w func(string, ...any), e env, c ceiling, roundNo int) {
	if e.Cost.Script <= 0 || c.Need <= 0 {
		return
	}
	msf := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	w("**What the jobs leave.** Run alone, one after another, outside either system, the job (`#!/bin/sh` +")
	w("`%s`: two execs) costs %.2f ms of CPU here, and an exec of `/bin/true` %.2f ms (mean of %d runs", trivialScript, msf(e.Cost.Script), msf(e.Cost.Exec), e.Cost.Runs)
	w("each, measured before the first round; every process's start-up on this VM — the C library probing")
	w("the CPU's features — traps to the hypervisor). With its jobs on the same %d cores, no system", c.Cores)
	w("completes more than %d ÷ %.2f ms ≈ %.0f trivial jobs per second. Loom starts each job as soon as it", c.Cores, msf(e.Cost.Script), c.Bound)
	w("accepts it, so both its rates share the cores with its jobs: %.0f × Slurm's median accepted rate is", targetRatio)
	budget := "nothing"
	if c.Budget > 0 {
		budget = fmt.Sprintf("%.2f ms", c.Budget)
	}
	w("%.0f jobs per second, %.0f %% of that bound, which leaves %d cores ÷ %.0f/s − %.2f ms (its jobs' CPU", c.Need, c.NeedPct, c.Cores, c.Need, c.LoomJobs)
	w("per job in round %d) = %s of CPU per job for Loom's whole control plane — gateway, scheduler, agent,", roundNo, budget)
	w("broker, Redis and the benchmark's client. In round %d it used %.2f ms per job; Slurm's daemons, `sbatch`", roundNo, c.LoomCtl)
	w("and the benchmark %.2f ms.", c.SlurmCtl)
	w("")
}
