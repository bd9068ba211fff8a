package trainingspec

import (
	"errors"
	"math"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/loom-ml/loom/libs/errs"
	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
)

// vertexCustomJob is a CustomJob as Vertex's REST documentation writes one
// (camelCase), on a machine type of Loom's catalog.
const vertexCustomJob = `{
  "displayName": "mnist-train",
  "labels": {"team": "vision"},
  "jobSpec": {
    "workerPoolSpecs": [
      {"machineSpec": {"machineType": "a3-highgpu-8g", "acceleratorType": "NVIDIA_H100_80GB", "acceleratorCount": 8},
       "replicaCount": "1",
       "diskSpec": {"bootDiskType": "pd-ssd", "bootDiskSizeGb": 100},
       "containerSpec": {"imageUri": "us-docker.pkg.dev/vertex-ai/training/pytorch-gpu.2-1:latest",
                         "command": ["python3", "-m", "trainer.task"], "args": ["--epochs=3"],
                         "env": [{"name": "NCCL_DEBUG", "value": "INFO"}]}},
      {"machineSpec": {"machineType": "a3-highgpu-8g", "acceleratorType": "NVIDIA_H100_80GB", "acceleratorCount": 8},
       "replicaCount": "3",
       "containerSpec": {"imageUri": "us-docker.pkg.dev/vertex-ai/training/pytorch-gpu.2-1:latest"}}
    ],
    "scheduling": {"timeout": "7200s", "strategy": "SPOT"},
    "baseOutputDirectory": {"outputUriPrefix": "gs://my-bucket/mnist"}
  }
}`

func customJob(t *testing.T) *trainingv1.CustomJob {
	t.Helper()
	var j trainingv1.CustomJob
	if err := protojson.Unmarshal([]byte(vertexCustomJob), &j); err != nil {
		t.Fatal(err)
	}
	return &j
}

func tuningJob(t *testing.T) *trainingv1.HyperparameterTuningJob {
	t.Helper()
	j := &trainingv1.HyperparameterTuningJob{
		DisplayName: "tune", MaxTrialCount: 20, ParallelTrialCount: 4, MaxFailedTrialCount: 2,
		StudySpec: &trainingv1.StudySpec{
			Metrics: []*trainingv1.StudySpec_MetricSpec{{MetricId: "val_loss", Goal: trainingv1.StudySpec_MetricSpec_MINIMIZE}},
			Parameters: []*trainingv1.StudySpec_ParameterSpec{
				{ParameterId: "learning_rate", ScaleType: trainingv1.StudySpec_ParameterSpec_UNIT_LOG_SCALE,
					ParameterValueSpec: &trainingv1.StudySpec_ParameterSpec_DoubleValueSpec_{DoubleValueSpec: &trainingv1.StudySpec_ParameterSpec_DoubleValueSpec{MinValue: 1e-4, MaxValue: 0.1}}},
				{ParameterId: "optimizer",
					ParameterValueSpec: &trainingv1.StudySpec_ParameterSpec_CategoricalValueSpec_{CategoricalValueSpec: &trainingv1.StudySpec_ParameterSpec_CategoricalValueSpec{Values: []string{"sgd", "adam"}}},
					ConditionalParameterSpecs: []*trainingv1.StudySpec_ParameterSpec_ConditionalParameterSpec{{
						ParentValueCondition: &trainingv1.StudySpec_ParameterSpec_ConditionalParameterSpec_ParentCategoricalValues{
							ParentCategoricalValues: &trainingv1.StudySpec_ParameterSpec_ConditionalParameterSpec_CategoricalValueCondition{Values: []string{"sgd"}}},
						ParameterSpec: &trainingv1.StudySpec_ParameterSpec{ParameterId: "momentum",
							ParameterValueSpec: &trainingv1.StudySpec_ParameterSpec_DiscreteValueSpec_{DiscreteValueSpec: &trainingv1.StudySpec_ParameterSpec_DiscreteValueSpec{Values: []float64{0, 0.9}}}},
					}}},
				{ParameterId: "batch_size",
					ParameterValueSpec: &trainingv1.StudySpec_ParameterSpec_IntegerValueSpec_{IntegerValueSpec: &trainingv1.StudySpec_ParameterSpec_IntegerValueSpec{MinValue: 16, MaxValue: 256}}},
			},
		},
		TrialJobSpec: customJob(t).GetJobSpec(),
	}
	return j
}

