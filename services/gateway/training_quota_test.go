package gateway

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// gpuTuningJSON is a tuning job of 2 parallel trials of 8 GPUs each.
const gpuTuningJSON = `{"display_name":"t","max_trial_count":4,"parallel_trial_count":2,` +
	`"study_spec":{"metrics":[{"metric_id":"val_loss","goal":"MINIMIZE"}],"parameters":[{"parameter_id":"lr","double_value_spec":{"min_value":0.001,"max_value":0.1}}]},` +
	`"trial_job_spec":{"worker_pool_specs":[{"machine_spec":{"machine_type":"a3-highgpu-8g","accelerator_type":"NVIDIA_H100_80GB","accelerator_count":8},"replica_count":1,"container_spec":{"command":["true"]}}]}}`

// TestTrainingQuotas: training creates count against the project's quota
// of training resources in flight and, with their GPUs (a CustomJob's pools'
// accelerator_count × replica_count, a tuning job's parallel trials × a
// trial's), against its GPU quota beside its clusters'. A refusal is
// ResourceExhausted naming the quota, its variable and the numbers, and
// writes nothing; accepted resources count before the training service
// has read them, a resource the service has counts once (its own cluster
// not again), an ended one not at all; a retry of an accepted create is
// answered even at the quota.
func TestTrainingQuotas(t *testing.T) {
	t.Parallel()
	// default holds c1: 16 GPUs.
	h := newHarness(t, func(c *Config) { c.Limits.ProjectQuotas = "default=training:2,gpus:24" })
	ctx := testkit.Context(t, wait)
	tc := h.trainingAs(t, "ana")
	create := func(j *trainingv1.CustomJob, rid string) (*trainingv1.CustomJob, error) {
		return tc.CreateCustomJob(ctx, &trainingv1.CreateCustomJobRequest{Parent: location, CustomJob: j, RequestId: rid})
	}
	var noGPU trainingv1.CustomJob
	if err := protojson.Unmarshal([]byte(snakeCustomJob), &noGPU); err != nil {
		t.Fatal(err)
	}

	// 16 in c1 + 8 asked: at the GPU quota, accepted.
	a, err := create(customJobSpec(t), "a")
	if err != nil {
		t.Fatalf("8 GPUs within the quota: %v", err)
	}
	_, err = create(customJobSpec(t), "")
	wantCode(t, "8 GPUs more", err, codes.ResourceExhausted,
		"project default: 32 GPUs would exceed the quota of 24 GPUs (LOOM_GATEWAY_PROJECT_QUOTAS): 16 in its clusters, 8 in its training resources in flight, 8 asked by custom_job")
	if _, err := create(&noGPU, ""); err != nil {
		t.Fatalf("a second resource, without GPUs: %v", err)
	}
	var tj trainingv1.HyperparameterTuningJob
	if err := protojson.Unmarshal([]byte(gpuTuningJSON), &tj); err != nil {
		t.Fatal(err)
	}
	_, err = tc.CreateHyperparameterTuningJob(ctx, &trainingv1.CreateHyperparameterTuningJobRequest{Parent: location, HyperparameterTuningJob: &tj})
	wantCode(t, "a third resource", err, codes.ResourceExhausted,
		"3 training resources in flight would exceed the quota of 2 (LOOM_GATEWAY_PROJECT_QUOTAS): 2 in flight (2 accepted, not yet started)",
		"40 GPUs would exceed the quota of 24 GPUs (LOOM_GATEWAY_PROJECT_QUOTAS): 16 in its clusters, 8 in its training resources in flight, 16 asked by hyperparameter_tuning_job")
	// A retry of an accepted create is answered, quota or not.
	if again, err := create(customJobSpec(t), "a"); err != nil || again.GetName() != a.GetName() {
		t.Errorf("retry of an accepted create at the quota: %v, %v", again, err)
	}

	// The training service reads a and makes its cluster: a counts once,
	// its cluster not beside it.
	running := proto.Clone(a).(*trainingv1.CustomJob)
	running.State = trainingv1.JobState_JOB_STATE_RUNNING
	h.w.setTraining(running)
	h.w.setCluster(&loomv1.Cluster{Name: running.GetCluster(), Compute: &loomv1.ComputeResources{NodePools: []*loomv1.NodePool{
		{Id: "wp0", MachineType: "a3-highgpu-8g", NodeCount: 1, AcceleratorCount: 8}}}, Status: &loomv1.ClusterStatus{State: loomv1.Cluster_RUNNING}})
	_, err = create(&noGPU, "")
	wantCode(t, "still two in flight", err, codes.ResourceExhausted, "2 in flight (1 accepted, not yet started)")
	_, err = create(customJobSpec(t), "")
	wantCode(t, "a's GPUs once", err, codes.ResourceExhausted, "32 GPUs would exceed the quota of 24 GPUs (LOOM_GATEWAY_PROJECT_QUOTAS): 16 in its clusters, 8 in its training resources in flight")

	// a ends and its cluster goes: one in flight, room for one more.
	running.State = trainingv1.JobState_JOB_STATE_SUCCEEDED
	h.w.setTraining(running)
	h.w.setCluster(&loomv1.Cluster{Name: running.GetCluster(), Status: &loomv1.ClusterStatus{State: loomv1.Cluster_DELETED}})
	if _, err := create(customJobSpec(t), ""); err != nil {
		t.Fatalf("after a ended: %v", err)
	}
	// Accepted creates and commands: a, the no-GPU job, the last one. The
	// relay publishes the last one after its create answered: wait for it.
	var n int
	testkit.WaitFor(t, 10*time.Second, "the accepted creates' commands published", func() (bool, error) {
		n = len(testkit.Events(t, h.broker, topics.TrainingCommands))
		return n >= 3, nil
	})
	if n != 3 {
		t.Errorf("%d training commands, want 3 (refused creates write none)", n)
	}
}

