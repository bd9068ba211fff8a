package domain

import (
	"fmt"
	"path/filepath"

	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/resname"
	"github.com/loom-ml/loom/libs/slurmspec"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// ValidateCreateJobStep checks a CreateJobStepRequest's own fields, every
// problem at once: parent a job name, a command, counts not negative and
// ntasks at most slurmspec.MaxStepTasks (and the other counts within slurmspec's bounds), an environment of sane names, command and
// environment within MaxArgs/MaxArgvBytes and MaxEnvVars/MaxEnvBytes (they
// travel in every LaunchTasks command) and without NUL bytes.
func ValidateCreateJobStep(req *loomv1.CreateJobStepRequest) error {
	var v errs.Validator
	if _, err := resname.ParseJob(req.GetParent()); err != nil {
		v.Add("parent", "%v", err)
	}
	v.Check(len(req.GetCommand()) > 0 && req.GetCommand()[0] != "", "command", "required: the program every task runs")
	v.Check(req.GetNodeCount() >= 0, "node_count", "must not be negative, got %d", req.GetNodeCount())
	v.Check(req.GetNtasks() >= 0 && req.GetNtasks() <= slurmspec.MaxStepTasks, "ntasks", "must be 0..%d, got %d", slurmspec.MaxStepTasks, req.GetNtasks())
	v.Check(req.GetNtasksPerNode() >= 0 && req.GetNtasksPerNode() <= slurmspec.MaxTasksPerNode, "ntasks_per_node",
		"must be 0..%d, got %d", slurmspec.MaxTasksPerNode, req.GetNtasksPerNode())
	v.Check(req.GetCpusPerTask() >= 0 && req.GetCpusPerTask() <= slurmspec.MaxCPUsPerTask, "cpus_per_task",
		"must be 0..%d, got %d", slurmspec.MaxCPUsPerTask, req.GetCpusPerTask())
	checkArgv(&v, "command", req.GetCommand())
	// A step's variables are named as a job's are.
	for k := range req.GetEnv() {
		v.Check(slurmspec.ValidEnvName(k), "env["+clipKey(k)+"]",
			"not a valid environment variable name (an identifier, or an exported bash function BASH_FUNC_name%%%%)")
	}
	checkEnv(&v, "env", req.GetEnv())
	checkText(&v, "work_dir", req.GetWorkDir(), MaxPathBytes)
	// As a job's: an agent would resolve a relative one against its own
	// directory, not the caller's.
	v.Check(req.GetWorkDir() == "" || filepath.IsAbs(req.GetWorkDir()), "work_dir", "%s must be an absolute path", clip(req.GetWorkDir()))
	checkRequestID(&v, req.GetRequestId())
	if err := slurmspec.ParseInput(req.GetInput(), int(req.GetNtasks())); err != nil {
		v.Add("input", "%v", err)
	}
	// The terminal is task 0's: only it may read srun's input then.
	v.Check(!req.GetPty() || req.GetInput() == "" || req.GetInput() == "0", "input", "with pty only task 0 reads input, got %s", clip(req.GetInput()))
	v.Check(req.GetPtyRows() >= 0 && req.GetPtyRows() <= slurmspec.MaxTermSize, "pty_rows", "must be 0..%d, got %d", slurmspec.MaxTermSize, req.GetPtyRows())
	v.Check(req.GetPtyCols() >= 0 && req.GetPtyCols() <= slurmspec.MaxTermSize, "pty_cols", "must be 0..%d, got %d", slurmspec.MaxTermSize, req.GetPtyCols())
	v.Check(req.GetGpusPerTask() >= 0 && req.GetGpusPerTask() <= slurmspec.MaxGPUsPerTask, "gpus_per_task", "must be 0..%d, got %d", slurmspec.MaxGPUsPerTask, req.GetGpusPerTask())
	v.Check(req.GetGpus() >= 0 && req.GetGpus() <= slurmspec.MaxJobGPUs, "gpus", "must be 0..%d, got %d", slurmspec.MaxJobGPUs, req.GetGpus())
	v.Check(req.GetCpusPerGpu() >= 0 && req.GetCpusPerGpu() <= slurmspec.MaxCPUsPerGPU, "cpus_per_gpu", "must be 0..%d, got %d", slurmspec.MaxCPUsPerGPU, req.GetCpusPerGpu())
	v.Check(req.GetGpusPerNode() >= 0 && req.GetGpusPerNode() <= slurmspec.MaxJobGPUs, "gpus_per_node", "must be 0..%d, got %d", slurmspec.MaxJobGPUs, req.GetGpusPerNode())
	for _, l := range []struct {
		field string
		hosts []string
	}{{"nodelist", req.GetNodelist()}, {"exclude", req.GetExclude()}} {
		v.Check(len(l.hosts) <= MaxHosts, l.field, "%d hosts, more than the limit of %d", len(l.hosts), MaxHosts)
		for i, h := range l.hosts {
			v.Check(resname.ValidID(h), fmt.Sprintf("%s[%d]", l.field, i), "%s is not a hostname", clip(h))
		}
	}
	v.Check(req.GetRelative() >= 0 && req.GetRelative() < MaxHosts, "relative", "must be 0..%d, got %d", MaxHosts-1, req.GetRelative())
	if _, err := slurmspec.ParseDistribution(req.GetDistribution()); err != nil {
		v.Add("distribution", "%s: %v (block, cyclic, plane=N or arbitrary, at most two more :levels and ,Pack or ,NoPack, at most 64 characters)",
			clip(req.GetDistribution()), err)
	}
	if err := v.Err(); err != nil {
		return err
	}
	checkCommandSize(&v, "request", &eventsv1.CreateJobStep{Job: req.GetParent(), RequestId: req.GetRequestId(),
		Command: req.GetCommand(), Env: req.GetEnv(), WorkDir: req.GetWorkDir(), NodeCount: req.GetNodeCount(),
		Ntasks: req.GetNtasks(), NtasksPerNode: req.GetNtasksPerNode(), CpusPerTask: req.GetCpusPerTask(), Input: req.GetInput(),
		Pty: req.GetPty(), PtyRows: req.GetPtyRows(), PtyCols: req.GetPtyCols(), GpusPerTask: req.GetGpusPerTask(),
		Nodelist: req.GetNodelist(), Exclude: req.GetExclude(), Relative: req.GetRelative(), Exact: req.GetExact(), Overlap: req.GetOverlap(),
		Gpus: req.GetGpus(), CpusPerGpu: req.GetCpusPerGpu(), GpuBindNone: req.GetGpuBindNone(), Distribution: req.GetDistribution(),
		GpusPerNode: req.GetGpusPerNode(), GpusInherited: req.GetGpusInherited(), NoGpus: req.GetNoGpus(),
		AllocationCpus: req.GetAllocationCpus()})
	return v.Err()
}

// CheckCreateJobStep refuses a step for a job that does not run, in Slurm's
// words: "Job is pending execution" or "Job/step already completing or
// completed"; and a step asking for more nodes than the job has
// (InvalidArgument naming node_count).
func CheckCreateJobStep(job *loomv1.Job, req *loomv1.CreateJobStepRequest) error {
	switch s := job.GetState(); {
	case TakesSteps(s):
	case Rank(s) == 0:
		return refuse(MsgPending)
	default:
		return refuse(MsgAlreadyDone)
	}
	if n := int32(len(job.GetNodes())); n > 0 && req.GetNodeCount() > n {
		return errs.Invalid("node_count", "Requested node configuration is not available: the job has %d node(s), %d requested", n, req.GetNodeCount())
	}
	return nil
}

// TakesSteps reports whether a job in state s may start job steps: it runs
// (CONFIGURING counts: a job an earlier scheduler stored so until every
// node had reported ran its batch script meanwhile).
func TakesSteps(s loomv1.JobState) bool {
	return s == loomv1.JobState_RUNNING || s == loomv1.JobState_CONFIGURING
}
