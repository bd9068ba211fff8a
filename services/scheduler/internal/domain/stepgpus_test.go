package domain

import (
	"slices"
	"strings"
	"testing"

	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// TestStepKeepsItsGPURequest: a step records what srun asked of GPUs and
// CPUs (--gpus, --gpus-per-task, --cpus-per-gpu, -c), running or waiting
// first, for scontrol show step's TresPerStep, TresPerTask and CpusPerTres
// (Slurm 22.05 prints them from the step's request); bad counts are
// refused naming the field.
func TestStepKeepsItsGPURequest(t *testing.T) {
	t.Parallel()
	h := newSpecHarness(t, Config{})
	h.gpuNode("a3-0001", "b1")
	h.submitJob(job(1, 1, 4, func(j *loomv1.Job) { j.Command = nil; j.Script = "srun x"; j.Ntasks = 4 }))
	h.do(createStep("r1", func(e *eventsv1.CreateJobStep) {
		e.Gpus, e.CpusPerGpu, e.CpusPerTask, e.Ntasks, e.AllocationCpus = 2, 3, 0, 1, true
	}))
	h.do(createStep("r2", func(e *eventsv1.CreateJobStep) { e.GpusPerTask, e.CpusPerTask, e.Ntasks = 1, 2, 2 }))
	for id, want := range []struct {
		gpus, gpt, cpg, cpt int32
		alloc               bool
	}{{2, 0, 3, 0, true}, {0, 1, 0, 2, false}} {
		s := h.jobStep(int32(id))
		if s.GetGpus() != want.gpus || s.GetGpusPerTask() != want.gpt || s.GetCpusPerGpu() != want.cpg || s.GetCpusPerTask() != want.cpt ||
			s.GetAllocationCpus() != want.alloc {
			t.Errorf("step %d: gpus %d, gpus_per_task %d, cpus_per_gpu %d, cpus_per_task %d, allocation_cpus %v; want %v", id,
				s.GetGpus(), s.GetGpusPerTask(), s.GetCpusPerGpu(), s.GetCpusPerTask(), s.GetAllocationCpus(), want)
		}
	}
	for _, bad := range []struct {
		mod  func(*eventsv1.CreateJobStep)
		want string
	}{
		{func(e *eventsv1.CreateJobStep) { e.Gpus = -1 }, "gpus: must be 0..1048576, got -1"},
		{func(e *eventsv1.CreateJobStep) { e.CpusPerGpu = 1 << 20 }, "cpus_per_gpu: must be 0..4096, got 1048576"},
		{func(e *eventsv1.CreateJobStep) { e.GpusPerNode = -1 }, "gpus_per_node: must be 0..1048576, got -1"},
	} {
		if _, err := h.s.Handle(h.now, createStep("bad", bad.mod)); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("bad step: %v, want %q", err, bad.want)
		}
	}
}

// TestStepCancelRecordsWho: scancel JOB.STEP records who asked (the
// command's user, as the gateway authenticated them) on the step, running
// or waiting, as Slurm's sacct shows "CANCELLED by UID" on the step's row;
// a signal (scancel -s) is no cancel, and a step ended with its job names
// nobody.
func TestStepCancelRecordsWho(t *testing.T) {
	t.Parallel()
	h := batchOnTwo(t)
	h.do(createStep("r1"))
	h.tasks(0, "a", eventsv1.StepState_STEP_RUNNING)
	h.do(createStep("r2")) // waits: step 0 holds every CPU
	h.do(createStep("r3", func(e *eventsv1.CreateJobStep) { e.Overlap = true }))
	h.do(&eventsv1.CancelJobStep{Job: jobName(1), Cluster: cl, StepId: 0, Signal: "USR1", User: "bo"})
	if by := h.jobStep(0).GetCancelledBy(); by != "" {
		t.Fatalf("a signalled step: cancelled by %q, want nobody", by)
	}
	h.do(&eventsv1.CancelJobStep{Job: jobName(1), Cluster: cl, StepId: 0, User: "root"})
	h.do(&eventsv1.CancelJobStep{Job: jobName(1), Cluster: cl, StepId: 1, User: "ada"})
	h.tasks(0, "a", eventsv1.StepState_STEP_KILLED, 143, 143)
	h.tasks(0, "b", eventsv1.StepState_STEP_KILLED, 143, 143)
	for id, want := range []string{"root", "ada"} {
		if s := h.jobStep(int32(id)); s.GetState() != loomv1.JobState_CANCELLED || s.GetCancelledBy() != want {
			t.Errorf("step %d: %v by %q, want CANCELLED by %s", id, s.GetState(), s.GetCancelledBy(), want)
		}
	}
	h.do(&eventsv1.CancelJob{Job: jobName(1), Cluster: cl, User: "root"})
	if s := h.jobStep(2); s.GetCancelledBy() != "" {
		t.Errorf("a step ended with its job: cancelled by %q, want nobody", s.GetCancelledBy())
	}
}

