package domain

import (
	"strconv"
	"strings"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// Order is how a policy orders the pending jobs of a cluster.
type Order int

const (
	// OrderPriority: partition PriorityTier (higher first), then the
	// multifactor priority (higher first), then job id.
	OrderPriority Order = iota
	// OrderFCFS: job id, that is submission order.
	OrderFCFS
)

// Policy is how the scheduler orders its queue, decides where a job fits and
// what it may do for a job that does not.
type Policy struct {
	// Name names the policy in logs and reports ("fifo", "easy", "loom").
	Name string
	// Order orders the queue (ignored when Less is set).
	Order Order
	// Less, when set, orders the queue instead of Order (slower: it cannot
	// precompute keys).
	Less func(a, b *Job) bool
	// Backfill: after the first job that cannot start (which gets a
	// reservation at the earliest time enough resources free up), lower
	// jobs still start when they fit and do not delay it (EASY). Without
	// it, the first job that cannot start blocks every job after it.
	Backfill bool
	// Preempt: a pending job whose QOS may preempt others, or whose
	// partition has a higher PriorityTier, may requeue running jobs to start.
	Preempt bool
	// Checks are the feasibility tests a node must pass to take part of a
	// job, in order; the first that fails names why the node was filtered.
	Checks []Check
	// Rankers order the nodes that passed every check, in order: each
	// breaks the ties of the ones before it (lower scores first).
	Rankers []Ranker
}

// FIFOPolicy is first come, first served: submission order, and the first
// job that cannot start blocks the rest.
func FIFOPolicy() Policy {
	return Policy{Name: "fifo", Order: OrderFCFS, Checks: DefaultChecks(), Rankers: DefaultRankers()}
}

// EASYPolicy is submission order with EASY backfill.
func EASYPolicy() Policy {
	return Policy{Name: "easy", Order: OrderFCFS, Backfill: true, Checks: DefaultChecks(), Rankers: DefaultRankers()}
}

// DefaultPolicy is Loom's: multifactor priority with partition tiers, EASY
// backfill and preemption by QOS and partition tier.
func DefaultPolicy() Policy {
	return Policy{Name: "loom", Order: OrderPriority, Backfill: true, Preempt: true, Checks: DefaultChecks(), Rankers: DefaultRankers()}
}

// PolicyByName returns the policy named name: "fifo", "easy" or "loom".
func PolicyByName(name string) (Policy, bool) {
	switch name {
	case "fifo":
		return FIFOPolicy(), true
	case "easy", "backfill":
		return EASYPolicy(), true
	case "loom", "default", "":
		return DefaultPolicy(), true
	}
	return Policy{}, false
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

// CheckKind says what a check's failure means for the job.
type CheckKind int

const (
	// Static checks fail for a node the job could never use (another
	// partition, too small, excluded): too few passing means the job is
	// impossible as it stands (PartitionNodeLimit, BadConstraints).
	Static CheckKind = iota
	// Availability checks fail for a node that cannot take work now (down,
	// draining, drained): too few passing means ReqNodeNotAvail.
	Availability
	// Capacity checks fail for a node whose resources are taken: too few
	// passing means the job waits for Resources (or Priority).
	Capacity
)

// Check is one feasibility test of a node for a job.
type Check struct {
	// Reason names the check in a Decision's counts of filtered nodes.
	Reason string
	Kind   CheckKind
	// Fits reports whether the node can take part of the job.
	Fits func(r *Request, n *NodeView) bool
}

// Request is what a job asks of each of its nodes, resolved for a pass.
type Request struct {
	// Nodes is the node count; Partition the index of its partition in the
	// cluster's partitions.
	Nodes     int
	Partition int
	// GPUsPerNode is the most GPUs any one node must have free; GPUType the
	// GRES type they must be ("" any).
	GPUsPerNode int32
	GPUType     string
	// CPUsPerNode and MemMB are the CPUs and memory each node must have free.
	CPUsPerNode int32
	MemMB       int64
	// Exclusive: the nodes must be idle, and are held whole.
	Exclusive bool
	// Nodelist: hostnames the job must run on (all of them); Exclude:
	// hostnames it must not.
	Nodelist map[string]bool
	Exclude  map[string]bool
	// AvoidReserved keeps the job off the nodes reserved for a higher job
	// (backfill of a job that would not end before the reservation).
	AvoidReserved bool
}

// NodeView is a node as a placement sees it during a pass: the node, its
// partitions and what is free on it.
type NodeView struct {
	Node *Node
	// parts has bit i set when the node is in partition i.
	parts    uint64
	freeMask uint64
	// FreeGPUs, FreeCPUs (meaningful when Node.CPUs > 0) and FreeMemMB
	// (when Node.MemoryMB > 0) are what no run holds.
	FreeGPUs  int32
	FreeCPUs  int32
	FreeMemMB int64
	// Runs counts the allocations on the node; Exclusive is set when one
	// of them holds it whole.
	Runs      int32
	Exclusive bool
	// Reserved: the node is kept for the pass's backfill reservation.
	Reserved bool
	// held are the runs holding part of the node.
	held []*Run
}

// InPartition reports whether the node is in partition index i.
func (n *NodeView) InPartition(i int) bool { return i >= 0 && i < 64 && n.parts&(1<<uint(i)) != 0 }

// DefaultChecks are the feasibility checks, in order: static ones first (a
// node the job could never use), then availability, then capacity.
func DefaultChecks() []Check {
	return []Check{
		CheckCompute, CheckPartition, CheckNodelist, CheckExclude, CheckGresType, CheckNodeSize,
		CheckNotDraining, CheckReady, CheckHealthy, CheckNotDrained,
		CheckIdle, CheckGPUs, CheckCPUs, CheckMemory, CheckNotReserved,
	}
}

// The default checks.
var (
	// CheckCompute keeps work off login nodes, which have no agent.
	CheckCompute = Check{Reason: "LoginNode", Kind: Static, Fits: func(_ *Request, n *NodeView) bool {
		return n.Node.Role != RoleLogin
	}}
	// CheckPartition keeps a job in its partition's nodes.
	CheckPartition = Check{Reason: "NotInPartition", Kind: Static, Fits: func(r *Request, n *NodeView) bool {
		return n.InPartition(r.Partition)
	}}
	// CheckNodelist keeps a job with --nodelist on those nodes.
	CheckNodelist = Check{Reason: "NotInNodelist", Kind: Static, Fits: func(r *Request, n *NodeView) bool {
		return len(r.Nodelist) == 0 || r.Nodelist[n.Node.Hostname]
	}}
	// CheckExclude keeps a job off its --exclude nodes and off the nodes
	// whose failure ended one of its runs.
	CheckExclude = Check{Reason: "Excluded", Kind: Static, Fits: func(r *Request, n *NodeView) bool {
		return !r.Exclude[n.Node.Hostname]
	}}
	// CheckGresType matches --gres=gpu:TYPE:N to the node's GPU type.
	CheckGresType = Check{Reason: "GresType", Kind: Static, Fits: func(r *Request, n *NodeView) bool {
		return r.GPUType == "" || strings.EqualFold(r.GPUType, n.Node.GresType)
	}}
	// CheckNodeSize filters nodes too small for the job even when idle.
	CheckNodeSize = Check{Reason: "NodeTooSmall", Kind: Static, Fits: func(r *Request, n *NodeView) bool {
		return n.Node.GPUs >= r.GPUsPerNode &&
			(n.Node.CPUs == 0 || n.Node.CPUs >= r.CPUsPerNode) &&
			(n.Node.MemoryMB == 0 || n.Node.MemoryMB >= r.MemMB)
	}}
	// CheckNotDraining keeps new work off a node being drained for removal;
	// it comes before CheckReady so that draining nodes are counted apart.
	CheckNotDraining = Check{Reason: "NodeDraining", Kind: Availability, Fits: func(_ *Request, n *NodeView) bool {
		return !n.Node.Draining()
	}}
	// CheckReady keeps work off nodes that are not READY.
	CheckReady = Check{Reason: "NodeNotReady", Kind: Availability, Fits: func(_ *Request, n *NodeView) bool {
		return n.Node.State == loomv1.Node_READY
	}}
	// CheckHealthy keeps work off nodes health found unhealthy.
	CheckHealthy = Check{Reason: "NodeUnhealthy", Kind: Availability, Fits: func(_ *Request, n *NodeView) bool {
		return !n.Node.Unhealthy
	}}
	// CheckNotDrained keeps work off nodes drained by scontrol.
	CheckNotDrained = Check{Reason: "NodeDrained", Kind: Availability, Fits: func(_ *Request, n *NodeView) bool {
		return !n.Node.AdminDrain
	}}
	// CheckIdle keeps every job off a node held whole by an --exclusive
	// job, and an --exclusive job off any node in use.
	CheckIdle = Check{Reason: "NodeBusy", Kind: Capacity, Fits: func(r *Request, n *NodeView) bool {
		return !n.Exclusive && (!r.Exclusive || n.Runs == 0)
	}}
	// CheckGPUs needs the job's GPUs free; jobs without GPUs share nodes.
	CheckGPUs = Check{Reason: "InsufficientGPUs", Kind: Capacity, Fits: func(r *Request, n *NodeView) bool {
		return r.GPUsPerNode <= n.FreeGPUs
	}}
	// CheckCPUs needs the job's CPUs free on nodes whose size is known.
	CheckCPUs = Check{Reason: "InsufficientCPUs", Kind: Capacity, Fits: func(r *Request, n *NodeView) bool {
		return n.Node.CPUs == 0 || r.CPUsPerNode <= n.FreeCPUs
	}}
	// CheckMemory needs the job's memory free on nodes whose size is known.
	CheckMemory = Check{Reason: "InsufficientMemory", Kind: Capacity, Fits: func(r *Request, n *NodeView) bool {
		return n.Node.MemoryMB == 0 || r.MemMB <= n.FreeMemMB
	}}
	// CheckNotReserved keeps a backfilled job that would run past a
	// reservation off the reserved nodes.
	CheckNotReserved = Check{Reason: "Reserved", Kind: Capacity, Fits: func(r *Request, n *NodeView) bool {
		return !r.AvoidReserved || !n.Reserved
	}}
)

// Ranker scores a node that passed every check for a request: lower is
// better. A gang's nodes are chosen topology first (see pass.choose), then by
// the rankers.
type Ranker struct {
	// Name names the ranker in the scheduler's README and in logs.
	Name string
	// Score is the node's score for r; 0 for a request the ranker has no
	// opinion on.
	Score func(r *Request, n *NodeView) int64
}

// DefaultRankers are Loom's rankers, in order: GPU jobs go where the fewest
// GPUs are free that still fit (best fit, keeping whole nodes free for
// large jobs); jobs without GPUs go to the least loaded node, then the one
// with the fewest allocations, so that they spread instead of piling onto one.
func DefaultRankers() []Ranker {
	return []Ranker{RankBestFitGPUs, RankLeastLoadedCPUs, RankFewestAllocations}
}

// The default rankers.
var (
	// RankBestFitGPUs: for a GPU job, the node's free GPUs.
	RankBestFitGPUs = Ranker{Name: "BestFitGPUs", Score: func(r *Request, n *NodeView) int64 {
		if r.GPUsPerNode > 0 {
			return int64(n.FreeGPUs)
		}
		return 0
	}}
	// RankLeastLoadedCPUs: for a job without GPUs, the CPUs in use on a node
	// whose size is known.
	RankLeastLoadedCPUs = Ranker{Name: "LeastLoadedCPUs", Score: func(r *Request, n *NodeView) int64 {
		if r.GPUsPerNode == 0 && n.Node.CPUs > 0 {
			return int64(n.Node.CPUs - n.FreeCPUs)
		}
		return 0
	}}
	// RankFewestAllocations: for a job without GPUs, the allocations on the node.
	RankFewestAllocations = Ranker{Name: "FewestAllocations", Score: func(r *Request, n *NodeView) int64 {
		if r.GPUsPerNode == 0 {
			return int64(n.Runs)
		}
		return 0
	}}
)
