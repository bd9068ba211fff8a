// Package jobstore holds the scheduler's records as they are stored: the
// persisted fields of its jobs, runs (with their steps) and arrays, the pure
// methods that read only them, and their encoding (the bytes libs/store
// keeps under each hash field). The domain's record types embed these and
// keep their in-memory, pass-only fields beside them, so that a pass reads
// persisted and memory-only fields of one record without a look-up in
// between. It imports nothing of the domain.
package jobstore

import (
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// JobRecord is a job's persisted part: the resource and the scheduler's
// bookkeeping of its runs. domain.Job embeds it; the name is not Job so
// that the embedded field does not hide JobRecord.Job (j.Job stays the
// resource).
type JobRecord struct {
	// Job is the full resource as served by GetJob (priority, factors,
	// runs and placement are filled in when it is read). The domain never
	// mutates a Job that is in a State; it edits a copy inside a Change.
	Job *loomv1.Job `json:"-"`
	// Attempt counts the job's runs, from 1; 0 while it never ran.
	Attempt int32 `json:"attempt"`
	// ModelDir is $LOOM_MODEL_DIR of the current run ("" without model_output).
	ModelDir string `json:"model_dir,omitempty"`
	// Excluded are hostnames whose failure ended a run of the job: its
	// later runs never use them.
	Excluded []string `json:"excluded,omitempty"`
	// InfraRestarts counts the runs that ended for the infrastructure's
	// sake (a failed or hung node, a health action) and were requeued: they
	// are bounded by the cluster's -max-infra-restarts, not by the job's
	// max_retries (which counts the program's own failures, Job.user_failures).
	InfraRestarts int32 `json:"infra_restarts,omitempty"`
	// UnlaunchedRequeues counts the runs requeued because a step of theirs
	// never ran: its agent could not open its StartStep, sealed for another
	// registration of the node (the scheduler sealed it before it learnt
	// that the node registered again). Not the job's failure nor the
	// node's, so not counted in InfraRestarts and not refused to a
	// --no-requeue job; bounded by MaxUnlaunchedRequeues (domain), past
	// which such a run counts as an infrastructure restart.
	UnlaunchedRequeues int32 `json:"unlaunched_requeues,omitempty"`
	// Avoid is the hostname a run of the job last never launched on
	// (UnlaunchedRequeues): its next run keeps off it while other nodes
	// have room, and its start (or the node's repair or removal) ends
	// that. "" for none.
	Avoid string `json:"avoid,omitempty"`
	// Partitions is the partition list a running job named (-p a,b),
	// while Job.partition holds the one it started in (as slurmctld shows
	// a started job); a requeue puts it back in Job.partition. "" for a
	// job that named one partition, or is pending.
	Partitions string `json:"partitions,omitempty"`
}

// Name returns the job's full name.
func (j *JobRecord) Name() string { return j.Job.GetName() }

// Pending reports whether the job waits in the queue.
func (j *JobRecord) Pending() bool { return j.Job.GetState() == loomv1.JobState_PENDING }

// Running reports whether the job's current attempt is in progress:
// RUNNING, or CONFIGURING (a job an earlier scheduler started and stored
// so until every node's step reported running; a start is RUNNING now).
// Time limits, cancels, preemption and node failures treat both alike.
func (j *JobRecord) Running() bool {
	s := j.Job.GetState()
	return s == loomv1.JobState_RUNNING || s == loomv1.JobState_CONFIGURING
}

// Completing reports whether the job's attempt has ended but a step of its
// run has not reported its end yet (COMPLETING); its final state is the
// run's Outcome.
func (j *JobRecord) Completing() bool { return j.Job.GetState() == loomv1.JobState_COMPLETING }

// Terminal reports whether the job has ended (only a requeue changes it again).
func (j *JobRecord) Terminal() bool { return j.Job.GetState().Terminal() }

// Array is the record of a job array: its tasks (one job record each, job
// ids A+k), its % limit and the parts its tasks share. It has no
// memory-only fields; the domain uses it as is (domain.Array is an alias).
type Array struct {
	// Name is the array's name, that of its first task ("projects/p/jobs/A").
	Name    string `json:"name"`
	Cluster string `json:"cluster"`
	JobID   string `json:"job_id"`
	// Limit is the most tasks that run at once (0: no limit).
	Limit int32 `json:"limit,omitempty"`
	// Indexes are the task indexes in ascending order; Tasks the job names,
	// index for index.
	Indexes []int32  `json:"indexes"`
	Tasks   []string `json:"tasks"`
	// Template is the array's job as submitted and accepted (named as the
	// array, job id A): what its tasks share — environment, script, the whole
	// spec. It is kept once per array, as Slurm keeps one record for an
	// array's pending tasks: in memory every task's Job.Env is this map, and
	// the store writes each task as its difference from it. Never modified
	// (tasks' environments and scripts never change); nil for arrays
	// recorded before templates were.
	Template *loomv1.Job `json:"-"`
}
