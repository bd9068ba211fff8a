package pubsub

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"time"
	"unicode/utf8"

	ps "cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/loom-ml/loom/services/bridge/internal/cloudevent"
)

// Dead-letter attributes (docs/integration.md "Guarantees"; Kafka's are
// loom_dlq_* headers).
const (
	AttrDLQReason    = "loom-dlq-reason"
	AttrDLQCode      = "loom-dlq-code"
	AttrDLQTransport = "loom-dlq-transport"
	AttrDLQTime      = "loom-dlq-time"
	// AttrDLQDropped counts the message's own attributes left out to make
	// room for the four above (Pub/Sub allows maxAttributes).
	AttrDLQDropped = "loom-dlq-dropped-attributes"
)

// Pub/Sub's limits on a message's attributes.
const (
	maxAttributes   = 100
	maxAttrValueLen = 1024
)

// publishSettings bound what a publisher holds: a Publish call blocks
// rather than buffer without limit.
func publishSettings(p *ps.Publisher) {
	p.PublishSettings.FlowControlSettings = ps.FlowControlSettings{
		MaxOutstandingMessages: 1000,
		MaxOutstandingBytes:    64 << 20,
		LimitExceededBehavior:  ps.FlowControlBlock,
	}
	// The library waits up to 10 ms for a batch to fill; every public
	// event and dead letter is published by a caller that waits for it (an
	// ingress message's result, an egress batch), and with ordering keys
	// one batch per key is in flight at a time, so that wait was most of an
	// ingress message's time (ingressbench). Callers batch themselves.
	p.PublishSettings.DelayThreshold = time.Millisecond
}

// DeadLetters publishes refused messages to a dead-letter topic: a
// cloudevent.DeadLetters.
type DeadLetters struct {
	pub       *ps.Publisher
	topic     string
	transport string // "" : from the context, else "pubsub"
	now       func() time.Time
}

var _ cloudevent.DeadLetters = (*DeadLetters)(nil)

// DeadLetters returns the dead letters of topic nameOrID, checking that
// it exists.
func (c *Client) DeadLetters(ctx context.Context, nameOrID string) (*DeadLetters, error) {
	name, err := c.TopicName("pubsub-dead-letter-topic", nameOrID)
	if err != nil {
		return nil, err
	}
	_, err = c.ps.TopicAdminClient.GetTopic(ctx, &pubsubpb.GetTopicRequest{Topic: name})
	if err := exists(err, "topic", name, "-pubsub-dead-letter-topic"); err != nil {
		return nil, err
	}
	p := c.publisher(name)
	publishSettings(p)
	return &DeadLetters{pub: p, topic: name, now: time.Now}, nil
}

// Topic is the dead-letter topic's full name.
func (d *DeadLetters) Topic() string { return d.topic }

// For returns d naming transport in loom-dlq-transport. Without it, the
// transport is the one the Source put in the handler's context, else
// "pubsub".
func (d *DeadLetters) For(transport string) *DeadLetters {
	out := *d
	out.transport = transport
	return &out
}

// DeadLetter publishes raw to the dead-letter topic, as it arrived but
// without the credential (removed here too, whatever the caller did), with
// loom-dlq-reason (cut to Pub/Sub's 1024 bytes), loom-dlq-code (a gRPC
// code name), loom-dlq-transport and loom-dlq-time (RFC 3339), returning
// once Pub/Sub has stored it.
func (d *DeadLetters) DeadLetter(ctx context.Context, raw cloudevent.Raw, code, reason string) error {
	transport := d.transport
	if transport == "" {
		transport = transportOf(ctx)
	}
	if transport == "" {
		transport = "pubsub"
	}
	attrs := deadLetterAttributes(raw.Redacted().Attributes, map[string]string{
		AttrDLQReason:    truncate(reason, maxAttrValueLen),
		AttrDLQCode:      truncate(code, maxAttrValueLen),
		AttrDLQTransport: truncate(transport, maxAttrValueLen),
		AttrDLQTime:      d.now().UTC().Format(time.RFC3339Nano),
	})
	if _, err := d.pub.Publish(ctx, &ps.Message{Data: raw.Data, Attributes: attrs}).Get(ctx); err != nil {
		return fmt.Errorf("dead letter to %s: %w", d.topic, err)
	}
	return nil
}

