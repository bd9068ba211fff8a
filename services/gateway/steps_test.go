package gateway

import (
	"context"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// steps are the job steps the fake scheduler knows, per world (the
// harness's world has no field for them).
var steps sync.Map // *world → *stepTable

type stepTable struct {
	mu    sync.Mutex
	steps map[string][]*loomv1.JobStep // by job name
}

func stepsOf(w *world) *stepTable {
	v, _ := steps.LoadOrStore(w, &stepTable{steps: map[string][]*loomv1.JobStep{}})
	return v.(*stepTable)
}

func (t *stepTable) add(s *loomv1.JobStep) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.steps[s.GetJob()] = append(t.steps[s.GetJob()], proto.Clone(s).(*loomv1.JobStep))
}

func (f fakeScheduler) ListJobSteps(_ context.Context, r *loomv1.ListJobStepsRequest) (*loomv1.ListJobStepsResponse, error) {
	f.w.mu.Lock()
	_, known := f.w.jobs[r.GetParent()]
	f.w.mu.Unlock()
	if !known {
		return nil, status.Errorf(codes.NotFound, "job %s not found", r.GetParent())
	}
	t := stepsOf(f.w)
	t.mu.Lock()
	defer t.mu.Unlock()
	if r.GetAttempt() > 1 { // the steps here are all of attempt 1
		return nil, status.Errorf(codes.NotFound, "job %s has had no attempt %d", r.GetParent(), r.GetAttempt())
	}
	return &loomv1.ListJobStepsResponse{Steps: t.steps[r.GetParent()]}, nil
}

func (f fakeScheduler) GetJobStep(_ context.Context, r *loomv1.GetJobStepRequest) (*loomv1.JobStep, error) {
	t := stepsOf(f.w)
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, ss := range t.steps {
		for _, s := range ss {
			if s.GetName() == r.GetName() {
				return proto.Clone(s).(*loomv1.JobStep), nil
			}
		}
	}
	return nil, status.Errorf(codes.NotFound, "step %s not found", r.GetName())
}

