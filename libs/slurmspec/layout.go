package slurmspec

import (
	"fmt"
	"strconv"
	"strings"
)

// AllocTasksPerNode is an allocation's SLURM_TASKS_PER_NODE, node by node,
// as Slurm 22.05 sets it for a batch script and for salloc's command
// (env_array_for_batch_job, env_array_for_job): the tasks the job asked for
// (tasksAsked: -n or --ntasks-per-node, laid out as tasks holds them),
// else each node's CPUs (cpus) over --cpus-per-task (at least 1 a node):
// -N2 is 1(x2), --exclusive on 16 CPUs 16, --gpus=3 -N2 --cpus-per-gpu=2
// 4,2. tasks and cpus have one entry per node; the result is a new slice.
func AllocTasksPerNode(tasks, cpus []int32, tasksAsked bool, cpusPerTask int32) []int32 {
	if tasksAsked {
		return append([]int32(nil), tasks...)
	}
	cpt := max(cpusPerTask, 1)
	out := make([]int32, len(cpus))
	for i, c := range cpus {
		out[i] = max(c/cpt, 1)
	}
	return out
}

// CompressCounts writes per-node counts as Slurm's SLURM_TASKS_PER_NODE and
// SLURM_JOB_CPUS_PER_NODE write them: runs of equal counts as "N(xK)",
// e.g. "2(x3),1".
func CompressCounts(counts []int32) string {
	var b strings.Builder
	for i := 0; i < len(counts); {
		j := i
		for j+1 < len(counts) && counts[j+1] == counts[i] {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(int(counts[i])))
		if j > i {
			b.WriteString("(x" + strconv.Itoa(j-i+1) + ")")
		}
		i = j + 1
	}
	return b.String()
}

// TaskLayout is the tasks on each of a job's n nodes, as the scheduler
// lays them out and every Slurm command that shows them reads them:
// --ntasks-per-node on every node, else --ntasks spread over the nodes
// (Share: the first ones take the remainder, so -n1 -N2 is 1 and 0), else
// one a node. It is the one rule, so that salloc's SLURM_TASKS_PER_NODE
// and a batch script's agree.
func TaskLayout(ntasksPerNode, ntasks int32, n int) []int32 {
	out := make([]int32, n)
	for i := range out {
		switch {
		case ntasksPerNode > 0:
			out[i] = ntasksPerNode
		case ntasks > 0:
			out[i] = Share(ntasks, n, i)
		default:
			out[i] = 1
		}
	}
	return out
}

// Share is node i's share of total spread as evenly as possible over n
// nodes, the first ones taking one more while a remainder lasts (7 over 3:
// 3, 2, 2), as Slurm spreads --ntasks and --gpus. n must be positive.
func Share(total int32, n, i int) int32 {
	s := total / int32(n)
	if int32(i) < total%int32(n) {
		s++
	}
	return s
}

// FitNodesToTasks is Slurm's rule for more nodes than tasks, from the
// option check its sbatch, salloc and srun share (measured beside Slurm
// 22.05): a node would run no task, so a minimum node count above the
// task count drops to it ("can't run 1 processes on 2 nodes, setting
// nnodes to 1": lowered is true), and a range's maximum above the task
// count drops to it without a word (-N1-4 -n2 is 1-2; -N2-3 -n1 is 1).
// ntasks 0 (not given), like nodes 0 (not given) and most 0 (no range),
// changes nothing.
func FitNodesToTasks(ntasks, nodes, most int32) (n, m int32, lowered bool) {
	n, m = nodes, most
	if ntasks <= 0 {
		return n, m, false
	}
	if n > ntasks {
		n, lowered = ntasks, true
	}
	if m > ntasks {
		m = ntasks
	}
	return n, m, lowered
}

// TasksForNodes is the task count a job keeps when scontrol update gives
// it a minimum of nodes: Slurm 22.05's controller (measured beside it)
// raises a task count below the new minimum to it (-n1, then NumNodes=2:
// NumTasks=2, NumTasks=1 in the same update too) and keeps one at or above
// it. It does not lower nodes to tasks as the commands do
// (FitNodesToTasks): NumTasks=1 on a two-node job is two nodes, one task.
// ntasks 0 (not given: a task a node) stays 0. A raised count is at most
// MaxJobTasks, the bound every job's tasks keep (a node count is judged
// against the cluster only at the gateway, and the scheduler's counters
// rely on the bound): a job with more nodes than that never fits anyway.
func TasksForNodes(ntasks, nodes int32) int32 {
	if ntasks > 0 && ntasks < nodes {
		return max(ntasks, min(nodes, MaxJobTasks))
	}
	return ntasks
}

// NodesForTasksWarning is the words Slurm's sbatch, salloc and srun print
// (after "PROG: Warning: ") when FitNodesToTasks lowers a node count.
func NodesForTasksWarning(ntasks, nodes int32) string {
	return fmt.Sprintf("can't run %d processes on %d nodes, setting nnodes to %d", ntasks, nodes, ntasks)
}
