package slurmspec

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/loom-ml/loom/libs/hostlist"
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

// PackTasks is the tasks on each of a job's nodes as Slurm 22.05's
// select/cons_tres (CR_Core) lays out --ntasks without --ntasks-per-node
// on nodes it does not hold whole (measured beside Slurm 22.05, 4-CPU
// nodes): every node takes one task, and the rest fill the nodes in order,
// each up to the tasks its free CPUs hold (free[i] / cpusPerTask), so
// -N2 -n4 on idle nodes is 3,1, -N3 -n9 4,4,1, and -N2 -n5 with 2 CPUs
// free on the first node 2,3. free has one entry per node (its CPUs free
// before the job); ok is false, and the result nil, when some node cannot
// take one task or the nodes cannot take ntasks, or ntasks is below the
// node count: then the caller keeps its even layout (TaskLayout).
func PackTasks(ntasks, cpusPerTask int32, free []int32) (tasks []int32, ok bool) {
	n := int64(len(free))
	if n == 0 || int64(ntasks) < n {
		return nil, false
	}
	cpt := int64(max(cpusPerTask, 1))
	out := make([]int32, n)
	// Summed wide: a hostile count must not wrap.
	left := int64(ntasks)
	for i, f := range free {
		hold := int64(max(f, 0)) / cpt
		if hold < 1 {
			return nil, false
		}
		// The nodes after this one keep one task each.
		take := min(hold, left-(n-int64(i)-1))
		out[i] = int32(take)
		left -= take
	}
	if left != 0 {
		return nil, false
	}
	return out, true
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

// NodeFit is a job's node count and hosts as Slurm's option check leaves
// them (FitNodes).
type NodeFit struct {
	// Nodes and MaxNodes are the node count and range maximum to submit
	// (0: not given); Hosts the hosts of -w kept.
	Nodes, MaxNodes int32
	Hosts           []string
	// Warning is NodesForTasksWarning's words when the tasks lowered the
	// count, else "": Slurm's commands print it after "PROG: Warning: ".
	Warning string
	// Least and Most are the node range the check judged: -N's minimum
	// raised to the hosts named, and -N's maximum (its count for a bare
	// -N N; 0: none). Refused says Most is below the hosts named.
	Least, Most int32
	Refused     bool
}

// RefusalText is Slurm's words for a refused fit (after "PROG: error: "):
// "invalid number of nodes (-N 2-1)".
func (f NodeFit) RefusalText() string {
	return fmt.Sprintf("invalid number of nodes (-N %d-%d)", f.Least, f.Most)
}

// FitNodes is Slurm 22.05's option check of a job's node count against
// its hosts (-w) and tasks (-n), which its sbatch and salloc share
// (measured beside it), applied by Loom's commands and by the gateway to
// every submission alike. nodes and most are -N's minimum and maximum (0:
// not given; nodes without most is N-N), hosts -w's names as given.
//
// The hosts named, each once, are at least the job's node count: "-n3 -w
// n[1-2]" is two nodes. A -N whose maximum is below them is refused
// (Refused: "-N1 -w n[1-2]" is "invalid number of nodes (-N 2-1)"). A task
// count below the nodes lowers the count to it (FitNodesToTasks, with its
// Warning) and keeps the first hosts in hostlist order, as Slurm's
// hostlist_pop drops the last: "-n1 -w n[2,1]" is one node, n1. Without
// -N and with nothing lowered the count stays 0 and the hosts as given:
// the scheduler gives a job at least its listed hosts. Without hosts it is
// FitNodesToTasks.
func FitNodes(ntasks, nodes, most int32, hosts []string) NodeFit {
	f := NodeFit{Nodes: nodes, Hosts: hosts, Least: nodes, Most: most}
	unique := uniqueHosts(hosts)
	f.Least = max(nodes, int32(len(unique)))
	if nodes > 0 && most == 0 {
		f.Most = nodes // -N N is N-N
	}
	n, fitMost, lowered := FitNodesToTasks(ntasks, f.Least, most)
	// A range whose maximum is below its own minimum is no hosts' doing:
	// the caller's own check refuses it (the CLI's parser, the gateway's
	// checkFit).
	f.Refused = f.Most > 0 && int32(len(unique)) > f.Most
	f.MaxNodes = fitMost
	if lowered {
		f.Warning = NodesForTasksWarning(ntasks, f.Least)
	}
	if nodes > 0 || lowered {
		f.Nodes = n
	}
	if lowered && int(n) < len(unique) {
		f.Hosts = unique[:n]
	}
	return f
}

// uniqueHosts is hosts sorted and each once, as Slurm's hostlist_uniq
// leaves them: in hostlist order (node2 before node10), names that are no
// hostlist's in byte order.
func uniqueHosts(hosts []string) []string {
	if len(hosts) == 0 {
		return nil
	}
	sorted := slices.Compact(slices.Sorted(slices.Values(hosts)))
	// A name holding ',' or '[' does not come back from the expression
	// as itself: then the count differs, and byte order is kept.
	if out, err := hostlist.Expand(hostlist.Compress(hosts)); err == nil && len(out) == len(sorted) {
		return out
	}
	return sorted
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
