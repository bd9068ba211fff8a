package domain

import loomv1 "github.com/loom-ml/loom/proto/loom/v1"

// shallowJob returns a new top-level copy of job that shares its
// sub-messages, lists and maps: what a version that differs from job only in
// top-level scalars needs, for a fraction of proto.Clone's cost (a pass that
// gives 100,000 jobs their first reason would otherwise deep-copy each one).
// Sharing is safe because a stored job's protobuf is never mutated: an edit
// starts from editJob's deep copy. TestShallowJobCopiesEveryField fails when
// a field is added to loomv1.Job and not here.
func shallowJob(job *loomv1.Job) *loomv1.Job {
	cp := new(loomv1.Job)
	shallowJobInto(cp, job)
	return cp
}

// shallowJobInto makes cp, a zero message, shallowJob's copy of job: the
// pass's reason-only versions are carved out of one allocation per batch
// (see reasonSlab) instead of one each.
func shallowJobInto(cp, job *loomv1.Job) {
	*cp = loomv1.Job{
		Name:               job.Name,
		JobId:              job.JobId,
		Cluster:            job.Cluster,
		DisplayName:        job.DisplayName,
		Command:            job.Command,
		Script:             job.Script,
		NodeCount:          job.NodeCount,
		MaxNodeCount:       job.MaxNodeCount,
		GpusPerNode:        job.GpusPerNode,
		GresGpus:           job.GresGpus,
		Env:                job.Env,
		ModelOutput:        job.ModelOutput,
		User:               job.User,
		Partition:          job.Partition,
		Ntasks:             job.Ntasks,
		NtasksPerNode:      job.NtasksPerNode,
		CpusPerTask:        job.CpusPerTask,
		MemMb:              job.MemMb,
		MemPerCpuMb:        job.MemPerCpuMb,
		GpuType:            job.GpuType,
		Gpus:               job.Gpus,
		GpusGiven:          job.GpusGiven,
		GpusPerTask:        job.GpusPerTask,
		CpusPerGpu:         job.CpusPerGpu,
		TimeLimitSeconds:   job.TimeLimitSeconds,
		Array:              job.Array,
		ArrayJobId:         job.ArrayJobId,
		ArrayTaskId:        job.ArrayTaskId,
		Dependency:         job.Dependency,
		Nice:               job.Nice,
		OutputPattern:      job.OutputPattern,
		ErrorPattern:       job.ErrorPattern,
		OpenMode:           job.OpenMode,
		Requeue:            job.Requeue,
		MaxRetries:         job.MaxRetries,
		HangTimeoutSeconds: job.HangTimeoutSeconds,
		CheckpointDir:      job.CheckpointDir,
		UserFailures:       job.UserFailures,
		ExcludedNodes:      job.ExcludedNodes,
		Exclusive:          job.Exclusive,
		ExclusiveUser:      job.ExclusiveUser,
		Qos:                job.Qos,
		Account:            job.Account,
		Nodelist:           job.Nodelist,
		Exclude:            job.Exclude,
		WorkDir:            job.WorkDir,
		Export:             job.Export,
		Signal:             job.Signal,
		BeginTime:          job.BeginTime,
		Hold:               job.Hold,
		SubmitDir:          job.SubmitDir,
		SubmitHost:         job.SubmitHost,
		ScriptPath:         job.ScriptPath,
		State:              job.State,
		StateReason:        job.StateReason,
		ExitCode:           job.ExitCode,
		ExitSignal:         job.ExitSignal,
		Nodes:              job.Nodes,
		NodeTasks:          job.NodeTasks,
		NodeCpus:           job.NodeCpus,
		OutputPath:         job.OutputPath,
		SubmitTime:         job.SubmitTime,
		StartTime:          job.StartTime,
		EndTime:            job.EndTime,
		HoldChangeTime:     job.HoldChangeTime,
		ErrorPath:          job.ErrorPath,
		Priority:           job.Priority,
		PriorityFactors:    job.PriorityFactors,
		Placement:          job.Placement,
		ExpectedStartTime:  job.ExpectedStartTime,
		SchedNodes:         job.SchedNodes,
		RestartCount:       job.RestartCount,
		Runs:               job.Runs,
		BatchHost:          job.BatchHost,
		AllocGpus:          job.AllocGpus,
		Steps:              job.Steps,
		StepsOmitted:       job.StepsOmitted,
		DerivedExitCode:    job.DerivedExitCode,
		DerivedExitSignal:  job.DerivedExitSignal,
		CancelledBy:        job.CancelledBy,
	}
	// Fields this build does not know (written by a newer one) go along.
	if u := job.ProtoReflect().GetUnknown(); len(u) > 0 {
		cp.ProtoReflect().SetUnknown(u)
	}
}
