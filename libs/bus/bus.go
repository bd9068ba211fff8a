// Package bus is Loom's Kafka layer on github.com/segmentio/kafka-go: a producer,
// a consumer-group runner that commits only after its handler succeeded, bounded
// retry with backoff, dead-lettering to "<topic>.dlq", and topic creation from
// the declarative list in package topics.
package bus

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel/propagation"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/topics"
)

// DLQ header names, set on every dead-lettered record (besides the original headers).
const (
	HeaderDLQError     = "loom_dlq_error"
	HeaderDLQTopic     = "loom_dlq_topic"
	HeaderDLQPartition = "loom_dlq_partition"
	HeaderDLQOffset    = "loom_dlq_offset"
	HeaderDLQAttempts  = "loom_dlq_attempts"
	// HeaderDLQReason is set on a record dead-lettered because its
	// signature was refused: the envelope.Reason* word (unsigned,
	// bad-signature, expired-certificate, wrong-node, ...).
	HeaderDLQReason = "loom_dlq_reason"
	// HeaderDLQDataDropped is set when the record's value had to be left
	// out: with the loom_dlq_* headers it was over the record limit. It
	// says the value's size; the value stays in the source topic, at the
	// partition and offset the other headers name, for the topic's
	// retention.
	HeaderDLQDataDropped = "loom_dlq_data_dropped"
)

// traceContext is the W3C propagator used on both sides of the bus. It is used
// directly (not through the global otel propagator) so that the bus works the
// same whether or not telemetry was set up.
var traceContext = propagation.TraceContext{}

// EnsureTopics creates every topic in specs that does not exist yet (existing
// ones are left alone) and returns once all of them can be written to.
//
// A spec with Partitions 0 gets the broker's default partition count; the
// replication factor is always the broker's default. Transient failures
// (broker not reachable yet, no controller) are retried with backoff until
// ctx ends; ctx is the only deadline. Errors that retrying cannot fix (an
// invalid config, say) are returned at once, naming the topic.
func EnsureTopics(ctx context.Context, brokers []string, specs []topics.Spec) error {
	return EnsureTopicsWith(ctx, brokers, nil, specs)
}

// EnsureTopicsWith is EnsureTopics over connections secured by sec.
func EnsureTopicsWith(ctx context.Context, brokers []string, sec *Security, specs []topics.Spec) error {
	var v errs.Validator
	v.Check(len(brokers) > 0, "brokers", "at least one broker address is required")
	for i, s := range specs {
		v.Check(s.Name != "", fmt.Sprintf("specs[%d].name", i), "is required")
		v.Check(s.Partitions >= 0, fmt.Sprintf("specs[%d].partitions", i), "must not be negative, got %d", s.Partitions)
	}
	if err := v.Err(); err != nil {
		return fmt.Errorf("ensure topics: %w", err)
	}
	if len(specs) == 0 {
		return nil
	}

	names := make([]string, 0, len(specs))
	for _, s := range specs {
		names = append(names, s.Name)
	}
	// A Transport of our own: kafka-go serves Client.Metadata from a cache
	// per Transport, refreshed only every MetadataTTL (6 s by default). A
	// short TTL lets topics that another process created meanwhile (we got
	// TOPIC_ALREADY_EXISTS) show up quickly.
	transport := sec.transport(&kafka.Transport{MetadataTTL: 200 * time.Millisecond, MetadataTopics: names})
	defer transport.CloseIdleConnections()
	client := &kafka.Client{Addr: kafka.TCP(brokers...), Transport: transport}

	req := &kafka.CreateTopicsRequest{}
	for _, s := range specs {
		tc := kafka.TopicConfig{Topic: s.Name, NumPartitions: s.Partitions, ReplicationFactor: -1}
		if tc.NumPartitions == 0 {
			tc.NumPartitions = -1
		}
		for _, k := range slices.Sorted(maps.Keys(s.Configs)) {
			tc.ConfigEntries = append(tc.ConfigEntries, kafka.ConfigEntry{ConfigName: k, ConfigValue: s.Configs[k]})
		}
		req.Topics = append(req.Topics, tc)
	}

	b := newBackoff(50*time.Millisecond, 2*time.Second)
	var last error
	for {
		done, err := ensureOnce(ctx, client, req, names)
		if done {
			return nil
		}
		if err != nil {
			var ke kafka.Error
			if errors.As(err, &ke) && !ke.Temporary() && !retriableTopicError(ke) {
				return err
			}
			last = err
		}
		if !sleepCtx(ctx, b.next()) {
			if last == nil {
				last = errors.New("topics not visible in metadata yet")
			}
			return fmt.Errorf("ensure topics %s: %w (last: %w)", strings.Join(names, ", "), ctx.Err(), last)
		}
	}
}

