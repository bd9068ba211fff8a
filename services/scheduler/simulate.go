package scheduler

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/loom-ml/loom/services/scheduler/internal/sim"
	"github.com/loom-ml/loom/services/scheduler/internal/sim/trace"
)

// SimPolicies are the policies Simulate can run, in report order: fifo
// (strict first come, first served), easy (FCFS with EASY backfill) and loom
// (the scheduler's default: multifactor priority with backfill).
var SimPolicies = sim.Policies

// SimFormats are the trace formats Simulate reads.
var SimFormats = trace.Formats

// SimConfig says which trace to replay and how.
type SimConfig struct {
	// Trace is the trace's path: an Alibaba pod list (or its directory), the
	// Philly JSON sample, or an SWF log (.swf or .swf.gz).
	Trace string
	// Format is alibaba, philly or swf; "" guesses it from Trace's name.
	Format string
	// Policies to run, each on a fresh scheduler state (default all of
	// SimPolicies).
	Policies []string
	// Limit replays only the first Limit jobs in submission order (0: all).
	Limit int
	// ArrivalScale divides submit times to raise the offered load (0 or 1:
	// as recorded).
	ArrivalScale float64
	// TimeLimitFactor is the time limit, as a multiple of the runtime, of
	// jobs whose trace gives none (0: 1.5).
	TimeLimitFactor float64
	// NodeList is the Alibaba node list ("": the all-node list beside the
	// pod list); ProcsPerNode the node size of an SWF log without MaxNodes
	// (0: 8).
	NodeList     string
	ProcsPerNode int
	// Progress, when set, is told when each policy's run starts and ends.
	Progress func(policy string, done bool)
}

// SimTrace describes the replayed trace.
type SimTrace struct {
	Name   string `json:"name"`
	Format string `json:"format"`
	// Resource is GPU, or CPU for SWF logs (processors).
	Resource string `json:"resource"`
	Nodes    int    `json:"nodes"`
	Capacity int64  `json:"capacity"`
	Jobs     int    `json:"jobs"`
	// ArrivalScale is the factor submit times were divided by (1: as recorded).
	ArrivalScale float64 `json:"arrival_scale"`
	// Notes are the assumptions made while loading the trace.
	Notes []string `json:"notes"`
}

// SimMetrics are one policy's outcome (see the field docs: utilisation,
// waits, job completion time, bounded slowdown and per-account fairness).
type SimMetrics = sim.Metrics

// SimResult is one policy's run.
type SimResult struct {
	Policy  string     `json:"policy"`
	Metrics SimMetrics `json:"metrics"`
	// Events is how many events the scheduler handled, each followed by a
	// scheduling pass; Ticks how often the clock ran.
	Events int `json:"events"`
	Ticks  int `json:"ticks"`
	// WallSeconds is how long the run took on this machine.
	WallSeconds float64 `json:"wall_seconds"`
}

// SimReport is the outcome of Simulate: the trace and one result per policy.
type SimReport struct {
	Trace   SimTrace    `json:"trace"`
	Results []SimResult `json:"results"`
}

// Simulate replays a trace through the scheduler's real scheduling code in
// virtual time, once per policy, and measures each run.
func Simulate(ctx context.Context, cfg SimConfig) (*SimReport, error) {
	policies := cfg.Policies
	if len(policies) == 0 {
		policies = SimPolicies
	}
	for _, p := range policies {
		if _, err := sim.DomainConfig(p); errors.Is(err, sim.ErrUnknownPolicy) {
			return nil, fmt.Errorf("policy: %w", err)
		}
	}
	if cfg.Trace == "" {
		return nil, errors.New("trace: a path is required")
	}
	if cfg.ArrivalScale < 0 {
		return nil, fmt.Errorf("arrival scale must be positive, got %v", cfg.ArrivalScale)
	}
	tr, err := trace.Load(cfg.Trace, cfg.Format, trace.Options{Limit: cfg.Limit, TimeLimitFactor: cfg.TimeLimitFactor,
		NodeList: cfg.NodeList, ProcsPerNode: cfg.ProcsPerNode})
	if err != nil {
		return nil, err
	}
	scale := cfg.ArrivalScale
	if scale == 0 {
		scale = 1
	}
	rep := &SimReport{Trace: SimTrace{Name: tr.Name, Format: tr.Format, Resource: string(tr.Resource), Nodes: len(tr.Nodes),
		Capacity: tr.Capacity(), Jobs: len(tr.Jobs), ArrivalScale: scale, Notes: tr.Notes}}
	if scale != 1 {
		rep.Trace.Notes = append(rep.Trace.Notes, fmt.Sprintf("Submit times are divided by %g to raise the offered load.", scale))
	}
	for _, p := range policies {
		if cfg.Progress != nil {
			cfg.Progress(p, false)
		}
		r, err := sim.Run(ctx, tr, sim.Options{Policy: p, ArrivalScale: scale})
		if err != nil {
			return nil, fmt.Errorf("policy %s: %w", p, err)
		}
		rep.Results = append(rep.Results, SimResult{Policy: p, Metrics: r.Metrics, Events: r.Events, Ticks: r.Ticks,
			WallSeconds: r.Wall.Seconds()})
		if cfg.Progress != nil {
			cfg.Progress(p, true)
		}
	}
	return rep, nil
}

