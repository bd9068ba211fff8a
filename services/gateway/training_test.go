package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	"github.com/loom-ml/loom/libs/trainingspec"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// fakeTraining serves the training service's internal reads over
// world.training, filtering lists with trainingspec's filter as the
// training service does.
type fakeTraining struct {
	trainingv1.UnimplementedTrainingServiceServer
	w *world
}

func (f fakeTraining) get(name string) (proto.Message, error) {
	f.w.mu.Lock()
	defer f.w.mu.Unlock()
	m, ok := f.w.training[name]
	if !ok {
		// As the training service words it (its lookup's "NAME: not
		// found"), so that the gateway's answer for a resource hidden
		// from the caller can be compared with it byte for byte.
		return nil, status.Errorf(codes.NotFound, "%s: not found", name)
	}
	return proto.Clone(m), nil
}

func (f fakeTraining) GetCustomJob(_ context.Context, r *trainingv1.GetCustomJobRequest) (*trainingv1.CustomJob, error) {
	m, err := f.get(r.GetName())
	if err != nil {
		return nil, err
	}
	return m.(*trainingv1.CustomJob), nil
}

// GetHyperparameterTuningJob answers within trainingspec's bound, as the
// training service does.
func (f fakeTraining) GetHyperparameterTuningJob(_ context.Context, r *trainingv1.GetHyperparameterTuningJobRequest) (*trainingv1.HyperparameterTuningJob, error) {
	m, err := f.get(r.GetName())
	if err != nil {
		return nil, err
	}
	j := m.(*trainingv1.HyperparameterTuningJob)
	trainingspec.BoundTuningJobAnswer(j, trainingspec.MaxTuningJobAnswer)
	return j, nil
}

func (f fakeTraining) GetTrainingPipeline(_ context.Context, r *trainingv1.GetTrainingPipelineRequest) (*trainingv1.TrainingPipeline, error) {
	m, err := f.get(r.GetName())
	if err != nil {
		return nil, err
	}
	return m.(*trainingv1.TrainingPipeline), nil
}

func (f fakeTraining) ListCustomJobs(_ context.Context, r *trainingv1.ListCustomJobsRequest) (*trainingv1.ListCustomJobsResponse, error) {
	flt, err := trainingspec.ParseFilter(r.GetFilter())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	f.w.mu.Lock()
	defer f.w.mu.Unlock()
	resp := &trainingv1.ListCustomJobsResponse{}
	for _, m := range f.w.training {
		j, ok := m.(*trainingv1.CustomJob)
		if !ok || !underParent(j.GetName(), r.GetParent(), "customJobs") {
			continue
		}
		if flt.Match(func(k string) (string, bool) {
			switch {
			case k == "state":
				return j.GetState().String(), true
			case k == "display_name":
				return j.GetDisplayName(), true
			case strings.HasPrefix(k, "labels."):
				v, ok := j.GetLabels()[strings.TrimPrefix(k, "labels.")]
				return v, ok
			}
			return "", false
		}) {
			resp.CustomJobs = append(resp.CustomJobs, proto.Clone(j).(*trainingv1.CustomJob))
		}
	}
	return resp, nil
}

// underParent reports whether name is in collection under parent, whose
// location may be "-" (every location), as the training service lists.
func underParent(name, parent, collection string) bool {
	if project, ok := strings.CutSuffix(parent, "/locations/-"); ok {
		rest, ok := strings.CutPrefix(name, project+"/locations/")
		_, coll, _ := strings.Cut(rest, "/")
		return ok && strings.HasPrefix(coll, collection+"/")
	}
	return strings.HasPrefix(name, parent+"/"+collection+"/")
}

func (w *world) setTraining(m interface {
	proto.Message
	GetName() string
}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.training[m.GetName()] = proto.Clone(m)
}

const location = "projects/default/locations/us-central1"

// vertexCustomJob is a CustomJob as Vertex's REST documentation writes one:
// camelCase, replicaCount as a string (int64), on a catalog machine type.
const vertexCustomJob = `{
  "displayName": "mnist",
  "labels": {"team": "vision"},
  "jobSpec": {
    "workerPoolSpecs": [
      {"machineSpec": {"machineType": "a3-highgpu-8g", "acceleratorType": "NVIDIA_H100_80GB", "acceleratorCount": 8},
       "replicaCount": "1",
       "containerSpec": {"imageUri": "us-docker.pkg.dev/vertex-ai/training/pytorch-gpu.2-1:latest",
                         "command": ["loom", "train"], "args": ["--epochs=3"]}},
      {"machineSpec": {"machineType": "n2-standard-8"}, "replicaCount": "2",
       "containerSpec": {"imageUri": "us-docker.pkg.dev/vertex-ai/training/pytorch-gpu.2-1:latest"}}
    ],
    "baseOutputDirectory": {"outputUriPrefix": "file:///data/mnist"}
  }
}`

// snakeCustomJob is the same job in the proto's snake_case names.
const snakeCustomJob = `{"display_name": "mnist-snake", "job_spec": {"worker_pool_specs": [
  {"machine_spec": {"machine_type": "n2-standard-8"}, "replica_count": 1,
   "container_spec": {"image_uri": "img", "command": ["true"]}}]}}`

func customJobSpec(t *testing.T) *trainingv1.CustomJob {
	t.Helper()
	var j trainingv1.CustomJob
	if err := protojson.Unmarshal([]byte(vertexCustomJob), &j); err != nil {
		t.Fatal(err)
	}
	return &j
}

func (h *harness) trainingAs(t *testing.T, who string) trainingv1.TrainingServiceClient {
	return trainingv1.NewTrainingServiceClient(h.as(t, who))
}

