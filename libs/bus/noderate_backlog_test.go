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

// nodeSigner returns a signer for node, its certificate signed by priv.
func nodeSigner(t testing.TB, priv ed25519.PrivateKey, node string) *envelope.Signer {
	t.Helper()
	npub, npriv, _ := ed25519.GenerateKey(nil)
	cert, err := auth.SignNodeCert(priv, auth.NodeCert{Node: node, Cluster: "c1", PublicKey: npub, NotAfter: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	s, err := envelope.NewNodeSigner(npriv, cert)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// writeSignedAt writes to topic's one partition a Heartbeat of node's per
// time in times, each signed by s as created at that time.
func writeSignedAt(t testing.TB, broker, topic, node string, s *envelope.Signer, times []time.Time) {
	t.Helper()
	var ms []kafka.Message
	for i, at := range times {
		ev := event(topic, node, int32(i))
		ev.Time = at
		m, err := envelope.Encode(ev)
		if err != nil {
			t.Fatal(err)
		}
		s.Sign(&m)
		m.Topic, m.Time = "", at
		ms = append(ms, m)
	}
	writeRecords(t, broker, topic, ms)
}

// handledPastRate runs a verifying consumer holding nodes to 1 record a
// second, burst at once and window back, over topic's records (n of
// them), and returns how many it handled once its offset passed them all.
func handledPastRate(t *testing.T, broker, topic string, pub ed25519.PublicKey, burst int, window time.Duration, n int64) int {
	t.Helper()
	var handled seen
	startConsumer(t, bus.ConsumerConfig{
		Brokers: []string{broker}, GroupID: "g", Topics: []string{topic},
		Verifier: envelope.NewVerifier(pub, nil), NodeRate: 1, NodeBurst: burst, NodeRateWindow: window,
	}, newProducer(t, broker), func(ctx context.Context, ev envelope.Event) error { handled.add(ev); return nil })
	testkit.WaitFor(t, wait, "the group's offset past every record", func() (bool, error) {
		off, err := committedOffset(broker, "g", topic, 0)
		return off == n, err
	})
	return len(handled.ids())
}

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
	const n, burst = 10, 2
	start := time.Now().Add(-20 * time.Second)
	var times []time.Time
	for i := range n {
		times = append(times, start.Add(time.Duration(2*i)*time.Second)) // one every 2 s: half the rate
	}
	writeSignedAt(t, broker, topic, "honest", nodeSigner(t, priv, "honest"), times)
	if got := handledPastRate(t, broker, topic, pub, burst, 0, n); got != n {
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
	const burst, window = 2, 5 * time.Second
	began := time.Now()
	var times []time.Time
	for i := range 60 {
		at := began.Add(-time.Hour + time.Duration(i)*time.Second)
		if i >= 30 {
			at = began.Add(time.Hour + time.Duration(i)*time.Second)
		}
		times = append(times, at)
	}
	writeSignedAt(t, broker, topic, "minter", nodeSigner(t, priv, "minter"), times)
	got := handledPastRate(t, broker, topic, pub, burst, window, 60)
	// Tokens: the burst at the window's start, the window's seconds when
	// the clock jumps to now (capped by the burst), and one a second the
	// window's start moved while the test ran.
	if most := burst + burst + int(time.Since(began)/time.Second) + 1; got > most {
		t.Errorf("%d of the node's 60 records handled, at most %d may be: its signed times minted tokens", got, most)
	}
	if got < burst {
		t.Errorf("%d of the node's records handled, want at least its burst (%d)", got, burst)
	}
}
