// Package trace loads real cluster workloads for the scheduler's simulator:
// the Alibaba GPU cluster trace (v2023), Microsoft's Philly sample and logs in
// the Parallel Workloads Archive's Standard Workload Format (SWF). Each loader
// turns its file into the same Trace: the cluster's nodes and the jobs
// submitted to it, with the assumptions it had to make written down in Notes.
// Loaders only read and convert; nothing here schedules. A record that is
// not a number, is out of its field's range (a time past a century, a
// negative count, a node of more than MaxSlotsPerNode, a pod larger than
// every node) or would make a cluster of more than MaxNodes is refused with
// its line (Philly: its job) and the reason, as is an SWF or CSV line longer
// than MaxLine.
package trace

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/loom-ml/loom/libs/clusterspec"
	"github.com/loom-ml/loom/libs/slurmspec"
	"github.com/loom-ml/loom/services/scheduler/internal/domain/place"
)

// Formats are the trace formats Load understands.
var Formats = []string{"alibaba", "philly", "swf"}

// Resource names what a node's counted resource is: the simulator schedules
// it as the node's GPUs.
type Resource string

// Resources.
const (
	// GPU: the trace's accelerators.
	GPU Resource = "GPU"
	// CPU: an HPC log's processors, scheduled as the node's counted slots.
	CPU Resource = "CPU"
)

// Trace is a workload: a cluster's nodes and the jobs submitted to it, in
// submission order.
type Trace struct {
	// Name identifies the trace in reports, e.g. "alibaba-gpu-v2023".
	Name string
	// Format is the loader that read it: one of Formats.
	Format string
	// Resource is what Node.Slots and Job.PerNode count.
	Resource Resource
	Nodes    []Node
	// Jobs are in submission order; Job.ID is 1..len(Jobs) in that order.
	Jobs []Job
	// Notes are the assumptions made while loading (one sentence each).
	Notes []string
}

// Node is one machine of a trace's cluster.
type Node struct {
	// Hostname is unique within the trace and a valid hostname.
	Hostname string
	// Pool groups identical nodes (a GPU model, "cpu", "proc").
	Pool string
	// Slots is the node's count of the trace's Resource (GPUs or processors).
	Slots int32
	// Model is the GPU model, when the trace names it.
	Model string
}

// Job is one job of a trace. Times are whole seconds from the trace's start.
type Job struct {
	// ID is the job's position in submission order, from 1 (numeric job ids
	// are the scheduler's FCFS order).
	ID int64
	// Name is the trace's own id of the job.
	Name string
	// Submit is when the job was submitted.
	Submit int64
	// Runtime is how long the job runs once started.
	Runtime int64
	// TimeLimit is the job's --time, the contract backfill relies on.
	TimeLimit int64
	// Nodes is the job's node count (a gang) and PerNode the Resource it
	// needs on each of them (0: none, the job shares nodes).
	Nodes   int32
	PerNode int32
	// CPUsPerTask and MemMB are what the trace asked for beyond the counted
	// resource, passed on for schedulers that count them.
	CPUsPerTask int32
	MemMB       int64
	// User and Account are who submitted the job.
	User    string
	Account string
	// ExitCode is the code the job ends with (non-zero: the trace says it
	// failed).
	ExitCode int32
	// Cancelled says the job's user cancelled it at CancelAt before it ever
	// ran in the trace: it has no runtime, and runs until CancelAt if the
	// simulated scheduler starts it.
	Cancelled bool
	CancelAt  int64
}

// Slots returns the Resource the job holds while it runs.
func (j Job) Slots() int64 { return int64(j.Nodes) * int64(j.PerNode) }

// Capacity returns the total Resource of the trace's cluster.
func (t *Trace) Capacity() int64 {
	var n int64
	for _, nd := range t.Nodes {
		n += int64(nd.Slots)
	}
	return n
}

// Options adjust how a trace is read.
type Options struct {
	// Limit keeps only the first Limit jobs in submission order (0: all).
	Limit int
	// TimeLimitFactor makes a job's time limit Runtime × factor where the
	// trace gives none (default DefaultTimeLimitFactor).
	TimeLimitFactor float64
	// NodeList is the Alibaba node list; "" means the all-node list beside
	// the pod list.
	NodeList string
	// ProcsPerNode is the processors per node of an SWF log whose header
	// has no MaxNodes (default DefaultProcsPerNode).
	ProcsPerNode int
}