// TestTrainingREST: a CustomJob JSON as Vertex's documentation writes it
// (camelCase) is accepted at Vertex's path and answered in camelCase, as
// its owner's, QUEUED, with a numeric job id; snake_case input is accepted
// too; the command reaches loom.training.commands.v1 with the principal;
// the rest of the API keeps the proto names.
func TestTrainingREST(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := testkit.Context(t, wait)
	ana := h.restAs("ana")

	code, body := restCall(ctx, t, ana, h.restBase, "POST", "/v1/"+location+"/customJobs", vertexCustomJob)
	if code != http.StatusOK {
		t.Fatalf("POST customJobs: %d %s", code, body)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatalf("answer is not JSON: %v: %s", err, body)
	}
	for _, k := range []string{"displayName", "jobSpec", "createTime", "state", "name", "user"} {
		if _, ok := got[k]; !ok {
			t.Errorf("answer has no camelCase %q: %s", k, body)
		}
	}
	for _, k := range []string{"display_name", "job_spec", "create_time"} {
		if _, ok := got[k]; ok {
			t.Errorf("answer has snake_case %q: %s", k, body)
		}
	}
	if !strings.Contains(body, `"machineType":"a3-highgpu-8g"`) && !strings.Contains(body, `"machineType": "a3-highgpu-8g"`) {
		t.Errorf("nested fields not camelCase: %s", body)
	}
	var j trainingv1.CustomJob
	if err := protojson.Unmarshal([]byte(body), &j); err != nil {
		t.Fatal(err)
	}
	if j.GetUser() != "ana" || j.GetState() != trainingv1.JobState_JOB_STATE_QUEUED ||
		!strings.HasPrefix(j.GetName(), location+"/customJobs/") || j.GetJob() != "" ||
		j.GetCluster() != "projects/default/clusters/cj-"+shortID(j.GetName()) {
		t.Errorf("accepted job: %v", &j)
	}
	ev := testkit.WaitEvent(t, h.broker, topics.TrainingCommands, wait, func(e envelope.Event) bool {
		c, ok := e.Payload.(*eventsv1.CreateCustomJob)
		return ok && c.GetCustomJob().GetName() == j.GetName()
	})
	if ev.Principal != "users/ana" || ev.Payload.(*eventsv1.CreateCustomJob).GetCustomJob().GetUser() != "ana" {
		t.Errorf("command principal %q, user %q; want users/ana, ana", ev.Principal, ev.Payload.(*eventsv1.CreateCustomJob).GetCustomJob().GetUser())
	}

	code, body = restCall(ctx, t, ana, h.restBase, "POST", "/v1/"+location+"/customJobs", snakeCustomJob)
	if code != http.StatusOK || !strings.Contains(body, `"displayName"`) || !strings.Contains(body, "mnist-snake") {
		t.Errorf("snake_case create: %d %s", code, body)
	}

	// ?requestId= makes a retry answer the first job.
	var names []string
	for range 2 {
		code, body = restCall(ctx, t, ana, h.restBase, "POST", "/v1/"+location+"/customJobs?requestId=q1", snakeCustomJob)
		var r trainingv1.CustomJob
		if code != http.StatusOK || protojson.Unmarshal([]byte(body), &r) != nil {
			t.Fatalf("create with requestId: %d %s", code, body)
		}
		names = append(names, r.GetName())
	}
	if names[0] != names[1] {
		t.Errorf("retried create answered %s, then %s", names[0], names[1])
	}

	// Reads are proxied, camelCase too.
	h.w.setTraining(&j)
	code, body = restCall(ctx, t, ana, h.restBase, "GET", "/v1/"+j.GetName(), "")
	if code != http.StatusOK || !strings.Contains(body, `"displayName"`) {
		t.Errorf("GET: %d %s", code, body)
	}
	code, body = restCall(ctx, t, ana, h.restBase, "GET", "/v1/"+location+"/customJobs?filter=labels.team%3Dvision", "")
	if code != http.StatusOK || !strings.Contains(body, `"customJobs"`) || !strings.Contains(body, j.GetName()) {
		t.Errorf("LIST: %d %s", code, body)
	}
	// The rest of the API keeps proto names.
	code, body = restCall(ctx, t, ana, h.restBase, "GET", "/v1/"+cluster1, "")
	if code != http.StatusOK || !strings.Contains(body, `"node_pools"`) {
		t.Errorf("GET cluster keeps proto names: %d %s", code, body)
	}
}

func shortID(name string) string { return name[strings.LastIndex(name, "/")+1:] }

