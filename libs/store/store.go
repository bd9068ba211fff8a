// Package store is each service's state in Redis, written together with its
// outbox and its inbox in one atomic step (a Lua script), and the relay that
// publishes the outbox to Kafka.
//
// A service applies a consumed event with Apply(ctx, ev.ID, tx): the state
// changes in tx, the events tx emits and the inbox mark for ev.ID are written
// all or nothing, and an event whose ID is already in the inbox changes nothing.
// The relay publishes outbox entries in order and deletes each only after Kafka
// acknowledged it, so a crash anywhere republishes at worst; consumers' inboxes
// make the republished copies harmless.
//
// SKELETON: signatures are the contract; bodies are being written.
package store

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"

	"github.com/loom-ml/loom/libs/envelope"
)

// ErrNotFound is returned by reads of a missing key.
var ErrNotFound = errors.New("not found")

// InboxTTL is how long an applied event id is remembered; it matches the
// topics' retention, beyond which no copy of the event can be redelivered.
const InboxTTL = 7 * 24 * time.Hour

// Store is one service's state under a key prefix (for example "scheduler:").
type Store struct{}

// New returns a store whose keys all start with prefix.
func New(rdb redis.UniversalClient, prefix string) *Store { panic("unimplemented") }

// Client returns the Redis client, for reads the helpers below do not cover.
func (s *Store) Client() redis.UniversalClient { panic("unimplemented") }

// Key returns the full Redis key for a key relative to the prefix.
func (s *Store) Key(k string) string { panic("unimplemented") }

// Tx collects state changes and outbox events to apply atomically. Keys are
// relative to the store's prefix. The zero value is ready to use.
type Tx struct{}

// Set sets key to val.
func (t *Tx) Set(key string, val []byte) { panic("unimplemented") }

// Del deletes key.
func (t *Tx) Del(key string) { panic("unimplemented") }

// HSet sets field of the hash at key.
func (t *Tx) HSet(key, field string, val []byte) { panic("unimplemented") }

// HDel deletes field of the hash at key.
func (t *Tx) HDel(key, field string) { panic("unimplemented") }

// SAdd adds member to the set at key.
func (t *Tx) SAdd(key, member string) { panic("unimplemented") }

// SRem removes member from the set at key.
func (t *Tx) SRem(key, member string) { panic("unimplemented") }

// Emit adds an event to the outbox. Its Topic, Key, ID and Payload must be set.
func (t *Tx) Emit(ev envelope.Event) { panic("unimplemented") }

// Empty reports whether the transaction holds no change and no event.
func (t *Tx) Empty() bool { panic("unimplemented") }

// Apply writes tx atomically. With a non-empty inboxID it first checks the
// inbox: if the id was applied before it writes nothing and returns
// applied=false; otherwise it writes tx and the inbox mark together. The
// emitted events are stamped with the trace context in ctx when they have none.
func (s *Store) Apply(ctx context.Context, inboxID string, tx *Tx) (applied bool, err error) {
	panic("unimplemented")
}

// Seen reports whether inboxID was applied.
func (s *Store) Seen(ctx context.Context, inboxID string) (bool, error) { panic("unimplemented") }

// Get returns the value at key, or ErrNotFound.
func (s *Store) Get(ctx context.Context, key string) ([]byte, error) { panic("unimplemented") }

// HGetAll returns all fields of the hash at key (empty when missing).
func (s *Store) HGetAll(ctx context.Context, key string) (map[string][]byte, error) {
	panic("unimplemented")
}

// HGet returns one field of the hash at key, or ErrNotFound.
func (s *Store) HGet(ctx context.Context, key, field string) ([]byte, error) {
	panic("unimplemented")
}

// SMembers returns the members of the set at key.
func (s *Store) SMembers(ctx context.Context, key string) ([]string, error) {
	panic("unimplemented")
}

// OutboxLen returns how many outbox entries wait to be published.
func (s *Store) OutboxLen(ctx context.Context) (int64, error) { panic("unimplemented") }

// Publisher writes encoded records to Kafka; *bus.Producer is one.
type Publisher interface {
	PublishMessages(ctx context.Context, msgs ...kafka.Message) error
}

// RunRelay publishes the outbox to pub until ctx ends: in order, in batches,
// deleting entries only after pub returned nil. It wakes at once after Apply
// wrote events in this process, and polls otherwise, so entries written by a
// crashed predecessor are published too. Only one relay per prefix publishes at
// a time (a Redis lease), so several instances of a service can run.
func (s *Store) RunRelay(ctx context.Context, pub Publisher) error { panic("unimplemented") }
