package domain

import (
	"testing"
	"time"

	"github.com/loom-ml/loom/libs/slurmspec"
)

// TestMoreNodesThanTasks: a request for more nodes than tasks is the job
// Slurm's sbatch makes of it (-N2 -n1 runs on one node; a range's maximum
// drops to the tasks), whoever sends it: Loom's CLI lowers the count
// itself, an API client gets the same job from the gateway. A count past
// the cluster's nodes is judged as lowered (Slurm's -N100 -n1 is a
// one-node job), and the caller's request is left as it was.
func TestMoreNodesThanTasks(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name                string
		ntasks, nodes, most int32
		wantN, wantM        int32
	}{
		{"-N2 -n1", 1, 2, 0, 1, 0},
		{"-N100 -n1", 1, 100, 0, 1, 0},
		{"-N2-3 -n1", 1, 2, 3, 1, 1},
		{"-N1-4 -n2", 2, 1, 4, 1, 2},
		{"-N2 -n2", 2, 2, 0, 2, 0},
	} {
		req := goodJob()
		req.Job.GpusPerNode = 0
		req.Job.Ntasks, req.Job.NodeCount, req.Job.MaxNodeCount = tc.ntasks, tc.nodes, tc.most
		if err := ValidateSubmitJob(req, existing(), slurmspec.DefaultMaxArraySize); err != nil {
			t.Errorf("%s: refused: %v", tc.name, err)
			continue
		}
		j := AcceptJob(req, existing(), 1, time.Unix(0, 0))
		if j.GetNodeCount() != tc.wantN || j.GetMaxNodeCount() != tc.wantM {
			t.Errorf("%s: accepted node_count %d max_node_count %d, want %d and %d", tc.name, j.GetNodeCount(), j.GetMaxNodeCount(), tc.wantN, tc.wantM)
		}
		if req.Job.GetNodeCount() != tc.nodes || req.Job.GetMaxNodeCount() != tc.most {
			t.Errorf("%s: the request was changed to %d-%d", tc.name, req.Job.GetNodeCount(), req.Job.GetMaxNodeCount())
		}
	}
}
