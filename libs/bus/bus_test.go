package bus_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.opentelemetry.io/otel/trace"

	"github.com/loom-ml/loom/libs/bus"
	"github.com/loom-ml/loom/libs/embedded"
	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
)

const wait = 20 * time.Second

func TestEnsureTopicsCreatesAndToleratesExisting(t *testing.T) {
	t.Parallel()
	broker := startBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	specs := []topics.Spec{
		{Name: "a.v1", Partitions: 3, Configs: map[string]string{"retention.ms": "60000"}},
		{Name: "a.v1.dlq", Partitions: 1},
	}
	if err := bus.EnsureTopics(ctx, []string{broker}, specs); err != nil {
		t.Fatalf("first EnsureTopics: %v", err)
	}
	// Existing topics are fine, mixed with a new one.
	specs = append(specs, topics.Spec{Name: "b.v1", Partitions: 2})
	if err := bus.EnsureTopics(ctx, []string{broker}, specs); err != nil {
		t.Fatalf("second EnsureTopics: %v", err)
	}
	client := &kafka.Client{Addr: kafka.TCP(broker), Transport: &kafka.Transport{}}
	md, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{"a.v1", "a.v1.dlq", "b.v1"}})
	if err != nil {
		t.Fatalf("metadata: %v", err)
	}
	got := map[string]int{}
	for _, tp := range md.Topics {
		got[tp.Name] = len(tp.Partitions)
	}
	want := map[string]int{"a.v1": 3, "a.v1.dlq": 1, "b.v1": 2}
	for n, p := range want {
		if got[n] != p {
			t.Errorf("topic %s: %d partitions, want %d (metadata %v)", n, got[n], p, got)
		}
	}
}

func TestEnsureTopicsAllLoomTopics(t *testing.T) {
	t.Parallel()
	broker := startBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := bus.EnsureTopics(ctx, []string{broker}, topics.All()); err != nil {
		t.Fatalf("EnsureTopics(topics.All()): %v", err)
	}
	// Every topic can be written to at once.
	p := newProducer(t, broker)
	var evs []envelope.Event
	for _, s := range topics.All() {
		evs = append(evs, event(s.Name, "k", 1))
	}
	publish(t, p, evs...)
}

func TestEnsureTopicsBadInput(t *testing.T) {
	t.Parallel()
	err := bus.EnsureTopics(context.Background(), nil, []topics.Spec{{Name: ""}})
	var inv *errs.InvalidError
	if !errors.As(err, &inv) || !strings.Contains(err.Error(), "brokers") || !strings.Contains(err.Error(), "specs[0].name") {
		t.Fatalf("EnsureTopics with no brokers and an unnamed topic: got %v, want InvalidError naming brokers and specs[0].name", err)
	}
}

func TestEnsureTopicsGivesUpWhenContextEnds(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	// A port nothing listens on: transient errors are retried until ctx ends.
	err := bus.EnsureTopics(ctx, []string{"127.0.0.1:1"}, []topics.Spec{{Name: "x", Partitions: 1}})
	if err == nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("EnsureTopics against no broker: got %v, want an error wrapping context.DeadlineExceeded", err)
	}
}

func TestPublishRejectsEventWithoutTopic(t *testing.T) {
	t.Parallel()
	p := bus.NewProducer([]string{"127.0.0.1:1"})
	defer p.Close()
	err := p.Publish(context.Background(), event("", "k", 1))
	var inv *errs.InvalidError
	if !errors.As(err, &inv) || !strings.Contains(err.Error(), "events[0].topic") {
		t.Fatalf("Publish without topic: got %v, want InvalidError naming events[0].topic", err)
	}
}

func TestPublishToMissingTopicFailsNamingIt(t *testing.T) {
	t.Parallel()
	broker := startBroker(t)
	p := newProducer(t, broker)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := p.Publish(ctx, event("no.such.topic", "k", 1))
	if err == nil || !strings.Contains(err.Error(), "no.such.topic") {
		t.Fatalf("Publish to a missing topic: got %v, want an error naming the topic", err)
	}
}

func TestRoundTripKeepsAttributesAndTrace(t *testing.T) {
	t.Parallel()
	broker := startBroker(t)
	topic := newTopic(t, broker, 4)
	p := newProducer(t, broker)

	type delivery struct {
		ev     envelope.Event
		sc     trace.SpanContext
		ctxErr error
	}
	got := make(chan delivery, 10)
	startConsumer(t, bus.ConsumerConfig{Brokers: []string{broker}, GroupID: "g", Topics: []string{topic}}, p,
		func(ctx context.Context, ev envelope.Event) error {
			got <- delivery{ev: ev, sc: trace.SpanContextFromContext(ctx), ctxErr: ctx.Err()}
			return nil
		})

	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ctx := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled,
	}))
	sent := event(topic, "projects/default/clusters/c1", 7)
	sent.Subject = "projects/default/jobs/42"
	if err := p.Publish(ctx, sent); err != nil {
		t.Fatalf("publish: %v", err)
	}

	var d delivery
	select {
	case d = <-got:
	case <-time.After(wait):
		t.Fatal("event not delivered")
	}
	ev := d.ev
	if ev.ID != sent.ID || ev.Type != sent.Type || ev.Source != sent.Source || ev.Subject != sent.Subject ||
		ev.Key != sent.Key || ev.Topic != topic || !ev.Time.Equal(sent.Time) {
		t.Errorf("attributes changed in transit:\n got %+v\nwant %+v", ev, sent)
	}
	if !payloadEqual(ev.Payload, sent.Payload) {
		t.Errorf("payload: got %v, want %v", ev.Payload, sent.Payload)
	}
	if want := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"; ev.TraceParent != want {
		t.Errorf("traceparent: got %q, want %q", ev.TraceParent, want)
	}
	if d.sc.TraceID() != tid || !d.sc.IsRemote() || d.sc.SpanID() != sid {
		t.Errorf("handler context span: got trace %s span %s remote %v, want trace %s span %s remote",
			d.sc.TraceID(), d.sc.SpanID(), d.sc.IsRemote(), tid, sid)
	}
	if d.ctxErr != nil {
		t.Errorf("handler context already done: %v", d.ctxErr)
	}
}

func TestPublishKeepsExplicitTraceParent(t *testing.T) {
	t.Parallel()
	broker := startBroker(t)
	topic := newTopic(t, broker, 1)
	p := newProducer(t, broker)
	ev := event(topic, "k", 1)
	ev.TraceParent = "00-11111111111111111111111111111111-2222222222222222-01"
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ctx := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid}))
	if err := p.Publish(ctx, ev); err != nil {
		t.Fatalf("publish: %v", err)
	}
	m := readN(t, broker, topic, 1, wait)[0]
	if tp, _ := header(m, envelope.HeaderTraceParent); tp != ev.TraceParent {
		t.Fatalf("traceparent: got %q, want the event's own %q", tp, ev.TraceParent)
	}
}

// countCommits counts the OffsetCommit requests of group for topic, by offset.
func countCommits(c interface {
	ControlKey(int16, func(kmsg.Request) (kmsg.Response, error, bool))
}, group, topic string) func() map[int64]int {
	var mu sync.Mutex
	counts := map[int64]int{}
	c.ControlKey(int16(kmsg.OffsetCommit), func(req kmsg.Request) (kmsg.Response, error, bool) {
		r := req.(*kmsg.OffsetCommitRequest)
		if r.Group != group {
			return nil, nil, false
		}
		mu.Lock()
		defer mu.Unlock()
		for _, tp := range r.Topics {
			if tp.Topic != topic {
				continue
			}
			for _, p := range tp.Partitions {
				counts[p.Offset]++
			}
		}
		return nil, nil, false // observe only: the broker handles it
	})
	return func() map[int64]int {
		mu.Lock()
		defer mu.Unlock()
		out := map[int64]int{}
		for k, v := range counts {
			out[k] = v
		}
		return out
	}
}

