package cli

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/loom-ml/loom/cmd/loom/internal/fakegw"
	"github.com/loom-ml/loom/libs/termtext"
	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
)

const trainingParent = "projects/default/locations/us-central1"

// vertexJobFile is a CustomJob as Vertex's REST documentation writes one
// (camelCase), on catalog machine types.
const vertexJobFile = `{
  "displayName": "mnist",
  "labels": {"team": "vision"},
  "jobSpec": {
    "workerPoolSpecs": [
      {"machineSpec": {"machineType": "a3-highgpu-8g", "acceleratorType": "NVIDIA_H100_80GB", "acceleratorCount": 8},
       "replicaCount": "1",
       "containerSpec": {"imageUri": "pytorch:2.1", "command": ["loom", "train"], "args": ["--epochs=3"]}},
      {"machineSpec": {"machineType": "a3-highgpu-8g", "acceleratorType": "NVIDIA_H100_80GB", "acceleratorCount": 8},
       "replicaCount": "3",
       "containerSpec": {"imageUri": "pytorch:2.1", "command": ["loom", "train"]}}
    ],
    "baseOutputDirectory": {"outputUriPrefix": "file:///data/mnist"}
  }
}`

const snakeJobFile = `{"display_name": "snake", "job_spec": {"worker_pool_specs": [
  {"machine_spec": {"machine_type": "n2-standard-8"}, "replica_count": 1,
   "python_package_spec": {"package_uris": ["file:///pkgs/trainer.tar.gz"], "python_module": "trainer.task"}}]}}`

const tuningFile = `{
  "displayName": "tune",
  "maxTrialCount": 3, "parallelTrialCount": 1,
  "studySpec": {
    "metrics": [{"metricId": "val_loss", "goal": "MINIMIZE"}],
    "parameters": [
      {"parameterId": "learning_rate", "doubleValueSpec": {"minValue": 0.0001, "maxValue": 0.1}, "scaleType": "UNIT_LOG_SCALE"},
      {"parameterId": "batch_size", "discreteValueSpec": {"values": [32, 64, 128]}}
    ]
  },
  "trialJobSpec": {"workerPoolSpecs": [{"machineSpec": {"machineType": "n2-standard-8"}, "replicaCount": "1",
    "containerSpec": {"command": ["loom", "train"]}}]}
}`

// newTrainingGateway is the fake gateway with a TrainingService.
func newTrainingGateway(t *testing.T) (*fakegw.Gateway, *fakegw.Training, string) {
	t.Helper()
	tr := &fakegw.Training{Resources: map[string]proto.Message{}, Progress: map[string][]proto.Message{}}
	f := &fakegw.Gateway{Training: tr}
	return f, tr, f.Serve(t)
}

func customJob(t *testing.T, name string, state trainingv1.JobState, edit ...func(*trainingv1.CustomJob)) *trainingv1.CustomJob {
	t.Helper()
	var j trainingv1.CustomJob
	if err := protojson.Unmarshal([]byte(vertexJobFile), &j); err != nil {
		t.Fatal(err)
	}
	j.Name, j.State, j.User, j.CreateTime = name, state, "ana", ts(time.Hour)
	j.Cluster, j.Job = "projects/default/clusters/cj-"+shortName(name), "projects/default/jobs/"+shortName(name)
	for _, e := range edit {
		e(&j)
	}
	return &j
}

// TestCustomJobCreateWait: a Vertex camelCase file is sent as it is to the
// location's parent with a request id, and --wait shows each state until
// the job ends.
func TestCustomJobCreateWait(t *testing.T) {
	t.Parallel()
	f, tr, gw := newTrainingGateway(t)
	name := trainingParent + "/customJobs/1"
	tr.Progress[name] = []proto.Message{
		customJob(t, name, trainingv1.JobState_JOB_STATE_QUEUED),
		customJob(t, name, trainingv1.JobState_JOB_STATE_PENDING),
		customJob(t, name, trainingv1.JobState_JOB_STATE_RUNNING),
		customJob(t, name, trainingv1.JobState_JOB_STATE_RUNNING),
		customJob(t, name, trainingv1.JobState_JOB_STATE_SUCCEEDED),
	}
	out, errOut, code := run(t, gw, "jobs", "custom", "create", "-f", writeFile(t, "job.json", vertexJobFile), "--wait")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	golden(t, out, `
Created custom job 1
  15:04:05  QUEUED
  15:04:05  PENDING on cj-1
  15:04:05  RUNNING on cj-1
  15:04:05  SUCCEEDED
`)
	req, _ := fakegw.LastRequest[*trainingv1.CreateCustomJobRequest](f)
	if req.GetParent() != trainingParent || req.GetRequestId() == "" || req.GetCustomJob().GetDisplayName() != "mnist" ||
		req.GetCustomJob().GetJobSpec().GetWorkerPoolSpecs()[1].GetReplicaCount() != 3 {
		t.Errorf("request: %v", req)
	}

	// snake_case and Python packages; --project and --location name the parent.
	out, errOut, code = run(t, gw, "--project", "p2", "jobs", "custom", "create", "--location", "europe-west4", "-f", writeFile(t, "job.json", snakeJobFile))
	if code != 0 {
		t.Fatalf("snake_case: exit %d: %s", code, errOut)
	}
	if !strings.HasPrefix(out, "Created custom job 2 (projects/p2/locations/europe-west4/customJobs/2); follow it with `loom jobs custom get 2`") {
		t.Errorf("snake_case create printed %q", out)
	}
	if req, _ := fakegw.LastRequest[*trainingv1.CreateCustomJobRequest](f); req.GetParent() != "projects/p2/locations/europe-west4" ||
		req.GetCustomJob().GetJobSpec().GetWorkerPoolSpecs()[0].GetPythonPackageSpec().GetPythonModule() != "trainer.task" {
		t.Errorf("request: %v", req)
	}
}