// ensureOnce creates the topics still missing and reports whether all of them
// are visible with a leader for every partition.
func ensureOnce(ctx context.Context, client *kafka.Client, req *kafka.CreateTopicsRequest, names []string) (bool, error) {
	missing, err := topicsNotReady(ctx, client, names)
	if err != nil {
		return false, err
	}
	if len(missing) == 0 {
		return true, nil
	}
	create := &kafka.CreateTopicsRequest{}
	for _, tc := range req.Topics {
		if slices.Contains(missing, tc.Topic) {
			create.Topics = append(create.Topics, tc)
		}
	}
	resp, err := client.CreateTopics(ctx, create)
	if err != nil {
		return false, fmt.Errorf("create topics %s: %w", strings.Join(missing, ", "), err)
	}
	for _, tc := range create.Topics {
		if e := resp.Errors[tc.Topic]; e != nil && !errors.Is(e, kafka.TopicAlreadyExists) {
			return false, fmt.Errorf("create topic %s: %w", tc.Topic, e)
		}
	}
	missing, err = topicsNotReady(ctx, client, names)
	return err == nil && len(missing) == 0, err
}

// topicsNotReady returns the names that metadata does not show yet, or shows
// with a partition that has no leader.
func topicsNotReady(ctx context.Context, client *kafka.Client, names []string) ([]string, error) {
	md, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: names})
	if err != nil {
		return nil, fmt.Errorf("metadata for %s: %w", strings.Join(names, ", "), err)
	}
	ready := map[string]bool{}
	for _, t := range md.Topics {
		ok := t.Error == nil && len(t.Partitions) > 0
		for _, p := range t.Partitions {
			if p.Error != nil || p.Leader.Host == "" {
				ok = false
			}
		}
		ready[t.Name] = ok
	}
	var missing []string
	for _, n := range names {
		if !ready[n] {
			missing = append(missing, n)
		}
	}
	return missing, nil
}

// retriableTopicError reports kafka errors that kafka-go does not call
// temporary but that do heal while a cluster or a new topic settles.
func retriableTopicError(e kafka.Error) bool {
	switch e {
	case kafka.UnknownTopicOrPartition, kafka.NotController, kafka.LeaderNotAvailable,
		kafka.BrokerNotAvailable, kafka.ReplicaNotAvailable:
		return true
	}
	return false
}

// Producer writes records synchronously with acks from all in-sync replicas.
// It is safe for concurrent use.
type Producer struct {
	w         *kafka.Writer
	transport *kafka.Transport
	// signer signs every record written (SetSigner); none: unsigned.
	signer envelope.SignerRef
	// tracer starts the publish spans (SetTracerProvider); none: no spans.
	tracer tracerRef
}

// SetSigner makes the producer sign every record it writes from now on
// with s (nil: stop signing). A node that renews its identity calls it
// again; writes in flight keep the signer they started with.
func (p *Producer) SetSigner(s *envelope.Signer) { p.signer.Set(s) }

// Signer returns the signer the producer uses now (nil: none).
func (p *Producer) Signer() *envelope.Signer { return p.signer.Get() }

// producerBatchTimeout bounds how long a record waits for company in a batch.
// Records published concurrently still share batches; a lone record leaves
// after at most this long instead of kafka-go's default second.
const producerBatchTimeout = time.Millisecond

// NewProducer returns a producer for brokers, tuned for low latency (small
// batch timeout) rather than kafka-go's 1 s default.
//
// Records are assigned to partitions by the murmur2 hash of their key, the
// same function the Java client and franz-go use by default, so a key lands
// on the same partition whichever client (or tool) writes it; records without
// a key are spread at random. Topics are never created implicitly: a record
// for a topic that does not exist fails (see EnsureTopics).
func NewProducer(brokers []string) *Producer { return NewSecureProducer(brokers, nil) }

// NewSecureProducer is NewProducer over connections secured by sec (nil:
// plaintext).
func NewSecureProducer(brokers []string, sec *Security) *Producer {
	// Its own Transport, so its metadata cache is its own; refreshed every
	// second (not 6) so that topics created after the producer started, and
	// moved partition leaders, are found within the writer's retries.
	transport := sec.transport(&kafka.Transport{MetadataTTL: time.Second})
	return &Producer{
		transport: transport,
		w: &kafka.Writer{
			Addr:                   kafka.TCP(brokers...),
			Balancer:               kafka.Murmur2Balancer{},
			RequiredAcks:           kafka.RequireAll,
			BatchTimeout:           producerBatchTimeout,
			AllowAutoTopicCreation: false,
			Transport:              transport,
		},
	}
}

