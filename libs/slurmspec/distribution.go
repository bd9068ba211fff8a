package slurmspec

import (
	"errors"
	"strconv"
	"strings"
)

// Distribution is a step's task distribution, srun's -m/--distribution, as
// Slurm 22.05 reads it (measured beside it). Only the first level changes
// which node runs which task; the others bind tasks within a node, which
// Loom does not do, and are kept for SLURM_DISTRIBUTION and scontrol show
// step's Dist=, where Slurm shows them.
type Distribution struct {
	// Nodes is the first level: "block", "cyclic", "plane" or "arbitrary";
	// "" when -m was not given (DefaultDistribution then names Slurm's
	// choice).
	Nodes string
	// PlaneSize is plane=N's N (0 for the others).
	PlaneSize int32
	// Sockets and Cores are the second and third levels, "" when not
	// given: "block", "cyclic" or "fcyclic" (Slurm's "*" is "cyclic").
	Sockets, Cores string
	// Pack is the ",Pack" or ",NoPack" suffix, lower-cased, "" without.
	Pack string
}

// ErrDistribution is the refusal of a -m that Slurm's srun refuses
// ("Invalid --distribution specification"); ErrPlaneSize that of plane
// without a size, or a size that is not a positive count.
var (
	ErrDistribution = errors.New("Invalid --distribution specification")
	ErrPlaneSize    = errors.New("Invalid plane size or size not specified")
)

// maxDistributionLen bounds -m's text: Slurm's longest is far shorter, and
// the text travels in the step's request and record.
const maxDistributionLen = 64

// ParseDistribution reads srun's -m as Slurm 22.05's srun does: block,
// cyclic or arbitrary, then at most two more levels of block, cyclic,
// fcyclic or * (arbitrary takes none), then ",Pack" or ",NoPack"; or
// plane=N alone (N at least 1, nothing after it); any case. "*" as the
// first level is taken only before another level ("*:*" is block:cyclic,
// "*" alone refused), as Slurm's. "" is no distribution (the zero value).
func ParseDistribution(v string) (Distribution, error) {
	var d Distribution
	if v == "" {
		return d, nil
	}
	if len(v) > maxDistributionLen {
		return d, ErrDistribution
	}
	spec := strings.ToLower(v)
	if size, ok := strings.CutPrefix(spec, "plane"); ok {
		digits, ok := strings.CutPrefix(size, "=")
		n, err := strconv.ParseInt(digits, 10, 32)
		if !ok || err != nil || n < 1 || !isDigits(digits) {
			return d, ErrPlaneSize
		}
		return Distribution{Nodes: "plane", PlaneSize: int32(n)}, nil
	}
	if base, suffix, ok := strings.Cut(spec, ","); ok {
		if suffix != "pack" && suffix != "nopack" {
			return d, ErrDistribution
		}
		spec, d.Pack = base, suffix
	}
	levels := strings.Split(spec, ":")
	if len(levels) > 3 {
		return d, ErrDistribution
	}
	switch first := levels[0]; {
	case first == "block" || first == "cyclic":
		d.Nodes = first
	case first == "arbitrary" && len(levels) == 1:
		d.Nodes = first
	case first == "*" && len(levels) > 1:
		d.Nodes = "block"
	default:
		return Distribution{}, ErrDistribution
	}
	for i, l := range levels[1:] {
		switch l {
		case "block", "cyclic", "fcyclic":
		case "*":
			l = "cyclic"
		default:
			return Distribution{}, ErrDistribution
		}
		if i == 0 {
			d.Sockets = l
		} else {
			d.Cores = l
		}
	}
	return d, nil
}

// DefaultDistribution is the distribution Slurm 22.05's srun picks without
// -m: cyclic for a step with no more tasks than nodes, block otherwise
// (what its SLURM_DISTRIBUTION and scontrol show step's Dist= say; the
// layout is block's either way).
func DefaultDistribution(ntasks, nodes int) Distribution {
	if ntasks <= nodes {
		return Distribution{Nodes: "cyclic"}
	}
	return Distribution{Nodes: "block"}
}

// Or is d, or def when d is no distribution (-m not given).
func (d Distribution) Or(def Distribution) Distribution {
	if d.Nodes == "" {
		return def
	}
	return d
}

// String is d as srun's SLURM_DISTRIBUTION writes it, lower-case with "*"
// resolved: "cyclic", "block:cyclic:cyclic", "cyclic,nopack", "plane"
// (its size is SLURM_DIST_PLANESIZE); "" for no distribution.
// ParseDistribution reads it back but for plane, which has lost its size:
// a step's distribution travels and is kept as Spec.
func (d Distribution) String() string {
	if d.Nodes == "plane" {
		return "plane"
	}
	return d.spec()
}

