package slurmspec

import (
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