// TestCustomJobFailures: a failed job exits 1 saying how it ended and
// where to look; an invalid file is refused naming its fields as the file
// writes them; a missing job points at the list.
func TestCustomJobFailures(t *testing.T) {
	t.Parallel()
	_, tr, gw := newTrainingGateway(t)
	name := trainingParent + "/customJobs/1"
	tr.Progress[name] = []proto.Message{customJob(t, name, trainingv1.JobState_JOB_STATE_FAILED, func(j *trainingv1.CustomJob) {
		j.Error = &trainingv1.Status{Code: 2, Message: "replica workerpool1-2 exited 3"}
	})}
	_, errOut, code := run(t, gw, "jobs", "custom", "create", "-f", writeFile(t, "job.json", vertexJobFile), "--wait")
	if code != 1 || !strings.Contains(errOut, "custom job 1 ended FAILED: replica workerpool1-2 exited 3; see its output with `loom jobs logs 1`") {
		t.Errorf("failed job: exit %d: %s", code, errOut)
	}
	// A message that already says where the output is is not told twice.
	name3 := trainingParent + "/customJobs/2"
	tr.Progress[name3] = []proto.Message{customJob(t, name3, trainingv1.JobState_JOB_STATE_FAILED, func(j *trainingv1.CustomJob) {
		j.Error = &trainingv1.Status{Code: 13, Message: "a replica exited with code 1; see the job's output (loom jobs logs 2)"}
	})}
	_, errOut, code = run(t, gw, "jobs", "custom", "create", "-f", writeFile(t, "job.json", vertexJobFile), "--wait")
	if code != 1 || !strings.Contains(errOut, "custom job 2 ended FAILED: a replica exited with code 1; see the job's output (loom jobs logs 2)\n") ||
		strings.Count(errOut, "loom jobs logs") != 1 {
		t.Errorf("failed job whose message names its output: exit %d: %q", code, errOut)
	}
	bad := strings.Replace(vertexJobFile, `"replicaCount": "3"`, `"replicaCount": "300"`, 1)
	bad = strings.Replace(bad, `"a3-highgpu-8g"`, `"a3-highgpu-8gx"`, 1)
	_, errOut, code = run(t, gw, "jobs", "custom", "create", "-f", writeFile(t, "job.json", bad))
	if code != 1 || !strings.Contains(errOut, "invalid request:\n  job_spec.worker_pool_specs[0].machine_spec.machine_type: unknown machine type \"a3-highgpu-8gx\" (did you mean a3-highgpu-8g") ||
		!strings.Contains(errOut, "\n  job_spec.worker_pool_specs[1].replica_count: at most 64 replicas per pool, got 300") {
		t.Errorf("invalid file: exit %d: %s", code, errOut)
	}
	_, errOut, code = run(t, gw, "jobs", "custom", "create", "-f", writeFile(t, "job.json", `{"displayName":"x","bogus":1}`))
	if code != 1 || !strings.Contains(errOut, "bogus") {
		t.Errorf("unknown field: exit %d: %s", code, errOut)
	}
	// A file that is not JSON says where, as a cluster file does: a cut
	// short one said "proto: unexpected EOF" and no more.
	for _, c := range []struct{ file, want string }{
		{"{\n  \"displayName\": \"x\",", `not a CustomJob in JSON: custom_job: unexpected end of the JSON: a value, or a closing } or ], is missing (line 2:22)`},
		{`{"displayName" "x"}`, `not a CustomJob in JSON: display_name: syntax error (line 1:16): unexpected character ", missing ":" after field name`},
	} {
		file := writeFile(t, "job.json", c.file)
		_, errOut, code = run(t, gw, "jobs", "custom", "create", "-f", file)
		if code != 1 || !strings.Contains(errOut, file+": "+c.want) || strings.Contains(errOut, "proto:") {
			t.Errorf("%q: exit %d: %q; want %q", c.file, code, errOut, c.want)
		}
	}
	_, errOut, code = run(t, gw, "jobs", "custom", "create")
	if code != 2 || !strings.Contains(errOut, "-f FILE") {
		t.Errorf("no file: exit %d: %s", code, errOut)
	}
	_, errOut, code = run(t, gw, "jobs", "custom", "get", "99")
	if code != 1 || !strings.Contains(errOut, "see `loom jobs custom list`") {
		t.Errorf("missing job: exit %d: %s", code, errOut)
	}
	out, errOut, code := run(t, gw, "jobs", "custom", "cancel", "1")
	if code != 0 || out != "Cancel of custom job 1 requested; follow it with `loom jobs custom get 1`\n" {
		t.Errorf("cancel: exit %d: %s%s", code, out, errOut)
	}
}

