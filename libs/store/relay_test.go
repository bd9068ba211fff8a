package store

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/loom-ml/loom/libs/envelope"
)

// applyEvents applies n events, one per Apply, and returns their ids in
// Apply order.
func applyEvents(t testing.TB, s *Store, n int, tag string) []string {
	t.Helper()
	ids := make([]string, 0, n)
	for i := range n {
		ev := testEvent("key-"+strconv.Itoa(i%7), tag+strconv.Itoa(i))
		var tx Tx
		tx.Set("last", []byte(ev.ID))
		tx.Emit(ev)
		if _, err := s.Apply(context.Background(), "", &tx); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, ev.ID)
	}
	return ids
}

func waitDrained(t testing.TB, s *Store, r *recorder, want int) {
	t.Helper()
	waitFor(t, 20*time.Second, "outbox drained", func() (bool, error) {
		n, err := s.OutboxLen(context.Background())
		return n == 0 && len(r.ids()) >= want, err
	})
}

func TestRelayPublishesInApplyOrderAndDrains(t *testing.T) {
	t.Parallel()
	backends(t, func(t *testing.T, rdb *redis.Client) {
		s := New(rdb, "svc:")
		want := applyEvents(t, s, 2*defaultBatchSize+50, "before-") // several batches
		r := newRecorder()
		runRelay(t, s, r)
		want = append(want, applyEvents(t, s, 100, "during-")...)
		waitDrained(t, s, r, len(want))
		if got := r.ids(); !slices.Equal(got, want) {
			t.Fatalf("published %d records out of Apply order or with duplicates/losses (want %d)", len(got), len(want))
		}
		m := r.messages()[0]
		if m.Topic != "loom.test.v1" || string(m.Key) != "key-0" {
			t.Fatalf("published record has topic %q key %q", m.Topic, m.Key)
		}
	})
}

// The relay must not wait for its poll when Apply in this process wrote
// events: with a poll of an hour only the wake-up can make it publish.
func TestRelayWakesOnApply(t *testing.T) {
	t.Parallel()
	rdb := realRedis(t)
	s := New(rdb, "svc:")
	s.pollInterval = time.Hour
	r := newRecorder()
	runRelay(t, s, r)
	waitFor(t, 10*time.Second, "relay holds the lease", func() (bool, error) {
		n, err := rdb.Exists(context.Background(), s.leaseKey).Result()
		return n == 1, err
	})
	for round := range 3 {
		want := applyEvents(t, s, 1, "wake-"+strconv.Itoa(round))
		waitFor(t, 10*time.Second, "woken relay published", func() (bool, error) {
			return slices.Contains(r.ids(), want[0]), nil
		})
	}
}

// Entries written by another process (no in-process wake-up) are found by
// polling.
func TestRelayPollsForEntriesFromOtherProcesses(t *testing.T) {
	t.Parallel()
	rdb := realRedis(t)
	relayStore, writer := New(rdb, "svc:"), New(rdb, "svc:")
	r := newRecorder()
	runRelay(t, relayStore, r)
	want := applyEvents(t, writer, 5, "other-")
	waitDrained(t, relayStore, r, len(want))
	if !slices.Equal(r.ids(), want) {
		t.Fatalf("published %v, want %v", r.ids(), want)
	}
}

func TestRelayRetriesFailedPublishWithoutLossOrReorder(t *testing.T) {
	t.Parallel()
	s := New(realRedis(t), "svc:")
	want := applyEvents(t, s, 300, "e-")
	r := newRecorder()
	r.fail = func(call int) error {
		if call <= 3 || call%2 == 0 {
			return errors.New("broker unavailable")
		}
		return nil
	}
	runRelay(t, s, r)
	waitDrained(t, s, r, len(want))
	if !slices.Equal(r.ids(), want) {
		t.Fatal("records lost, duplicated or reordered across publish failures")
	}
	r.mu.Lock()
	calls := r.calls
	r.mu.Unlock()
	if calls < 5 {
		t.Fatalf("publisher called %d times; the failures were not retried", calls)
	}
}

