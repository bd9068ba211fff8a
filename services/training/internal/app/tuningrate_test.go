package app

import (
	"context"
	"log/slog"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/series"
	"github.com/loom-ml/loom/libs/store"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/training/internal/adapters"
	"github.com/loom-ml/loom/services/training/internal/domain"
)

const tun = "projects/p/locations/l/hyperparameterTuningJobs/9"

// A node's metric records for a trial are counted an hour, apart from the
// series' count: past the limit one is refused (counted, logged) and not
// merged into the trial's measurements; another node, and the series' own
// count, are not touched.
func TestTrialMetricsHaveANodeRate(t *testing.T) {
	t.Parallel()
	const limit = 3
	ctx, a, rdb, n := trialRunning(t, limit)
	handle := handler(t, ctx, a)

	var last envelope.Event
	report := func(host string, step int64) {
		t.Helper()
		ev := envelope.New(topics.StepEvents, n.Job(), "loom/agent", &eventsv1.MetricsReported{Job: n.Job(), Attempt: 1, Node: host,
			Points: []*eventsv1.MetricsReported_Point{{Step: step, Values: map[string]float64{"val_loss": float64(step)}}}})
		ev.Signer = "nodes/" + n.EphemeralCluster() + "/nodes/" + host
		handle(ev)
		last = ev
	}
	for step := int64(1); step <= limit+2; step++ {
		report("n-0001", step)
	}
	// Redelivered (a consumer that failed to commit): the refused record
	// is not counted again, as a refusal nor against the node's rate.
	handle(last)
	report("n-0002", 100)
	handle(last) // a merged record's redelivery neither
	tj, _ := a.GetTuningJob(tun)
	var steps []int64
	for _, m := range tj.GetTrials()[0].GetMeasurements() {
		steps = append(steps, m.GetStepCount())
	}
	if want := []int64{1, 2, 3, 100}; !slices.Equal(steps, want) {
		t.Fatalf("measurements of steps %v, want %v (n-0001's records past %d an hour refused)", steps, want, limit)
	}
	if got := testutil.ToFloat64(a.tuningRefused.WithLabelValues("rate")); got != 2 {
		t.Fatalf("loom_training_trial_metrics_refused_total = %v, want 2 (a redelivered refusal counted once)", got)
	}
	for host, want := range map[string]string{"n-0001": strconv.Itoa(limit + 2), "n-0002": "1"} {
		if got := nodeCount(t, rdb, host); got != want {
			t.Fatalf("%s's records counted against its rate: %s; want %s (redeliveries not counted)", host, got, want)
		}
	}
	// Its own key: the series' count of the node is untouched.
	if n, _ := rdb.Keys(ctx, "training:metrics:noderate:*").Result(); len(n) != 0 {
		t.Fatalf("the trial path counted in the series' keys %v", n)
	}
}

