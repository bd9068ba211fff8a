package slurmspec

import (
	"math"
	"slices"
	"strings"
	"testing"
)

// TestAllocTasksPerNode: Slurm 22.05's SLURM_TASKS_PER_NODE of a batch
// script or salloc's command, measured beside it: the tasks asked for,
// else each node's CPUs over -c.
func TestAllocTasksPerNode(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		tasks, cpus []int32
		asked       bool
		cpt         int32
		want        string
	}{
		{"-N2", []int32{1, 1}, []int32{1, 1}, false, 0, "1(x2)"},
		{"-N2 -c2", []int32{1, 1}, []int32{2, 2}, false, 2, "1(x2)"},
		{"--exclusive", []int32{1}, []int32{16}, false, 0, "16"},
		{"--gpus=3 -N2 --cpus-per-gpu=2", []int32{1, 1}, []int32{4, 2}, false, 0, "4,2"},
		{"-N2 -n3", []int32{2, 1}, []int32{2, 1}, true, 0, "2,1"},
		{"--gpus-per-node=2 --cpus-per-gpu=3 -n2", []int32{2}, []int32{6}, true, 0, "2"},
		{"-N3 -c4 on 2 CPUs", []int32{1, 1, 1}, []int32{2, 2, 2}, false, 4, "1(x3)"},
	} {
		if got := CompressCounts(AllocTasksPerNode(tc.tasks, tc.cpus, tc.asked, tc.cpt)); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
	if got := CompressCounts([]int32{2, 2, 2, 1}); got != "2(x3),1" {
		t.Errorf("CompressCounts: %q", got)
	}
}

// TestTaskLayout: the tasks per node the scheduler gives a job and the
// Slurm commands show, and Share's spread.
func TestTaskLayout(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		perNode, ntasks int32
		n               int
		want            []int32
	}{
		{0, 0, 2, []int32{1, 1}},
		{2, 0, 3, []int32{2, 2, 2}},
		{2, 9, 2, []int32{2, 2}}, // --ntasks-per-node wins
		{0, 7, 3, []int32{3, 2, 2}},
		{0, 1, 2, []int32{1, 0}},
	} {
		if got := TaskLayout(tc.perNode, tc.ntasks, tc.n); !slices.Equal(got, tc.want) {
			t.Errorf("TaskLayout(%d, %d, %d) = %v, want %v", tc.perNode, tc.ntasks, tc.n, got, tc.want)
		}
	}
	if got := []int32{Share(3, 2, 0), Share(3, 2, 1), Share(0, 2, 0)}; !slices.Equal(got, []int32{2, 1, 0}) {
		t.Errorf("Share of 3 over 2 and 0 over 2 = %v, want [2 1 0]", got)
	}
}

