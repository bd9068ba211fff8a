package bus_test

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/loom-ml/loom/libs/auth"
	"github.com/loom-ml/loom/libs/bus"
	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
)

// A consumer with a Verifier handles what a service signed and a node's own
// reports, and dead-letters, with the reason, what is unsigned, signed with
// another key, a node's report about another node, or a node's own report
// keyed by another node (which the producer places on that node's
// partition); none of those reach the handler.
func TestVerifierDeadLettersRefusedRecordsWithTheReason(t *testing.T) {
	t.Parallel()
	broker := startBroker(t)
	topic := newTopic(t, broker, 1)
	pub, priv, _ := ed25519.GenerateKey(nil)
	_, otherPriv, _ := ed25519.GenerateKey(nil)
	npub, npriv, _ := ed25519.GenerateKey(nil)
	cert, err := auth.SignNodeCert(priv, auth.NodeCert{Node: "n1", PublicKey: npub, NotAfter: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	nodeSigner, err := envelope.NewNodeSigner(npriv, cert)
	if err != nil {
		t.Fatal(err)
	}

	// A service that may send a Heartbeat (envelope.Senders: the sim
	// provider's, the provisioner's).
	svc := newProducer(t, broker)
	svc.SetSigner(envelope.NewServiceSigner("provisioner", priv))
	node := newProducer(t, broker)
	node.SetSigner(nodeSigner)
	forger := newProducer(t, broker)
	forger.SetSigner(envelope.NewServiceSigner("scheduler", otherPriv))
	plain := newProducer(t, broker)

	rejected, reader := rejectedCounter(t)
	var handled seen
	startConsumer(t, bus.ConsumerConfig{
		Brokers: []string{broker}, GroupID: "g", Topics: []string{topic},
		Verifier: envelope.NewVerifier(pub, nil), Rejected: rejected,
	}, plain, func(ctx context.Context, ev envelope.Event) error {
		handled.add(ev)
		return nil
	})
	unsigned := event(topic, "n1", 1)
	forged := event(topic, "n1", 2)
	otherNode := event(topic, "n2", 3) // a Heartbeat naming n2, signed by n1
	fromService := event(topic, "n1", 4)
	fromNode := event(topic, "n1", 5)
	otherKey := event(topic, "n2", 6) // n1's own Heartbeat, keyed by n2
	otherKey.Payload = &eventsv1.Heartbeat{Node: "n1", Cluster: "c1", RunningSteps: 6}
	publish(t, plain, unsigned)
	publish(t, forger, forged)
	publish(t, node, otherNode)
	publish(t, svc, fromService)
	publish(t, node, fromNode)
	publish(t, node, otherKey)

	testkit.WaitFor(t, wait, "genuine records handled", func() (bool, error) {
		return handled.count(fromService.ID) == 1 && handled.count(fromNode.ID) == 1, nil
	})
	handled.mu.Lock()
	for _, ev := range handled.evs {
		want := map[string]string{fromService.ID: "services/provisioner", fromNode.ID: "nodes/n1"}[ev.ID]
		if ev.Signer != want {
			t.Errorf("event %s handled with Signer %q, want %q", ev.ID, ev.Signer, want)
		}
	}
	handled.mu.Unlock()
	for _, id := range []string{unsigned.ID, forged.ID, otherNode.ID, otherKey.ID} {
		if handled.count(id) != 0 {
			t.Errorf("refused record %s reached the handler", id)
		}
	}
	dls := readN(t, broker, topic+topics.DLQSuffix, 4, wait)
	want := map[string]string{unsigned.ID: envelope.ReasonUnsigned, forged.ID: envelope.ReasonBadSignature, otherNode.ID: envelope.ReasonWrongNode,
		otherKey.ID: envelope.ReasonWrongKey}
	for _, dl := range dls {
		id, _ := header(dl, envelope.HeaderID)
		if r, _ := header(dl, bus.HeaderDLQReason); r != want[id] {
			t.Errorf("dead letter of %s: reason %q, want %q", id, r, want[id])
		}
		// Dead letters keep the signature they came with (or none): the
		// DLQ producer does not vouch for them.
		if s, _ := header(dl, envelope.HeaderSigner); id == unsigned.ID && s != "" {
			t.Errorf("unsigned record was signed %q on its way to the DLQ", s)
		}
	}
	// Counted, by reason.
	counted := rejectedByReason(t, reader)
	for id, r := range want {
		if counted[r] != 1 {
			t.Errorf("loom_bus_rejected_total{reason=%q} = %d, want 1 (record %s)", r, counted[r], id)
		}
	}
}

// A handler's own refusal (bus.Permanent(envelope.Reject(...))) is
// dead-lettered with its reason and counted as the Verifier's are.
func TestHandlerRefusalsAreCounted(t *testing.T) {
	t.Parallel()
	broker := startBroker(t)
	topic := newTopic(t, broker, 1)
	plain := newProducer(t, broker)
	rejected, reader := rejectedCounter(t)
	refused, failed := event(topic, "n1", 1), event(topic, "n1", 2)
	startConsumer(t, bus.ConsumerConfig{Brokers: []string{broker}, GroupID: "g", Topics: []string{topic}, Rejected: rejected},
		plain, func(ctx context.Context, ev envelope.Event) error {
			if ev.ID == refused.ID {
				return bus.Permanent(envelope.Reject(envelope.ReasonNotAssigned, "not this node's"))
			}
			return bus.Permanent(errors.New("broken")) // no reason: not a refusal
		})
	publish(t, plain, refused)
	publish(t, plain, failed)
	dls := readN(t, broker, topic+topics.DLQSuffix, 2, wait)
	for _, dl := range dls {
		id, _ := header(dl, envelope.HeaderID)
		if r, _ := header(dl, bus.HeaderDLQReason); id == refused.ID && r != envelope.ReasonNotAssigned {
			t.Errorf("dead letter of the refused record: reason %q", r)
		}
	}
	counted := rejectedByReason(t, reader)
	if want := map[string]int64{envelope.ReasonNotAssigned: 1}; !reflect.DeepEqual(counted, want) {
		t.Fatalf("loom_bus_rejected_total by reason: %v, want %v", counted, want)
	}
}

// rejectedCounter is a loom_bus_rejected_total counter for a consumer's
// Rejected, and the reader that collects it (rejectedByReason).
func rejectedCounter(t *testing.T) (metric.Int64Counter, *sdkmetric.ManualReader) {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	rejected, err := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)).Meter("test").Int64Counter("loom_bus_rejected_total")
	if err != nil {
		t.Fatal(err)
	}
	return rejected, reader
}

