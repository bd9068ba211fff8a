package ports

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/loom-ml/loom/libs/store"
	"github.com/loom-ml/loom/libs/testkit"
	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
	"github.com/loom-ml/loom/services/training/internal/adapters"
	"github.com/loom-ml/loom/services/training/internal/app"
	"github.com/loom-ml/loom/services/training/internal/domain"
)

// TestBigStudyGetFitsAnAnswer: a study of 200 trials that reported 1,000
// steps each (about 6 MB encoded) is answered within MaxTuningJobAnswer,
// which gRPC's default 4 MiB receive limit (the gateway's, the CLI's)
// takes: every trial with its final measurement and its first and last
// intermediate ones, the rest thinned evenly, measurements_thinned saying
// so (a study that passes even then is answered with trials left out:
// trainingspec's TestBoundTuningJobAnswer). Before, the gateway got
// ResourceExhausted ("received message larger than max"), and the study
// could not be read, cancelled or deleted (both read it first).
func TestBigStudyGetFitsAnAnswer(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 30*time.Second)
	const name = loc + "/hyperparameterTuningJobs/900"
	job := &trainingv1.HyperparameterTuningJob{Name: name, DisplayName: "big", User: "alice",
		State: trainingv1.JobState_JOB_STATE_RUNNING, MaxTrialCount: 200, ParallelTrialCount: 4, TrialJobSpec: trialSpec(),
		StudySpec: &trainingv1.StudySpec{Metrics: []*trainingv1.StudySpec_MetricSpec{{MetricId: "val_loss", Goal: trainingv1.StudySpec_MetricSpec_MINIMIZE}}}}
	const steps = 1000
	for i := 1; i <= 200; i++ {
		tr := &trainingv1.Trial{Id: strconv.Itoa(i), Name: name + "/trials/" + strconv.Itoa(i), State: trainingv1.Trial_SUCCEEDED}
		for s := int64(1); s <= steps; s++ {
			tr.Measurements = append(tr.Measurements, &trainingv1.Measurement{StepCount: s, ElapsedDuration: durationpb.New(time.Duration(s) * time.Second),
				Metrics: []*trainingv1.Measurement_Metric{{MetricId: "val_loss", Value: 1 / float64(s)}}})
		}
		tr.FinalMeasurement = tr.Measurements[steps-1]
		job.Trials = append(job.Trials, tr)
	}
	a := appWithStudy(ctx, t, job)
	got, err := NewServer(a).GetHyperparameterTuningJob(ctx, &trainingv1.GetHyperparameterTuningJobRequest{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	if n := proto.Size(got); n > MaxTuningJobAnswer || MaxTuningJobAnswer >= 4<<20 {
		t.Fatalf("answer of %d bytes, limit %d (gRPC's default receive limit is %d)", n, MaxTuningJobAnswer, 4<<20)
	}
	if len(got.GetTrials()) != 200 || len(got.GetOmittedTrials()) != 0 || !got.GetMeasurementsThinned() {
		t.Fatalf("%d trials answered, %d left out, thinned %v; want 200, none, thinned said", len(got.GetTrials()), len(got.GetOmittedTrials()), got.GetMeasurementsThinned())
	}
	for _, tr := range got.GetTrials() {
		ms := tr.GetMeasurements()
		if len(ms) < 100 || ms[0].GetStepCount() != 1 || ms[len(ms)-1].GetStepCount() != steps || tr.GetFinalMeasurement().GetStepCount() != steps {
			t.Fatalf("trial %s: %d measurements (steps %d..%d), final at %d", tr.GetId(), len(ms), ms[0].GetStepCount(), ms[len(ms)-1].GetStepCount(), tr.GetFinalMeasurement().GetStepCount())
		}
	}
	// The stored study keeps every measurement.
	if full, _ := a.GetTuningJob(name); len(full.GetTrials()[0].GetMeasurements()) != steps {
		t.Fatalf("the study lost measurements: %d", len(full.GetTrials()[0].GetMeasurements()))
	}
}

// TestBigStudyListFitsAnAnswer: a list of a project's studies answers
// each one bounded as Get does (list items carry no measurements, but their
// trials' parameters can be large), so that one huge study does not make
// the whole list ResourceExhausted for everyone in the project.
func TestBigStudyListFitsAnAnswer(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 30*time.Second)
	const name = loc + "/hyperparameterTuningJobs/901"
	job := &trainingv1.HyperparameterTuningJob{Name: name, DisplayName: "wide", User: "alice",
		State: trainingv1.JobState_JOB_STATE_RUNNING, MaxTrialCount: 400, ParallelTrialCount: 4, TrialJobSpec: trialSpec(),
		StudySpec: &trainingv1.StudySpec{Metrics: []*trainingv1.StudySpec_MetricSpec{{MetricId: "val_loss", Goal: trainingv1.StudySpec_MetricSpec_MINIMIZE}}}}
	value := strings.Repeat("v", 1024)
	for i := 1; i <= 400; i++ {
		tr := &trainingv1.Trial{Id: strconv.Itoa(i), Name: name + "/trials/" + strconv.Itoa(i), State: trainingv1.Trial_SUCCEEDED}
		for p := 0; p < 16; p++ {
			tr.Parameters = append(tr.Parameters, &trainingv1.Trial_Parameter{ParameterId: "p" + strconv.Itoa(p), Value: structpb.NewStringValue(value)})
		}
		job.Trials = append(job.Trials, tr)
	}
	a := appWithStudy(ctx, t, job)
	got, err := NewServer(a).ListHyperparameterTuningJobs(ctx, &trainingv1.ListHyperparameterTuningJobsRequest{Parent: loc})
	if err != nil {
		t.Fatal(err)
	}
	if n := proto.Size(got); n > MaxTuningJobAnswer || len(got.GetHyperparameterTuningJobs()) != 1 {
		t.Fatalf("list answer of %d bytes with %d studies, want one study within %d", n, len(got.GetHyperparameterTuningJobs()), MaxTuningJobAnswer)
	}
	if j := got.GetHyperparameterTuningJobs()[0]; len(j.GetOmittedTrials()) == 0 || j.GetUser() != "alice" {
		t.Fatalf("the listed study does not say what it left out, or lost its owner: omitted %d, user %q", len(j.GetOmittedTrials()), j.GetUser())
	}
}

// appWithStudy is an app loaded from a real Redis holding job, stored as
// the training service stores a study (its record and its trials'), as
// after a restart.
func appWithStudy(ctx context.Context, t *testing.T, job *trainingv1.HyperparameterTuningJob) *app.App {
	t.Helper()
	_, rdb := testkit.Redis(t)
	name := job.GetName()
	root := &domain.Root{Name: name, Tuning: &domain.Tuning{Job: job}}
	b, err := adapters.Encode(root)
	if err != nil {
		t.Fatal(err)
	}
	trials, err := adapters.EncodeTrials(root)
	if err != nil {
		t.Fatal(err)
	}
	if err := rdb.HSet(ctx, "training:"+adapters.KeyRoots, name, b).Err(); err != nil {
		t.Fatal(err)
	}
	for id, b := range trials {
		if err := rdb.HSet(ctx, "training:"+adapters.KeyTrialsPrefix+name, id, b).Err(); err != nil {
			t.Fatal(err)
		}
	}
	a, err := app.New(ctx, adapters.NewRepo(store.New(rdb, "training:")), slog.Default(), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
