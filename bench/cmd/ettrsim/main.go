// Command ettrsim simulates a large training run through its failures and
// reports its effective training time ratio (ETTR: productive training
// time over wall time) under several ways of handling them.
//
// The run is the Llama 3 405B pre-training's: 16,384 GPUs (2,048 nodes of
// 8) for 54 days, with unexpected interruptions drawn from the paper's
// table of 419 (Poisson arrivals, root causes by their counts) and 47
// planned ones. Each interruption goes through the policy's handling,
// event by event: detection, an escalation to a person now and then, the
// bad node taken out for repair (reboot, reimage or replace) and a spare
// swapped in (or a wait for a repaired node when none is free), a restart,
// and training rolled back to the latest safe checkpoint. Checkpoints stall
// training; asynchronous ones become safe some time after. Faults that
// warn (a rising ECC rate, throttling) can be drained: checkpoint first,
// then move.
//
// It first runs the Llama 3 paper's conditions (the paper reports more
// than 90% effective training time), then no automation, Loom's policy,
// and variations of Loom's policy. Every run is deterministic for its
// seed; -runs seeds give the mean and spread. All policies see the same
// failures for a seed. With -report it writes its section of a Markdown
// report (between the ettrsim markers).
package main

import (
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"sync"
	"time"

	"github.com/loom-ml/loom/bench/internal/report"
)

func main() {
	f, err := parseFlags(os.Args[1:], os.Stderr)
	if err != nil {
		if err != flag.ErrHelp {
			fmt.Fprintln(os.Stderr, "ettrsim:", err)
		}
		os.Exit(2)
	}
	sc, loom := f.sc, f.loom
	mix, err := parseMix(interruptionsCSV)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ettrsim:", err)
		os.Exit(1)
	}
	sc.Mix = mix
	scale := sc.Days / 54 * float64(sc.Nodes) / 2048
	sc.Unexpected = float64(total(mix)) * scale
	if f.unexpected >= 0 {
		sc.Unexpected = f.unexpected
	}
	sc.Planned *= scale

	began := time.Now()
	rows := runAll(sc, allPolicies(loom), f.seed, f.runs)
	elapsed := time.Since(began)
	text := render(sc, loom, rows, f.seed, f.runs, elapsed, os.Args[1:])
	fmt.Print(text)
	if f.report != "" {
		if err := writeSection(f.report, text); err != nil {
			fmt.Fprintln(os.Stderr, "ettrsim:", err)
			os.Exit(1)
		}
	}
}

// flags are the command line's settings.
type flags struct {
	sc         Scenario
	loom       Policy
	runs       int
	seed       uint64
	report     string
	unexpected float64 // -1: the table's, scaled
}

// Bounds of the flags: a run no real cluster exceeds, and no setting that
// turns the simulation into garbage (NaN) or an event loop without end (a
// run of infinite days, a checkpoint every nanosecond).
const (
	maxRuns          = 10000
	maxNodes         = 1 << 20
	maxGPUsPerNode   = 64
	maxDays          = 3650
	maxInterruptions = 1e6
	// minCkptInterval is the shortest checkpoint interval: a checkpoint
	// every second is already 4.7 million events in 54 days.
	minCkptInterval = 1.0
)