func TestCommitsOnlyAfterSuccess(t *testing.T) {
	t.Parallel()
	cluster, broker := kfakeBroker(t)
	topic := newTopic(t, broker, 1)
	p := newProducer(t, broker)
	commits := countCommits(cluster, "g", topic)

	const n = 3
	var calls atomic.Int32
	var committedWhileFailing []int64
	first := startConsumer(t, bus.ConsumerConfig{
		Brokers: []string{broker}, GroupID: "g", Topics: []string{topic},
		MaxAttempts: 5, Backoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond,
	}, p, func(ctx context.Context, ev envelope.Event) error {
		c := calls.Add(1)
		if c < n {
			// Nothing may be committed while the handler has not succeeded.
			off, err := committedOffset(broker, "g", topic, 0)
			if err != nil {
				return err
			}
			committedWhileFailing = append(committedWhileFailing, off)
			return errors.New("transient")
		}
		return nil
	})
	ev := event(topic, "k", 1)
	publish(t, p, ev)
	testkit.WaitFor(t, wait, "record committed after success", func() (bool, error) {
		return committed(t, broker, "g", topic, 0) == 1, nil
	})
	if err := first.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if got := calls.Load(); got != n {
		t.Errorf("handler called %d times, want %d", got, n)
	}
	for i, off := range committedWhileFailing {
		if off >= 1 {
			t.Errorf("after failed attempt %d the committed offset was already %d", i+1, off)
		}
	}
	if got := commits(); got[1] != 1 || len(got) != 1 {
		t.Errorf("commits by offset: got %v, want exactly one commit of offset 1", got)
	}

	// A new member of the group resumes after the committed record.
	var again seen
	startConsumer(t, bus.ConsumerConfig{Brokers: []string{broker}, GroupID: "g", Topics: []string{topic}}, p,
		func(ctx context.Context, ev envelope.Event) error { again.add(ev); return nil })
	marker := event(topic, "k", 2)
	publish(t, p, marker)
	testkit.WaitFor(t, wait, "marker delivered to the restarted consumer", func() (bool, error) {
		return again.count(marker.ID) > 0, nil
	})
	if again.count(ev.ID) != 0 {
		t.Errorf("committed record delivered again after restart: %v", again.ids())
	}
}

func TestDeadLettersAfterMaxAttemptsAndMovesOn(t *testing.T) {
	t.Parallel()
	broker := startBroker(t)
	topic := newTopic(t, broker, 1)
	p := newProducer(t, broker)
	bad := event(topic, "k", 1)
	bad.TraceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	good := event(topic, "k", 2)

	var badCalls atomic.Int32
	var handled seen
	startConsumer(t, bus.ConsumerConfig{
		Brokers: []string{broker}, GroupID: "g", Topics: []string{topic},
		MaxAttempts: 3, Backoff: time.Millisecond, MaxBackoff: 4 * time.Millisecond,
	}, p, func(ctx context.Context, ev envelope.Event) error {
		if ev.ID == bad.ID {
			badCalls.Add(1)
			return errors.New("disk on fire")
		}
		handled.add(ev)
		return nil
	})
	publish(t, p, bad, good)

	testkit.WaitFor(t, wait, "next record handled after the dead-letter", func() (bool, error) {
		return handled.count(good.ID) == 1, nil
	})
	if got := badCalls.Load(); got != 3 {
		t.Errorf("failing handler called %d times, want MaxAttempts=3", got)
	}
	dl := readN(t, broker, topic+topics.DLQSuffix, 1, wait)[0]
	wantHeaders := map[string]string{
		envelope.HeaderID:          bad.ID,
		envelope.HeaderType:        bad.Type,
		envelope.HeaderSource:      bad.Source,
		envelope.HeaderTraceParent: bad.TraceParent,
		bus.HeaderDLQTopic:         topic,
		bus.HeaderDLQPartition:     "0",
		bus.HeaderDLQOffset:        "0",
		bus.HeaderDLQAttempts:      "3",
	}
	for k, want := range wantHeaders {
		if got, ok := header(dl, k); !ok || got != want {
			t.Errorf("dead-lettered header %s: got %q (present %v), want %q", k, got, ok, want)
		}
	}
	if e, _ := header(dl, bus.HeaderDLQError); !strings.Contains(e, "disk on fire") {
		t.Errorf("dead-lettered error header %q does not carry the handler's error", e)
	}
	if string(dl.Key) != "k" {
		t.Errorf("dead-lettered key %q, want %q", dl.Key, "k")
	}
	// The dead-lettered record still decodes to the original event.
	dec, err := envelope.Default.Decode(dl)
	if err != nil || !payloadEqual(dec.Payload, bad.Payload) {
		t.Errorf("dead-lettered record decodes to %v, %v; want the original payload", dec.Payload, err)
	}
	testkit.WaitFor(t, wait, "both records committed", func() (bool, error) {
		return committed(t, broker, "g", topic, 0) == 2, nil
	})
}

// TestUnavailableIsRetriedUntilItPasses: a handler that cannot reach its
// store (Redis restarting: connection refused, a write with no answer)
// fails for the consumer's sake, not the record's: it is retried past
// MaxAttempts until it passes, and nothing is dead-lettered. Before, a
// Redis outage of ~5 s dead-lettered every record consumed during it.
func TestUnavailableIsRetriedUntilItPasses(t *testing.T) {
	t.Parallel()
	broker := startBroker(t)
	topic := newTopic(t, broker, 1)
	p := newProducer(t, broker)
	outage := []error{
		&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED},
		fmt.Errorf("store: apply: %w", saysUnavailable{}),
		fmt.Errorf("read roles: %w: %w", errs.Unavailable, &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}),
	}
	var calls atomic.Int32
	var handled seen
	startConsumer(t, bus.ConsumerConfig{
		Brokers: []string{broker}, GroupID: "g", Topics: []string{topic},
		MaxAttempts: 2, Backoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond,
	}, p, func(ctx context.Context, ev envelope.Event) error {
		if n := int(calls.Add(1)); n <= 3*len(outage) {
			return outage[n%len(outage)]
		}
		handled.add(ev)
		return nil
	})
	ev := event(topic, "k", 1)
	publish(t, p, ev)
	// Dead-lettered after MaxAttempts, it would never have been handled.
	testkit.WaitFor(t, wait, "the record handled once its store is back", func() (bool, error) {
		return handled.count(ev.ID) == 1, nil
	})
	if n := calls.Load(); n != int32(3*len(outage)+1) {
		t.Errorf("handler called %d times, want every failure retried (%d) and one success", n, 3*len(outage))
	}
	for _, err := range outage {
		if !bus.Unavailable(err) {
			t.Errorf("Unavailable(%v) = false", err)
		}
	}
	for _, err := range []error{errors.New("disk on fire"), context.DeadlineExceeded, bus.Permanent(saysUnavailable{}),
		fmt.Errorf("store: %w: %v", errs.Unavailable, errors.New("WRONGTYPE")), io.EOF} {
		if bus.Unavailable(err) {
			t.Errorf("Unavailable(%v) = true: the record's own failure would be retried for good", err)
		}
	}
}

// TestPassedIsToldOfRecordsTheHandlerDidNotTake: a consumer tells
// Passed of every record it commits without its handler having taken it
// (dead-lettered after its attempts, refused permanently, malformed), and
// of no other, so that a handler judging its progress by the records it
// takes (health's lag) is not left waiting for one that never reaches it.
func TestPassedIsToldOfRecordsTheHandlerDidNotTake(t *testing.T) {
	t.Parallel()
	broker := startBroker(t)
	topic := newTopic(t, broker, 1)
	p := newProducer(t, broker)
	failing, permanent, good := event(topic, "k", 1), event(topic, "k", 2), event(topic, "k", 3)
	var mu sync.Mutex
	var passed []int64
	var handled seen
	startConsumer(t, bus.ConsumerConfig{
		Brokers: []string{broker}, GroupID: "g", Topics: []string{topic},
		MaxAttempts: 2, Backoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond,
		Passed: func(_ string, _ int, offset, _ int64) {
			mu.Lock()
			passed = append(passed, offset)
			mu.Unlock()
		},
	}, p, func(ctx context.Context, ev envelope.Event) error {
		switch ev.ID {
		case failing.ID:
			return errors.New("disk on fire")
		case permanent.ID:
			return bus.Permanent(errors.New("never"))
		}
		handled.add(ev)
		return nil
	})
	publish(t, p, failing, permanent, good)
	if err := p.PublishMessages(context.Background(), kafka.Message{Topic: topic, Key: []byte("k"), Value: []byte("not an event")}); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, wait, "every record committed", func() (bool, error) {
		return committed(t, broker, "g", topic, 0) == 4, nil
	})
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(passed, []int64{0, 1, 3}) || handled.count(good.ID) != 1 {
		t.Errorf("Passed told of offsets %v, want [0 1 3] (the dead-lettered and the malformed, not the handled one)", passed)
	}
}

// saysUnavailable is an error that says it is (as store.ErrOutcomeUnknown does).
type saysUnavailable struct{}

func (saysUnavailable) Error() string     { return "no answer" }
func (saysUnavailable) Unavailable() bool { return true }

