package store

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/loom-ml/loom/libs/bus"
	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
)

// setAsideLog records what the relay's set-aside hook was told.
type setAsideLog struct {
	mu  sync.Mutex
	got []SetAside
}

func (l *setAsideLog) hook(_ context.Context, e SetAside) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.got = append(l.got, e)
	return nil
}

func (l *setAsideLog) entries() []SetAside {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.got)
}

// applyOne applies one event carrying payload on topic with key and returns its id.
func applyOne(t testing.TB, s *Store, topic, key, payload string) string {
	t.Helper()
	ev := envelope.New(topic, key, "loom/test", wrapperspb.String(payload))
	var tx Tx
	tx.Emit(ev)
	if _, err := s.Apply(context.Background(), "", &tx); err != nil {
		t.Fatal(err)
	}
	return ev.ID
}

// The outbox poison pill, on a real broker: an entry larger than the broker
// accepts sits first in the outbox, ahead of ordinary ones of the same key
// (so of the same partition and batch). The relay sets it aside with its
// reason, tells the hook, counts nothing twice, and every later entry is
// published, in order.
func TestRelaySetsAsideAnOversizedEntryAndLaterEntriesFlow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	broker := testkit.Broker(t)
	rdb := realRedis(t)
	producer := bus.NewProducer([]string{broker})
	t.Cleanup(func() { _ = producer.Close() })

	s := New(rdb, "gateway:")
	var log setAsideLog
	s.OnSetAside(log.hook)
	const key = "projects/p/clusters/c"
	bad := applyOne(t, s, topics.JobCommands, key, strings.Repeat("x", 2<<20)) // 2 MiB: past the broker's 1 MiB
	var want []string
	for i := range 5 {
		want = append(want, applyOne(t, s, topics.JobCommands, key, "ordinary-"+string(rune('a'+i))))
	}
	runRelay(t, s, producer)

	testkit.WaitFor(t, 20*time.Second, "outbox drained", func() (bool, error) {
		n, err := s.OutboxLen(ctx)
		return n == 0, err
	})
	var got []string
	for _, m := range topicRecords(t, broker, topics.JobCommands) {
		got = append(got, headerValue(m.Headers, envelope.HeaderID))
	}
	if slices.Contains(got, bad) {
		t.Fatal("the oversized entry was published")
	}
	if !slices.Equal(got, want) {
		t.Fatalf("published %v, want the ordinary entries in order %v", got, want)
	}
	dead, err := rdb.XRange(ctx, s.deadKey, "-", "+").Result()
	if err != nil || len(dead) != 1 {
		t.Fatalf("dead stream = %d entries, %v; want the oversized one", len(dead), err)
	}
	d := dead[0].Values
	if d["kind"] != SetAsideRefused || !strings.Contains(strings.ToLower(d["error"].(string)), "too large") ||
		!strings.Contains(d["error"].(string), "-byte record") ||
		d["t"] != topics.JobCommands || d["k"] != key || d["outbox_id"] == "" || len(d["v"].(string)) < 2<<20 {
		t.Fatalf("dead entry lacks its reason or original fields: kind %v error %v topic %v key %v", d["kind"], d["error"], d["t"], d["k"])
	}
	told := log.entries()
	if len(told) != 1 || told[0].EventID != bad || told[0].Kind != SetAsideRefused || told[0].Message.Topic != topics.JobCommands ||
		told[0].Type != "google.protobuf.StringValue" {
		t.Fatalf("hook told %+v; want the oversized entry once", told)
	}
}

// A broker that refuses a whole batch for good (the topic's own
// max.message.bytes is small, so the broker, not the client, refuses) sees
// the batch again one entry at a time: only the entry it refuses is set
// aside, its neighbours in the same batch are published.
func TestRelayFindsTheRefusedEntryOfABatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const topic = "loom.small.v1"
	broker := testkit.BrokerWith(t, topics.Spec{Name: topic, Partitions: 1, Configs: map[string]string{"max.message.bytes": "4096"}})
	rdb := realRedis(t)
	producer := bus.NewProducer([]string{broker})
	t.Cleanup(func() { _ = producer.Close() })

	s := New(rdb, "svc:")
	var log setAsideLog
	s.OnSetAside(log.hook)
	var want []string
	want = append(want, applyOne(t, s, topic, "k", "before"))
	bad := applyOne(t, s, topic, "k", strings.Repeat("y", 16<<10)) // 16 KiB: under the client's limit, over the topic's
	want = append(want, applyOne(t, s, topic, "k", "after-1"), applyOne(t, s, topic, "k", "after-2"))
	runRelay(t, s, producer)

	testkit.WaitFor(t, 20*time.Second, "outbox drained", func() (bool, error) {
		n, err := s.OutboxLen(ctx)
		return n == 0, err
	})
	told := log.entries()
	if len(told) != 1 || told[0].EventID != bad {
		t.Fatalf("hook told %d entries (%+v), want only the refused one", len(told), told)
	}
	var got []string
	for _, m := range topicRecords(t, broker, topic) {
		got = append(got, headerValue(m.Headers, envelope.HeaderID))
	}
	// A publish the broker refused may have written nothing; duplicates of
	// good entries would be harmless, but none are expected here.
	if !slices.Equal(got, want) {
		t.Fatalf("published %v, want %v (all but the refused entry, in order)", got, want)
	}
	if n, _ := rdb.XLen(ctx, s.deadKey).Result(); n != 1 {
		t.Fatalf("dead stream holds %d entries, want 1", n)
	}
}

