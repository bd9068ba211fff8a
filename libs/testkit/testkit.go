// Package testkit starts real infrastructure for tests (a kfake broker and a
// Redis on random loopback ports, cleaned up with the test) and waits on
// conditions with deadlines instead of sleeping.
package testkit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"

	"github.com/loom-ml/loom/libs/bus"
	"github.com/loom-ml/loom/libs/embedded"
	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/testkit/need"
	"github.com/loom-ml/loom/libs/topics"
)

// setupTimeout bounds starting infrastructure and the helper calls that have
// no timeout of their own.
const setupTimeout = 30 * time.Second

// Broker starts a broker for the test with all of Loom's topics created and
// returns its address. It is closed when the test ends.
func Broker(t testing.TB) string {
	t.Helper()
	return BrokerWith(t, topics.All()...)
}

// BrokerWith starts a broker for the test with only the given topics created
// and returns its address. It is closed when the test ends.
func BrokerWith(t testing.TB, specs ...topics.Spec) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	b, err := embedded.StartBroker(ctx, "", "")
	if err != nil {
		t.Fatalf("testkit: start broker: %v", err)
	}
	t.Cleanup(func() { _ = b.Close() })
	if err := CreateTopics(ctx, b.Addr, specs...); err != nil {
		t.Fatalf("testkit: %v", err)
	}
	return b.Addr
}

// CreateTopics creates specs on the broker at addr; topics that exist already
// are left alone.
func CreateTopics(ctx context.Context, addr string, specs ...topics.Spec) error {
	if len(specs) == 0 {
		return nil
	}
	req := &kafka.CreateTopicsRequest{}
	for _, s := range specs {
		tc := kafka.TopicConfig{Topic: s.Name, NumPartitions: s.Partitions, ReplicationFactor: 1}
		for k, v := range s.Configs {
			tc.ConfigEntries = append(tc.ConfigEntries, kafka.ConfigEntry{ConfigName: k, ConfigValue: v})
		}
		req.Topics = append(req.Topics, tc)
	}
	resp, err := newClient(addr).CreateTopics(ctx, req)
	if err != nil {
		return fmt.Errorf("create topics on %s: %w", addr, err)
	}
	for name, err := range resp.Errors {
		if err != nil && !errors.Is(err, kafka.TopicAlreadyExists) {
			return fmt.Errorf("create topic %s: %w", name, err)
		}
	}
	return nil
}

// newClient returns a kafka-go client with its own transport, so that no
// metadata cached for an earlier broker on the same port is reused.
func newClient(addr string) *kafka.Client {
	return &kafka.Client{Addr: kafka.TCP(addr), Transport: &kafka.Transport{}, Timeout: 10 * time.Second}
}

// Redis starts a Redis for the test (redis-server when on PATH, else
// miniredis) and returns a client to it. Both end with the test. Where
// need.Required (CI), a missing redis-server fails the test instead of
// falling back: CI tests against the real one.
func Redis(t testing.TB) (addr string, client *redis.Client) {
	t.Helper()
	if need.Required() {
		need.Tools(t, "apt-get install redis-server", "redis-server")
	}
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	r, err := embedded.StartRedis(ctx, "", "")
	if err != nil {
		t.Fatalf("testkit: start redis: %v", err)
	}
	client = redis.NewClient(&redis.Options{Addr: r.Addr})
	// Cleanups run last-registered first: the client closes before Redis.
	t.Cleanup(func() { _ = r.Close() })
	t.Cleanup(func() { _ = client.Close() })
	return r.Addr, client
}

// FreeAddr returns a 127.0.0.1:port address whose port was free a moment ago,
// for servers a test starts that must know their address in advance; the
// port stays reserved for the test process (embedded.FreePort). Prefer
// binding 127.0.0.1:0 and asking the server its address where it can say.
// It panics if no port can be had, which leaves a test nothing to do anyway.
func FreeAddr() string {
	port, err := embedded.FreePort()
	if err != nil {
		panic("testkit: " + err.Error())
	}
	return fmt.Sprintf("127.0.0.1:%d", port)
}

// Context returns a context that ends after timeout or when the test ends,
// whichever is first.
func Context(t testing.TB, timeout time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	return ctx
}

// WaitFor polls cond until it returns true, failing the test with msg when
// timeout passes first or cond returns an error.
func WaitFor(t testing.TB, timeout time.Duration, msg string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	delay := time.Millisecond
	for {
		ok, err := cond()
		if err != nil {
			t.Fatalf("waiting for %s: %v", msg, err)
		}
		if ok {
			return
		}
		left := time.Until(deadline)
		if left <= 0 {
			t.Fatalf("timed out after %v waiting for %s", timeout, msg)
		}
		time.Sleep(min(delay, left))
		delay = min(delay*2, 50*time.Millisecond)
	}
}