func TestCustomJobTables(t *testing.T) {
	t.Parallel()
	_, tr, gw := newTrainingGateway(t)
	for _, j := range []*trainingv1.CustomJob{
		customJob(t, trainingParent+"/customJobs/7", trainingv1.JobState_JOB_STATE_RUNNING, func(j *trainingv1.CustomJob) {
			j.RestartCount, j.OutputWarning = 1, "the training service keeps no log directory"
		}),
		customJob(t, trainingParent+"/customJobs/12", trainingv1.JobState_JOB_STATE_SUCCEEDED, func(j *trainingv1.CustomJob) {
			j.DisplayName, j.Labels = "cifar", map[string]string{"team": "nlp"}
			j.OutputDir = "/data/mnist/output"
			j.StartTime, j.EndTime = ts(50*time.Minute), ts(10*time.Minute)
		}),
	} {
		tr.Resources[j.GetName()] = j
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"jobs", "custom", "list"}, `
ID  NAME   STATE                        MACHINE        REPLICAS  USER  AGE
7   mnist  RUNNING on cj-7 (1 restart)  a3-highgpu-8g  4         ana   1h
12  cifar  SUCCEEDED                    a3-highgpu-8g  4         ana   1h
`},
		{[]string{"jobs", "custom", "list", "--filter", "labels.team=vision"}, `
ID  NAME   STATE                        MACHINE        REPLICAS  USER  AGE
7   mnist  RUNNING on cj-7 (1 restart)  a3-highgpu-8g  4         ana   1h
`},
		{[]string{"jobs", "custom", "get", "12"}, `
Name:           projects/default/locations/us-central1/customJobs/12
Display name:   cifar
State:          SUCCEEDED
User:           ana
Scheduler job:  projects/default/jobs/12
Cluster:        projects/default/clusters/cj-12
Output:         file:///data/mnist
Logs:           /data/mnist/output (loom jobs logs 12)
Labels:         team=nlp
Created:        1h ago
Started:        50m ago
Ended:          10m ago
Worker pools:
  POOL  MACHINE TYPE   ACCELERATOR           REPLICAS  RUNS
  0     a3-highgpu-8g  8 x NVIDIA_H100_80GB  1         loom train --epochs=3
  1     a3-highgpu-8g  8 x NVIDIA_H100_80GB  3         loom train
`},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			out, errOut, code := run(t, gw, c.args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			golden(t, out, c.want)
		})
	}
	if out, errOut, code := run(t, gw, "jobs", "custom", "get", "7"); code != 0 || !strings.Contains(out, "\nLogs:           deleted with its cluster when it ends: the training service keeps no log directory\n") {
		t.Errorf("get 7: exit %d: %s%s, want the output warning", code, out, errOut)
	}
	out, errOut, code := run(t, gw, "jobs", "custom", "list", "-o", "json")
	var resp trainingv1.ListCustomJobsResponse
	if code != 0 || protojson.Unmarshal([]byte(out), &resp) != nil || len(resp.GetCustomJobs()) != 2 || !strings.Contains(out, `"displayName"`) {
		t.Errorf("list -o json: exit %d: %s%s", code, out, errOut)
	}
	_, errOut, code = run(t, gw, "jobs", "custom", "list", "--filter", "state=((")
	if code != 1 || !strings.Contains(errOut, "filter") {
		t.Errorf("bad filter: exit %d: %s", code, errOut)
	}
}

// trial is a trial with a final val_loss.
func trial(id string, state trainingv1.Trial_State, loss float64, lr float64) *trainingv1.Trial {
	t := &trainingv1.Trial{Id: id, State: state, CustomJob: trainingParent + "/customJobs/" + id,
		Parameters: []*trainingv1.Trial_Parameter{{ParameterId: "learning_rate", Value: structpb.NewNumberValue(lr)},
			{ParameterId: "batch_size", Value: structpb.NewNumberValue(64)}}}
	if state == trainingv1.Trial_SUCCEEDED {
		t.FinalMeasurement = &trainingv1.Measurement{StepCount: 10, Metrics: []*trainingv1.Measurement_Metric{{MetricId: "val_loss", Value: loss}}}
	}
	return t
}

func tuningJob(t *testing.T, name string, state trainingv1.JobState, trials ...*trainingv1.Trial) *trainingv1.HyperparameterTuningJob {
	t.Helper()
	var j trainingv1.HyperparameterTuningJob
	if err := protojson.Unmarshal([]byte(tuningFile), &j); err != nil {
		t.Fatal(err)
	}
	j.Name, j.State, j.User, j.CreateTime, j.Trials = name, state, "ana", ts(time.Hour), trials
	return &j
}