// Bounds of what a trace may hold: a Loom cluster's, which is what the
// simulator replays it on. A record beyond them is refused, naming its line
// (or job) and field, rather than truncated to 32 bits, let overflow or
// sized into an allocation without bound.
const (
	// MaxNodes bounds the simulated cluster's nodes (a real cluster's).
	MaxNodes = clusterspec.MaxClusterNodes
	// MaxSlotsPerNode bounds a node's counted resource (a node's GPUs).
	MaxSlotsPerNode = place.MaxGPUsPerNode
	// MaxSeconds bounds every time of a trace: submit times, runtimes and
	// time limits (a century, the longest time limit Loom takes).
	MaxSeconds = slurmspec.MaxTimeLimitSeconds
	// MaxLine bounds one line of an SWF log.
	MaxLine = 1 << 20
)

// number parses a numeric field written as an integer or a float (whose
// integral part it takes); NaN, infinities and values past int64 are
// refused.
func number(s string) (int64, error) {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return n, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("%q is not a number", s)
	}
	if f >= math.MaxInt64 || f < math.MinInt64 {
		return 0, fmt.Errorf("%q is out of range", s)
	}
	return int64(f), nil
}

// inRange says what is wrong with field's value n when it is outside
// [lo, hi], or returns nil.
func inRange(field string, n, lo, hi int64, unit string) error {
	if n < lo || n > hi {
		return fmt.Errorf("%s %d is out of range: want %d..%d%s", field, n, lo, hi, unit)
	}
	return nil
}

// Defaults of Options.
const (
	DefaultTimeLimitFactor = 1.5
	DefaultProcsPerNode    = 8
	// MinTimeLimit is the shortest time limit given, Slurm's granularity.
	MinTimeLimit = 60
)

func (o Options) withDefaults() Options {
	if o.TimeLimitFactor == 0 {
		o.TimeLimitFactor = DefaultTimeLimitFactor
	}
	if o.ProcsPerNode == 0 {
		o.ProcsPerNode = DefaultProcsPerNode
	}
	return o
}

func (o Options) validate() error {
	switch {
	case o.Limit < 0:
		return fmt.Errorf("limit must not be negative, got %d", o.Limit)
	case (o.TimeLimitFactor != 0 && o.TimeLimitFactor < 1) || math.IsNaN(o.TimeLimitFactor) || math.IsInf(o.TimeLimitFactor, 0):
		return fmt.Errorf("time limit factor must be at least 1 (a limit below the runtime kills every job), got %v", o.TimeLimitFactor)
	case o.ProcsPerNode < 0 || o.ProcsPerNode > MaxSlotsPerNode:
		return fmt.Errorf("processors per node must be 1..%d (0: the default), got %d", MaxSlotsPerNode, o.ProcsPerNode)
	}
	return nil
}

// Load reads the trace at path in format ("" guesses it from the path: a
// .swf or .swf.gz file is swf, a .json file philly, a .csv file alibaba).
// A directory stands for the trace in it (traceIn): Alibaba's, when it
// holds its pod list, else its one .json, .swf or .swf.gz file.
func Load(path, format string, opts Options) (*Trace, error) {
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		if path, format, err = traceIn(path, format); err != nil {
			return nil, err
		}
	}
	if format == "" {
		format = Guess(path)
		if format == "" {
			return nil, fmt.Errorf("cannot tell the format of %s from its name: give one of %s", path, strings.Join(Formats, ", "))
		}
	}
	switch format {
	case "alibaba":
		return LoadAlibaba(path, opts)
	case "philly":
		return LoadPhilly(path, opts)
	case "swf":
		return LoadSWF(path, opts)
	}
	return nil, fmt.Errorf("unknown trace format %q: want one of %s", format, strings.Join(Formats, ", "))
}

