package slurmrest

import (
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// slurmStates maps the job_state names slurmrestd 22.05 reports (Slurm's
// job_state_string: the flag name when a flag is set, else the base state)
// to Loom's states. Loom's JobState follows Slurm's, so most are the same
// word; the rest are listed in docs/slurm-backend.md with why.
var slurmStates = map[string]loomv1.JobState{
	"PENDING":       loomv1.JobState_PENDING,
	"RUNNING":       loomv1.JobState_RUNNING,
	"CONFIGURING":   loomv1.JobState_CONFIGURING,
	"COMPLETING":    loomv1.JobState_COMPLETING,
	"COMPLETED":     loomv1.JobState_COMPLETED,
	"FAILED":        loomv1.JobState_FAILED,
	"CANCELLED":     loomv1.JobState_CANCELLED,
	"TIMEOUT":       loomv1.JobState_TIMEOUT,
	"NODE_FAIL":     loomv1.JobState_NODE_FAIL,
	"PREEMPTED":     loomv1.JobState_PREEMPTED,
	"REQUEUED":      loomv1.JobState_REQUEUED,
	"OUT_OF_MEMORY": loomv1.JobState_OUT_OF_MEMORY,
	// Approximations: Loom has no state of its own for these.
	"BOOT_FAIL":    loomv1.JobState_NODE_FAIL,  // a node failed to boot for it: a node failure, terminal
	"DEADLINE":     loomv1.JobState_TIMEOUT,    // --deadline passed: ended for time, terminal
	"REQUEUE_HOLD": loomv1.JobState_REQUEUED,   // requeued and held; the hold is not a state in Loom
	"STAGE_OUT":    loomv1.JobState_COMPLETING, // burst buffer stage-out after the job ran
}

// LoomState returns the Loom state for Slurm job state s (Job.State). ok is
// false for a state Loom has no counterpart for (SUSPENDED, RESIZING,
// STOPPED, SPECIAL_EXIT, REVOKED, RESV_DEL_HOLD, SIGNALING, REQUEUE_FED) or an unknown word: the
// caller keeps the job's last known state and reports Slurm's word; it must
// not guess.
func LoomState(s string) (state loomv1.JobState, ok bool) {
	st, ok := slurmStates[s]
	return st, ok
}