// TestTuningWait: --wait shows the trials as they finish, each with the
// best so far, and the best at the end; trials lists them, best marked.
func TestTuningWait(t *testing.T) {
	t.Parallel()
	f, tr, gw := newTrainingGateway(t)
	name := trainingParent + "/hyperparameterTuningJobs/1"
	t1 := trial("1", trainingv1.Trial_SUCCEEDED, 0.5, 0.01)
	t2 := trial("2", trainingv1.Trial_SUCCEEDED, 0.25, 0.003)
	t3 := trial("3", trainingv1.Trial_SUCCEEDED, 0.4, 0.05)
	t3.EarlyStopped = true
	tr.Progress[name] = []proto.Message{
		tuningJob(t, name, trainingv1.JobState_JOB_STATE_QUEUED),
		tuningJob(t, name, trainingv1.JobState_JOB_STATE_RUNNING, trial("1", trainingv1.Trial_ACTIVE, 0, 0.01)),
		tuningJob(t, name, trainingv1.JobState_JOB_STATE_RUNNING, t1, trial("2", trainingv1.Trial_ACTIVE, 0, 0.003)),
		tuningJob(t, name, trainingv1.JobState_JOB_STATE_RUNNING, t1, t2, trial("3", trainingv1.Trial_ACTIVE, 0, 0.05)),
		tuningJob(t, name, trainingv1.JobState_JOB_STATE_SUCCEEDED, t1, t2, t3),
	}
	out, errOut, code := run(t, gw, "hptuning", "create", "-f", writeFile(t, "study.json", tuningFile), "--wait")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	golden(t, out, `
Created tuning job 1
  15:04:05  QUEUED
  15:04:05  RUNNING
  15:04:05  trial 1 SUCCEEDED  val_loss=0.5  learning_rate=0.01 batch_size=64  | best: trial 1 val_loss=0.5 (1 of 3)
  15:04:05  trial 2 SUCCEEDED  val_loss=0.25  learning_rate=0.003 batch_size=64  | best: trial 2 val_loss=0.25 (2 of 3)
  15:04:05  trial 3 SUCCEEDED (stopped early)  val_loss=0.4  learning_rate=0.05 batch_size=64  | best: trial 2 val_loss=0.25 (3 of 3)
  15:04:05  SUCCEEDED
Best: trial 2 SUCCEEDED  val_loss=0.25  learning_rate=0.003 batch_size=64
`)
	if req, _ := fakegw.LastRequest[*trainingv1.CreateHyperparameterTuningJobRequest](f); req.GetHyperparameterTuningJob().GetMaxTrialCount() != 3 {
		t.Errorf("request: %v", req)
	}
	out, errOut, code = run(t, gw, "hptuning", "trials", "1")
	if code != 0 {
		t.Fatalf("trials: exit %d: %s", code, errOut)
	}
	golden(t, out, `
TRIAL  STATE                      VAL_LOSS  STEPS  PARAMETERS                         CUSTOM JOB
1      SUCCEEDED                  0.5       10     learning_rate=0.01 batch_size=64   1
2 *    SUCCEEDED                  0.25      10     learning_rate=0.003 batch_size=64  2
3      SUCCEEDED (stopped early)  0.4       10     learning_rate=0.05 batch_size=64   3
`)
	out, _, code = run(t, gw, "hptuning", "trials", "1", "-o", "json")
	var j trainingv1.HyperparameterTuningJob
	if code != 0 || protojson.Unmarshal([]byte(out), &j) != nil || len(j.GetTrials()) != 3 {
		t.Errorf("trials -o json: %d %s", code, out)
	}
	out, errOut, code = run(t, gw, "hptuning", "get", "1")
	if code != 0 || !strings.Contains(out, "Best:          trial 2 SUCCEEDED  val_loss=0.25") || !strings.Contains(out, "Metric:        val_loss (MINIMIZE)") ||
		!strings.Contains(out, "  learning_rate  DOUBLE    [0.0001, 0.1]  LOG") {
		t.Errorf("get: exit %d: %s%s", code, out, errOut)
	}
	out, errOut, code = run(t, gw, "hptuning", "list")
	if code != 0 || !strings.Contains(out, "trial 2: val_loss=0.25") || !strings.Contains(out, "3/3") {
		t.Errorf("list: exit %d: %s%s", code, out, errOut)
	}
}

