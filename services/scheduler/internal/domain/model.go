// Package domain is the scheduler's pure core: the state it keeps (clusters,
// their partitions, nodes, jobs, runs and their allocations, fair-share
// usage) and what each consumed event, and the passing of time, does to it.
// An event goes in, a Change comes out (new versions of the records it
// touched and the events to emit); nothing here does I/O or reads a clock.
//
// Jobs and runs are separate records: a Job is the user's request and its
// Slurm status, a Run is one attempt at it on a set of nodes, holding the
// GPUs, CPUs and memory it was given until every one of its steps has ended.
//
// Entry points (stable; the trace simulator drives them in virtual time):
//
//	s := NewState(cfg)             // cfg.Policy: FIFOPolicy, EASYPolicy, DefaultPolicy
//	c, err := s.Handle(now, event) // an event, then a scheduling pass
//	s.Commit(c)                    // after the change is stored
//	s.Tick(now)                    // what time alone does: limits, grace ends, begin times
//	s.Schedule(now)                // a full pass over every cluster (start-up)
package domain

import (
	"time"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"

	"github.com/loom-ml/loom/services/scheduler/internal/domain/jobstore"
	"github.com/loom-ml/loom/services/scheduler/internal/domain/place"
)

// Slurm reasons a pending job carries in state_reason, and the reasons the
// scheduler gives an ended job or run.
const (
	// ReasonPriority: a job ahead of it in its partition waits first, or a
	// reservation for one keeps it from the nodes it could use.
	ReasonPriority = "Priority"
	// ReasonResources: it is its partition's next job and its nodes, GPUs,
	// CPUs or memory are busy.
	ReasonResources = "Resources"
	// ReasonReqNodeNotAvail: not enough nodes that it may use can take work
	// (down, draining, drained, unhealthy, or the cluster is not ready).
	ReasonReqNodeNotAvail = "ReqNodeNotAvail"
	// ReasonDependency: a --dependency is not satisfied yet.
	ReasonDependency = "Dependency"
	// ReasonDependencyNeverSatisfied: a --dependency can no longer be
	// satisfied (kill_invalid_depend is off: the job stays pending).
	ReasonDependencyNeverSatisfied = "DependencyNeverSatisfied"
	// ReasonHeldUser and ReasonHeldAdmin: the job is held (--hold, scontrol hold).
	ReasonHeldUser  = "JobHeldUser"
	ReasonHeldAdmin = "JobHeldAdmin"
	// ReasonPartitionTimeLimit: its --time is above its partition's MaxTime.
	ReasonPartitionTimeLimit = "PartitionTimeLimit"
	// ReasonPartitionConfig: its partition does not exist (any more).
	ReasonPartitionConfig = "PartitionConfig"
	// ReasonPartitionNodeLimit: it asks for more nodes than its partition has.
	ReasonPartitionNodeLimit = "PartitionNodeLimit"
	// ReasonBadConstraints: no node of its partition could ever satisfy it
	// (GPU type, node size, --nodelist/--exclude).
	ReasonBadConstraints = "BadConstraints"
	// ReasonBeginTime: its --begin time has not come.
	ReasonBeginTime = "BeginTime"
	// ReasonQOSMaxGRESPerUser: its user's running GPUs in its QOS plus its own
	// would pass the QOS's per-user cap.
	ReasonQOSMaxGRESPerUser = "QOSMaxGRESPerUser"
	// ReasonJobArrayTaskLimit: its array already runs as many tasks as its %
	// limit allows.
	ReasonJobArrayTaskLimit = "JobArrayTaskLimit"
	// ReasonClusterDeleted ends the jobs of a deleted cluster.
	ReasonClusterDeleted = "cluster deleted"
	// ReasonRequeued: the job's run was ended by the scheduler and it waits
	// to run again. A pass replaces it with the job's queue reason when the
	// job does not start at once.
	ReasonRequeued = "Requeued"
	// ReasonTimeLimit ends a job killed at its time limit (TIMEOUT).
	ReasonTimeLimit = "TimeLimit"
	// ReasonNonZeroExitCode ends a job whose step exited non-zero (FAILED).
	ReasonNonZeroExitCode = "NonZeroExitCode"
)

// RoleLogin is the role of login nodes: records without an agent, never
// given work.
const RoleLogin = place.RoleLogin

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

// partitions returns the cluster's partitions, the implicit one when the
// spec names none.
func (c *Cluster) partitions() []Partition {
	if c == nil || len(c.Partitions) == 0 {
		return []Partition{{Name: ImplicitPartition, MaxTime: "UNLIMITED", Default: true}}
	}
	return c.Partitions
}

// partition returns the partition named name ("" means the default) and its
// index in partitions(), or -1.
func (c *Cluster) partition(name string) (Partition, int) {
	ps := c.partitions()
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
	// Role is the provisioner's "compute" or "login" ("" counts as compute).
	Role string `json:"role,omitempty"`
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
	// go on. AdminReason is its Reason=, set by AdminReasonUser at
	// AdminReasonTime (sinfo -R's USER and TIMESTAMP).
	AdminDrain      bool      `json:"admin_drain,omitempty"`
	AdminReason     string    `json:"admin_reason,omitempty"`
	AdminReasonUser string    `json:"admin_reason_user,omitempty"`
	AdminReasonTime time.Time `json:"admin_reason_time,omitzero"`
}

