package bus_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"fmt"
	"log/slog"
	"strings"
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
)

// A node's records past ConsumerConfig.NodeRate are dropped — not handled,
// not dead-lettered, counted as node-rate — while another node's records on
// the same partition, behind the flood, and a service's are handled, and
// the group's offset passes them all. Both ways of handling (one by one,
// batches) take the same records, and the drops leave batches whole.
func TestNodeFloodIsDroppedPastItsRate(t *testing.T) {
	t.Parallel()
	for _, batched := range []bool{false, true} {
		t.Run(fmt.Sprintf("batched=%v", batched), func(t *testing.T) {
			t.Parallel()
			broker := startBroker(t)
			topic := newTopic(t, broker, 1)
			pub, priv, _ := ed25519.GenerateKey(nil)
			flooder, honest := nodeSigner(t, priv, "flooder"), nodeSigner(t, priv, "honest")
			svc := envelope.NewServiceSigner("provisioner", priv)

			// The flood first (40 records, more than the burst of 3),
			// then the honest node's 3 and a service's, all on the one
			// partition, in one write.
			const flood, burst = 40, 3
			var ms []kafka.Message
			var honestIDs []string
			add := func(s *envelope.Signer, ev envelope.Event) {
				m, err := envelope.Encode(ev)
				if err != nil {
					t.Fatal(err)
				}
				s.Sign(&m)
				ms = append(ms, m)
			}
			for i := range flood {
				add(flooder, event(topic, "flooder", int32(i)))
			}
			for i := range 3 {
				ev := event(topic, "honest", int32(i))
				honestIDs = append(honestIDs, ev.ID)
				add(honest, ev)
			}
			fromService := event(topic, "flooder", 99)
			add(svc, fromService)
			for i := range ms {
				ms[i].Topic = ""
			}
			writeRecords(t, broker, topic, ms)

			rejected, reader := rejectedCounter(t)
			var handled seen
			var passed atomic.Int64
			cfg := bus.ConsumerConfig{
				Brokers: []string{broker}, GroupID: "g", Topics: []string{topic},
				Verifier: envelope.NewVerifier(pub, nil), Rejected: rejected,
				NodeRate: 0.001, NodeBurst: burst, Logger: testLogger(t),
				Passed: func(string, int, int64, int64) { passed.Add(1) },
			}
			h := func(ctx context.Context, ev envelope.Event) error { handled.add(ev); return nil }
			c := bus.NewConsumer(cfg, newProducer(t, broker), h)
			var biggest atomic.Int64 // the most events one batch call took
			if batched {
				c.WithBatch(func(ctx context.Context, evs []envelope.Event) error {
					if n := int64(len(evs)); n > biggest.Load() {
						biggest.Store(n)
					}
					for _, ev := range evs {
						handled.add(ev)
					}
					return nil
				}, 16)
			}
			rctx, stop := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- c.Run(rctx) }()
			t.Cleanup(func() {
				stop()
				if err := <-done; err != nil {
					t.Errorf("Run: %v", err)
				}
			})

			total := int64(len(ms))
			testkit.WaitFor(t, wait, "the group's offset past every record", func() (bool, error) {
				off, err := committedOffset(broker, "g", topic, 0)
				return off == total, err
			})
			for _, id := range append(honestIDs, fromService.ID) {
				if handled.count(id) != 1 {
					t.Errorf("record %s handled %d times, want once", id, handled.count(id))
				}
			}
			if n := len(handled.ids()); n != burst+len(honestIDs)+1 {
				t.Errorf("%d records handled, want the flooder's burst (%d), the honest node's 3 and the service's", n, burst)
			}
			if counted := rejectedByReason(t, reader); counted[bus.DropNodeRate] != flood-burst || len(counted) != 1 {
				t.Errorf("loom_bus_rejected_total by reason: %v, want %s: %d", counted, bus.DropNodeRate, flood-burst)
			}
			if n := records(t, broker, topic+topics.DLQSuffix, 1); n != 0 {
				t.Errorf("%d records dead-lettered, want none: a flood must cost no write", n)
			}
			if passed := passed.Load(); passed != flood-burst {
				t.Errorf("Passed told of %d records, want the %d dropped", passed, flood-burst)
			}
			// The dropped records leave the rest of their batches whole: a
			// node past its rate must not send every other record of a
			// batch through the handler one by one.
			if batched && biggest.Load() < 2 {
				t.Errorf("the largest batch call took %d events: the flooder's drops broke every batch up", biggest.Load())
			}
		})
	}
}

