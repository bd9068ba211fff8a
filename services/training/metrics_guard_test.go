package training

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/config"
	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/series"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

const (
	gCluster = "projects/p/clusters/c"
	gJob     = "projects/p/jobs/21"
)

// syncBuf is a log sink tests read while the handler writes.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// guardFixture is the metrics consumer on real Redis with a settable clock.
type guardFixture struct {
	t   *testing.T
	st  *series.Store
	in  *ingest
	log *syncBuf
	now time.Time
	off int64
}

func newGuardFixture(t *testing.T, lim series.Limits) *guardFixture {
	t.Helper()
	_, rdb := testkit.Redis(t)
	f := &guardFixture{t: t, st: series.NewStore(rdb, "training:", lim), log: &syncBuf{}, now: time.Unix(1800000000, 0)}
	f.in = newIngest(f.st, slog.New(slog.NewTextHandler(f.log, nil)), func() time.Time { return f.now })
	return f
}

// report has host write one point of metric for job's attempt, signed as
// the node (the bus verified the signer and that it is the payload's node),
// as a record consumed at the fixture's next offset.
func (f *guardFixture) report(job string, attempt int32, host, metric string) {
	f.t.Helper()
	f.off++
	node := gCluster + "/nodes/" + host
	ev := envelope.Event{Topic: topics.StepEvents, Partition: 1, Offset: f.off, HighWaterMark: f.off + 1, Signer: "nodes/" + node,
		Payload: &eventsv1.MetricsReported{Job: job, Attempt: attempt, Node: node, Cluster: gCluster,
			Points: []*eventsv1.MetricsReported_Point{{Step: f.off, Values: map[string]float64{metric: 1}}}}}
	if err := f.in.handle(context.Background(), ev); err != nil {
		f.t.Fatal(err)
	}
}

// redeliver delivers the last record report sent again, as the bus does
// after a consumer failed to commit it: same topic, partition and offset.
func (f *guardFixture) redeliver(job string, attempt int32, host, metric string) {
	f.t.Helper()
	f.off--
	f.report(job, attempt, host, metric)
}

// placed delivers the scheduler's JobChanged: job's attempt on hosts, in
// state s (ended at end when s is an end state).
func (f *guardFixture) placed(job string, attempt int32, s loomv1.JobState, end time.Time, hosts ...string) {
	f.t.Helper()
	j := &loomv1.Job{Name: job, Cluster: gCluster, State: s, Nodes: hosts,
		Runs: []*loomv1.JobRun{{Attempt: attempt, State: s, Nodes: hosts}}}
	if !end.IsZero() {
		j.EndTime, j.Runs[0].EndTime = timestamppb.New(end), timestamppb.New(end)
	}
	ev := envelope.Event{Topic: topics.JobEvents, Time: f.now, Signer: "services/scheduler",
		Payload: &eventsv1.JobChanged{Job: j, Attempt: attempt}}
	if err := f.in.handle(context.Background(), ev); err != nil {
		f.t.Fatal(err)
	}
}

func (f *guardFixture) has(job, metric string) int64 {
	f.t.Helper()
	l, err := f.st.List(context.Background(), job)
	if err != nil {
		f.t.Fatal(err)
	}
	for _, s := range l {
		if s.Metric == metric {
			return s.Count
		}
	}
	return 0
}

func (f *guardFixture) refused(reason string) float64 {
	return testutil.ToFloat64(f.in.refused.WithLabelValues(reason))
}

// TestNodeMetricsOnlyFromTheRunsNodes: a node writing metrics for a run
// placed on another node is refused (counted not-placed and logged); the
// run's own node is stored; a write that arrives before the scheduler's
// placement is held and applied once the placement arrives, and one of
// another node held the same way is refused then.
func TestNodeMetricsOnlyFromTheRunsNodes(t *testing.T) {
	t.Parallel()
	f := newGuardFixture(t, series.Limits{})
	// Before the placement: both held, nothing stored yet.
	f.report(gJob, 1, "gpu-1", "early")
	f.report(gJob, 1, "gpu-9", "intruder_early")
	if f.has(gJob, "early") != 0 {
		t.Fatal("a write was stored before the run's placement was known")
	}
	f.placed(gJob, 1, loomv1.JobState_RUNNING, time.Time{}, "gpu-1", "gpu-2")
	if f.has(gJob, "early") != 1 {
		t.Error("the held write of the run's node was not applied when the placement arrived")
	}
	if f.has(gJob, "intruder_early") != 0 {
		t.Error("the held write of another node was applied")
	}
	// After the placement.
	f.report(gJob, 1, "gpu-2", "loss")
	f.report(gJob, 1, "gpu-9", "intruder")
	if f.has(gJob, "loss") != 1 {
		t.Error("the run's node's write was not stored")
	}
	if f.has(gJob, "intruder") != 0 {
		t.Error("another node's write was stored")
	}
	// A node of another job's run may not write this one's.
	f.placed("projects/p/jobs/22", 1, loomv1.JobState_RUNNING, time.Time{}, "gpu-9")
	f.report(gJob, 1, "gpu-9", "intruder2")
	if f.has(gJob, "intruder2") != 0 {
		t.Error("a node running another job wrote this job's metrics")
	}
	if got := f.refused(series.ReasonNotPlaced); got != 3 {
		t.Errorf("refused{not-placed} = %v, want 3", got)
	}
	if n := strings.Count(f.log.String(), "reason=not-placed"); n != 3 {
		t.Errorf("%d refusals logged, want 3:\n%s", n, f.log)
	}
	// A requeued run on another node: the old node's writes for the new
	// attempt are refused, the new node's taken.
	f.placed(gJob, 2, loomv1.JobState_RUNNING, time.Time{}, "gpu-3")
	f.report(gJob, 2, "gpu-1", "stale")
	f.report(gJob, 2, "gpu-3", "fresh")
	if f.has(gJob, "stale") != 0 || f.has(gJob, "fresh") != 1 {
		t.Error("attempt 2: want only its own node's write stored")
	}
}