// Two relays on one prefix: only the lease holder publishes; the other takes
// over when the holder stops and releases the lease.
func TestRelayLeaseAllowsOnePublisher(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := realRedis(t)
	a, b := New(rdb, "svc:"), New(rdb, "svc:")
	ra, rb := newRecorder(), newRecorder()
	rb.inflight, rb.overlap = ra.inflight, ra.overlap // one detector for both
	stopA := runRelay(t, a, ra)
	stopB := runRelay(t, b, rb)
	want := applyEvents(t, a, 400, "a-")
	want = append(want, applyEvents(t, b, 400, "b-")...)
	waitFor(t, 20*time.Second, "both writers' events published", func() (bool, error) {
		n, err := a.OutboxLen(ctx)
		return n == 0 && len(ra.ids())+len(rb.ids()) >= len(want), err
	})
	leader, follower, stopLeader, followerRec := a, b, stopA, rb
	leaderRec := ra
	if len(ra.ids()) == 0 {
		leader, follower, stopLeader, followerRec, leaderRec = b, a, stopB, ra, rb
	}
	if len(followerRec.ids()) != 0 {
		t.Fatalf("both relays published: %d and %d records", len(ra.ids()), len(rb.ids()))
	}
	if !slices.Equal(leaderRec.ids(), want) {
		t.Fatal("the lease holder published out of order or lost records")
	}
	if err := stopLeader(); err != nil {
		t.Fatalf("RunRelay after cancel = %v, want nil", err)
	}
	more := applyEvents(t, leader, 20, "after-")
	waitFor(t, 20*time.Second, "the other relay takes over", func() (bool, error) {
		return slices.Equal(followerRec.ids(), more), nil
	})
	if n, _ := follower.OutboxLen(ctx); n != 0 {
		t.Fatalf("outbox holds %d entries after takeover", n)
	}
	if ra.overlap.Load() {
		t.Fatal("two relays were publishing at the same time")
	}
}

// Failpoint (b): a relay published a batch and crashed before deleting it. A
// new relay (after the dead one's lease expired) republishes the same records
// with the same ce_id, and a consumer applying every copy through
// Apply(ev.ID, ...) changes its state once per event.
func TestRelayCrashBeforeDeleteRepublishesAndConsumerAppliesOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := realRedis(t)
	s1 := New(rdb, "producer:")
	s1.leaseTTL = time.Second
	want := applyEvents(t, s1, 10, "p-")

	crash := errors.New("crash after publish")
	s1.fp.afterPublish = func([]kafka.Message) error { return crash }
	r1 := newRecorder()
	if err := s1.RunRelay(ctx, r1); !errors.Is(err, crash) {
		t.Fatalf("crashed RunRelay = %v, want the crash", err)
	}
	if !slices.Equal(r1.ids(), want) {
		t.Fatalf("first relay published %v, want %v", r1.ids(), want)
	}
	if n, _ := s1.OutboxLen(ctx); n != int64(len(want)) {
		t.Fatalf("outbox holds %d entries after the crash, want %d (nothing deleted)", n, len(want))
	}

	s2 := New(rdb, "producer:")
	s2.leaseTTL = time.Second
	r2 := newRecorder()
	runRelay(t, s2, r2)
	waitDrained(t, s2, r2, len(want))
	if !slices.Equal(r2.ids(), want) {
		t.Fatalf("new relay published %v, want the same records %v", r2.ids(), want)
	}

	consumer := New(rdb, "consumer:")
	reg := envelope.NewRegistry(wrapperspb.String(""))
	applied := 0
	for _, m := range append(r1.messages(), r2.messages()...) {
		ev, err := reg.Decode(m)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		if v, err := consumer.Get(ctx, "count"); err == nil {
			n, _ = strconv.Atoi(string(v))
		}
		var tx Tx
		tx.Set("count", []byte(strconv.Itoa(n+1)))
		tx.SAdd("payloads", ev.Payload.(*wrapperspb.StringValue).GetValue())
		ok, err := consumer.Apply(ctx, ev.ID, &tx)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			applied++
		}
	}
	if v, _ := consumer.Get(ctx, "count"); applied != len(want) || string(v) != strconv.Itoa(len(want)) {
		t.Fatalf("consumer applied %d of %d deliveries, count %s; want %d", applied, 2*len(want), v, len(want))
	}
}