// TestPipelines: create, follow to the registered version, get and list.
func TestPipelines(t *testing.T) {
	t.Parallel()
	_, tr, gw := newTrainingGateway(t)
	var spec trainingv1.CustomJob
	if err := protojson.Unmarshal([]byte(vertexJobFile), &spec); err != nil {
		t.Fatal(err)
	}
	inputs, _ := protojson.Marshal(spec.GetJobSpec())
	file := `{"displayName": "train-and-register",
  "trainingTaskDefinition": "gs://google-cloud-aiplatform/schema/trainingjob/definition/custom_task_1.0.0.yaml",
  "trainingTaskInputs": ` + string(inputs) + `,
  "modelToUpload": {"displayName": "mnist-model"}}`
	name := trainingParent + "/trainingPipelines/1"
	at := func(state trainingv1.PipelineState, edit func(*trainingv1.TrainingPipeline)) *trainingv1.TrainingPipeline {
		var p trainingv1.TrainingPipeline
		if err := protojson.Unmarshal([]byte(file), &p); err != nil {
			t.Fatal(err)
		}
		p.Name, p.State, p.User, p.CreateTime = name, state, "ana", ts(time.Hour)
		if edit != nil {
			edit(&p)
		}
		return &p
	}
	meta := func(p *trainingv1.TrainingPipeline) {
		p.TrainingTaskMetadata = structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
			"backingCustomJob": structpb.NewStringValue(trainingParent + "/customJobs/2")}})
	}
	tr.Progress[name] = []proto.Message{
		at(trainingv1.PipelineState_PIPELINE_STATE_QUEUED, nil),
		at(trainingv1.PipelineState_PIPELINE_STATE_RUNNING, meta),
		at(trainingv1.PipelineState_PIPELINE_STATE_SUCCEEDED, func(p *trainingv1.TrainingPipeline) {
			meta(p)
			p.ModelVersion = "projects/default/locations/global/models/mnist-model@1"
		}),
	}
	out, errOut, code := run(t, gw, "pipelines", "create", "-f", writeFile(t, "p.json", file), "--wait")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	golden(t, out, `
Created pipeline 1
  15:04:05  QUEUED
  15:04:05  RUNNING, custom job 2
  15:04:05  SUCCEEDED, model version projects/default/locations/global/models/mnist-model@1
`)
	out, errOut, code = run(t, gw, "pipelines", "get", "1")
	if code != 0 || !strings.Contains(out, "Custom job:     "+trainingParent+"/customJobs/2") || !strings.Contains(out, "Task:           custom") ||
		!strings.Contains(out, "Model version:  projects/default/locations/global/models/mnist-model@1") {
		t.Errorf("get: exit %d: %s%s", code, out, errOut)
	}
	out, errOut, code = run(t, gw, "pipelines", "list")
	if code != 0 || !strings.Contains(out, "train-and-register") || !strings.Contains(out, "mnist-model") {
		t.Errorf("list: exit %d: %s%s", code, out, errOut)
	}
	out, errOut, code = run(t, gw, "pipelines", "get", "1", "-o", "json")
	if code != 0 || !strings.Contains(out, `"modelVersion"`) {
		t.Errorf("get -o json: exit %d: %s%s", code, out, errOut)
	}
}

// TestTrainingUnavailable: a gateway without TrainingService says so.
func TestTrainingUnavailable(t *testing.T) {
	t.Parallel()
	_, gw := newFakeGateway(t)
	_, errOut, code := run(t, gw, "jobs", "custom", "list")
	if code != 1 || !strings.Contains(errOut, "list custom jobs: the gateway at") || !strings.Contains(errOut, "does not support this") {
		t.Errorf("exit %d: %s", code, errOut)
	}
}

// TestTrialsTableKeepsItsWidth: an INFEASIBLE trial's long reason is cut
// short in the table (which says so and where the whole is), so the other
// columns stay on the screen; a table with no long state says nothing.
func TestTrialsTableKeepsItsWidth(t *testing.T) {
	t.Parallel()
	name := trainingParent + "/hyperparameterTuningJobs/29"
	bad := trial("2", trainingv1.Trial_INFEASIBLE, 0, 0.3)
	bad.InfeasibleReason = "its custom job ended JOB_STATE_CANCELLED: its tuning job " + name + " is ending: cancelled by users/root"
	var b strings.Builder
	if err := renderTrials(&b, tuningJob(t, name, trainingv1.JobState_JOB_STATE_CANCELLED, trial("1", trainingv1.Trial_SUCCEEDED, 0.5, 0.01), bad)); err != nil {
		t.Fatal(err)
	}
	golden(t, b.String(), `
TRIAL  STATE                                                         VAL_LOSS  STEPS  PARAMETERS                        CUSTOM JOB
1 *    SUCCEEDED                                                     0.5       10     learning_rate=0.01 batch_size=64  1
2      INFEASIBLE: its custom job ended JOB_STATE_CANCELLED: its t…  -         -      learning_rate=0.3 batch_size=64   2
Reasons are cut short above; `+"`loom hptuning trials 29 -o json`"+` has them whole.
`)
	b.Reset()
	if err := renderTrials(&b, tuningJob(t, name, trainingv1.JobState_JOB_STATE_SUCCEEDED, trial("1", trainingv1.Trial_SUCCEEDED, 0.5, 0.01))); err != nil || strings.Contains(b.String(), "cut short") {
		t.Fatalf("a table without long states: %q, %v", b.String(), err)
	}
}

