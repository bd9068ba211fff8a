package app

import (
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/store"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/training/internal/adapters"
	"github.com/loom-ml/loom/services/training/internal/domain"
)

// A trial's metric records held until their run is named that never join
// its measurements leave a trace: each is counted in
// loom_training_trial_metrics_refused_total by why (every reason exported
// from 0), once the change that dropped it is stored, as is a record
// refused for the hold.
func TestHeldTrialMetricsDropsAreCounted(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 30*time.Second)
	_, rdb := testkit.Redis(t)
	a, err := New(ctx, adapters.NewRepo(store.New(rdb, "training:")), slog.Default(), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	if err := a.RegisterMetrics(reg); err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(reg, "loom_training_trial_metrics_refused_total"); err != nil || n != 1+len(domain.DropReasons) {
		t.Fatalf("loom_training_trial_metrics_refused_total exports %d reasons (%v), want rate and %v", n, err, domain.DropReasons)
	}
	handle := handler(t, ctx, a)
	n := oneTrial(t, ctx, a, "projects/p/locations/l/hyperparameterTuningJobs/10")
	report := func(attempt int32, host string, step int64) envelope.Event {
		t.Helper()
		ev := envelope.New(topics.StepEvents, n.Job(), "loom/agent", &eventsv1.MetricsReported{Job: n.Job(), Attempt: attempt, Node: host,
			Points: []*eventsv1.MetricsReported_Point{{Step: step, Values: map[string]float64{"val_loss": float64(step)}}}})
		ev.Signer = "nodes/" + n.EphemeralCluster() + "/nodes/" + host
		handle(ev)
		return ev
	}
	jobIs := func(st loomv1.JobState) envelope.Event {
		return envelope.New(topics.JobEvents, "projects/p", "loom/scheduler", &eventsv1.JobChanged{Job: &loomv1.Job{Name: n.Job(),
			JobId: strconv.FormatInt(n.ID, 10), State: st, Nodes: []string{"n-0001"}}, Attempt: 1})
	}
	count := func(reason string) float64 { return testutil.ToFloat64(a.tuningRefused.WithLabelValues(reason)) }

	// Read before the run's event: n-0001's join, n-0009's (2 records) are
	// dropped once the event names the run on n-0001; n-0008's of attempt
	// 3 when the job ends.
	report(1, "n-0001", 1)
	report(1, "n-0009", 1)
	report(1, "n-0009", 2)
	report(3, "n-0008", 5)
	running := jobIs(loomv1.JobState_RUNNING)
	handle(running)
	if got := count(domain.DroppedNotRun); got != 2 {
		t.Fatalf("%s = %v, want 2", domain.DroppedNotRun, got)
	}
	handle(running) // a redelivery counts nothing again
	handle(jobIs(loomv1.JobState_COMPLETED))
	if got := count(domain.DroppedJobEnded); got != 1 {
		t.Fatalf("%s = %v after the job ended, want 1", domain.DroppedJobEnded, got)
	}
	// A record for a run the job never named, after it ended: refused.
	handle(report(4, "n-0008", 6)) // and redelivered: counted once
	if got, nr := count(domain.DroppedJobEnded), count(domain.DroppedNotRun); got != 2 || nr != 2 {
		t.Fatalf("%s = %v, %s = %v after a refused record, want 2, 2", domain.DroppedJobEnded, got, domain.DroppedNotRun, nr)
	}
	// Refused at once, each under its own reason: a node the named run is
	// not on, a node of another cluster.
	handle(report(1, "n-0009", 3)) // and redelivered: counted once
	other := envelope.New(topics.StepEvents, n.Job(), "loom/agent", &eventsv1.MetricsReported{Job: n.Job(), Attempt: 5, Node: "n-0001",
		Points: []*eventsv1.MetricsReported_Point{{Step: 1, Values: map[string]float64{"val_loss": 1}}}})
	other.Signer = "nodes/projects/q/clusters/z/nodes/n-0001"
	handle(other)
	handle(other)
	if np, oc := count(domain.DroppedNotPlaced), count(domain.DroppedOtherCluster); np != 1 || oc != 1 {
		t.Fatalf("%s = %v, %s = %v, want 1, 1", domain.DroppedNotPlaced, np, domain.DroppedOtherCluster, oc)
	}
	if got := count("rate") + count(domain.DroppedEvicted) + count(domain.DroppedHeldFull); got != 0 {
		t.Fatalf("other reasons counted %v", got)
	}
}