// rows are the report's lines: a label and how to show one result.
func (r *SimReport) rows() []struct {
	label string
	cell  func(SimResult) string
} {
	res := r.Trace.Resource
	return []struct {
		label string
		cell  func(SimResult) string
	}{
		{res + " utilisation", func(x SimResult) string { return fmt.Sprintf("%.2f%%", 100*x.Metrics.Utilisation) }},
		{"mean wait", func(x SimResult) string { return HumanSeconds(x.Metrics.MeanWait) }},
		{"p95 wait", func(x SimResult) string { return HumanSeconds(x.Metrics.P95Wait) }},
		{"mean JCT", func(x SimResult) string { return HumanSeconds(x.Metrics.MeanJCT) }},
		{fmt.Sprintf("mean bounded slowdown (τ=%gs)", sim.Tau), func(x SimResult) string { return fmt.Sprintf("%.2f", x.Metrics.MeanBSLD) }},
		{"fairness (Jain, account slowdowns)", func(x SimResult) string {
			return fmt.Sprintf("%.3f (%s)", x.Metrics.Fairness, plural(x.Metrics.Accounts, "account"))
		}},
		{"worst account (mean slowdown)", func(x SimResult) string {
			if x.Metrics.WorstAccount == "" {
				return "-"
			}
			return fmt.Sprintf("%s %.2f", x.Metrics.WorstAccount, x.Metrics.WorstBSLD)
		}},
		{"makespan", func(x SimResult) string { return HumanSeconds(x.Metrics.Makespan) }},
		{"finished / cancelled / never ended", func(x SimResult) string {
			return fmt.Sprintf("%d / %d / %d", x.Metrics.Finished, x.Metrics.Cancelled, x.Metrics.Unfinished)
		}},
		{"timed out / requeued", func(x SimResult) string {
			return fmt.Sprintf("%d / %d", x.Metrics.TimedOut, x.Metrics.Requeues)
		}},
		{"events handled (wall time)", func(x SimResult) string {
			return fmt.Sprintf("%d (%.1fs)", x.Events, x.WallSeconds)
		}},
	}
}

// Title is one line naming the trace and its size.
func (r *SimReport) Title() string {
	t := r.Trace
	unit := "GPUs"
	if t.Resource == string(trace.CPU) {
		unit = "processors"
	}
	s := fmt.Sprintf("%s (%s): %s, %d %s, %s", t.Name, t.Format, plural(t.Nodes, "node"), t.Capacity, unit, plural(t.Jobs, "job"))
	if t.ArrivalScale != 1 {
		s += fmt.Sprintf(", arrivals ×%g", t.ArrivalScale)
	}
	return s
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// WriteTable writes the report as a text table, policies side by side,
// followed by the trace's notes.
func (r *SimReport) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, r.Title())
	head := []string{""}
	for _, x := range r.Results {
		head = append(head, strings.ToUpper(x.Policy))
	}
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	for _, row := range r.rows() {
		cells := []string{row.label}
		for _, x := range r.Results {
			cells = append(cells, row.cell(x))
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(r.Trace.Notes) > 0 {
		fmt.Fprintln(w, "Notes:")
		for _, n := range r.Trace.Notes {
			fmt.Fprintln(w, "  - "+n)
		}
	}
	return nil
}

// Markdown returns the results as a Markdown table, policies side by side
// (the title and notes are the caller's to place: Title, Trace.Notes).
func (r *SimReport) Markdown() string {
	var b strings.Builder
	b.WriteString("| |")
	for _, x := range r.Results {
		b.WriteString(" " + x.Policy + " |")
	}
	b.WriteString("\n|---|")
	for range r.Results {
		b.WriteString("---:|")
	}
	b.WriteString("\n")
	for _, row := range r.rows() {
		b.WriteString("| " + row.label + " |")
		for _, x := range r.Results {
			b.WriteString(" " + row.cell(x) + " |")
		}
		b.WriteString("\n")
	}
	return b.String()
}

// HumanSeconds writes a duration in seconds for people: "0s", "4.2s",
// "12m03s", "3h04m", "2d03h".
func HumanSeconds(s float64) string {
	d := time.Duration(s * float64(time.Second))
	switch {
	case s == 0:
		return "0s"
	case s < 10:
		return fmt.Sprintf("%.1fs", s)
	case d < time.Minute:
		return fmt.Sprintf("%.0fs", s)
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d/time.Minute), int(d%time.Minute/time.Second))
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
	}
	return fmt.Sprintf("%dd%02dh", int(d/(24*time.Hour)), int(d%(24*time.Hour)/time.Hour))
}

// CycleConfig describes the state a scheduling-cycle benchmark builds: Nodes
// nodes of GPUsPerNode GPUs (default 8) and Pending queued jobs of mixed
// sizes, users, accounts and partitions, with Busy (default 0.9) of the GPUs
// held by running jobs; Policy defaults to loom.
type CycleConfig = sim.CycleConfig

// CycleResult is the timing of one scheduling pass (priority, placement,
// backfill) over such a state.
type CycleResult = sim.CycleResult

// BenchCycle builds the state cfg describes and times a full scheduling
// pass over it.
func BenchCycle(ctx context.Context, cfg CycleConfig) (*CycleResult, error) {
	return sim.Cycle(ctx, cfg)
}
