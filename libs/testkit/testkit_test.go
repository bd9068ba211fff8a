package testkit

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
)

func TestBrokerHasAllTopics(t *testing.T) {
	t.Parallel()
	addr := Broker(t)
	md, err := newClient(addr).Metadata(Context(t, 10*time.Second), &kafka.MetadataRequest{})
	if err != nil {
		t.Fatalf("metadata: %v", err)
	}
	have := map[string]int{}
	for _, tp := range md.Topics {
		have[tp.Name] = len(tp.Partitions)
	}
	for _, s := range topics.All() {
		if have[s.Name] != s.Partitions {
			t.Errorf("topic %s has %d partitions, want %d", s.Name, have[s.Name], s.Partitions)
		}
	}
}

func TestCreateTopicsIsIdempotent(t *testing.T) {
	t.Parallel()
	addr := BrokerWith(t, topics.Spec{Name: "t1", Partitions: 2})
	if err := CreateTopics(Context(t, 10*time.Second), addr, topics.Spec{Name: "t1", Partitions: 2}); err != nil {
		t.Fatalf("second CreateTopics: %v", err)
	}
}

func TestRedis(t *testing.T) {
	t.Parallel()
	addr, c := Redis(t)
	ctx := Context(t, 10*time.Second)
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	if got, err := c.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("GET = %q, %v", got, err)
	}
	if c.Options().Addr != addr {
		t.Fatalf("client addr %q, want %q", c.Options().Addr, addr)
	}
}

func TestRedisIsolatedPerTest(t *testing.T) {
	t.Parallel()
	_, a := Redis(t)
	_, b := Redis(t)
	ctx := Context(t, 10*time.Second)
	if err := a.Set(ctx, "only-in-a", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := b.Exists(ctx, "only-in-a").Result(); err != nil || n != 0 {
		t.Fatalf("second Redis sees the first one's key: %d, %v", n, err)
	}
}

func TestFreeAddr(t *testing.T) {
	t.Parallel()
	addr := FreeAddr()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen on FreeAddr %s: %v", addr, err)
	}
	ln.Close()
}

func TestWaitForReturnsWhenTrue(t *testing.T) {
	t.Parallel()
	calls := 0
	WaitFor(t, 5*time.Second, "third call", func() (bool, error) {
		calls++
		return calls == 3, nil
	})
	if calls != 3 {
		t.Fatalf("cond called %d times, want 3", calls)
	}
}

// recorder captures Fatalf so that WaitFor's failures can be checked.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = fmt.Sprintf(format, args...)
	panic(r)
}

func (r *recorder) Helper() {}

func failure(f func(tb testing.TB)) (msg string) {
	r := &recorder{}
	defer func() {
		if p := recover(); p != nil && p != any(r) {
			panic(p)
		}
		msg = r.failed
	}()
	f(r)
	return ""
}

func TestWaitForFails(t *testing.T) {
	t.Parallel()
	msg := failure(func(tb testing.TB) {
		WaitFor(tb, 30*time.Millisecond, "never", func() (bool, error) { return false, nil })
	})
	if msg == "" {
		t.Fatal("WaitFor did not fail on timeout")
	}
	msg = failure(func(tb testing.TB) {
		WaitFor(tb, time.Minute, "error", func() (bool, error) { return false, fmt.Errorf("boom") })
	})
	if msg == "" {
		t.Fatal("WaitFor did not fail on a cond error")
	}
}

func heartbeat(node string) envelope.Event {
	return envelope.New(topics.NodeTelemetry, node, "loom/test", &eventsv1.Heartbeat{Node: node})
}

