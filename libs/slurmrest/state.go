package slurmrest

import (
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// approximations maps the job_state names slurmrestd 22.05 reports
// (Slurm's job_state_string: the flag name when a flag is set, else the
// base state) that Loom has no state of its own for, to the nearest one.
// The other states Loom shares with Slurm by name (loomv1.JobState follows
// Slurm's), so they need no table here; docs/slurm-backend.md lists both.
var approximations = map[string]loomv1.JobState{
	"BOOT_FAIL":    loomv1.JobState_NODE_FAIL,  // a node failed to boot for it: a node failure, terminal
	"DEADLINE":     loomv1.JobState_TIMEOUT,    // --deadline passed: ended for time, terminal
	"REQUEUE_HOLD": loomv1.JobState_REQUEUED,   // requeued and held; the hold is not a state in Loom
	"STAGE_OUT":    loomv1.JobState_COMPLETING, // burst buffer stage-out after the job ran
}

// LoomState returns the Loom state for Slurm job state s (Job.State). ok is
// false for a state Loom has no counterpart for (SUSPENDED, RESIZING,
// STOPPED, SPECIAL_EXIT, REVOKED, RESV_DEL_HOLD, SIGNALING, REQUEUE_FED) or
// an unknown word: the caller keeps the job's last known state and reports
// Slurm's word; it must not guess.
func LoomState(s string) (state loomv1.JobState, ok bool) {
	if st, ok := approximations[s]; ok {
		return st, true
	}
	if v, ok := loomv1.JobState_value[s]; ok && v != int32(loomv1.JobState_JOB_STATE_UNSPECIFIED) {
		return loomv1.JobState(v), true
	}
	return loomv1.JobState_JOB_STATE_UNSPECIFIED, false
}