func TestPermanentErrorDeadLettersAtOnce(t *testing.T) {
	t.Parallel()
	broker := startBroker(t)
	topic := newTopic(t, broker, 1)
	p := newProducer(t, broker)
	var calls atomic.Int32
	startConsumer(t, bus.ConsumerConfig{
		Brokers: []string{broker}, GroupID: "g", Topics: []string{topic}, MaxAttempts: 5, Backoff: time.Millisecond,
	}, p, func(ctx context.Context, ev envelope.Event) error {
		calls.Add(1)
		return bus.Permanent(errors.New("job spec can never be placed"))
	})
	publish(t, p, event(topic, "k", 1))
	dl := readN(t, broker, topic+topics.DLQSuffix, 1, wait)[0]
	if a, _ := header(dl, bus.HeaderDLQAttempts); a != "1" {
		t.Errorf("attempts header %q, want 1", a)
	}
	if e, _ := header(dl, bus.HeaderDLQError); !strings.Contains(e, "never be placed") {
		t.Errorf("error header %q", e)
	}
	testkit.WaitFor(t, wait, "dead-lettered record committed", func() (bool, error) {
		return committed(t, broker, "g", topic, 0) == 1, nil
	})
	if got := calls.Load(); got != 1 {
		t.Errorf("handler called %d times for a permanent error, want 1", got)
	}
}

func TestIsPermanent(t *testing.T) {
	t.Parallel()
	base := errors.New("bad")
	if bus.Permanent(nil) != nil {
		t.Error("Permanent(nil) != nil")
	}
	wrapped := errors.Join(errors.New("ctx"), bus.Permanent(base))
	if !bus.IsPermanent(wrapped) || !errors.Is(wrapped, base) {
		t.Error("a wrapped Permanent error is not recognised or lost its cause")
	}
	if bus.IsPermanent(base) {
		t.Error("plain error reported permanent")
	}
}

func TestUnknownTypeSkippedMalformedDeadLettered(t *testing.T) {
	t.Parallel()
	broker := startBroker(t)
	topic := newTopic(t, broker, 1)
	p := newProducer(t, broker)

	unknown, err := envelope.Encode(event(topic, "k", 1))
	if err != nil {
		t.Fatal(err)
	}
	for i, h := range unknown.Headers {
		if h.Key == envelope.HeaderType {
			unknown.Headers[i].Value = []byte("loom.events.v9.FromTheFuture")
		}
	}
	malformed := kafka.Message{Topic: topic, Key: []byte("k"), Value: []byte("not protobuf"),
		Headers: []kafka.Header{{Key: envelope.HeaderType, Value: []byte("loom.events.v1.Heartbeat")}}} // no ce_id
	good := event(topic, "k", 3)

	var handled seen
	startConsumer(t, bus.ConsumerConfig{Brokers: []string{broker}, GroupID: "g", Topics: []string{topic}}, p,
		func(ctx context.Context, ev envelope.Event) error { handled.add(ev); return nil })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.PublishMessages(ctx, unknown, malformed); err != nil {
		t.Fatal(err)
	}
	publish(t, p, good)

	testkit.WaitFor(t, wait, "record after the unknown and malformed ones handled", func() (bool, error) {
		return handled.count(good.ID) == 1, nil
	})
	if ids := handled.ids(); len(ids) != 1 {
		t.Errorf("handler saw %v, want only the good event", ids)
	}
	dl := readN(t, broker, topic+topics.DLQSuffix, 1, wait)[0]
	if off, _ := header(dl, bus.HeaderDLQOffset); off != "1" {
		t.Errorf("dead-lettered offset %s, want 1 (the malformed record)", off)
	}
	if a, _ := header(dl, bus.HeaderDLQAttempts); a != "0" {
		t.Errorf("attempts header %q, want 0 for an undecodable record", a)
	}
	testkit.WaitFor(t, wait, "all three committed", func() (bool, error) {
		return committed(t, broker, "g", topic, 0) == 3, nil
	})
	if n := records(t, broker, topic+topics.DLQSuffix, 1); n != 1 {
		t.Errorf("DLQ holds %d records, want 1 (the unknown type is skipped, not dead-lettered)", n)
	}
}

// A record larger than a consumer's fetch limit (possible wherever a
// topic's max.message.bytes is raised above it, by anyone able to write the
// topic) is handed on like any other: it does not stall its partition, and
// the record after it is handled.
func TestRecordOverTheFetchLimitDoesNotStall(t *testing.T) {
	t.Parallel()
	broker := startBroker(t)
	topic := fmt.Sprintf("test.overfetch.%d", topicSeq.Add(1))
	limit := strconv.Itoa(bus.FetchMaxBytes + 2<<20)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := bus.EnsureTopics(ctx, []string{broker}, []topics.Spec{
		{Name: topic, Partitions: 1, Configs: map[string]string{"max.message.bytes": limit}},
		{Name: topic + topics.DLQSuffix, Partitions: 1},
	}); err != nil {
		t.Fatal(err)
	}
	big := envelope.New(topic, "k", "loom/test", &eventsv1.Heartbeat{Node: strings.Repeat("n", bus.FetchMaxBytes+1<<20), Cluster: "c1"})
	bigMsg, err := envelope.Encode(big)
	if err != nil {
		t.Fatal(err)
	}
	good := event(topic, "k", 2)
	goodMsg, err := envelope.Encode(good)
	if err != nil {
		t.Fatal(err)
	}
	// A writer of its own: the bus producer's batches stop at 1 MiB.
	w := &kafka.Writer{Addr: kafka.TCP(broker), BatchBytes: int64(bus.FetchMaxBytes + 2<<20), BatchSize: 1, BatchTimeout: time.Millisecond}
	defer w.Close()
	if err := w.WriteMessages(ctx, bigMsg); err != nil {
		t.Fatalf("write the big record: %v", err)
	}
	if err := w.WriteMessages(ctx, goodMsg); err != nil {
		t.Fatal(err)
	}

	var handled seen
	var bigSize atomic.Int64
	startConsumer(t, bus.ConsumerConfig{Brokers: []string{broker}, GroupID: "g", Topics: []string{topic}}, newProducer(t, broker),
		func(ctx context.Context, ev envelope.Event) error {
			if ev.ID == big.ID {
				bigSize.Store(int64(len(ev.Payload.(*eventsv1.Heartbeat).GetNode())))
			}
			handled.add(ev)
			return nil
		})
	testkit.WaitFor(t, wait, "the record after the big one handled", func() (bool, error) {
		return handled.count(good.ID) == 1, nil
	})
	if ids := handled.ids(); len(ids) != 2 || ids[0] != big.ID || ids[1] != good.ID {
		t.Errorf("handled %v, want the big record then the good one", ids)
	}
	if n := bigSize.Load(); n != int64(bus.FetchMaxBytes+1<<20) {
		t.Errorf("the big record came with %d bytes of node, want %d", n, bus.FetchMaxBytes+1<<20)
	}
	testkit.WaitFor(t, wait, "both committed", func() (bool, error) {
		return committed(t, broker, "g", topic, 0) == 2, nil
	})
}

// A record at the record limit that must be dead-lettered is over it with
// the dead-letter headers: its dead letter goes without its value (then
// without its key and headers too, when they are what is large), and says
// so, rather than never; the record stays in its topic at the offset the
// dead letter names, and the records after it flow.
func TestDeadLetterOverTheRecordLimitDoesNotStall(t *testing.T) {
	t.Parallel()
	// Undecodable, and as large as a producer's default limit (1 MiB)
	// lets through: with the loom_dlq_* headers it is over that limit.
	const size = 1<<20 - 300
	for _, tc := range []struct {
		name       string
		value, big []byte // the record's value and one header's
		dropped    string // the start of HeaderDLQDataDropped
		key        string // the dead letter's key
	}{
		{"value", bytes.Repeat([]byte("x"), size), nil, strconv.Itoa(size) + " bytes of value:", "k"},
		{"headers", []byte("x"), bytes.Repeat([]byte("h"), size), "1 bytes of value, ", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			broker := startBroker(t)
			topic := newTopic(t, broker, 1)
			p := newProducer(t, broker)
			malformed := kafka.Message{Topic: topic, Key: []byte("k"), Value: tc.value,
				Headers: []kafka.Header{{Key: envelope.HeaderType, Value: []byte("loom.events.v1.Heartbeat")}}}
			if tc.big != nil {
				malformed.Headers = append(malformed.Headers, kafka.Header{Key: "big", Value: tc.big})
			}
			good := event(topic, "k", 3)

			var handled seen
			startConsumer(t, bus.ConsumerConfig{Brokers: []string{broker}, GroupID: "g", Topics: []string{topic}}, p,
				func(ctx context.Context, ev envelope.Event) error { handled.add(ev); return nil })
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := p.PublishMessages(ctx, malformed); err != nil {
				t.Fatalf("publish the big record: %v", err)
			}
			publish(t, p, good)

			testkit.WaitFor(t, wait, "the record after the big one handled", func() (bool, error) {
				return handled.count(good.ID) == 1, nil
			})
			dl := readN(t, broker, topic+topics.DLQSuffix, 1, wait)[0]
			if off, _ := header(dl, bus.HeaderDLQOffset); off != "0" {
				t.Errorf("dead-lettered offset %s, want 0 (the big record)", off)
			}
			if tp, _ := header(dl, bus.HeaderDLQTopic); tp != topic {
				t.Errorf("dead letter names topic %q, want %q", tp, topic)
			}
			if dropped, _ := header(dl, bus.HeaderDLQDataDropped); len(dl.Value) != 0 || !strings.HasPrefix(dropped, tc.dropped) {
				t.Errorf("dead letter of %d bytes, %s %q: want the value left out and %q...", len(dl.Value), bus.HeaderDLQDataDropped, dropped, tc.dropped)
			}
			if _, ok := header(dl, "big"); ok || string(dl.Key) != tc.key {
				t.Errorf("dead letter key %q, big header %v: want key %q and no big header", dl.Key, ok, tc.key)
			}
			if e, _ := header(dl, bus.HeaderDLQError); e == "" {
				t.Error("the dead letter says no error")
			}
			testkit.WaitFor(t, wait, "both committed", func() (bool, error) {
				return committed(t, broker, "g", topic, 0) == 2, nil
			})
		})
	}
}

