package domain

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// TestMeasurementsBounded: a trial that reports far more steps than
// MaxMeasurements keeps at most that many, spanning the first step to the
// last, in step order; with BEST selection the best one stays too.
func TestMeasurementsBounded(t *testing.T) {
	t.Parallel()
	s := NewState()
	create := tuningJob(tunName, 2, 1, 0)
	create.TuningJob.StudySpec.MeasurementSelectionType = trainingv1.StudySpec_BEST_MEASUREMENT
	feed(t, s, create)
	tr := tuningOf(t, s, tunName).GetTrials()[0]
	n, err := ParseName(tr.GetCustomJob(), CustomJobs)
	if err != nil {
		t.Fatal(err)
	}
	feed(t, s, clusterIs(n.EphemeralCluster(), loomv1.Cluster_RUNNING))
	feed(t, s, jobIs(n.Job(), loomv1.JobState_RUNNING))
	const steps = 2500
	for from := int64(1); from <= steps; from += 250 {
		var pts []*eventsv1.MetricsReported_Point
		for st := from; st < from+250; st++ {
			v := 10 - float64(st)/1000
			if st == 2 {
				v = -100 // the best, at a step thinning drops
			}
			pts = append(pts, &eventsv1.MetricsReported_Point{Step: st, Values: map[string]float64{"val_loss": v}})
		}
		feed(t, s, &eventsv1.MetricsReported{Job: n.Job(), Node: "n-0001", Points: pts})
	}
	ms := tuningOf(t, s, tunName).GetTrials()[0].GetMeasurements()
	if len(ms) > MaxMeasurements || len(ms) < MaxMeasurements/2 {
		t.Fatalf("%d measurements kept, want between %d and %d", len(ms), MaxMeasurements/2, MaxMeasurements)
	}
	if ms[0].GetStepCount() != 1 || ms[len(ms)-1].GetStepCount() != steps {
		t.Errorf("kept steps %d..%d, want 1..%d", ms[0].GetStepCount(), ms[len(ms)-1].GetStepCount(), steps)
	}
	if ms[1].GetStepCount() != 2 {
		t.Errorf("the best measurement (step 2) was dropped; kept steps %d, %d, ...", ms[0].GetStepCount(), ms[1].GetStepCount())
	}
	for i := 1; i < len(ms); i++ {
		if ms[i].GetStepCount() <= ms[i-1].GetStepCount() {
			t.Fatalf("measurements out of order at %d: %d after %d", i, ms[i].GetStepCount(), ms[i-1].GetStepCount())
		}
	}
}

// TestMeasurementMetricsBounded: a node that runs a trial (broken, or
// hostile: the agent's own limits are its to skip) cannot grow the trial's
// measurements without bound by naming ever new metrics at one step; a
// measurement keeps the study's metric whatever else came, at most
// MaxMeasurementMetrics metrics, and no metric id past MaxMetricIDBytes.
func TestMeasurementMetricsBounded(t *testing.T) {
	t.Parallel()
	s := NewState()
	feed(t, s, tuningJob(tunName, 2, 1, 0))
	tr := tuningOf(t, s, tunName).GetTrials()[0]
	n, err := ParseName(tr.GetCustomJob(), CustomJobs)
	if err != nil {
		t.Fatal(err)
	}
	feed(t, s, clusterIs(n.EphemeralCluster(), loomv1.Cluster_RUNNING))
	feed(t, s, jobIs(n.Job(), loomv1.JobState_RUNNING))
	signer := "nodes/" + n.EphemeralCluster() + "/nodes/n-0001"
	metric := study().GetMetrics()[0].GetMetricId()
	for rec := 0; rec < 20; rec++ {
		vals := map[string]float64{strings.Repeat("x", 4096) + strconv.Itoa(rec): 1}
		for i := 0; i < 500; i++ {
			vals[fmt.Sprintf("m%02d-%04d", rec, i)] = float64(i)
		}
		if rec == 19 {
			vals[metric] = 0.5 // the study's metric, after all the others
		}
		step(t, s, t0, Input{Signer: signer, Payload: &eventsv1.MetricsReported{Job: n.Job(), Node: "n-0001",
			Points: []*eventsv1.MetricsReported_Point{{Step: 1, Values: vals}}}})
	}
	ms := tuningOf(t, s, tunName).GetTrials()[0].GetMeasurements()
	if len(ms) != 1 {
		t.Fatalf("%d measurements, want 1 (one step)", len(ms))
	}
	got := ms[0].GetMetrics()
	if len(got) > MaxMeasurementMetrics {
		t.Errorf("the measurement keeps %d metrics, over the limit of %d", len(got), MaxMeasurementMetrics)
	}
	kept := false
	for _, m := range got {
		if len(m.GetMetricId()) > MaxMetricIDBytes {
			t.Errorf("a metric id of %d bytes kept, over the limit of %d", len(m.GetMetricId()), MaxMetricIDBytes)
		}
		kept = kept || (m.GetMetricId() == metric && m.GetValue() == 0.5)
	}
	if !kept {
		t.Errorf("the study's metric %s was crowded out of the measurement", metric)
	}
}
