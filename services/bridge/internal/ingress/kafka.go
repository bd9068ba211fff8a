package ingress

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/loom-ml/loom/libs/bus"
	"github.com/loom-ml/loom/services/bridge/internal/cloudevent"
)

// KafkaGroup is the consumer group the bridge reads the ingress topic in.
const KafkaGroup = "loom-bridge-ingress"

// Dead-letter headers (docs/integration.md "Guarantees") on "<topic>.dlq" records.
const (
	HeaderDLQReason    = "loom_dlq_reason"
	HeaderDLQCode      = "loom_dlq_code"
	HeaderDLQTransport = "loom_dlq_transport"
	HeaderDLQTime      = "loom_dlq_time"
	// HeaderDLQDataDropped is set when the data had to be left out: the
	// message with the reason headers was over the record limit.
	HeaderDLQDataDropped = "loom_dlq_data_dropped"
)

// NewKafkaWriter is the writer of the dead letters and the results: every
// in-sync replica acknowledges, the key picks the partition as Loom's
// producers do (murmur2), topics are never created by a write.
func NewKafkaWriter(brokers []string, sec *bus.Security) *kafka.Writer {
	return &kafka.Writer{
		Addr:                   kafka.TCP(brokers...),
		Balancer:               kafka.Murmur2Balancer{},
		RequiredAcks:           kafka.RequireAll,
		BatchTimeout:           time.Millisecond,
		AllowAutoTopicCreation: false,
		Transport:              sec.Transport(),
	}
}

// KafkaResults publishes IngressResult events to topic in binary mode
// (ce_ headers, JSON value), keyed by project so that one project's events
// keep their order.
func KafkaResults(w *kafka.Writer, topic string) ResultPublisher {
	return func(ctx context.Context, project string, ev cloudevent.Event) error {
		return w.WriteMessages(ctx, kafka.Message{Topic: topic, Key: []byte(project), Value: ev.Data, Headers: ev.KafkaHeaders()})
	}
}

// KafkaDeadLetters writes refused records to "<topic>.dlq": the record as
// it came (key, value, headers) without the credential, with the reason,
// the gRPC code name, the transport and the time in loom_dlq_* headers.
// One over the record limit goes without its value, then also without its
// key and all but its naming attributes (HeaderDLQDataDropped says so):
// a dead letter that cannot be written would hold the ingress forever.
type KafkaDeadLetters struct {
	W *kafka.Writer
	// Topic is the dead-letter topic, Transport the source's name.
	Topic, Transport string
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// DeadLetter implements cloudevent.DeadLetters.
func (k *KafkaDeadLetters) DeadLetter(ctx context.Context, raw cloudevent.Raw, code, reason string) error {
	now := time.Now
	if k.Now != nil {
		now = k.Now
	}
	raw = raw.Redacted() // whatever the caller did: never a credential in a dead letter
	names := make([]string, 0, len(raw.Attributes))
	for n := range raw.Attributes {
		names = append(names, n)
	}
	sort.Strings(names)
	hs := make([]kafka.Header, 0, len(names)+4)
	for _, n := range names {
		switch n {
		case HeaderDLQReason, HeaderDLQCode, HeaderDLQTransport, HeaderDLQTime, HeaderDLQDataDropped:
			continue // a producer's own copy would be ambiguous
		}
		hs = append(hs, kafka.Header{Key: n, Value: []byte(raw.Attributes[n])})
	}
	hs = append(hs,
		kafka.Header{Key: HeaderDLQReason, Value: []byte(reason)},
		kafka.Header{Key: HeaderDLQCode, Value: []byte(code)},
		kafka.Header{Key: HeaderDLQTransport, Value: []byte(k.Transport)},
		kafka.Header{Key: HeaderDLQTime, Value: []byte(now().UTC().Format(time.RFC3339Nano))})
	err := k.W.WriteMessages(ctx, kafka.Message{Topic: k.Topic, Key: raw.Key, Value: raw.Data, Headers: hs})
	if bus.TooLarge(err) {
		// The message with the reason headers is over the record limit (it
		// was at it on the way in): the reason goes without the data, so
		// that one message cannot hold the ingress forever.
		hs = append(hs, kafka.Header{Key: HeaderDLQDataDropped,
			Value: fmt.Appendf(nil, "%d bytes: the data with the reason is over the record limit", len(raw.Data))})
		err = k.W.WriteMessages(ctx, kafka.Message{Topic: k.Topic, Key: raw.Key, Headers: hs})
	}
	if bus.TooLarge(err) {
		// Still over: the key and the attributes are what is large. The
		// reason goes with only the attributes that name the message,
		// each cut to the bound of an attribute, so that it fits any limit.
		keep := make([]kafka.Header, 0, 8)
		for _, h := range hs {
			switch h.Key {
			case "ce_id", "ce_source", "ce_type", "ce_specversion", HeaderDLQReason, HeaderDLQCode, HeaderDLQTransport, HeaderDLQTime:
				if len(h.Value) > cloudevent.MaxAttrLen {
					h.Value = append(h.Value[:cloudevent.MaxAttrLen-3:cloudevent.MaxAttrLen-3], "..."...)
				}
				keep = append(keep, h)
			}
		}
		keep = append(keep, kafka.Header{Key: HeaderDLQDataDropped,
			Value: fmt.Appendf(nil, "%d bytes of data, %d of key, %d attributes: the message with the reason is over the record limit",
				len(raw.Data), len(raw.Key), len(raw.Attributes))})
		err = k.W.WriteMessages(ctx, kafka.Message{Topic: k.Topic, Headers: keep})
	}
	if err != nil {
		return fmt.Errorf("dead letter to %s: %w", k.Topic, err)
	}
	return nil
}

// KafkaSource reads CloudEvents (binary mode) from one topic in a
// consumer group and commits a record only after the handler returned nil
// for it: at least once. A handler error (not decided yet) retries the
// same record in place with backoff, counting Delivery.Attempt, so that the
// partition's order holds; the handler bounds how long that can last.
type KafkaSource struct {
	Brokers []string
	Topic   string
	// Group defaults to KafkaGroup.
	Group    string
	Security *bus.Security
	Log      *slog.Logger
	// Backoff and MaxBackoff pace the retries of one record (100 ms and
	// 5 s when 0).
	Backoff, MaxBackoff time.Duration
	// Workers is how many records are handled at once (DefaultWorkers
	// when 0): a partition's records all go to one worker, in order, so
	// that one producer's messages (keyed alike) keep their order.
	Workers int
}

// DefaultWorkers is KafkaSource.Workers' default: one message waits on the
// gateway at a time per worker, so a few hide the call's latency.
const DefaultWorkers = 8

// workerQueue bounds the records fetched ahead per worker.
const workerQueue = 16

// Name implements cloudevent.Source: "kafka:{topic}".
func (s *KafkaSource) Name() string { return "kafka:" + s.Topic }

// Run implements cloudevent.Source.
func (s *KafkaSource) Run(ctx context.Context, h cloudevent.Handler) error {
	group := s.Group
	if group == "" {
		group = KafkaGroup
	}
	log := s.Log
	if log == nil {
		log = slog.Default()
	}
	first, most := s.Backoff, s.MaxBackoff
	if first <= 0 {
		first = 100 * time.Millisecond
	}
	if most <= 0 {
		most = 5 * time.Second
	}
	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers: s.Brokers, GroupID: group, Topic: s.Topic, Dialer: s.Security.Dialer(),
		StartOffset: kafka.FirstOffset, MinBytes: 1, MaxBytes: bus.FetchMaxBytes, MaxWait: 250 * time.Millisecond,
		// Commits are sent every CommitInterval, not one round trip per
		// record: a record handled but not yet committed when the bridge
		// dies is delivered again and acked as a duplicate by the dedupe
		// (at least once in, applied once), and a synchronous commit per
		// record cost most of a message's time (ingressbench).
		CommitInterval: CommitInterval,
		ReadBackoffMin: 50 * time.Millisecond, ReadBackoffMax: time.Second,
	})
	defer func() {
		if err := r.Close(); err != nil {
			log.Warn("ingress: close reader", "topic", s.Topic, "err", err)
		}
	}()
	sleep := func(d time.Duration) bool {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			return true
		}
	}
	n := s.Workers
	if n <= 0 {
		n = DefaultWorkers
	}
	queues := make([]chan kafka.Message, n)
	var wg sync.WaitGroup
	for i := range queues {
		queues[i] = make(chan kafka.Message, workerQueue)
		wg.Add(1)
		go func(q <-chan kafka.Message) {
			defer wg.Done()
			for m := range q {
				if !s.handle(ctx, r, h, m, first, most, sleep, log) {
					// Stopping: what is queued stays uncommitted and is
					// delivered again after the restart.
					for range q {
					}
					return
				}
			}
		}(queues[i])
	}
	defer func() {
		for _, q := range queues {
			close(q)
		}
		wg.Wait()
	}()
	fetchDelay := first
	for {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			log.Warn("ingress: fetch failed; retrying", "topic", s.Topic, "err", err)
			if !sleep(fetchDelay) {
				return nil
			}
			fetchDelay = min(fetchDelay*2, most)
			continue
		}
		fetchDelay = first
		select {
		case queues[m.Partition%n] <- m:
		case <-ctx.Done():
			return nil
		}
	}
}