func TestJobSteps(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := testkit.Context(t, 2*wait)
	job := project + "/jobs/7"
	h.w.setJob(&loomv1.Job{Name: job, JobId: "7", Cluster: cluster1, State: loomv1.JobState_PENDING, Nodes: []string{"a", "b"}})

	// Bad input names every field.
	_, err := h.jobs().CreateJobStep(ctx, &loomv1.CreateJobStepRequest{Parent: "jobs/7", Ntasks: -1, Env: map[string]string{"A-B": "x"}})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("bad create: %v", err)
	}
	for _, field := range []string{"parent", "command", "ntasks", "env[A-B]"} {
		if !strings.Contains(status.Convert(err).Message(), field) {
			t.Errorf("bad create: %q does not name %s", status.Convert(err).Message(), field)
		}
	}
	create := &loomv1.CreateJobStepRequest{Parent: job, RequestId: "rid-1", Command: []string{"hostname"}, NodeCount: 2,
		Env: map[string]string{"X": "1", "BASH_FUNC_module%%": "() { :; }"}, WorkDir: "/w", KillOnBadExit: true}
	// A job that does not run: Slurm's words.
	if _, err := h.jobs().CreateJobStep(ctx, create); status.Code(err) != codes.FailedPrecondition ||
		status.Convert(err).Message() != "Job is pending execution" {
		t.Fatalf("pending job: %v", err)
	}
	h.w.setJob(&loomv1.Job{Name: job, JobId: "7", Cluster: cluster1, State: loomv1.JobState_RUNNING, Nodes: []string{"a", "b"}})
	tooMany := proto.Clone(create).(*loomv1.CreateJobStepRequest)
	tooMany.NodeCount = 3
	if _, err := h.jobs().CreateJobStep(ctx, tooMany); status.Code(err) != codes.InvalidArgument ||
		!strings.Contains(status.Convert(err).Message(), "node_count") {
		t.Fatalf("too many nodes: %v", err)
	}

	// The gateway emits the command and answers once the scheduler shows
	// the step; the "scheduler" here records it when the command arrives.
	type result struct {
		s   *loomv1.JobStep
		err error
	}
	res := make(chan result, 1)
	go func() {
		s, err := h.jobs().CreateJobStep(ctx, create)
		res <- result{s, err}
	}()
	cmd := testkit.WaitEvent(t, h.broker, topics.JobCommands, wait, func(e envelope.Event) bool {
		c, ok := e.Payload.(*eventsv1.CreateJobStep)
		return ok && c.GetJob() == job
	})
	c := cmd.Payload.(*eventsv1.CreateJobStep)
	if cmd.Key != cluster1 || c.GetRequestId() != "rid-1" || c.GetNodeCount() != 2 || c.GetEnv()["X"] != "1" ||
		c.GetWorkDir() != "/w" || !c.GetKillOnBadExit() || c.GetCommand()[0] != "hostname" {
		t.Fatalf("CreateJobStep command %v (key %s)", c, cmd.Key)
	}
	step := &loomv1.JobStep{Name: job + "/steps/0", Job: job, StepId: 0, State: loomv1.JobState_RUNNING, RequestId: "rid-1", NumTasks: 2}
	stepsOf(h.w).add(step)
	r := <-res
	if r.err != nil || r.s.GetName() != step.GetName() {
		t.Fatalf("CreateJobStep = %v, %v", r.s, r.err)
	}
	// A retry with the same request id is answered from the step, with no
	// second command.
	again, err := h.jobs().CreateJobStep(ctx, create)
	if err != nil || again.GetName() != step.GetName() {
		t.Fatalf("retry: %v %v", again, err)
	}
	n := 0
	for _, e := range testkit.Events(t, h.broker, topics.JobCommands) {
		if _, ok := e.Payload.(*eventsv1.CreateJobStep); ok {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d CreateJobStep commands, want 1", n)
	}

	// Reads and cancel.
	if _, err := h.jobs().GetJobStep(ctx, &loomv1.GetJobStepRequest{Name: job + "/steps/x"}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("bad step name: %v", err)
	}
	// The scheduler's NotFound comes back as the gateway's own, in its words.
	if _, err := h.jobs().GetJobStep(ctx, &loomv1.GetJobStepRequest{Name: job + "/steps/9"}); status.Code(err) != codes.NotFound ||
		status.Convert(err).Message() != "step "+job+"/steps/9 not found" {
		t.Fatalf("unknown step: %v", err)
	}
	if l, err := h.jobs().ListJobSteps(ctx, &loomv1.ListJobStepsRequest{Parent: job}); err != nil || len(l.GetSteps()) != 1 {
		t.Fatalf("ListJobSteps: %v %v", l, err)
	}
	// An earlier run's steps are asked for by attempt (sacct -D); one the
	// job has not had is NotFound, not an empty list.
	if l, err := h.jobs().ListJobSteps(ctx, &loomv1.ListJobStepsRequest{Parent: job, Attempt: 1}); err != nil || len(l.GetSteps()) != 1 {
		t.Fatalf("ListJobSteps of attempt 1: %v %v", l, err)
	}
	if _, err := h.jobs().ListJobSteps(ctx, &loomv1.ListJobStepsRequest{Parent: job, Attempt: 5}); status.Code(err) != codes.NotFound ||
		status.Convert(err).Message() != "job "+job+" has had no attempt 5" {
		t.Fatalf("ListJobSteps of an attempt the job has not had: %v", err)
	}
	if _, err := h.jobs().ListJobSteps(ctx, &loomv1.ListJobStepsRequest{Parent: job, Attempt: -1}); status.Code(err) != codes.InvalidArgument ||
		!strings.Contains(status.Convert(err).Message(), "attempt") {
		t.Fatalf("ListJobSteps with a negative attempt: %v", err)
	}
	if _, err := h.jobs().CancelJobStep(ctx, &loomv1.CancelJobStepRequest{Name: step.GetName(), Signal: "NOPE"}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("bad signal: %v", err)
	}
	if _, err := h.jobs().CancelJobStep(ctx, &loomv1.CancelJobStepRequest{Name: step.GetName()}); err != nil {
		t.Fatalf("CancelJobStep: %v", err)
	}
	testkit.WaitEvent(t, h.broker, topics.JobCommands, wait, func(e envelope.Event) bool {
		c, ok := e.Payload.(*eventsv1.CancelJobStep)
		return ok && c.GetJob() == job && c.GetStepId() == 0 && e.Key == cluster1
	})
	ended := proto.Clone(step).(*loomv1.JobStep)
	ended.Name, ended.StepId, ended.State, ended.RequestId = job+"/steps/1", 1, loomv1.JobState_COMPLETED, "rid-2"
	stepsOf(h.w).add(ended)
	if _, err := h.jobs().CancelJobStep(ctx, &loomv1.CancelJobStepRequest{Name: ended.GetName()}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("cancel of an ended step: %v", err)
	}
	// The job ends while a create waits: FailedPrecondition in Slurm's words.
	h.w.setJob(&loomv1.Job{Name: job, JobId: "7", Cluster: cluster1, State: loomv1.JobState_COMPLETED})
	late := proto.Clone(create).(*loomv1.CreateJobStepRequest)
	late.RequestId = "rid-3"
	if _, err := h.jobs().CreateJobStep(ctx, late); status.Code(err) != codes.FailedPrecondition ||
		status.Convert(err).Message() != "Job/step already completing or completed" {
		t.Fatalf("ended job: %v", err)
	}
}

