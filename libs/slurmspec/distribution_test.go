package slurmspec

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// TestParseDistribution: srun -m as Slurm 22.05 reads it, each row measured
// beside it (SLURM_DISTRIBUTION, scontrol show step's Dist=, or its refusal).
func TestParseDistribution(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in, env, name string
		err           error
	}{
		{"block", "block", "Block", nil},
		{"cyclic", "cyclic", "Cyclic", nil},
		{"BLOCK", "block", "Block", nil},
		{"block:block", "block:block", "BBlock", nil},
		{"cyclic:cyclic", "cyclic:cyclic", "CCyclic", nil},
		{"cyclic:block", "cyclic:block", "CBlock", nil},
		{"block:cyclic", "block:cyclic", "BCyclic", nil},
		{"cyclic:fcyclic", "cyclic:fcyclic", "CFCyclic", nil},
		{"block:fcyclic", "block:fcyclic", "BFCyclic", nil},
		{"block:*:cyclic", "block:cyclic:cyclic", "BCyclicCyclic", nil},
		{"cyclic:cyclic:block", "cyclic:cyclic:block", "CCyclicBlock", nil},
		{"block:block:fcyclic", "block:block:fcyclic", "BBlockFCyclic", nil},
		{"cyclic:block:block", "cyclic:block:block", "CBlockBlock", nil},
		{"cyclic:*", "cyclic:cyclic", "CCyclic", nil},
		{"block:*", "block:cyclic", "BCyclic", nil},
		{"*:*", "block:cyclic", "BCyclic", nil},
		{"cyclic:*:*", "cyclic:cyclic:cyclic", "CCyclicCyclic", nil},
		{"BLOCK:CYCLIC:CYCLIC", "block:cyclic:cyclic", "BCyclicCyclic", nil},
		{"block,NoPack", "block,nopack", "Block,NoPack", nil},
		{"Cyclic,NoPack", "cyclic,nopack", "Cyclic,NoPack", nil},
		{"cyclic,Pack", "cyclic,pack", "Cyclic,Pack", nil},
		{"cyclic:cyclic,pack", "cyclic:cyclic,pack", "CCyclic,Pack", nil},
		{"plane=2", "plane", "Plane", nil},
		{"arbitrary", "arbitrary", "arbitrary", nil},
		{"plane=2,Pack", "", "", ErrPlaneSize},
		{"plane", "", "", ErrPlaneSize},
		{"plane=0", "", "", ErrPlaneSize},
		{"plane=x", "", "", ErrPlaneSize},
		{"plane=+2", "", "", ErrPlaneSize},
		{"plane=99999999999", "", "", ErrPlaneSize},
		{"arbitrary:cyclic", "", "", ErrDistribution},
		{"bogus", "", "", ErrDistribution},
		{"fcyclic", "", "", ErrDistribution},
		{"*", "", "", ErrDistribution},
		{"block,foo", "", "", ErrDistribution},
		{"block:plane", "", "", ErrDistribution},
		{"block:block:block:block", "", "", ErrDistribution},
		{"block," + strings.Repeat("x", 100), "", "", ErrDistribution},
	} {
		d, err := ParseDistribution(tc.in)
		if !errors.Is(err, tc.err) {
			t.Errorf("%q: error %v, want %v", tc.in, err, tc.err)
			continue
		}
		if err != nil {
			continue
		}
		if d.String() != tc.env || d.Name() != tc.name {
			t.Errorf("%q: SLURM_DISTRIBUTION %q Dist=%q, want %q %q", tc.in, d.String(), d.Name(), tc.env, tc.name)
		}
		if back, err := ParseDistribution(d.Spec()); err != nil || back != d {
			t.Errorf("%q: Spec %q reads back as %+v, %v", tc.in, d.Spec(), back, err)
		}
	}
	if d, err := ParseDistribution("plane=3"); err != nil || d.PlaneSize != 3 || d.Spec() != "plane=3" {
		t.Errorf("plane=3: %+v %v", d, err)
	}
	if d, _ := ParseDistribution(""); d.Or(DefaultDistribution(2, 2)).Name() != "Cyclic" || d.Or(DefaultDistribution(4, 2)).String() != "block" {
		t.Errorf("defaults: -N2 -n2 %s, -N2 -n4 %s", d.Or(DefaultDistribution(2, 2)).Name(), d.Or(DefaultDistribution(4, 2)))
	}
}

