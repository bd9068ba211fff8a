package loomv1

// Terminal reports whether a job in state s has ended: it changes again only
// if it is requeued. This is the one place that says which states are final;
// the services, the CLI and the Slurm commands all ask it.
func (s JobState) Terminal() bool {
	switch s {
	case JobState_COMPLETED, JobState_FAILED, JobState_CANCELLED, JobState_TIMEOUT,
		JobState_NODE_FAIL, JobState_OUT_OF_MEMORY, JobState_PREEMPTED:
		return true
	}
	return false
}