// Spec is d as ParseDistribution reads it back: String, with plane's size.
func (d Distribution) Spec() string {
	if d.Nodes == "plane" {
		return "plane=" + strconv.Itoa(int(d.PlaneSize))
	}
	return d.spec()
}

func (d Distribution) spec() string {
	s := d.Nodes
	for _, l := range []string{d.Sockets, d.Cores} {
		if l != "" {
			s += ":" + l
		}
	}
	if d.Pack != "" {
		s += "," + d.Pack
	}
	return s
}

// Name is d as Slurm 22.05's scontrol show step prints it (Dist=):
// "Block", "Cyclic", "Plane", "arbitrary"; with more levels the first's
// initial then each level ("CBlock", "BFCyclic", "BCyclicCyclic"); then
// ",Pack" or ",NoPack".
func (d Distribution) Name() string {
	var s string
	switch {
	case d.Nodes == "plane":
		return "Plane"
	case d.Nodes == "arbitrary":
		return "arbitrary"
	case d.Sockets == "":
		s = levelName(d.Nodes)
	default:
		s = levelName(d.Nodes)[:1] + levelName(d.Sockets) + levelName(d.Cores)
	}
	switch d.Pack {
	case "pack":
		s += ",Pack"
	case "nopack":
		s += ",NoPack"
	}
	return s
}

func levelName(l string) string {
	switch l {
	case "block":
		return "Block"
	case "cyclic":
		return "Cyclic"
	case "fcyclic":
		return "FCyclic"
	}
	return ""
}

// StepTaskCounts is the tasks each of a step's nodes runs under d, given
// the counts the step's tasks take in blocks (the scheduler's step layout:
// the remainder on the first nodes, or --ntasks-per-node). block, cyclic
// and arbitrary keep them (Slurm's cyclic deals round the nodes up to
// block's counts: -N3 -n7 is 3, 2, 2 either way); plane=N sets its own:
// the tasks dealt N at a time (-N2 -n6 plane=2: 4, 2, over any
// --ntasks-per-node, as Slurm's), and a node the deal would leave without
// a task takes one from the node before it (Slurm's: -N4 -n9 plane=3 is
// 3, 3, 2, 1). They never rise from one node to the next. The result is
// a new slice; counts must be non-negative.
func StepTaskCounts(d Distribution, counts []int32) []int32 {
	if d.Nodes != "plane" {
		return append([]int32(nil), counts...)
	}
	var total int32
	for _, c := range counts {
		total += c
	}
	return planeCounts(total, len(counts), max(d.PlaneSize, 1))
}

// TaskRanks lays a step's tasks over its nodes as Slurm 22.05 does and
// returns, node by node, the global ranks (SLURM_PROCID) of the node's
// tasks in local order (SLURM_LOCALID): the one rule every layer that
// numbers a step's tasks follows. counts are the tasks of each node
// (StepTaskCounts'). block numbers them node after node; cyclic deals them
// round the nodes one at a time, plane=N N at a time, a node that has its
// count skipped (-N3 -n7 cyclic: 0,3,6 / 1,4 / 2,5; -N2 -n6 plane=2:
// 0,1,4,5 / 2,3; -N4 -n9 plane=3: 0,1,2 / 3,4,5 / 6,7 / 8). arbitrary,
// whose layout follows srun's -w, is block's here (srun refuses what
// differs). counts must be non-negative.
func TaskRanks(d Distribution, counts []int32) [][]int32 {
	var total int32
	for _, c := range counts {
		total += c
	}
	out := make([][]int32, len(counts))
	for k, c := range counts {
		out[k] = make([]int32, 0, c)
	}
	size := total // block: a node takes all of its count at once
	switch d.Nodes {
	case "plane":
		size = max(d.PlaneSize, 1)
	case "cyclic":
		size = 1
	}
	for rank := int32(0); rank < total; {
		for k := range out {
			for n := int32(0); n < size && int32(len(out[k])) < counts[k]; n++ {
				out[k] = append(out[k], rank)
				rank++
			}
		}
	}
	return out
}

// planeCounts is plane=size's tasks per node for total tasks over n nodes:
// dealt size at a time, then each node left without one taking one from
// the node before it, from the last node back (measured beside Slurm
// 22.05: -N3 -n6 plane=5 is 4, 1, 1).
func planeCounts(total int32, n int, size int32) []int32 {
	counts := make([]int32, n)
	if n == 0 {
		return counts
	}
	for left := total; left > 0; {
		for k := range counts {
			take := min(size, left)
			counts[k] += take
			left -= take
		}
	}
	if total >= int32(n) {
		for k := n - 1; k > 0; k-- {
			for counts[k] < 1 {
				counts[k]++
				counts[k-1]--
			}
		}
	}
	return counts
}
