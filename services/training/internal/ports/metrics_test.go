package ports

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/series"
	"github.com/loom-ml/loom/libs/store"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
	"github.com/loom-ml/loom/services/training/internal/adapters"
	"github.com/loom-ml/loom/services/training/internal/app"
)

const loc = "projects/p/locations/l"

func trialSpec() *trainingv1.CustomJobSpec {
	return &trainingv1.CustomJobSpec{WorkerPoolSpecs: []*trainingv1.WorkerPoolSpec{{
		MachineSpec: &trainingv1.MachineSpec{MachineType: "n2-standard-4"}, ReplicaCount: 1,
		Task: &trainingv1.WorkerPoolSpec_ContainerSpec{ContainerSpec: &trainingv1.ContainerSpec{Command: []string{"true"}}}}}}
}

// newMetrics is a MetricsService over a training service holding CustomJob
// 7, tuning job 20 (trials' jobs from 21) and pipeline 30 (its custom job
// 31), and a series store in which plain job 5 has a series.
func newMetrics(t *testing.T) *Metrics {
	t.Helper()
	ctx := testkit.Context(t, 30*time.Second)
	_, rdb := testkit.Redis(t)
	a, err := app.New(ctx, adapters.NewRepo(store.New(rdb, "training:")), slog.Default(), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	inputs, err := structpb.NewValue(map[string]any{"workerPoolSpecs": []any{map[string]any{
		"machineSpec": map[string]any{"machineType": "n2-standard-4"}, "replicaCount": "1",
		"containerSpec": map[string]any{"command": []any{"true"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []proto.Message{
		&eventsv1.CreateCustomJob{CustomJob: &trainingv1.CustomJob{Name: loc + "/customJobs/7", User: "alice", JobSpec: trialSpec()}},
		&eventsv1.CreateHyperparameterTuningJob{TuningJob: &trainingv1.HyperparameterTuningJob{
			Name: loc + "/hyperparameterTuningJobs/20", DisplayName: "tune", User: "alice", MaxTrialCount: 2, ParallelTrialCount: 1, TrialJobSpec: trialSpec(),
			StudySpec: &trainingv1.StudySpec{
				Metrics: []*trainingv1.StudySpec_MetricSpec{{MetricId: "loss", Goal: trainingv1.StudySpec_MetricSpec_MINIMIZE}},
				Parameters: []*trainingv1.StudySpec_ParameterSpec{{ParameterId: "lr", ParameterValueSpec: &trainingv1.StudySpec_ParameterSpec_DoubleValueSpec_{
					DoubleValueSpec: &trainingv1.StudySpec_ParameterSpec_DoubleValueSpec{MinValue: 0.001, MaxValue: 0.1}}}}}}},
		&eventsv1.CreateTrainingPipeline{ReservedJobIds: 2, Pipeline: &trainingv1.TrainingPipeline{Name: loc + "/trainingPipelines/30", DisplayName: "pl", User: "alice",
			TrainingTaskDefinition: "custom_task_1.0.0.yaml", TrainingTaskInputs: inputs}},
	} {
		ev := envelope.New(topics.TrainingCommands, "projects/p", "loom/gateway", cmd)
		ev.Principal = "users/alice"
		if err := a.Handle(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	st := series.NewStore(rdb, "training:", series.Limits{})
	if _, err := st.Append(ctx, "projects/p/jobs/5", series.Source{}, series.Batch{"loss": {{Step: 1, Value: 0.5}}}); err != nil {
		t.Fatal(err)
	}
	return NewMetrics(a, st)
}

// TestMetricsOfWhatDoesNotExist (a tester found `loom metrics 99999` and
// .../customJobs/2/metrics at a wrong location answered as a job without
// metrics): a CustomJob the service does not hold is NotFound, and so is a
// tuning job's or pipeline's id, saying where their metrics are; a plain
// job without series is NotFound for the gateway to judge with the
// scheduler; what exists answers as before.
func TestMetricsOfWhatDoesNotExist(t *testing.T) {
	t.Parallel()
	m := newMetrics(t)
	ctx := context.Background()
	for _, c := range []struct {
		parent string
		want   string // "" an answer
	}{
		{loc + "/customJobs/7", ""}, // a CustomJob without metrics yet: none
		{"projects/p/jobs/7", ""},   // its job: the same
		{"projects/p/jobs/21", ""},  // a trial's job
		{"projects/p/jobs/31", ""},  // a pipeline's custom job
		{"projects/p/jobs/5", ""},   // a plain job with a series
		{loc + "/hyperparameterTuningJobs/20/trials/1", ""},
		{"projects/p/locations/elsewhere/customJobs/7", "not found: no custom job 7 in location elsewhere of project p (list them with `loom jobs custom list --location elsewhere`"},
		{loc + "/customJobs/2", "no custom job 2 in location l"},
		{"projects/p/jobs/99999", "not found: no job projects/p/jobs/99999 is known, and it has reported no metrics"},
		{"projects/p/jobs/20", "not found: projects/p/jobs/20 is the id of tuning job " + loc + "/hyperparameterTuningJobs/20, which runs no job of its own: its metrics are its trials' (list them with `loom hptuning trials 20 --location l`"},
		{"projects/p/jobs/30", "not found: projects/p/jobs/30 is the id of training pipeline " + loc + "/trainingPipelines/30, which runs no job of its own: its metrics are its custom job's: `loom metrics " + loc + "/customJobs/31`"},
		{"projects/q/jobs/7", "no job projects/q/jobs/7 is known"}, // another project's id
	} {
		_, err := m.ListMetrics(ctx, &trainingv1.ListMetricsRequest{Parent: c.parent})
		_, rerr := m.ReadMetrics(ctx, &trainingv1.ReadMetricsRequest{Parent: c.parent, Metric: "acc"})
		if c.want == "" {
			if err != nil {
				t.Errorf("list %s: %v", c.parent, err)
			}
			if status.Code(rerr) != codes.NotFound || !strings.Contains(rerr.Error(), `metric "acc"`) {
				t.Errorf("read of a metric %s lacks: %v", c.parent, rerr)
			}
			continue
		}
		for what, err := range map[string]error{"list": err, "read": rerr} {
			if status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s %s = %v, want NotFound: ...%s", what, c.parent, err, c.want)
			}
		}
	}
	if r, err := m.ReadMetrics(ctx, &trainingv1.ReadMetricsRequest{Parent: "projects/p/jobs/5", Metric: "loss"}); err != nil || r.GetTotal() != 1 {
		t.Errorf("a plain job's series: %v, %v", r, err)
	}
}
