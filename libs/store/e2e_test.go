package store

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/loom-ml/loom/libs/bus"
	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// The whole path on a real (kfake) broker and a real Redis: a producer's
// relay publishes a batch with the bus producer and crashes before deleting
// it, a second relay republishes it, and a consumer group applies every copy
// through Apply(ev.ID, ...), crashing once after an Apply and before its
// commit. Each event changes the consumer's state once, and the topic holds
// the records in Apply order per key.
func TestEndToEndRelayCrashRepublishAndIdempotentConsumer(t *testing.T) {
	t.Parallel()
	broker := testkit.Broker(t)
	rdb := realRedis(t)
	producer := bus.NewProducer([]string{broker})
	t.Cleanup(func() { _ = producer.Close() })

	src := New(rdb, "scheduler:")
	src.leaseTTL = time.Second
	const n = 12
	var want []string
	for i := range n {
		job := &loomv1.Job{Name: "projects/p/jobs/" + strconv.Itoa(i+1)}
		ev := envelope.New(topics.JobEvents, "projects/p/clusters/c"+strconv.Itoa(i%2), "loom/scheduler",
			&eventsv1.JobChanged{Job: job, Attempt: 1})
		var tx Tx
		tx.HSet("jobs", job.Name, []byte("PENDING"))
		tx.Emit(ev)
		if _, err := src.Apply(context.Background(), "", &tx); err != nil {
			t.Fatal(err)
		}
		want = append(want, ev.ID)
	}

	crash := errors.New("crash after publish")
	src.fp.afterPublish = func([]kafka.Message) error { return crash }
	if err := src.RunRelay(testkit.Context(t, 30*time.Second), producer); !errors.Is(err, crash) {
		t.Fatalf("crashed relay returned %v", err)
	}
	successor := New(rdb, "scheduler:")
	runRelay(t, successor, producer)
	testkit.WaitFor(t, 20*time.Second, "successor drains the outbox", func() (bool, error) {
		n, err := successor.OutboxLen(context.Background())
		return n == 0, err
	})
	last := testkit.WaitEvent(t, broker, topics.JobEvents, 20*time.Second,
		func(e envelope.Event) bool { return e.ID == want[n-1] })
	if last.Type != "loom.events.v1.JobChanged" {
		t.Fatalf("published event has type %q", last.Type)
	}

	// Each record is on the topic twice, and per key both copies are in
	// Apply order.
	byKey := map[string][]string{}
	for _, e := range testkit.Events(t, broker, topics.JobEvents) {
		byKey[e.Key] = append(byKey[e.Key], e.ID)
	}
	for k, ids := range byKey {
		var applied []string
		for i, id := range want {
			if "projects/p/clusters/c"+strconv.Itoa(i%2) == k {
				applied = append(applied, id)
			}
		}
		if !slices.Equal(ids, append(slices.Clone(applied), applied...)) {
			t.Fatalf("key %s: topic holds %v, want the Apply order %v twice", k, ids, applied)
		}
	}

	// The consumer: its handler applies and, once, crashes before the commit.
	dst := New(rdb, "registry:")
	var mu sync.Mutex
	outcomes := map[string][]bool{}
	var crashed atomic.Bool
	consumer := bus.NewConsumer(bus.ConsumerConfig{
		Brokers: []string{broker}, GroupID: "registry", Topics: []string{topics.JobEvents},
		Backoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond,
	}, producer, func(ctx context.Context, ev envelope.Event) error {
		count := 0
		if v, err := dst.Get(ctx, "count"); err == nil {
			count, _ = strconv.Atoi(string(v))
		} else if !errors.Is(err, ErrNotFound) {
			return err
		}
		var tx Tx
		tx.Set("count", []byte(strconv.Itoa(count+1)))
		tx.SAdd("jobs", ev.Payload.(*eventsv1.JobChanged).GetJob().GetName())
		applied, err := dst.Apply(ctx, ev.ID, &tx)
		if err != nil {
			return err
		}
		mu.Lock()
		outcomes[ev.ID] = append(outcomes[ev.ID], applied)
		mu.Unlock()
		if applied && crashed.CompareAndSwap(false, true) {
			return errors.New("crash before commit")
		}
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- consumer.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("consumer Run: %v", err)
		}
	})
	deliveries := func() int {
		mu.Lock()
		defer mu.Unlock()
		total := 0
		for _, o := range outcomes {
			total += len(o)
		}
		return total
	}
	// 2n records plus the one redelivered after the crash.
	testkit.WaitFor(t, 30*time.Second, "every copy handled", func() (bool, error) {
		return deliveries() == 2*n+1, nil
	})
	mu.Lock()
	defer mu.Unlock()
	for _, id := range want {
		o := outcomes[id]
		if len(o) < 2 || !o[0] || slices.Contains(o[1:], true) {
			t.Fatalf("event %s: Apply outcomes %v, want applied first and never again", id, o)
		}
	}
	if v, err := dst.Get(context.Background(), "count"); err != nil || string(v) != strconv.Itoa(n) {
		t.Fatalf("consumer count = %s, %v; want %d", v, err, n)
	}
	if jobs, _ := dst.SMembers(context.Background(), "jobs"); len(jobs) != n {
		t.Fatalf("consumer saw %d jobs, want %d", len(jobs), n)
	}
}