// violations returns err's field → reasons, failing the test when err is
// not an *errs.InvalidError.
func violations(t *testing.T, err error) map[string]string {
	t.Helper()
	var inv *errs.InvalidError
	if !errors.As(err, &inv) {
		t.Fatalf("err = %v, want an *errs.InvalidError", err)
	}
	out := map[string]string{}
	for _, v := range inv.Violations {
		out[v.Field] += v.Reason + ";"
	}
	return out
}

func TestValidAreAccepted(t *testing.T) {
	t.Parallel()
	if err := ValidateCustomJob(customJob(t)); err != nil {
		t.Errorf("Vertex's CustomJob: %v", err)
	}
	if err := ValidateHyperparameterTuningJob(tuningJob(t)); err != nil {
		t.Errorf("tuning job: %v", err)
	}
	// Output dirs: file://, gs://, s3:// and a plain absolute path.
	for _, u := range []string{"file:///data/out", "gs://b/p", "s3://b/p", "/data/out"} {
		j := customJob(t)
		j.JobSpec.BaseOutputDirectory.OutputUriPrefix = u
		if err := ValidateCustomJob(j); err != nil {
			t.Errorf("base_output_directory %s: %v", u, err)
		}
	}
	// A CPU machine without accelerators, a placeholder pool 1 and pool 2
	// used, a python package; the catalog's own accelerator name.
	j := customJob(t)
	j.JobSpec.WorkerPoolSpecs[0].MachineSpec = &trainingv1.MachineSpec{MachineType: "n2-standard-8"}
	j.JobSpec.WorkerPoolSpecs[1] = &trainingv1.WorkerPoolSpec{}
	j.JobSpec.WorkerPoolSpecs = append(j.JobSpec.WorkerPoolSpecs, &trainingv1.WorkerPoolSpec{
		MachineSpec: &trainingv1.MachineSpec{MachineType: "a3-highgpu-8g", AcceleratorType: "nvidia-h100-80gb", AcceleratorCount: 8}, ReplicaCount: 2,
		Task: &trainingv1.WorkerPoolSpec_PythonPackageSpec{PythonPackageSpec: &trainingv1.PythonPackageSpec{
			PackageUris: []string{"file:///pkgs/trainer-0.1.tar.gz"}, PythonModule: "trainer.task"}}})
	if err := ValidateCustomJob(j); err != nil {
		t.Errorf("mixed pools: %v", err)
	}
}

