package domain

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/loom-ml/loom/libs/errs"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// partitionedNodes are partitioned()'s nodes: gpu-0001..2 in train, cpu-0001..4
// in debug, and a login node in no partition.
func partitionedNodes() map[string]*loomv1.Node {
	nodes := map[string]*loomv1.Node{"c1-login-001": {Hostname: "c1-login-001", Role: "login"}}
	for pool, n := range map[string]int{"gpu": 2, "cpu": 4} {
		for i := 1; i <= n; i++ {
			h := fmt.Sprintf("%s-%04d", pool, i)
			nodes[h] = &loomv1.Node{Hostname: h, NodePool: pool}
		}
	}
	return nodes
}

func TestCheckJobNodes(t *testing.T) {
	t.Parallel()
	job := func(mut func(*loomv1.Job)) *loomv1.Job {
		j := goodJob().Job
		j.NodeCount = 1
		mut(j)
		return j
	}
	for _, j := range []*loomv1.Job{
		job(func(j *loomv1.Job) {}),
		job(func(j *loomv1.Job) { j.Nodelist = []string{"gpu-0002"} }),
		job(func(j *loomv1.Job) { j.Exclude = []string{"gpu-0001"} }),
		job(func(j *loomv1.Job) { j.Partition, j.NodeCount, j.Exclude = "debug", 3, []string{"cpu-0004"} }),
		job(func(j *loomv1.Job) { j.Partition, j.Nodelist = "debug", []string{"cpu-0001", "cpu-0003"} }),
		// Hosts that -n1 drops are not judged, as Slurm's sbatch and srun
		// drop them before its controller looks (measured: -n1 -w
		// node1,nosuchnode ran on node1): the first in hostlist order stays.
		job(func(j *loomv1.Job) { j.NodeCount, j.Ntasks, j.Nodelist = 0, 1, []string{"gpu-0001", "nosuchnode"} }),
		job(func(j *loomv1.Job) { j.NodeCount, j.Ntasks, j.Nodelist = 0, 1, []string{"zzz", "gpu-0002"} }),
		job(func(j *loomv1.Job) { j.NodeCount, j.Ntasks, j.Nodelist = 0, 1, []string{"gpu-0009", "gpu-0001"} }),
		job(func(j *loomv1.Job) {
			j.NodeCount, j.Ntasks, j.Nodelist, j.Exclude = 0, 1, []string{"gpu-0002", "gpu-0001"}, []string{"gpu-0002"}
		}),
	} {
		if err := CheckJobNodes(j, partitioned(), partitionedNodes()); err != nil {
			t.Errorf("nodelist %v exclude %v in %q refused: %v", j.Nodelist, j.Exclude, j.Partition, err)
		}
	}
	for _, tc := range []struct {
		job  *loomv1.Job
		want []string
	}{
		// The host kept is judged, by its index in the request: "aaa"
		// sorts first (measured: -n1 -w node2,aaa is Invalid node name).
		{job(func(j *loomv1.Job) { j.NodeCount, j.Ntasks, j.Nodelist = 0, 1, []string{"gpu-0001", "aaa"} }),
			[]string{"job.nodelist[1]", `"aaa" is not a node of`, "Invalid node name specified"}},
		{job(func(j *loomv1.Job) { j.NodeCount, j.Ntasks, j.Nodelist = 0, 1, []string{"gpu-0001", "cpu-0001"} }),
			[]string{"job.nodelist[1]", "cpu-0001 is not in partition train"}},
		{job(func(j *loomv1.Job) { j.Nodelist = []string{"gpu-0009"} }),
			[]string{"job.nodelist[0]", `"gpu-0009" is not a node of projects/default/clusters/c1`, "Invalid node name specified"}},
		{job(func(j *loomv1.Job) { j.Exclude = []string{"gpu-0001", "nope"} }),
			[]string{"job.exclude[1]", `"nope" is not a node`, "loom nodes list --cluster c1"}},
		{job(func(j *loomv1.Job) { j.Nodelist = []string{"cpu-0001"} }),
			[]string{"job.nodelist[0]", "cpu-0001 is not in partition train", "Requested node configuration is not available"}},
		{job(func(j *loomv1.Job) { j.Nodelist = []string{"c1-login-001"} }),
			[]string{"job.nodelist[0]", "not in partition train"}},
		{job(func(j *loomv1.Job) { j.Nodelist, j.Exclude = []string{"gpu-0001"}, []string{"gpu-0001"} }),
			[]string{"job.nodelist[0]", "gpu-0001 is also excluded"}},
		{job(func(j *loomv1.Job) { j.Exclude = []string{"gpu-0001", "gpu-0002"} }),
			[]string{"job.exclude", "leaves 0 of partition train's nodes, and the job needs 1", "Requested node configuration is not available"}},
		{job(func(j *loomv1.Job) { j.NodeCount, j.Exclude = 2, []string{"gpu-0002"} }),
			[]string{"leaves 1 of partition train's nodes, and the job needs 2"}},
		{job(func(j *loomv1.Job) {
			for i := range 12 {
				j.Nodelist = append(j.Nodelist, fmt.Sprintf("x%d", i))
			}
		}), []string{"job.nodelist[9]", "12 names in all are not nodes"}},
	} {
		err := CheckJobNodes(tc.job, partitioned(), partitionedNodes())
		var invalid *errs.InvalidError
		if !errors.As(err, &invalid) {
			t.Errorf("nodelist %v exclude %v: want InvalidArgument, got %v", tc.job.Nodelist, tc.job.Exclude, err)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("nodelist %v exclude %v: %v does not say %q", tc.job.Nodelist, tc.job.Exclude, err, w)
			}
		}
		if strings.Contains(err.Error(), "job.nodelist[10]") {
			t.Errorf("names more than ten unknown hosts: %v", err)
		}
	}
}

func TestCheckDependencyJobs(t *testing.T) {
	t.Parallel()
	for _, spec := range []string{"", "afterok:12", "after:3_1:12+5?singleton", "aftercorr:7"} {
		if err := CheckDependencyJobs(spec, "job.dependency", 12); err != nil {
			t.Errorf("%q with job 12 the newest: %v", spec, err)
		}
	}
	err := CheckDependencyJobs("afterok:12,afterany:13", "dependency", 12)
	var invalid *errs.InvalidError
	if !errors.As(err, &invalid) || !strings.Contains(err.Error(), "dependency: job 13 does not exist: the newest job is 12 (Slurm: Job dependency problem)") {
		t.Errorf("a dependency on job 13 with 12 the newest: %v", err)
	}
	if err := CheckDependencyJobs("afterok:1", "job.dependency", 0); err == nil {
		t.Error("a dependency before any job was issued was accepted")
	}
}