// Publish encodes and writes events (each to its own Topic) and returns when the
// broker acknowledged all of them. An event without TraceParent gets the one
// in ctx (see telemetry.TraceParent).
//
// The events of one call are not written atomically: on error some of them
// may have been written. Producers that need all-or-nothing use the outbox
// (libs/store), whose relay republishes until acknowledged.
func (p *Producer) Publish(ctx context.Context, events ...envelope.Event) error {
	if len(events) == 0 {
		return nil
	}
	var tp string
	msgs := make([]kafka.Message, 0, len(events))
	for i, ev := range events {
		if ev.Topic == "" {
			return fmt.Errorf("publish: %w", errs.Invalid(fmt.Sprintf("events[%d].topic", i), "is required"))
		}
		if ev.TraceParent == "" {
			if tp == "" {
				tp = TraceParent(ctx)
			}
			ev.TraceParent = tp
		}
		m, err := envelope.Encode(ev)
		if err != nil {
			return fmt.Errorf("publish to %s: %w", ev.Topic, err)
		}
		msgs = append(msgs, m)
	}
	return p.PublishMessages(ctx, msgs...)
}

// PublishMessages writes already-encoded records (Topic set on each) and returns
// when the broker acknowledged all of them. With a signer (SetSigner) each
// record is signed as it is written (the caller's messages are not
// changed), so that records kept in an outbox are signed by whoever
// relays them, with the key of now. With a tracer (SetTracerProvider) each
// record gets a "publish <topic>" span, a child of its traceparent.
func (p *Producer) PublishMessages(ctx context.Context, msgs ...kafka.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	s := p.signer.Get()
	if s == nil && p.tracer.get() == nil {
		return p.publishRaw(ctx, msgs...)
	}
	out := make([]kafka.Message, len(msgs))
	for i, m := range msgs {
		m.Headers = slices.Clone(m.Headers)
		out[i] = m
	}
	// The publish span's context goes into the record before it is signed.
	end := p.startPublish(ctx, out)
	if s != nil {
		for i := range out {
			s.Sign(&out[i])
		}
	}
	err := p.publishRaw(ctx, out...)
	end(err)
	return err
}

// publishRaw writes msgs as they are, unsigned: dead letters keep the
// headers they came with, so that a refused record is never made
// acceptable by being signed on its way to the DLQ.
func (p *Producer) publishRaw(ctx context.Context, msgs ...kafka.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	for i, m := range msgs {
		if m.Topic == "" {
			return fmt.Errorf("publish: %w", errs.Invalid(fmt.Sprintf("msgs[%d].topic", i), "is required"))
		}
	}
	if err := p.w.WriteMessages(ctx, msgs...); err != nil {
		return fmt.Errorf("publish to %s: %w", topicList(msgs), err)
	}
	return nil
}

// Close flushes and closes the producer. It waits for every record still
// pending (one whose Publish gave up on its context stays in the writer's
// queue with its retries): against a broker that does not answer, that is
// the writer's whole retry budget, about 13 s. CloseWithin bounds it.
func (p *Producer) Close() error {
	err := p.w.Close()
	p.transport.CloseIdleConnections()
	if err != nil {
		return fmt.Errorf("close producer: %w", err)
	}
	return nil
}

// CloseWithin is Close for at most d (d <= 0: Close). When d passes first it
// returns an error saying so, and the producer goes on closing in the
// background: the records still pending are abandoned to the writer's
// retries, so it suits only a producer whose pending records are worth
// nothing or kept elsewhere (an outbox republishes its own) — a process that
// ends because its broker is gone.
func (p *Producer) CloseWithin(d time.Duration) error {
	if d <= 0 {
		return p.Close()
	}
	done := make(chan error, 1)
	go func() { done <- p.Close() }()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		return fmt.Errorf("close producer: records still pending after %s were abandoned", d)
	}
}

// TraceParent returns the W3C traceparent of the span in ctx, or "" when ctx
// carries no valid span context.
func TraceParent(ctx context.Context) string {
	c := propagation.MapCarrier{}
	traceContext.Inject(ctx, c)
	return c.Get(envelope.HeaderTraceParent)
}

// WithTraceParent returns ctx carrying the remote span context described by
// traceparent; an empty or invalid traceparent leaves ctx as it is.
func WithTraceParent(ctx context.Context, traceparent string) context.Context {
	if traceparent == "" {
		return ctx
	}
	return traceContext.Extract(ctx, propagation.MapCarrier{envelope.HeaderTraceParent: traceparent})
}

// topicList names the distinct topics of msgs, in first-seen order.
func topicList(msgs []kafka.Message) string {
	var names []string
	for _, m := range msgs {
		if !slices.Contains(names, m.Topic) {
			names = append(names, m.Topic)
		}
	}
	return strings.Join(names, ", ")
}

// backoff doubles a delay from first up to max.
type backoff struct {
	cur, max time.Duration
}

func newBackoff(first, max time.Duration) *backoff { return &backoff{cur: first, max: max} }

func (b *backoff) next() time.Duration {
	d := b.cur
	b.cur = min(b.cur*2, b.max)
	return d
}

// sleepCtx waits d and reports true, or reports false as soon as ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
