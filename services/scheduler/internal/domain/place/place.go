// Package place is the scheduler's placement: the feasibility checks that
// filter a cluster's nodes for a job, the rankers that order the nodes that
// passed, and the node choice (topology first, then the rankers) over a
// node table that the scheduling pass owns.
//
// It knows nothing of jobs, runs or the scheduler's state: the pass (in
// package domain) builds a Table of NodeViews from its node records and what
// the runs hold, resolves each job to a Request, and asks place which nodes
// may take it and which of them to use. Everything here is a pure function
// of the table and the request, apart from Table.Take, which records an
// allocation in the table.
package place

import loomv1 "github.com/loom-ml/loom/proto/loom/v1"

// MaxGPUsPerNode is the most GPUs a node may have: a NodeView keeps its free
// GPUs in a 64-bit mask.
const MaxGPUsPerNode = 64

// Node is what placement reads of a node record: its name, topology block,
// shape and the states that make it unusable. The pass derives one per node
// record, and a record does not change while a Node derived from it is in use.
type Node struct {
	// Name is the node's resource name; Hostname its Slurm hostname.
	Name     string
	Hostname string
	// Block is the provisioner's topology block ("" none).
	Block string
	// Role is "compute" or "login" (clusterspec.RoleCompute, RoleLogin; ""
	// counts as compute).
	Role string
	// State is the provisioner's view of the node.
	State loomv1.Node_State
	// Unhealthy is health's verdict; AdminDrain the scheduler's Slurm drain,
	// AdminDown scontrol's State=DOWN.
	Unhealthy  bool
	AdminDrain bool
	AdminDown  bool
	// GPUs, GresType (the GPUs' Slurm GRES type), CPUs and MemoryMB are the
	// node's size; CPUs and MemoryMB 0 mean unknown (not checked).
	GPUs     int32
	GresType string
	CPUs     int32
	MemoryMB int64
}

// Draining reports whether the provisioner is draining the node for removal.
func (n *Node) Draining() bool { return n.State == loomv1.Node_DRAINING }

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
	// ExclusiveUser (--exclusive=user): the nodes must run only User's
	// jobs, and take no other user's while the job runs (Slurm's
	// OverSubscribe=USER).
	ExclusiveUser bool
	// User is the job's user, set by the pass only when it matters: for
	// an ExclusiveUser request, and for every request while some node is
	// held by a user's ExclusiveUser run. Then the shape is the user's
	// (KeyOf): which nodes fit depends on who asks.
	User string
	// Nodelist: hostnames the job must run on (all of them); Exclude:
	// hostnames it must not.
	Nodelist map[string]bool
	Exclude  map[string]bool
	// Lists is ListsKey(Nodelist, Exclude) when the caller has it worked
	// out ("": KeyOf works it out): the jobs of an array share their lists,
	// and a pass looks at each of them.
	Lists string
	// AvoidReserved keeps the job off the nodes reserved for a higher job
	// (backfill of a job that would not end before the reservation).
	AvoidReserved bool
}

// NodeView is a node as a placement sees it during a pass: the node, its
// partitions and what is free on it.
type NodeView struct {
	Node *Node
	// Parts has bit i set when the node is in partition i.
	Parts uint64
	// FreeMask has bit g set when GPU g is free; FreeGPUs counts its bits.
	FreeMask uint64
	// FreeGPUs, FreeCPUs (meaningful when Node.CPUs > 0) and FreeMemMB
	// (when Node.MemoryMB > 0) are what no run holds.
	FreeGPUs  int32
	FreeCPUs  int32
	FreeMemMB int64
	// Runs counts the allocations on the node; Exclusive is set when one
	// of them holds it whole.
	Runs      int32
	Exclusive bool
	// Owner is the user whose --exclusive=user run is on the node ("":
	// none): only that user's jobs may join it.
	Owner string
	// OnlyUser is the user of every run on the node when they are all
	// one user's ("" when none runs or several users' do). The pass sets
	// it only once an ExclusiveUser request is placed (it costs a read of
	// every run); Take keeps it up to date after that.
	OnlyUser string
	// Reserved: the node is kept for the pass's backfill reservation, or,
	// without backfill, for the blocked job of a partition it is in.
	Reserved bool
}

// InPartition reports whether the node is in partition index i.
func (n *NodeView) InPartition(i int) bool { return i >= 0 && i < 64 && n.Parts&(1<<uint(i)) != 0 }