// TestStepGPUBindNone: srun -n2 --gpus-per-task=1 --gpu-bind=none holds a
// GPU a task, as without --gpu-bind (the next such step gets others, and
// one more finds none free and waits), but its tasks share the step's GPUs
// on the node: no per-task lists, the step's in CUDA_VISIBLE_DEVICES,
// GPU_DEVICE_ORDINAL and SLURM_STEP_GPUS. The step keeps gpus_per_task and
// says gpu_bind_none, for scontrol show step's TresPerTask and TresBind.
func TestStepGPUBindNone(t *testing.T) {
	t.Parallel()
	h := newSpecHarness(t, Config{})
	h.gpuNode("a3-0001", "b1")
	h.submitJob(job(1, 1, 4, func(j *loomv1.Job) { j.Command = nil; j.Script = "srun x"; j.Ntasks = 4 }))
	h.reportRunning(1)
	pair := func(e *eventsv1.CreateJobStep) { e.GpusPerTask, e.Ntasks, e.Exact = 1, 2, true }
	none := func(e *eventsv1.CreateJobStep) { e.GpuBindNone = true }
	ls := launches(h.do(createStep("r1", pair, none)))
	if len(ls) != 1 || ls[0].GetTaskGpus() != nil {
		t.Fatalf("--gpu-bind=none: launches %v, want one without per-task GPUs", ls)
	}
	for _, v := range []string{"CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL", "SLURM_STEP_GPUS"} {
		if got := ls[0].GetEnv()[v]; got != "0,1" {
			t.Errorf("--gpu-bind=none: %s=%q, want the step's 0,1", v, got)
		}
	}
	if got := ls[0].GetEnv()["SLURM_GPUS_PER_TASK"]; got != "1" {
		t.Errorf("--gpu-bind=none: SLURM_GPUS_PER_TASK=%q, want 1", got)
	}
	if s := h.jobStep(0); !s.GetGpuBindNone() || s.GetGpusPerTask() != 1 {
		t.Errorf("step 0: gpu_bind_none %v, gpus_per_task %d; want true, 1", s.GetGpuBindNone(), s.GetGpusPerTask())
	}
	ls = launches(h.do(createStep("r2", pair)))
	if len(ls) != 1 || !slices.Equal(ls[0].GetTaskGpus(), []string{"2", "3"}) {
		t.Fatalf("a bound step beside it: launches %v, want task GPUs [2 3]", ls)
	}
	if s := h.jobStep(1); s.GetGpuBindNone() {
		t.Errorf("step 1: gpu_bind_none, want it bound")
	}
	if c := h.do(createStep("r3", pair, none)); len(launches(c)) != 0 || h.jobStep(2).GetState() != loomv1.JobState_PENDING {
		t.Fatalf("a third step with every GPU held: %d launches, %v; want it PENDING", len(launches(c)), h.jobStep(2))
	}
}

