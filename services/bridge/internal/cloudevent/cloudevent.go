// Package cloudevent is the bridge's one reading and writing of CloudEvents
// 1.0 in binary mode: Kafka headers ("ce_id", ...; the Kafka protocol
// binding) and Pub/Sub attributes ("ce-id", ...; Google's Pub/Sub binding),
// with the data as the record's value or the message's data. It also names
// the two seams the bridge's transports meet at: a Source delivers messages,
// a Sink publishes events. Everything here is bounded: an attribute, an
// extension count and the data each have a limit, and a message over one is
// refused with the limit named, never truncated.
package cloudevent

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"
)

// SpecVersion is the only CloudEvents version read and written.
const SpecVersion = "1.0"

// Extension attributes Loom reads or writes.
const (
	// ExtCredential carries the producer's credential (a Loom API key,
	// "loomk_..."), checked exactly as the gateway checks an API call's. It
	// is never copied into a dead letter, a result or a log.
	ExtCredential = "credential"
	// ExtProject is set on every public event: the project it belongs to,
	// so that subscribers filter on it (Pub/Sub attribute "ce-loomproject").
	ExtProject = "loomproject"
)

// Bounds on what a message may carry. A message over one is malformed.
const (
	MaxAttrLen    = 1024 // bytes of one attribute's value (id, source, type, subject, an extension)
	MaxExtensions = 32   // extension attributes on one event
	// DefaultMaxData is the default bound on an event's data (the bridge's
	// -max-message-bytes); Kafka's default record limit is 1 MiB.
	DefaultMaxData = 1 << 20
)

// Event is one CloudEvent.
type Event struct {
	ID, Source, Type, Subject string
	Time                      time.Time
	// DataContentType is the data's media type ("application/json").
	DataContentType string
	// Extensions are the other attributes by name (lowercase a-z0-9).
	Extensions map[string]string
	Data       []byte
}

// Validate checks the required attributes and the bounds; the error names
// the attribute and the limit.
func (e Event) Validate(maxData int) error {
	for _, a := range []struct{ name, v string }{{"id", e.ID}, {"source", e.Source}, {"type", e.Type}} {
		if a.v == "" {
			return fmt.Errorf("CloudEvents attribute %q is required", a.name)
		}
	}
	for _, a := range []struct{ name, v string }{{"id", e.ID}, {"source", e.Source}, {"type", e.Type}, {"subject", e.Subject}, {"datacontenttype", e.DataContentType}} {
		if len(a.v) > MaxAttrLen {
			return fmt.Errorf("CloudEvents attribute %q is %d bytes, over the limit of %d", a.name, len(a.v), MaxAttrLen)
		}
	}
	if len(e.Extensions) > MaxExtensions {
		return fmt.Errorf("%d CloudEvents extension attributes, over the limit of %d", len(e.Extensions), MaxExtensions)
	}
	for k, v := range e.Extensions {
		if !validName(k) {
			return fmt.Errorf("CloudEvents attribute name %q: want lowercase letters and digits, at most 20", k)
		}
		if len(v) > MaxAttrLen {
			return fmt.Errorf("CloudEvents attribute %q is %d bytes, over the limit of %d", k, len(v), MaxAttrLen)
		}
	}
	if maxData > 0 && len(e.Data) > maxData {
		return fmt.Errorf("data is %d bytes, over the limit of %d (-max-message-bytes)", len(e.Data), maxData)
	}
	return nil
}

func validName(k string) bool {
	if k == "" || len(k) > 20 {
		return false
	}
	for _, c := range k {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// attrs is the event's attributes under a prefix ("ce_" or "ce-"), with
// the content type under contentKey.
func (e Event) attrs(prefix, contentKey string) map[string]string {
	out := map[string]string{prefix + "specversion": SpecVersion, prefix + "id": e.ID,
		prefix + "source": e.Source, prefix + "type": e.Type}
	if e.Subject != "" {
		out[prefix+"subject"] = e.Subject
	}
	if !e.Time.IsZero() {
		out[prefix+"time"] = e.Time.UTC().Format(time.RFC3339Nano)
	}
	if e.DataContentType != "" {
		out[contentKey] = e.DataContentType
	}
	for k, v := range e.Extensions {
		out[prefix+k] = v
	}
	return out
}

// parse reads an event from attributes under prefix. Attributes without the
// prefix (other than contentKey) are ignored, as the bindings allow.
func parse(get map[string]string, prefix, contentKey string, data []byte) (Event, error) {
	e := Event{Data: data, DataContentType: get[contentKey]}
	if v, ok := get[prefix+"specversion"]; !ok {
		return e, fmt.Errorf("not a CloudEvent: attribute %sspecversion is missing (binary mode: %sid, %ssource, %stype, %sspecversion=%s)", prefix, prefix, prefix, prefix, prefix, SpecVersion)
	} else if v != SpecVersion {
		return e, fmt.Errorf("CloudEvents specversion %q: only %s is read", v, SpecVersion)
	}
	for k, v := range get {
		name, ok := strings.CutPrefix(k, prefix)
		if !ok {
			continue
		}
		switch name {
		case "specversion":
		case "id":
			e.ID = v
		case "source":
			e.Source = v
		case "type":
			e.Type = v
		case "subject":
			e.Subject = v
		case "datacontenttype":
			// Binary mode carries it as content-type; tolerate both.
			if e.DataContentType == "" {
				e.DataContentType = v
			}
		case "time":
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				return e, fmt.Errorf("CloudEvents attribute \"time\" %q: want RFC 3339", v)
			}
			e.Time = t
		default:
			if e.Extensions == nil {
				e.Extensions = map[string]string{}
			}
			if len(e.Extensions) >= MaxExtensions {
				return e, fmt.Errorf("more than %d CloudEvents extension attributes", MaxExtensions)
			}
			e.Extensions[name] = v
		}
	}
	return e, nil
}

// KafkaHeaders is the event in Kafka's binary mode ("ce_" headers and
// "content-type"), in a stable order.
func (e Event) KafkaHeaders() []kafka.Header {
	m := e.attrs("ce_", "content-type")
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]kafka.Header, 0, len(keys))
	for _, k := range keys {
		out = append(out, kafka.Header{Key: k, Value: []byte(m[k])})
	}
	return out
}

