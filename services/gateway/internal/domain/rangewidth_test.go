package domain

import (
	"strings"
	"testing"

	"github.com/loom-ml/loom/libs/slurmspec"
)

// TestNodeRangeCPUsAtWidest: a node range of -n tasks is judged at the
// widest it could run on (its maximum, capped by the partition's fitting
// nodes), as the scheduler places it at each width and Slurm 22.05 runs
// -N1-3 -n5 on 4-CPU nodes (3,1,1): -N1-2 -n300 on 208-CPU nodes fits at
// 2 nodes (refused before: 300 CPUs at its minimum), and a range no width
// fits is refused in Slurm's words (its -N1-3 -n13 on 4-CPU nodes:
// "Requested node configuration is not available"): -N1-3 -n418 where 2
// nodes have the GPUs asked, 209 CPUs a node at 2.
func TestNodeRangeCPUsAtWidest(t *testing.T) {
	t.Parallel()
	req := goodJob()
	req.Job.NodeCount, req.Job.MaxNodeCount, req.Job.Ntasks = 1, 2, 300
	if err := ValidateSubmitJob(req, existing(), slurmspec.DefaultMaxArraySize); err != nil {
		t.Fatalf("-N1-2 -n300 on two 208-CPU nodes refused: %v", err)
	}
	req.Job.MaxNodeCount, req.Job.Ntasks = 3, 418
	err := ValidateSubmitJob(req, existing(), slurmspec.DefaultMaxArraySize)
	if err == nil || !strings.Contains(err.Error(), "job.ntasks") || !strings.Contains(err.Error(), "widest, 2 nodes") ||
		!strings.Contains(err.Error(), MsgNodeConfig) {
		t.Fatalf("-N1-3 -n418 on two 208-CPU GPU nodes: got %v, want job.ntasks refused at the widest, 2 nodes, in Slurm's words", err)
	}
}