// TestTrainingHostileREST: oversize bodies, too many pools or trials, bad
// names and unknown fields are 400 naming the field; nothing is written.
func TestTrainingHostileREST(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := testkit.Context(t, wait)
	ana := h.restAs("ana")
	pool := `{"machineSpec":{"machineType":"n2-standard-8"},"replicaCount":"1","containerSpec":{"command":["true"]}}`
	fivePools := `{"displayName":"x","jobSpec":{"workerPoolSpecs":[` + strings.Repeat(pool+",", 4) + pool + `]}}`
	big := `{"displayName":"x","jobSpec":{"workerPoolSpecs":[{"machineSpec":{"machineType":"n2-standard-8"},"replicaCount":"1",` +
		`"containerSpec":{"command":["true"],"args":[` + strings.TrimSuffix(strings.Repeat(`"`+strings.Repeat("a", 60000)+`",`, 5), ",") + `]}}]}}`
	tuning := `{"displayName":"t","maxTrialCount":5000,"parallelTrialCount":100,"studySpec":{"metrics":[{"metricId":"val_loss","goal":"MINIMIZE"}],` +
		`"parameters":[{"parameterId":"lr","doubleValueSpec":{"minValue":0.001,"maxValue":0.1}}]},"trialJobSpec":{"workerPoolSpecs":[` + pool + `]}}`
	for _, c := range []struct {
		path, body string
		want       []string
	}{
		{"/customJobs", fivePools, []string{"custom_job.job_spec.worker_pool_specs", "at most 4"}},
		{"/customJobs", big, []string{"custom_job", "limit of 262144"}},
		{"/customJobs", `{"displayName":"x","bogusField":1}`, []string{"bogusField"}},
		{"/customJobs", `{"displayName":"x","jobSpec":{"workerPoolSpecs":[{"machineSpec":{"machineType":"n1-standard-4"},"replicaCount":"1","containerSpec":{"command":["true"]}}]}}`,
			[]string{"custom_job.job_spec.worker_pool_specs[0].machine_spec.machine_type", "unknown machine type"}},
		{"/hyperparameterTuningJobs", tuning, []string{"hyperparameter_tuning_job.max_trial_count", "at most 1000", "hyperparameter_tuning_job.parallel_trial_count"}},
		{"/trainingPipelines", `{"displayName":"p","trainingTaskDefinition":"x.yaml","trainingTaskInputs":{}}`, []string{"training_pipeline.training_task_definition"}},
	} {
		code, body := restCall(ctx, t, ana, h.restBase, "POST", "/v1/"+location+c.path, c.body)
		if code != http.StatusBadRequest {
			t.Errorf("POST %s: %d, want 400: %.300s", c.path, code, body)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(body, w) {
				t.Errorf("POST %s: body does not name %q: %.500s", c.path, w, body)
			}
		}
	}
	// Bad names.
	for _, path := range []string{"/v1/projects/Default/locations/us-central1/customJobs", "/v1/projects/default/locations/US_1/customJobs"} {
		if code, body := restCall(ctx, t, ana, h.restBase, "POST", path, snakeCustomJob); code != http.StatusBadRequest && code != http.StatusNotFound {
			t.Errorf("POST %s: %d %s", path, code, body)
		}
	}
	tc := h.trainingAs(t, "ana")
	for _, name := range []string{location + "/customJobs/007", location + "/customJobs/x", location + "/customJobs/0"} {
		_, err := tc.GetCustomJob(ctx, &trainingv1.GetCustomJobRequest{Name: name})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "name") {
			t.Errorf("GetCustomJob(%s) = %v, want InvalidArgument naming name", name, err)
		}
	}
	if _, err := tc.ListCustomJobs(ctx, &trainingv1.ListCustomJobsRequest{Parent: location, Filter: "state=(("}); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "filter") {
		t.Errorf("bad filter: %v", err)
	}
	if evs := testkit.Events(t, h.broker, topics.TrainingCommands); len(evs) != 0 {
		t.Errorf("%d training commands written for refused requests", len(evs))
	}
}

