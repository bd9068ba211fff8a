package sim

import (
	"math"
	"testing"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

func TestMeasure(t *testing.T) {
	t.Parallel()
	done := loomv1.JobState_COMPLETED
	jobs := []JobResult{
		// Account a: waits 0 and 10, runs 100 and 5 (5 < τ counts as 10).
		{ID: 1, Account: "a", Slots: 2, Submit: 0, Start: 0, LastStart: 0, End: 100, State: done},
		{ID: 2, Account: "a", Slots: 1, Submit: 0, Start: 10, LastStart: 10, End: 15, State: done},
		// Account b: waits 30, runs 30, once requeued: first start 30, last 40.
		{ID: 3, Account: "b", Slots: 1, Submit: 0, Start: 30, LastStart: 40, End: 70, State: loomv1.JobState_TIMEOUT, Requeues: 1},
		// Not counted in waits: cancelled, and never started.
		{ID: 4, Account: "c", Slots: 1, Submit: 5, Start: -1, LastStart: -1, End: 20, State: loomv1.JobState_CANCELLED},
		{ID: 5, Account: "c", Slots: 1, Submit: 5, Start: -1, LastStart: -1, End: -1, State: loomv1.JobState_PENDING},
	}
	m := Measure(jobs, 250, 4)
	if m.Jobs != 5 || m.Finished != 3 || m.TimedOut != 1 || m.Cancelled != 1 || m.Unfinished != 1 || m.Requeues != 1 {
		t.Fatalf("counts %+v", m)
	}
	if m.Makespan != 100 || m.Utilisation != 250.0/400 {
		t.Errorf("makespan %v, utilisation %v; want 100, 0.625", m.Makespan, m.Utilisation)
	}
	if m.MeanWait != 40.0/3 || m.P95Wait != 30 || m.MeanJCT != (100+15+70)/3.0 {
		t.Errorf("waits %v/%v, JCT %v", m.MeanWait, m.P95Wait, m.MeanJCT)
	}
	// Slowdowns: 1 (100/100), 1.5 (15/max(5,10)), 70/30 (run 30 since the last start).
	a, b := (1+1.5)/2, 70.0/30
	if want := (1 + 1.5 + 70.0/30) / 3; math.Abs(m.MeanBSLD-want) > 1e-12 {
		t.Errorf("mean slowdown %v, want %v", m.MeanBSLD, want)
	}
	if want := (a + b) * (a + b) / (2 * (a*a + b*b)); math.Abs(m.Fairness-want) > 1e-12 || m.Accounts != 2 {
		t.Errorf("fairness %v over %d accounts, want %v over 2", m.Fairness, m.Accounts, want)
	}
	if m.WorstAccount != "b" || math.Abs(m.WorstBSLD-b) > 1e-12 {
		t.Errorf("worst %q %v", m.WorstAccount, m.WorstBSLD)
	}
	if empty := Measure(nil, 0, 4); empty != (Metrics{}) {
		t.Errorf("no jobs: %+v", empty)
	}
}

func TestPercentileJainSlowdown(t *testing.T) {
	t.Parallel()
	xs := []float64{5, 1, 4, 2, 3, 6, 7, 8, 9, 10}
	for _, c := range []struct{ p, want float64 }{{0.5, 5}, {0.95, 10}, {0.9, 9}, {0.1, 1}, {1, 10}} {
		if got := Percentile(append([]float64(nil), xs...), c.p); got != c.want {
			t.Errorf("p%v = %v, want %v", c.p, got, c.want)
		}
	}
	if Percentile(nil, 0.95) != 0 {
		t.Error("percentile of nothing is not 0")
	}
	if j := Jain([]float64{2, 2, 2}); j != 1 {
		t.Errorf("Jain of equals %v", j)
	}
	if j := Jain([]float64{1, 0, 0, 0}); j != 0.25 {
		t.Errorf("Jain of one of four %v, want 0.25", j)
	}
	if Jain(nil) != 1 {
		t.Error("Jain of nothing is not 1")
	}
	for _, c := range []struct{ jct, run, want float64 }{{100, 100, 1}, {15, 5, 1.5}, {5, 5, 1}, {300, 100, 3}} {
		if got := BoundedSlowdown(c.jct, c.run); got != c.want {
			t.Errorf("BoundedSlowdown(%v, %v) = %v, want %v", c.jct, c.run, got, c.want)
		}
	}
}