// handle hands m to h until h returns nil (retrying in place with backoff,
// counting Delivery.Attempt), then commits it. It returns false when ctx
// ended first (m is not committed).
func (s *KafkaSource) handle(ctx context.Context, r *kafka.Reader, h cloudevent.Handler, m kafka.Message,
	first, most time.Duration, sleep func(time.Duration) bool, log *slog.Logger) bool {
	dl := Delivery(s.Name(), m)
	delay := first
	for attempt := 1; ; attempt++ {
		dl.Attempt = attempt
		err := h(ctx, dl)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return false
		}
		log.Warn("ingress: message not decided yet; retrying", "topic", s.Topic, "partition", m.Partition, "offset", m.Offset, "attempt", attempt, "err", err)
		if !sleep(delay) {
			return false
		}
		delay = min(delay*2, most)
	}
	// CommitMessages is safe from several workers; each partition's
	// commits come from one worker, in order. It marks the offset; the
	// reader sends it within CommitInterval.
	if err := r.CommitMessages(ctx, m); err != nil {
		if ctx.Err() != nil {
			return false
		}
		// Delivered again after a rebalance; the dedupe acks it then.
		log.Warn("ingress: commit failed", "topic", s.Topic, "partition", m.Partition, "offset", m.Offset, "err", err)
	}
	return true
}

// CommitInterval is how often the Kafka source commits the offsets of the
// records it handled.
const CommitInterval = 100 * time.Millisecond

// Delivery is a Kafka record as a cloudevent.Delivery from transport.
func Delivery(transport string, m kafka.Message) cloudevent.Delivery {
	ev, err := cloudevent.FromKafka(m.Headers, m.Value)
	raw := cloudevent.Raw{Attributes: make(map[string]string, len(m.Headers)), Data: m.Value, Key: m.Key}
	for _, h := range m.Headers {
		raw.Attributes[h.Key] = string(h.Value)
	}
	return cloudevent.Delivery{Transport: transport, Event: ev, ParseErr: err, Raw: raw}
}