// TestTrainingIDsAndReplay: a tuning job reserves 1+max_trial_count ids and
// a pipeline 2 (custom task) or 2+max_trial_count (tuning task), carried
// in the command; a retried create answers the first, to its owner only.
func TestTrainingIDsAndReplay(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := testkit.Context(t, wait)
	tc := h.trainingAs(t, "ana")
	spec := customJobSpec(t)

	first, err := tc.CreateCustomJob(ctx, &trainingv1.CreateCustomJobRequest{Parent: location, CustomJob: spec, RequestId: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	id := mustAtoi(t, shortID(first.GetName()))
	tuning := &trainingv1.HyperparameterTuningJob{DisplayName: "tune", MaxTrialCount: 5, ParallelTrialCount: 2,
		StudySpec: &trainingv1.StudySpec{
			Metrics: []*trainingv1.StudySpec_MetricSpec{{MetricId: "val_loss", Goal: trainingv1.StudySpec_MetricSpec_MINIMIZE}},
			Parameters: []*trainingv1.StudySpec_ParameterSpec{{ParameterId: "learning_rate",
				ParameterValueSpec: &trainingv1.StudySpec_ParameterSpec_DoubleValueSpec_{DoubleValueSpec: &trainingv1.StudySpec_ParameterSpec_DoubleValueSpec{MinValue: 1e-3, MaxValue: 0.1}}}}},
		TrialJobSpec: spec.GetJobSpec()}
	tj, err := tc.CreateHyperparameterTuningJob(ctx, &trainingv1.CreateHyperparameterTuningJobRequest{Parent: location, HyperparameterTuningJob: tuning})
	if err != nil {
		t.Fatal(err)
	}
	if got := mustAtoi(t, shortID(tj.GetName())); got != id+1 || tj.GetUser() != "ana" || tj.GetState() != trainingv1.JobState_JOB_STATE_QUEUED {
		t.Fatalf("tuning job %s (user %s, %s), want id %d", tj.GetName(), tj.GetUser(), tj.GetState(), id+1)
	}
	// A pipeline over a tuning task: 2+5 ids after the tuning job's 1+5.
	inputs, _ := protojson.Marshal(&trainingv1.HyperparameterTuningJob{StudySpec: tuning.GetStudySpec(), MaxTrialCount: 5, ParallelTrialCount: 2, TrialJobSpec: spec.GetJobSpec()})
	p := &trainingv1.TrainingPipeline{DisplayName: "pipe", TrainingTaskDefinition: trainingspec.TuningTask,
		ModelToUpload: &trainingv1.Model{DisplayName: "m"}}
	p.TrainingTaskInputs = nil
	var pj trainingv1.TrainingPipeline
	if err := protojson.Unmarshal([]byte(`{"trainingTaskInputs":`+string(inputs)+`}`), &pj); err != nil {
		t.Fatal(err)
	}
	p.TrainingTaskInputs = pj.GetTrainingTaskInputs()
	pp, err := tc.CreateTrainingPipeline(ctx, &trainingv1.CreateTrainingPipelineRequest{Parent: location, TrainingPipeline: p})
	if err != nil {
		t.Fatal(err)
	}
	if got := mustAtoi(t, shortID(pp.GetName())); got != id+1+6 || pp.GetState() != trainingv1.PipelineState_PIPELINE_STATE_QUEUED {
		t.Fatalf("pipeline %s (%s), want id %d", pp.GetName(), pp.GetState(), id+7)
	}
	ev := testkit.WaitEvent(t, h.broker, topics.TrainingCommands, wait, func(e envelope.Event) bool {
		c, ok := e.Payload.(*eventsv1.CreateTrainingPipeline)
		return ok && c.GetPipeline().GetName() == pp.GetName()
	})
	if n := ev.Payload.(*eventsv1.CreateTrainingPipeline).GetReservedJobIds(); n != 7 {
		t.Errorf("reserved_job_ids = %d, want 2+5", n)
	}
	next, err := tc.CreateCustomJob(ctx, &trainingv1.CreateCustomJobRequest{Parent: location, CustomJob: spec})
	if err != nil {
		t.Fatal(err)
	}
	if got := mustAtoi(t, shortID(next.GetName())); got != id+1+6+7 {
		t.Errorf("next custom job id %d, want %d (after the pipeline's block)", got, id+14)
	}

	// The same request id answers the first job, to its owner and to an
	// admin; anyone else gets AlreadyExists without it.
	again, err := tc.CreateCustomJob(ctx, &trainingv1.CreateCustomJobRequest{Parent: location, CustomJob: spec, RequestId: "r1"})
	if err != nil || again.GetName() != first.GetName() {
		t.Errorf("retry = %v, %v; want %s", again.GetName(), err, first.GetName())
	}
	if again, err := h.trainingAs(t, "pat").CreateCustomJob(ctx, &trainingv1.CreateCustomJobRequest{Parent: location, CustomJob: spec, RequestId: "r1"}); err != nil || again.GetName() != first.GetName() {
		t.Errorf("retry by an admin = %v, %v", again.GetName(), err)
	}
	if _, err := h.trainingAs(t, "bob").CreateCustomJob(ctx, &trainingv1.CreateCustomJobRequest{Parent: location, CustomJob: spec, RequestId: "r1"}); status.Code(err) != codes.AlreadyExists {
		t.Errorf("retry by another user = %v, want AlreadyExists", err)
	}
	// Creates are audited with their change (one Apply).
	waitAudit(t, ctx, h, "pat", project, func(r *loomv1.AuditRecord) bool {
		return record("users/ana", "/loom.training.v1.TrainingService/CreateCustomJob", "allowed", "OK")(r) && r.GetResource() == location
	})
	// persistent_resource_id names a cluster of the project.
	onC1 := proto.Clone(spec).(*trainingv1.CustomJob)
	onC1.JobSpec.PersistentResourceId = "c1"
	if j, err := tc.CreateCustomJob(ctx, &trainingv1.CreateCustomJobRequest{Parent: location, CustomJob: onC1}); err != nil || j.GetCluster() != cluster1 {
		t.Errorf("create on c1 = %v, %v; want cluster %s", j.GetCluster(), err, cluster1)
	}
	onC1.JobSpec.PersistentResourceId = "nope"
	if _, err := tc.CreateCustomJob(ctx, &trainingv1.CreateCustomJobRequest{Parent: location, CustomJob: onC1}); status.Code(err) != codes.InvalidArgument ||
		!strings.Contains(err.Error(), "custom_job.job_spec.persistent_resource_id: no cluster nope") {
		t.Errorf("create on a missing cluster = %v", err)
	}
	// A pipeline's parent_model is a model of its project that the
	// registry has: refused at create otherwise, not when the training
	// has ended (a tester found both failing the pipeline at its end).
	for parent, want := range map[string]string{
		"projects/other/models/bobm":      `training_pipeline.parent_model: "projects/other/models/bobm" is a model of project other, not of default`,
		"projects/default/models/missing": "training_pipeline.parent_model: no model projects/default/models/missing in project default",
		"projects/default/models/m1@2":    "training_pipeline.parent_model: \"projects/default/models/m1@2\" names a version",
	} {
		bad := proto.Clone(p).(*trainingv1.TrainingPipeline)
		bad.ParentModel = parent
		if _, err := tc.CreateTrainingPipeline(ctx, &trainingv1.CreateTrainingPipelineRequest{Parent: location, TrainingPipeline: bad}); status.Code(err) != codes.InvalidArgument ||
			!strings.Contains(err.Error(), want) {
			t.Errorf("pipeline with parent_model %s = %v, want InvalidArgument: ...%s", parent, err, want)
		}
	}
	good := proto.Clone(p).(*trainingv1.TrainingPipeline)
	good.ParentModel = "projects/default/locations/us-central1/models/m1"
	if _, err := tc.CreateTrainingPipeline(ctx, &trainingv1.CreateTrainingPipelineRequest{Parent: location, TrainingPipeline: good}); err != nil {
		t.Errorf("pipeline with a parent_model of the project: %v", err)
	}
	// Naming another owner is refused to users.
	other := proto.Clone(spec).(*trainingv1.CustomJob)
	other.User = "bob"
	if _, err := tc.CreateCustomJob(ctx, &trainingv1.CreateCustomJobRequest{Parent: location, CustomJob: other}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("create as bob by ana = %v, want PermissionDenied", err)
	}
}

// TestTrainingAccess: viewers read but do not create; other projects'
// users get NotFound; cancel and delete are the owner's or an admin's, of
// a resource in a state that allows them, and become commands.
func TestTrainingAccess(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := testkit.Context(t, wait)
	spec := customJobSpec(t)
	if _, err := h.trainingAs(t, "vic").CreateCustomJob(ctx, &trainingv1.CreateCustomJobRequest{Parent: location, CustomJob: spec}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("viewer create = %v, want PermissionDenied", err)
	}
	running := proto.Clone(spec).(*trainingv1.CustomJob)
	running.Name, running.User, running.State = location+"/customJobs/40", "ana", trainingv1.JobState_JOB_STATE_RUNNING
	h.w.setTraining(running)
	done := proto.Clone(running).(*trainingv1.CustomJob)
	done.Name, done.State = location+"/customJobs/41", trainingv1.JobState_JOB_STATE_SUCCEEDED
	h.w.setTraining(done)

	// The replicas' environment is the owner's and admins' to see.
	running.JobSpec.WorkerPoolSpecs[0].GetContainerSpec().Env = []*trainingv1.EnvVar{{Name: "HF_TOKEN", Value: "hf_s3cret"}}
	h.w.setTraining(running)
	for who, sees := range map[string]bool{"ana": true, "pat": true, "vic": false, "bob": false} {
		j, err := h.trainingAs(t, who).GetCustomJob(ctx, &trainingv1.GetCustomJobRequest{Name: running.GetName()})
		if err != nil {
			t.Errorf("get as %s: %v", who, err)
			continue
		}
		if got := len(j.GetJobSpec().GetWorkerPoolSpecs()[0].GetContainerSpec().GetEnv()) > 0; got != sees {
			t.Errorf("get as %s shows the environment: %v, want %v", who, got, sees)
		}
		l, err := h.trainingAs(t, who).ListCustomJobs(ctx, &trainingv1.ListCustomJobsRequest{Parent: location})
		if err != nil || strings.Contains(protojson.Format(l), "hf_s3cret") != sees {
			t.Errorf("list as %s: %v; shows the secret: %v, want %v", who, err, strings.Contains(protojson.Format(l), "hf_s3cret"), sees)
		}
	}
	if _, err := h.trainingAs(t, "oz").GetCustomJob(ctx, &trainingv1.GetCustomJobRequest{Name: running.GetName()}); status.Code(err) != codes.NotFound {
		t.Errorf("other project's get = %v, want NotFound", err)
	}
	for _, c := range []struct {
		who  string
		call func(trainingv1.TrainingServiceClient) error
		want codes.Code
	}{
		{"bob", func(c trainingv1.TrainingServiceClient) error {
			_, err := c.CancelCustomJob(ctx, &trainingv1.CancelCustomJobRequest{Name: running.GetName()})
			return err
		}, codes.PermissionDenied},
		{"vic", func(c trainingv1.TrainingServiceClient) error {
			_, err := c.CancelCustomJob(ctx, &trainingv1.CancelCustomJobRequest{Name: running.GetName()})
			return err
		}, codes.PermissionDenied},
		{"ana", func(c trainingv1.TrainingServiceClient) error {
			_, err := c.CancelCustomJob(ctx, &trainingv1.CancelCustomJobRequest{Name: done.GetName()})
			return err
		}, codes.FailedPrecondition},
		{"ana", func(c trainingv1.TrainingServiceClient) error {
			_, err := c.DeleteCustomJob(ctx, &trainingv1.DeleteCustomJobRequest{Name: running.GetName()})
			return err
		}, codes.FailedPrecondition},
		{"ana", func(c trainingv1.TrainingServiceClient) error {
			_, err := c.CancelCustomJob(ctx, &trainingv1.CancelCustomJobRequest{Name: location + "/customJobs/99"})
			return err
		}, codes.NotFound},
		{"ana", func(c trainingv1.TrainingServiceClient) error {
			_, err := c.CancelCustomJob(ctx, &trainingv1.CancelCustomJobRequest{Name: running.GetName()})
			return err
		}, codes.OK},
		{"pat", func(c trainingv1.TrainingServiceClient) error {
			_, err := c.DeleteCustomJob(ctx, &trainingv1.DeleteCustomJobRequest{Name: done.GetName()})
			return err
		}, codes.OK},
	} {
		if err := c.call(h.trainingAs(t, c.who)); status.Code(err) != c.want {
			t.Errorf("as %s: %v, want %s", c.who, err, c.want)
		}
	}
	cancel := testkit.WaitEvent(t, h.broker, topics.TrainingCommands, wait, func(e envelope.Event) bool {
		c, ok := e.Payload.(*eventsv1.CancelTraining)
		return ok && c.GetName() == running.GetName()
	})
	if c := cancel.Payload.(*eventsv1.CancelTraining); cancel.Principal != "users/ana" || c.GetUser() != "ana" || c.GetAdmin() {
		t.Errorf("cancel command %v by %s", c, cancel.Principal)
	}
	del := testkit.WaitEvent(t, h.broker, topics.TrainingCommands, wait, func(e envelope.Event) bool {
		_, ok := e.Payload.(*eventsv1.DeleteTraining)
		return ok
	})
	if c := del.Payload.(*eventsv1.DeleteTraining); c.GetName() != done.GetName() || !c.GetAdmin() || del.Principal != "users/pat" {
		t.Errorf("delete command %v by %s", c, del.Principal)
	}
	// Mutations are audited: the cancel is in the project's trail.
	waitAudit(t, ctx, h, "pat", project, record("users/ana", "/loom.training.v1.TrainingService/CancelCustomJob", "allowed", "OK"))
}

// TestTrainingPrivateData: with PrivateData "jobs", another user's
// training resources are NotFound and absent from lists; admins see them.
func TestTrainingPrivateData(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *Config) { c.PrivateData = "jobs" })
	ctx := testkit.Context(t, wait)
	j := customJobSpec(t)
	j.Name, j.User, j.State = location+"/customJobs/40", "ana", trainingv1.JobState_JOB_STATE_RUNNING
	h.w.setTraining(j)
	for who, sees := range map[string]bool{"ana": true, "pat": true, "bob": false, "vic": false} {
		_, err := h.trainingAs(t, who).GetCustomJob(ctx, &trainingv1.GetCustomJobRequest{Name: j.GetName()})
		if (err == nil) != sees || (!sees && status.Code(err) != codes.NotFound) {
			t.Errorf("get as %s: %v, want seen %v", who, err, sees)
		}
		l, err := h.trainingAs(t, who).ListCustomJobs(ctx, &trainingv1.ListCustomJobsRequest{Parent: location})
		if err != nil || (len(l.GetCustomJobs()) == 1) != sees {
			t.Errorf("list as %s: %v, %d jobs, want seen %v", who, err, len(l.GetCustomJobs()), sees)
		}
	}
	if _, err := h.trainingAs(t, "bob").CancelCustomJob(ctx, &trainingv1.CancelCustomJobRequest{Name: j.GetName()}); status.Code(err) != codes.NotFound {
		t.Errorf("bob's cancel of a hidden job = %v, want NotFound", err)
	}
}

