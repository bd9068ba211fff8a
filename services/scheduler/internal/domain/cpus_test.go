package domain

import (
	"strconv"
	"testing"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"

	"github.com/loom-ml/loom/services/scheduler/internal/domain/views"
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

// TestCPUsPerGPU: --cpus-per-gpu gives each node at least its GPUs times
// it, the larger of that and its tasks times --cpus-per-task, as Slurm
// 22.05's select/cons_tres (checked beside one: scontrol show job's
// NumCPUs and CPU_IDs, the batch script's environment). The run holds
// those CPUs (the node's CPUAlloc), its environment says so, and a job
// whose GPUs need more CPUs than a node has waits.
func TestCPUsPerGPU(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		opts     func(*loomv1.Job)
		n, g     int32
		perNode  string // SLURM_JOB_CPUS_PER_NODE
		onNode   string // SLURM_CPUS_ON_NODE of the batch host
		allocSum int32  // the nodes' CPUAlloc, summed
	}{
		{"--gpus-per-node=2 --cpus-per-gpu=3", func(j *loomv1.Job) {}, 1, 2, "6", "6", 6},
		{"--gpus=3 -N2 --cpus-per-gpu=2", func(j *loomv1.Job) { j.Gpus, j.CpusPerGpu = 3, 2 }, 2, 0, "4,2", "4", 6},
		{"-n8: the tasks' 8", func(j *loomv1.Job) { j.Ntasks = 8 }, 1, 2, "8", "8", 8},
		{"-N2 -n8: the GPUs' 6", func(j *loomv1.Job) { j.Ntasks = 8 }, 2, 2, "6(x2)", "6", 12},
		{"--ntasks-per-node=8", func(j *loomv1.Job) { j.NtasksPerNode = 8 }, 2, 2, "8(x2)", "8", 16},
		{"--gpus-per-node=8 --cpus-per-gpu=12", func(j *loomv1.Job) { j.CpusPerGpu = 12 }, 1, 8, "96", "96", 96},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newSpecHarness(t, Config{})
			h.gpuNode("a3-0001", "b1")
			h.gpuNode("a3-0002", "b1")
			c := h.submitJob(job(1, tc.n, tc.g, func(j *loomv1.Job) {
				j.Command, j.Script, j.CpusPerGpu = nil, "x", 3
				tc.opts(j)
			}))
			h.wantState(1, loomv1.JobState_RUNNING, "")
			ss := starts(c)
			if len(ss) != 1 {
				t.Fatalf("batch job: %d StartSteps", len(ss))
			}
			env := ss[0].GetEnv()
			cpg := strconv.Itoa(int(h.job(1).GetCpusPerGpu()))
			if env["SLURM_JOB_CPUS_PER_NODE"] != tc.perNode || env["SLURM_CPUS_ON_NODE"] != tc.onNode || env["SLURM_CPUS_PER_GPU"] != cpg {
				t.Fatalf("env: SLURM_JOB_CPUS_PER_NODE %q SLURM_CPUS_ON_NODE %q SLURM_CPUS_PER_GPU %q, want %q %q %q",
					env["SLURM_JOB_CPUS_PER_NODE"], env["SLURM_CPUS_ON_NODE"], env["SLURM_CPUS_PER_GPU"], tc.perNode, tc.onNode, cpg)
			}
			sum := int32(0)
			for _, n := range views.SlurmNodes(h.s, cl) {
				sum += n.GetAllocCpus()
			}
			if sum != tc.allocSum {
				t.Fatalf("nodes' CPUAlloc sum to %d, want %d", sum, tc.allocSum)
			}
		})
	}

	// Without it, SLURM_CPUS_PER_GPU is unset, as Slurm's.
	h := newSpecHarness(t, Config{})
	h.gpuNode("a3-0001", "b1")
	ss := starts(h.submitJob(job(1, 1, 2, func(j *loomv1.Job) { j.Command, j.Script = nil, "x" })))
	if len(ss) != 1 {
		t.Fatalf("batch job: %d StartSteps", len(ss))
	}
	if v, ok := ss[0].GetEnv()["SLURM_CPUS_PER_GPU"]; ok || ss[0].GetEnv()["SLURM_CPUS_ON_NODE"] != "1" {
		t.Fatalf("no --cpus-per-gpu: SLURM_CPUS_PER_GPU %q (set %v), SLURM_CPUS_ON_NODE %q", v, ok, ss[0].GetEnv()["SLURM_CPUS_ON_NODE"])
	}
	// More CPUs for its GPUs than the node's 208: it waits, as Slurm
	// refuses it. The GPUs' CPUs count against what others can take: with
	// 200 of them held, 2 GPUs at 5 CPUs each wait though 4 GPUs are free.
	h.submitJob(job(2, 1, 8, func(j *loomv1.Job) { j.CpusPerGpu = 27 }))
	h.wantState(2, loomv1.JobState_PENDING, ReasonBadConstraints)
	h.submitJob(job(3, 1, 2, func(j *loomv1.Job) { j.CpusPerGpu = 100 }))
	h.wantState(3, loomv1.JobState_RUNNING, "")
	h.submitJob(job(4, 1, 2, func(j *loomv1.Job) { j.CpusPerGpu = 5 }))
	h.wantState(4, loomv1.JobState_PENDING, ReasonResources)
	if n := views.SlurmNodes(h.s, cl)[0]; n.GetAllocCpus() != 201 || n.GetAllocGpus() != 4 {
		t.Fatalf("node: CPUAlloc %d, GPUs %d; want 201 (1 + 200) and 4", n.GetAllocCpus(), n.GetAllocGpus())
	}
}
