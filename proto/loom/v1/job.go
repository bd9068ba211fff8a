package loomv1

// ClearOutputs clears the fields of a job that only the scheduler sets once
// it has the job (its run, placement, priority, accounting): what a caller
// submits in them is not to be trusted, and would otherwise show in squeue
// --start, scontrol show job or sacct as the scheduler's word. The gateway
// clears them as it accepts a job, and the scheduler as it takes one in.
// It leaves state and submit_time, which each sets itself.
func (j *Job) ClearOutputs() {
	j.StateReason, j.ExitCode, j.Nodes, j.OutputPath, j.ErrorPath = "", 0, nil, "", ""
	j.NodeTasks, j.NodeCpus = nil, nil
	j.StartTime, j.EndTime, j.HoldChangeTime = nil, nil, nil
	j.Priority, j.PriorityFactors, j.Placement = 0, nil, ""
	j.ExpectedStartTime, j.SchedNodes = nil, nil
	j.RestartCount, j.Runs, j.BatchHost, j.AllocGpus = 0, nil, "", 0
	j.Steps, j.StepsOmitted = nil, 0
	j.UserFailures, j.ExcludedNodes = 0, nil
	// Who cancelled it and how its program ended: sacct's "CANCELLED by
	// UID" and ExitCode, which a submitter must not write for the
	// scheduler.
	j.CancelledBy, j.ExitSignal, j.DerivedExitCode, j.DerivedExitSignal = "", nil, nil, nil
}