// TestPackTasks: each row is a job measured on Slurm 22.05 (slurm-local.sh,
// 3 nodes of 4 CPUs, select/cons_tres CR_Core): the free CPUs of the nodes
// it got, in node order, and its SLURM_TASKS_PER_NODE (scontrol show job
// -d's CPU_IDs and SLURM_JOB_CPUS_PER_NODE agree: tasks × -c).
func TestPackTasks(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		shape       string
		ntasks, cpt int32
		free        []int32
		want        []int32
	}{
		{"-N1-2 -n4 idle", 4, 1, []int32{4, 4}, []int32{3, 1}},
		{"-N2 -n4 idle", 4, 1, []int32{4, 4}, []int32{3, 1}},
		{"-N2 -n5 idle", 5, 1, []int32{4, 4}, []int32{4, 1}},
		{"-N2 -n6 idle", 6, 1, []int32{4, 4}, []int32{4, 2}},
		{"-N1-3 -n4 idle", 4, 1, []int32{4, 4, 4}, []int32{2, 1, 1}},
		{"-N1-3 -n5 idle", 5, 1, []int32{4, 4, 4}, []int32{3, 1, 1}},
		{"-N3 -n9 idle", 9, 1, []int32{4, 4, 4}, []int32{4, 4, 1}},
		{"-N1-2 -n4, node1 2 free", 4, 1, []int32{2, 4}, []int32{2, 2}},
		{"-N2 -n5, node1 2 free", 5, 1, []int32{2, 4}, []int32{2, 3}},
		{"-N1-3 -n5, node1 2 free", 5, 1, []int32{2, 4, 4}, []int32{2, 2, 1}},
		{"-N1-2 -n4, node2 2 free", 4, 1, []int32{4, 2}, []int32{3, 1}},
		{"-N2 -n5, node2 2 free", 5, 1, []int32{4, 2}, []int32{4, 1}},
		{"-N2 -n5, node1 1 free", 5, 1, []int32{1, 4}, []int32{1, 4}},
		{"-N2 -n4 -c2 idle", 4, 2, []int32{4, 4}, []int32{2, 2}},
		{"-N2 -n3 -c2 idle", 3, 2, []int32{4, 4}, []int32{2, 1}},
		{"-N1-3 -n5 -c2 idle", 5, 2, []int32{4, 4, 4}, []int32{2, 2, 1}},
		{"-N1-3 -n4 -c2, node1 1 free (node2, node3)", 4, 2, []int32{4, 4}, []int32{2, 2}},
	} {
		got, ok := PackTasks(tc.ntasks, tc.cpt, tc.free)
		if !ok || !slices.Equal(got, tc.want) {
			t.Errorf("%s: PackTasks(%d, %d, %v) = %v, %v, want %v", tc.shape, tc.ntasks, tc.cpt, tc.free, got, ok, tc.want)
		}
	}
	// No layout: a node without room for one task, too few CPUs in all,
	// fewer tasks than nodes, no nodes.
	for _, tc := range []struct {
		ntasks, cpt int32
		free        []int32
	}{
		{4, 2, []int32{1, 8}}, {9, 1, []int32{4, 4}}, {1, 1, []int32{4, 4}}, {1, 1, nil}, {2, 1, []int32{-3, 4}},
	} {
		if got, ok := PackTasks(tc.ntasks, tc.cpt, tc.free); ok || got != nil {
			t.Errorf("PackTasks(%d, %d, %v) = %v, %v, want nil, false", tc.ntasks, tc.cpt, tc.free, got, ok)
		}
	}
}

// TestFitNodesToTasks: more nodes than tasks, as Slurm 22.05's sbatch,
// salloc and srun took them beside Loom (scontrol show job's NumNodes).
func TestFitNodesToTasks(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name                string
		ntasks, nodes, most int32
		wantN, wantM        int32
		wantLowered         bool
	}{
		{"-N2 -n1", 1, 2, 0, 1, 0, true},
		{"-N2-3 -n1", 1, 2, 3, 1, 1, true},
		{"-N3-4 -n2", 2, 3, 4, 2, 2, true},
		{"-N1-4 -n2", 2, 1, 4, 1, 2, false},
		{"-N2 -n2", 2, 2, 0, 2, 0, false},
		{"-N4 alone", 0, 4, 0, 4, 0, false},
		{"-n1 alone", 1, 0, 0, 0, 0, false},
	} {
		n, m, lowered := FitNodesToTasks(tc.ntasks, tc.nodes, tc.most)
		if n != tc.wantN || m != tc.wantM || lowered != tc.wantLowered {
			t.Errorf("%s: got %d-%d lowered %v, want %d-%d lowered %v", tc.name, n, m, lowered, tc.wantN, tc.wantM, tc.wantLowered)
		}
	}
	// scontrol update NumNodes=: tasks rise to the new minimum, never past
	// MaxJobTasks (a node count that large reaches the scheduler unjudged),
	// and are never lowered.
	for _, tc := range [][3]int32{{1, 2, 2}, {3, 2, 3}, {0, 5, 0}, {1, math.MaxInt32, MaxJobTasks}, {MaxJobTasks, MaxJobTasks + 1, MaxJobTasks}} {
		if got := TasksForNodes(tc[0], tc[1]); got != tc[2] {
			t.Errorf("TasksForNodes(%d, %d) = %d, want %d", tc[0], tc[1], got, tc[2])
		}
	}
	if got, want := NodesForTasksWarning(1, 2), "can't run 1 processes on 2 nodes, setting nnodes to 1"; got != want {
		t.Errorf("warning %q, want %q", got, want)
	}
}

