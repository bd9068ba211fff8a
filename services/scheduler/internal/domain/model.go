// Package domain is the scheduler's pure core: the state it keeps (clusters,
// nodes, jobs, runs and their allocations) and what each consumed event does to
// it. An event goes in, a Change comes out (new versions of the records it
// touched and the events to emit); nothing here does I/O or reads a clock.
//
// Jobs and runs are separate records: a Job is the user's request and its
// Slurm-style status, a Run is one attempt at it on a set of nodes, holding the
// GPUs it was given until every one of its steps has ended.
package domain

import (
	"strconv"
	"time"

	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// Slurm reasons a pending job carries in state_reason.
const (
	// ReasonPriority: a job ahead of it in the queue waits first.
	ReasonPriority = "Priority"
	// ReasonResources: it is the next to run but its nodes or GPUs are busy.
	ReasonResources = "Resources"
	// ReasonReqNodeNotAvail: the cluster has no node that could take work.
	ReasonReqNodeNotAvail = "ReqNodeNotAvail"
	// ReasonClusterDeleted ends the jobs of a deleted cluster.
	ReasonClusterDeleted = "cluster deleted"
	// ReasonRequeued: the job's run was ended by the scheduler (its node
	// reached its drain deadline) and it waits to run again. A pass replaces
	// it with the job's queue reason when the job does not start at once.
	ReasonRequeued = "Requeued"
)

// RoleLogin is the role of login nodes: records without an agent, never
// given work.
const RoleLogin = "login"

// Cluster is what the scheduler knows of a cluster.
type Cluster struct {
	Name string `json:"name"`
	// SharedDir is the cluster's shared filesystem: the working directory of
	// every step and the home of output files and model directories.
	SharedDir string               `json:"shared_dir"`
	State     loomv1.Cluster_State `json:"state"`
}

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

// Node is what the scheduler knows of a node: the provisioner's view of it
// (State) and health's (Unhealthy).
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
}

// Usable reports whether the node may take new work.
func (n *Node) Usable() bool {
	return n.State == loomv1.Node_READY && !n.Unhealthy && n.Role != RoleLogin
}

// Draining reports whether the node is DRAINING: it keeps the jobs it runs
// (until its deadline) but takes no new ones.
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

// Job is a job and its Slurm-style status.
type Job struct {
	// Job is the full resource as served by GetJob. The domain never mutates
	// a Job that is in a State; it edits a copy inside a Change.
	Job *loomv1.Job `json:"-"`
	// Attempt counts the job's runs, from 1; 0 while it never ran.
	Attempt int32 `json:"attempt"`
	// ModelDir is $LOOM_MODEL_DIR of the current run ("" without model_output).
	ModelDir string `json:"model_dir,omitempty"`
}

// Name returns the job's full name.
func (j *Job) Name() string { return j.Job.GetName() }

// Pending reports whether the job waits in the queue.
func (j *Job) Pending() bool { return j.Job.GetState() == loomv1.JobState_PENDING }

// Running reports whether the job holds a run in progress.
func (j *Job) Running() bool { return j.Job.GetState() == loomv1.JobState_RUNNING }

// Terminal reports whether the job has ended (nothing will change it again).
func (j *Job) Terminal() bool {
	switch j.Job.GetState() {
	case loomv1.JobState_COMPLETED, loomv1.JobState_FAILED, loomv1.JobState_CANCELLED,
		loomv1.JobState_TIMEOUT, loomv1.JobState_NODE_FAIL, loomv1.JobState_PREEMPTED,
		loomv1.JobState_OUT_OF_MEMORY:
		return true
	}
	return false
}

// Step is one node's part of a run.
type Step struct {
	// State is the agent's last report; STEP_STATE_UNSPECIFIED until the first.
	State    eventsv1.StepState `json:"state"`
	ExitCode int32              `json:"exit_code,omitempty"`
	Message  string             `json:"message,omitempty"`
	// Abandoned: the node failed or left, so the step counts as ended and
	// the node's GPUs are free without waiting for its agent's word.
	Abandoned bool `json:"abandoned,omitempty"`
}

// Terminal reports whether the step has ended.
func (s Step) Terminal() bool {
	if s.Abandoned {
		return true
	}
	switch s.State {
	case eventsv1.StepState_STEP_EXITED, eventsv1.StepState_STEP_FAILED_TO_START,
		eventsv1.StepState_STEP_KILLED, eventsv1.StepState_STEP_LOST:
		return true
	}
	return false
}

// Run is one attempt of a job on a set of nodes, and the allocation it holds.
type Run struct {
	Job     string `json:"job"`
	Cluster string `json:"cluster"`
	Attempt int32  `json:"attempt"`
	// Nodes are the node names in rank order (SLURM_NODEID); Hostnames match.
	Nodes     []string `json:"nodes"`
	Hostnames []string `json:"hostnames"`
	// GPUs are the device indices given to the run on each node.
	GPUs map[string][]int32 `json:"gpus,omitempty"`
	// Steps by node name.
	Steps map[string]Step `json:"steps"`
	// Released is set once every step is terminal: the allocation is free.
	Released bool `json:"released,omitempty"`
}

// Key returns the run's record key.
func (r *Run) Key() string { return RunKey(r.Job, r.Attempt) }

// RunKey returns the record key of a job's attempt.
func RunKey(job string, attempt int32) string {
	return job + "#" + strconv.FormatInt(int64(attempt), 10)
}

// Holds reports whether the run still holds its allocation on node.
func (r *Run) Holds(node string) bool {
	if r.Released {
		return false
	}
	st, ok := r.Steps[node]
	return ok && !st.Abandoned
}

// allTerminal reports whether every step has ended.
func (r *Run) allTerminal() bool {
	for _, st := range r.Steps {
		if !st.Terminal() {
			return false
		}
	}
	return true
}

func (r *Run) clone() *Run {
	c := *r
	c.Nodes = append([]string(nil), r.Nodes...)
	c.Hostnames = append([]string(nil), r.Hostnames...)
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
