package adapters

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/store"
	"github.com/loom-ml/loom/libs/testkit"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/training/internal/domain"
)

// Sizes of the study the benchmark and the big-study tests run on: a
// study at its trial budget (domain.MaxTrialCount), each trial with a
// long curve of two metrics.
const (
	realTrials       = domain.MaxTrialCount
	realMeasurements = 300
	realParallel     = 8
)

var studyStart = time.Date(2026, 12, 2, 7, 0, 0, 0, time.UTC)

// realStudy is a tuning root as the service holds it late in a study of n
// trials with m measurements each (val_loss and accuracy): the first
// n-parallel trials ended (SUCCEEDED, one in ten INFEASIBLE), the last
// parallel ones ACTIVE with their CustomJobs RUNNING on a node, each
// CustomJob with the trial's spec (its parameters as flags).
func realStudy(n, m, parallel int) *domain.Root {
	jobSpec := func() *trainingv1.CustomJobSpec {
		return &trainingv1.CustomJobSpec{
			WorkerPoolSpecs: []*trainingv1.WorkerPoolSpec{{
				MachineSpec: &trainingv1.MachineSpec{MachineType: "a3-highgpu-8g", AcceleratorCount: 8}, ReplicaCount: 1,
				Task: &trainingv1.WorkerPoolSpec_ContainerSpec{ContainerSpec: &trainingv1.ContainerSpec{
					ImageUri: "us-docker.pkg.dev/x/train:1", Command: []string{"python", "-m", "trainer"},
					Args: []string{"--epochs=300"}, Env: []*trainingv1.EnvVar{{Name: "A", Value: "1"}}}}}},
			BaseOutputDirectory: &trainingv1.GcsDestination{OutputUriPrefix: "file:///shared/out/"},
		}
	}
	ts := func(d time.Duration) *timestamppb.Timestamp { return timestamppb.New(studyStart.Add(d)) }
	job := &trainingv1.HyperparameterTuningJob{
		Name: study, DisplayName: "big", User: "alice", Labels: map[string]string{"team": "ml"},
		StudySpec: &trainingv1.StudySpec{
			Metrics: []*trainingv1.StudySpec_MetricSpec{{MetricId: "val_loss", Goal: trainingv1.StudySpec_MetricSpec_MINIMIZE}},
			Parameters: []*trainingv1.StudySpec_ParameterSpec{
				{ParameterId: "learning_rate", ScaleType: trainingv1.StudySpec_ParameterSpec_UNIT_LOG_SCALE,
					ParameterValueSpec: &trainingv1.StudySpec_ParameterSpec_DoubleValueSpec_{DoubleValueSpec: &trainingv1.StudySpec_ParameterSpec_DoubleValueSpec{MinValue: 1e-4, MaxValue: 1}}},
				{ParameterId: "batch_size", ParameterValueSpec: &trainingv1.StudySpec_ParameterSpec_DiscreteValueSpec_{
					DiscreteValueSpec: &trainingv1.StudySpec_ParameterSpec_DiscreteValueSpec{Values: []float64{16, 32, 64}}}},
			},
			Algorithm: trainingv1.StudySpec_RANDOM_SEARCH,
		},
		MaxTrialCount: int32(n), ParallelTrialCount: int32(parallel), TrialJobSpec: jobSpec(),
		State: trainingv1.JobState_JOB_STATE_RUNNING, CreateTime: ts(0), StartTime: ts(0), UpdateTime: ts(time.Hour),
	}
	r := &domain.Root{Name: study, Tuning: &domain.Tuning{Job: job}}
	best := 0.0
	for k := 1; k <= n; k++ {
		id := strconv.Itoa(k)
		ps := []*trainingv1.Trial_Parameter{
			{ParameterId: "learning_rate", Value: structpb.NewNumberValue(1e-4 * float64(k))},
			{ParameterId: "batch_size", Value: structpb.NewNumberValue(float64(int(16) << (k % 3)))},
		}
		start := time.Duration(k) * time.Minute
		tr := &trainingv1.Trial{Name: study + "/trials/" + id, Id: id, State: trainingv1.Trial_SUCCEEDED, Parameters: ps,
			StartTime: ts(start), EndTime: ts(start + time.Hour), CustomJob: fmt.Sprintf("projects/p/locations/l/customJobs/%d", 100+k)}
		running := k > n-parallel
		steps := m
		if running {
			steps = m / 2
		}
		for st := 1; st <= steps; st++ {
			tr.Measurements = append(tr.Measurements, &trainingv1.Measurement{
				StepCount: int64(st), ElapsedDuration: durationpb.New(time.Duration(st) * 10 * time.Second),
				Metrics: []*trainingv1.Measurement_Metric{
					{MetricId: "accuracy", Value: 1 - 1/float64(st+1)},
					{MetricId: "val_loss", Value: float64(k%97)/100 + 1/float64(st)},
				}})
		}
		cj := &trainingv1.CustomJob{Name: tr.GetCustomJob(), DisplayName: "big-trial-" + id, JobSpec: jobSpec(), User: "alice",
			Labels: job.GetLabels(), Cluster: fmt.Sprintf("projects/p/clusters/cj-%d", 100+k), Job: fmt.Sprintf("projects/p/jobs/%d", 100+k),
			State: trainingv1.JobState_JOB_STATE_SUCCEEDED, CreateTime: ts(start), StartTime: ts(start), EndTime: ts(start + time.Hour),
			UpdateTime: ts(start + time.Hour)}
		cj.JobSpec.WorkerPoolSpecs[0].GetContainerSpec().Args = append(cj.JobSpec.WorkerPoolSpecs[0].GetContainerSpec().Args,
			domain.ParamFlags(ps)...)
		c := &domain.CJ{Job: cj, TrialID: id, Ephemeral: true, Submitted: true, ClusterDeleted: true,
			Nodes: []string{fmt.Sprintf("projects/p/clusters/cj-%d/nodes/cj%d-wp0-0001", 100+k, 100+k)}, Attempt: 1}
		switch {
		case running:
			tr.State, tr.EndTime = trainingv1.Trial_ACTIVE, nil
			cj.State, cj.EndTime = trainingv1.JobState_JOB_STATE_RUNNING, nil
			c.ClusterDeleted = false
		case k%10 == 0:
			tr.State, tr.InfeasibleReason = trainingv1.Trial_INFEASIBLE, "its custom job ended JOB_STATE_FAILED: a replica exited with code 1"
			cj.State, cj.Error = trainingv1.JobState_JOB_STATE_FAILED, &trainingv1.Status{Code: 13, Message: "a replica exited with code 1"}
		default:
			tr.FinalMeasurement = tr.Measurements[len(tr.Measurements)-1]
			if v := tr.FinalMeasurement.GetMetrics()[1].GetValue(); job.BestTrial == "" || v < best {
				job.BestTrial, best = id, v
			}
		}
		job.Trials = append(job.Trials, tr)
		r.CJs = append(r.CJs, c)
	}
	return r
}