// TestTaskRanks: which node runs which rank, measured beside Slurm 22.05
// (steps of an salloc --exclusive of 16-CPU nodes; SLURM_GTIDS of each
// node, SLURM_STEP_TASKS_PER_NODE their counts). counts are the block
// counts the scheduler's step layout gives.
func TestTaskRanks(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		srun   string
		m      string
		counts []int32
		want   string // each node's ranks, nodes split by "/"
	}{
		{"-N2 -n6", "", []int32{3, 3}, "0,1,2/3,4,5"},
		{"-N2 -n6", "block", []int32{3, 3}, "0,1,2/3,4,5"},
		{"-N2 -n6", "cyclic", []int32{3, 3}, "0,2,4/1,3,5"},
		{"-N3 -n7", "", []int32{3, 2, 2}, "0,1,2/3,4/5,6"},
		{"-N3 -n7", "cyclic", []int32{3, 2, 2}, "0,3,6/1,4/2,5"},
		{"-N2 --ntasks-per-node=3", "cyclic", []int32{3, 3}, "0,2,4/1,3,5"},
		{"-N2 -n5 --ntasks-per-node=3", "cyclic", []int32{3, 2}, "0,2,4/1,3"},
		{"-N2 -n4", "cyclic:block", []int32{2, 2}, "0,2/1,3"},
		{"-N2 -n4", "block:cyclic", []int32{2, 2}, "0,1/2,3"},
		{"-N2 -n4", "cyclic,Pack", []int32{2, 2}, "0,2/1,3"},
		{"-N2 -n5", "plane=2", []int32{3, 2}, "0,1,4/2,3"},
		{"-N2 -n6", "plane=2", []int32{3, 3}, "0,1,4,5/2,3"},
		{"-N3 -n7", "plane=2", []int32{3, 2, 2}, "0,1,6/2,3/4,5"},
		{"-N2 -n2", "plane=2", []int32{1, 1}, "0/1"},
		{"-N2 -n3", "plane=4", []int32{2, 1}, "0,1/2"},
		{"-N3 -n4", "plane=2", []int32{2, 1, 1}, "0,1/2/3"},
		{"-N3 -n5", "plane=3", []int32{2, 2, 1}, "0,1,2/3/4"},
		{"-N3 -n6", "plane=5", []int32{2, 2, 2}, "0,1,2,3/4/5"},
		{"-N4 -n9", "plane=3", []int32{3, 2, 2, 2}, "0,1,2/3,4,5/6,7/8"},
		{"-N2 --ntasks-per-node=2 -n4", "plane=3", []int32{2, 2}, "0,1,2/3"},
		{"-w node1,node1,node2", "arbitrary", []int32{2, 1}, "0,1/2"},
		{"-N1 -n3", "cyclic", []int32{3}, "0,1,2"},
		{"no nodes", "plane=2", nil, ""},
	} {
		d, err := ParseDistribution(tc.m)
		if err != nil {
			t.Fatalf("%s -m %s: %v", tc.srun, tc.m, err)
		}
		var nodes []string
		for _, r := range TaskRanks(d, StepTaskCounts(d, tc.counts)) {
			nodes = append(nodes, strings.Trim(strings.Join(strings.Fields(fmt.Sprint(r)), ","), "[]"))
		}
		if got := strings.Join(nodes, "/"); got != tc.want {
			t.Errorf("srun %s -m %s: %s, want %s", tc.srun, tc.m, got, tc.want)
		}
	}
}
