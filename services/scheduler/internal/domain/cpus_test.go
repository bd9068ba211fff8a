package domain

import (
	"testing"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// TestCPUsPerNodeDoNotWrap: a job whose tasks on one node times its CPUs
// per task pass an int32 (2^20 tasks × 4096 CPUs, both within their
// bounds) asks for more CPUs than any node has and waits: the product
// used to wrap to 0, which every node fits, and the job ran.
func TestCPUsPerNodeDoNotWrap(t *testing.T) {
	t.Parallel()
	h := newSpecHarness(t, Config{})
	h.gpuNode("a3-0001", "b1")
	huge := func(j *loomv1.Job) { j.Ntasks, j.CpusPerTask = 1<<20, 4096 }
	h.submitJob(job(1, 1, 0, huge))
	h.wantState(1, loomv1.JobState_PENDING, ReasonBadConstraints)
	// What fits still runs.
	h.submitJob(job(2, 1, 0, func(j *loomv1.Job) { j.Ntasks, j.CpusPerTask = 2, 4 }))
	h.wantState(2, loomv1.JobState_RUNNING, "")
}