// activeTrial is trial k of a realStudy of n trials (k counted back from
// the last: 0 is the last): its scheduler job and cluster names.
func activeTrial(n, back int) (job, cluster string) {
	id := 100 + n - back
	return fmt.Sprintf("projects/p/jobs/%d", id), fmt.Sprintf("projects/p/clusters/cj-%d", id)
}

// trialEvents are the events a running trial's study sees most, by name:
// one step's metrics of an active trial; its job requeued (a node
// failed: PENDING, one restart more); its job completed (the trial ends
// SUCCEEDED and the summary changes); the ephemeral cluster of an ended
// trial deleted (a redelivery: nothing changes).
func trialEvents(n, m int) []struct {
	name string
	in   domain.Input
} {
	job, _ := activeTrial(n, 0)
	_, endedCluster := activeTrial(n, realParallel+1)
	return []struct {
		name string
		in   domain.Input
	}{
		{"metrics", domain.Input{Payload: &eventsv1.MetricsReported{Job: job, Node: "cj1100-wp0-0001",
			Points: []*eventsv1.MetricsReported_Point{{Step: int64(m/2 + 1), Time: timestamppb.New(studyStart.Add(30 * time.Hour)),
				Values: map[string]float64{"val_loss": 0.5, "accuracy": 0.9}}}}}},
		{"requeued", domain.Input{Payload: &eventsv1.JobChanged{Job: &loomv1.Job{Name: job, State: loomv1.JobState_PENDING,
			RestartCount: 1, Nodes: []string{"projects/p/clusters/cj-1100/nodes/cj1100-wp0-0001"}}, Attempt: 2}}},
		{"completed", domain.Input{Payload: &eventsv1.JobChanged{Job: &loomv1.Job{Name: job, State: loomv1.JobState_COMPLETED,
			Nodes: []string{"projects/p/clusters/cj-1100/nodes/cj1100-wp0-0001"}}, Attempt: 1}}},
		{"nothing", domain.Input{Payload: &eventsv1.ClusterDeleted{Cluster: endedCluster}}},
	}
}