// TestRefusalsNameFieldAndLimit: each bound is refused with the field path
// and the limit in the reason.
func TestRefusalsNameFieldAndLimit(t *testing.T) {
	t.Parallel()
	pool := func(j *trainingv1.CustomJob, i int) *trainingv1.WorkerPoolSpec { return j.JobSpec.WorkerPoolSpecs[i] }
	cases := []struct {
		name  string
		edit  func(*trainingv1.CustomJob)
		field string
		want  string
	}{
		{"five pools", func(j *trainingv1.CustomJob) {
			for len(j.JobSpec.WorkerPoolSpecs) < 5 {
				j.JobSpec.WorkerPoolSpecs = append(j.JobSpec.WorkerPoolSpecs, proto.Clone(pool(j, 1)).(*trainingv1.WorkerPoolSpec))
			}
		}, "custom_job.job_spec.worker_pool_specs", "at most 4 worker pools"},
		{"no pools", func(j *trainingv1.CustomJob) { j.JobSpec.WorkerPoolSpecs = nil }, "custom_job.job_spec.worker_pool_specs", "at least one"},
		{"no job spec", func(j *trainingv1.CustomJob) { j.JobSpec = nil }, "custom_job.job_spec", "required"},
		{"pool 0 two replicas", func(j *trainingv1.CustomJob) { pool(j, 0).ReplicaCount = 2 }, "custom_job.job_spec.worker_pool_specs[0].replica_count", "must be 1"},
		{"65 replicas", func(j *trainingv1.CustomJob) { pool(j, 1).ReplicaCount = 65 }, "custom_job.job_spec.worker_pool_specs[1].replica_count", "at most 64"},
		{"empty pool 0", func(j *trainingv1.CustomJob) { j.JobSpec.WorkerPoolSpecs[0] = &trainingv1.WorkerPoolSpec{} }, "custom_job.job_spec.worker_pool_specs[0]", "pool 0"},
		{"unknown machine", func(j *trainingv1.CustomJob) { pool(j, 0).MachineSpec.MachineType = "a3-highgpu-8gx" }, "custom_job.job_spec.worker_pool_specs[0].machine_spec.machine_type", "did you mean a3-highgpu-8g"},
		{"n1 machine", func(j *trainingv1.CustomJob) {
			pool(j, 0).MachineSpec = &trainingv1.MachineSpec{MachineType: "n1-standard-4"}
		}, "custom_job.job_spec.worker_pool_specs[0].machine_spec.machine_type", "unknown machine type"},
		{"wrong accelerator", func(j *trainingv1.CustomJob) { pool(j, 0).MachineSpec.AcceleratorType = "NVIDIA_TESLA_K80" }, "custom_job.job_spec.worker_pool_specs[0].machine_spec.accelerator_type", "set accelerator_type NVIDIA_H100_80GB"},
		{"wrong count", func(j *trainingv1.CustomJob) { pool(j, 0).MachineSpec.AcceleratorCount = 4 }, "custom_job.job_spec.worker_pool_specs[0].machine_spec.accelerator_count", "has 8 GPUs"},
		{"GPU on CPU machine", func(j *trainingv1.CustomJob) {
			pool(j, 0).MachineSpec = &trainingv1.MachineSpec{MachineType: "n2-standard-8", AcceleratorType: "NVIDIA_L4", AcceleratorCount: 1}
		}, "custom_job.job_spec.worker_pool_specs[0].machine_spec.accelerator_count", "has no GPUs"},
		{"257 args", func(j *trainingv1.CustomJob) { pool(j, 0).GetContainerSpec().Args = make([]string, 257) }, "custom_job.job_spec.worker_pool_specs[0].container_spec.args", "at most 256"},
		{"257 command", func(j *trainingv1.CustomJob) { pool(j, 0).GetContainerSpec().Command = make([]string, 257) }, "custom_job.job_spec.worker_pool_specs[0].container_spec.command", "at most 256"},
		{"129 env", func(j *trainingv1.CustomJob) {
			c := pool(j, 0).GetContainerSpec()
			c.Env = nil
			for i := 0; i < 129; i++ {
				c.Env = append(c.Env, &trainingv1.EnvVar{Name: "V" + strings.Repeat("X", i)})
			}
		}, "custom_job.job_spec.worker_pool_specs[0].container_spec.env", "at most 128"},
		{"bad env name", func(j *trainingv1.CustomJob) { pool(j, 0).GetContainerSpec().Env[0].Name = "A=B" }, "custom_job.job_spec.worker_pool_specs[0].container_spec.env[0].name", "not an environment variable name"},
		{"NUL arg", func(j *trainingv1.CustomJob) { pool(j, 0).GetContainerSpec().Args[0] = "a\x00b" }, "custom_job.job_spec.worker_pool_specs[0].container_spec.args[0]", "NUL"},
		{"nothing to run", func(j *trainingv1.CustomJob) { pool(j, 1).Task = nil }, "custom_job.job_spec.worker_pool_specs[1]", "container_spec or python_package_spec"},
		{"long display name", func(j *trainingv1.CustomJob) { j.DisplayName = strings.Repeat("x", 129) }, "custom_job.display_name", "limit of 128"},
		{"no display name", func(j *trainingv1.CustomJob) { j.DisplayName = "" }, "custom_job.display_name", "required"},
		{"escape in display name", func(j *trainingv1.CustomJob) { j.DisplayName = "a\x1b[2Jb" }, "custom_job.display_name", "control character"},
		{"65 labels", func(j *trainingv1.CustomJob) {
			for i := 0; i < 65; i++ {
				j.Labels[strings.Repeat("k", i+1)] = "v"
			}
		}, "custom_job.labels", "at most 64"},
		{"bad label", func(j *trainingv1.CustomJob) { j.Labels["Team"] = "x" }, "custom_job.labels", "label key"},
		{"relative output", func(j *trainingv1.CustomJob) { j.JobSpec.BaseOutputDirectory.OutputUriPrefix = "out/dir" }, "custom_job.job_spec.base_output_directory.output_uri_prefix", "absolute path"},
		{"http output", func(j *trainingv1.CustomJob) { j.JobSpec.BaseOutputDirectory.OutputUriPrefix = "http://x/y" }, "custom_job.job_spec.base_output_directory.output_uri_prefix", "file:///PATH"},
		{"dotdot output", func(j *trainingv1.CustomJob) { j.JobSpec.BaseOutputDirectory.OutputUriPrefix = "file:///a/../etc" }, "custom_job.job_spec.base_output_directory.output_uri_prefix", "'..'"},
		{"bad persistent resource", func(j *trainingv1.CustomJob) { j.JobSpec.PersistentResourceId = "Big_Cluster" }, "custom_job.job_spec.persistent_resource_id", "not a cluster id"},
		// Seconds past 292 years wrap a time.Duration: the job's time limit
		// would have been none, or seconds.
		{"timeout past a century", func(j *trainingv1.CustomJob) {
			j.JobSpec.Scheduling.Timeout = &durationpb.Duration{Seconds: 1 << 40}
		}, "custom_job.job_spec.scheduling.timeout", "0 to a century"},
		{"bad disk", func(j *trainingv1.CustomJob) { pool(j, 0).DiskSpec.BootDiskSizeGb = 5 }, "custom_job.job_spec.worker_pool_specs[0].disk_spec.boot_disk_size_gb", "10 to 65536"},
		{"oversize", func(j *trainingv1.CustomJob) {
			pool(j, 0).GetContainerSpec().Args = []string{strings.Repeat("x", 60<<10), strings.Repeat("x", 60<<10), strings.Repeat("x", 60<<10), strings.Repeat("x", 60<<10), strings.Repeat("x", 60<<10)}
		}, "custom_job", "limit of 262144"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			j := customJob(t)
			c.edit(j)
			got := violations(t, ValidateCustomJob(j))
			if !strings.Contains(got[c.field], c.want) {
				t.Errorf("violations %v: want %s: ...%s...", got, c.field, c.want)
			}
		})
	}
}