// deadLetterAttributes is the message's own attributes (others' loom-dlq-*
// replaced by ours) plus ours; when together they are over Pub/Sub's
// limit, the message's own are kept in name order up to it and the number
// left out is said.
func deadLetterAttributes(own, ours map[string]string) map[string]string {
	keys := make([]string, 0, len(own))
	for k := range own {
		if _, mine := ours[k]; !mine && k != AttrDLQDropped {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	room := maxAttributes - len(ours)
	out := make(map[string]string, min(len(keys), room)+len(ours)+1)
	if len(keys) > room {
		room-- // for AttrDLQDropped
		out[AttrDLQDropped] = strconv.Itoa(len(keys) - room)
		keys = keys[:room]
	}
	for _, k := range keys {
		out[k] = own[k]
	}
	for k, v := range ours {
		out[k] = v
	}
	return out
}

// truncate cuts s to at most n bytes on a UTF-8 boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

// Sink publishes events to one topic: a cloudevent.Sink.
//
// Ordering: every event is published with the ordering key of its project
// (the loomproject extension; none when it has none), as the Kafka sink
// keys records by project. A subscription created with message ordering
// then receives each project's events in the order Loom published them;
// one without ignores the key. The cost is Pub/Sub's throughput per key
// (about 1 MB/s per project), far above what one project's state changes
// make. Topics have no ordering setting of their own, so there is nothing
// to detect: the subscriber chooses.
type Sink struct {
	pub  *ps.Publisher
	name string
}

var _ cloudevent.Sink = (*Sink)(nil)

// NewSink returns the sink of topic nameOrID (an id in c's project or
// projects/{p}/topics/{t}), checking that it exists. c's Close stops it.
func NewSink(ctx context.Context, c *Client, nameOrID string) (*Sink, error) {
	name, err := c.TopicName("egress", nameOrID)
	if err != nil {
		return nil, err
	}
	_, err = c.ps.TopicAdminClient.GetTopic(ctx, &pubsubpb.GetTopicRequest{Topic: name})
	if err := exists(err, "topic", name, "-egress"); err != nil {
		return nil, err
	}
	p := c.publisher(name)
	publishSettings(p)
	p.EnableMessageOrdering = true
	return &Sink{pub: p, name: "pubsub:" + name}, nil
}

// Name is "pubsub:projects/{p}/topics/{t}".
func (s *Sink) Name() string { return s.name }

// Publish publishes evs as Pub/Sub messages in binary mode (attributes
// "ce-..." and content-type; the data as the message's data) and returns
// once Pub/Sub acknowledged every one, or with the errors of those it did
// not (the caller publishes again; readers dedupe on the CloudEvent id).
// A project whose publish failed is resumed, so that the next call can
// publish its events again.
func (s *Sink) Publish(ctx context.Context, evs ...cloudevent.Event) error {
	results := make([]*ps.PublishResult, len(evs))
	for i, e := range evs {
		results[i] = s.pub.Publish(ctx, &ps.Message{Data: e.Data, Attributes: e.PubSubAttributes(),
			OrderingKey: e.Extensions[cloudevent.ExtProject]})
	}
	var first error
	failed := 0
	for i, r := range results {
		if _, err := r.Get(ctx); err != nil {
			if failed++; first == nil {
				first = fmt.Errorf("publish event %q to %s: %w", evs[i].ID, s.name, err)
			}
			if key := evs[i].Extensions[cloudevent.ExtProject]; key != "" {
				s.pub.ResumePublish(key)
			}
		}
	}
	if failed > 1 {
		return fmt.Errorf("%d of %d events not published; the first: %w", failed, len(evs), first)
	}
	return first
}
