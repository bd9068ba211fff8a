package slurmspec

import (
	"math"
	"strconv"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// Bounds of the counts a job or a job step asks for (sbatch's and srun's
// -n, --ntasks-per-node, -c, -G). The gateway refuses more, naming the
// field, and the scheduler clamps what reaches it another way. They keep
// every product of them within the scheduler's 32-bit counters (tasks per
// node times CPUs per task is at most 2^24) and whatever is sized by them
// (a step's task list, its SLURM_GTIDS) within a few megabytes.
const (
	// MaxTasksPerNode bounds --ntasks-per-node, a job's or a step's.
	MaxTasksPerNode = 4096
	// MaxCPUsPerTask bounds --cpus-per-task.
	MaxCPUsPerTask = 4096
	// MaxCPUsPerGPU bounds --cpus-per-gpu.
	MaxCPUsPerGPU = 4096
	// MaxJobTasks bounds a job's --ntasks (over all its nodes).
	MaxJobTasks = 1 << 20
	// MaxJobGPUs bounds a job's --gpus (over all its nodes).
	MaxJobGPUs = 1 << 20
	// MaxStepTasks bounds the tasks of one job step (srun -n).
	MaxStepTasks = 4096
	// MaxGPUsPerTask bounds a step's --gpus-per-task.
	MaxGPUsPerTask = 1024
	// MaxMemMB bounds a job's memory, --mem and --mem-per-cpu, in MiB: 1
	// EiB, past any machine (a node whose memory is unknown takes any
	// request). It keeps a job's memory over its nodes within an int64.
	MaxMemMB = MaxTRESMemMB
	// MaxTimeLimitSeconds bounds a time limit (--time, a partition's
	// MaxTime): a century; anything above is a typo, and seconds past 292
	// years overflow a time.Duration.
	MaxTimeLimitSeconds = 100 * 365 * 24 * 3600
)

// MaxNice bounds --nice either way (Slurm's NICE_OFFSET - 3): a job's
// priority is lowered by at most this much, and raised (by an
// administrator) by at most as much.
const MaxNice = 2147483645

// CPUsPerNode is what a job asks of each of its nodes' CPUs, as Slurm
// counts it: its tasks per node (--ntasks-per-node, else --ntasks spread
// over nodes, rounded up, else 1) times --cpus-per-task (1 when unset), or
// the node's GPUs times --cpus-per-gpu when that is more (select/cons_tres:
// --gres=gpu:2 --cpus-per-gpu=3 is 6 CPUs, with -n8 8). In 64 bits: the
// most tasks on one node times the most CPUs a task is 2^32, past an int32.
func CPUsPerNode(ntasksPerNode, ntasks, cpusPerTask int32, nodes int, gpusPerNode, cpusPerGPU int32) int64 {
	tpn := int64(1)
	switch n := int64(max(nodes, 1)); {
	case ntasksPerNode > 0:
		tpn = int64(ntasksPerNode)
	case ntasks > 0:
		tpn = (int64(ntasks) + n - 1) / n
	}
	return NodeCPUs(tpn, int64(cpusPerTask), int64(gpusPerNode), int64(cpusPerGPU))
}

// NodeCPUs is the CPUs a job takes on one node that holds tasks of its
// tasks and gpus of its GPUs, as Slurm's select/cons_tres counts them: the
// tasks (at least 1) times --cpus-per-task (at least 1), or the GPUs times
// --cpus-per-gpu when that is more. It is the one rule CPUsPerNode (a
// request's), the scheduler (a run's nodes) and the Slurm commands (what
// they show) apply, so that they agree.
func NodeCPUs(tasks, cpusPerTask, gpus, cpusPerGPU int64) int64 {
	return max(max(tasks, 1)*max(cpusPerTask, 1), max(gpus, 0)*max(cpusPerGPU, 0))
}

// RangeWidest is the widest start worth trying of job, whose request at
// its minimum has least nodes: its node range's maximum (at most its
// tasks, as Slurm gives a range no more nodes than tasks) when the
// per-node request depends on the width, which is when the job gives -n
// alone (no --ntasks-per-node) and no GPUs spread over its nodes (--gpus
// without a per-node count keeps its minimum, as Slurm's -N1-3 --gpus=4
// runs on 1 node); else least. The scheduler places a range at each width
// from this down to least, each with its own per-node share (JobCPUsPerNode,
// WidthMemMB), and sbatch --test-only estimates it the same way: the one
// rule, so that the estimate tries the widths the scheduler does.
func RangeWidest(job *loomv1.Job, least int) int {
	n := job.GetNtasks()
	if n <= 0 || job.GetNtasksPerNode() > 0 || job.GetGpusPerNode() == 0 && job.GetGpus() > 0 {
		return least
	}
	return max(least, int(min(job.GetMaxNodeCount(), n)))
}

// JobCPUsPerNode is CPUsPerNode for job over nodes nodes with gpusPerNode
// GPUs on each (its --gpus spread, rounded up, when it gives no per-node
// count), clamped to an int32: a width's per-node CPU share.
func JobCPUsPerNode(job *loomv1.Job, nodes int, gpusPerNode int32) int32 {
	return int32(min(CPUsPerNode(job.GetNtasksPerNode(), job.GetNtasks(), job.GetCpusPerTask(), nodes,
		gpusPerNode, job.GetCpusPerGpu()), math.MaxInt32))
}

// WidthMemMB is the memory a node of job holds at a width whose per-node
// CPU share is cpus: --mem-per-cpu (mem_per_cpu_mb) times those CPUs, as
// Slurm sizes --mem-per-cpu by the CPUs a node gets, so that a node range
// placed wider asks each node for less; else mem_mb (--mem, the same at
// every width). Saturates at math.MaxInt64 rather than wrapping.
func WidthMemMB(job *loomv1.Job, cpus int32) int64 {
	per := job.GetMemPerCpuMb()
	if per <= 0 {
		return job.GetMemMb()
	}
	return MulSat(per, int64(max(cpus, 1)))
}

// MulSat is a*b for a, b >= 0, math.MaxInt64 where that would wrap: the
// sizes Loom multiplies out of a caller's counts (memory a CPU times CPUs,
// a node's figures times nodes) saturate rather than wrap to a negative
// that passes a bound.
func MulSat(a, b int64) int64 {
	if a > 0 && b > math.MaxInt64/a {
		return math.MaxInt64
	}
	return a * b
}

// JobGPUEnv sets in env the job's GPU request as Slurm 22.05's sbatch and
// salloc export it (measured beside it): SLURM_GPUS with --gpus,
// SLURM_GPUS_PER_NODE with --gpus-per-node but not with --gres=gpu:N
// (which Loom keeps as the same request: gres_gpus says which was given),
// and SLURM_GPUS_PER_TASK with --gpus-per-task, beside which only a
// --gpus given stands (gpus_given; the job's other counts are derived from
// it, not options given: Slurm's -n2 --gpus-per-task=1 script has
// SLURM_GPUS_PER_TASK=1 alone, and a SLURM_GPUS there would be every
// srun's --gpus default besides, while --gpus=4 --gpus-per-task=2 has
// SLURM_GPUS=4 too). The batch script's (the scheduler's) and salloc's
// shell's (the CLI's) are the one rule: their sruns read them as defaults.
func JobGPUEnv(job *loomv1.Job, env map[string]string) {
	if g := job.GetGpusPerTask(); g > 0 {
		env["SLURM_GPUS_PER_TASK"] = strconv.Itoa(int(g))
		if n := job.GetGpus(); n > 0 && job.GetGpusGiven() {
			env["SLURM_GPUS"] = strconv.Itoa(int(n))
		}
		return
	}
	if g := job.GetGpus(); g > 0 {
		env["SLURM_GPUS"] = strconv.Itoa(int(g))
	} else if g := job.GetGpusPerNode(); g > 0 && !job.GetGresGpus() {
		env["SLURM_GPUS_PER_NODE"] = strconv.Itoa(int(g))
	}
}