// FromKafka reads a record in binary mode. A header given twice is refused
// (which one would count is ambiguous); so is one over MaxAttrLen.
func FromKafka(headers []kafka.Header, value []byte) (Event, error) {
	if len(headers) > 2*MaxExtensions+8 {
		return Event{}, fmt.Errorf("%d headers, over the limit of %d", len(headers), 2*MaxExtensions+8)
	}
	m := make(map[string]string, len(headers))
	for _, h := range headers {
		if _, dup := m[h.Key]; dup {
			return Event{}, fmt.Errorf("header %q given twice", h.Key)
		}
		if len(h.Value) > MaxAttrLen {
			return Event{}, fmt.Errorf("header %q is %d bytes, over the limit of %d", h.Key, len(h.Value), MaxAttrLen)
		}
		m[h.Key] = string(h.Value)
	}
	return parse(m, "ce_", "content-type", value)
}

// PubSubAttributes is the event as Pub/Sub attributes ("ce-" and
// "content-type").
func (e Event) PubSubAttributes() map[string]string { return e.attrs("ce-", "content-type") }

// FromPubSub reads a Pub/Sub message's attributes and data.
func FromPubSub(attrs map[string]string, data []byte) (Event, error) {
	if len(attrs) > 2*MaxExtensions+8 {
		return Event{}, fmt.Errorf("%d attributes, over the limit of %d", len(attrs), 2*MaxExtensions+8)
	}
	for k, v := range attrs {
		if len(v) > MaxAttrLen {
			return Event{}, fmt.Errorf("attribute %q is %d bytes, over the limit of %d", k, len(v), MaxAttrLen)
		}
	}
	return parse(attrs, "ce-", "content-type", data)
}

// Raw is a message as it arrived, for a dead letter: its attributes (Kafka
// headers or Pub/Sub attributes) and its bytes. Redacted removes the
// credential before it is copied anywhere.
type Raw struct {
	Attributes map[string]string
	Data       []byte
	// Key is the Kafka record's key (nil from Pub/Sub).
	Key []byte
}

// Redacted returns r without the credential attribute (either binding's
// spelling), so that a dead letter never carries a secret.
func (r Raw) Redacted() Raw {
	out := Raw{Data: r.Data, Key: r.Key, Attributes: make(map[string]string, len(r.Attributes))}
	for k, v := range r.Attributes {
		if k == "ce_"+ExtCredential || k == "ce-"+ExtCredential {
			continue
		}
		out.Attributes[k] = v
	}
	return out
}

// Delivery is one message from a Source.
type Delivery struct {
	// Transport names where it came from: "kafka:loom.ingress.v1" or
	// "pubsub:projects/{p}/subscriptions/{s}".
	Transport string
	// Event is the parsed event; ParseErr says why it could not be parsed
	// (then Event holds what was read).
	Event    Event
	ParseErr error
	// Raw is the message as it arrived, for the dead letters.
	Raw Raw
	// Attempt counts deliveries of this message where the transport knows
	// (Pub/Sub's delivery attempt; 0 when unknown).
	Attempt int
}

// Handler decides one delivery. Returning nil acknowledges it (it will not
// come again); an error leaves it unacknowledged, to be delivered again (a
// transient failure: Loom could not decide yet). A handler never returns an
// error for a message that is merely bad: that is a decision (dead letter).
type Handler func(ctx context.Context, d Delivery) error

// Source delivers messages to a Handler until ctx ends.
type Source interface {
	// Name is the transport's name (Delivery.Transport).
	Name() string
	// Run calls h for each message, acknowledging the ones h returned nil
	// for, until ctx ends (then it returns nil) or the transport fails.
	Run(ctx context.Context, h Handler) error
}

// Sink publishes events to one destination.
type Sink interface {
	// Name is "kafka:{topic}" or "pubsub:projects/{p}/topics/{t}".
	Name() string
	// Publish returns once the destination acknowledged every event, or
	// with an error (nothing is known to be published then: the caller
	// retries, and readers dedupe on the CloudEvent id).
	Publish(ctx context.Context, evs ...Event) error
}

// DeadLetters takes what a Source's messages were refused for, with the
// reason; each transport has its own (loom.ingress.v1.dlq, a Pub/Sub
// dead-letter topic).
type DeadLetters interface {
	// DeadLetter publishes raw (redacted by the caller) with the reason and
	// the gRPC code name, returning once it is stored.
	DeadLetter(ctx context.Context, raw Raw, code, reason string) error
}
