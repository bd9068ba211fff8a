// Package envelope wraps Loom's bus messages: CloudEvents attributes travel as
// Kafka headers (ce_id, ce_type, ce_source, ce_subject, ce_time, traceparent) and
// the protobuf payload travels, binary-encoded, as the record value.
//
// The ce_type of an event is the full protobuf name of its payload
// (for example "loom.events.v1.SubmitJob"), so the set of known event types is
// the set of messages registered with a Registry.
package envelope

import (
	"crypto/rand"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/segmentio/kafka-go"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
)

// Header names used on every Loom record (CloudEvents Kafka binary mode).
const (
	HeaderID          = "ce_id"
	HeaderType        = "ce_type"
	HeaderSource      = "ce_source"
	HeaderSubject     = "ce_subject"
	HeaderTime        = "ce_time"
	HeaderSpecVersion = "ce_specversion"
	HeaderContentType = "content-type"
	HeaderTraceParent = "traceparent"
	// HeaderPrincipal carries the authenticated principal a command was
	// made for (the gateway stamps it; see Event.Principal).
	HeaderPrincipal = "loom_principal"
)

// ContentType is the content-type of every Loom payload.
const ContentType = "application/protobuf"

// ErrUnknownType is returned (wrapped) by Decode when the record's ce_type is not
// registered. Consumers log and skip such records; they never crash on them.
var ErrUnknownType = errors.New("unknown event type")

// ErrMalformed is returned (wrapped) by Decode when a record lacks a required
// attribute or its payload does not parse. Such a record can never succeed.
var ErrMalformed = errors.New("malformed event")

// Event is one message on the bus.
type Event struct {
	// ID is unique per event (a ULID); consumers use it to apply an event once.
	ID string
	// Type is the payload's full protobuf name.
	Type string
	// Source names the producing service, e.g. "loom/scheduler".
	Source string
	// Subject names the entity the event is about, e.g. a job name.
	Subject string
	// Time is when the event was created.
	Time time.Time
	// TraceParent is the W3C trace context of the operation that caused the event.
	TraceParent string
	// Principal is the authenticated principal (auth.Principal.Name, e.g.
	// "users/alice") whose request caused a command. The gateway sets it
	// from the call's verified credential; consumers act on it, never on a
	// user named in the payload.
	Principal string
	// Signer is who signed the record, verified (Registry.DecodeVerified):
	// "services/<name>" or "nodes/<node>"; "" when the record was decoded
	// without verification. It is never read from a header unchecked.
	Signer string
	// SignerRegistration is a node signer's registration, from its verified
	// certificate (auth.NodeCert.Reg); "" for a service, a certificate that
	// names none, or a record decoded without verification.
	SignerRegistration string
	// Topic is the Kafka topic the event is (or was) written to.
	Topic string
	// Key is the Kafka record key: the entity whose order matters.
	Key string
	// Payload is the decoded protobuf message.
	Payload proto.Message

	// Partition and Offset are set on consumed events.
	Partition int
	Offset    int64
	// HighWaterMark is, on a consumed event, its partition's high-water
	// mark when the record was fetched (the offset the next record would
	// get): Offset+1 < HighWaterMark says more records were already waiting
	// behind it, which no producer can forge (timestamps it can). 0 when
	// unknown.
	HighWaterMark int64
}

// NewID returns a new ULID string: unique, and sortable by creation time,
// also between ids made in one millisecond by this process (its entropy is
// monotonic within a millisecond, drawn from crypto/rand).
func NewID() string {
	idMu.Lock()
	defer idMu.Unlock()
	return ulid.MustNew(ulid.Now(), idEntropy).String()
}

// idEntropy is NewID's: a fresh random value in each millisecond, then
// random increments, so that ids of one millisecond sort in the order they
// were made (list pages by id rely on it). Not safe for concurrent use:
// idMu guards it.
var (
	idMu      sync.Mutex
	idEntropy = ulid.Monotonic(rand.Reader, 0)
)

// New returns an event for payload with a fresh ID, the current time, and the
// payload's full name as its type. Subject defaults to key.
func New(topic, key, source string, payload proto.Message) Event {
	return Event{
		ID:      NewID(),
		Type:    TypeOf(payload),
		Source:  source,
		Subject: key,
		Time:    time.Now().UTC(),
		Topic:   topic,
		Key:     key,
		Payload: payload,
	}
}

// Route returns an event for payload, as New does, on the topic package
// topics routes the payload's type to (topics.For). It is how every service
// turns what it emits into an event: the service names the key (and may set
// Subject), never the topic. A type no topic carries is an error wrapping
// topics.ErrUnrouted, so it is refused where it is written, not dropped.
func Route(key, source string, payload proto.Message) (Event, error) {
	topic, err := topics.For(payload)
	if err != nil {
		return Event{}, fmt.Errorf("event from %s keyed %q: %w", source, key, err)
	}
	return New(topic, key, source, payload), nil
}

