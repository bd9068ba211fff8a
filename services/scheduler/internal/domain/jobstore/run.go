package jobstore

import (
	"strconv"
	"time"

	"github.com/loom-ml/loom/libs/acct"
	"github.com/loom-ml/loom/libs/slurmspec"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// RunRecord is a run's persisted part: one attempt of a job on a set of
// nodes, and the allocation it holds. domain.Run embeds it beside its
// memory-only fields.
type RunRecord struct {
	Job     string `json:"job"`
	Cluster string `json:"cluster"`
	Attempt int32  `json:"attempt"`
	// Nodes are the node names in rank order (SLURM_NODEID); Hostnames match.
	Nodes     []string `json:"nodes"`
	Hostnames []string `json:"hostnames"`
	// GPUs are the device indices given to the run on each node.
	GPUs map[string][]int32 `json:"gpus,omitempty"`
	// CPUs and Tasks are the CPUs and tasks given on each node, by rank;
	// MemMB the memory on each node. Exclusive runs hold their nodes whole.
	CPUs      []int32 `json:"cpus,omitempty"`
	Tasks     []int32 `json:"tasks,omitempty"`
	MemMB     int64   `json:"mem_mb,omitempty"`
	Exclusive bool    `json:"exclusive,omitempty"`
	// ExclusiveUser runs (--exclusive=user) keep other users' jobs off
	// their nodes.
	ExclusiveUser bool `json:"exclusive_user,omitempty"`
	// Steps by node name.
	Steps map[string]Step `json:"steps"`
	// Released is set once every step is terminal: the allocation is free.
	Released bool `json:"released,omitempty"`

	// Partition, User, Account and QOS are the job's when it started (for
	// limits, fair share and preemption).
	Partition string `json:"partition,omitempty"`
	User      string `json:"user,omitempty"`
	Account   string `json:"account,omitempty"`
	QOS       string `json:"qos,omitempty"`
	// Start is when the run started; End when the attempt ended (the job
	// left RUNNING for it), zero while it runs.
	Start time.Time `json:"start,omitzero"`
	End   time.Time `json:"end,omitzero"`
	// Outcome is the attempt's end state (zero while it runs), with its exit
	// code and reason, for sacct's view of the job's runs.
	Outcome  loomv1.JobState `json:"outcome,omitempty"`
	ExitCode int32           `json:"exit_code,omitempty"`
	// ExitSignal, when known, is the signal that ended the attempt's
	// program (0: it exited with ExitCode), from its batch step's end.
	ExitSignal *int32 `json:"exit_signal,omitempty"`
	Reason     string `json:"reason,omitempty"`
	// Signaled records that the job's --signal was sent ahead of its time limit.
	Signaled bool `json:"signaled,omitempty"`
	// PreemptBy names the job this run is being preempted for; PreemptAt is
	// when its grace period ends and it is stopped.
	PreemptBy string    `json:"preempt_by,omitempty"`
	PreemptAt time.Time `json:"preempt_at,omitzero"`
	// JobSteps are the run's job steps (srun inside the allocation), by
	// step id, and NextStepID the id the next one gets. The slice and its
	// elements are never edited in place (the domain's jobsteps.go copies
	// on write), so domain.Run.clone's shallow copy of it is safe.
	JobSteps   []JobStep `json:"job_steps,omitempty"`
	NextStepID int32     `json:"next_step_id,omitempty"`
	// StepsDropped counts the ended steps dropped from JobSteps to keep
	// the record bounded (the oldest first; see the domain's putJobStep).
	StepsDropped int32 `json:"steps_dropped,omitempty"`
	// DerivedExit is Slurm's DerivedExitCode of the run as a wait(2)
	// status: the highest end of its job steps (the signal that killed a
	// step, else its code<<8), kept as each step ends so that the steps
	// dropped past the newest kept still count; nil in records from before
	// it was kept, whose kept steps then say (see the domain's
	// runDerivedExit).
	DerivedExit *int32 `json:"derived_exit,omitempty"`
	// FenceUntil is the earliest FenceUntil of its fenced steps (zero: none),
	// so that the clock finds the fences due without reading every step.
	FenceUntil time.Time `json:"fence_until,omitzero"`
	// Progress is what the run's steps last reported of their progress
	// (StepProgress), for hang detection, checkpoint-aware drains and goodput.
	Progress Progress `json:"progress,omitzero"`
	// CheckpointBy (non-zero) is the end of a checkpoint-aware drain's grace:
	// the run was signalled to checkpoint at CheckpointAsked because
	// CheckpointNode is to be drained, and is requeued at the first
	// checkpoint newer than CheckpointFrom and not written before
	// CheckpointAsked (zero in a record from before it was kept: the step
	// alone), or at CheckpointBy. CheckpointReason is health's reason.
	CheckpointBy     time.Time `json:"checkpoint_by,omitzero"`
	CheckpointFrom   int64     `json:"checkpoint_from,omitempty"`
	CheckpointAsked  time.Time `json:"checkpoint_asked,omitzero"`
	CheckpointNode   string    `json:"checkpoint_node,omitempty"`
	CheckpointReason string    `json:"checkpoint_reason,omitempty"`
	// SurvivorsBy (non-zero) is the end of the wait for a checkpoint from
	// the run's surviving steps after FailedNode failed under it (the
	// attempt ended NODE_FAIL then, at End): they were sent the job's
	// --signal and are stopped at the first checkpoint newer than
	// SurvivorsFrom and written since End, once none of them runs, or at
	// SurvivorsBy, with SurvivorsReason. StopsSent is when the wait ended
	// and they were told to stop, from which a requeued job's wait for them
	// (RequeueStopWait) counts.
	// SurvivorsOfCrash says the wait followed the job's own program
	// failing on FailedNode (its step exited non-zero and the job was
	// retried), not the node failing: the survivors are stopped as the
	// job's failure stops them, not "due to node failure".
	SurvivorsBy      time.Time `json:"survivors_by,omitzero"`
	SurvivorsFrom    int64     `json:"survivors_from,omitempty"`
	SurvivorsReason  string    `json:"survivors_reason,omitempty"`
	SurvivorsOfCrash bool      `json:"survivors_of_crash,omitempty"`
	FailedNode       string    `json:"failed_node,omitempty"`
	StopsSent        time.Time `json:"stops_sent,omitzero"`
}

// Progress is a run's progress as its steps reported it (the highest over
// its nodes): the training step, the latest checkpoint's step and time, the
// time spent writing checkpoints, and when it last moved.
type Progress struct {
	Step           int64     `json:"step,omitempty"`
	CheckpointStep int64     `json:"checkpoint_step,omitempty"`
	CheckpointTime time.Time `json:"checkpoint_time,omitzero"`
	OutputBytes    int64     `json:"output_bytes,omitempty"`
	// Checkpointing is how long the run has spent writing checkpoints, as
	// its program reported it (StepProgress.checkpoint_duration, the highest
	// over its nodes: only one rank writes them), for goodput.
	Checkpointing time.Duration `json:"checkpointing,omitempty"`
	// Last is when the run last moved (zero: never reported).
	Last time.Time `json:"last,omitzero"`
	// KeptAt and CheckpointKeptAt are when the scheduler last kept a
	// report, and one with a new checkpoint: the bound on how often a
	// run's nodes make it write (domain.MinProgressInterval).
	KeptAt           time.Time `json:"kept_at,omitzero"`
	CheckpointKeptAt time.Time `json:"checkpoint_kept_at,omitzero"`
}

// Key returns the run's record key.
func (r *RunRecord) Key() string { return RunKey(r.Job, r.Attempt) }

// RunKey returns the record key of a job's attempt.
func RunKey(job string, attempt int32) string {
	return job + "#" + strconv.FormatInt(int64(attempt), 10)
}

// Holds reports whether the run still holds its allocation on node.
func (r *RunRecord) Holds(node string) bool {
	if r.Released {
		return false
	}
	st, ok := r.Steps[node]
	return ok && !st.Abandoned
}

// Ended reports whether the attempt is over (its job left RUNNING for it),
// though its steps may still be ending.
func (r *RunRecord) Ended() bool { return !r.End.IsZero() }

// Step is one node's part of a run.
type Step struct {
	// State is the agent's last report; STEP_STATE_UNSPECIFIED until the first.
	State    eventsv1.StepState `json:"state"`
	ExitCode int32              `json:"exit_code,omitempty"`
	// ExitSignal is the agent's StepChanged.exit_signal (nil: not said).
	ExitSignal *int32 `json:"exit_signal,omitempty"`
	Message    string `json:"message,omitempty"`
	// Abandoned: the node failed or left, so the step counts as ended and
	// the node's resources are free without waiting for its agent's word.
	Abandoned bool `json:"abandoned,omitempty"`
	// Idle: the node is allocated but runs no process (a batch job's nodes
	// other than the batch host); it is released with the run.
	Idle bool `json:"idle,omitempty"`
	// FenceUntil (non-zero): the node failed while this step ran on it, but
	// its processes may live on (a paused or cut-off agent): the step was
	// told to stop and holds the node — and the job's next attempt — until
	// it reports its end, the node is repaired or removed, or FenceUntil
	// passes; then it is abandoned.
	FenceUntil time.Time `json:"fence_until,omitzero"`
	// Usage is what the step's processes used (its batch script's, on the
	// batch host), as its agent last reported it: final with its end
	// (nil: nothing reported).
	Usage *acct.Usage `json:"usage,omitempty"`
	// UsageAt is when the scheduler last kept a usage report of this node
	// for the run (UsageReported): reports closer together are dropped.
	UsageAt time.Time `json:"usage_at,omitzero"`
}

// Fenced reports whether the step holds a failed node while its processes
// may still run there (see FenceUntil).
func (s Step) Fenced() bool { return !s.FenceUntil.IsZero() && !s.Terminal() }

// Terminal reports whether the step has ended (an idle one never runs).
func (s Step) Terminal() bool {
	if s.Abandoned || s.Idle {
		return true
	}
	switch s.State {
	case eventsv1.StepState_STEP_EXITED, eventsv1.StepState_STEP_FAILED_TO_START,
		eventsv1.StepState_STEP_KILLED, eventsv1.StepState_STEP_LOST:
		return true
	}
	return false
}

// JobStep is one job step of a run: tasks on len(Nodes) nodes of its
// allocation, ranked by its Distribution (Ranks; block's without one: node
// 0 has ranks 0..Tasks[0]-1, and so on).
type JobStep struct {
	ID        int32    `json:"id"`
	RequestID string   `json:"request_id,omitempty"`
	Command   []string `json:"command"`
	// Nodes are node names in step rank order (SLURM_NODEID); Hostnames
	// and Tasks (tasks per node) match them.
	Nodes     []string `json:"nodes"`
	Hostnames []string `json:"hostnames"`
	Tasks     []int32  `json:"tasks"`
	// OutputDir holds task-<rank>.out and .err of every task.
	OutputDir     string `json:"output_dir,omitempty"`
	KillOnBadExit bool   `json:"kill_on_bad_exit,omitempty"`
	// Parts are the agents' reports on each node's tasks, node for node.
	Parts []StepPart `json:"parts"`
	// ExitCodes are the tasks' exit codes by rank.
	ExitCodes []int32 `json:"exit_codes"`
	// ExitSignals are the signals that killed the tasks, by rank (0: the
	// task exited, with its ExitCodes), as the agents said
	// (TasksChanged.exit_signals); nil when any part did not say.
	ExitSignals []int32 `json:"exit_signals,omitempty"`
	// State is RUNNING until every part ended, then COMPLETED, FAILED or
	// CANCELLED; Reason says why it failed or was cancelled.
	State  loomv1.JobState `json:"state"`
	Reason string          `json:"reason,omitempty"`
	// Stopping records that the step's tasks were told to stop (so that it
	// is done once); Cancelled that its end is CANCELLED (scancel of the
	// step, or the end of the job's attempt).
	Stopping  bool      `json:"stopping,omitempty"`
	Cancelled bool      `json:"cancelled,omitempty"`
	Start     time.Time `json:"start,omitzero"`
	End       time.Time `json:"end,omitzero"`
	// GPUs are, node for node (as Nodes), the job's GPU indices the step's
	// tasks were given (srun --gpus-per-task, --gpus-per-node or a --gpus
	// of its own; nil without): while the step runs, another such step of
	// the job takes others first.
	GPUs [][]int32 `json:"gpus,omitempty"`
	// CPUs are, node for node (as Nodes), the job's CPUs the step holds
	// until it ends (nil: none, an --overlap step's). A step that waits for
	// resources (State PENDING) has no nodes yet; its request is kept
	// beside the run (the domain's StepRequestKey).
	CPUs []int32 `json:"cpus,omitempty"`
	// Overlap: the step holds nothing (srun --overlap).
	Overlap bool `json:"overlap,omitempty"`
	// GPURequest, GPUsPerTask, CPUsPerGPU and CPUsPerTask are what srun
	// asked (--gpus, --gpus-per-task, --cpus-per-gpu, -c; 0: not given),
	// kept for scontrol show step (loomv1.JobStep's gpus...cpus_per_task).
	GPURequest  int32 `json:"gpu_request,omitempty"`
	GPUsPerTask int32 `json:"gpus_per_task,omitempty"`
	CPUsPerGPU  int32 `json:"cpus_per_gpu,omitempty"`
	CPUsPerTask int32 `json:"cpus_per_task,omitempty"`
	// GPUBindNone: srun --gpu-bind=none. The step holds GPUsPerTask GPUs
	// a task as without it, but its tasks share them on each node (GPUs
	// above) rather than each seeing its own.
	GPUBindNone bool `json:"gpu_bind_none,omitempty"`
	// GPUsPerNode is srun's --gpus-per-node (--gres=gpu:N; 0: not given),
	// kept for scontrol show step's TresPerNode; the step holds that many
	// of the job's GPUs on each of its nodes (GPUs above).
	GPUsPerNode int32 `json:"gpus_per_node,omitempty"`
	// AllocationCPUs: srun outside a job, without -n (loomv1.JobStep's
	// allocation_cpus), for scontrol show step's TresPerStep.
	AllocationCPUs bool `json:"allocation_cpus,omitempty"`
	// CancelledBy is who cancelled the step (scancel JOB.STEP), the
	// account the gateway authenticated: sacct's "CANCELLED by UID".
	CancelledBy string `json:"cancelled_by,omitempty"`
	// Distribution is srun's -m, as the step was asked with it (a
	// slurmspec.Distribution's Spec; "": none, block's layout, as steps
	// recorded before it was kept). It numbers the tasks: Ranks.
	Distribution string `json:"distribution,omitempty"`
}

// StepPart is one node's tasks of a job step, as its agent last reported.
type StepPart struct {
	State   eventsv1.StepState `json:"state,omitempty"`
	Message string             `json:"message,omitempty"`
	// Usage is what the node's tasks used, by local id, as last reported
	// (final with their end; empty: nothing reported).
	Usage []acct.Usage `json:"usage,omitempty"`
}

// Terminal reports whether the node's tasks have ended.
func (p StepPart) Terminal() bool {
	switch p.State {
	case eventsv1.StepState_STEP_EXITED, eventsv1.StepState_STEP_FAILED_TO_START,
		eventsv1.StepState_STEP_KILLED, eventsv1.StepState_STEP_LOST:
		return true
	}
	return false
}

// Ended reports whether every task of the step has ended.
func (s *JobStep) Ended() bool { return s.State.Terminal() }

// Ranks are the global ranks (SLURM_PROCID) of the tasks of each of the
// step's nodes, by local id: its Tasks laid out by its Distribution
// (slurmspec.TaskRanks; block's for a distribution that no longer parses,
// which the scheduler never records).
func (s *JobStep) Ranks() [][]int32 {
	d, _ := slurmspec.ParseDistribution(s.Distribution)
	return slurmspec.TaskRanks(d, s.Tasks)
}

// Clone returns a copy of the step that shares nothing the domain edits
// (its parts and exit codes), for copy-on-write.
func (s *JobStep) Clone() JobStep {
	c := *s
	c.Parts = append([]StepPart(nil), s.Parts...)
	c.ExitCodes = append([]int32(nil), s.ExitCodes...)
	c.ExitSignals = append([]int32(nil), s.ExitSignals...)
	return c
}