// A node's records of a type nodes may not write (not-a-service) take its
// tokens too: past its burst they are dropped, not dead-lettered one by
// one.
func TestNodeFloodOfServiceTypesIsDroppedPastItsRate(t *testing.T) {
	t.Parallel()
	broker := startBroker(t)
	topic := newTopic(t, broker, 1)
	pub, priv, _ := ed25519.GenerateKey(nil)
	flooder := nodeSigner(t, priv, "flooder")
	const flood, burst = 20, 3
	ms := make([]kafka.Message, flood)
	for i := range ms {
		// A command: only the scheduler may write one.
		m, err := envelope.Encode(envelope.New(topic, "flooder", "loom/agent", &eventsv1.StartStep{Node: "flooder", Job: fmt.Sprintf("projects/p/jobs/%d", i)}))
		if err != nil {
			t.Fatal(err)
		}
		flooder.Sign(&m)
		m.Topic = ""
		ms[i] = m
	}
	writeRecords(t, broker, topic, ms)

	rejected, reader := rejectedCounter(t)
	var handled seen
	startConsumer(t, bus.ConsumerConfig{
		Brokers: []string{broker}, GroupID: "g", Topics: []string{topic},
		Verifier: envelope.NewVerifier(pub, nil), Rejected: rejected,
		NodeRate: 0.001, NodeBurst: burst,
	}, newProducer(t, broker), func(ctx context.Context, ev envelope.Event) error { handled.add(ev); return nil })

	testkit.WaitFor(t, wait, "the group's offset past every record", func() (bool, error) {
		off, err := committedOffset(broker, "g", topic, 0)
		return off == flood, err
	})
	if n := len(handled.ids()); n != 0 {
		t.Errorf("%d records handled, want none", n)
	}
	if counted := rejectedByReason(t, reader); counted[envelope.ReasonNotService] != burst || counted[bus.DropNodeRate] != flood-burst {
		t.Errorf("loom_bus_rejected_total by reason: %v, want %s: %d, %s: %d", counted, envelope.ReasonNotService, burst, bus.DropNodeRate, flood-burst)
	}
	if n := records(t, broker, topic+topics.DLQSuffix, 1); n != burst {
		t.Errorf("%d records dead-lettered, want the burst's %d", n, burst)
	}
}

// lockedBuffer is a log's output, read while the consumer writes it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// The last drops of a flood, after which no record comes to write their
// line, are logged once the drop log's window has passed.
func TestNodeFloodsLastDropsAreLogged(t *testing.T) {
	t.Parallel()
	broker := startBroker(t)
	topic := newTopic(t, broker, 1)
	pub, priv, _ := ed25519.GenerateKey(nil)
	flooder := nodeSigner(t, priv, "flooder")
	// One record handled (the burst), the next dropped and logged at
	// once, the 3 after it within the window.
	const flood = 5
	ms := signedHeartbeats(t, flooder, topic, "flooder", flood)
	writeRecords(t, broker, topic, ms)

	var logs lockedBuffer
	c := bus.NewConsumer(bus.ConsumerConfig{
		Brokers: []string{broker}, GroupID: "g", Topics: []string{topic},
		Verifier: envelope.NewVerifier(pub, nil), NodeRate: 0.001, NodeBurst: 1,
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	}, newProducer(t, broker), func(ctx context.Context, ev envelope.Event) error { return nil })
	// Long enough that the flood's drops all come within one window.
	bus.SetDropLogEvery(c, 2*time.Second)
	rctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(rctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	testkit.WaitFor(t, wait, "the flood's last 3 drops logged", func() (bool, error) {
		return strings.Contains(logs.String(), `reason=node-rate dropped=3 nodes=1 by_node="nodes/flooder=3"`), nil
	})
	if first := strings.Index(logs.String(), `reason=node-rate dropped=1 `); first < 0 {
		t.Errorf("logs %s: want the first drop logged at once", logs.String())
	}
}

// Drops still waiting for their line when Run stops are logged on its way
// out, not lost with the consumer.
func TestDropsPendingAtTheStopAreLogged(t *testing.T) {
	t.Parallel()
	broker := startBroker(t)
	topic := newTopic(t, broker, 1)
	pub, priv, _ := ed25519.GenerateKey(nil)
	flooder := nodeSigner(t, priv, "flooder")
	// One record handled (the burst), the next dropped and logged at
	// once, the 3 after it waiting for a line the window holds back.
	const flood = 5
	ms := signedHeartbeats(t, flooder, topic, "flooder", flood)
	writeRecords(t, broker, topic, ms)

	var logs lockedBuffer
	c := bus.NewConsumer(bus.ConsumerConfig{
		Brokers: []string{broker}, GroupID: "g", Topics: []string{topic},
		Verifier: envelope.NewVerifier(pub, nil), NodeRate: 0.001, NodeBurst: 1,
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	}, newProducer(t, broker), func(ctx context.Context, ev envelope.Event) error { return nil })
	// Far longer than the test: no tick writes the last drops.
	bus.SetDropLogEvery(c, time.Hour)
	rctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(rctx) }()
	testkit.WaitFor(t, wait, "the flood read", func() (bool, error) {
		off, err := committedOffset(broker, "g", topic, 0)
		return off == flood, err
	})
	stop()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	if got := logs.String(); !strings.Contains(got, `reason=node-rate dropped=3 nodes=1 by_node="nodes/flooder=3"`) {
		t.Errorf("logs %s: want the last 3 drops logged as Run stopped", got)
	}
}