func TestTuningRefusals(t *testing.T) {
	t.Parallel()
	params := func(j *trainingv1.HyperparameterTuningJob) []*trainingv1.StudySpec_ParameterSpec {
		return j.StudySpec.Parameters
	}
	cases := []struct {
		name  string
		edit  func(*trainingv1.HyperparameterTuningJob)
		field string
		want  string
	}{
		{"1001 trials", func(j *trainingv1.HyperparameterTuningJob) { j.MaxTrialCount = 1001 }, "hyperparameter_tuning_job.max_trial_count", "at most 1000"},
		{"0 trials", func(j *trainingv1.HyperparameterTuningJob) { j.MaxTrialCount = 0 }, "hyperparameter_tuning_job.max_trial_count", "at least 1"},
		{"65 parallel", func(j *trainingv1.HyperparameterTuningJob) { j.MaxTrialCount = 100; j.ParallelTrialCount = 65 }, "hyperparameter_tuning_job.parallel_trial_count", "at most 64"},
		{"parallel over max", func(j *trainingv1.HyperparameterTuningJob) { j.MaxTrialCount = 3; j.ParallelTrialCount = 4 }, "hyperparameter_tuning_job.parallel_trial_count", "more than max_trial_count (3)"},
		{"no study", func(j *trainingv1.HyperparameterTuningJob) { j.StudySpec = nil }, "hyperparameter_tuning_job.study_spec", "required"},
		{"no trial spec", func(j *trainingv1.HyperparameterTuningJob) { j.TrialJobSpec = nil }, "hyperparameter_tuning_job.trial_job_spec", "required"},
		{"trial spec pools", func(j *trainingv1.HyperparameterTuningJob) { j.TrialJobSpec.WorkerPoolSpecs[0].ReplicaCount = 3 }, "hyperparameter_tuning_job.trial_job_spec.worker_pool_specs[0].replica_count", "must be 1"},
		{"no goal", func(j *trainingv1.HyperparameterTuningJob) { j.StudySpec.Metrics[0].Goal = 0 }, "hyperparameter_tuning_job.study_spec.metrics[0].goal", "MAXIMIZE or MINIMIZE"},
		{"65 parameters", func(j *trainingv1.HyperparameterTuningJob) {
			for i := 0; i < 65; i++ {
				j.StudySpec.Parameters = append(j.StudySpec.Parameters, proto.Clone(params(j)[2]).(*trainingv1.StudySpec_ParameterSpec))
			}
		}, "hyperparameter_tuning_job.study_spec.parameters", "at most 64"},
		{"duplicate id", func(j *trainingv1.HyperparameterTuningJob) { params(j)[2].ParameterId = "momentum" }, "hyperparameter_tuning_job.study_spec.parameters[2].parameter_id", "is also"},
		{"flag-breaking id", func(j *trainingv1.HyperparameterTuningJob) { params(j)[2].ParameterId = "a=b" }, "hyperparameter_tuning_job.study_spec.parameters[2].parameter_id", "--ID=VALUE"},
		{"257 categories", func(j *trainingv1.HyperparameterTuningJob) {
			c := params(j)[1].GetCategoricalValueSpec()
			for i := 0; len(c.Values) < 257; i++ {
				c.Values = append(c.Values, strings.Repeat("v", i+1))
			}
		}, "hyperparameter_tuning_job.study_spec.parameters[1].categorical_value_spec.values", "at most 256"},
		// A tester found an OSC 52 value (it writes the viewer's
		// clipboard) accepted and printed raw by `loom hptuning trials`.
		{"escape in a categorical value", func(j *trainingv1.HyperparameterTuningJob) {
			params(j)[1].GetCategoricalValueSpec().Values[1] = "\u001b]52;c;ZWNobyBwd25lZA==\u0007"
		}, "hyperparameter_tuning_job.study_spec.parameters[1].categorical_value_spec.values[1]", "control character"},
		{"bidi override in a categorical value", func(j *trainingv1.HyperparameterTuningJob) {
			params(j)[1].GetCategoricalValueSpec().Values[1] = "ad\u202eam"
		}, "hyperparameter_tuning_job.study_spec.parameters[1].categorical_value_spec.values[1]", "control character"},
		{"newline in a categorical value", func(j *trainingv1.HyperparameterTuningJob) {
			params(j)[1].GetCategoricalValueSpec().Values[1] = "a\nb"
		}, "hyperparameter_tuning_job.study_spec.parameters[1].categorical_value_spec.values[1]", "control character"},
		{"long categorical value", func(j *trainingv1.HyperparameterTuningJob) {
			params(j)[1].GetCategoricalValueSpec().Values[1] = strings.Repeat("v", 1025)
		}, "hyperparameter_tuning_job.study_spec.parameters[1].categorical_value_spec.values[1]", "1 to 1024 bytes, got 1025"},
		{"log of zero", func(j *trainingv1.HyperparameterTuningJob) { params(j)[0].GetDoubleValueSpec().MinValue = 0 }, "hyperparameter_tuning_job.study_spec.parameters[0].double_value_spec.min_value", "min_value > 0"},
		{"min over max", func(j *trainingv1.HyperparameterTuningJob) { params(j)[2].GetIntegerValueSpec().MinValue = 512 }, "hyperparameter_tuning_job.study_spec.parameters[2].integer_value_spec.max_value", "less than min_value"},
		// A tester's integer range of ±2^63 was accepted and its tuning
		// job then FAILED as it started (the search refuses it); a double
		// range of ±1e308 ran, every trial at a bound.
		{"integer beyond 2^52", func(j *trainingv1.HyperparameterTuningJob) {
			params(j)[2].GetIntegerValueSpec().MinValue, params(j)[2].GetIntegerValueSpec().MaxValue = math.MinInt64, math.MaxInt64
		}, "hyperparameter_tuning_job.study_spec.parameters[2].integer_value_spec.min_value", "outside ±2^52 (4503599627370496)"},
		{"integer max beyond 2^52", func(j *trainingv1.HyperparameterTuningJob) {
			params(j)[2].GetIntegerValueSpec().MaxValue = 1<<52 + 1
		}, "hyperparameter_tuning_job.study_spec.parameters[2].integer_value_spec.max_value", "outside ±2^52"},
		{"double range too wide", func(j *trainingv1.HyperparameterTuningJob) {
			params(j)[0].GetDoubleValueSpec().MinValue, params(j)[0].GetDoubleValueSpec().MaxValue = 1e308, math.MaxFloat64
		}, "hyperparameter_tuning_job.study_spec.parameters[0].double_value_spec", "too wide to search"},
		{"condition not a value", func(j *trainingv1.HyperparameterTuningJob) {
			params(j)[1].ConditionalParameterSpecs[0].GetParentCategoricalValues().Values = []string{"rmsprop"}
		}, "hyperparameter_tuning_job.study_spec.parameters[1].conditional_parameter_specs[0].parent_categorical_values.values[0]", "not a value of optimizer"},
		{"condition of wrong type", func(j *trainingv1.HyperparameterTuningJob) {
			params(j)[1].ConditionalParameterSpecs[0].ParentValueCondition = &trainingv1.StudySpec_ParameterSpec_ConditionalParameterSpec_ParentIntValues{
				ParentIntValues: &trainingv1.StudySpec_ParameterSpec_ConditionalParameterSpec_IntValueCondition{Values: []int64{1}}}
		}, "hyperparameter_tuning_job.study_spec.parameters[1].conditional_parameter_specs[0].parent_int_values", "not INTEGER"},
		{"depth 5", func(j *trainingv1.HyperparameterTuningJob) {
			p := params(j)[1]
			for d := 0; d < 5; d++ {
				child := &trainingv1.StudySpec_ParameterSpec{ParameterId: "c" + strings.Repeat("x", d),
					ParameterValueSpec: &trainingv1.StudySpec_ParameterSpec_CategoricalValueSpec_{CategoricalValueSpec: &trainingv1.StudySpec_ParameterSpec_CategoricalValueSpec{Values: []string{"sgd"}}}}
				p.ConditionalParameterSpecs = []*trainingv1.StudySpec_ParameterSpec_ConditionalParameterSpec{{
					ParentValueCondition: &trainingv1.StudySpec_ParameterSpec_ConditionalParameterSpec_ParentCategoricalValues{
						ParentCategoricalValues: &trainingv1.StudySpec_ParameterSpec_ConditionalParameterSpec_CategoricalValueCondition{Values: []string{"sgd"}}},
					ParameterSpec: child}}
				p = child
			}
		}, "hyperparameter_tuning_job.study_spec.parameters[1].conditional_parameter_specs[0].parameter_spec.conditional_parameter_specs[0].parameter_spec.conditional_parameter_specs[0].parameter_spec.conditional_parameter_specs[0].parameter_spec.conditional_parameter_specs", "at most 4 deep"},
		{"grid of doubles", func(j *trainingv1.HyperparameterTuningJob) { j.StudySpec.Algorithm = trainingv1.StudySpec_GRID_SEARCH }, "hyperparameter_tuning_job.study_spec.parameters[0].double_value_spec", "GRID_SEARCH"},
		{"asha factor", func(j *trainingv1.HyperparameterTuningJob) {
			j.StudySpec.AutomatedStoppingSpec = &trainingv1.StudySpec_AshaStoppingSpec_{AshaStoppingSpec: &trainingv1.StudySpec_AshaStoppingSpec{MinStepCount: 1, ReductionFactor: 1}}
		}, "hyperparameter_tuning_job.study_spec.asha_stopping_spec.reduction_factor", "2 to 16"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			j := tuningJob(t)
			c.edit(j)
			got := violations(t, ValidateHyperparameterTuningJob(j))
			if !strings.Contains(got[c.field], c.want) {
				t.Errorf("violations %v: want %s: ...%s...", got, c.field, c.want)
			}
		})
	}
}