// TestTrainingServiceDown: with no training service at -training-addr,
// reads and cancels answer Unavailable saying which service and flag;
// creates still work (they are commands).
func TestTrainingServiceDown(t *testing.T) {
	t.Parallel()
	// A port reserved for this test process (testkit.FreeAddr), which no
	// one listens on: a port bound on :0 and closed again could be handed
	// to a parallel test's fake training service (every harness serves
	// one on :0), which answers NotFound instead of Unavailable.
	dead := testkit.FreeAddr()
	h := newHarness(t, func(c *Config) { c.TrainingAddr = dead })
	ctx := testkit.Context(t, wait)
	tc := h.trainingAs(t, "ana")
	_, err := tc.GetCustomJob(ctx, &trainingv1.GetCustomJobRequest{Name: location + "/customJobs/1"})
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "training service") || !strings.Contains(err.Error(), "-training-addr") {
		t.Errorf("get with training down = %v", err)
	}
	if _, err := tc.ListCustomJobs(ctx, &trainingv1.ListCustomJobsRequest{Parent: location}); status.Code(err) != codes.Unavailable {
		t.Errorf("list with training down = %v", err)
	}
	if _, err := tc.CreateCustomJob(ctx, &trainingv1.CreateCustomJobRequest{Parent: location, CustomJob: customJobSpec(t), RequestId: "x"}); err != nil {
		t.Errorf("create with training down: %v", err)
	}
	// A retry answers the accepted job from the request record.
	if j, err := tc.CreateCustomJob(ctx, &trainingv1.CreateCustomJobRequest{Parent: location, CustomJob: customJobSpec(t), RequestId: "x"}); err != nil || j.GetState() != trainingv1.JobState_JOB_STATE_QUEUED {
		t.Errorf("retry with training down: %v %v", j, err)
	}
}

