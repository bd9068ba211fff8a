package training

import (
	"context"
	"crypto/ed25519"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/loom-ml/loom/libs/bus"
	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/series"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// metricsConsumer runs a member of the metrics group on broker, verifying
// records as the service does, with handler h, until the returned stop is
// called. Nothing is committed in the background (CommitInterval an hour),
// and a failed record waits an hour for its retry: a stop then leaves it
// uncommitted, as a consumer killed before its commit does.
func metricsConsumer(t *testing.T, broker string, in *ingest, h bus.Handler) (stop func()) {
	t.Helper()
	c := in.consume()
	cfg := *c.Config
	cfg.Brokers, cfg.GroupID, cfg.Topics = []string{broker}, c.Group, c.Topics
	cfg.Verifier = envelope.NewVerifier(testkit.ServiceKey().Public().(ed25519.PublicKey), time.Now)
	cfg.CommitInterval, cfg.Backoff, cfg.MaxBackoff, cfg.MaxAttempts = time.Hour, time.Hour, time.Hour, 100
	p := bus.NewProducer([]string{broker})
	t.Cleanup(func() { _ = p.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- bus.NewConsumer(cfg, p, h).Run(ctx) }()
	stopped := false
	stop = func() {
		t.Helper()
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("consumer: %v", err)
			}
		case <-time.After(wait):
			t.Error("the consumer did not stop")
		}
	}
	t.Cleanup(stop)
	return stop
}

// TestRedeliveredMetricsCountOnce: a node's record read by the metrics
// group, whose consumer then stops before committing it, is delivered again
// by the broker to the group's next consumer. It is counted once against
// its node's hourly rate (a second count would refuse the node's next
// record) and, read before its run's placement, held once (one slot of the
// job's hold, stored once when the placement comes).
func TestRedeliveredMetricsCountOnce(t *testing.T) {
	t.Parallel()
	broker := testkit.Broker(t)
	_, rdb := testkit.Redis(t)
	st := series.NewStore(rdb, "training:", series.Limits{NodeRate: 2})
	in := newIngest(st, slog.New(slog.NewTextHandler(&syncBuf{}, nil)), time.Now)
	ctx := testkit.Context(t, wait)
	const job = "projects/p/jobs/41"
	node := gCluster + "/nodes/gpu-1"
	heldKey := "training:metrics:{" + job + "}:held"

	ev, err := envelope.Route(job, "loom/agent", &eventsv1.MetricsReported{Job: job, Attempt: 1, Node: node, Cluster: gCluster,
		Points: []*eventsv1.MetricsReported_Point{{Step: 1, Values: map[string]float64{"loss": 1}}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := testkit.NodeProducer(t, broker, node, gCluster, "gpu").Publish(ctx, ev); err != nil {
		t.Fatal(err)
	}
	// The first consumer handles the record, then fails it as if killed
	// before its commit, and stops during the retry's wait.
	first := make(chan envelope.Event, 1)
	stop := metricsConsumer(t, broker, in, func(ctx context.Context, ev envelope.Event) error {
		if err := in.handle(ctx, ev); err != nil {
			return err
		}
		select {
		case first <- ev:
		default:
		}
		return errors.New("killed before the commit")
	})
	var got envelope.Event
	select {
	case got = <-first:
	case <-time.After(wait):
		t.Fatal("the record was not delivered")
	}
	stop()
	again := make(chan envelope.Event, 1)
	metricsConsumer(t, broker, in, func(ctx context.Context, ev envelope.Event) error {
		if err := in.handle(ctx, ev); err != nil {
			return err
		}
		select {
		case again <- ev:
		default:
		}
		return nil
	})
	select {
	case ev := <-again:
		if ev.Partition != got.Partition || ev.Offset != got.Offset {
			t.Fatalf("second delivery %d:%d, want the first's %d:%d", ev.Partition, ev.Offset, got.Partition, got.Offset)
		}
	case <-time.After(wait):
		t.Fatal("the uncommitted record was not delivered again")
	}

	if n, err := rdb.HGet(ctx, "training:metrics:noderate:"+node, "n").Result(); err != nil || n != "1" {
		t.Errorf("the node's count after two deliveries of one record: %s, %v; want 1", n, err)
	}
	if n, err := rdb.LLen(ctx, heldKey).Result(); err != nil || n != 1 {
		t.Errorf("%d records held after two deliveries of one record (%v), want 1", n, err)
	}
	placed := envelope.Event{Topic: topics.JobEvents, Time: time.Now(), Signer: "services/scheduler",
		Payload: &eventsv1.JobChanged{Attempt: 1, Job: &loomv1.Job{Name: job, Cluster: gCluster, State: loomv1.JobState_RUNNING,
			Nodes: []string{"gpu-1"}, Runs: []*loomv1.JobRun{{Attempt: 1, State: loomv1.JobState_RUNNING, Nodes: []string{"gpu-1"}}}}}}
	if err := in.handle(ctx, placed); err != nil {
		t.Fatal(err)
	}
	l, err := st.List(ctx, job)
	if err != nil || len(l) != 1 || l[0].Count != 1 {
		t.Fatalf("series after the placement %v, %v; want loss with one point", l, err)
	}
	for _, k := range []string{heldKey, "training:metrics:{" + job + "}:heldids"} {
		if n, _ := rdb.Exists(ctx, k).Result(); n != 0 {
			t.Errorf("%s left after the release", k)
		}
	}
	// The node's next record is its second this hour: within its rate of
	// 2, which a record counted twice would have filled.
	next := got
	next.Offset, next.HighWaterMark = got.Offset+1, got.Offset+2
	next.Payload = &eventsv1.MetricsReported{Job: job, Attempt: 1, Node: node, Cluster: gCluster,
		Points: []*eventsv1.MetricsReported_Point{{Step: 2, Values: map[string]float64{"loss": 2}}}}
	if err := in.handle(ctx, next); err != nil {
		t.Fatal(err)
	}
	if n := testutil.ToFloat64(in.refused.WithLabelValues(series.ReasonRate)); n != 0 {
		t.Errorf("refused{rate} = %v after the node's second record, want 0", n)
	}
	if l, _ := st.List(ctx, job); len(l) != 1 || l[0].Count != 2 {
		t.Errorf("series %v, want loss with two points", l)
	}
}
