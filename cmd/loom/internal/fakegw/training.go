package fakegw

import (
	"cmp"
	"context"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/trainingspec"
	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
)

// Training, set as Gateway.Training, serves loom.training.v1's
// TrainingService in memory: creates validate with libs/trainingspec (as
// the gateway does) and take ids from FirstID on (a tuning job a block of
// 1+max_trial_count, a pipeline 2), answered QUEUED and owned by User;
// gets answer the resource, or, while Progress holds states for its name,
// the next of them (each Get takes one; the last stays), so that a test
// plays a job's life; lists filter with trainingspec.ParseFilterFor on state,
// display_name and labels.*; cancel and delete answer NotFound for what
// it does not have. Requests are recorded with the Gateway's (Requests).
type Training struct {
	trainingv1.UnimplementedTrainingServiceServer

	// Resources are the CustomJobs, tuning jobs and pipelines by name.
	Resources map[string]proto.Message
	// Progress are the answers successive Gets of a name give.
	Progress map[string][]proto.Message
	// FirstID is the first id creates take (default 1); User the owner
	// they set (default "ana").
	FirstID int64
	User    string

	g    *Gateway
	next int64
}

func (t *Training) lock(m proto.Message) func() { return t.g.lock(m) }

func (t *Training) nextIDs(n int) int64 {
	if t.next == 0 {
		t.next = max(t.FirstID, 1)
	}
	id := t.next
	t.next += int64(n)
	return id
}

func (t *Training) user() string {
	if t.User == "" {
		return "ana"
	}
	return t.User
}

func (t *Training) store(m interface {
	proto.Message
	GetName() string
}) {
	if t.Resources == nil {
		t.Resources = map[string]proto.Message{}
	}
	t.Resources[m.GetName()] = proto.Clone(m)
}

// get answers name's next Progress state (kept as the resource), else the
// resource; the caller holds the lock.
func (t *Training) get(name string) (proto.Message, error) {
	if states := t.Progress[name]; len(states) > 0 {
		t.Resources[name] = states[0]
		if len(states) > 1 {
			t.Progress[name] = states[1:]
		}
	}
	m, ok := t.Resources[name]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "%s: not found", name)
	}
	return proto.Clone(m), nil
}

func invalid(err error) error { return status.Error(codes.InvalidArgument, err.Error()) }

// CreateCustomJob validates and accepts a CustomJob.
func (t *Training) CreateCustomJob(_ context.Context, r *trainingv1.CreateCustomJobRequest) (*trainingv1.CustomJob, error) {
	defer t.lock(r)()
	if err := trainingspec.ValidateCustomJob(r.GetCustomJob()); err != nil {
		return nil, invalid(err)
	}
	j := proto.Clone(r.GetCustomJob()).(*trainingv1.CustomJob)
	id := t.nextIDs(1)
	j.Name = r.GetParent() + "/customJobs/" + strconv.FormatInt(id, 10)
	j.User, j.State, j.CreateTime = t.user(), trainingv1.JobState_JOB_STATE_QUEUED, timestamppb.New(TestNow)
	project := strings.Split(r.GetParent(), "/")[1]
	// Its scheduler job is named once it is submitted (as the gateway's
	// accepted record does not).
	j.Cluster = "projects/" + project + "/clusters/cj-" + strconv.FormatInt(id, 10)
	t.store(j)
	return j, nil
}

// CreateHyperparameterTuningJob validates and accepts a tuning job.
func (t *Training) CreateHyperparameterTuningJob(_ context.Context, r *trainingv1.CreateHyperparameterTuningJobRequest) (*trainingv1.HyperparameterTuningJob, error) {
	defer t.lock(r)()
	if err := trainingspec.ValidateHyperparameterTuningJob(r.GetHyperparameterTuningJob()); err != nil {
		return nil, invalid(err)
	}
	j := proto.Clone(r.GetHyperparameterTuningJob()).(*trainingv1.HyperparameterTuningJob)
	j.Name = r.GetParent() + "/hyperparameterTuningJobs/" + strconv.FormatInt(t.nextIDs(1+int(j.GetMaxTrialCount())), 10)
	j.User, j.State, j.CreateTime = t.user(), trainingv1.JobState_JOB_STATE_QUEUED, timestamppb.New(TestNow)
	t.store(j)
	return j, nil
}

// CreateTrainingPipeline validates and accepts a pipeline.
func (t *Training) CreateTrainingPipeline(_ context.Context, r *trainingv1.CreateTrainingPipelineRequest) (*trainingv1.TrainingPipeline, error) {
	defer t.lock(r)()
	if err := trainingspec.ValidateTrainingPipeline(r.GetTrainingPipeline()); err != nil {
		return nil, invalid(err)
	}
	p := proto.Clone(r.GetTrainingPipeline()).(*trainingv1.TrainingPipeline)
	p.Name = r.GetParent() + "/trainingPipelines/" + strconv.FormatInt(t.nextIDs(2), 10)
	p.User, p.State, p.CreateTime = t.user(), trainingv1.PipelineState_PIPELINE_STATE_QUEUED, timestamppb.New(TestNow)
	t.store(p)
	return p, nil
}

// GetCustomJob answers the CustomJob (or its next Progress state).
func (t *Training) GetCustomJob(_ context.Context, r *trainingv1.GetCustomJobRequest) (*trainingv1.CustomJob, error) {
	defer t.lock(r)()
	m, err := t.get(r.GetName())
	if err != nil {
		return nil, err
	}
	return m.(*trainingv1.CustomJob), nil
}