// TestRedeliveredRefusalCountsOnce: a record refused and then delivered
// again (a consumer that failed to commit it, a restart) is decided again
// and refused again, but counted and logged once: a refusal at admission
// (not-placed, rate), and a held record (held once, whatever its
// deliveries) refused when the placement comes.
func TestRedeliveredRefusalCountsOnce(t *testing.T) {
	t.Parallel()
	f := newGuardFixture(t, series.Limits{NodeRate: 2})
	f.now = f.now.Truncate(time.Hour)
	// Held before the placement, twice (the record redelivered), then
	// refused: its node is not the run's.
	f.report(gJob, 1, "gpu-9", "held_intruder")
	f.redeliver(gJob, 1, "gpu-9", "held_intruder")
	f.placed(gJob, 1, loomv1.JobState_RUNNING, time.Time{}, "gpu-1")
	if got := f.refused(series.ReasonNotPlaced); got != 1 {
		t.Errorf("refused{not-placed} after a held record's two copies were refused = %v, want 1", got)
	}
	f.report(gJob, 1, "gpu-8", "intruder")
	f.redeliver(gJob, 1, "gpu-8", "intruder")
	if got := f.refused(series.ReasonNotPlaced); got != 2 {
		t.Errorf("refused{not-placed} after a refused record came twice = %v, want 2", got)
	}
	f.report(gJob, 1, "gpu-1", "loss")
	f.report(gJob, 1, "gpu-1", "loss")
	f.report(gJob, 1, "gpu-1", "loss") // over the node's rate
	f.redeliver(gJob, 1, "gpu-1", "loss")
	if got := f.refused(series.ReasonRate); got != 1 {
		t.Errorf("refused{rate} after a refused record came twice = %v, want 1", got)
	}
	if n := strings.Count(f.log.String(), "metrics refused"); n != 3 {
		t.Errorf("%d refusals logged, want 3 (one per record):\n%s", n, f.log)
	}
	// Another record is counted: the mark is the record's, not the node's
	// nor the reason's.
	f.report(gJob, 1, "gpu-7", "intruder")
	if got := f.refused(series.ReasonNotPlaced); got != 3 {
		t.Errorf("refused{not-placed} after another record = %v, want 3", got)
	}
}

// TestMetricsHeldBounds: a job whose placement is unknown holds at most
// Held batches and HeldBytes bytes; beyond, writes are refused held-full
// and counted; the held ones are applied once the placement arrives.
func TestMetricsHeldBounds(t *testing.T) {
	t.Parallel()
	f := newGuardFixture(t, series.Limits{Held: 4})
	for range 6 {
		f.report(gJob, 1, "gpu-1", "loss")
	}
	if got := f.refused(series.ReasonHeldFull); got != 2 {
		t.Errorf("refused{held-full} = %v, want 2", got)
	}
	f.placed(gJob, 1, loomv1.JobState_RUNNING, time.Time{}, "gpu-1")
	if n := f.has(gJob, "loss"); n != 4 {
		t.Errorf("%d points after the placement, want the 4 held", n)
	}
	g := newGuardFixture(t, series.Limits{HeldBytes: 600})
	for range 6 {
		g.report(gJob, 1, "gpu-1", strings.Repeat("m", 100))
	}
	if got := g.refused(series.ReasonHeldFull); got < 1 {
		t.Errorf("refused{held-full} = %v past 600 bytes, want some", got)
	}
}