// TestStepGPURequestAndCanceller: a step's GPU request (srun --gpus,
// --cpus-per-gpu, --gpu-bind=none) reaches the scheduler's command, for
// scontrol show step's TresPerStep, CpusPerTres and TresBind (and the
// tasks' shared GPUs), and so does no_gpus (--gres=none), without which
// the scheduler gives the step its job's GPUs; scancel JOB.STEP names who cancels, the
// authenticated caller (root, cancelling ana's step), never a request
// field, for sacct's "CANCELLED by UID" on the step's row.
func TestStepGPURequestAndCanceller(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := testkit.Context(t, 2*wait)
	job := project + "/jobs/57"
	h.w.setJob(&loomv1.Job{Name: job, JobId: "57", Cluster: cluster1, State: loomv1.JobState_RUNNING, User: "ana",
		Partition: "all", Nodes: []string{"a"}})
	ana := loomv1.NewJobServiceClient(h.as(t, "ana"))
	go func() {
		// Answered once the step below is recorded; the command is what
		// is checked.
		_, _ = ana.CreateJobStep(ctx, &loomv1.CreateJobStepRequest{Parent: job, RequestId: "rid-g",
			Command: []string{"hostname"}, Gpus: 2, CpusPerGpu: 3, GpuBindNone: true, GpusPerNode: 1, GpusInherited: true, AllocationCpus: true, NoGpus: true})
	}()
	c := jobCommand(t, h, func(c *eventsv1.CreateJobStep) bool { return c.GetJob() == job })
	if c.GetGpus() != 2 || c.GetCpusPerGpu() != 3 || !c.GetGpuBindNone() || c.GetGpusPerNode() != 1 || !c.GetGpusInherited() || !c.GetAllocationCpus() || !c.GetNoGpus() {
		t.Fatalf("CreateJobStep command: gpus %d, cpus_per_gpu %d, gpu_bind_none %v, gpus_per_node %d, gpus_inherited %v, allocation_cpus %v, no_gpus %v; want 2, 3, true, 1, true, true, true",
			c.GetGpus(), c.GetCpusPerGpu(), c.GetGpuBindNone(), c.GetGpusPerNode(), c.GetGpusInherited(), c.GetAllocationCpus(), c.GetNoGpus())
	}
	stepsOf(h.w).add(&loomv1.JobStep{Name: job + "/steps/0", Job: job, StepId: 0, State: loomv1.JobState_RUNNING,
		RequestId: "rid-g", NumTasks: 1})

	root := loomv1.NewJobServiceClient(h.as(t, "root"))
	if _, err := root.CancelJobStep(ctx, &loomv1.CancelJobStepRequest{Name: job + "/steps/0"}); err != nil {
		t.Fatalf("root cancels ana's step: %v", err)
	}
	jobCommand(t, h, func(c *eventsv1.CancelJobStep) bool {
		return c.GetJob() == job && c.GetStepId() == 0 && c.GetUser() == "root"
	})
}