// TypeOf is the ce_type of an event carrying payload: the payload's full
// protobuf name. Consumers compare it with a record's ce_type header to pass
// over records without decoding them.
func TypeOf(payload proto.Message) string {
	return string(payload.ProtoReflect().Descriptor().FullName())
}

// Encode turns an event into a Kafka message. The event must have an ID, a
// type and a payload.
func Encode(e Event) (kafka.Message, error) {
	if e.ID == "" || e.Payload == nil {
		return kafka.Message{}, fmt.Errorf("encode event: %w: id and payload are required", ErrMalformed)
	}
	if e.Type == "" {
		e.Type = TypeOf(e.Payload)
	}
	value, err := proto.Marshal(e.Payload)
	if err != nil {
		return kafka.Message{}, fmt.Errorf("encode event %s (%s): %w", e.ID, e.Type, err)
	}
	if e.Time.IsZero() {
		e.Time = time.Now().UTC()
	}
	headers := []kafka.Header{
		{Key: HeaderSpecVersion, Value: []byte("1.0")},
		{Key: HeaderID, Value: []byte(e.ID)},
		{Key: HeaderType, Value: []byte(e.Type)},
		{Key: HeaderSource, Value: []byte(e.Source)},
		{Key: HeaderTime, Value: []byte(e.Time.UTC().Format(time.RFC3339Nano))},
		{Key: HeaderContentType, Value: []byte(ContentType)},
	}
	if e.Subject != "" {
		headers = append(headers, kafka.Header{Key: HeaderSubject, Value: []byte(e.Subject)})
	}
	if e.TraceParent != "" {
		headers = append(headers, kafka.Header{Key: HeaderTraceParent, Value: []byte(e.TraceParent)})
	}
	if e.Principal != "" {
		headers = append(headers, kafka.Header{Key: HeaderPrincipal, Value: []byte(e.Principal)})
	}
	return kafka.Message{Topic: e.Topic, Key: []byte(e.Key), Value: value, Headers: headers}, nil
}

// Registry maps event types to protobuf message types.
type Registry struct {
	types map[string]protoreflect.MessageType
}

// NewRegistry returns a registry that knows the given payload types.
func NewRegistry(payloads ...proto.Message) *Registry {
	r := &Registry{types: map[string]protoreflect.MessageType{}}
	r.Register(payloads...)
	return r
}

// Register adds payload types to the registry.
func (r *Registry) Register(payloads ...proto.Message) {
	for _, p := range payloads {
		mt := p.ProtoReflect().Type()
		r.types[string(mt.Descriptor().FullName())] = mt
	}
}

// Known reports whether typ is registered.
func (r *Registry) Known(typ string) bool {
	_, ok := r.types[typ]
	return ok
}

// Default is a registry of every message in loom.events.v1.
var Default = func() *Registry {
	r := NewRegistry()
	fd := eventsv1.File_loom_events_v1_events_proto
	msgs := fd.Messages()
	for i := 0; i < msgs.Len(); i++ {
		mt, err := protoregistry.GlobalTypes.FindMessageByName(msgs.Get(i).FullName())
		if err == nil {
			r.types[string(mt.Descriptor().FullName())] = mt
		}
	}
	return r
}()

// Decode turns a Kafka message into an event. An unregistered ce_type gives an
// error wrapping ErrUnknownType; a record without ce_id or ce_type, or with a
// payload that does not parse, gives one wrapping ErrMalformed.
func (r *Registry) Decode(m kafka.Message) (Event, error) {
	e := Event{Topic: m.Topic, Key: string(m.Key), Partition: m.Partition, Offset: m.Offset, HighWaterMark: m.HighWaterMark}
	readHeaders(&e, m.Headers)
	if e.ID == "" || e.Type == "" {
		return e, fmt.Errorf("decode %s[%d]@%d: %w: missing ce_id or ce_type", m.Topic, m.Partition, m.Offset, ErrMalformed)
	}
	mt, ok := r.types[e.Type]
	if !ok {
		return e, fmt.Errorf("decode %s[%d]@%d: %w %q", m.Topic, m.Partition, m.Offset, ErrUnknownType, e.Type)
	}
	msg := mt.New().Interface()
	if err := proto.Unmarshal(m.Value, msg); err != nil {
		return e, fmt.Errorf("decode %s (%s): %w: %v", e.ID, e.Type, ErrMalformed, err)
	}
	e.Payload = msg
	return e, nil
}

// readHeaders fills e's CloudEvents attributes and principal from headers.
func readHeaders(e *Event, headers []kafka.Header) {
	for _, h := range headers {
		v := string(h.Value)
		switch h.Key {
		case HeaderID:
			e.ID = v
		case HeaderType:
			e.Type = v
		case HeaderSource:
			e.Source = v
		case HeaderSubject:
			e.Subject = v
		case HeaderTraceParent:
			e.TraceParent = v
		case HeaderPrincipal:
			e.Principal = v
		case HeaderTime:
			if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
				e.Time = t
			}
		}
	}
}