// Transient failures are not mistaken for refusals: a broker that is away
// for a while gets the same entries again, nothing is set aside.
func TestRelayRetriesTransientErrorsWithoutSettingAside(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := realRedis(t)
	s := New(rdb, "svc:")
	var log setAsideLog
	s.OnSetAside(log.hook)
	want := applyEvents(t, s, 20, "t-")
	r := newRecorder()
	r.fail = func(call int) error {
		if call <= 4 {
			return kafka.WriteErrors{kafka.LeaderNotAvailable, kafka.RequestTimedOut}
		}
		return nil
	}
	runRelay(t, s, r)
	waitDrained(t, s, r, len(want))
	if !slices.Equal(r.ids(), want) {
		t.Fatal("records lost or reordered across transient failures")
	}
	if len(log.entries()) != 0 {
		t.Fatalf("set aside %d entries after transient failures", len(log.entries()))
	}
	if n, _ := rdb.XLen(ctx, s.deadKey).Result(); n != 0 {
		t.Fatalf("dead stream holds %d entries", n)
	}
}

// A hook that always fails does not block the outbox: after its attempts
// the entry is set aside with the hook's error recorded next to it.
func TestRelaySetsAsideEvenWhenTheHookFails(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := realRedis(t)
	s := New(rdb, "svc:")
	calls := 0
	s.OnSetAside(func(context.Context, SetAside) error { calls++; return errors.New("owner unreachable") })
	bad := applyEvents(t, s, 1, "bad-")[0]
	want := applyEvents(t, s, 3, "good-")
	r := newRecorder()
	r.fail = func(int) error { return nil }
	refuse := PublisherFunc(func(ctx context.Context, msgs ...kafka.Message) error {
		for _, m := range msgs {
			if headerValue(m.Headers, envelope.HeaderID) == bad {
				return kafka.WriteErrors{kafka.MessageSizeTooLarge}
			}
		}
		return r.PublishMessages(ctx, msgs...)
	})
	runRelay(t, s, refuse)
	waitDrained(t, s, r, len(want))
	if !slices.Equal(r.ids(), want) {
		t.Fatalf("published %v, want %v", r.ids(), want)
	}
	dead, err := rdb.XRange(ctx, s.deadKey, "-", "+").Result()
	if err != nil || len(dead) != 1 || dead[0].Values["hook_error"] != "owner unreachable" {
		t.Fatalf("dead stream = %v, %v; want the entry with the hook's error", dead, err)
	}
	if calls != setAsideAttempts {
		t.Fatalf("hook called %d times, want %d", calls, setAsideAttempts)
	}
}

// The dead stream is bounded.
func TestDeadStreamIsBounded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := realRedis(t)
	s := New(rdb, "svc:")
	s.deadMaxLen = 300
	pipe := rdb.Pipeline()
	for range 1000 {
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: s.outboxKey, Values: []string{"junk", "1"}})
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	runRelay(t, s, newRecorder())
	waitFor(t, 60*time.Second, "every junk entry set aside", func() (bool, error) {
		n, err := s.OutboxLen(ctx)
		return n == 0, err
	})
	// Approximate trimming keeps at most one macro node (100 entries by
	// default) beyond the bound.
	if n, _ := rdb.XLen(ctx, s.deadKey).Result(); n > 300+100 || n < 300 {
		t.Fatalf("dead stream holds %d entries, want about 300", n)
	}
}

func TestRefusedForGood(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{errors.New("dial tcp: connection refused"), false},
		{context.DeadlineExceeded, false},
		{kafka.LeaderNotAvailable, false},
		{kafka.MessageTooLargeError{}, true},
		{kafka.MessageSizeTooLarge, true},
		{kafka.InvalidRecord, true},
		{kafka.TopicAuthorizationFailed, true},
		{kafka.WriteErrors{nil, kafka.NotLeaderForPartition}, false},
		{kafka.WriteErrors{nil, kafka.MessageSizeTooLarge}, true},
	} {
		wrapped := c.err
		if c.err != nil {
			wrapped = errors.Join(errors.New("publish to t"), c.err)
		}
		if got := RefusedForGood(wrapped); got != c.want {
			t.Errorf("RefusedForGood(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// topicRecords returns every record on topic, whatever its payload, partition
// after partition, each in offset order.
func topicRecords(t testing.TB, broker, topic string) []kafka.Message {
	t.Helper()
	ctx := testkit.Context(t, 20*time.Second)
	conn, err := kafka.DialContext(ctx, "tcp", broker)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	parts, err := conn.ReadPartitions(topic)
	if err != nil {
		t.Fatal(err)
	}
	var out []kafka.Message
	for _, p := range parts {
		pc, err := kafka.DialLeader(ctx, "tcp", broker, topic, p.ID)
		if err != nil {
			t.Fatal(err)
		}
		last, err := pc.ReadLastOffset()
		if err != nil {
			pc.Close()
			t.Fatal(err)
		}
		pc.Close()
		if last == 0 {
			continue
		}
		r := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{broker}, Topic: topic, Partition: p.ID, MaxWait: 20 * time.Millisecond})
		for {
			m, err := r.ReadMessage(ctx)
			if err != nil {
				r.Close()
				t.Fatalf("read %s[%d]: %v", topic, p.ID, err)
			}
			out = append(out, m)
			if m.Offset >= last-1 {
				break
			}
		}
		r.Close()
	}
	return out
}