// TestMetricsHeldExpire: writes whose run's placement never arrives are
// refused held-expired by the sweep's tick after HoldFor (the retention
// 0, keep forever, does not stop it), and counted.
func TestMetricsHeldExpire(t *testing.T) {
	t.Parallel()
	f := newGuardFixture(t, series.Limits{HoldFor: time.Hour})
	f.report(gJob, 1, "gpu-1", "loss")
	f.report(gJob, 1, "gpu-1", "loss")
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	tick := make(chan time.Time)
	done := make(chan error, 1)
	go func() { done <- f.in.sweepMetrics(ctx, tick, 0) }()
	tick <- f.now
	tick <- f.now // the first tick's work is done once the second is taken
	if got := f.refused(series.ReasonHeldExpired); got != 0 {
		t.Errorf("refused before HoldFor: %v", got)
	}
	cancel()
	<-done
	f.now = f.now.Add(time.Hour + time.Minute)
	ctx, cancel = context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() { done <- f.in.sweepMetrics(ctx, tick, 0) }()
	tick <- f.now
	testkit.WaitFor(t, 10*time.Second, "held writes refused held-expired", func() (bool, error) {
		return f.refused(series.ReasonHeldExpired) == 2, nil
	})
	f.placed(gJob, 1, loomv1.JobState_RUNNING, time.Time{}, "gpu-1")
	if f.has(gJob, "loss") != 0 {
		t.Error("an expired write was applied when the placement came at last")
	}
	cancel()
	if err := <-done; err != nil {
		t.Error(err)
	}
}

// TestMetricsNodeRate: a node's writes past NodeRate in an hour are refused
// rate and counted, whatever job they are for; the next hour it writes
// again.
func TestMetricsNodeRate(t *testing.T) {
	t.Parallel()
	f := newGuardFixture(t, series.Limits{NodeRate: 3})
	f.now = f.now.Truncate(time.Hour)
	f.placed(gJob, 1, loomv1.JobState_RUNNING, time.Time{}, "gpu-1")
	for range 5 {
		f.report(gJob, 1, "gpu-1", "loss")
	}
	if n := f.has(gJob, "loss"); n != 3 {
		t.Errorf("%d points stored, want 3 (the rate)", n)
	}
	if got := f.refused(series.ReasonRate); got != 2 {
		t.Errorf("refused{rate} = %v, want 2", got)
	}
	f.now = f.now.Add(time.Hour)
	f.report(gJob, 1, "gpu-1", "loss")
	if n := f.has(gJob, "loss"); n != 4 {
		t.Errorf("next hour: %d points, want 4", n)
	}
}

// TestMetricsTooLate: a run's node may still write just after the run ended
// (its last flush follows the end on another topic), but not more than
// Late after it: refused too-late and counted.
func TestMetricsTooLate(t *testing.T) {
	t.Parallel()
	f := newGuardFixture(t, series.Limits{})
	end := f.now.Add(-time.Minute)
	f.placed(gJob, 1, loomv1.JobState_COMPLETED, end, "gpu-1")
	f.report(gJob, 1, "gpu-1", "loss")
	if f.has(gJob, "loss") != 1 {
		t.Error("a write just after the run's end was refused")
	}
	f.now = end.Add(series.DefaultLimits.Late + time.Minute)
	f.report(gJob, 1, "gpu-1", "loss")
	if f.has(gJob, "loss") != 1 || f.refused(series.ReasonTooLate) != 1 {
		t.Errorf("a write 8 days after the end: %d points, refused{too-late} = %v; want 1 and 1",
			f.has(gJob, "loss"), f.refused(series.ReasonTooLate))
	}
}

// TestLateMetricsAfterRetentionSweep: through the consumer's handler and the
// sweep loop, a job's series swept by retention are not recreated by a
// late write of its run's own node: refused swept, counted and logged.
func TestLateMetricsAfterRetentionSweep(t *testing.T) {
	t.Parallel()
	f := newGuardFixture(t, series.Limits{})
	ret := 2 * time.Hour
	end := f.now.Add(-3 * time.Hour)
	f.placed(gJob, 1, loomv1.JobState_RUNNING, time.Time{}, "gpu-1")
	f.report(gJob, 1, "gpu-1", "loss")
	f.placed(gJob, 1, loomv1.JobState_COMPLETED, end, "gpu-1")
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	tick := make(chan time.Time)
	done := make(chan error, 1)
	go func() { done <- f.in.sweepMetrics(ctx, tick, ret) }()
	tick <- f.now
	testkit.WaitFor(t, 10*time.Second, "the job's series swept", func() (bool, error) { return f.has(gJob, "loss") == 0, nil })
	f.report(gJob, 1, "gpu-1", "loss")
	f.report(gJob, 1, "gpu-1", "late_metric")
	if f.has(gJob, "loss") != 0 || f.has(gJob, "late_metric") != 0 {
		t.Error("a late write recreated a partial series after the sweep")
	}
	if got := f.refused(series.ReasonSwept); got != 2 {
		t.Errorf("refused{swept} = %v, want 2", got)
	}
	if !strings.Contains(f.log.String(), "reason=swept") {
		t.Errorf("no refusal logged:\n%s", f.log)
	}
	cancel()
	if err := <-done; err != nil {
		t.Error(err)
	}
}