// TestFitNodes: the hosts of -w against -N and -n, as Slurm 22.05's
// sbatch and salloc took them beside Loom (scontrol show job's NumNodes
// and ReqNodeList, and their refusal).
func TestFitNodes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name                string
		ntasks, nodes, most int32
		hosts               []string
		wantN, wantM        int32
		wantHosts           string
		warning, refusal    string
	}{
		{"-n1 -w node[1-2]", 1, 0, 0, []string{"node1", "node2"}, 1, 0, "node1", "can't run 1 processes on 2 nodes, setting nnodes to 1", ""},
		{"-n1 -w node10,node2", 1, 0, 0, []string{"node10", "node2"}, 1, 0, "node2", "can't run 1 processes on 2 nodes, setting nnodes to 1", ""},
		{"-n2 -w node[1-3]", 2, 0, 0, []string{"node1", "node2", "node3"}, 2, 0, "node1,node2", "can't run 2 processes on 3 nodes, setting nnodes to 2", ""},
		{"-N2 -n1 -w node[1-2]", 1, 2, 0, []string{"node1", "node2"}, 1, 0, "node1", "can't run 1 processes on 2 nodes, setting nnodes to 1", ""},
		{"-N1-3 -n1 -w node[1-2]", 1, 1, 3, []string{"node1", "node2"}, 1, 1, "node1", "can't run 1 processes on 2 nodes, setting nnodes to 1", ""},
		{"-n1 -w node1,node1", 1, 0, 0, []string{"node1", "node1"}, 0, 0, "node1,node1", "", ""},
		{"-n3 -w node[1-2]", 3, 0, 0, []string{"node1", "node2"}, 0, 0, "node1,node2", "", ""},
		{"-N3 -w node[1-2]", 0, 3, 0, []string{"node1", "node2"}, 3, 0, "node1,node2", "", ""},
		{"-N1-3 -w node[1-2]", 0, 1, 3, []string{"node1", "node2"}, 2, 3, "node1,node2", "", ""},
		{"-N1 -w node[1-2]", 0, 1, 0, []string{"node1", "node2"}, 2, 0, "node1,node2", "", "invalid number of nodes (-N 2-1)"},
		{"-N1 -n1 -w node[1-2]", 1, 1, 0, []string{"node1", "node2"}, 1, 0, "node1", "can't run 1 processes on 2 nodes, setting nnodes to 1", "invalid number of nodes (-N 2-1)"},
		{"-N1-2 -w node[1-3]", 0, 1, 2, []string{"node1", "node2", "node3"}, 3, 2, "node1,node2,node3", "", "invalid number of nodes (-N 3-2)"},
		{"-N2 -n1 without hosts", 1, 2, 0, nil, 1, 0, "", "can't run 1 processes on 2 nodes, setting nnodes to 1", ""},
		{"-N1-4 -n2 without hosts", 2, 1, 4, nil, 1, 2, "", "", ""},
	} {
		f := FitNodes(tc.ntasks, tc.nodes, tc.most, tc.hosts)
		refusal := ""
		if f.Refused {
			refusal = f.RefusalText()
		}
		if f.Nodes != tc.wantN || f.MaxNodes != tc.wantM || strings.Join(f.Hosts, ",") != tc.wantHosts || f.Warning != tc.warning || refusal != tc.refusal {
			t.Errorf("%s: got %d-%d hosts %v warning %q refusal %q, want %d-%d %s, %q, %q",
				tc.name, f.Nodes, f.MaxNodes, f.Hosts, f.Warning, refusal, tc.wantN, tc.wantM, tc.wantHosts, tc.warning, tc.refusal)
		}
	}
}