// TestStepGPUsPerTaskBesidePerNode: a step with both --gpus-per-task and
// --gpus-per-node (the job's SLURM_GPUS_PER_NODE, which srun takes as its
// own, or its own option) gets and holds the larger on each node, the
// node's tasks times --gpus-per-task or the per-node count; each of a
// node's tasks gets --gpus-per-task of them of its own, in order, and a
// node's lone task all of the step's there. The rows are Slurm 22.05's,
// measured with scripts/slurm-local.sh (fake GPUs through gres):
// CUDA_VISIBLE_DEVICES of each task, in an sbatch -N1 -n4
// --gpus-per-node=4 job and an sbatch -N2 --ntasks-per-node=2
// --gpus-per-node=2 one.
func TestStepGPUsPerTaskBesidePerNode(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name           string
		nodes, jobGPUs int32
		ntasks, gpt    int32
		gpn            int32
		want           [][]string // each node's tasks' GPUs
		waitsBesideOne bool       // a one-GPU --exact step beside it waits: the step holds every GPU
	}{
		{"-N1 4 GPUs: -n1 --gpus-per-task=1", 1, 4, 1, 1, 4, [][]string{{"0,1,2,3"}}, true},
		{"-N1 4 GPUs: -n2 --gpus-per-task=1", 1, 4, 2, 1, 4, [][]string{{"0", "1"}}, true},
		{"-N1 4 GPUs: -n3 --gpus-per-task=1", 1, 4, 3, 1, 4, [][]string{{"0", "1", "2"}}, true},
		{"-N1 4 GPUs: -n1 --gpus-per-task=2", 1, 4, 1, 2, 4, [][]string{{"0,1,2,3"}}, true},
		{"-N1 4 GPUs: -n2 --gpus-per-task=1 --gpus-per-node=3", 1, 4, 2, 1, 3, [][]string{{"0", "1"}}, false},
		{"-N1 4 GPUs: -n1 --gpus-per-task=1 --gpus-per-node=1", 1, 4, 1, 1, 1, [][]string{{"0"}}, false},
		{"-N2 2 GPUs a node: -n2 --gpus-per-task=1", 2, 2, 2, 1, 2, [][]string{{"0,1"}, {"0,1"}}, true},
		{"-N2 2 GPUs a node: -n4 --gpus-per-task=1", 2, 2, 4, 1, 2, [][]string{{"0", "1"}, {"0", "1"}}, true},
		{"-N2 2 GPUs a node: -n2 --gpus-per-task=2", 2, 2, 2, 2, 2, [][]string{{"0,1"}, {"0,1"}}, true},
	} {
		h := newSpecHarness(t, Config{})
		h.gpuNode("a3-0001", "b1")
		h.gpuNode("a3-0002", "b1")
		h.submitJob(job(1, tc.nodes, tc.jobGPUs, func(j *loomv1.Job) { j.Command = nil; j.Script = "srun x"; j.Ntasks = 4 }))
		h.reportRunning(1)
		ls := launches(h.do(createStep("r1", func(e *eventsv1.CreateJobStep) {
			e.Ntasks, e.GpusPerTask, e.GpusPerNode, e.Exact = tc.ntasks, tc.gpt, tc.gpn, true
		})))
		var got [][]string
		for _, l := range ls {
			got = append(got, l.GetTaskGpus())
		}
		if !slices.EqualFunc(got, tc.want, slices.Equal) {
			t.Errorf("%s: tasks' GPUs %v, want %v", tc.name, got, tc.want)
		}
		s := h.jobStep(0)
		if s.GetGpusPerNode() != tc.gpn || s.GetGpusPerTask() != tc.gpt {
			t.Errorf("%s: step keeps gpus_per_node %d, gpus_per_task %d; want %d, %d (scontrol show step's TresPerNode, TresPerTask)",
				tc.name, s.GetGpusPerNode(), s.GetGpusPerTask(), tc.gpn, tc.gpt)
		}
		c := h.do(createStep("r2", func(e *eventsv1.CreateJobStep) { e.Ntasks, e.GpusPerTask, e.Exact = 1, 1, true }))
		if waits := len(launches(c)) == 0; waits != tc.waitsBesideOne {
			t.Errorf("%s: a one-GPU step beside it waits: %v, want %v", tc.name, waits, tc.waitsBesideOne)
		}
	}
}