func (f fakeTraining) ListHyperparameterTuningJobs(_ context.Context, r *trainingv1.ListHyperparameterTuningJobsRequest) (*trainingv1.ListHyperparameterTuningJobsResponse, error) {
	f.w.mu.Lock()
	defer f.w.mu.Unlock()
	resp := &trainingv1.ListHyperparameterTuningJobsResponse{}
	for _, m := range f.w.training {
		if j, ok := m.(*trainingv1.HyperparameterTuningJob); ok && underParent(j.GetName(), r.GetParent(), "hyperparameterTuningJobs") {
			resp.HyperparameterTuningJobs = append(resp.HyperparameterTuningJobs, proto.Clone(j).(*trainingv1.HyperparameterTuningJob))
		}
	}
	return resp, nil
}

func (f fakeTraining) ListTrainingPipelines(_ context.Context, r *trainingv1.ListTrainingPipelinesRequest) (*trainingv1.ListTrainingPipelinesResponse, error) {
	f.w.mu.Lock()
	defer f.w.mu.Unlock()
	resp := &trainingv1.ListTrainingPipelinesResponse{}
	for _, m := range f.w.training {
		if p, ok := m.(*trainingv1.TrainingPipeline); ok && underParent(p.GetName(), r.GetParent(), "trainingPipelines") {
			resp.TrainingPipelines = append(resp.TrainingPipelines, proto.Clone(p).(*trainingv1.TrainingPipeline))
		}
	}
	return resp, nil
}

// The authorization matrix's training resources: ana's, running (…/40)
// and ended (…/41) of each kind.
const (
	matrixTuningJSON = `{"display_name":"t","max_trial_count":2,"parallel_trial_count":1,` +
		`"study_spec":{"metrics":[{"metric_id":"val_loss","goal":"MINIMIZE"}],"parameters":[{"parameter_id":"lr","double_value_spec":{"min_value":0.001,"max_value":0.1}}]},` +
		`"trial_job_spec":{"worker_pool_specs":[{"machine_spec":{"machine_type":"n2-standard-8"},"replica_count":1,"container_spec":{"command":["true"]}}]}}`
	matrixPipelineJSON = `{"display_name":"p","training_task_definition":"custom_task_1.0.0.yaml",` +
		`"training_task_inputs":{"worker_pool_specs":[{"machine_spec":{"machine_type":"n2-standard-8"},"replica_count":1,"container_spec":{"command":["true"]}}]},` +
		`"model_to_upload":{"display_name":"m"}}`
)

// trainingMatrixWorld adds the matrix's training resources to h's world.
func trainingMatrixWorld(t *testing.T, h *harness) {
	t.Helper()
	for _, c := range []struct {
		id    string
		ended bool
	}{{"40", false}, {"41", true}} {
		j := customJobSpec(t)
		j.Name, j.User, j.State = location+"/customJobs/"+c.id, "ana", trainingv1.JobState_JOB_STATE_RUNNING
		var tj trainingv1.HyperparameterTuningJob
		if err := protojson.Unmarshal([]byte(matrixTuningJSON), &tj); err != nil {
			t.Fatal(err)
		}
		tj.Name, tj.User, tj.State = location+"/hyperparameterTuningJobs/"+c.id, "ana", trainingv1.JobState_JOB_STATE_RUNNING
		var p trainingv1.TrainingPipeline
		if err := protojson.Unmarshal([]byte(matrixPipelineJSON), &p); err != nil {
			t.Fatal(err)
		}
		p.Name, p.User, p.State = location+"/trainingPipelines/"+c.id, "ana", trainingv1.PipelineState_PIPELINE_STATE_RUNNING
		if c.ended {
			j.State, tj.State, p.State = trainingv1.JobState_JOB_STATE_SUCCEEDED, trainingv1.JobState_JOB_STATE_FAILED, trainingv1.PipelineState_PIPELINE_STATE_CANCELLED
		}
		h.w.setTraining(j)
		h.w.setTraining(&tj)
		h.w.setTraining(&p)
	}
}