func TestGracefulStopFinishesAndCommitsRecordInHand(t *testing.T) {
	t.Parallel()
	broker := startBroker(t)
	topic := newTopic(t, broker, 1)
	p := newProducer(t, broker)

	entered := make(chan struct{})
	release := make(chan struct{})
	var finished atomic.Bool
	var ctxErrAfterStop atomic.Pointer[error]
	c := startConsumer(t, bus.ConsumerConfig{Brokers: []string{broker}, GroupID: "g", Topics: []string{topic}}, p,
		func(ctx context.Context, ev envelope.Event) error {
			close(entered)
			<-release
			err := ctx.Err() // nil unless the stop cancelled it
			ctxErrAfterStop.Store(&err)
			finished.Store(true)
			return nil
		})
	ev := event(topic, "k", 1)
	publish(t, p, ev)
	select {
	case <-entered:
	case <-time.After(wait):
		t.Fatal("record not delivered")
	}

	stopped := make(chan error, 1)
	go func() { stopped <- c.stop(t) }()
	select {
	case err := <-stopped:
		t.Fatalf("Run returned (%v) while its handler was still running", err)
	case <-time.After(100 * time.Millisecond): // Run must still be waiting for the handler
	}
	close(release)
	if err := <-stopped; err != nil {
		t.Fatalf("Run after stop: %v, want nil", err)
	}
	if !finished.Load() {
		t.Fatal("Run returned before the handler finished")
	}
	if err := ctxErrAfterStop.Load(); err == nil || *err != nil {
		t.Errorf("handler context was cancelled by the stop: %v", err)
	}
	if got := committed(t, broker, "g", topic, 0); got != 1 {
		t.Errorf("committed offset after graceful stop: %d, want 1", got)
	}

	var again seen
	startConsumer(t, bus.ConsumerConfig{Brokers: []string{broker}, GroupID: "g", Topics: []string{topic}}, p,
		func(ctx context.Context, ev envelope.Event) error { again.add(ev); return nil })
	marker := event(topic, "k", 2)
	publish(t, p, marker)
	testkit.WaitFor(t, wait, "marker delivered after restart", func() (bool, error) { return again.count(marker.ID) == 1, nil })
	if again.count(ev.ID) != 0 {
		t.Errorf("record finished during the stop was delivered again: %v", again.ids())
	}
}

func TestStopDuringRetryLeavesRecordUncommitted(t *testing.T) {
	t.Parallel()
	broker := startBroker(t)
	topic := newTopic(t, broker, 1)
	p := newProducer(t, broker)
	failed := make(chan struct{}, 100)
	c := startConsumer(t, bus.ConsumerConfig{
		Brokers: []string{broker}, GroupID: "g", Topics: []string{topic},
		MaxAttempts: 5, Backoff: time.Minute, // the stop arrives while waiting to retry
	}, p, func(ctx context.Context, ev envelope.Event) error {
		failed <- struct{}{}
		return errors.New("transient")
	})
	ev := event(topic, "k", 1)
	publish(t, p, ev)
	select {
	case <-failed:
	case <-time.After(wait):
		t.Fatal("record not delivered")
	}
	if err := c.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if got := committed(t, broker, "g", topic, 0); got >= 1 {
		t.Fatalf("record committed (%d) although its handler never succeeded", got)
	}
	if n := records(t, broker, topic+topics.DLQSuffix, 1); n != 0 {
		t.Fatalf("record dead-lettered on stop (%d in DLQ) with retries left", n)
	}
	var again seen
	startConsumer(t, bus.ConsumerConfig{Brokers: []string{broker}, GroupID: "g", Topics: []string{topic}}, p,
		func(ctx context.Context, ev envelope.Event) error { again.add(ev); return nil })
	testkit.WaitFor(t, wait, "uncommitted record redelivered", func() (bool, error) { return again.count(ev.ID) == 1, nil })
}

func TestFailedDeadLetterWriteIsNotCommitted(t *testing.T) {
	t.Parallel()
	broker := startBroker(t)
	// A topic without its .dlq companion: dead-letter writes fail.
	topic := "nodlq.v1"
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := bus.EnsureTopics(ctx, []string{broker}, []topics.Spec{{Name: topic, Partitions: 1}}); err != nil {
		t.Fatal(err)
	}
	p := newProducer(t, broker)
	var calls atomic.Int32
	c := startConsumer(t, bus.ConsumerConfig{Brokers: []string{broker}, GroupID: "g", Topics: []string{topic}}, p,
		func(ctx context.Context, ev envelope.Event) error {
			calls.Add(1)
			return bus.Permanent(errors.New("never"))
		})
	ev := event(topic, "k", 1)
	publish(t, p, ev)
	testkit.WaitFor(t, wait, "handler called", func() (bool, error) { return calls.Load() > 0, nil })
	if err := c.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if got := committed(t, broker, "g", topic, 0); got >= 1 {
		t.Fatalf("record committed (%d) although it reached neither a handler success nor the DLQ", got)
	}

	// Once the DLQ exists, a restarted consumer dead-letters it.
	if err := bus.EnsureTopics(ctx, []string{broker}, []topics.Spec{{Name: topic + topics.DLQSuffix, Partitions: 1}}); err != nil {
		t.Fatal(err)
	}
	startConsumer(t, bus.ConsumerConfig{Brokers: []string{broker}, GroupID: "g", Topics: []string{topic}}, p,
		func(ctx context.Context, ev envelope.Event) error { return bus.Permanent(errors.New("never")) })
	dl := readN(t, broker, topic+topics.DLQSuffix, 1, wait)[0]
	if id, _ := header(dl, envelope.HeaderID); id != ev.ID {
		t.Errorf("dead-lettered %q, want %q", id, ev.ID)
	}
}

func TestHandlerPanicIsRetriedThenDeadLettered(t *testing.T) {
	t.Parallel()
	broker := startBroker(t)
	topic := newTopic(t, broker, 1)
	p := newProducer(t, broker)
	var calls atomic.Int32
	startConsumer(t, bus.ConsumerConfig{
		Brokers: []string{broker}, GroupID: "g", Topics: []string{topic}, MaxAttempts: 2, Backoff: time.Millisecond,
	}, p, func(ctx context.Context, ev envelope.Event) error {
		calls.Add(1)
		panic("boom")
	})
	publish(t, p, event(topic, "k", 1))
	dl := readN(t, broker, topic+topics.DLQSuffix, 1, wait)[0]
	if e, _ := header(dl, bus.HeaderDLQError); !strings.Contains(e, "boom") {
		t.Errorf("error header %q does not name the panic", e)
	}
	if got := calls.Load(); got != 2 {
		t.Errorf("panicking handler called %d times, want 2", got)
	}
}