func TestPipeline(t *testing.T) {
	t.Parallel()
	specJSON, err := protojson.Marshal(customJob(t).GetJobSpec())
	if err != nil {
		t.Fatal(err)
	}
	inputs := &structpb.Value{}
	if err := protojson.Unmarshal(specJSON, inputs); err != nil {
		t.Fatal(err)
	}
	p := &trainingv1.TrainingPipeline{DisplayName: "p", TrainingTaskDefinition: "gs://google-cloud-aiplatform/schema/trainingjob/definition/" + CustomTask,
		TrainingTaskInputs: inputs, ModelToUpload: &trainingv1.Model{DisplayName: "m", ArtifactUri: "file:///data/m"}}
	if err := ValidateTrainingPipeline(p); err != nil {
		t.Fatalf("custom pipeline: %v", err)
	}
	// A tuning task's inputs.
	tj := tuningJob(t)
	tj.DisplayName = ""
	tjJSON, _ := protojson.Marshal(tj)
	tin := &structpb.Value{}
	if err := protojson.Unmarshal(tjJSON, tin); err != nil {
		t.Fatal(err)
	}
	pt := proto.Clone(p).(*trainingv1.TrainingPipeline)
	pt.TrainingTaskDefinition, pt.TrainingTaskInputs, pt.ParentModel = TuningTask, tin, "projects/default/models/m"
	if err := ValidateTrainingPipeline(pt); err != nil {
		t.Fatalf("tuning pipeline: %v", err)
	}

	cases := []struct {
		name  string
		edit  func(*trainingv1.TrainingPipeline)
		field string
		want  string
	}{
		{"unknown task", func(p *trainingv1.TrainingPipeline) { p.TrainingTaskDefinition = "x.yaml" }, "training_pipeline.training_task_definition", "neither"},
		{"no inputs", func(p *trainingv1.TrainingPipeline) { p.TrainingTaskInputs = nil }, "training_pipeline.training_task_inputs", "required"},
		{"unknown input field", func(p *trainingv1.TrainingPipeline) {
			p.TrainingTaskInputs.GetStructValue().Fields["bogus"] = structpb.NewBoolValue(true)
		}, "training_pipeline.training_task_inputs", "bogus"},
		// The decoder's message quotes what the caller sent: a refusal
		// names it, cut, never echoing a field name of 100 KB back.
		{"long unknown input field", func(p *trainingv1.TrainingPipeline) {
			p.TrainingTaskInputs.GetStructValue().Fields["\x1b]52;"+strings.Repeat("a", 100<<10)] = structpb.NewBoolValue(true)
		}, "training_pipeline.training_task_inputs", "unknown field"},
		// A number JSON cannot hold is no missing object.
		{"NaN input", func(p *trainingv1.TrainingPipeline) {
			p.TrainingTaskInputs.GetStructValue().Fields["x"] = structpb.NewNumberValue(math.NaN())
		}, "training_pipeline.training_task_inputs", "not JSON"},
		{"inner pool", func(p *trainingv1.TrainingPipeline) {
			pools := p.TrainingTaskInputs.GetStructValue().Fields["workerPoolSpecs"].GetListValue().Values
			pools[1].GetStructValue().Fields["replicaCount"] = structpb.NewStringValue("100")
		}, "training_pipeline.training_task_inputs.worker_pool_specs[1].replica_count", "at most 64"},
		{"artifact on gs", func(p *trainingv1.TrainingPipeline) { p.ModelToUpload.ArtifactUri = "gs://b/m" }, "training_pipeline.model_to_upload.artifact_uri", "file:///PATH"},
		{"no model name", func(p *trainingv1.TrainingPipeline) { p.ModelToUpload.DisplayName = "" }, "training_pipeline.model_to_upload.display_name", "required"},
		{"bad parent model", func(p *trainingv1.TrainingPipeline) { p.ParentModel = "models/m" }, "training_pipeline.parent_model", "not a model name"},
		// What the registry refuses is refused at create, not once the
		// training has ended (a tester found these failing the pipeline
		// at its end).
		{"parent model without id", func(p *trainingv1.TrainingPipeline) { p.ParentModel = "projects/default/models/" }, "training_pipeline.parent_model", "not a model name"},
		{"parent model bad location", func(p *trainingv1.TrainingPipeline) { p.ParentModel = "projects/default/locations/US/models/m" }, "training_pipeline.parent_model", "not a model name"},
		{"parent model version", func(p *trainingv1.TrainingPipeline) { p.ParentModel = "projects/default/models/m@2" }, "training_pipeline.parent_model", "names a version"},
		{"model id not the parent's", func(p *trainingv1.TrainingPipeline) {
			p.ParentModel, p.ModelId = "projects/default/locations/us-central1/models/m", "n"
		}, "training_pipeline.model_id", `"n" names another model than parent_model projects/default/models/m`},
		{"long description", func(p *trainingv1.TrainingPipeline) { p.ModelToUpload.Description = strings.Repeat("d", 2049) }, "training_pipeline.model_to_upload.description", "2049 characters, more than the limit of 2048"},
		{"long version description", func(p *trainingv1.TrainingPipeline) { p.ModelToUpload.VersionDescription = strings.Repeat("é", 2049) }, "training_pipeline.model_to_upload.version_description", "limit of 2048"},
		{"17 aliases", func(p *trainingv1.TrainingPipeline) {
			for i := range 17 {
				p.ModelToUpload.VersionAliases = append(p.ModelToUpload.VersionAliases, "a"+strings.Repeat("b", i+1))
			}
		}, "training_pipeline.model_to_upload.version_aliases", "at most 16 aliases, got 17"},
		{"bad alias", func(p *trainingv1.TrainingPipeline) { p.ModelToUpload.VersionAliases = []string{"prod", "Prod"} }, "training_pipeline.model_to_upload.version_aliases[1]", "must be a lowercase letter"},
		{"reserved alias", func(p *trainingv1.TrainingPipeline) { p.ModelToUpload.VersionAliases = []string{"v3"} }, "training_pipeline.model_to_upload.version_aliases[0]", "reserved"},
		{"latest alias", func(p *trainingv1.TrainingPipeline) { p.ModelToUpload.VersionAliases = []string{"latest"} }, "training_pipeline.model_to_upload.version_aliases[0]", "reserved"},
		{"alias twice", func(p *trainingv1.TrainingPipeline) { p.ModelToUpload.VersionAliases = []string{"prod", "prod"} }, "training_pipeline.model_to_upload.version_aliases[1]", "listed twice"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			q := proto.Clone(p).(*trainingv1.TrainingPipeline)
			c.edit(q)
			err := ValidateTrainingPipeline(q)
			got := violations(t, err)
			if !strings.Contains(got[c.field], c.want) {
				t.Errorf("violations %.300v: want %s: ...%s...", got, c.field, c.want)
			}
			if len(err.Error()) > 1024 {
				t.Errorf("a refusal of %d bytes: %.200s...", len(err.Error()), err)
			}
		})
	}
}

