package trainingspec

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
)

// hugeStudy is a study at the bounds: MaxTrialCount trials, each with
// MaxParameters categorical values of MaxCategoricalValueBytes and a final
// measurement (about 70 MB encoded); trial 3 is the best and trials
// 500..504 are ACTIVE.
func hugeStudy() *trainingv1.HyperparameterTuningJob {
	j := &trainingv1.HyperparameterTuningJob{Name: "projects/p/locations/l/hyperparameterTuningJobs/7", User: "alice",
		State: trainingv1.JobState_JOB_STATE_RUNNING, MaxTrialCount: MaxTrialCount, BestTrial: "3"}
	value := strings.Repeat("v", MaxCategoricalValueBytes)
	for i := 1; i <= MaxTrialCount; i++ {
		tr := &trainingv1.Trial{Id: strconv.Itoa(i), State: trainingv1.Trial_SUCCEEDED,
			FinalMeasurement: &trainingv1.Measurement{StepCount: 10, Metrics: []*trainingv1.Measurement_Metric{{MetricId: "loss", Value: float64(i)}}},
			Measurements:     []*trainingv1.Measurement{{StepCount: 1}, {StepCount: 10}}}
		if i >= 500 && i < 505 {
			tr.State = trainingv1.Trial_ACTIVE
		}
		for p := range MaxParameters {
			tr.Parameters = append(tr.Parameters, &trainingv1.Trial_Parameter{ParameterId: "p" + strconv.Itoa(p), Value: structpb.NewStringValue(value)})
		}
		j.Trials = append(j.Trials, tr)
	}
	return j
}

// TestBoundTuningJobAnswer: a study whose trials' parameters alone pass
// any answer (MaxTrialCount × MaxParameters × MaxCategoricalValueBytes) is
// answered within the bound: its own fields (owner, state) whole, its
// measurements thinned and the trials that do not fit left out, each said
// (measurements_thinned, omitted_trials): the best and the unfinished
// trials kept first, then the newest, in id order. A study that fits is
// answered as it is, saying nothing left out.
func TestBoundTuningJobAnswer(t *testing.T) {
	t.Parallel()
	j := hugeStudy()
	BoundTuningJobAnswer(j, MaxTuningJobAnswer)
	if n := proto.Size(j); n > MaxTuningJobAnswer {
		t.Fatalf("answer of %d bytes, past the bound of %d", n, MaxTuningJobAnswer)
	}
	if j.GetUser() != "alice" || j.GetState() != trainingv1.JobState_JOB_STATE_RUNNING || j.GetBestTrial() != "3" || !j.GetMeasurementsThinned() {
		t.Fatalf("user %q state %s best %q thinned %v", j.GetUser(), j.GetState(), j.GetBestTrial(), j.GetMeasurementsThinned())
	}
	var kept []string
	for _, tr := range j.GetTrials() {
		kept = append(kept, tr.GetId())
		if len(tr.GetMeasurements()) != 0 || tr.GetFinalMeasurement().GetStepCount() != 10 || len(tr.GetParameters()) != MaxParameters {
			t.Fatalf("trial %s kept with %d measurements, final %v, %d parameters", tr.GetId(), len(tr.GetMeasurements()), tr.GetFinalMeasurement(), len(tr.GetParameters()))
		}
	}
	omitted := j.GetOmittedTrials()
	if len(kept) < 30 || len(kept)+len(omitted) != MaxTrialCount || len(omitted) == 0 {
		t.Fatalf("%d trials kept, %d left out, of %d", len(kept), len(omitted), MaxTrialCount)
	}
	for _, id := range []string{"3", "500", "504", "1000", strconv.Itoa(MaxTrialCount - len(kept) + 7)} {
		if !slices.Contains(kept, id) {
			t.Errorf("trial %s left out; kept %v", id, kept)
		}
	}
	for _, id := range []string{"1", "2", "4", "499"} {
		if !slices.Contains(omitted, id) {
			t.Errorf("trial %s not listed as left out", id)
		}
	}
	byID := func(a, b string) int { x, _ := strconv.Atoi(a); y, _ := strconv.Atoi(b); return x - y }
	if !slices.IsSortedFunc(kept, byID) || !slices.IsSortedFunc(omitted, byID) {
		t.Fatalf("kept %v, omitted %v: not in id order", kept, omitted)
	}

	small := hugeStudy()
	small.Trials = small.Trials[:2]
	want := proto.Clone(small)
	BoundTuningJobAnswer(small, MaxTuningJobAnswer)
	if !proto.Equal(small, want) {
		t.Fatal("a study that fits was changed")
	}
}
