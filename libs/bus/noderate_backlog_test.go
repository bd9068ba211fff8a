package bus_test

import (
	"context"
	"crypto/ed25519"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/loom-ml/loom/libs/auth"
	"github.com/loom-ml/loom/libs/bus"
	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/testkit"
)

// TestNodeBacklogWithinItsRateIsHandled: an honest node that wrote at its
// rate (one record a second, here 10 records over the last 20 s) while the
// consumer was down is not a flood: a consumer that catches up must handle
// every record, not drop those past the burst because it reads them faster
// than they were written.
func TestNodeBacklogWithinItsRateIsHandled(t *testing.T) {
	t.Parallel()
	broker := startBroker(t)
	topic := newTopic(t, broker, 1)
	pub, priv, _ := ed25519.GenerateKey(nil)
	npub, npriv, _ := ed25519.GenerateKey(nil)
	cert, err := auth.SignNodeCert(priv, auth.NodeCert{Node: "honest", Cluster: "c1", PublicKey: npub, NotAfter: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	signer, err := envelope.NewNodeSigner(npriv, cert)
	if err != nil {
		t.Fatal(err)
	}
	const n, burst = 10, 2
	start := time.Now().Add(-20 * time.Second)
	var ms []kafka.Message
	for i := range n {
		ev := event(topic, "honest", int32(i))
		ev.Time = start.Add(time.Duration(2*i) * time.Second) // one every 2 s: half the rate
		m, err := envelope.Encode(ev)
		if err != nil {
			t.Fatal(err)
		}
		signer.Sign(&m)
		m.Topic, m.Time = "", ev.Time
		ms = append(ms, m)
	}
	w := &kafka.Writer{Addr: kafka.TCP(broker), Topic: topic, RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond}
	t.Cleanup(func() { w.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := w.WriteMessages(ctx, ms...); err != nil {
		t.Fatal(err)
	}
	var handled seen
	cfg := bus.ConsumerConfig{
		Brokers: []string{broker}, GroupID: "g", Topics: []string{topic},
		Verifier: envelope.NewVerifier(pub, nil), NodeRate: 1, NodeBurst: burst, Logger: testLogger(t),
	}
	c := bus.NewConsumer(cfg, newProducer(t, broker), func(ctx context.Context, ev envelope.Event) error { handled.add(ev); return nil })
	rctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(rctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	testkit.WaitFor(t, wait, "the group's offset past every record", func() (bool, error) {
		off, err := committedOffset(broker, "g", topic, 0)
		return off == n, err
	})
	if got := len(handled.ids()); got != n {
		t.Errorf("%d of the node's %d records handled: a backlog it wrote at half its rate was dropped past the burst (%d)", got, n, burst)
	}
}

// TestNodeCannotMintTokensWithItsTimes: the times a node signs move its
// bucket's clock only forward, no later than the consumer's now and no
// earlier than the window's start: 30 records backdated an hour and a
// second apart, then 30 dated an hour ahead, take the burst, the window's
// worth and what the test's own seconds add, not 60.
func TestNodeCannotMintTokensWithItsTimes(t *testing.T) {
	t.Parallel()
	broker := startBroker(t)
	topic := newTopic(t, broker, 1)
	pub, priv, _ := ed25519.GenerateKey(nil)
	npub, npriv, _ := ed25519.GenerateKey(nil)
	cert, err := auth.SignNodeCert(priv, auth.NodeCert{Node: "minter", Cluster: "c1", PublicKey: npub, NotAfter: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	signer, err := envelope.NewNodeSigner(npriv, cert)
	if err != nil {
		t.Fatal(err)
	}
	const burst, window = 2, 5 * time.Second
	began := time.Now()
	var ms []kafka.Message
	for i := range 60 {
		ev := event(topic, "minter", int32(i))
		ev.Time = began.Add(-time.Hour + time.Duration(i)*time.Second)
		if i >= 30 {
			ev.Time = began.Add(time.Hour + time.Duration(i)*time.Second)
		}
		m, err := envelope.Encode(ev)
		if err != nil {
			t.Fatal(err)
		}
		signer.Sign(&m)
		m.Topic, m.Time = "", ev.Time
		ms = append(ms, m)
	}
	w := &kafka.Writer{Addr: kafka.TCP(broker), Topic: topic, RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond}
	t.Cleanup(func() { w.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := w.WriteMessages(ctx, ms...); err != nil {
		t.Fatal(err)
	}
	var handled seen
	cfg := bus.ConsumerConfig{
		Brokers: []string{broker}, GroupID: "g", Topics: []string{topic},
		Verifier: envelope.NewVerifier(pub, nil), NodeRate: 1, NodeBurst: burst, NodeRateWindow: window, Logger: testLogger(t),
	}
	c := bus.NewConsumer(cfg, newProducer(t, broker), func(ctx context.Context, ev envelope.Event) error { handled.add(ev); return nil })
	rctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(rctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	testkit.WaitFor(t, wait, "the group's offset past every record", func() (bool, error) {
		off, err := committedOffset(broker, "g", topic, 0)
		return off == 60, err
	})
	// Tokens: the burst at the window's start, the window's seconds when
	// the clock jumps to now (capped by the burst), and one a second the
	// window's start moved while the test ran.
	most := burst + burst + int(time.Since(began)/time.Second) + 1
	if got := len(handled.ids()); got > most {
		t.Errorf("%d of the node's 60 records handled, at most %d may be: its signed times minted tokens", got, most)
	}
	if got := len(handled.ids()); got < burst {
		t.Errorf("%d of the node's records handled, want at least its burst (%d)", got, burst)
	}
}
