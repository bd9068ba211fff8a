package domain

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

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

// insertOneByOne is how a record's points were added before addPoints:
// each inserted (or merged) at its place in turn. addPoints must give the
// same measurements.
func insertOneByOne(ms []*trainingv1.Measurement, points []*eventsv1.MetricsReported_Point, start *timestamppb.Timestamp,
	studyMetrics []string) []*trainingv1.Measurement {
	ms = append([]*trainingv1.Measurement(nil), ms...)
	for _, p := range points {
		m := &trainingv1.Measurement{StepCount: p.GetStep()}
		for _, k := range keptMetrics(p.GetValues(), studyMetrics) {
			m.Metrics = append(m.Metrics, &trainingv1.Measurement_Metric{MetricId: k, Value: p.GetValues()[k]})
		}
		if p.GetTime() != nil && start != nil {
			if d := p.GetTime().AsTime().Sub(start.AsTime()); d > 0 {
				m.ElapsedDuration = durationpb.New(d)
			}
		}
		i := sort.Search(len(ms), func(i int) bool { return ms[i].GetStepCount() >= m.GetStepCount() })
		if i < len(ms) && ms[i].GetStepCount() == m.GetStepCount() {
			ms[i] = mergeMeasurement(ms[i], m, studyMetrics)
		} else {
			ms = append(ms, nil)
			copy(ms[i+1:], ms[i:])
			ms[i] = m
		}
	}
	return ms
}

// randomPoints are n points of steps in 0..steps (repeats and any order),
// each with one to three of a few metrics, some with a time.
func randomPoints(r *rand.Rand, n, steps int, start time.Time) []*eventsv1.MetricsReported_Point {
	names := []string{"val_loss", "acc", "lr", "z"}
	pts := make([]*eventsv1.MetricsReported_Point, n)
	for i := range pts {
		p := &eventsv1.MetricsReported_Point{Step: int64(r.IntN(steps + 1)), Values: map[string]float64{}}
		for range 1 + r.IntN(3) {
			p.Values[names[r.IntN(len(names))]] = float64(r.IntN(100))
		}
		if r.IntN(3) > 0 {
			p.Time = timestamppb.New(start.Add(time.Duration(r.IntN(7200)-60) * time.Second))
		}
		pts[i] = p
	}
	return pts
}

// TestAddPointsAsOneByOne: adding a record's points by a sorted merge
// gives what inserting them one by one gave, on random records (steps
// repeated within a record and across records, any order, measurements
// already there), thinned or not.
func TestAddPointsAsOneByOne(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	start := t0
	for trial := 0; trial < 100; trial++ {
		var want, got []*trainingv1.Measurement
		steps := 1 + r.IntN(3*MaxMeasurements)
		for rec := 0; rec < 1+r.IntN(4); rec++ {
			pts := randomPoints(r, r.IntN(2*MaxMeasurements), steps, start)
			if r.IntN(4) == 0 {
				slices.SortFunc(pts, func(a, b *eventsv1.MetricsReported_Point) int { return cmp.Compare(b.GetStep(), a.GetStep()) })
			}
			study := []string{"val_loss"}
			want = insertOneByOne(want, pts, timestamppb.New(start), study)
			got = addPoints(got, pts, timestamppb.New(start), study)
			if !measurementsEqual(got, want) {
				t.Fatalf("trial %d record %d: addPoints differs from inserting one by one", trial, rec)
			}
			if len(want) > MaxMeasurements {
				want = thinMeasurements(want, nil)
				got = thinMeasurements(got, nil)
				if !measurementsEqual(got, want) {
					t.Fatalf("trial %d record %d: thinned, addPoints differs from inserting one by one", trial, rec)
				}
			}
		}
	}
}

func measurementsEqual(a, b []*trainingv1.Measurement) bool {
	return slices.EqualFunc(a, b, func(x, y *trainingv1.Measurement) bool { return proto.Equal(x, y) })
}

// BenchmarkMetricsDescending: one record of 60,000 points in descending
// step order into a trial.
func BenchmarkMetricsDescending(b *testing.B) {
	pts := make([]*eventsv1.MetricsReported_Point, 60000)
	for i := range pts {
		pts[i] = &eventsv1.MetricsReported_Point{Step: int64(len(pts) - i), Values: map[string]float64{"val_loss": float64(i)}}
	}
	for b.Loop() {
		thinMeasurements(addPoints(nil, pts, nil, []string{"val_loss"}), nil)
	}
}