// TestPipelineModelLimitsAreTheRegistrys: what ValidateTrainingPipeline
// accepts of a model to upload, the registry accepts too: a description of
// 2,048 characters, 16 aliases, a parent model and its own id.
func TestPipelineModelLimitsAreTheRegistrys(t *testing.T) {
	t.Parallel()
	p := &trainingv1.TrainingPipeline{DisplayName: "p", TrainingTaskDefinition: CustomTask,
		TrainingTaskInputs: structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{}}),
		ParentModel:        "projects/default/locations/us-central1/models/m", ModelId: "m",
		ModelToUpload: &trainingv1.Model{Description: strings.Repeat("d", MaxModelDescriptionLen), VersionDescription: "v2"}}
	for i := range MaxModelAliases {
		p.ModelToUpload.VersionAliases = append(p.ModelToUpload.VersionAliases, "a"+strings.Repeat("b", i+1))
	}
	got := violations(t, ValidateTrainingPipeline(p))
	for f, why := range got {
		if strings.Contains(f, "model") {
			t.Errorf("%s refused: %s", f, why)
		}
	}
}

// TestCheckPipelineModel: a parent_model of another project is refused
// (a tester found projects/other/models/bobm from project default failing
// the pipeline only at its end), naming the field and what to do.
func TestCheckPipelineModel(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		parent string
		want   string // "" accepted
	}{
		{"", ""},
		{"projects/default/models/m", ""},
		{"projects/default/locations/europe-west4/models/m", ""},
		{"models/m", ""}, // malformed: ValidateTrainingPipeline's to refuse
		{"projects/other/models/bobm", `"projects/other/models/bobm" is a model of project other, not of default, where the pipeline runs and registers its model: name a model of default (projects/default/models/MODEL), or create the pipeline in other`},
		{"projects/other/locations/us-central1/models/bobm", "is a model of project other, not of default"},
	} {
		err := CheckPipelineModel("default", &trainingv1.TrainingPipeline{ParentModel: c.parent})
		if c.want == "" {
			if err != nil {
				t.Errorf("%q: %v", c.parent, err)
			}
			continue
		}
		if got := violations(t, err); !strings.Contains(got["training_pipeline.parent_model"], c.want) {
			t.Errorf("%q: %v, want training_pipeline.parent_model: ...%s", c.parent, got, c.want)
		}
	}
}