// TestTrialsSayWhatWasLeftOut: a study answered with trials left out and
// measurements thinned (its answer's bound) says so in `hptuning trials`
// and `hptuning get`, which trials and where each is still found; a study
// answered whole says nothing.
func TestTrialsSayWhatWasLeftOut(t *testing.T) {
	t.Parallel()
	name := trainingParent + "/hyperparameterTuningJobs/30"
	j := tuningJob(t, name, trainingv1.JobState_JOB_STATE_RUNNING, trial("7", trainingv1.Trial_SUCCEEDED, 0.5, 0.01))
	j.OmittedTrials, j.MeasurementsThinned = []string{"1", "2", "3", "5", "6"}, true
	const want = "Left out: 5 trials (1-3, 5-6), past the answer's 3 MiB bound; trial k is CustomJob 30+k (`loom jobs custom get ID`); intermediate measurements thinned (`loom metrics ID` of the trial's CustomJob has every point)\n"
	var b strings.Builder
	if err := renderTrials(&b, j); err != nil || !strings.HasSuffix(b.String(), want) {
		t.Fatalf("trials: %q, %v; want it to end with %q", b.String(), err, want)
	}
	// Every command the note names is one the CLI has: a tester was sent
	// to `loom custom get` and `loom metrics read`, which it has not.
	root := newApp().rootCommand()
	for _, m := range regexp.MustCompile("`loom ([^`]*)`").FindAllStringSubmatch(want, -1) {
		args := strings.Fields(m[1])
		cmd, rest, err := root.Find(args)
		if err != nil || cmd == root {
			t.Errorf("the note names `loom %s`: no such command (%v)", m[1], err)
			continue
		}
		if cmd.Args != nil {
			if err := cmd.Args(cmd, rest); err != nil {
				t.Errorf("the note names `loom %s`: %v", m[1], err)
			}
		}
	}
	b.Reset()
	if err := renderTuningJob(&b, j, time.Now()); err != nil || !strings.Contains(b.String(), "5 trials (1-3, 5-6)") {
		t.Fatalf("get: %q, %v", b.String(), err)
	}
	j.OmittedTrials, j.MeasurementsThinned = nil, false
	b.Reset()
	if err := renderTrials(&b, j); err != nil || strings.Contains(b.String(), "Left out") {
		t.Fatalf("a whole answer: %q, %v", b.String(), err)
	}
}

// TestTrainingTextIsCleaned (a tester found an OSC 52 categorical value
// printed raw by `hptuning trials`): what a training resource holds that
// reaches a terminal — parameter values, display names, error messages,
// infeasible reasons, args — is printed without escapes, bidi overrides or
// line breaks, in tables, views and --wait's lines alike; -o json keeps it.
func TestTrainingTextIsCleaned(t *testing.T) {
	t.Parallel()
	const (
		osc52 = "\x1b]52;c;ZWNobyBwd25lZA==\x07"
		bidi  = "\u202e"
	)
	_, tr, gw := newTrainingGateway(t)
	hostile := trial("1", trainingv1.Trial_SUCCEEDED, 0.5, 0.01)
	hostile.Parameters = append(hostile.Parameters, &trainingv1.Trial_Parameter{ParameterId: "optimizer", Value: structpb.NewStringValue(osc52 + "adam")})
	bad := trial("2", trainingv1.Trial_INFEASIBLE, 0, 0.3)
	bad.InfeasibleReason = "exited\x1b[2J" + bidi + "\nline two"
	tj := tuningJob(t, trainingParent+"/hyperparameterTuningJobs/1", trainingv1.JobState_JOB_STATE_FAILED, hostile, bad)
	tj.DisplayName = "tune" + osc52
	tj.Error = &trainingv1.Status{Code: 13, Message: "boom\x1b[31m" + bidi}
	tj.StudySpec.Parameters = append(tj.StudySpec.Parameters, &trainingv1.StudySpec_ParameterSpec{ParameterId: "optimizer",
		ParameterValueSpec: &trainingv1.StudySpec_ParameterSpec_CategoricalValueSpec_{CategoricalValueSpec: &trainingv1.StudySpec_ParameterSpec_CategoricalValueSpec{
			Values: []string{"sgd", osc52 + "adam"}}}})
	tr.Resources[tj.GetName()] = tj
	cj := customJob(t, trainingParent+"/customJobs/5", trainingv1.JobState_JOB_STATE_FAILED, func(j *trainingv1.CustomJob) {
		j.DisplayName = "mnist" + bidi
		j.Error = &trainingv1.Status{Code: 13, Message: "replica exited\x07\x1b]0;pwned\x07"}
		j.JobSpec.WorkerPoolSpecs[0].GetContainerSpec().Args = []string{"--note=" + osc52, "--x=a\tb"}
	})
	tr.Resources[cj.GetName()] = cj
	p := &trainingv1.TrainingPipeline{Name: trainingParent + "/trainingPipelines/8", DisplayName: "p" + osc52,
		State: trainingv1.PipelineState_PIPELINE_STATE_FAILED, User: "ana", CreateTime: ts(time.Hour),
		Error:         &trainingv1.Status{Code: 9, Message: "the registry refused the model: \x1b[2K" + bidi},
		ModelToUpload: &trainingv1.Model{DisplayName: "m" + osc52}}
	tr.Resources[p.GetName()] = p
	for _, args := range [][]string{
		{"hptuning", "trials", "1"}, {"hptuning", "get", "1"}, {"hptuning", "list"},
		{"jobs", "custom", "list"}, {"jobs", "custom", "get", "5"},
		{"pipelines", "list"}, {"pipelines", "get", "8"},
	} {
		out, errOut, code := run(t, gw, args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errOut)
		}
		if i := strings.IndexFunc(out, func(r rune) bool { return r != '\n' && termtext.Spoofing(r) }); i >= 0 {
			t.Errorf("%v printed %q raw:\n%q", args, out[i:i+1], out)
		}
		for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
			if strings.HasPrefix(line, "line two") {
				t.Errorf("%v printed a message's line break:\n%s", args, out)
			}
		}
	}
	out, _, _ := run(t, gw, "hptuning", "trials", "1")
	if !strings.Contains(out, "optimizer=\uFFFD]52;c;ZWNobyBwd25lZA==\uFFFDadam") {
		t.Errorf("the value is not shown legibly:\n%s", out)
	}
	out, _, _ = run(t, gw, "hptuning", "trials", "1", "-o", "json")
	if !strings.Contains(out, `\u001b]52;c;`) {
		t.Errorf("-o json must keep the value as stored: %s", out)
	}
}