// Publish encodes events and writes them to the broker (each to its own
// Topic), signed with the test's services' key as "services/test" (see
// ServiceKeyFile), returning once the broker acknowledged them; a test's way
// to feed a service events without another service. (A type only some
// services send — a command, a node's membership or health, a repair's
// answer — is accepted only from them (envelope.Senders): write those with
// PublishAs; a node's report, which no service may send, with
// PublishAsNodes.) It fails the test on error. PublishMessages writes
// records as they are (unsigned, forged).
func Publish(t testing.TB, broker string, events ...envelope.Event) {
	t.Helper()
	s := testSigner()
	publishSigned(t, broker, func(envelope.Event) *envelope.Signer { return s }, events)
}

// PublishAs is Publish signed as "services/<service>" (SignerAs): how a
// test writes what one service alone may send (envelope.Senders), or what
// another service forges.
func PublishAs(t testing.TB, broker, service string, events ...envelope.Event) {
	t.Helper()
	s := SignerAs(service)
	publishSigned(t, broker, func(envelope.Event) *envelope.Signer { return s }, events)
}

// publishSigned encodes events, signs each with signerOf's signer for it
// and writes them (PublishMessages): the one write of Publish, PublishAs
// and PublishAsNodes.
func publishSigned(t testing.TB, broker string, signerOf func(envelope.Event) *envelope.Signer, events []envelope.Event) {
	t.Helper()
	msgs := make([]kafka.Message, 0, len(events))
	for _, e := range events {
		m, err := envelope.Encode(e)
		if err != nil {
			t.Fatalf("testkit: publish: %v", err)
		}
		signerOf(e).Sign(&m)
		msgs = append(msgs, m)
	}
	PublishMessages(t, broker, msgs...)
}

// PublishMessages writes msgs (Topic set on each) as they are, keyed as
// bus.Producer keys them; it fails the test on error.
func PublishMessages(t testing.TB, broker string, msgs ...kafka.Message) {
	t.Helper()
	// Keys go where bus.Producer puts them: an agent reads only its key's partition.
	w := &kafka.Writer{Addr: kafka.TCP(broker), Transport: &kafka.Transport{}, Balancer: kafka.Murmur2Balancer{},
		RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond}
	defer w.Close()
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatalf("testkit: publish %d events: %v", len(msgs), err)
	}
}

// WaitEvent reads topic from its start with a fresh reader until match returns
// true for an event, and returns that event; it fails the test after timeout.
// All partitions are read; records that do not decode are skipped. match is
// called from the test's goroutine only.
func WaitEvent(t testing.TB, broker, topic string, timeout time.Duration, match func(envelope.Event) bool) envelope.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var parts []int
	var err error
	for {
		// The topic may not exist yet when the test starts waiting.
		if parts, err = partitions(ctx, broker, topic); err == nil && len(parts) > 0 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for an event on %s: topic not found within %v: %v", topic, timeout, err)
		case <-time.After(20 * time.Millisecond):
		}
	}

	events := make(chan envelope.Event)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel() // runs before wg.Wait: the readers stop first
	for _, p := range parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			readPartition(ctx, broker, topic, p, -1, func(e envelope.Event) bool {
				select {
				case events <- e:
					return true
				case <-ctx.Done():
					return false
				}
			})
		}()
	}
	seen := 0
	for {
		select {
		case e := <-events:
			seen++
			if match(e) {
				return e
			}
		case <-ctx.Done():
			t.Fatalf("no matching event on %s within %v (%d events read)", topic, timeout, seen)
		}
	}
}

// Events returns every decodable event on topic at the time of the call, in
// offset order within each partition (partitions one after another); for
// checking what was, and was not, emitted.
func Events(t testing.TB, broker, topic string) []envelope.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	parts, err := partitions(ctx, broker, topic)
	if err != nil {
		t.Fatalf("testkit: events of %s: %v", topic, err)
	}
	var out []envelope.Event
	for _, p := range parts {
		end, err := lastOffset(ctx, broker, topic, p)
		if err != nil {
			t.Fatalf("testkit: events of %s[%d]: %v", topic, p, err)
		}
		if end == 0 {
			continue
		}
		if err := readPartition(ctx, broker, topic, p, end, func(e envelope.Event) bool {
			out = append(out, e)
			return true
		}); err != nil {
			t.Fatalf("testkit: events of %s[%d]: %v", topic, p, err)
		}
	}
	return out
}

// Delivered returns Events(topic) with each event id once (its first
// record), as a consumer's inbox takes them: a service killed after it
// published and before it marked the batch sent publishes it again under
// the same ids, by design (at-least-once), so a test that counts what
// was reported counts ids, and a second report under an id of its own
// still shows.
func Delivered(t testing.TB, broker, topic string) []envelope.Event {
	t.Helper()
	seen := map[string]bool{}
	var out []envelope.Event
	for _, ev := range Events(t, broker, topic) {
		if !seen[ev.ID] {
			seen[ev.ID] = true
			out = append(out, ev)
		}
	}
	return out
}

