package slurmspec

import (
	"math"
	"slices"
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