func TestTwoConsumersSplitPartitions(t *testing.T) {
	t.Parallel()
	broker := startBroker(t)
	const parts = 4
	topic := newTopic(t, broker, parts)
	p := newProducer(t, broker)

	// One key per partition, by the producer's murmur2 partitioner.
	keys := make([]string, parts)
	for i, found := 0, 0; found < parts; i++ {
		k := "node-" + strconv.Itoa(i)
		part := kafka.Murmur2Balancer{}.Balance(kafka.Message{Key: []byte(k)}, 0, 1, 2, 3)
		if keys[part] == "" {
			keys[part] = k
			found++
		}
	}

	type hit struct {
		member string
		part   int
	}
	var mu sync.Mutex
	byID := map[string][]hit{}
	handler := func(member string) bus.Handler {
		return func(ctx context.Context, ev envelope.Event) error {
			mu.Lock()
			defer mu.Unlock()
			byID[ev.ID] = append(byID[ev.ID], hit{member, ev.Partition})
			return nil
		}
	}
	cfg := bus.ConsumerConfig{Brokers: []string{broker}, GroupID: "g", Topics: []string{topic}}
	startConsumer(t, cfg, p, handler("a"))
	startConsumer(t, cfg, p, handler("b"))

	// Publish a round of one record per partition until a round is split
	// between the two members: the group has then rebalanced to both.
	var last map[string]int
	testkit.WaitFor(t, wait, "a round of records handled by both members, each partition by one", func() (bool, error) {
		var round []envelope.Event
		for _, k := range keys {
			round = append(round, event(topic, k, 1))
		}
		publish(t, p, round...)
		deadline := time.Now().Add(5 * time.Second)
		for {
			mu.Lock()
			done := true
			for _, ev := range round {
				done = done && len(byID[ev.ID]) > 0
			}
			mu.Unlock()
			if done {
				break
			}
			if time.Now().After(deadline) {
				return false, nil // a rebalance may hold records back; try another round
			}
			time.Sleep(5 * time.Millisecond) // poll interval
		}
		mu.Lock()
		defer mu.Unlock()
		members := map[string]bool{}
		owner := map[int]string{}
		for _, ev := range round {
			hs := byID[ev.ID]
			if len(hs) != 1 {
				return false, nil // delivered twice across a rebalance: not settled yet
			}
			members[hs[0].member] = true
			owner[hs[0].part] = hs[0].member
		}
		last = map[string]int{}
		for _, m := range owner {
			last[m]++
		}
		return len(members) == 2 && len(owner) == parts, nil
	})
	if last["a"]+last["b"] != parts || last["a"] == 0 || last["b"] == 0 {
		t.Fatalf("partitions per member %v, want all %d split between a and b", last, parts)
	}
	t.Logf("partitions per member: %v", last)
}

func TestRunRejectsBadConfig(t *testing.T) {
	t.Parallel()
	c := bus.NewConsumer(bus.ConsumerConfig{}, nil, nil)
	err := c.Run(context.Background())
	var inv *errs.InvalidError
	if !errors.As(err, &inv) {
		t.Fatalf("Run with empty config: got %v, want InvalidError", err)
	}
	for _, f := range []string{"brokers", "group_id", "topics", "handler"} {
		if !strings.Contains(err.Error(), f) {
			t.Errorf("error %q does not name %s", err, f)
		}
	}
}

func TestConsumerWaitsForTopicsCreatedLater(t *testing.T) {
	t.Parallel()
	broker := startBroker(t)
	topic := "later.v1"
	p := newProducer(t, broker)
	var got seen
	startConsumer(t, bus.ConsumerConfig{Brokers: []string{broker}, GroupID: "g", Topics: []string{topic}}, p,
		func(ctx context.Context, ev envelope.Event) error { got.add(ev); return nil })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := bus.EnsureTopics(ctx, []string{broker}, []topics.Spec{{Name: topic, Partitions: 2}}); err != nil {
		t.Fatal(err)
	}
	ev := event(topic, "k", 1)
	publish(t, p, ev)
	testkit.WaitFor(t, wait, "record on a topic created after the consumer started", func() (bool, error) {
		return got.count(ev.ID) == 1, nil
	})
}

func TestCommitsInTheBackgroundWhileRunning(t *testing.T) {
	t.Parallel()
	cluster, broker := kfakeBroker(t)
	topic := newTopic(t, broker, 1)
	p := newProducer(t, broker)
	commits := countCommits(cluster, "g", topic)
	var handled atomic.Int32
	startConsumer(t, bus.ConsumerConfig{Brokers: []string{broker}, GroupID: "g", Topics: []string{topic}}, p,
		func(ctx context.Context, ev envelope.Event) error { handled.Add(1); return nil })
	const n = 50
	evs := make([]envelope.Event, n)
	for i := range evs {
		evs[i] = event(topic, "k", int32(i))
	}
	publish(t, p, evs...)
	// No stop: the default interval commits what was handled.
	testkit.WaitFor(t, wait, "all records committed while the consumer runs", func() (bool, error) {
		return committed(t, broker, "g", topic, 0) == n, nil
	})
	if got := handled.Load(); got != n {
		t.Errorf("handled %d records, want %d", got, n)
	}
	// Batched: far fewer commit requests than records (the records arrive
	// together, so a few intervals cover them all).
	total := 0
	for _, c := range commits() {
		total += c
	}
	if total >= n {
		t.Errorf("%d offset commits for %d records, want them batched", total, n)
	}
}

func TestCrashRedeliversOnlyTheUncommittedTail(t *testing.T) {
	t.Parallel()
	broker := startBroker(t)
	topic := newTopic(t, broker, 1)
	p := newProducer(t, broker)
	cfg := bus.ConsumerConfig{Brokers: []string{broker}, GroupID: "g", Topics: []string{topic},
		CommitInterval: time.Hour, Logger: testLogger(t)} // nothing commits in the background

	// run runs a consumer until want records were handled, then stops it
	// gracefully or as a crash, and returns the ids it handled.
	run := func(crash bool, want int) []string {
		t.Helper()
		var got seen
		c := bus.NewConsumer(cfg, p, func(ctx context.Context, ev envelope.Event) error { got.add(ev); return nil })
		if crash {
			bus.CrashOnStop(c)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- c.Run(ctx) }()
		testkit.WaitFor(t, wait, fmt.Sprintf("%d records handled", want), func() (bool, error) {
			return len(got.ids()) >= want, nil
		})
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
		case <-time.After(wait):
			t.Fatal("Run did not return after the stop")
		}
		return got.ids()
	}
	ids := func(evs []envelope.Event) []string {
		out := make([]string, len(evs))
		for i, e := range evs {
			out[i] = e.ID
		}
		return out
	}

	first := []envelope.Event{event(topic, "k", 0), event(topic, "k", 1), event(topic, "k", 2)}
	publish(t, p, first...)
	if got := run(false, 3); !slices.Equal(got, ids(first)) {
		t.Fatalf("first consumer handled %v, want %v", got, ids(first))
	}
	// The graceful stop committed what the interval had not.
	if got := committed(t, broker, "g", topic, 0); got != 3 {
		t.Fatalf("committed offset after a graceful stop: %d, want 3", got)
	}

	tail := []envelope.Event{event(topic, "k", 3), event(topic, "k", 4)}
	publish(t, p, tail...)
	if got := run(true, 2); !slices.Equal(got, ids(tail)) {
		t.Fatalf("crashing consumer handled %v, want %v", got, ids(tail))
	}
	if got := committed(t, broker, "g", topic, 0); got != 3 {
		t.Fatalf("committed offset after a crash: %d, want 3 (nothing committed since)", got)
	}

	// The next member gets the uncommitted tail again, and nothing before it.
	marker := event(topic, "k", 5)
	publish(t, p, marker)
	want := append(ids(tail), marker.ID)
	if got := run(false, 3); !slices.Equal(got, want) {
		t.Fatalf("after the crash the group redelivered %v, want exactly the uncommitted tail and the new record %v", got, want)
	}
}