// trainingMatrixRows are the matrix's rows of TrainingService: users
// create, viewers read, ana and admins cancel and delete ana's.
func trainingMatrixRows(t *testing.T) []matrixRow {
	// As SubmitJob: users, and a workload as its owner.
	userCreateRow := [9]codes.Code{un, pd, ok, ok, ok, nf, ok, pd, ok}
	tc := func(c *grpc.ClientConn) trainingv1.TrainingServiceClient {
		return trainingv1.NewTrainingServiceClient(c)
	}
	get := func(path string) func(int) (string, string, string) {
		return func(int) (string, string, string) { return "GET", path, "" }
	}
	post := func(path, body string) func(int) (string, string, string) {
		return func(int) (string, string, string) { return "POST", path, body }
	}
	del := func(path string) func(int) (string, string, string) {
		return func(int) (string, string, string) { return "DELETE", path, "" }
	}
	var tuning trainingv1.HyperparameterTuningJob
	var pipeline trainingv1.TrainingPipeline
	if protojson.Unmarshal([]byte(matrixTuningJSON), &tuning) != nil || protojson.Unmarshal([]byte(matrixPipelineJSON), &pipeline) != nil {
		t.Fatal("matrix training JSON")
	}
	cj, tj, tp := location+"/customJobs/", location+"/hyperparameterTuningJobs/", location+"/trainingPipelines/"
	call := func(f func(context.Context, trainingv1.TrainingServiceClient) error) func(context.Context, *grpc.ClientConn, int) error {
		return func(ctx context.Context, c *grpc.ClientConn, _ int) error { return f(ctx, tc(c)) }
	}
	return []matrixRow{
		{"CreateCustomJob", call(func(ctx context.Context, c trainingv1.TrainingServiceClient) error {
			_, err := c.CreateCustomJob(ctx, &trainingv1.CreateCustomJobRequest{Parent: location, CustomJob: customJobSpec(t)})
			return err
		}), post("/v1/"+location+"/customJobs", snakeCustomJob), userCreateRow},
		{"GetCustomJob", call(func(ctx context.Context, c trainingv1.TrainingServiceClient) error {
			_, err := c.GetCustomJob(ctx, &trainingv1.GetCustomJobRequest{Name: cj + "40"})
			return err
		}), get("/v1/" + cj + "40"), viewerRow},
		{"ListCustomJobs", call(func(ctx context.Context, c trainingv1.TrainingServiceClient) error {
			_, err := c.ListCustomJobs(ctx, &trainingv1.ListCustomJobsRequest{Parent: location})
			return err
		}), get("/v1/" + location + "/customJobs"), viewerRow},
		{"CancelCustomJob", call(func(ctx context.Context, c trainingv1.TrainingServiceClient) error {
			_, err := c.CancelCustomJob(ctx, &trainingv1.CancelCustomJobRequest{Name: cj + "40"})
			return err
		}), post("/v1/"+cj+"40:cancel", "{}"), jobActRow},
		{"DeleteCustomJob", call(func(ctx context.Context, c trainingv1.TrainingServiceClient) error {
			_, err := c.DeleteCustomJob(ctx, &trainingv1.DeleteCustomJobRequest{Name: cj + "41"})
			return err
		}), del("/v1/" + cj + "41"), jobActRow},
		{"CreateHyperparameterTuningJob", call(func(ctx context.Context, c trainingv1.TrainingServiceClient) error {
			_, err := c.CreateHyperparameterTuningJob(ctx, &trainingv1.CreateHyperparameterTuningJobRequest{Parent: location, HyperparameterTuningJob: &tuning})
			return err
		}), post("/v1/"+location+"/hyperparameterTuningJobs", matrixTuningJSON), userCreateRow},
		{"GetHyperparameterTuningJob", call(func(ctx context.Context, c trainingv1.TrainingServiceClient) error {
			_, err := c.GetHyperparameterTuningJob(ctx, &trainingv1.GetHyperparameterTuningJobRequest{Name: tj + "40"})
			return err
		}), get("/v1/" + tj + "40"), viewerRow},
		{"ListHyperparameterTuningJobs", call(func(ctx context.Context, c trainingv1.TrainingServiceClient) error {
			_, err := c.ListHyperparameterTuningJobs(ctx, &trainingv1.ListHyperparameterTuningJobsRequest{Parent: location})
			return err
		}), get("/v1/" + location + "/hyperparameterTuningJobs"), viewerRow},
		{"CancelHyperparameterTuningJob", call(func(ctx context.Context, c trainingv1.TrainingServiceClient) error {
			_, err := c.CancelHyperparameterTuningJob(ctx, &trainingv1.CancelHyperparameterTuningJobRequest{Name: tj + "40"})
			return err
		}), post("/v1/"+tj+"40:cancel", "{}"), jobActRow},
		{"DeleteHyperparameterTuningJob", call(func(ctx context.Context, c trainingv1.TrainingServiceClient) error {
			_, err := c.DeleteHyperparameterTuningJob(ctx, &trainingv1.DeleteHyperparameterTuningJobRequest{Name: tj + "41"})
			return err
		}), del("/v1/" + tj + "41"), jobActRow},
		{"CreateTrainingPipeline", call(func(ctx context.Context, c trainingv1.TrainingServiceClient) error {
			_, err := c.CreateTrainingPipeline(ctx, &trainingv1.CreateTrainingPipelineRequest{Parent: location, TrainingPipeline: &pipeline})
			return err
		}), post("/v1/"+location+"/trainingPipelines", matrixPipelineJSON), userCreateRow},
		{"GetTrainingPipeline", call(func(ctx context.Context, c trainingv1.TrainingServiceClient) error {
			_, err := c.GetTrainingPipeline(ctx, &trainingv1.GetTrainingPipelineRequest{Name: tp + "40"})
			return err
		}), get("/v1/" + tp + "40"), viewerRow},
		{"ListTrainingPipelines", call(func(ctx context.Context, c trainingv1.TrainingServiceClient) error {
			_, err := c.ListTrainingPipelines(ctx, &trainingv1.ListTrainingPipelinesRequest{Parent: location})
			return err
		}), get("/v1/" + location + "/trainingPipelines"), viewerRow},
		{"CancelTrainingPipeline", call(func(ctx context.Context, c trainingv1.TrainingServiceClient) error {
			_, err := c.CancelTrainingPipeline(ctx, &trainingv1.CancelTrainingPipelineRequest{Name: tp + "40"})
			return err
		}), post("/v1/"+tp+"40:cancel", "{}"), jobActRow},
		{"DeleteTrainingPipeline", call(func(ctx context.Context, c trainingv1.TrainingServiceClient) error {
			_, err := c.DeleteTrainingPipeline(ctx, &trainingv1.DeleteTrainingPipelineRequest{Name: tp + "41"})
			return err
		}), del("/v1/" + tp + "41"), jobActRow},
	}
}