// TestNilAndEmpty: missing resources are InvalidArgument, not a panic.
func TestNilAndEmpty(t *testing.T) {
	t.Parallel()
	for _, err := range []error{ValidateCustomJob(nil), ValidateHyperparameterTuningJob(nil), ValidateTrainingPipeline(nil),
		ValidateCustomJob(&trainingv1.CustomJob{}), ValidateHyperparameterTuningJob(&trainingv1.HyperparameterTuningJob{}),
		ValidateTrainingPipeline(&trainingv1.TrainingPipeline{}), ValidateCustomJobSpec("spec", nil)} {
		violations(t, err)
	}
}

func TestAcceleratorName(t *testing.T) {
	t.Parallel()
	if got := AcceleratorName("nvidia-h200-141gb"); got != "NVIDIA_H200_141GB" {
		t.Errorf("AcceleratorName = %s", got)
	}
}

// FuzzValidate: any decodable CustomJob, tuning job or pipeline (wire bytes
// or JSON) is judged without a panic, and a refusal is an InvalidError.
func FuzzValidate(f *testing.F) {
	j := &trainingv1.CustomJob{}
	if err := protojson.Unmarshal([]byte(vertexCustomJob), j); err != nil {
		f.Fatal(err)
	}
	b, _ := proto.Marshal(j)
	f.Add(b, []byte(vertexCustomJob))
	f.Add([]byte{}, []byte(`{"trainingTaskDefinition":"custom_task_1.0.0.yaml","trainingTaskInputs":{"workerPoolSpecs":[{}]}}`))
	f.Add([]byte{0x22, 0x00}, []byte(`{"studySpec":{"parameters":[{"conditionalParameterSpecs":[{"parameterSpec":{}}]}]}}`))
	f.Fuzz(func(t *testing.T, wire, js []byte) {
		check := func(err error) {
			if err == nil {
				return
			}
			var inv *errs.InvalidError
			if !errors.As(err, &inv) {
				t.Fatalf("refusal %v is not an InvalidError", err)
			}
		}
		for _, data := range [][]byte{wire, js} {
			cj, tj, tp := &trainingv1.CustomJob{}, &trainingv1.HyperparameterTuningJob{}, &trainingv1.TrainingPipeline{}
			dec := func(m proto.Message) bool {
				if len(data) > 0 && data[0] == '{' {
					return protojson.Unmarshal(data, m) == nil
				}
				return proto.Unmarshal(data, m) == nil
			}
			if dec(cj) {
				check(ValidateCustomJob(cj))
			}
			if dec(tj) {
				check(ValidateHyperparameterTuningJob(tj))
			}
			if dec(tp) {
				check(ValidateTrainingPipeline(tp))
			}
		}
	})
}