// Messages returns every record on topic at the time of the call as
// stored (undecoded, headers and signatures included), in offset order
// within each partition (partitions one after another): for checking what
// the records themselves hold. Each partition is read up to its last
// offset, not until a read goes quiet: on a loaded machine a slow read
// makes the call slower, never the list shorter.
func Messages(t testing.TB, broker, topic string) []kafka.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	parts, err := partitions(ctx, broker, topic)
	if err != nil {
		t.Fatalf("testkit: records of %s: %v", topic, err)
	}
	var out []kafka.Message
	for _, p := range parts {
		end, err := lastOffset(ctx, broker, topic, p)
		if err != nil {
			t.Fatalf("testkit: records of %s[%d]: %v", topic, p, err)
		}
		if end == 0 {
			continue
		}
		if err := readMessages(ctx, broker, topic, p, end, func(m kafka.Message) bool {
			out = append(out, m)
			return true
		}); err != nil {
			t.Fatalf("testkit: records of %s[%d]: %v", topic, p, err)
		}
	}
	return out
}

// DeadLetter is a record a consumer dead-lettered (DeadLetters): its event
// id and type, the refusal's reason (bus.HeaderDLQReason) and its signer
// ("" for a header the record did not carry: an unsigned one's signer).
type DeadLetter struct {
	ID, Type, Reason, Signer string
}

// DeadLetters returns the records on topic's dead-letter topic now, in
// each partition's order: how a test checks what a consumer refused, and
// why. It fails the test on error.
func DeadLetters(t testing.TB, broker, topic string) []DeadLetter {
	t.Helper()
	dlq := topic + topics.DLQSuffix
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	parts, err := partitions(ctx, broker, dlq)
	if err != nil {
		t.Fatalf("testkit: dead letters of %s: %v", topic, err)
	}
	var out []DeadLetter
	for _, p := range parts {
		end, err := lastOffset(ctx, broker, dlq, p)
		if err != nil {
			t.Fatalf("testkit: dead letters of %s[%d]: %v", topic, p, err)
		}
		if end == 0 {
			continue
		}
		if err := readMessages(ctx, broker, dlq, p, end, func(m kafka.Message) bool {
			var d DeadLetter
			for _, h := range m.Headers {
				switch h.Key {
				case envelope.HeaderID:
					d.ID = string(h.Value)
				case envelope.HeaderType:
					d.Type = string(h.Value)
				case bus.HeaderDLQReason:
					d.Reason = string(h.Value)
				case envelope.HeaderSigner:
					d.Signer = string(h.Value)
				}
			}
			out = append(out, d)
			return true
		}); err != nil {
			t.Fatalf("testkit: dead letters of %s[%d]: %v", topic, p, err)
		}
	}
	return out
}

// partitions returns the partition ids of topic, or an error when it does not exist.
func partitions(ctx context.Context, broker, topic string) ([]int, error) {
	md, err := newClient(broker).Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		return nil, fmt.Errorf("metadata: %w", err)
	}
	for _, tp := range md.Topics {
		if tp.Name != topic {
			continue
		}
		if tp.Error != nil {
			return nil, fmt.Errorf("topic %s: %w", topic, tp.Error)
		}
		ids := make([]int, 0, len(tp.Partitions))
		for _, p := range tp.Partitions {
			ids = append(ids, p.ID)
		}
		return ids, nil
	}
	return nil, fmt.Errorf("topic %s: not found", topic)
}

func lastOffset(ctx context.Context, broker, topic string, partition int) (int64, error) {
	resp, err := newClient(broker).ListOffsets(ctx, &kafka.ListOffsetsRequest{
		Topics: map[string][]kafka.OffsetRequest{topic: {kafka.LastOffsetOf(partition)}},
	})
	if err != nil {
		return 0, fmt.Errorf("list offsets: %w", err)
	}
	for _, po := range resp.Topics[topic] {
		if po.Partition == partition {
			if po.Error != nil {
				return 0, po.Error
			}
			return po.LastOffset, nil
		}
	}
	return 0, fmt.Errorf("no offsets for partition %d", partition)
}

// readPartition reads partition from its first record, decoding with
// envelope.Default and skipping what does not decode, calling yield for each
// event until yield returns false, ctx ends, or (end >= 0) the record before
// offset end was read.
func readPartition(ctx context.Context, broker, topic string, partition int, end int64, yield func(envelope.Event) bool) error {
	return readMessages(ctx, broker, topic, partition, end, func(m kafka.Message) bool {
		e, err := envelope.Default.Decode(m)
		return err != nil || yield(e)
	})
}

// readMessages is readPartition for the records as they are.
func readMessages(ctx context.Context, broker, topic string, partition int, end int64, yield func(kafka.Message) bool) error {
	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers:   []string{broker},
		Topic:     topic,
		Partition: partition,
		// kafka-go's 10 s default makes a reader slow to see new records.
		MaxWait: 20 * time.Millisecond,
		Dialer:  &kafka.Dialer{Timeout: 5 * time.Second},
	})
	defer r.Close()
	for {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			if ctx.Err() != nil && end < 0 {
				return nil
			}
			return err
		}
		if !yield(m) {
			return nil
		}
		if end >= 0 && m.Offset >= end-1 {
			return nil
		}
	}
}