func TestRelayDeadLettersUndecodableEntries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := realRedis(t)
	s := New(rdb, "svc:")
	if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: s.outboxKey, Values: []string{"x", "y"}}).Err(); err != nil {
		t.Fatal(err)
	}
	want := applyEvents(t, s, 3, "good-")
	r := newRecorder()
	runRelay(t, s, r)
	waitDrained(t, s, r, len(want))
	if !slices.Equal(r.ids(), want) {
		t.Fatalf("published %v, want %v", r.ids(), want)
	}
	dead, err := rdb.XRange(ctx, s.deadKey, "-", "+").Result()
	if err != nil || len(dead) != 1 || dead[0].Values["x"] != "y" || dead[0].Values["outbox_id"] == "" {
		t.Fatalf("dead stream = %v, %v; want the undecodable entry", dead, err)
	}
}

func TestRelayReleasesLeaseOnCancel(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := realRedis(t)
	s := New(rdb, "svc:")
	var published atomic.Bool
	stop := runRelay(t, s, PublisherFunc(func(context.Context, ...kafka.Message) error {
		published.Store(true)
		return nil
	}))
	waitFor(t, 10*time.Second, "lease taken", func() (bool, error) {
		n, err := rdb.Exists(ctx, s.leaseKey).Result()
		return n == 1, err
	})
	if err := stop(); err != nil {
		t.Fatalf("RunRelay = %v, want nil", err)
	}
	if n, _ := rdb.Exists(ctx, s.leaseKey).Result(); n != 0 {
		t.Fatal("lease still held after RunRelay returned")
	}
	if published.Load() {
		t.Fatal("published from an empty outbox")
	}
}

// A relay killed while it held the lease (here: a lease of an hour) holds
// the outbox until it expires; a successor that knows it is alone breaks
// the lease and publishes at once.
func TestBreakRelayLeaseAfterACrash(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := realRedis(t)
	s := New(rdb, "svc:")
	if err := rdb.Set(ctx, s.leaseKey, "dead-relay", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	want := applyEvents(t, s, 3, "after-crash-")
	if broke, err := s.BreakRelayLease(ctx); err != nil || !broke {
		t.Fatalf("BreakRelayLease = %v, %v; want true", broke, err)
	}
	if broke, err := s.BreakRelayLease(ctx); err != nil || broke {
		t.Fatalf("BreakRelayLease again = %v, %v; want false (no lease)", broke, err)
	}
	r := newRecorder()
	runRelay(t, s, r)
	waitDrained(t, s, r, len(want))
	if !slices.Equal(r.ids(), want) {
		t.Fatalf("published %v, want %v", r.ids(), want)
	}
}

func TestHeaderCodecRoundTrip(t *testing.T) {
	t.Parallel()
	hs := []kafka.Header{{Key: "a", Value: []byte("1")}, {Key: "", Value: nil},
		{Key: "bin", Value: []byte{0, 0xff, 0x80}}, {Key: string(make([]byte, 300)), Value: make([]byte, 70000)}}
	got, err := decodeHeaders(encodeHeaders(hs))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.EqualFunc(got, hs, func(a, b kafka.Header) bool { return a.Key == b.Key && string(a.Value) == string(b.Value) }) {
		t.Fatal("headers differ after a round trip")
	}
	for _, bad := range [][]byte{{5, 'a'}, {1, 'a'}, {0x80}} {
		if _, err := decodeHeaders(bad); err == nil {
			t.Fatalf("decoded corrupt headers %v", bad)
		}
	}
}