// rejectedByReason is what reader collected of loom_bus_rejected_total, by
// its reason.
func rejectedByReason(t *testing.T, reader *sdkmetric.ManualReader) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	counted := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if sum, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == "loom_bus_rejected_total" {
				for _, dp := range sum.DataPoints {
					r, _ := dp.Attributes.Value("reason")
					counted[r.AsString()] += dp.Value
				}
			}
		}
	}
	return counted
}

// A node's record must be on the partition its key goes to (its producer
// chooses the partition, and the signature does not cover it): one on
// another partition is dead-lettered (wrong-partition) and counted, a
// service's record is taken wherever it is, and when the topic's
// partitions are added the consumer follows its node's records to their
// new partition.
func TestNodeRecordOnAnotherPartitionIsRefused(t *testing.T) {
	t.Parallel()
	broker := startBroker(t)
	topic := newTopic(t, broker, 4)
	// A node whose partition moves, when the topic grows to 6 partitions,
	// to another of the first 4 (which the group goes on reading without a
	// rebalance).
	node := ""
	for i := 0; node == "" && i < 1000; i++ {
		k := fmt.Sprintf("n%d", i)
		if before, after := bus.PartitionOf(k, 4), bus.PartitionOf(k, 6); after < 4 && before != after {
			node = k
		}
	}
	if node == "" {
		t.Fatal("no node name moves to another of the first 4 partitions")
	}
	before, after := bus.PartitionOf(node, 4), bus.PartitionOf(node, 6)
	// Nor its partition under 5, which the growth to 6 skips: a record
	// written before the consumer reads 6 may be placed under it.
	elsewhere := 0
	for elsewhere == before || elsewhere == after || elsewhere == bus.PartitionOf(node, 5) {
		elsewhere++
	}
	pub, priv, _ := ed25519.GenerateKey(nil)
	npub, npriv, _ := ed25519.GenerateKey(nil)
	cert, err := auth.SignNodeCert(priv, auth.NodeCert{Node: node, PublicKey: npub, NotAfter: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	nodeSigner, err := envelope.NewNodeSigner(npriv, cert)
	if err != nil {
		t.Fatal(err)
	}
	// A service that may send a Heartbeat (envelope.Senders).
	svcSigner := envelope.NewServiceSigner("provisioner", priv)
	// writeTo writes ev, signed by s, on partition part of the topic.
	writeTo := func(s *envelope.Signer, ev envelope.Event, part int) {
		t.Helper()
		m, err := envelope.Encode(ev)
		if err != nil {
			t.Fatal(err)
		}
		s.Sign(&m)
		w := &kafka.Writer{Addr: kafka.TCP(broker), RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond,
			Balancer: kafka.BalancerFunc(func(kafka.Message, ...int) int { return part })}
		defer w.Close()
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		if err := w.WriteMessages(ctx, m); err != nil {
			t.Fatalf("write to partition %d: %v", part, err)
		}
	}

	rejected, reader := rejectedCounter(t)
	var handled seen
	startConsumer(t, bus.ConsumerConfig{
		Brokers: []string{broker}, GroupID: "g", Topics: []string{topic},
		Verifier: envelope.NewVerifier(pub, nil), Rejected: rejected,
	}, newProducer(t, broker), func(ctx context.Context, ev envelope.Event) error {
		handled.add(ev)
		return nil
	})

	honest := event(topic, node, 1)
	writeTo(nodeSigner, honest, before)
	testkit.WaitFor(t, wait, "the node's record on its partition handled", func() (bool, error) {
		return handled.count(honest.ID) == 1, nil
	})

	// The topic grows: the node's records now go to another partition.
	client := &kafka.Client{Addr: kafka.TCP(broker)}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	resp, err := client.CreatePartitions(ctx, &kafka.CreatePartitionsRequest{Topics: []kafka.TopicPartitionsConfig{{Name: topic, Count: 6}}})
	if err != nil || resp.Errors[topic] != nil {
		t.Fatalf("add partitions: %v %v", err, resp)
	}
	moved := event(topic, node, 2)
	writeTo(nodeSigner, moved, after)
	misplaced := event(topic, node, 3)
	writeTo(nodeSigner, misplaced, elsewhere)
	fromService := event(topic, node, 4)
	writeTo(svcSigner, fromService, elsewhere)

	testkit.WaitFor(t, wait, "the moved record and the service's handled", func() (bool, error) {
		// At least once: the group rebalances as the topic grows, and a
		// record handled but not yet committed then comes again.
		return handled.count(moved.ID) >= 1 && handled.count(fromService.ID) >= 1, nil
	})
	dls := readN(t, broker, topic+topics.DLQSuffix, 1, wait)
	if id, _ := header(dls[0], envelope.HeaderID); id != misplaced.ID {
		t.Fatalf("dead letter %s, want the misplaced record %s", id, misplaced.ID)
	}
	if r, _ := header(dls[0], bus.HeaderDLQReason); r != envelope.ReasonWrongPartition {
		t.Errorf("dead letter of the misplaced record: reason %q, want %q", r, envelope.ReasonWrongPartition)
	}
	if handled.count(misplaced.ID) != 0 {
		t.Error("the misplaced record reached the handler")
	}
	if counted := rejectedByReason(t, reader); counted[envelope.ReasonWrongPartition] != 1 {
		t.Errorf("loom_bus_rejected_total by reason: %v, want %s: 1", counted, envelope.ReasonWrongPartition)
	}
}
