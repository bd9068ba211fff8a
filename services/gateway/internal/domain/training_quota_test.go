package domain

import (
	"errors"
	"strings"
	"testing"

	"github.com/loom-ml/loom/libs/errs"
	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
)

func gpuPool(count int32, replicas int64) *trainingv1.WorkerPoolSpec {
	return &trainingv1.WorkerPoolSpec{MachineSpec: &trainingv1.MachineSpec{AcceleratorCount: count}, ReplicaCount: replicas}
}

// TestTrainingGPUs: a CustomJob asks its pools' accelerator_count ×
// replica_count, none on a persistent resource; a tuning job its parallel
// trials × a trial's; a pipeline its task's.
func TestTrainingGPUs(t *testing.T) {
	t.Parallel()
	spec := &trainingv1.CustomJobSpec{WorkerPoolSpecs: []*trainingv1.WorkerPoolSpec{gpuPool(8, 1), gpuPool(8, 3), gpuPool(0, 2)}}
	shared := &trainingv1.CustomJobSpec{PersistentResourceId: "c1", WorkerPoolSpecs: spec.WorkerPoolSpecs}
	cases := []struct {
		name string
		got  int64
		want int64
	}{
		{"custom job", TrainingGPUs(&trainingv1.CustomJob{JobSpec: spec}), 32},
		{"persistent resource", TrainingGPUs(&trainingv1.CustomJob{JobSpec: shared}), 0},
		{"tuning job", TrainingGPUs(&trainingv1.HyperparameterTuningJob{ParallelTrialCount: 3, TrialJobSpec: spec}), 96},
		{"tuning job, parallel unset", TrainingGPUs(&trainingv1.HyperparameterTuningJob{TrialJobSpec: spec}), 32},
	}
	for _, c := range cases {
		if c.got != c.want {
			t.Errorf("%s: %d GPUs, want %d", c.name, c.got, c.want)
		}
	}
}

// TestCheckTrainingQuota: at the quota is allowed; one past it is
// ResourceExhausted naming the quota, its variable and every part of the
// count; a create without GPUs never trips the GPU quota.
func TestCheckTrainingQuota(t *testing.T) {
	t.Parallel()
	if got, err := ParseProjectQuotas("p=training:5,gpus:24"); err != nil || got["p"] != (Quota{GPUs: 24, Training: 5}) {
		t.Errorf("training in -project-quotas: %+v, %v", got, err)
	}
	q := Quota{GPUs: 24, Training: 2}
	src := map[string]string{"gpus": "LOOM_GATEWAY_QUOTA_GPUS", "training": "LOOM_GATEWAY_QUOTA_TRAINING"}
	if err := CheckTrainingQuota("p", "custom_job", q, src, TrainingUsage{InFlight: 1, GPUs: 8}, 8, 8); err != nil {
		t.Errorf("at the quota: %v", err)
	}
	err := CheckTrainingQuota("p", "custom_job", q, src, TrainingUsage{InFlight: 2, GPUs: 8, Accepted: 1}, 8, 16)
	if !errors.Is(err, errs.ResourceExhausted) {
		t.Fatalf("past the quotas: %v", err)
	}
	for _, want := range []string{"project p: 3 training resources in flight would exceed the quota of 2 (LOOM_GATEWAY_QUOTA_TRAINING): 2 in flight (1 accepted, not yet started)",
		"32 GPUs would exceed the quota of 24 GPUs (LOOM_GATEWAY_QUOTA_GPUS): 8 in its clusters, 8 in its training resources in flight, 16 asked by custom_job"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not say %q", err, want)
		}
	}
	if err := CheckTrainingQuota("p", "custom_job", q, src, TrainingUsage{InFlight: 1, GPUs: 100}, 100, 0); err != nil {
		t.Errorf("no GPUs asked, over the GPU quota already: %v", err)
	}
	if err := CheckTrainingQuota("p", "custom_job", Quota{}, src, TrainingUsage{InFlight: 1e6, GPUs: 1e6}, 1e6, 8); err != nil {
		t.Errorf("no quotas: %v", err)
	}
}
