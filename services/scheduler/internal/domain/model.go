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
	"strings"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"

	"github.com/loom-ml/loom/services/scheduler/internal/domain/jobstore"
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
	// ReasonPartitionConfig: its partition does not exist (yet: the jobs of
	// a partition a cluster update removes end NODE_FAIL, partgone.go).
	ReasonPartitionConfig = "PartitionConfig"
	// ReasonPartitionDown and ReasonPartitionInactive: its partition is
	// DOWN or INACTIVE (scontrol update PartitionName=P State=...): it
	// waits until the partition is UP or DRAIN again.
	ReasonPartitionDown     = "PartitionDown"
	ReasonPartitionInactive = "PartitionInactive"
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
	// ReasonOutOfMemory ends a job, or a job step, whose processes the
	// agent killed past the job's memory (OUT_OF_MEMORY).
	ReasonOutOfMemory = "OutOfMemory"
)

// killedForMemory reports whether an agent's message on a step's end says
// it killed the step's processes past the job's memory (the agent writes
// "out of memory" there).
func killedForMemory(msg string) bool {
	return strings.Contains(strings.ToLower(msg), "out of memory")
}

// Cluster, Partition, NodeSet and Node are the records of clusters and
// their nodes (package jobstore: they have no memory-only fields).
type (
	Cluster   = jobstore.Cluster
	Partition = jobstore.Partition
	NodeSet   = jobstore.NodeSet
	Node      = jobstore.Node
)

// ImplicitPartition is the name of the one partition of a cluster described
// without Slurm partitions (clusterspec's default partition name).
const ImplicitPartition = jobstore.ImplicitPartition

// Job is a job and its Slurm status: its persisted part (jobstore.JobRecord:
// the resource, Attempt, ModelDir, Excluded, and the methods that read only
// them: Name, Pending, Running, Completing, Terminal), and what the pass
// keeps of it in memory.
type Job struct {
	jobstore.JobRecord

	// why is the last pass's placement explanation (memory only). What a
	// pass reads of a pending job is its queue entry (State.storedAttrs).
	why *Decision
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
	// Commit. gpu0 is how many GPUs it holds on its first node (Nodes[0]):
	// the reservation reads it for each run of each node a pass looks at,
	// where the GPUs map is a string look-up.
	assoc *assoc
	key   string
	gpuN  int32
	gpu0  int32
	rate  float64
	live  bool
	limit int64
	// victim is what the preemption stage reads of the job (victimIn):
	// its version set with live, the rest by writers' passes.
	victim victimIn
}

// RunKey returns the record key of a job's attempt (jobstore.RunKey).
func RunKey(job string, attempt int32) string { return jobstore.RunKey(job, attempt) }

// allTerminal reports whether nothing of the run runs any more: every
// node's step has ended, and every job step's (srun) tasks. The run holds
// its nodes until then, as Slurm keeps a job's nodes COMPLETING until its
// processes are gone. A job step that still waits (PENDING: for its job's
// nodes or for CPUs) has no process anywhere and holds nothing: the run's
// end ends it (settleJobSteps) without keeping the nodes meanwhile.
func (r *Run) allTerminal() bool {
	for _, st := range r.Steps {
		if !st.Terminal() {
			return false
		}
	}
	for i := range r.JobSteps {
		if s := &r.JobSteps[i]; !s.Ended() && s.State != loomv1.JobState_PENDING {
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
	c.assoc, c.key, c.gpuN, c.gpu0, c.rate, c.live, c.limit, c.victim = nil, "", 0, 0, 0, false, 0, victimIn{}
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

// Usage is the decayed fair-share usage of an account or user on a
// cluster (jobstore.Usage).
type Usage = jobstore.Usage

// UsageKey is the key of an account's usage on a cluster (user ""), or of a
// user's within it (jobstore.UsageKey).
func UsageKey(cluster, account, user string) string { return jobstore.UsageKey(cluster, account, user) }
