// Package provider is the provisioner's view of compute: something that can
// bring a node's agent up, take it down and clean up after it. Every method is
// idempotent, because the reconciler calls them again after any crash.
package provider

import (
	"context"
	"time"
)

// Node is what a provider needs to know about one node.
type Node struct {
	// Name is the node's full name (projects/p/clusters/c/nodes/h).
	Name string
	// Cluster is the cluster's full name; ClusterID its last segment.
	Cluster, ClusterID string
	// Hostname is the Slurm-style node name.
	Hostname string
	// WorkDir is the node's own directory; SharedDir the cluster's.
	WorkDir, SharedDir string
	// GPUs is how many GPUs the node offers.
	GPUs int
	// Pool is the node pool's id; Role is "compute" or "login".
	Pool, Role string
	// MachineType, Zone and CapacityType (a loomv1.CapacitySource_Type name,
	// e.g. "SPOT") say what the node is and where its capacity comes from.
	MachineType, Zone, CapacityType string
	// HomeDir and ScratchDir are the cluster's shared filesystems.
	HomeDir, ScratchDir string
}

// EventKind is what a provider observed about a node on its own.
type EventKind int

const (
	// Preempted: the provider reclaimed the node (spot capacity).
	Preempted EventKind = iota + 1
	// BootFailed: the node will never come up; replace it.
	BootFailed
)

// Event is something that happened to a node without the provisioner asking.
type Event struct {
	// Node is the node's full name.
	Node   string
	Kind   EventKind
	Reason string
	At     time.Time
}

// Watcher is implemented by providers that report node events on their own
// (the sim provider: spot preemptions, boot failures). The provisioner
// applies each event like a consumed one, so it is durable once handled.
type Watcher interface {
	Events() <-chan Event
}

// ClusterSetup is what a cluster's nodes share, for providers that make it.
type ClusterSetup struct {
	// Cluster is the cluster's full name; ClusterID its last segment.
	Cluster, ClusterID string
	// HomeDir and ScratchDir are the shared filesystems.
	HomeDir, ScratchDir string
	// Files are written under HomeDir (relative paths, e.g.
	// ".loom/slurm/slurm.conf"), replaced when their content differs.
	Files map[string][]byte
}

// Preparer is implemented by providers that set up what a cluster's nodes
// share (the local provider: the home and scratch directories and the Slurm
// files in the home). The reconciler calls it for every cluster that is not
// being deleted, after each change; it must be idempotent and cheap when
// nothing changed.
type Preparer interface {
	PrepareCluster(ctx context.Context, c ClusterSetup) error
}

// PassStarter is implemented by providers with work to do once per
// reconciler pass rather than once per node (the local provider: load the
// scripts its agents' Redis users run). The reconciler calls StartPass at
// the start of every pass, before it prepares clusters and launches
// nodes; a failure is logged and the pass goes on (what depends on it
// fails on its own, and the next pass calls it again).
type PassStarter interface {
	StartPass(ctx context.Context) error
}

// BatchRemover is implemented by providers whose Remove has a cost that
// nodes removed together share (the local provider: one walk of Redis's
// keyspace for all their agents' keys, where a Remove each walks it once
// per node). The reconciler removes every node a pass removes (the ones
// it retires, its replaces' old nodes, its deleted clusters' nodes) with
// one RemoveNodes. It does for each node
// what Remove does (after Stop; idempotent) and returns an error per node,
// in order: nil for a node that is removed. A node whose error is not nil
// stays on record and is removed again at the next pass.
type BatchRemover interface {
	RemoveNodes(ctx context.Context, nodes []Node) []error
}

// Launched reports the outcome of a Launch.
type Launched struct {
	// PID is the agent's process id (0 where there is no process).
	PID int
	// Started is true when Launch started a new agent, false when one ran.
	Started bool
	// PrevExit says how the agent this provider previously started for the
	// node ended ("exit status 1; log /path"), when Started and that is known.
	PrevExit string
	// Expect is how long the provider expects the node to take before its
	// agent registers (0: about at once). A repair's deadline is this plus
	// the boot timeout, so a simulated hour-long replacement is not failed
	// after ten minutes.
	Expect time.Duration
}

// RepairKind is a repair a Repairer carries out.
type RepairKind int

const (
	// Reboot: every process of the node ends (its agent and its steps), the
	// node gets a new boot id and its agent starts again, with its identity.
	Reboot RepairKind = iota + 1
	// Reimage: as Reboot, and the node's directory is wiped before the
	// agent starts, so that it bootstraps from nothing (a new identity).
	Reimage
	// Replace: the node is new (the provisioner retired the old one with
	// Stop and Remove): it boots, as a new machine takes to.
	Replace
)

func (k RepairKind) String() string {
	switch k {
	case Reboot:
		return "reboot"
	case Reimage:
		return "reimage"
	case Replace:
		return "replace"
	}
	return "repair"
}

// Repairer is implemented by providers that carry out repairs (local, sim).
type Repairer interface {
	// Repair carries out repair kind on node n, whose new boot is named
	// bootID (random, chosen by the provisioner and kept durably with the
	// repair). It is idempotent per bootID: once the node booted as bootID,
	// another call only makes sure its agent runs (starting it when it
	// died), so the provisioner calls it again after a crash and on every
	// pass until the agent registers.
	Repair(ctx context.Context, n Node, kind RepairKind, bootID string) (Launched, error)
}

// Provider brings nodes up and down.
type Provider interface {
	// Launch makes the node's agent run: nothing when it already runs.
	Launch(ctx context.Context, n Node) (Launched, error)
	// Stop makes the node's agent not run: SIGTERM to its process group,
	// SIGKILL after a grace period. Nothing when it does not run.
	Stop(ctx context.Context, n Node) error
	// Remove deletes the node's directories; call it after Stop.
	Remove(ctx context.Context, n Node) error
	// RemoveCluster deletes what the cluster's nodes shared (its shared
	// directory) and the cluster's own directory; call it after every node
	// was removed.
	RemoveCluster(ctx context.Context, clusterID string) error
}