// TestTrainingListsKeepTheirWidth (a tester found a 300-character error
// filling STATE): the three lists cut a failed resource's error and a long
// display name as `hptuning trials` cuts a reason, say so under the table,
// and keep the whole in get.
func TestTrainingListsKeepTheirWidth(t *testing.T) {
	t.Parallel()
	_, tr, gw := newTrainingGateway(t)
	long := "its cluster could not be made: " + strings.Repeat("zone us-central1-a has no a3-highgpu-8g capacity left; ", 6) + "end"
	name := strings.Repeat("a-very-long-display-name-", 5)
	cj := customJob(t, trainingParent+"/customJobs/3", trainingv1.JobState_JOB_STATE_FAILED, func(j *trainingv1.CustomJob) {
		j.DisplayName, j.Error = name, &trainingv1.Status{Code: 9, Message: long}
	})
	tj := tuningJob(t, trainingParent+"/hyperparameterTuningJobs/4", trainingv1.JobState_JOB_STATE_FAILED)
	tj.DisplayName, tj.Error = name, &trainingv1.Status{Code: 9, Message: long}
	p := &trainingv1.TrainingPipeline{Name: trainingParent + "/trainingPipelines/6", DisplayName: name, User: "ana", CreateTime: ts(time.Hour),
		State: trainingv1.PipelineState_PIPELINE_STATE_FAILED, Error: &trainingv1.Status{Code: 9, Message: long},
		ModelToUpload: &trainingv1.Model{DisplayName: name}}
	for _, m := range []interface {
		proto.Message
		GetName() string
	}{cj, tj, p} {
		tr.Resources[m.GetName()] = m
	}
	for _, c := range []struct {
		list, get []string
		note      string
	}{
		{[]string{"jobs", "custom", "list"}, []string{"jobs", "custom", "get", "3"}, "Errors are cut short above; `loom jobs custom get ID` (or -o json) has them whole.\n"},
		{[]string{"hptuning", "list"}, []string{"hptuning", "get", "4"}, "Errors are cut short above; `loom hptuning get ID` (or -o json) has them whole.\n"},
		{[]string{"pipelines", "list"}, []string{"pipelines", "get", "6"}, "Errors are cut short above; `loom pipelines get ID` (or -o json) has them whole.\n"},
	} {
		out, errOut, code := run(t, gw, c.list...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", c.list, code, errOut)
		}
		if !strings.HasSuffix(out, c.note) {
			t.Errorf("%v does not say the errors are cut:\n%s", c.list, out)
		}
		for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
			if n := len([]rune(line)); n > 220 {
				t.Errorf("%v: a line of %d characters:\n%s", c.list, n, out)
			}
		}
		if strings.Contains(out, long) || strings.Contains(out, name) || !strings.Contains(out, "FAILED: its cluster could not be made") {
			t.Errorf("%v: the error or the name is not cut:\n%s", c.list, out)
		}
		out, errOut, code = run(t, gw, c.get...)
		if code != 0 || !strings.Contains(out, long) || !strings.Contains(out, name) {
			t.Errorf("%v must show the whole error and name: exit %d: %s%s", c.get, code, out, errOut)
		}
	}
	// A list without long states says nothing more.
	delete(tr.Resources, cj.GetName())
	tr.Resources[trainingParent+"/customJobs/9"] = customJob(t, trainingParent+"/customJobs/9", trainingv1.JobState_JOB_STATE_RUNNING)
	if out, _, _ := run(t, gw, "jobs", "custom", "list"); strings.Contains(out, "cut short") {
		t.Errorf("a list without long states: %s", out)
	}
}

