package jobstore

import (
	"time"

	"github.com/loom-ml/loom/libs/clusterspec"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// Cluster is what the scheduler knows of a cluster.
type Cluster struct {
	Name string `json:"name"`
	// SharedDir is the cluster's shared filesystem: the default working and
	// submit directory, and the home of model directories.
	SharedDir string               `json:"shared_dir"`
	State     loomv1.Cluster_State `json:"state"`
	// Partitions are the cluster's Slurm partitions, in spec order. None
	// (a cluster described without orchestrator.slurm) means one implicit
	// default partition over every compute node, without a time limit.
	Partitions []Partition `json:"partitions,omitempty"`
	// NodeSets map node pools to Slurm node sets (which partitions name).
	NodeSets []NodeSet `json:"node_sets,omitempty"`
}

// Partition is one Slurm partition of a cluster.
type Partition struct {
	Name     string   `json:"name"`
	NodeSets []string `json:"node_sets,omitempty"`
	// MaxTime is the partition's MaxTime as written ("UNLIMITED", "1:00:00").
	MaxTime string `json:"max_time,omitempty"`
	// MaxSeconds is MaxTime in seconds; 0 means UNLIMITED.
	MaxSeconds int64 `json:"max_seconds,omitempty"`
	Default    bool  `json:"default,omitempty"`
	// Tier is the partition's PriorityTier: its jobs are considered before
	// those of lower tiers and may preempt them.
	Tier int32 `json:"tier,omitempty"`
	// State is the partition's State as the spec has it (libs/slurmspec):
	// "" (UP), DOWN, DRAIN or INACTIVE. A DOWN or INACTIVE partition
	// starts none of its jobs.
	State string `json:"state,omitempty"`
}

// NodeSet maps a node pool to a Slurm node set.
type NodeSet struct {
	ID       string   `json:"id"`
	Pool     string   `json:"pool"`
	Features []string `json:"features,omitempty"`
}

// ImplicitPartition is the name of the one partition of a cluster described
// without Slurm partitions (clusterspec's default partition name).
const ImplicitPartition = "all"

// Schedulable reports whether the cluster may be given new work.
func (c *Cluster) Schedulable() bool {
	if c == nil || c.SharedDir == "" {
		return false
	}
	switch c.State {
	case loomv1.Cluster_DELETING, loomv1.Cluster_DELETED, loomv1.Cluster_ERROR:
		return false
	}
	return true
}

// EffectivePartitions returns the cluster's partitions, the implicit one when the
// spec names none.
func (c *Cluster) EffectivePartitions() []Partition {
	if c == nil || len(c.Partitions) == 0 {
		return []Partition{{Name: ImplicitPartition, MaxTime: "UNLIMITED", Default: true}}
	}
	return c.Partitions
}

// Partition returns the partition named name ("" means the default) and its
// index in EffectivePartitions(), or -1.
func (c *Cluster) Partition(name string) (Partition, int) {
	ps := c.EffectivePartitions()
	for i, p := range ps {
		if (name == "" && p.Default) || (name != "" && p.Name == name) {
			return p, i
		}
	}
	if name == "" && len(ps) > 0 {
		return ps[0], 0
	}
	return Partition{}, -1
}

// Node is what the scheduler knows of a node: the provisioner's view of it
// (State), health's (Unhealthy), its shape from the machine catalog, and the
// scheduler's own Slurm drain (scontrol update node State=DRAIN).
type Node struct {
	Name     string            `json:"name"`
	Cluster  string            `json:"cluster"`
	Hostname string            `json:"hostname"`
	GPUs     int32             `json:"gpus"`
	State    loomv1.Node_State `json:"state"`
	// Reason is the provisioner's reason for the node's state.
	Reason string `json:"reason,omitempty"`
	// Unhealthy is health's verdict; a node is healthy until told otherwise.
	Unhealthy    bool   `json:"unhealthy,omitempty"`
	HealthReason string `json:"health_reason,omitempty"`
	// HealthDrain: health drains the node: it takes no new work, and its runs
	// are not ended at once — after a fault that is not urgent they were
	// signalled to checkpoint before they are requeued (checkpoint_first);
	// for ACTION_DRAIN they run on, as under scontrol drain.
	HealthDrain bool `json:"health_drain,omitempty"`
	// Unreachable: health lost touch with the node without finding it
	// failed (many nodes fell silent together): no new work, runs go on.
	Unreachable bool `json:"unreachable,omitempty"`
	// HealthState is health's remediation state of the node; HealthSetBy
	// ("loom-health" or an operator) set the verdict at HealthTime (sinfo -R).
	HealthState loomv1.RemediationState `json:"health_state,omitempty"`
	HealthSetBy string                  `json:"health_set_by,omitempty"`
	HealthTime  time.Time               `json:"health_time,omitzero"`
	// HealthDrained records that NodeDrained was emitted once the node health
	// took out held nothing any more; cleared when health puts it back.
	HealthDrained bool `json:"health_drained,omitempty"`
	// PrologFailed is when a step last failed to start on the node because
	// a prolog health check failed there: health's verdict on the node is
	// on its way (see the domain's PrologVerdictWait).
	PrologFailed time.Time `json:"prolog_failed,omitzero"`
	// PrologHold keeps the node out of service from its prolog failure
	// until health's verdict on it arrives (or PrologVerdictWait passes):
	// between the job's requeue and health's drain it must not look idle,
	// nor take the next job. PrologReason is the refused step's message.
	PrologHold   bool   `json:"prolog_hold,omitempty"`
	PrologReason string `json:"prolog_reason,omitempty"`
	// Role is the provisioner's "compute" or "login" ("" counts as compute).
	Role string `json:"role,omitempty"`
	// Registration is the node's current registration, the provisioner's
	// (loomv1.Node.registration): the step commands for the node are
	// sealed with its command key (StartStep.registration).
	Registration string `json:"registration,omitempty"`
	// DrainDeadline is when the jobs still running on a DRAINING node are
	// requeued; zero means they are waited for however long they run.
	DrainDeadline time.Time `json:"drain_deadline,omitzero"`
	// Drained records that NodeDrained was emitted for the node's current
	// DRAINING period, so that it is emitted once; it is cleared when the
	// node leaves DRAINING.
	Drained bool `json:"drained,omitempty"`

	// Pool, MachineType, AcceleratorType and Block are the provisioner's.
	Pool            string `json:"pool,omitempty"`
	MachineType     string `json:"machine_type,omitempty"`
	AcceleratorType string `json:"accelerator_type,omitempty"`
	Block           string `json:"block,omitempty"`
	// GresType is the Slurm GRES type of its GPUs ("h100"), CPUs and
	// MemoryMB its size, from the machine catalog; 0 means unknown (not
	// checked).
	GresType string `json:"gres_type,omitempty"`
	CPUs     int32  `json:"cpus,omitempty"`
	MemoryMB int64  `json:"memory_mb,omitempty"`

	// AdminDrain is the scheduler's Slurm drain: no new work, running jobs
	// go on. AdminDown is scontrol's State=DOWN: no new work, and the jobs
	// it ran ended NODE_FAIL (requeued where they may be). At most one of
	// the two is set. AdminReason is its Reason=, set by AdminReasonUser at
	// AdminReasonTime (sinfo -R's USER and TIMESTAMP).
	AdminDrain      bool      `json:"admin_drain,omitempty"`
	AdminDown       bool      `json:"admin_down,omitempty"`
	AdminReason     string    `json:"admin_reason,omitempty"`
	AdminReasonUser string    `json:"admin_reason_user,omitempty"`
	AdminReasonTime time.Time `json:"admin_reason_time,omitzero"`
}

// Usable reports whether the node may take new work.
func (n *Node) Usable() bool {
	return n.State == loomv1.Node_READY && !n.HealthOut() && !n.Unreachable && !n.PrologHold && n.Role != clusterspec.RoleLogin &&
		!n.AdminDrain && !n.AdminDown
}

// HealthOut reports whether health took the node out: unhealthy, or being
// drained by it (HealthDrain).
func (n *Node) HealthOut() bool { return n.Unhealthy || n.HealthDrain }

// Draining reports whether the provisioner is draining the node for
// removal: it keeps the jobs it runs (until its deadline) but takes no new ones.
func (n *Node) Draining() bool { return n.State == loomv1.Node_DRAINING }

// Lost reports whether the node can no longer run the work it holds, so that
// its jobs end NODE_FAIL: anything but READY or DRAINING (DOWN, FAILED,
// PROVISIONING, DELETING), unhealthy, or set DOWN with scontrol.
func (n *Node) Lost() bool {
	return n.Unhealthy || n.AdminDown || (n.State != loomv1.Node_READY && n.State != loomv1.Node_DRAINING)
}

// DownReason says why a node can no longer run work, for a failed job's reason.
func (n *Node) DownReason() string {
	if n.AdminDown && !n.Unhealthy {
		return "node " + n.Hostname + " down: " + n.AdminReason
	}
	why := n.HealthReason
	if !n.Unhealthy || why == "" {
		why = n.Reason
	}
	if why == "" {
		why = "state " + n.State.String()
	}
	return "node " + n.Hostname + " down: " + why
}

// Usage is the decayed resource usage (GPU-seconds, or CPU-seconds for jobs
// without GPUs) of an account, or of a user within an account, on a
// cluster, as of At.
type Usage struct {
	Key   string    `json:"key"`
	Value float64   `json:"value"`
	At    time.Time `json:"at"`
}

// UsageKey is the key of an account's usage on a cluster (user ""), or of a
// user's within it.
func UsageKey(cluster, account, user string) string {
	if user == "" {
		return cluster + "|" + account
	}
	return cluster + "|" + account + "|" + user
}

// Ended is the compact record of a job pruned from the live state: what a
// dependency on it reads, and its final goodput. It has a fixed set of
// fields (no lists), so every record is bounded (about 300 bytes of JSON).
type Ended struct {
	Name  string          `json:"name"`
	State loomv1.JobState `json:"state"`
	Start time.Time       `json:"start,omitzero"`
	End   time.Time       `json:"end"`
	// Cluster is the job's cluster, for the cluster's goodput; empty in
	// records written before it was kept.
	Cluster string `json:"cluster,omitempty"`
	// Goodput is the job's final goodput; nil in records written before it
	// was kept.
	Goodput *EndedGoodput `json:"goodput,omitempty"`
}

// EndedGoodput is a pruned job's final goodput (loom.v1.Goodput less its
// name and ratio, which follow from the record): durations in nanoseconds.
type EndedGoodput struct {
	Wall          time.Duration `json:"wall"`
	Productive    time.Duration `json:"productive,omitempty"`
	Recompute     time.Duration `json:"recompute,omitempty"`
	Restart       time.Duration `json:"restart,omitempty"`
	Queueing      time.Duration `json:"queueing,omitempty"`
	Checkpointing time.Duration `json:"checkpointing,omitempty"`
	Failures      int32         `json:"failures,omitempty"`
	Restarts      int32         `json:"restarts,omitempty"`
}