// traceIn finds the trace a directory holds, in format ("": any): the
// directory itself for Alibaba's (LoadAlibaba reads its pod and node
// lists), else its one file whose name says philly or swf. None, or more
// than one, is an error that says what to give instead.
func traceIn(dir, format string) (string, string, error) {
	if format == "" || format == "alibaba" {
		if _, err := os.Stat(filepath.Join(dir, AlibabaPodList)); err == nil || format == "alibaba" {
			return dir, "alibaba", nil
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", "", fmt.Errorf("trace directory: %w", err)
	}
	var found []string
	for _, e := range entries {
		g := Guess(e.Name())
		if e.IsDir() || g == "" || g == "alibaba" || (format != "" && g != format) {
			continue
		}
		found = append(found, e.Name())
	}
	switch len(found) {
	case 0:
		return "", "", fmt.Errorf("%s holds no trace: want Alibaba's %s, or a Philly .json or an SWF .swf/.swf.gz file", dir, AlibabaPodList)
	case 1:
		return filepath.Join(dir, found[0]), Guess(found[0]), nil
	}
	return "", "", fmt.Errorf("%s holds %d traces (%s): name one with --trace %s", dir, len(found), strings.Join(found, ", "), filepath.Join(dir, found[0]))
}

// Guess returns the format a path's name suggests, or "".
func Guess(path string) string {
	base := strings.ToLower(filepath.Base(path))
	switch {
	case strings.HasSuffix(base, ".swf"), strings.HasSuffix(base, ".swf.gz"):
		return "swf"
	case strings.HasSuffix(base, ".json"):
		return "philly"
	case strings.HasSuffix(base, ".csv"), !strings.Contains(base, "."):
		return "alibaba"
	}
	return ""
}

// timeLimit is runtime × factor, rounded up to a whole minute, at least
// MinTimeLimit.
// It is at most MaxSeconds: runtime is at most that, and a limit longer
// than a century is no limit.
func timeLimit(runtime int64, factor float64) int64 {
	l := int64(math.Min(math.Ceil(float64(runtime)*factor), MaxSeconds))
	l = (l + 59) / 60 * 60
	return max(l, MinTimeLimit)
}

// split returns the gang for n slots on nodes of at most per slots: the
// fewest nodes that divide n evenly, else ceil(n/per) nodes with the slots
// rounded up.
func split(n, per int64) (nodes, perNode int32) {
	if n <= 0 {
		return 1, 0
	}
	least := (n + per - 1) / per
	for k := least; k <= n && k <= least*4; k++ {
		if n%k == 0 && n/k <= per {
			return int32(k), int32(n / k)
		}
	}
	return int32(least), int32((n + least - 1) / least)
}

// finish orders jobs by submission (stable: the trace's order breaks ties),
// applies the limit and numbers them. Submissions spread over more than
// MaxSeconds are refused.
func finish(t *Trace, opts Options) (*Trace, error) {
	sort.SliceStable(t.Jobs, func(a, b int) bool { return t.Jobs[a].Submit < t.Jobs[b].Submit })
	if opts.Limit > 0 && opts.Limit < len(t.Jobs) {
		t.Jobs = t.Jobs[:opts.Limit]
		t.Notes = append(t.Notes, fmt.Sprintf("Only the first %d jobs in submission order are used (--limit).", opts.Limit))
	}
	if len(t.Jobs) > 0 {
		// Times count from the first submission.
		first, last := t.Jobs[0].Submit, t.Jobs[len(t.Jobs)-1].Submit
		if span := uint64(last) - uint64(first); span > MaxSeconds {
			return nil, fmt.Errorf("the jobs are submitted over %d seconds (job %s at %d to job %s at %d): more than a century, the longest a trace may last",
				span, t.Jobs[0].Name, first, t.Jobs[len(t.Jobs)-1].Name, last)
		}
		for i := range t.Jobs {
			t.Jobs[i].Submit -= first
			if t.Jobs[i].Cancelled {
				t.Jobs[i].CancelAt = max(t.Jobs[i].CancelAt-first, t.Jobs[i].Submit)
			}
		}
	}
	for i := range t.Jobs {
		t.Jobs[i].ID = int64(i + 1)
	}
	return t, nil
}

// DataDirEnv names the variable that points at the traces directory.
const DataDirEnv = "LOOM_TRACE_DIR"

// DataDir returns the directory of the project's real traces: $LOOM_TRACE_DIR,
// else the first shared/data/traces found walking up from the working
// directory (the checkout sits beside shared/).
func DataDir() (string, error) {
	if d := os.Getenv(DataDirEnv); d != "" {
		return d, nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		c := filepath.Join(d, "shared", "data", "traces")
		if fi, err := os.Stat(c); err == nil && fi.IsDir() {
			return c, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no shared/data/traces above %s: set %s", wd, DataDirEnv)
		}
	}
}
