package place

import (
	"strings"

	"github.com/loom-ml/loom/libs/clusterspec"
	"github.com/loom-ml/loom/libs/slurmspec"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

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

// DefaultChecks are the feasibility checks, in order: static ones first (a
// node the job could never use), then availability, then capacity.
func DefaultChecks() []Check {
	return []Check{
		CheckCompute, CheckPartition, CheckNodelist, CheckExclude, CheckGresType, CheckNodeSize,
		CheckNotDraining, CheckReady, CheckHealthy, CheckNotDrained, CheckNotDown,
		CheckIdle, CheckUser, CheckGPUs, CheckCPUs, CheckMemory, CheckNotReserved,
	}
}

// The default checks.
var (
	// CheckCompute keeps work off login nodes, which have no agent.
	CheckCompute = Check{Reason: "LoginNode", Kind: Static, Fits: func(_ *Request, n *NodeView) bool {
		return n.Node.Role != clusterspec.RoleLogin
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
	// CheckNotDown keeps work off nodes set DOWN by scontrol.
	CheckNotDown = Check{Reason: "NodeDown", Kind: Availability, Fits: func(_ *Request, n *NodeView) bool {
		return !n.Node.AdminDown
	}}
	// CheckIdle keeps every job off a node held whole by an --exclusive
	// job, and an --exclusive job off any node in use.
	CheckIdle = Check{Reason: "NodeBusy", Kind: Capacity, Fits: func(r *Request, n *NodeView) bool {
		return !n.Exclusive && (!r.Exclusive || n.Runs == 0)
	}}
	// CheckUser keeps other users' jobs off a node an --exclusive=user
	// run holds, and an --exclusive=user job off any node where another
	// user's job runs (Slurm 22.05's OverSubscribe=USER, measured: both
	// wait for Resources). The same user's jobs share the node. The rule
	// is slurmspec.UserMayJoin, which the reservations and preemption
	// (reserve.go) apply to the runs they leave on a node.
	CheckUser = Check{Reason: "OtherUser", Kind: Capacity, Fits: func(r *Request, n *NodeView) bool {
		return slurmspec.UserMayJoin(r.User, r.ExclusiveUser, n.Owner, int(n.Runs), n.OnlyUser)
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
	// reservation off the reserved nodes (and, without backfill, every
	// job off the nodes kept for a blocked partition's job).
	CheckNotReserved = Check{Reason: "Reserved", Kind: Capacity, Fits: func(r *Request, n *NodeView) bool {
		return !r.AvoidReserved || !n.Reserved
	}}
)