// TestPipelinesListNamesTheVersionShort (a new user's `loom pipelines
// list` cut a SUCCEEDED pipeline's STATE inside the registered version's
// full name, losing its number, and said "Errors are cut short" under a
// table without an error): the list names the version as the models
// commands take it, MODEL@N; get keeps the full name; a cut state that is
// not an error is not called one.
func TestPipelinesListNamesTheVersionShort(t *testing.T) {
	t.Parallel()
	_, tr, gw := newTrainingGateway(t)
	p := &trainingv1.TrainingPipeline{Name: trainingParent + "/trainingPipelines/19", DisplayName: "toy-train-and-register", User: "ana",
		CreateTime: ts(time.Minute), State: trainingv1.PipelineState_PIPELINE_STATE_SUCCEEDED,
		ModelToUpload: &trainingv1.Model{DisplayName: "toy-model"}, ModelVersion: "projects/default/models/toy-model/versions/1"}
	tr.Resources[p.GetName()] = p
	out, errOut, code := run(t, gw, "pipelines", "list")
	if code != 0 {
		t.Fatalf("pipelines list: exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "SUCCEEDED, model version toy-model@1 ") || strings.Contains(out, "cut short") {
		t.Errorf("pipelines list must name the version toy-model@1, whole:\n%s", out)
	}
	out, _, _ = run(t, gw, "pipelines", "get", "19")
	if !strings.Contains(out, "projects/default/models/toy-model/versions/1") {
		t.Errorf("pipelines get must keep the version's full name:\n%s", out)
	}
	// A model id long enough to cut STATE: the note says states, not errors.
	long := strings.Repeat("m", 60)
	p.ModelVersion = "projects/default/models/" + long + "/versions/2"
	out, _, _ = run(t, gw, "pipelines", "list")
	if !strings.HasSuffix(out, "States are cut short above; `loom pipelines get ID` (or -o json) has them whole.\n") {
		t.Errorf("a cut state without an error must be called a state:\n%s", out)
	}
	for in, want := range map[string]string{
		"projects/default/models/toy-model/versions/1":    "toy-model@1",
		"projects/default/locations/global/models/tiny@3": "tiny@3",
		"projects/default/models/odd":                     "projects/default/models/odd",
		"":                                                "",
	} {
		if got := versionRef(in); got != want {
			t.Errorf("versionRef(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestTuningWaitBestSoFar (a tester saw "trial 1 SUCCEEDED ... | best:
// trial 3" before trial 3 was printed): trials that end together come in
// one answer, printed by id; each line's best is the best of the trials
// printed so far, even when the answer's best_trial is a later one.
func TestTuningWaitBestSoFar(t *testing.T) {
	t.Parallel()
	_, tr, gw := newTrainingGateway(t)
	name := trainingParent + "/hyperparameterTuningJobs/1"
	t1 := trial("1", trainingv1.Trial_SUCCEEDED, 0.5, 0.01)
	t2 := trial("2", trainingv1.Trial_SUCCEEDED, 0.7, 0.02)
	t3 := trial("3", trainingv1.Trial_SUCCEEDED, 0.25, 0.003)
	both := tuningJob(t, name, trainingv1.JobState_JOB_STATE_RUNNING, t1, trial("2", trainingv1.Trial_ACTIVE, 0, 0.02), t3)
	both.BestTrial = "3"
	all := tuningJob(t, name, trainingv1.JobState_JOB_STATE_SUCCEEDED, t1, t2, t3)
	all.BestTrial = "3"
	tr.Progress[name] = []proto.Message{tuningJob(t, name, trainingv1.JobState_JOB_STATE_RUNNING), both, all}
	out, errOut, code := run(t, gw, "hptuning", "create", "-f", writeFile(t, "study.json", tuningFile), "--wait")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	golden(t, out, `
Created tuning job 1
  15:04:05  RUNNING
  15:04:05  trial 1 SUCCEEDED  val_loss=0.5  learning_rate=0.01 batch_size=64  | best: trial 1 val_loss=0.5 (1 of 3)
  15:04:05  trial 3 SUCCEEDED  val_loss=0.25  learning_rate=0.003 batch_size=64  | best: trial 3 val_loss=0.25 (2 of 3)
  15:04:05  trial 2 SUCCEEDED  val_loss=0.7  learning_rate=0.02 batch_size=64  | best: trial 3 val_loss=0.25 (3 of 3)
  15:04:05  SUCCEEDED
Best: trial 3 SUCCEEDED  val_loss=0.25  learning_rate=0.003 batch_size=64
`)
}

// TestTrainingListFilterTypos (a tester found `--filter 'stat=...'` print
// "No custom jobs" and exit 0): a filter naming an unknown field, state or
// time is refused, naming the filter and what it may name.
func TestTrainingListFilterTypos(t *testing.T) {
	t.Parallel()
	_, tr, gw := newTrainingGateway(t)
	tr.Resources[trainingParent+"/customJobs/7"] = customJob(t, trainingParent+"/customJobs/7", trainingv1.JobState_JOB_STATE_RUNNING)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"jobs", "custom", "list", "--filter", "stat=JOB_STATE_RUNNING"}, `filter: at 1: unknown field "stat": filter on state, display_name, labels.KEY, create_time`},
		{[]string{"jobs", "custom", "list", "--filter", "state=JOB_STATE_SUCEEDED"}, `"JOB_STATE_SUCEEDED" is not a state: one of JOB_STATE_QUEUED`},
		{[]string{"hptuning", "list", "--filter", "lables.team=vision"}, `unknown field "lables.team"`},
		{[]string{"pipelines", "list", "--filter", "state=JOB_STATE_RUNNING"}, "one of PIPELINE_STATE_QUEUED"},
		{[]string{"pipelines", "list", "--filter", `create_time>"garbage"`}, "not an RFC 3339 time"},
	} {
		out, errOut, code := run(t, gw, c.args...)
		if code != 1 || !strings.Contains(errOut, c.want) || strings.Contains(out, "No ") {
			t.Errorf("%v: exit %d: %s%s; want exit 1 saying %q", c.args, code, out, errOut, c.want)
		}
	}
	if out, errOut, code := run(t, gw, "jobs", "custom", "list", "--filter", "state=JOB_STATE_RUNNING"); code != 0 || !strings.Contains(out, "mnist") {
		t.Errorf("a right filter: exit %d: %s%s", code, out, errOut)
	}
}
