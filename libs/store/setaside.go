package store

import (
	"context"
	"errors"

	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// DeadStreamMaxLen bounds the dead stream ("<prefix>outbox:dead"): the relay
// trims it to about this many of the newest set-aside entries, so that a
// stream of refused entries cannot fill Redis.
const DeadStreamMaxLen = 10000

// setAsideAttempts bounds the calls of a failing SetAsideFunc for one entry.
const setAsideAttempts = 5

// Why the relay set an entry aside (SetAside.Kind, and the dead stream's
// "kind" field).
const (
	// SetAsideRefused: the broker refused the record for good (RefusedForGood).
	SetAsideRefused = "refused"
	// SetAsideUndecodable: the entry is not one Apply wrote.
	SetAsideUndecodable = "undecodable"
)

// SetAside is an outbox entry the relay could never publish, as told to the
// store's SetAsideFunc before it moves to the dead stream.
type SetAside struct {
	// OutboxID is the entry's id in the outbox stream.
	OutboxID string
	// Kind is SetAsideRefused or SetAsideUndecodable.
	Kind string
	// Reason says why, in the broker's or the decoder's words.
	Reason string
	// Message is the record as it would have been published (topic, key,
	// value, headers); empty for an undecodable entry.
	Message kafka.Message
	// EventID and Type are the record's ce_id and ce_type ("" when
	// undecodable); envelope.Default.Decode(Message) gives the payload.
	EventID, Type string
}

// SetAsideFunc is told of each entry the relay sets aside, before the entry
// leaves the outbox, so that the service can fail visibly what the entry
// belonged to (the gateway ends the operation or the job with the reason). It
// must be idempotent: after a crash it is told of the same entry again. An
// error is retried a few times, then the entry is set aside all the same.
type SetAsideFunc func(ctx context.Context, e SetAside) error

// OnSetAside sets the hook the relay tells of each entry it sets aside. Call
// it before RunRelay.
func (s *Store) OnSetAside(f SetAsideFunc) { s.onSetAside = f }

// SetMeter makes the relay count the entries it sets aside,
// loom_outbox_set_aside_total{kind}, on m. Call it before RunRelay.
func (s *Store) SetMeter(m metric.Meter) {
	c, err := m.Int64Counter("loom_outbox_set_aside_total",
		metric.WithDescription("Outbox entries the relay set aside (moved to the dead stream) because they can never be published, by kind (refused, undecodable)."))
	if err != nil {
		s.log().Warn("outbox relay: set-aside counter", "err", err)
		return
	}
	s.setAsideTotal = c
}

// setAsideCount counts one entry set aside.
func (s *Store) setAsideCount(ctx context.Context, kind string) {
	if s.setAsideTotal != nil {
		s.setAsideTotal.Add(ctx, 1, metric.WithAttributes(attribute.String("kind", kind)))
	}
}

// RefusedForGood reports whether a publish failed in a way that no retry
// heals: the broker (or the client, before sending) refused a record as too
// large, invalid or for a topic the service may not write. Everything else (a
// broker away, a leader moving, a timeout) is transient and retried.
func RefusedForGood(err error) bool {
	if err == nil {
		return false
	}
	var tooLarge kafka.MessageTooLargeError
	if errors.As(err, &tooLarge) {
		return true
	}
	var we kafka.WriteErrors
	if errors.As(err, &we) {
		for _, e := range we {
			if RefusedForGood(e) {
				return true
			}
		}
		return false
	}
	var ke kafka.Error
	if errors.As(err, &ke) {
		switch ke {
		case kafka.MessageSizeTooLarge, kafka.RecordListTooLarge, kafka.InvalidRecord,
			kafka.TopicAuthorizationFailed, kafka.InvalidTopic, kafka.UnsupportedForMessageFormat,
			kafka.InvalidRequiredAcks, kafka.ClusterAuthorizationFailed:
			return true
		}
	}
	return false
}

// headerValue returns the value of header key, or "".
func headerValue(hs []kafka.Header, key string) string {
	for _, h := range hs {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}