// parseFlags reads the command line and refuses a value out of its range,
// naming the flag and the range.
func parseFlags(args []string, stderr io.Writer) (flags, error) {
	f := flags{
		sc:   Scenario{Nodes: 2048, GPUsPerNode: 8, Days: 54, Planned: 47, RepairShare: -1},
		loom: defaultLoom(),
	}
	sc, loom := &f.sc, &f.loom
	fs := flag.NewFlagSet("ettrsim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&f.runs, "runs", 20, "seeds to run each policy with (mean and spread over them)")
	fs.Uint64Var(&f.seed, "seed", 1, "first seed (run i uses seed+i)")
	fs.StringVar(&f.report, "report", "", "Markdown file to write the results into (the section between the ettrsim markers is replaced)")
	fs.IntVar(&sc.Nodes, "nodes", sc.Nodes, "nodes in the job")
	fs.IntVar(&sc.GPUsPerNode, "gpus-per-node", sc.GPUsPerNode, "GPUs per node")
	fs.Float64Var(&sc.Days, "days", sc.Days, "length of the run in days")
	fs.Float64Var(&f.unexpected, "unexpected", -1, "unexpected interruptions in -days (default: the table's 419, scaled by -days/54 and -nodes/2048)")
	fs.Float64Var(&sc.Planned, "planned", sc.Planned, "planned interruptions (maintenance) in 54 days on 2,048 nodes, scaled likewise")
	fs.Float64Var(&sc.RepairShare, "repair-share", sc.RepairShare, "share of unexpected failures that need the node repaired rather than a restart (default: per root cause, see the report)")
	dur := func(p *float64, name, usage string) {
		fs.Func(name, fmt.Sprintf("%s (Loom's policy; default %v)", usage, secs(*p)), func(s string) error {
			d, err := time.ParseDuration(s)
			if err != nil || d < 0 {
				return fmt.Errorf("want a duration such as 90s or 5m")
			}
			*p = d.Seconds()
			return nil
		})
	}
	dur(&loom.CkptInterval, "checkpoint-interval", "time between checkpoints (0: none; else at least 1s)")
	dur(&loom.CkptStall, "checkpoint-cost", "training stall to take a checkpoint (the write cost training sees)")
	dur(&loom.CkptDurable, "checkpoint-durable", "time after the stall until an asynchronous checkpoint is safe (0: synchronous)")
	dur(&loom.Restart, "restart", "restart cost: the job's start-up until training")
	dur(&loom.Detect, "detect", "detection time of a failure")
	dur(&loom.HangDetect, "hang-detect", "detection time of a hang (no progress)")
	dur(&loom.Requeue, "requeue", "time to requeue onto a spare node")
	fs.IntVar(&loom.Spares, "spares", loom.Spares, "spare nodes (Loom's policy and no automation)")
	dur(&loom.RepairTime[reboot], "reboot", "repair time of a reboot (every policy)")
	dur(&loom.RepairTime[reimage], "reimage", "repair time of a reimage (every policy)")
	dur(&loom.RepairTime[replace], "replace", "repair time of a replacement (every policy)")
	if err := fs.Parse(args); err != nil {
		return f, err
	}
	if fs.NArg() > 0 {
		return f, fmt.Errorf("no arguments expected, got %q", fs.Args())
	}
	// !(x >= lo && x <= hi) is also true for NaN.
	within := func(x, lo, hi float64) bool { return x >= lo && x <= hi }
	switch {
	case f.runs < 1 || f.runs > maxRuns:
		return f, fmt.Errorf("-runs must be 1..%d, got %d", maxRuns, f.runs)
	case sc.Nodes < 1 || sc.Nodes > maxNodes:
		return f, fmt.Errorf("-nodes must be 1..%d, got %d", maxNodes, sc.Nodes)
	case sc.GPUsPerNode < 1 || sc.GPUsPerNode > maxGPUsPerNode:
		return f, fmt.Errorf("-gpus-per-node must be 1..%d, got %d", maxGPUsPerNode, sc.GPUsPerNode)
	case !within(sc.Days, 0, maxDays) || sc.Days == 0:
		return f, fmt.Errorf("-days must be more than 0 and at most %d, got %v", maxDays, sc.Days)
	case f.unexpected != -1 && !within(f.unexpected, 0, maxInterruptions):
		return f, fmt.Errorf("-unexpected must be 0..%g (or -1: the table's, scaled), got %v", float64(maxInterruptions), f.unexpected)
	case !within(sc.Planned, 0, maxInterruptions):
		return f, fmt.Errorf("-planned must be 0..%g, got %v", float64(maxInterruptions), sc.Planned)
	case sc.RepairShare != -1 && !within(sc.RepairShare, 0, 1):
		return f, fmt.Errorf("-repair-share must be 0..1 (or -1: per root cause), got %v", sc.RepairShare)
	case loom.Spares < 0 || loom.Spares > maxNodes:
		return f, fmt.Errorf("-spares must be 0..%d, got %d", maxNodes, loom.Spares)
	case loom.CkptInterval != 0 && loom.CkptInterval < minCkptInterval:
		return f, fmt.Errorf("-checkpoint-interval must be 0 (none) or at least 1s, got %s", secs(loom.CkptInterval))
	}
	if n := sc.Days / 54 * float64(sc.Nodes) / 2048 * (419 + sc.Planned); f.unexpected == -1 && n > maxInterruptions {
		return f, fmt.Errorf("-days %v on -nodes %d make %.0f interruptions a run: at most %g", sc.Days, sc.Nodes, n, float64(maxInterruptions))
	}
	return f, nil
}

// llama3Slower names the Llama 3 conditions with slower assumed timings.
const llama3Slower = "Llama 3 conditions, slower: detect 3 min, checkpoint every 15 min, 10 s stall"

// allPolicies is the report's list: the paper's conditions, no automation
// and Loom first (render relies on it).
func allPolicies(loom Policy) []Policy {
	ps := append([]Policy{llama3Paper(loom), noAutomation(loom), loom}, variations(loom)...)
	slower := llama3Paper(loom)
	slower.Name, slower.About = llama3Slower, "sensitivity of the reproduction"
	slower.Detect, slower.CkptInterval, slower.CkptStall = 3*minute, 15*minute, 10
	return append(ps, slower)
}

func total(mix []Component) int {
	n := 0
	for _, c := range mix {
		n += c.Count
	}
	return n
}

// row is one policy's results over all seeds.
type row struct {
	p       Policy
	results []Result
}

// stats of a sample: mean, standard deviation, min, max.
type stats struct{ mean, sd, min, max float64 }

func summarize(xs []float64) stats {
	s := stats{min: math.Inf(1), max: math.Inf(-1)}
	for _, x := range xs {
		s.mean += x
		s.min, s.max = math.Min(s.min, x), math.Max(s.max, x)
	}
	s.mean /= float64(len(xs))
	for _, x := range xs {
		s.sd += (x - s.mean) * (x - s.mean)
	}
	if len(xs) > 1 {
		s.sd = math.Sqrt(s.sd / float64(len(xs)-1))
	} else {
		s.sd = 0
	}
	return s
}

func (r row) stat(f func(Result) float64) stats {
	xs := make([]float64, len(r.results))
	for i, res := range r.results {
		xs[i] = f(res)
	}
	return summarize(xs)
}

// runAll simulates every policy on runs seeds, in parallel over seeds; the
// result depends only on the seeds, not on the scheduling.
func runAll(sc Scenario, ps []Policy, seed uint64, runs int) []row {
	rows := make([]row, len(ps))
	for i, p := range ps {
		rows[i] = row{p: p, results: make([]Result, runs)}
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	for r := range runs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			fs := trace(sc, seed+uint64(r))
			for i, p := range ps {
				rows[i].results[r] = simulate(sc, p, fs)
			}
		}()
	}
	wg.Wait()
	return rows
}

// secs renders seconds as a short duration.
func secs(s float64) string {
	d := time.Duration(s * float64(time.Second)).Round(time.Second / 10)
	switch {
	case d == 0:
		return "0"
	case d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	case d%time.Minute == 0:
		return fmt.Sprintf("%dm", d/time.Minute)
	}
	return d.String()
}

// writeSection replaces the ettrsim section of the report, or appends it.
func writeSection(path, section string) error {
	return report.WriteSection(path, "ettrsim", section)
}