// TestTrainingMaxSubmitJobs: a training create's scheduler jobs count
// against the user's MaxSubmitJobs as a SubmitJob's do: a CustomJob one, a
// tuning job its parallel trials.
func TestTrainingMaxSubmitJobs(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *Config) { c.Limits.MaxSubmitJobs = 2 })
	ctx := testkit.Context(t, wait)
	tc := h.trainingAs(t, "ana")
	if _, err := tc.CreateCustomJob(ctx, &trainingv1.CreateCustomJobRequest{Parent: location, CustomJob: customJobSpec(t)}); err != nil {
		t.Fatalf("one job: %v", err)
	}
	var tj trainingv1.HyperparameterTuningJob
	if err := protojson.Unmarshal([]byte(gpuTuningJSON), &tj); err != nil {
		t.Fatal(err)
	}
	_, err := tc.CreateHyperparameterTuningJob(ctx, &trainingv1.CreateHyperparameterTuningJobRequest{Parent: location, HyperparameterTuningJob: &tj})
	wantCode(t, "2 parallel trials more", err, codes.ResourceExhausted, "user ana in project default: 3 jobs would exceed MaxSubmitJobs of 2", "1 pending or running, 2 submitted")
}

// TestTrainingReadYourWrite: a Get right after a create, before the
// training service has read it, answers the resource as accepted (after
// waiting at most app.TrainingCatchUp), and the service's view once it has
// one; a cancel then is written; a delete drops the accepted record.
func TestTrainingReadYourWrite(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := testkit.Context(t, wait)
	tc := h.trainingAs(t, "ana")
	j, err := tc.CreateCustomJob(ctx, &trainingv1.CreateCustomJobRequest{Parent: location, CustomJob: customJobSpec(t)})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	got, err := tc.GetCustomJob(ctx, &trainingv1.GetCustomJobRequest{Name: j.GetName()})
	if err != nil || got.GetState() != trainingv1.JobState_JOB_STATE_QUEUED || got.GetName() != j.GetName() || got.GetUser() != "ana" {
		t.Fatalf("get right after create: %v, %v", got, err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("get waited %v", d)
	}
	// Another user may not cancel it through the accepted record.
	_, err = h.trainingAs(t, "bob").CancelCustomJob(ctx, &trainingv1.CancelCustomJobRequest{Name: j.GetName()})
	wantCode(t, "bob cancels ana's accepted job", err, codes.PermissionDenied)
	if _, err := tc.CancelCustomJob(ctx, &trainingv1.CancelCustomJobRequest{Name: j.GetName()}); err != nil {
		t.Fatalf("cancel right after create: %v", err)
	}
	// The service's view wins once it has one.
	seen := proto.Clone(j).(*trainingv1.CustomJob)
	seen.State = trainingv1.JobState_JOB_STATE_CANCELLED
	h.w.setTraining(seen)
	if got, err := tc.GetCustomJob(ctx, &trainingv1.GetCustomJobRequest{Name: j.GetName()}); err != nil || got.GetState() != trainingv1.JobState_JOB_STATE_CANCELLED {
		t.Fatalf("get once the service has it: %v, %v", got, err)
	}
	if _, err := tc.DeleteCustomJob(ctx, &trainingv1.DeleteCustomJobRequest{Name: j.GetName()}); err != nil {
		t.Fatalf("delete: %v", err)
	}
	h.w.mu.Lock()
	delete(h.w.training, j.GetName())
	h.w.mu.Unlock()
	_, err = tc.GetCustomJob(ctx, &trainingv1.GetCustomJobRequest{Name: j.GetName()})
	wantCode(t, "get after delete", err, codes.NotFound)
	// An unknown name is NotFound at once.
	_, err = tc.GetCustomJob(ctx, &trainingv1.GetCustomJobRequest{Name: location + "/customJobs/999999"})
	wantCode(t, "get of an unknown job", err, codes.NotFound)
}