// TestTrainingRequestIDReused: a request_id sent again with another
// request (another spec, another location) is InvalidArgument naming
// request_id, for each of the three creates, and nothing is written for
// it; the same request again still answers the first resource. Before,
// the second request was answered the first's resource and the caller
// believed it accepted.
func TestTrainingRequestIDReused(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := testkit.Context(t, wait)
	tc := h.trainingAs(t, "ana")
	spec := customJobSpec(t)
	changed := proto.Clone(spec).(*trainingv1.CustomJob)
	changed.JobSpec.WorkerPoolSpecs[0].GetContainerSpec().Args = []string{"--epochs=30"}
	tuning := &trainingv1.HyperparameterTuningJob{DisplayName: "tune", MaxTrialCount: 2, ParallelTrialCount: 1,
		StudySpec: &trainingv1.StudySpec{
			Metrics: []*trainingv1.StudySpec_MetricSpec{{MetricId: "val_loss", Goal: trainingv1.StudySpec_MetricSpec_MINIMIZE}},
			Parameters: []*trainingv1.StudySpec_ParameterSpec{{ParameterId: "lr",
				ParameterValueSpec: &trainingv1.StudySpec_ParameterSpec_DoubleValueSpec_{DoubleValueSpec: &trainingv1.StudySpec_ParameterSpec_DoubleValueSpec{MinValue: 1e-3, MaxValue: 0.1}}}}},
		TrialJobSpec: spec.GetJobSpec()}
	moreTrials := proto.Clone(tuning).(*trainingv1.HyperparameterTuningJob)
	moreTrials.MaxTrialCount = 3
	var pj trainingv1.TrainingPipeline
	if err := protojson.Unmarshal([]byte(`{"displayName":"pipe","trainingTaskDefinition":"`+trainingspec.CustomTask+
		`","trainingTaskInputs":{"workerPoolSpecs":[{"machineSpec":{"machineType":"n2-standard-8"},"replicaCount":"1","containerSpec":{"imageUri":"img","command":["true"]}}]}}`), &pj); err != nil {
		t.Fatal(err)
	}
	renamed := proto.Clone(&pj).(*trainingv1.TrainingPipeline)
	renamed.DisplayName = "pipe-2"
	const elsewhere = "projects/default/locations/europe-west4"

	type create func(parent string, second bool) (string, error)
	var accepted []string
	for _, c := range []struct {
		what string
		do   create
	}{
		{"custom job", func(parent string, second bool) (string, error) {
			j := spec
			if second {
				j = changed
			}
			r, err := tc.CreateCustomJob(ctx, &trainingv1.CreateCustomJobRequest{Parent: parent, CustomJob: j, RequestId: "same-cj"})
			return r.GetName(), err
		}},
		{"tuning job", func(parent string, second bool) (string, error) {
			j := tuning
			if second {
				j = moreTrials
			}
			r, err := tc.CreateHyperparameterTuningJob(ctx, &trainingv1.CreateHyperparameterTuningJobRequest{Parent: parent, HyperparameterTuningJob: j, RequestId: "same-hp"})
			return r.GetName(), err
		}},
		{"pipeline", func(parent string, second bool) (string, error) {
			p := &pj
			if second {
				p = renamed
			}
			r, err := tc.CreateTrainingPipeline(ctx, &trainingv1.CreateTrainingPipelineRequest{Parent: parent, TrainingPipeline: p, RequestId: "same-tp"})
			return r.GetName(), err
		}},
	} {
		first, err := c.do(location, false)
		if err != nil {
			t.Fatalf("%s: %v", c.what, err)
		}
		accepted = append(accepted, first)
		for _, reuse := range []struct {
			parent string
			second bool
		}{{location, true}, {elsewhere, false}} {
			got, err := c.do(reuse.parent, reuse.second)
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "request_id") {
				t.Errorf("%s: request_id reused (parent %s, changed %v) = %q, %v; want InvalidArgument naming request_id", c.what, reuse.parent, reuse.second, got, err)
			}
		}
		if again, err := c.do(location, false); err != nil || again != first {
			t.Errorf("%s: retry = %q, %v; want %s", c.what, again, err, first)
		}
	}
	for _, name := range accepted {
		testkit.WaitEvent(t, h.broker, topics.TrainingCommands, wait, func(e envelope.Event) bool {
			return strings.Contains(prototext.Format(e.Payload), name)
		})
	}
	if evs := testkit.Events(t, h.broker, topics.TrainingCommands); len(evs) != 3 {
		t.Errorf("%d training commands written, want 3 (the reused request ids wrote none)", len(evs))
	}
}