func TestPublishAndWaitEvent(t *testing.T) {
	t.Parallel()
	broker := Broker(t)
	// Keys spread over partitions; WaitEvent must read them all.
	var evs []envelope.Event
	for i := range 8 {
		evs = append(evs, heartbeat(fmt.Sprintf("n-%d", i)))
	}
	Publish(t, broker, evs...)
	// An undecodable record is skipped, not fatal.
	w := &kafka.Writer{Addr: kafka.TCP(broker), Topic: topics.NodeTelemetry, BatchTimeout: time.Millisecond}
	if err := w.WriteMessages(Context(t, 10*time.Second), kafka.Message{Value: []byte("junk")}); err != nil {
		t.Fatal(err)
	}
	w.Close()

	for _, want := range evs {
		got := WaitEvent(t, broker, topics.NodeTelemetry, 10*time.Second, func(e envelope.Event) bool {
			return e.ID == want.ID
		})
		hb, ok := got.Payload.(*eventsv1.Heartbeat)
		if !ok || hb.GetNode() != want.Key || got.Key != want.Key {
			t.Fatalf("got %T %v key %q, want heartbeat of %s", got.Payload, got.Payload, got.Key, want.Key)
		}
	}
	all := Events(t, broker, topics.NodeTelemetry)
	if len(all) != len(evs) {
		t.Fatalf("Events returned %d, want %d", len(all), len(evs))
	}
	// Messages has every record as stored, the undecodable one too.
	raw := Messages(t, broker, topics.NodeTelemetry)
	junk := 0
	for _, m := range raw {
		if string(m.Value) == "junk" {
			junk++
		}
	}
	if len(raw) != len(evs)+1 || junk != 1 {
		t.Fatalf("Messages returned %d records (%d junk), want %d and the junk one", len(raw), junk, len(evs)+1)
	}
	if empty := Events(t, broker, topics.NodeEvents); len(empty) != 0 {
		t.Fatalf("Events of an empty topic returned %d", len(empty))
	}
}

func TestWaitEventSeesLaterEvent(t *testing.T) {
	t.Parallel()
	broker := Broker(t)
	want := heartbeat("late")
	written := make(chan error, 1)
	go func() {
		// Written concurrently with WaitEvent's reading; Publish reports
		// failures through t, which belongs to the test goroutine.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		m, err := envelope.Encode(want)
		if err == nil {
			w := &kafka.Writer{Addr: kafka.TCP(broker), Topic: m.Topic, BatchTimeout: time.Millisecond}
			m.Topic = ""
			err = w.WriteMessages(ctx, m)
			w.Close()
		}
		written <- err
	}()
	got := WaitEvent(t, broker, topics.NodeTelemetry, 10*time.Second, func(e envelope.Event) bool {
		return e.ID == want.ID
	})
	if err := <-written; err != nil {
		t.Fatalf("write: %v", err)
	}
	if got.Type != "loom.events.v1.Heartbeat" {
		t.Fatalf("Type = %q", got.Type)
	}
}

func TestWaitEventTimesOut(t *testing.T) {
	t.Parallel()
	broker := Broker(t)
	Publish(t, broker, heartbeat("x"))
	start := time.Now()
	msg := failure(func(tb testing.TB) {
		WaitEvent(tb, broker, topics.NodeTelemetry, 300*time.Millisecond, func(envelope.Event) bool { return false })
	})
	if msg == "" {
		t.Fatal("WaitEvent did not fail when nothing matched")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("WaitEvent took %v to time out after 300ms", d)
	}
}

// TestServiceStop: Stop cancels the service's context, returns what it
// returned, and says the same on a second call.
func TestServiceStop(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	s := Start(t, "svc", func(ctx context.Context) error {
		<-ctx.Done()
		return boom
	})
	select {
	case <-s.Done():
		t.Fatal("service returned before Stop")
	default:
	}
	if err := s.Stop(); !errors.Is(err, boom) || !strings.Contains(err.Error(), "svc") {
		t.Fatalf("Stop = %v, want boom named svc", err)
	}
	if err := s.Stop(); !errors.Is(err, boom) {
		t.Fatalf("second Stop = %v, want the same", err)
	}
}

// TestServiceEarlyExit: a service that returns on its own closes Done and
// reports its error through Err, which is nil while it runs.
func TestServiceEarlyExit(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	bad := errors.New("bad config")
	s := Start(t, "svc", func(context.Context) error {
		<-release
		return bad
	})
	if err := s.Err(); err != nil {
		t.Fatalf("Err while running = %v", err)
	}
	close(release)
	<-s.Done()
	if err := s.Err(); !errors.Is(err, bad) {
		t.Fatalf("Err = %v, want bad config", err)
	}
	if err := s.Stop(); !errors.Is(err, bad) {
		t.Fatalf("Stop = %v", err)
	}
}
