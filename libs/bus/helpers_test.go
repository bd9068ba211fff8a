package bus_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/bus"
	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
)

// startBroker starts a broker for the test, without topics: each test creates
// its own with EnsureTopics.
func startBroker(t testing.TB) string {
	t.Helper()
	return testkit.BrokerWith(t)
}

// kfakeBroker starts a one-broker kfake cluster on a loopback port for the
// test and returns it too, for tests that observe requests with Control.
func kfakeBroker(t testing.TB) (*kfake.Cluster, string) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatalf("start kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return c, c.ListenAddrs()[0]
}

var topicSeq atomic.Int64

// newTopic creates a uniquely named topic with partitions partitions and its
// one-partition dead-letter topic, and returns the topic's name.
func newTopic(t testing.TB, broker string, partitions int) string {
	t.Helper()
	name := fmt.Sprintf("test.%s.%d", strings.ReplaceAll(strings.ToLower(t.Name()), "/", "."), topicSeq.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	err := bus.EnsureTopics(ctx, []string{broker}, []topics.Spec{
		{Name: name, Partitions: partitions},
		{Name: name + topics.DLQSuffix, Partitions: 1},
	})
	if err != nil {
		t.Fatalf("ensure topics: %v", err)
	}
	return name
}

func newProducer(t testing.TB, broker string) *bus.Producer {
	t.Helper()
	p := bus.NewProducer([]string{broker})
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("close producer: %v", err)
		}
	})
	return p
}

// testLogger writes the consumer's reports to the test log. Consumers are
// stopped (and their Run has returned) before the test ends, so nothing logs
// after it.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// running is a consumer started by startConsumer.
type running struct {
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
}

// stop cancels the consumer's context and returns what Run returned; it fails
// the test when Run does not return within 20 s.
func (r *running) stop(t testing.TB) error {
	t.Helper()
	r.once.Do(func() {
		r.cancel()
		select {
		case r.err = <-r.done:
		case <-time.After(20 * time.Second):
			r.err = errors.New("Run did not return within 20s of the stop")
		}
	})
	return r.err
}

func startConsumer(t testing.TB, cfg bus.ConsumerConfig, dlq *bus.Producer, h bus.Handler) *running {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = testLogger(t)
	}
	c := bus.NewConsumer(cfg, dlq, h)
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- c.Run(ctx) }()
	t.Cleanup(func() {
		if err := r.stop(t); err != nil {
			t.Errorf("consumer Run: %v", err)
		}
	})
	return r
}

// event returns a Heartbeat event for topic with key.
func event(topic, key string, steps int32) envelope.Event {
	return envelope.New(topic, key, "loom/test", &eventsv1.Heartbeat{Node: key, Cluster: "c1", RunningSteps: steps})
}

func publish(t testing.TB, p *bus.Producer, evs ...envelope.Event) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Publish(ctx, evs...); err != nil {
		t.Fatalf("publish: %v", err)
	}
}

// readN reads n records from partition 0 of topic from its start, without a
// group, failing the test after timeout.
func readN(t testing.TB, broker, topic string, n int, timeout time.Duration) []kafka.Message {
	t.Helper()
	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers: []string{broker}, Topic: topic, Partition: 0,
		MaxWait: 100 * time.Millisecond,
	})
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var out []kafka.Message
	for len(out) < n {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			t.Fatalf("read %s: got %d of %d records: %v", topic, len(out), n, err)
		}
		out = append(out, m)
	}
	return out
}

// records returns how many records topic holds, over all its partitions.
func records(t testing.TB, broker, topic string, partitions int) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	transport := &kafka.Transport{}
	defer transport.CloseIdleConnections()
	client := &kafka.Client{Addr: kafka.TCP(broker), Transport: transport}
	var reqs []kafka.OffsetRequest
	for p := range partitions {
		reqs = append(reqs, kafka.LastOffsetOf(p), kafka.FirstOffsetOf(p))
	}
	resp, err := client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: reqs}})
	if err != nil {
		t.Fatalf("list offsets of %s: %v", topic, err)
	}
	var n int64
	for _, po := range resp.Topics[topic] {
		if po.Error != nil {
			t.Fatalf("list offsets of %s[%d]: %v", topic, po.Partition, po.Error)
		}
		n += po.LastOffset - po.FirstOffset
	}
	return n
}

// committed returns the group's committed offset for topic's partition (-1: none).
func committed(t testing.TB, broker, group, topic string, partition int) int64 {
	t.Helper()
	off, err := committedOffset(broker, group, topic, partition)
	if err != nil {
		t.Fatal(err)
	}
	return off
}

// committedOffset is committed for goroutines other than the test's.
func committedOffset(broker, group, topic string, partition int) (int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	transport := &kafka.Transport{}
	defer transport.CloseIdleConnections()
	client := &kafka.Client{Addr: kafka.TCP(broker), Transport: transport}
	resp, err := client.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: group, Topics: map[string][]int{topic: {partition}}})
	if err != nil {
		return 0, fmt.Errorf("offset fetch: %w", err)
	}
	if errors.Is(resp.Error, kafka.GroupIdNotFound) {
		return -1, nil // the group has not formed yet, so nothing is committed
	}
	if resp.Error != nil {
		return 0, fmt.Errorf("offset fetch: %w", resp.Error)
	}
	for _, p := range resp.Topics[topic] {
		if p.Partition == partition {
			return p.CommittedOffset, nil
		}
	}
	return -1, nil
}

func header(m kafka.Message, key string) (string, bool) {
	for _, h := range m.Headers {
		if h.Key == key {
			return string(h.Value), true
		}
	}
	return "", false
}

// seen records the events a handler was given, safe for concurrent use.
type seen struct {
	mu  sync.Mutex
	evs []envelope.Event
}

func (s *seen) add(ev envelope.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.evs = append(s.evs, ev)
}

func (s *seen) ids() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, len(s.evs))
	for i, e := range s.evs {
		out[i] = e.ID
	}
	return out
}

func (s *seen) count(id string) int {
	n := 0
	for _, x := range s.ids() {
		if x == id {
			n++
		}
	}
	return n
}

func payloadEqual(a, b proto.Message) bool { return proto.Equal(a, b) }

// writeRecords writes ms to topic (their Topic left empty), every replica
// acknowledging, failing the test on an error.
func writeRecords(t testing.TB, broker, topic string, ms []kafka.Message) {
	t.Helper()
	w := &kafka.Writer{Addr: kafka.TCP(broker), Topic: topic, RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond}
	t.Cleanup(func() { w.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := w.WriteMessages(ctx, ms...); err != nil {
		t.Fatal(err)
	}
}

// signedHeartbeats returns n Heartbeats of key for topic, signed by s, to
// write with writeRecords.
func signedHeartbeats(t testing.TB, s *envelope.Signer, topic, key string, n int) []kafka.Message {
	t.Helper()
	ms := make([]kafka.Message, n)
	for i := range ms {
		m, err := envelope.Encode(event(topic, key, int32(i)))
		if err != nil {
			t.Fatal(err)
		}
		s.Sign(&m)
		m.Topic = ""
		ms[i] = m
	}
	return ms
}
