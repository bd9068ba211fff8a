package domain

import (
	"strconv"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// Policy is how the scheduler orders its queue and decides where a job fits.
// Later features (priorities, partitions, backfill, arrays) grow in here: a
// new ordering in Less, a new feasibility check in Checks.
type Policy struct {
	// Less orders pending jobs: the queue is served in this order and the
	// first job that does not fit blocks the ones after it.
	Less func(a, b *Job) bool
	// Checks are the feasibility tests a node must pass to take one of a
	// job's tasks, in order; the first that fails names why it was filtered.
	Checks []Check
}

// DefaultPolicy is first come, first served over READY (not draining),
// healthy compute nodes with enough free GPUs.
func DefaultPolicy() Policy {
	return Policy{Less: FCFS, Checks: []Check{CheckCompute, CheckNotDraining, CheckReady, CheckHealthy, CheckGPUs}}
}

// FCFS orders jobs by submission: numeric job id (the gateway assigns ids in
// submission order), then name for ids that are not numbers.
func FCFS(a, b *Job) bool {
	ia, ea := strconv.ParseInt(a.Job.GetJobId(), 10, 64)
	ib, eb := strconv.ParseInt(b.Job.GetJobId(), 10, 64)
	switch {
	case ea == nil && eb == nil && ia != ib:
		return ia < ib
	case ea == nil && eb != nil:
		return true
	case ea != nil && eb == nil:
		return false
	}
	if ta, tb := a.Job.GetSubmitTime().AsTime(), b.Job.GetSubmitTime().AsTime(); !ta.Equal(tb) {
		return ta.Before(tb)
	}
	return a.Name() < b.Name()
}

// NodeView is a node as a placement sees it: the node and its free GPUs.
type NodeView struct {
	Node *Node
	// Free lists the GPU indices no run holds, ascending.
	Free []int32
}

// Check is one feasibility test of a node for a job.
type Check struct {
	// Reason names the check in a Decision's counts of filtered nodes.
	Reason string
	// Fits reports whether the node can take one of the job's tasks.
	Fits func(job *loomv1.Job, n NodeView) bool
}

// The default checks.
var (
	// CheckCompute keeps work off login nodes, which have no agent.
	CheckCompute = Check{Reason: "LoginNode", Fits: func(_ *loomv1.Job, n NodeView) bool {
		return n.Node.Role != RoleLogin
	}}
	// CheckNotDraining keeps new work off a node being drained for removal;
	// it comes before CheckReady so that draining nodes are counted apart.
	CheckNotDraining = Check{Reason: "NodeDraining", Fits: func(_ *loomv1.Job, n NodeView) bool {
		return !n.Node.Draining()
	}}
	CheckReady = Check{Reason: "NodeNotReady", Fits: func(_ *loomv1.Job, n NodeView) bool {
		return n.Node.State == loomv1.Node_READY
	}}
	CheckHealthy = Check{Reason: "NodeUnhealthy", Fits: func(_ *loomv1.Job, n NodeView) bool {
		return !n.Node.Unhealthy
	}}
	// CheckGPUs lets jobs without GPUs share any node.
	CheckGPUs = Check{Reason: "InsufficientGPUs", Fits: func(j *loomv1.Job, n NodeView) bool {
		return int(j.GetGpusPerNode()) <= len(n.Free)
	}}
)

// Placement is the outcome of placing a job: the nodes it got (none when it
// does not fit) and how many nodes each check filtered out.
type Placement struct {
	Nodes    []NodeView
	Filtered map[string]int
}

// Place runs every node through checks, in order, and gives the job the first
// node_count nodes that pass all of them, or nothing: a gang gets all of its
// nodes or none.
func Place(job *loomv1.Job, nodes []NodeView, checks []Check) (Placement, bool) {
	p := Placement{Filtered: map[string]int{}}
	want := int(max(job.GetNodeCount(), 1))
	var fit []NodeView
nodes:
	for _, n := range nodes {
		for _, c := range checks {
			if !c.Fits(job, n) {
				p.Filtered[c.Reason]++
				continue nodes
			}
		}
		fit = append(fit, n)
	}
	if len(fit) < want {
		return p, false
	}
	p.Nodes = fit[:want]
	return p, true
}