// GetHyperparameterTuningJob answers the tuning job (or its next Progress state).
func (t *Training) GetHyperparameterTuningJob(_ context.Context, r *trainingv1.GetHyperparameterTuningJobRequest) (*trainingv1.HyperparameterTuningJob, error) {
	defer t.lock(r)()
	m, err := t.get(r.GetName())
	if err != nil {
		return nil, err
	}
	return m.(*trainingv1.HyperparameterTuningJob), nil
}

// GetTrainingPipeline answers the pipeline (or its next Progress state).
func (t *Training) GetTrainingPipeline(_ context.Context, r *trainingv1.GetTrainingPipelineRequest) (*trainingv1.TrainingPipeline, error) {
	defer t.lock(r)()
	m, err := t.get(r.GetName())
	if err != nil {
		return nil, err
	}
	return m.(*trainingv1.TrainingPipeline), nil
}

// filterable is what lists filter on.
type filterable interface {
	proto.Message
	GetName() string
	GetDisplayName() string
	GetLabels() map[string]string
}

// list answers the resources of type T under parent's collection that pass
// filter (checked against keys, as the gateway checks it), sorted by name.
func list[T filterable](t *Training, parent, collection, filter string, keys trainingspec.FilterKeys, state func(T) string) ([]T, error) {
	f, err := trainingspec.ParseFilterFor(filter, keys)
	if err != nil {
		return nil, invalid(err)
	}
	var out []T
	for name, m := range t.Resources {
		r, ok := m.(T)
		if !ok || !strings.HasPrefix(name, parent+"/"+collection+"/") {
			continue
		}
		if f.Match(func(k string) (string, bool) {
			switch {
			case k == "state":
				return state(r), true
			case k == "display_name":
				return r.GetDisplayName(), true
			case strings.HasPrefix(k, "labels."):
				v, ok := r.GetLabels()[strings.TrimPrefix(k, "labels.")]
				return v, ok
			}
			return "", false
		}) {
			out = append(out, proto.Clone(r).(T))
		}
	}
	sortByName(out)
	return out, nil
}

func sortByName[T interface{ GetName() string }](items []T) {
	slices.SortFunc(items, func(a, b T) int { return cmp.Compare(idOf(a.GetName()), idOf(b.GetName())) })
}

func idOf(name string) int64 {
	n, _ := strconv.ParseInt(shortName(name), 10, 64)
	return n
}

// ListCustomJobs answers the parent's CustomJobs that pass the filter.
func (t *Training) ListCustomJobs(_ context.Context, r *trainingv1.ListCustomJobsRequest) (*trainingv1.ListCustomJobsResponse, error) {
	defer t.lock(r)()
	js, err := list(t, r.GetParent(), "customJobs", r.GetFilter(), trainingspec.JobFilterKeys, func(j *trainingv1.CustomJob) string { return j.GetState().String() })
	return &trainingv1.ListCustomJobsResponse{CustomJobs: js}, err
}

// ListHyperparameterTuningJobs answers the parent's tuning jobs that pass the filter.
func (t *Training) ListHyperparameterTuningJobs(_ context.Context, r *trainingv1.ListHyperparameterTuningJobsRequest) (*trainingv1.ListHyperparameterTuningJobsResponse, error) {
	defer t.lock(r)()
	js, err := list(t, r.GetParent(), "hyperparameterTuningJobs", r.GetFilter(), trainingspec.JobFilterKeys, func(j *trainingv1.HyperparameterTuningJob) string { return j.GetState().String() })
	return &trainingv1.ListHyperparameterTuningJobsResponse{HyperparameterTuningJobs: js}, err
}

// ListTrainingPipelines answers the parent's pipelines that pass the filter.
func (t *Training) ListTrainingPipelines(_ context.Context, r *trainingv1.ListTrainingPipelinesRequest) (*trainingv1.ListTrainingPipelinesResponse, error) {
	defer t.lock(r)()
	ps, err := list(t, r.GetParent(), "trainingPipelines", r.GetFilter(), trainingspec.PipelineFilterKeys, func(p *trainingv1.TrainingPipeline) string { return p.GetState().String() })
	return &trainingv1.ListTrainingPipelinesResponse{TrainingPipelines: ps}, err
}

// CancelCustomJob answers Empty for a CustomJob it has, else NotFound.
func (t *Training) CancelCustomJob(_ context.Context, r *trainingv1.CancelCustomJobRequest) (*trainingv1.Empty, error) {
	defer t.lock(r)()
	return t.cancel(r.GetName())
}

// CancelHyperparameterTuningJob answers Empty for a tuning job it has, else NotFound.
func (t *Training) CancelHyperparameterTuningJob(_ context.Context, r *trainingv1.CancelHyperparameterTuningJobRequest) (*trainingv1.Empty, error) {
	defer t.lock(r)()
	return t.cancel(r.GetName())
}

// CancelTrainingPipeline answers Empty for a pipeline it has, else NotFound.
func (t *Training) CancelTrainingPipeline(_ context.Context, r *trainingv1.CancelTrainingPipelineRequest) (*trainingv1.Empty, error) {
	defer t.lock(r)()
	return t.cancel(r.GetName())
}

func (t *Training) cancel(name string) (*trainingv1.Empty, error) {
	if _, ok := t.Resources[name]; !ok {
		return nil, status.Errorf(codes.NotFound, "%s: not found", name)
	}
	return &trainingv1.Empty{}, nil
}