func TestBatchHandlerTakesWaitingRecordsAndFallsBackOneByOne(t *testing.T) {
	t.Parallel()
	_, broker := kfakeBroker(t)
	topic := newTopic(t, broker, 1)
	p := newProducer(t, broker)

	const n = 300
	evs := make([]envelope.Event, n)
	for i := range evs {
		evs[i] = event(topic, "k", int32(i))
	}
	poison := evs[n/2].ID // any batch holding it is refused
	publish(t, p, evs...)

	var mu sync.Mutex
	var order []string // ids in the order they were handled for good
	var sizes []int
	single := func(ctx context.Context, ev envelope.Event) error {
		mu.Lock()
		defer mu.Unlock()
		order = append(order, ev.ID)
		return nil
	}
	batch := func(ctx context.Context, b []envelope.Event) error {
		mu.Lock()
		defer mu.Unlock()
		sizes = append(sizes, len(b))
		for _, ev := range b {
			if ev.ID == poison {
				return errors.New("refused")
			}
		}
		for _, ev := range b {
			order = append(order, ev.ID)
		}
		return nil
	}
	c := bus.NewConsumer(bus.ConsumerConfig{Brokers: []string{broker}, GroupID: "g", Topics: []string{topic},
		Logger: testLogger(t)}, p, single).WithBatch(batch, 64)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	testkit.WaitFor(t, wait, "every record committed", func() (bool, error) {
		return committed(t, broker, "g", topic, 0) == n, nil
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(order) != n {
		t.Fatalf("%d records handled for good, want %d (each exactly once)", len(order), n)
	}
	for i, id := range order {
		if id != evs[i].ID {
			t.Fatalf("record %d handled out of order: got %s, want %s", i, id, evs[i].ID)
		}
	}
	most := 0
	for _, s := range sizes {
		if s > 64 {
			t.Fatalf("a batch of %d records, above the bound of 64", s)
		}
		most = max(most, s)
	}
	if most < 2 {
		t.Fatalf("no batch held more than one record (sizes %v): the waiting records were not batched", sizes)
	}
}

// A consumer whose Filter takes one key hands over only records with that
// key, in order, and commits the others without decoding them: a malformed
// record under another key is passed over, not dead-lettered.
func TestFilterPassesOverOtherKeysUndecoded(t *testing.T) {
	t.Parallel()
	for _, batched := range []bool{false, true} {
		t.Run(fmt.Sprintf("batched=%v", batched), func(t *testing.T) {
			t.Parallel()
			_, broker := kfakeBroker(t)
			topic := newTopic(t, broker, 1)
			p := newProducer(t, broker)

			const n = 120
			var want []string
			var evs []envelope.Event
			for i := 0; i < n; i++ {
				key := []string{"mine", "other", "third"}[i%3]
				ev := event(topic, key, int32(i))
				evs = append(evs, ev)
				if key == "mine" {
					want = append(want, ev.ID)
				}
			}
			publish(t, p, evs...)
			// Not an envelope at all: decoding it would dead-letter it.
			w := &kafka.Writer{Addr: kafka.TCP(broker), Topic: topic}
			if err := w.WriteMessages(context.Background(), kafka.Message{Key: []byte("other"), Value: []byte("not an event")}); err != nil {
				t.Fatal(err)
			}
			w.Close()
			last := event(topic, "mine", n)
			publish(t, p, last)
			want = append(want, last.ID)

			var got seen
			h := func(ctx context.Context, ev envelope.Event) error { got.add(ev); return nil }
			c := bus.NewConsumer(bus.ConsumerConfig{Brokers: []string{broker}, GroupID: "g", Topics: []string{topic},
				Filter: func(r bus.Record) bool { return r.Key == "mine" }, Logger: testLogger(t)}, p, h)
			if batched {
				c.WithBatch(func(ctx context.Context, b []envelope.Event) error {
					for _, ev := range b {
						if ev.Key != "mine" {
							return fmt.Errorf("batch got key %q", ev.Key)
						}
						got.add(ev)
					}
					return nil
				}, 16)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- c.Run(ctx) }()
			testkit.WaitFor(t, wait, "every record committed", func() (bool, error) {
				return committed(t, broker, "g", topic, 0) == n+2, nil
			})
			cancel()
			if err := <-done; err != nil {
				t.Fatalf("Run: %v", err)
			}
			if ids := got.ids(); !slices.Equal(ids, want) {
				t.Fatalf("handled %d records %v, want the %d with key mine in order %v", len(ids), ids, len(want), want)
			}
			if dl := records(t, broker, topic+topics.DLQSuffix, 1); dl != 0 {
				t.Fatalf("%d records dead-lettered; another key's record must be passed over", dl)
			}
		})
	}
}

// Filter sees each record's topic, key, type and subject before it is
// decoded; what it refuses is committed, not handled.
func TestFilterSeesTypeAndSubjectBeforeDecoding(t *testing.T) {
	t.Parallel()
	_, broker := kfakeBroker(t)
	topic := newTopic(t, broker, 1)
	p := newProducer(t, broker)

	var want []string
	var evs []envelope.Event
	for i := 0; i < 30; i++ {
		ev := event(topic, "k", int32(i))
		ev.Subject = []string{"keep", "drop", "keep-too"}[i%3]
		evs = append(evs, ev)
		if ev.Subject != "drop" {
			want = append(want, ev.ID)
		}
	}
	publish(t, p, evs...)
	var got seen
	var mu sync.Mutex
	var asked []bus.Record
	c := bus.NewConsumer(bus.ConsumerConfig{Brokers: []string{broker}, GroupID: "g", Topics: []string{topic}, Logger: testLogger(t),
		Filter: func(r bus.Record) bool {
			mu.Lock()
			asked = append(asked, r)
			mu.Unlock()
			return r.Subject != "drop"
		}}, p, func(ctx context.Context, ev envelope.Event) error { got.add(ev); return nil })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	testkit.WaitFor(t, wait, "every record committed", func() (bool, error) {
		return committed(t, broker, "g", topic, 0) == int64(len(evs)), nil
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if ids := got.ids(); !slices.Equal(ids, want) {
		t.Fatalf("handled %v, want the records not refused, in order: %v", ids, want)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(asked) < len(evs) {
		t.Fatalf("Filter asked %d times for %d records", len(asked), len(evs))
	}
	if r := asked[0]; r.Topic != topic || r.Key != "k" || r.Type != evs[0].Type || r.Subject != "keep" {
		t.Fatalf("Filter saw %+v, want topic %s, key k, type %s, subject keep", r, topic, evs[0].Type)
	}
}

// TestPartitionKeyReadsOnlyTheKeysPartition checks that a group with a
// PartitionKey reads the one partition the producer puts that key's records
// in, and never another: a malformed record in another partition, which
// reading would dead-letter, stays unread and uncommitted.
func TestPartitionKeyReadsOnlyTheKeysPartition(t *testing.T) {
	t.Parallel()
	_, broker := kfakeBroker(t)
	const parts = 8
	topic := newTopic(t, broker, parts)
	p := newProducer(t, broker)
	mine := bus.PartitionOf("mine", parts)
	other := ""
	for i := 0; other == ""; i++ {
		if k := fmt.Sprintf("other-%d", i); bus.PartitionOf(k, parts) != mine {
			other = k
		}
	}
	var want []string
	for i := 0; i < 10; i++ {
		mineEv, otherEv := event(topic, "mine", int32(i)), event(topic, other, int32(i))
		publish(t, p, otherEv, mineEv)
		want = append(want, mineEv.ID)
	}
	w := &kafka.Writer{Addr: kafka.TCP(broker), Topic: topic, Balancer: kafka.Murmur2Balancer{}, RequiredAcks: kafka.RequireAll}
	if err := w.WriteMessages(context.Background(), kafka.Message{Key: []byte(other), Value: []byte("not an event")}); err != nil {
		t.Fatal(err)
	}
	w.Close()
	if n := records(t, broker, topic, parts); n != 21 {
		t.Fatalf("%d records on the topic, want 21", n)
	}

	var got seen
	r := startConsumer(t, bus.ConsumerConfig{Brokers: []string{broker}, GroupID: "g", Topics: []string{topic},
		PartitionKey: "mine", Logger: testLogger(t)}, p, func(ctx context.Context, ev envelope.Event) error {
		got.add(ev)
		return nil
	})
	testkit.WaitFor(t, wait, "the key's records committed", func() (bool, error) {
		return committed(t, broker, "g", topic, mine) == int64(len(want)), nil
	})
	if err := r.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if ids := got.ids(); !slices.Equal(ids, want) {
		t.Fatalf("handled %v, want only key mine's records in order %v", ids, want)
	}
	for part := 0; part < parts; part++ {
		if off := committed(t, broker, "g", topic, part); part != mine && off >= 0 {
			t.Errorf("partition %d (not the key's) has committed offset %d: it was read", part, off)
		}
	}
	if dl := records(t, broker, topic+topics.DLQSuffix, 1); dl != 0 {
		t.Fatalf("%d records dead-lettered: another partition's malformed record was read", dl)
	}
}

// TestKeyBalancerGivesTheNewestMember: a PartitionKey group's one
// partition of each topic goes to the newest member subscribed to it (the
// latest born, then the greatest id), whatever order the ids sort in, and
// no other partition goes to anyone.
func TestKeyBalancerGivesTheNewestMember(t *testing.T) {
	t.Parallel()
	born := func(at int64) []byte {
		b, err := bus.KeyBalancer("k", at).UserData()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	const parts = 8
	var partitions []kafka.Partition
	for i := 0; i < parts; i++ {
		partitions = append(partitions, kafka.Partition{Topic: "a", ID: i}, kafka.Partition{Topic: "b", ID: i})
	}
	both := []string{"a", "b"}
	for _, tc := range []struct {
		name    string
		members []kafka.GroupMember
		a, b    string // the member each topic's partition must go to
	}{
		{"the newest though its id sorts last", []kafka.GroupMember{
			{ID: "a-old", Topics: both, UserData: born(1)}, {ID: "z-new", Topics: both, UserData: born(2)}}, "z-new", "z-new"},
		{"the newest though its id sorts first", []kafka.GroupMember{
			{ID: "a-new", Topics: both, UserData: born(9)}, {ID: "z-old", Topics: both, UserData: born(2)}}, "a-new", "a-new"},
		{"no user data is older than any", []kafka.GroupMember{
			{ID: "z-unknown", Topics: both}, {ID: "a", Topics: both, UserData: born(5)}}, "a", "a"},
		{"malformed user data is older than any", []kafka.GroupMember{
			{ID: "z-bad", Topics: both, UserData: []byte("late")}, {ID: "a", Topics: both, UserData: born(5)}}, "a", "a"},
		{"born together: the greatest id", []kafka.GroupMember{
			{ID: "m1", Topics: both, UserData: born(3)}, {ID: "m2", Topics: both, UserData: born(3)}}, "m2", "m2"},
		{"only a subscriber of the topic", []kafka.GroupMember{
			{ID: "old", Topics: both, UserData: born(1)}, {ID: "new", Topics: []string{"a"}, UserData: born(2)}}, "new", "old"},
	} {
		got := bus.KeyBalancer("k", 0).AssignGroups(tc.members, partitions)
		for topic, to := range map[string]string{"a": tc.a, "b": tc.b} {
			for _, m := range tc.members {
				ps := got[m.ID][topic]
				switch {
				case m.ID == to && !slices.Equal(ps, []int{bus.PartitionOf("k", parts)}):
					t.Errorf("%s: %s gets %v of %s, want only the key's partition %d", tc.name, m.ID, ps, topic, bus.PartitionOf("k", parts))
				case m.ID != to && len(ps) > 0:
					t.Errorf("%s: %s gets %v of %s, want none (it goes to %s)", tc.name, m.ID, ps, topic, to)
				}
			}
		}
	}
}

// TestPartitionKeyNewestMemberReads: a restarted agent joins a group its
// killed predecessor is still a member of (the broker has not timed it
// out) and reads its key's records at once, though the old member's id
// sorts first. The predecessor here stays in the group (it heartbeats and
// rejoins) and never fetches, as a member the broker keeps does not.
func TestPartitionKeyNewestMemberReads(t *testing.T) {
	t.Parallel()
	_, broker := kfakeBroker(t)
	const parts = 8
	topic := newTopic(t, broker, parts)
	mine := bus.PartitionOf("mine", parts)
	ctx := testkit.Context(t, 2*time.Minute)
	old, err := kafka.NewConsumerGroup(kafka.ConsumerGroupConfig{ID: "g", Brokers: []string{broker}, Topics: []string{topic},
		GroupBalancers: []kafka.GroupBalancer{bus.KeyBalancer("mine", 1)},
		// Its member id begins "0-": it sorts before the new member's.
		Dialer:            &kafka.Dialer{ClientID: "0-predecessor", Timeout: 10 * time.Second},
		HeartbeatInterval: 200 * time.Millisecond, SessionTimeout: time.Minute, RebalanceTimeout: 10 * time.Second,
		JoinGroupBackoff: 100 * time.Millisecond, StartOffset: kafka.FirstOffset})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = old.Close() })
	gens := make(chan *kafka.Generation, 16)
	go func() {
		for {
			g, err := old.Next(ctx)
			if err != nil {
				return
			}
			gens <- g
		}
	}()
	var last *kafka.Generation
	select {
	case last = <-gens:
	case <-ctx.Done():
		t.Fatal("the old member never joined")
	}
	if a := last.Assignments[topic]; len(a) != 1 || a[0].ID != mine {
		t.Fatalf("the old member alone holds %v, want partition %d", a, mine)
	}
	p := newProducer(t, broker)
	var want []string
	for i := 0; i < 5; i++ {
		ev := event(topic, "mine", int32(i))
		publish(t, p, ev)
		want = append(want, ev.ID)
	}
	var got seen
	startConsumer(t, bus.ConsumerConfig{Brokers: []string{broker}, GroupID: "g", Topics: []string{topic},
		PartitionKey: "mine", Logger: testLogger(t)}, p, func(ctx context.Context, ev envelope.Event) error {
		got.add(ev)
		return nil
	})
	testkit.WaitFor(t, wait, "the new member handles the key's records", func() (bool, error) {
		return len(got.ids()) >= len(want), nil
	})
	if ids := got.ids(); !slices.Equal(ids, want) {
		t.Fatalf("handled %v, want %v", ids, want)
	}
	for len(gens) > 0 {
		last = <-gens
	}
	if a := last.Assignments[topic]; len(a) != 0 {
		t.Fatalf("the old member still holds %v after the new one joined", a)
	}
}

// TestSoleMemberRemovesADeadPredecessor: a member that joined the group and
// then died (it never heartbeats again, as a SIGKILLed agent's) holds up
// the group's rebalance for its session, here 5 minutes. A SoleMember
// consumer removes it first and reads within the test's usual wait.
func TestSoleMemberRemovesADeadPredecessor(t *testing.T) {
	t.Parallel()
	_, broker := kfakeBroker(t)
	const parts = 4
	topic := newTopic(t, broker, parts)
	ctx := testkit.Context(t, 2*time.Minute)
	client := &kafka.Client{Addr: kafka.TCP(broker), Transport: &kafka.Transport{}, Timeout: 10 * time.Second}
	// The dead predecessor: joined and synced as kafka-go's group member
	// would, then silent.
	join := &kafka.JoinGroupRequest{GroupID: "g", SessionTimeout: 5 * time.Minute, RebalanceTimeout: 5 * time.Minute,
		ProtocolType: "consumer", Protocols: []kafka.GroupProtocol{{Name: "loom-key",
			Metadata: kafka.GroupProtocolSubscription{Topics: []string{topic}}}}}
	jr, err := client.JoinGroup(ctx, join)
	if err == nil && errors.Is(jr.Error, kafka.MemberIDRequired) {
		join.MemberID = jr.MemberID
		jr, err = client.JoinGroup(ctx, join)
	}
	if err == nil {
		err = jr.Error
	}
	if err != nil {
		t.Fatalf("the predecessor's join: %v", err)
	}
	sr, err := client.SyncGroup(ctx, &kafka.SyncGroupRequest{GroupID: "g", GenerationID: jr.GenerationID, MemberID: jr.MemberID,
		ProtocolType: "consumer", ProtocolName: "loom-key", Assignments: []kafka.SyncGroupRequestAssignment{{MemberID: jr.MemberID,
			Assignment: kafka.GroupProtocolAssignment{AssignedPartitions: map[string][]int{topic: {bus.PartitionOf("mine", parts)}}}}}})
	if err == nil {
		err = sr.Error
	}
	if err != nil {
		t.Fatalf("the predecessor's sync: %v", err)
	}

	p := newProducer(t, broker)
	ev := event(topic, "mine", 1)
	publish(t, p, ev)
	var got seen
	startConsumer(t, bus.ConsumerConfig{Brokers: []string{broker}, GroupID: "g", Topics: []string{topic},
		PartitionKey: "mine", SoleMember: true, Logger: testLogger(t)}, p, func(ctx context.Context, ev envelope.Event) error {
		got.add(ev)
		return nil
	})
	testkit.WaitFor(t, wait, "the sole member handles the key's record", func() (bool, error) {
		return len(got.ids()) > 0, nil
	})
	if ids := got.ids(); !slices.Equal(ids, []string{ev.ID}) {
		t.Fatalf("handled %v, want [%s]", ids, ev.ID)
	}
	desc, err := client.DescribeGroups(ctx, &kafka.DescribeGroupsRequest{GroupIDs: []string{"g"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range desc.Groups[0].Members {
		if m.MemberID == jr.MemberID {
			t.Fatalf("the dead predecessor %s is still in the group", jr.MemberID)
		}
	}
}

func TestPartitionOf(t *testing.T) {
	t.Parallel()
	if got := bus.PartitionOf("anything", 1); got != 0 {
		t.Fatalf("one partition: %d", got)
	}
	hit := map[int]bool{}
	for i := 0; i < 200; i++ {
		k := fmt.Sprintf("projects/p/clusters/c/nodes/gpu-%04d", i)
		part := bus.PartitionOf(k, 32)
		if part < 0 || part >= 32 || part != bus.PartitionOf(k, 32) {
			t.Fatalf("PartitionOf(%s, 32) = %d: out of range or not stable", k, part)
		}
		hit[part] = true
	}
	if len(hit) < 24 {
		t.Fatalf("200 node names fell in %d of 32 partitions", len(hit))
	}
}

// TestTailReadsWhatComesAfterReadyAndLeavesNoGroup checks that Tail hands
// over every record written after Ready, from every partition, passes over
// what its filter refuses and what does not decode, never what came before,
// and leaves no consumer group behind.
func TestTailReadsWhatComesAfterReadyAndLeavesNoGroup(t *testing.T) {
	t.Parallel()
	_, broker := kfakeBroker(t)
	topic := newTopic(t, broker, 4)
	p := newProducer(t, broker)
	publish(t, p, event(topic, "before-a", 1), event(topic, "before-b", 2))

	var got seen
	ready := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- bus.Tail(ctx, bus.TailConfig{Brokers: []string{broker}, Topic: topic, Logger: testLogger(t),
			Filter: func(r bus.Record) bool { return r.Key != "refused" }, Ready: func() { close(ready) }},
			func(_ context.Context, ev envelope.Event) { got.add(ev) })
	}()
	t.Cleanup(cancel)
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("Tail returned before Ready: %v", err)
	case <-time.After(wait):
		t.Fatal("Tail not ready")
	}
	var want []string
	for i := 0; i < 12; i++ {
		ev := event(topic, fmt.Sprintf("key-%d", i), int32(i))
		want = append(want, ev.ID)
		publish(t, p, ev)
	}
	publish(t, p, event(topic, "refused", 99))
	w := &kafka.Writer{Addr: kafka.TCP(broker), Topic: topic, Balancer: kafka.Murmur2Balancer{}, RequiredAcks: kafka.RequireAll}
	if err := w.WriteMessages(context.Background(), kafka.Message{Key: []byte("bad"), Value: []byte("not an event")}); err != nil {
		t.Fatal(err)
	}
	w.Close()
	last := event(topic, "key-0", 100) // after the refused one, in the partition of key-0
	want = append(want, last.ID)
	publish(t, p, last)
	testkit.WaitFor(t, wait, "every record after Ready", func() (bool, error) { return len(got.ids()) >= len(want), nil })
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Tail after cancel = %v, want nil", err)
	}
	gotIDs := got.ids()
	slices.Sort(gotIDs)
	slices.Sort(want)
	if !slices.Equal(gotIDs, want) {
		t.Fatalf("tail handled %v, want exactly the records after Ready %v", gotIDs, want)
	}
	client := &kafka.Client{Addr: kafka.TCP(broker)}
	groups, err := client.ListGroups(context.Background(), &kafka.ListGroupsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(groups.Groups) != 0 {
		t.Fatalf("Tail left consumer groups behind: %v", groups.Groups)
	}
	if err := bus.Tail(context.Background(), bus.TailConfig{Brokers: []string{broker}, Topic: "no-such-topic"},
		func(context.Context, envelope.Event) {}); err == nil {
		t.Fatal("Tail of a topic that does not exist returned nil")
	}
	if err := bus.Tail(context.Background(), bus.TailConfig{Topic: topic}, nil); err == nil ||
		!strings.Contains(err.Error(), "brokers") || !strings.Contains(err.Error(), "handle") {
		t.Fatalf("Tail without brokers or handle = %v, want an error naming both", err)
	}
}

// A producer closes at once when nothing is pending; one whose broker went
// away with a record pending (its Publish gave up on its context) closes
// within CloseWithin's bound, saying the record was abandoned, instead of
// waiting out the writer's retries.
func TestCloseWithinBoundsTheFlushToAGoneBroker(t *testing.T) {
	t.Parallel()
	c, broker := kfakeBroker(t)
	topic := newTopic(t, broker, 1)
	ctx := testkit.Context(t, wait)
	clean := bus.NewProducer([]string{broker})
	if err := clean.Publish(ctx, event(topic, "k", 1)); err != nil {
		t.Fatal(err)
	}
	if err := clean.CloseWithin(wait); err != nil {
		t.Fatalf("CloseWithin with nothing pending = %v, want nil", err)
	}

	p := bus.NewProducer([]string{broker})
	if err := p.Publish(ctx, event(topic, "k", 2)); err != nil {
		t.Fatal(err)
	}
	c.Close()
	pctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if err := p.Publish(pctx, event(topic, "k", 3)); err == nil {
		t.Fatal("Publish to a broker that is gone succeeded")
	}
	const bound = 500 * time.Millisecond
	start := time.Now()
	err := p.CloseWithin(bound)
	if took := time.Since(start); err == nil || !strings.Contains(err.Error(), "abandoned") || took > bound+2*time.Second {
		t.Fatalf("CloseWithin(%s) with a record pending for a gone broker = %v after %s; want the abandoned records named, within the bound", bound, err, took)
	}
}

// A session timeout out of bounds is refused with the field named, before
// anything is dialled.
func TestRunRejectsSessionTimeoutOutOfBounds(t *testing.T) {
	t.Parallel()
	h := func(context.Context, envelope.Event) error { return nil }
	for _, d := range []time.Duration{-time.Second, bus.MinSessionTimeout - time.Millisecond, bus.MaxSessionTimeout + time.Millisecond} {
		c := bus.NewConsumer(bus.ConsumerConfig{Brokers: []string{"127.0.0.1:1"}, GroupID: "g", Topics: []string{"t"}, SessionTimeout: d}, nil, h)
		err := c.Run(context.Background())
		var inv *errs.InvalidError
		if !errors.As(err, &inv) || len(inv.Violations) != 1 || inv.Violations[0].Field != "session_timeout" {
			t.Errorf("Run with SessionTimeout %v = %v, want InvalidArgument on session_timeout", d, err)
		}
	}
}

// A consumer joins its group with the session timeout it was given (the
// default when unset): how long a killed member holds its partitions. It
// heartbeats at most a third of it apart, so that a live one is evicted
// only after three heartbeats were lost.
func TestConsumerJoinsWithItsSessionTimeout(t *testing.T) {
	t.Parallel()
	if embedded.GroupMinSessionTimeout > bus.MinSessionTimeout {
		t.Fatalf("the embedded broker refuses session timeouts under %v, which consumers may ask for from %v",
			embedded.GroupMinSessionTimeout, bus.MinSessionTimeout)
	}
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(bus.MinSessionTimeout))
	if err != nil {
		t.Fatalf("start kfake: %v", err)
	}
	t.Cleanup(cluster.Close)
	broker := cluster.ListenAddrs()[0]
	topic := newTopic(t, broker, 1)
	var mu sync.Mutex
	joins := map[string]int32{} // group: the session timeout its member asked for, ms
	cluster.ControlKey(int16(kmsg.JoinGroup), func(req kmsg.Request) (kmsg.Response, error, bool) {
		j := req.(*kmsg.JoinGroupRequest)
		mu.Lock()
		joins[j.Group] = j.SessionTimeoutMillis
		mu.Unlock()
		return nil, nil, false
	})
	p := newProducer(t, broker)
	for _, c := range []struct {
		group string
		set   time.Duration
		want  time.Duration
	}{
		{"default", 0, bus.DefaultSessionTimeout},
		{"shortest", bus.MinSessionTimeout, bus.MinSessionTimeout},
		{"short", 3 * time.Second, 3 * time.Second},
	} {
		t.Run(c.group, func(t *testing.T) {
			t.Parallel()
			var got seen
			startConsumer(t, bus.ConsumerConfig{Brokers: []string{broker}, GroupID: c.group, Topics: []string{topic}, SessionTimeout: c.set}, p,
				func(_ context.Context, ev envelope.Event) error { got.add(ev); return nil })
			publish(t, p, event(topic, c.group, 1))
			testkit.WaitFor(t, wait, "the group reading", func() (bool, error) { return len(got.ids()) > 0, nil })
			mu.Lock()
			defer mu.Unlock()
			if ms := joins[c.group]; time.Duration(ms)*time.Millisecond != c.want {
				t.Errorf("joined with a session timeout of %d ms, want %v", ms, c.want)
			}
			if h := bus.HeartbeatFor(c.want); h > c.want/3 {
				t.Errorf("heartbeats %v apart, want at most a third of %v", h, c.want)
			}
		})
	}
}