// BenchmarkTrialEventOnABigStudy is the service's whole decision path for
// one trial's event on a study of domain.MaxTrialCount trials with long
// curves: State.Handle (the domain's change) and Repo.Tx (what is written
// and emitted). Its cost should follow what the event touched (one trial),
// not the study's size. Run:
//
//	go test ./internal/adapters -run '^$' -bench BenchmarkTrialEventOnABigStudy -benchmem
func BenchmarkTrialEventOnABigStudy(b *testing.B) {
	s := domain.NewState(realStudy(realTrials, realMeasurements, realParallel))
	repo := NewRepo(nil) // Tx only builds the transaction
	now := studyStart.Add(30 * time.Hour)
	for _, ev := range trialEvents(realTrials, realMeasurements) {
		b.Run(ev.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				c, err := s.Handle(now, ev.in)
				if err != nil || (c == nil) != (ev.name == "nothing") {
					b.Fatalf("Handle: a change %t, %v", c != nil, err)
				}
				if c == nil {
					continue
				}
				if _, err := repo.Tx(c); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkApplyOnABigStudy is State.Apply, in memory once stored, of one
// trial's measurement on the study of BenchmarkTrialEventOnABigStudy, and
// of the change back (so that each round starts from the same state): two
// Applies an op. Run:
//
//	go test ./internal/adapters -run '^$' -bench BenchmarkApplyOnABigStudy -benchmem
func BenchmarkApplyOnABigStudy(b *testing.B) {
	s := domain.NewState(realStudy(realTrials, realMeasurements, realParallel))
	c, err := s.Handle(studyStart.Add(30*time.Hour), trialEvents(realTrials, realMeasurements)[0].in)
	if err != nil || c == nil {
		b.Fatalf("Handle: a change %t, %v", c != nil, err)
	}
	back := &domain.Change{Root: c.Root, Before: c.After, After: c.Before, Trials: c.Trials}
	b.ReportAllocs()
	for b.Loop() {
		s.Apply(c)
		s.Apply(back)
	}
}

// TestTxWritesOnlyTheTrialsAnEventChanged: on a study of
// domain.MaxTrialCount trials, the transaction of one trial's event
// (a measurement, a requeue of its job, its end) writes that trial's
// record and no other's, and leaves Redis as comparing the whole study's
// records does (the same Change without Trials).
func TestTxWritesOnlyTheTrialsAnEventChanged(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 60*time.Second)
	_, rdb := testkit.Redis(t)
	fast, whole := NewRepo(store.New(rdb, "fast:")), NewRepo(store.New(rdb, "whole:"))
	const m = 20
	r := realStudy(realTrials, m, realParallel)
	for _, repo := range []*Repo{fast, whole} {
		apply(t, ctx, repo, &domain.Change{Root: study, After: r})
	}
	// Every trial's record is marked before each event: a record still
	// marked after it was not written.
	const unwritten = "unwritten"
	marks := make(map[string]any, realTrials)
	for k := 1; k <= realTrials; k++ {
		marks[strconv.Itoa(k)] = unwritten
	}
	s := domain.NewState(r)
	touched := strconv.Itoa(realTrials) // the active trial the events are about
	for _, ev := range trialEvents(realTrials, m) {
		c, err := s.Handle(studyStart.Add(30*time.Hour), ev.in)
		if err != nil {
			t.Fatal(err)
		}
		if c == nil {
			if ev.name != "nothing" {
				t.Fatalf("%s: no change", ev.name)
			}
			continue
		}
		if !slices.Equal(c.Trials, []string{touched}) {
			t.Fatalf("%s: the change names trials %v, want [%s]", ev.name, c.Trials, touched)
		}
		for _, p := range []string{"fast:", "whole:"} {
			rdb.HSet(ctx, p+KeyTrialsPrefix+study, marks)
		}
		apply(t, ctx, fast, c)
		all := *c
		all.Trials = nil
		apply(t, ctx, whole, &all)
		got := rdb.HGetAll(ctx, "fast:"+KeyTrialsPrefix+study).Val()
		if want := rdb.HGetAll(ctx, "whole:"+KeyTrialsPrefix+study).Val(); !maps.Equal(got, want) {
			t.Fatalf("%s: the trials written differ from a whole comparison's", ev.name)
		}
		for id, rec := range got {
			if written := rec != unwritten; written != (id == touched) {
				t.Errorf("%s: trial %s written %t", ev.name, id, written)
			}
		}
		if got, want := rdb.HGet(ctx, "fast:"+KeyRoots, study).Val(), rdb.HGet(ctx, "whole:"+KeyRoots, study).Val(); got != want {
			t.Fatalf("%s: the root record differs from a whole comparison's:\n%s\n%s", ev.name, got, want)
		}
		s.Apply(c)
	}
}
