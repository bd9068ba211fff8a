package bus_test

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/loom-ml/loom/libs/auth"
	"github.com/loom-ml/loom/libs/bus"
	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
)

// An honest node's record placed under a partition count the topic got
// just after the consumer last read its counts (a misplaced record made it
// read them) is handled, not refused as wrong-partition: a record written
// since that read waits for the next one. A flood of misplaced records
// after it is refused, each at once once the counts were read again (not
// one wait each), and the node's next honest record is handled.
func TestRecordUnderACountAddedSinceTheLastReadIsHandled(t *testing.T) {
	t.Parallel()
	broker := startBroker(t)
	topic := newTopic(t, broker, 4)
	// A node whose partition moves, when the topic grows to 6 partitions,
	// to another of the first 4 (which the group goes on reading without
	// a rebalance).
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
	elsewhere := 0
	for elsewhere == before || elsewhere == after {
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
	// writeTo writes evs, signed by the node, on partition part.
	writeTo := func(part int, evs ...envelope.Event) {
		t.Helper()
		ms := make([]kafka.Message, len(evs))
		for i, ev := range evs {
			m, err := envelope.Encode(ev)
			if err != nil {
				t.Fatal(err)
			}
			nodeSigner.Sign(&m)
			ms[i] = m
		}
		w := &kafka.Writer{Addr: kafka.TCP(broker), RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond,
			Balancer: kafka.BalancerFunc(func(kafka.Message, ...int) int { return part })}
		defer w.Close()
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		if err := w.WriteMessages(ctx, ms...); err != nil {
			t.Fatalf("write to partition %d: %v", part, err)
		}
	}

	// Re-reads 3 s apart: the topic grows well within that of the last.
	const recheck = 3 * time.Second
	rejected, reader := rejectedCounter(t)
	var handled seen
	c := bus.NewConsumer(bus.ConsumerConfig{
		Brokers: []string{broker}, GroupID: "g", Topics: []string{topic},
		Verifier: envelope.NewVerifier(pub, nil), Rejected: rejected, Logger: testLogger(t),
	}, newProducer(t, broker), func(ctx context.Context, ev envelope.Event) error {
		handled.add(ev)
		return nil
	})
	bus.SetPartitionRecheck(c, recheck)
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	dlq := topic + topics.DLQSuffix
	// deadLettered is the IDs of the records dead-lettered so far, each
	// once (a record comes again after a rebalance, and is dead-lettered
	// again).
	deadLettered := func() map[string]bool {
		ids := map[string]bool{}
		if n := records(t, broker, dlq, 1); n > 0 {
			for _, m := range readN(t, broker, dlq, int(n), wait) {
				id, _ := header(m, envelope.HeaderID)
				ids[id] = true
			}
		}
		return ids
	}

	// A misplaced record: refused once the counts were read again.
	first := event(topic, node, 1)
	writeTo(elsewhere, first)
	testkit.WaitFor(t, wait, "the misplaced record dead-lettered", func() (bool, error) {
		return records(t, broker, dlq, 1) > 0, nil
	})

	// At once, the topic grows and the node writes to its new partition.
	client := &kafka.Client{Addr: kafka.TCP(broker)}
	cctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	resp, err := client.CreatePartitions(cctx, &kafka.CreatePartitionsRequest{Topics: []kafka.TopicPartitionsConfig{{Name: topic, Count: 6}}})
	if err != nil || resp.Errors[topic] != nil {
		t.Fatalf("add partitions: %v %v", err, resp)
	}
	moved := event(topic, node, 2)
	writeTo(after, moved)
	testkit.WaitFor(t, wait, "the record on the node's new partition handled", func() (bool, error) {
		if records(t, broker, dlq, 1) > 1 && deadLettered()[moved.ID] {
			return false, errors.New("the honest record was dead-lettered")
		}
		// At least once: the group rebalances as the topic grows, and a
		// record handled but not yet committed then comes again.
		return handled.count(moved.ID) >= 1, nil
	})

	// A flood of misplaced records, then the node's honest one.
	const flood = 30
	evs := make([]envelope.Event, flood)
	for i := range evs {
		evs[i] = event(topic, node, int32(10+i))
	}
	start := time.Now()
	writeTo(elsewhere, evs...)
	next := event(topic, node, 3)
	writeTo(after, next)
	testkit.WaitFor(t, wait, "the flood refused and the honest record handled", func() (bool, error) {
		off, err := committedOffset(broker, "g", topic, elsewhere)
		return off == 1+flood && handled.count(next.ID) >= 1, err
	})
	if took := time.Since(start); took > 3*recheck {
		t.Errorf("the flood of %d misplaced records took %v, want at most about one re-read's wait (%v)", flood, took, recheck)
	}
	want := map[string]bool{first.ID: true}
	for _, ev := range evs {
		want[ev.ID] = true
	}
	if got := deadLettered(); !reflect.DeepEqual(got, want) {
		t.Errorf("dead-lettered %d records (%v), want the %d misplaced ones only", len(got), got, len(want))
	}
	if counted := rejectedByReason(t, reader); counted[envelope.ReasonWrongPartition] < 1+flood || len(counted) != 1 {
		t.Errorf("loom_bus_rejected_total by reason: %v, want %s: %d or more", counted, envelope.ReasonWrongPartition, 1+flood)
	}
}

// Partitions added to a topic while a group reads it are read, from their
// first record, without waiting for some other rebalance.
func TestRecordsOnAnAddedPartitionAreConsumed(t *testing.T) {
	t.Parallel()
	broker := startBroker(t)
	topic := newTopic(t, broker, 2)
	var handled seen
	startConsumer(t, bus.ConsumerConfig{Brokers: []string{broker}, GroupID: "g", Topics: []string{topic}},
		newProducer(t, broker), func(ctx context.Context, ev envelope.Event) error {
			handled.add(ev)
			return nil
		})
	writeTo := func(part int, ev envelope.Event) {
		t.Helper()
		m, err := envelope.Encode(ev)
		if err != nil {
			t.Fatal(err)
		}
		// A transport of its own: the default one's metadata may predate
		// the added partitions.
		transport := &kafka.Transport{}
		defer transport.CloseIdleConnections()
		w := &kafka.Writer{Addr: kafka.TCP(broker), RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond,
			Transport: transport, Balancer: kafka.BalancerFunc(func(kafka.Message, ...int) int { return part })}
		defer w.Close()
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		if err := w.WriteMessages(ctx, m); err != nil {
			t.Fatalf("write to partition %d: %v", part, err)
		}
	}
	first := event(topic, "n1", 1)
	writeTo(1, first)
	testkit.WaitFor(t, wait, "a record on a first partition handled", func() (bool, error) {
		return handled.count(first.ID) == 1, nil
	})

	client := &kafka.Client{Addr: kafka.TCP(broker)}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	resp, err := client.CreatePartitions(ctx, &kafka.CreatePartitionsRequest{Topics: []kafka.TopicPartitionsConfig{{Name: topic, Count: 4}}})
	if err != nil || resp.Errors[topic] != nil {
		t.Fatalf("add partitions: %v %v", err, resp)
	}
	added := event(topic, "n2", 2)
	writeTo(3, added)
	testkit.WaitFor(t, wait, "the record on the added partition handled", func() (bool, error) {
		return handled.count(added.ID) == 1, nil
	})
}

// nodeWriter returns the services' public key and a function that writes
// events, signed by node, on a partition of broker's topic.
func nodeWriter(t *testing.T, broker, node string) (ed25519.PublicKey, func(part int, evs ...envelope.Event)) {
	t.Helper()
	pub, priv, _ := ed25519.GenerateKey(nil)
	npub, npriv, _ := ed25519.GenerateKey(nil)
	cert, err := auth.SignNodeCert(priv, auth.NodeCert{Node: node, PublicKey: npub, NotAfter: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	signer, err := envelope.NewNodeSigner(npriv, cert)
	if err != nil {
		t.Fatal(err)
	}
	return pub, func(part int, evs ...envelope.Event) {
		t.Helper()
		ms := make([]kafka.Message, len(evs))
		for i, ev := range evs {
			m, err := envelope.Encode(ev)
			if err != nil {
				t.Fatal(err)
			}
			signer.Sign(&m)
			ms[i] = m
		}
		// A transport of its own: the default one's metadata may predate
		// added partitions.
		transport := &kafka.Transport{}
		defer transport.CloseIdleConnections()
		w := &kafka.Writer{Addr: kafka.TCP(broker), RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond,
			Transport: transport, Balancer: kafka.BalancerFunc(func(kafka.Message, ...int) int { return part })}
		defer w.Close()
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		if err := w.WriteMessages(ctx, ms...); err != nil {
			t.Fatalf("write to partition %d: %v", part, err)
		}
	}
}

// runVerifying runs a verifying consumer of topic in group "g" that
// re-reads partition counts at most every recheck, until the test ends.
func runVerifying(t *testing.T, broker, topic string, pub ed25519.PublicKey, recheck time.Duration, log *slog.Logger, handled *seen) {
	t.Helper()
	c := bus.NewConsumer(bus.ConsumerConfig{
		Brokers: []string{broker}, GroupID: "g", Topics: []string{topic},
		Verifier: envelope.NewVerifier(pub, nil), Logger: log,
	}, newProducer(t, broker), func(ctx context.Context, ev envelope.Event) error {
		handled.add(ev)
		return nil
	})
	bus.SetPartitionRecheck(c, recheck)
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

// While the partitions' end offsets cannot be read, node records not where
// their key goes are judged at once on the counts read before, not each
// after a wait for a re-read; the failure is logged once, and the counts
// are read again once the broker answers.
func TestFailedReReadDoesNotStallEachRecord(t *testing.T) {
	t.Parallel()
	cluster, broker := kfakeBroker(t)
	topic := newTopic(t, broker, 4)
	const node = "n1"
	home := bus.PartitionOf(node, 4)
	elsewhere := (home + 1) % 4
	pub, writeTo := nodeWriter(t, broker, node)
	var failing atomic.Bool
	cluster.ControlKey(int16(kmsg.ListOffsets), func(req kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		r := req.(*kmsg.ListOffsetsRequest)
		if !failing.Load() || !readsPartitionCounts(r) {
			return nil, nil, false
		}
		resp := r.ResponseKind().(*kmsg.ListOffsetsResponse)
		resp.Version = r.Version
		for _, rt := range r.Topics {
			st := kmsg.NewListOffsetsResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewListOffsetsResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode = kerr.UnknownServerError.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	const recheck = 2 * time.Second
	var logs lockedBuffer
	var handled seen
	runVerifying(t, broker, topic, pub, recheck, slog.New(slog.NewTextHandler(&logs, nil)), &handled)
	first := event(topic, node, 1)
	writeTo(home, first)
	testkit.WaitFor(t, wait, "the node's record handled", func() (bool, error) {
		return handled.count(first.ID) >= 1, nil
	})

	failing.Store(true)
	const flood = 5
	evs := make([]envelope.Event, flood)
	for i := range evs {
		evs[i] = event(topic, node, int32(10+i))
	}
	start := time.Now()
	writeTo(elsewhere, evs...)
	testkit.WaitFor(t, wait, "the misplaced records refused", func() (bool, error) {
		off, err := committedOffset(broker, "g", topic, elsewhere)
		return off == flood, err
	})
	if took := time.Since(start); took > 2*recheck {
		t.Errorf("%d misplaced records took %v while the re-read failed, want at most about one wait (%v)", flood, took, recheck)
	}
	if n := strings.Count(logs.String(), "could not read"); n != 1 {
		t.Errorf("the failed re-reads logged %d times, want once: %s", n, logs.String())
	}
	if got := len(handled.ids()); got != 1 {
		t.Errorf("handled %d records, want the honest one only", got)
	}

	failing.Store(false)
	testkit.WaitFor(t, wait, "the counts read again", func() (bool, error) {
		return strings.Contains(logs.String(), "read the topics' partition counts again"), nil
	})
}

// readsPartitionCounts reports whether r is a verifying consumer's read of
// its topics' partition ends (partitionCounts.endOffsets, through
// kafka.Client, which speaks the newest ListOffsets both sides know). The
// consumer's partition readers read a partition's first and last offsets
// through kafka-go's Conn, at ListOffsets v1, each time one (re)connects:
// after a rebalance, or a fetch cut short on a loaded machine. Failing
// those too stalled the very records the test waits for, on whichever
// partition's reader reconnected while the re-reads failed.
func readsPartitionCounts(r *kmsg.ListOffsetsRequest) bool { return r.Version > 1 }

// dlqIDs is the IDs of the records in topic's dead-letter topic, each once.
func dlqIDs(t *testing.T, broker, topic string) map[string]bool {
	t.Helper()
	dlq := topic + topics.DLQSuffix
	ids := map[string]bool{}
	if n := records(t, broker, dlq, 1); n > 0 {
		for _, m := range readN(t, broker, dlq, int(n), wait) {
			id, _ := header(m, envelope.HeaderID)
			ids[id] = true
		}
	}
	return ids
}

// growTo adds partitions to topic up to n.
func growTo(t *testing.T, broker, topic string, n int) {
	t.Helper()
	client := &kafka.Client{Addr: kafka.TCP(broker)}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	resp, err := client.CreatePartitions(ctx, &kafka.CreatePartitionsRequest{Topics: []kafka.TopicPartitionsConfig{{Name: topic, Count: int32(n)}}})
	if err != nil || resp.Errors[topic] != nil {
		t.Fatalf("add partitions up to %d: %v %v", n, err, resp)
	}
}

// A consumer that starts after a Loom topic grew (4 to 6 partitions)
// handles the backlog an honest node wrote under the count the topic is
// created with (topics.Declared), and refuses a record not on its key's
// partition under any count from that one to 6; a record written under 4
// once the consumer read 6 is refused too.
func TestBacklogUnderTheDeclaredCountIsHandled(t *testing.T) {
	t.Parallel()
	broker := startBroker(t)
	topic := topics.NodeTelemetry
	declared, _ := topics.Declared(topic)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := bus.EnsureTopics(ctx, []string{broker}, []topics.Spec{{Name: topic, Partitions: declared}, {Name: topic + topics.DLQSuffix, Partitions: 1}}); err != nil {
		t.Fatal(err)
	}
	// A node whose partition under the declared count is not its
	// partition under 6.
	node := ""
	for i := 0; node == "" && i < 1000; i++ {
		if k := fmt.Sprintf("n%d", i); bus.PartitionOf(k, declared) != bus.PartitionOf(k, 6) {
			node = k
		}
	}
	under := func(n int) int { return bus.PartitionOf(node, n) }
	elsewhere := 0
	for elsewhere == under(4) || elsewhere == under(5) || elsewhere == under(6) {
		elsewhere++
	}
	pub, writeTo := nodeWriter(t, broker, node)
	backlog := event(topic, node, 1)
	writeTo(under(declared), backlog)
	growTo(t, broker, topic, 6)
	misplaced := event(topic, node, 2)
	writeTo(elsewhere, misplaced)

	var handled seen
	runVerifying(t, broker, topic, pub, 100*time.Millisecond, testLogger(t), &handled)
	testkit.WaitFor(t, wait, "the backlog handled and the misplaced record refused", func() (bool, error) {
		if dlqIDs(t, broker, topic)[backlog.ID] {
			return false, errors.New("the honest backlog was dead-lettered")
		}
		return handled.count(backlog.ID) >= 1 && dlqIDs(t, broker, topic)[misplaced.ID], nil
	})
	late := event(topic, node, 3)
	writeTo(under(declared), late)
	testkit.WaitFor(t, wait, "the record written under the old count since refused", func() (bool, error) {
		return dlqIDs(t, broker, topic)[late.ID], nil
	})
	if handled.count(misplaced.ID) > 0 || handled.count(late.ID) > 0 {
		t.Errorf("handled %v, want the backlog only", handled.ids())
	}
}

// A topic that grows 4 to 5 to 6 partitions between two reads of its
// counts: an honest record placed under 5, which no read saw, is handled;
// one written under 5 once 6 was read is refused.
func TestRecordUnderASkippedCountIsHandled(t *testing.T) {
	t.Parallel()
	broker := startBroker(t)
	topic := newTopic(t, broker, 4)
	// Its partition under 5 is one of the first 4 (read without a
	// rebalance) and not its partition under 4 or 6.
	node := ""
	for i := 0; node == "" && i < 1000; i++ {
		k := fmt.Sprintf("n%d", i)
		if p5 := bus.PartitionOf(k, 5); p5 < 4 && p5 != bus.PartitionOf(k, 4) && p5 != bus.PartitionOf(k, 6) {
			node = k
		}
	}
	if node == "" {
		t.Fatal("no node name fits")
	}
	pub, writeTo := nodeWriter(t, broker, node)
	// The next re-read comes this long after the first read, at the
	// start: the topic grows twice well within it.
	const recheck = 8 * time.Second
	var handled seen
	runVerifying(t, broker, topic, pub, recheck, testLogger(t), &handled)
	first := event(topic, node, 1)
	writeTo(bus.PartitionOf(node, 4), first)
	testkit.WaitFor(t, wait, "the first record handled", func() (bool, error) {
		return handled.count(first.ID) >= 1, nil
	})

	growTo(t, broker, topic, 5)
	under5 := event(topic, node, 2)
	writeTo(bus.PartitionOf(node, 5), under5)
	growTo(t, broker, topic, 6)
	testkit.WaitFor(t, 2*recheck, "the record placed under 5 handled", func() (bool, error) {
		if dlqIDs(t, broker, topic)[under5.ID] {
			return false, errors.New("the honest record was dead-lettered")
		}
		return handled.count(under5.ID) >= 1, nil
	})
	late := event(topic, node, 3)
	writeTo(bus.PartitionOf(node, 5), late)
	testkit.WaitFor(t, 2*recheck, "the record written under 5 since refused", func() (bool, error) {
		return dlqIDs(t, broker, topic)[late.ID], nil
	})
}

// A consumer whose partition counts cannot be read, re-reading them in the
// background, still returns the error that ends it (here the group's
// authorization refused) while its context is live, rather than waiting
// for that context to end.
func TestFailingReReadsDoNotHoldRunsError(t *testing.T) {
	t.Parallel()
	cluster, broker := kfakeBroker(t)
	topic := newTopic(t, broker, 1)
	cluster.ControlKey(int16(kmsg.ListOffsets), func(req kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		return nil, errors.New("list offsets refused"), true
	})
	cluster.ControlKey(int16(kmsg.JoinGroup), func(req kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		r := req.(*kmsg.JoinGroupRequest)
		resp := r.ResponseKind().(*kmsg.JoinGroupResponse)
		resp.Version = r.Version
		resp.ErrorCode = kerr.GroupAuthorizationFailed.Code
		return resp, nil, true
	})
	pub, _, _ := ed25519.GenerateKey(nil)
	c := bus.NewConsumer(bus.ConsumerConfig{
		Brokers: []string{broker}, GroupID: "g", Topics: []string{topic},
		Verifier: envelope.NewVerifier(pub, nil), Logger: testLogger(t),
	}, newProducer(t, broker), func(context.Context, envelope.Event) error { return nil })
	bus.SetPartitionRecheck(c, 50*time.Millisecond)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	select {
	case err := <-done:
		if !errors.Is(err, kafka.GroupAuthorizationFailed) {
			t.Errorf("Run returned %v, want the group's authorization failure", err)
		}
	case <-time.After(wait):
		stop()
		err := <-done
		t.Fatalf("Run had not returned after %v with its context live (it returned %v once stopped)", wait, err)
	}
}