// Usable reports whether the node may take new work.
func (n *Node) Usable() bool {
	return n.State == loomv1.Node_READY && !n.Unhealthy && n.Role != RoleLogin && !n.AdminDrain
}

// Draining reports whether the provisioner is draining the node for
// removal: it keeps the jobs it runs (until its deadline) but takes no new ones.
func (n *Node) Draining() bool { return n.State == loomv1.Node_DRAINING }

// lost reports whether the node can no longer run the work it holds, so that
// its jobs end NODE_FAIL: anything but READY or DRAINING (DOWN, FAILED,
// PROVISIONING, DELETING), or unhealthy.
func (n *Node) lost() bool {
	return n.Unhealthy || (n.State != loomv1.Node_READY && n.State != loomv1.Node_DRAINING)
}

// downReason says why a node can no longer run work, for a failed job's reason.
func (n *Node) downReason() string {
	why := n.HealthReason
	if !n.Unhealthy || why == "" {
		why = n.Reason
	}
	if why == "" {
		why = "state " + n.State.String()
	}
	return "node " + n.Hostname + " down: " + why
}

// Job is a job and its Slurm status: its persisted part (jobstore.JobRecord:
// the resource, Attempt, ModelDir, Excluded, and the methods that read only
// them: Name, Pending, Running, Completing, Terminal), and what the pass
// keeps of it in memory.
type Job struct {
	jobstore.JobRecord

	// why is the last pass's placement explanation, attrs what a pass
	// reads of a pending job (memory only).
	why   *Decision
	attrs *jobAttrs
	// tmpl is the Template of the array the job is a task of (nil for other
	// jobs, and for tasks of arrays recorded without one): the task's
	// environment is tmpl's map itself, so an array's environment is held
	// once, however many tasks it has.
	tmpl *loomv1.Job
	// placed explains the start of the current attempt (memory only).
	placed *Placed
	// shared: Job is a shallow copy (shallowJob) of the stored version,
	// with only its reason changed, and is also the payload of the change's
	// JobChanged: editJob deep-copies it before any edit.
	shared bool
	// lazy: a reason-only version not built yet (Job is nil): the pass
	// builds them after its walk of the queue, in the queue's memory order,
	// or on the first look at it (see txn.fill).
	lazy *reasonVersion
}

// Template returns the template of the array the job is a task of (see
// Array.Template; not to be modified), or nil: what the store keeps once per
// array and writes the task's record against.
func (j *Job) Template() *loomv1.Job { return j.tmpl }

// requeueAllowed reports whether the job may be requeued (--requeue, the
// default, or not --no-requeue).
func (j *Job) requeueAllowed() bool { return j.Job.Requeue == nil || j.Job.GetRequeue() }

// Step is one node's part of a run (jobstore.Step).
type Step = jobstore.Step

// Run is one attempt of a job on a set of nodes, and the allocation it
// holds: its persisted part (jobstore.RunRecord, with Key, Holds and Ended)
// and what the pass keeps of it in memory.
type Run struct {
	jobstore.RunRecord

	// Memory only, set when the run is committed: its interned
	// account/user, GPU count and usage rate; live and limit mirror its job
	// (its attempt is running; its time limit in seconds), kept current by
	// Commit.
	assoc *assoc
	key   string
	gpuN  int32
	rate  float64
	live  bool
	limit int64
}

// RunKey returns the record key of a job's attempt (jobstore.RunKey).
func RunKey(job string, attempt int32) string { return jobstore.RunKey(job, attempt) }

// allTerminal reports whether nothing of the run runs any more: every
// node's step has ended, and every job step's (srun) tasks. The run holds
// its nodes until then, as Slurm keeps a job's nodes COMPLETING until its
// processes are gone.
func (r *Run) allTerminal() bool {
	for _, st := range r.Steps {
		if !st.Terminal() {
			return false
		}
	}
	for i := range r.JobSteps {
		if !r.JobSteps[i].Ended() {
			return false
		}
	}
	return true
}

// gpuCount is how many GPUs the run was given in all.
func (r *Run) gpuCount() int32 {
	n := int32(0)
	for _, g := range r.GPUs {
		n += int32(len(g))
	}
	return n
}

// cpuCount is how many CPUs the run was given in all.
func (r *Run) cpuCount() int32 {
	n := int32(0)
	for _, c := range r.CPUs {
		n += c
	}
	return n
}

// rank returns node's rank in the run, or -1.
func (r *Run) rank(node string) int {
	for i, n := range r.Nodes {
		if n == node {
			return i
		}
	}
	return -1
}

func (r *Run) clone() *Run {
	c := *r
	c.assoc, c.key, c.gpuN, c.rate, c.live, c.limit = nil, "", 0, 0, false, 0
	c.Nodes = append([]string(nil), r.Nodes...)
	c.Hostnames = append([]string(nil), r.Hostnames...)
	c.CPUs = append([]int32(nil), r.CPUs...)
	c.Tasks = append([]int32(nil), r.Tasks...)
	c.GPUs = make(map[string][]int32, len(r.GPUs))
	for k, v := range r.GPUs {
		c.GPUs[k] = append([]int32(nil), v...)
	}
	c.Steps = make(map[string]Step, len(r.Steps))
	for k, v := range r.Steps {
		c.Steps[k] = v
	}
	return &c
}

// Array is the record of a job array (jobstore.Array: it has no
// memory-only fields).
type Array = jobstore.Array

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
