// Package slurmmap is what the scheduler's real-Slurm backend
// (-backend=slurm, docs/slurm-backend.md) carries out: the one predicate
// both the gateway, which refuses the rest when the command is made
// (FailedPrecondition, before anything is recorded or published), and the
// backend, which refuses it again when it consumes the command (a command
// already on loom.job.commands.v1, or sent by a gateway that was not told
// the backend), read, so that the two cannot drift.
//
// What is not mapped is refused rather than dropped: a job run without its
// array, on other hosts or without its retries would be silently wrong.
package slurmmap

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/slurmspec"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// Backend is the scheduler backend this package describes, as
// LOOM_SCHEDULER_BACKEND (the scheduler's -backend, the gateway's
// -scheduler-backend) names it.
const Backend = "slurm"

// Name is how refusals name the backend.
const Name = "the slurm scheduler backend"

// The UpdateJob actions the backend carries out (the built-in engine's
// hold, uhold and release); every other is refused (Update).
const (
	ActionHold    = "hold"
	ActionUHold   = "uhold"
	ActionRelease = "release"
)

// Refusal is the reason a refused command or job carries: what, the
// backend, and where the mapping is documented.
func Refusal(what string) string {
	return fmt.Sprintf("%s is not supported by %s yet (docs/slurm-backend.md)", what, Name)
}

// Refuse is Refusal as an error wrapping errs.FailedPrecondition (gRPC
// FailedPrecondition): the request is well formed, this deployment's
// scheduler does not carry it out.
func Refuse(what string) error {
	return fmt.Errorf("%s: %w", Refusal(what), errs.FailedPrecondition)
}

// Job names the first option of j that has no mapping to Slurm's
// submission ("" when j maps).
func Job(j *loomv1.Job) string {
	checks := []struct {
		set  bool
		what string
	}{
		{len(j.GetCommand()) > 0, "a job given as a command (not a batch script)"},
		{j.GetArray() != "" || j.GetArrayJobId() != "", "job arrays (--array)"},
		{j.GetNice() != 0, "nice (--nice)"},
		{len(j.GetNodelist()) > 0, "node lists (--nodelist)"},
		{len(j.GetExclude()) > 0, "excluded nodes (--exclude)"},
		{j.GetExclusive() || j.GetExclusiveUser(), "exclusive allocations (--exclusive)"},
		{j.GetMaxNodeCount() > 0 && j.GetMaxNodeCount() != j.GetNodeCount(), "node count ranges (-N min-max)"},
		{j.GetGpus() > 0 && !(j.GetGpusPerNode() > 0), "GPUs per job (--gpus; use --gpus-per-node)"},
		{j.GetGpusPerTask() > 0, "GPUs per task (--gpus-per-task)"},
		{j.GetCpusPerGpu() > 0, "CPUs per GPU (--cpus-per-gpu)"},
		{j.GetMemPerCpuMb() > 0, "memory per CPU (--mem-per-cpu; use --mem)"},
		{j.GetGpuType() != "", "GPU types (--gres=gpu:TYPE:N)"},
		{j.GetNtasksPerNode() > 0, "tasks per node (--ntasks-per-node)"},
		{j.GetSignal() != "", "a signal before the time limit (--signal)"},
		{j.GetOpenMode() != "" && j.GetOpenMode() != slurmspec.OpenModeTruncate, "--open-mode=append"},
		{j.GetMaxRetries() > 0, "retries (max_retries)"},
		{j.GetHangTimeoutSeconds() != 0, "hang detection (hang_timeout_seconds)"},
		{j.GetCheckpointDir() != "", "checkpoint-aware requeue (checkpoint_dir)"},
		{j.GetModelOutput() != nil, "model outputs (model_output)"},
	}
	for _, c := range checks {
		if c.set {
			return c.what
		}
	}
	return ""
}

// Update names what of p the backend does not carry out ("" when it
// does): hold, uhold and release alone, with no field to change.
func Update(p *eventsv1.UpdateJob) string {
	switch p.GetAction() {
	case ActionHold, ActionUHold, ActionRelease:
	default:
		return "scontrol requeue/update (UpdateJob " + p.GetAction() + ")"
	}
	// Any field beyond whom and what is a change the backend does not
	// make: checked on what is left once those are cleared, so that a
	// field UpdateJob gains later is refused here rather than dropped.
	rest := proto.Clone(p).(*eventsv1.UpdateJob)
	rest.Job, rest.Cluster, rest.Action, rest.User, rest.Admin = "", "", "", "", false
	if !proto.Equal(rest, &eventsv1.UpdateJob{}) {
		return "scontrol requeue/update (UpdateJob " + p.GetAction() + " with fields to change)"
	}
	return ""
}

// Command names what of the job command cmd (a payload of
// loom.job.commands.v1) the backend does not carry out, whatever the
// state of the job ("" when it may): Job for a submission, Update for an
// update, and the commands the backend has no mapping for at all. What
// depends on the job's state in Slurm (a hold of a job not in Slurm yet,
// a dependency Slurm cannot wait on) is the backend's alone to judge.
// Accounts and associations (AccountChanged, AssociationChanged) are not
// judged here: the gateway keeps them for its own checks (MaxSubmitJobs,
// the account a job is charged to), only the backend leaves them to
// Slurm's own accounting.
func Command(cmd proto.Message) string {
	switch p := cmd.(type) {
	case *eventsv1.SubmitJob:
		return Job(p.GetJob())
	case *eventsv1.UpdateJob:
		return Update(p)
	case *eventsv1.CancelJob:
		switch {
		case p.GetBatch() || p.GetFull():
			return "signalling the batch shell or the whole job alone (scancel --batch/--full)"
		case p.ExitCode != nil:
			return "ending an allocation with an exit code (srun/salloc)"
		}
	case *eventsv1.CreateJobStep:
		return "job steps from outside the job (srun --jobid, salloc)"
	case *eventsv1.CancelJobStep:
		return "cancelling a job step (scancel JOB.STEP)"
	case *eventsv1.UpdateSlurmNode:
		return "draining and resuming nodes (scontrol update node)"
	}
	return ""
}
