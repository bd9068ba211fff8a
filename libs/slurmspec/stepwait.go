package slurmspec

// Why a job step waits (JobStep.reason of a PENDING step): the scheduler
// records them, srun reads them to say what it waits for in Slurm 22.05's
// srun's words.
const (
	// ReasonStepBusy: the CPUs or GPUs the step asks for are held by the
	// job's running steps (slurmctld's ESLURM_NODES_BUSY). srun says "Job
	// N step creation temporarily disabled, retrying (Requested nodes are
	// busy)".
	ReasonStepBusy = "Requested nodes are busy"
	// ReasonStepProlog: the job runs, but its nodes have not reported its
	// allocation ready yet, its batch host's agent running the prolog
	// checks before the batch step (slurmctld refuses a step while the
	// job's prolog runs, ESLURM_PROLOG_RUNNING, and srun retries). srun
	// -v says "Resources allocated for job N and being configured, please
	// wait", as Slurm's srun does at -v.
	ReasonStepProlog = "Prolog is still running"
)