// nodeCount is host's count this hour on the trials' path ("" when none).
func nodeCount(t *testing.T, rdb *redis.Client, host string) string {
	t.Helper()
	keys, err := rdb.Keys(context.Background(), "training:tuning:metrics:noderate:*"+host).Result()
	if err != nil || len(keys) != 1 {
		t.Fatalf("%s's rate keys %v, %v", host, keys, err)
	}
	n, err := rdb.HGet(context.Background(), keys[0], "n").Result()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestRedeliveredTrialMetricsCountOnce: a trial's record that stores no
// inbox mark (it changes nothing: a resumed run reporting a step again with
// the value it had) is counted against its node's rate once, however
// often the bus delivers it (same topic, partition and offset), so that
// the node's next records are not refused for it.
func TestRedeliveredTrialMetricsCountOnce(t *testing.T) {
	t.Parallel()
	const limit = 3
	ctx, a, rdb, n := trialRunning(t, limit)
	record := func(offset, step int64) envelope.Event {
		ev := envelope.New(topics.StepEvents, n.Job(), "loom/agent", &eventsv1.MetricsReported{Job: n.Job(), Attempt: 1, Node: "n-0001",
			Points: []*eventsv1.MetricsReported_Point{{Step: step, Values: map[string]float64{"val_loss": float64(step)}}}})
		ev.Signer = "nodes/" + n.EphemeralCluster() + "/nodes/n-0001"
		ev.Partition, ev.Offset, ev.HighWaterMark = 3, offset, offset+1 // as consumed
		return ev
	}
	handle := handler(t, ctx, a)
	handle(record(40, 1))
	again := record(41, 1) // step 1 again, as it was: nothing changes
	for range 3 {          // delivered, then twice again
		handle(again)
	}
	if got := nodeCount(t, rdb, "n-0001"); got != "2" {
		t.Fatalf("two records, one delivered three times, counted %s against their node's rate, want 2", got)
	}
	handle(record(42, 2))
	tj, _ := a.GetTuningJob(tun)
	var steps []int64
	for _, m := range tj.GetTrials()[0].GetMeasurements() {
		steps = append(steps, m.GetStepCount())
	}
	if want := []int64{1, 2}; !slices.Equal(steps, want) {
		t.Fatalf("measurements of steps %v, want %v (the node's third record is within its rate of %d)", steps, want, limit)
	}
	if got := testutil.ToFloat64(a.tuningRefused.WithLabelValues("rate")); got != 0 {
		t.Fatalf("loom_training_trial_metrics_refused_total{reason=rate} = %v, want 0", got)
	}
}

// trialRunning is an app whose node rate for trials is limit, holding a
// tuning job of one trial whose job runs on n-0001 and n-0002: the app,
// its Redis and the trial's CustomJob's name.
func trialRunning(t *testing.T, limit int64) (context.Context, *App, *redis.Client, domain.Name) {
	t.Helper()
	ctx := testkit.Context(t, 30*time.Second)
	_, rdb := testkit.Redis(t)
	st := store.New(rdb, "training:")
	a, err := New(ctx, adapters.NewRepo(st), slog.Default(), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	a.LimitTuningWrites(series.NewStore(rdb, st.Key("tuning:"), series.Limits{NodeRate: limit}))
	n := oneTrial(t, ctx, a, tun)
	handler(t, ctx, a)(envelope.New(topics.JobEvents, "projects/p", "loom/scheduler", &eventsv1.JobChanged{Job: &loomv1.Job{Name: n.Job(),
		JobId: strconv.FormatInt(n.ID, 10), State: loomv1.JobState_RUNNING, Nodes: []string{"n-0001", "n-0002"}}, Attempt: 1}))
	return ctx, a, rdb, n
}

// handler is a.Handle of an event in ctx, failing t on an error: what the
// bus's consumer would do with it.
func handler(t *testing.T, ctx context.Context, a *App) func(envelope.Event) {
	return func(ev envelope.Event) {
		t.Helper()
		if err := a.Handle(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
}

// oneTrial creates, in a, the tuning job tun of one trial (val_loss to
// minimise, lr of 1 or 2), whose cluster then runs: the trial's CustomJob's
// name. Its job is not yet placed.
func oneTrial(t *testing.T, ctx context.Context, a *App, tun string) domain.Name {
	t.Helper()
	handle := handler(t, ctx, a)
	create := envelope.New(topics.TrainingCommands, "projects/p", "loom/gateway", &eventsv1.CreateHyperparameterTuningJob{TuningJob: &trainingv1.HyperparameterTuningJob{
		Name: tun, DisplayName: "tune", User: "alice", MaxTrialCount: 1, ParallelTrialCount: 1,
		StudySpec: &trainingv1.StudySpec{
			Metrics: []*trainingv1.StudySpec_MetricSpec{{MetricId: "val_loss", Goal: trainingv1.StudySpec_MetricSpec_MINIMIZE}},
			Parameters: []*trainingv1.StudySpec_ParameterSpec{{ParameterId: "lr",
				ParameterValueSpec: &trainingv1.StudySpec_ParameterSpec_DiscreteValueSpec_{DiscreteValueSpec: &trainingv1.StudySpec_ParameterSpec_DiscreteValueSpec{Values: []float64{1, 2}}}}}},
		TrialJobSpec: &trainingv1.CustomJobSpec{WorkerPoolSpecs: []*trainingv1.WorkerPoolSpec{{
			MachineSpec: &trainingv1.MachineSpec{MachineType: "n2-standard-4"}, ReplicaCount: 1,
			Task: &trainingv1.WorkerPoolSpec_ContainerSpec{ContainerSpec: &trainingv1.ContainerSpec{Command: []string{"true"}}}}}}}})
	create.Principal = "users/alice"
	handle(create)
	tj, err := a.GetTuningJob(tun)
	if err != nil || len(tj.GetTrials()) != 1 {
		t.Fatalf("tuning job %v (%v)", tj, err)
	}
	n, err := domain.ParseName(tj.GetTrials()[0].GetCustomJob(), domain.CustomJobs)
	if err != nil {
		t.Fatal(err)
	}
	handle(envelope.New(topics.ClusterEvents, n.EphemeralCluster(), "loom/provisioner", &eventsv1.ClusterChanged{
		Cluster: &loomv1.Cluster{Name: n.EphemeralCluster(), Status: &loomv1.ClusterStatus{State: loomv1.Cluster_RUNNING}}}))
	return n
}