// TestMetricsNodeRateSetting: a node rate outside 1..maxNodeRate stops the
// service at start-up with InvalidArgument naming the setting.
func TestMetricsNodeRateSetting(t *testing.T) {
	t.Parallel()
	for _, arg := range []string{"-metrics-node-rate=-1", "-metrics-node-rate=10000001", "-metrics-project-points=999", "-metrics-project-points=100000000001"} {
		err := RunArgs(context.Background(), []string{arg})
		flag, _, _ := strings.Cut(strings.TrimPrefix(arg, "-"), "=")
		if errs.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), flag) {
			t.Errorf("%s: %v, want InvalidArgument naming %s", arg, err, flag)
		}
	}
}

// TestNodeMetricsThroughTheBus: on the embedded broker, with records signed
// by two registered agents' identities, the records of the run's node sent
// before the scheduler's JobChanged are held and stored once it arrives;
// the other node's are refused, counted on /metrics.
func TestNodeMetricsThroughTheBus(t *testing.T) {
	t.Parallel()
	broker := testkit.Broker(t)
	redisAddr, rdb := testkit.Redis(t)
	httpAddr := testkit.FreeAddr()
	cfg := Config{Common: config.Common{
		Brokers: []string{broker}, RedisAddr: redisAddr, ServiceKeyFile: testkit.ServiceKeyFile(t),
		GRPCAddr: "127.0.0.1:0", HTTPAddr: httpAddr, LogLevel: "warn", CreateTopics: true,
	}}
	testkit.Start(t, "training", func(ctx context.Context) error { return run(ctx, cfg, nil) })
	ctx := testkit.Context(t, wait)
	job := "projects/p/jobs/31"
	send := func(host, metric string) {
		t.Helper()
		node := gCluster + "/nodes/" + host
		ev, err := envelope.Route(job, "loom/agent", &eventsv1.MetricsReported{Job: job, Attempt: 1, Node: node, Cluster: gCluster,
			Points: []*eventsv1.MetricsReported_Point{{Step: 1, Values: map[string]float64{metric: 1}}}})
		if err != nil {
			t.Fatal(err)
		}
		if err := testkit.NodeProducer(t, broker, node, gCluster, "gpu").Publish(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	send("gpu-1", "loss")
	send("gpu-9", "intruder")
	st := series.NewStore(rdb, "training:", series.Limits{})
	testkit.WaitFor(t, wait, "both records held", func() (bool, error) {
		n, err := rdb.LLen(ctx, "training:metrics:{"+job+"}:held").Result()
		return n == 2, err
	})
	ev, err := envelope.Route(job, "loom/scheduler", &eventsv1.JobChanged{Attempt: 1, Job: &loomv1.Job{Name: job, Cluster: gCluster,
		State: loomv1.JobState_RUNNING, Nodes: []string{"gpu-1"}, Runs: []*loomv1.JobRun{{Attempt: 1, State: loomv1.JobState_RUNNING, Nodes: []string{"gpu-1"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	testkit.PublishAs(t, broker, "scheduler", ev) // a JobChanged is the scheduler's (envelope.Senders)
	testkit.WaitFor(t, wait, "the run's node's held record stored, the other refused", func() (bool, error) {
		s, err := testkit.ScrapeErr(httpAddr)
		if err != nil {
			return false, nil
		}
		l, err := st.List(ctx, job)
		return err == nil && len(l) == 1 && l[0].Metric == "loss" &&
			s.Sum("loom_training_metrics_refused_total", "reason", series.ReasonNotPlaced) == 1, err
	})
	send("gpu-9", "intruder_after")
	send("gpu-1", "accuracy")
	testkit.WaitFor(t, wait, "the run's node's later record stored", func() (bool, error) {
		l, err := st.List(ctx, job)
		return err == nil && len(l) == 2, err
	})
	testkit.WaitFor(t, wait, "the other node's later record refused", func() (bool, error) {
		s, err := testkit.ScrapeErr(httpAddr)
		return err == nil && s.Sum("loom_training_metrics_refused_total", "reason", series.ReasonNotPlaced) == 2, nil
	})
	if l, _ := st.List(ctx, job); len(l) != 2 || l[0].Metric != "accuracy" || l[1].Metric != "loss" {
		t.Errorf("series %v, want accuracy and loss only", l)
	}
}
