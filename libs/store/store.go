// Package store is each service's state in Redis, written together with its
// outbox and its inbox in one atomic step (a Lua script), and the relay that
// publishes the outbox to Kafka.
//
// A service applies a consumed event with Apply(ctx, ev.ID, tx): the state
// changes in tx, the events tx emits and the inbox mark for ev.ID are written
// all or nothing, and an event whose ID is already in the inbox changes nothing.
// The relay publishes outbox entries in order and deletes each only after Kafka
// acknowledged it, so a crash anywhere republishes at worst; consumers' inboxes
// make the republished copies harmless. An entry the broker refuses for good is
// set aside (OnSetAside, the dead stream) rather than block the entries behind
// it. Services keep memory in step with their store through Driver, which
// reloads after an Apply whose outcome is unknown (ErrOutcomeUnknown).
//
// Keys under a store's prefix that the store itself uses, and that Tx therefore
// refuses: "outbox", "outbox:*" and "inbox:*".
package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel/metric"
)

// ErrNotFound is returned by reads of a missing key.
var ErrNotFound = errors.New("not found")

// InboxTTL is how long an applied event id is remembered; it matches the
// topics' retention, beyond which no copy of the event can be redelivered.
const InboxTTL = 7 * 24 * time.Hour

// Relay timing defaults. The lease outlives a few missed renewals, so a slow
// round trip does not hand the outbox to a second relay, yet a crashed
// holder's successor starts within seconds.
const (
	defaultPollInterval = 100 * time.Millisecond
	defaultLeaseTTL     = 5 * time.Second
	defaultBatchSize    = 256
	minBackoff          = 50 * time.Millisecond
	maxBackoff          = 2 * time.Second
)

// Store is one service's state under a key prefix (for example "scheduler:").
type Store struct {
	rdb    redis.UniversalClient
	prefix string

	outboxKey string
	deadKey   string
	leaseKey  string
	inboxPfx  string

	// wake tells this process's relay that Apply wrote events; capacity 1 so
	// that Apply never blocks and bursts coalesce into one wake-up.
	wake chan struct{}

	pollInterval time.Duration
	leaseTTL     time.Duration
	batchSize    int
	deadMaxLen   int64

	// onSetAside and setAsideTotal are the relay's set-aside hook and
	// counter (OnSetAside, SetMeter); nil when not set.
	onSetAside    SetAsideFunc
	setAsideTotal metric.Int64Counter

	// noEval records that Redis refused this store's user EVAL (an
	// agent's: ACLCommands), so that a missing script is waited for
	// without asking again; scriptWait that a wait is under way (logged
	// once). See runScript.
	noEval     atomic.Bool
	scriptWait atomic.Bool

	// commits holds the Driver Applies whose memory commit may not have
	// run yet; the relay waits for them before it publishes (commitGate).
	commits commitGate

	fp failpoints
}

// failpoints are test hooks: a non-nil hook runs at its point and a non-nil
// error from it aborts the step there, as a crash at that point would.
type failpoints struct {
	// beforeApplyScript runs in Apply after validation, before the script.
	beforeApplyScript func() error
	// commitWait runs in the relay when it read a batch while an Apply's
	// commit was in flight, before it waits for that commit.
	commitWait func()
	// afterPublish runs in the relay after the publisher acknowledged a
	// batch, before its entries are deleted. An error ends RunRelay at once
	// without releasing the lease, like a crashed process.
	afterPublish func(batch []kafka.Message) error
	// scriptMissing runs in runScript each time it waits for a script to
	// be loaded.
	scriptMissing func()
}

// crashError marks an error injected by a failpoint, so the relay leaves its
// lease behind as a crashed process would.
type crashError struct{ err error }

func (c crashError) Error() string { return "failpoint: " + c.err.Error() }
func (c crashError) Unwrap() error { return c.err }

// New returns a store whose keys all start with prefix.
func New(rdb redis.UniversalClient, prefix string) *Store {
	return &Store{
		rdb:          rdb,
		prefix:       prefix,
		outboxKey:    prefix + "outbox",
		deadKey:      prefix + "outbox:dead",
		leaseKey:     prefix + "outbox:lease",
		inboxPfx:     prefix + "inbox:",
		wake:         make(chan struct{}, 1),
		pollInterval: defaultPollInterval,
		leaseTTL:     defaultLeaseTTL,
		batchSize:    defaultBatchSize,
		deadMaxLen:   DeadStreamMaxLen,
	}
}

// log returns the logger for the relay's reports; resolved per use so that a
// default logger installed after New is honoured.
func (s *Store) log() *slog.Logger {
	return slog.Default().With("component", "store", "prefix", s.prefix)
}

// Client returns the Redis client, for reads the helpers below do not cover.
func (s *Store) Client() redis.UniversalClient { return s.rdb }

// Key returns the full Redis key for a key relative to the prefix.
func (s *Store) Key(k string) string { return s.prefix + k }

// Seen reports whether inboxID was applied.
func (s *Store) Seen(ctx context.Context, inboxID string) (bool, error) {
	n, err := s.rdb.Exists(ctx, s.inboxPfx+inboxID).Result()
	if err != nil {
		return false, fmt.Errorf("store %s: inbox %s: %w", s.prefix, inboxID, err)
	}
	return n == 1, nil
}

// Get returns the value at key, or ErrNotFound.
func (s *Store) Get(ctx context.Context, key string) ([]byte, error) {
	v, err := s.rdb.Get(ctx, s.Key(key)).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("store %s: get %s: %w", s.prefix, key, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("store %s: get %s: %w", s.prefix, key, err)
	}
	return v, nil
}

// StreamEntry is one entry of a capped stream (Tx.XAdd): its id, which
// orders the stream, and its value.
type StreamEntry struct {
	ID  string
	Val []byte
}

// StreamEntries returns up to count entries of the stream at key, newest
// first, older than the entry id before (all when before is ""). An entry
// not written by Tx.XAdd is returned with a nil value.
func (s *Store) StreamEntries(ctx context.Context, key, before string, count int64) ([]StreamEntry, error) {
	end := "+"
	if before != "" {
		end = "(" + before
	}
	msgs, err := s.rdb.XRevRangeN(ctx, s.Key(key), end, "-", count).Result()
	if err != nil {
		return nil, fmt.Errorf("store %s: read stream %s: %w", s.prefix, key, err)
	}
	out := make([]StreamEntry, len(msgs))
	for i, m := range msgs {
		out[i].ID = m.ID
		if v, ok := m.Values["e"].(string); ok {
			out[i].Val = []byte(v)
		}
	}
	return out, nil
}

// HGetAll returns all fields of the hash at key (empty when missing).
func (s *Store) HGetAll(ctx context.Context, key string) (map[string][]byte, error) {
	m, err := s.rdb.HGetAll(ctx, s.Key(key)).Result()
	if err != nil {
		return nil, fmt.Errorf("store %s: hgetall %s: %w", s.prefix, key, err)
	}
	out := make(map[string][]byte, len(m))
	for f, v := range m {
		out[f] = []byte(v)
	}
	return out, nil
}

// HScanAll returns all fields of the hash at key (empty when missing), as
// HGetAll does, but read count fields at a time (HSCAN). Redis serves no
// other client while one command runs, and one HGETALL of 100,000 records
// holds it for about 90 ms: every other write waits. HScanAll is not one
// atomic read: a field changed while it reads may come back as it was
// before or after. Use it where nothing else writes the hash meanwhile (a
// service loading what only it writes) or where that does not matter (a
// follower's refresh).
func (s *Store) HScanAll(ctx context.Context, key string, count int64) (map[string][]byte, error) {
	k := s.Key(key)
	n, err := s.rdb.HLen(ctx, k).Result()
	if err != nil {
		return nil, fmt.Errorf("store %s: hlen %s: %w", s.prefix, key, err)
	}
	out := make(map[string][]byte, n)
	err = s.HScanPages(ctx, key, count, func(fields []string, values [][]byte) error {
		for i, f := range fields {
			out[f] = values[i]
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// HScanPages reads the hash at key as HScanAll does, count fields at a
// time, and hands each page to page as it comes (fields and their values,
// index for index; page may keep both), so that a caller can work on one
// page while the next is read. As with HSCAN, a field may come in more than
// one page (the last is the newest); an error of page ends the scan and is
// returned.
func (s *Store) HScanPages(ctx context.Context, key string, count int64, page func(fields []string, values [][]byte) error) error {
	k := s.Key(key)
	var cursor uint64
	for {
		kv, next, err := s.rdb.HScan(ctx, k, cursor, "", count).Result()
		if err != nil {
			return fmt.Errorf("store %s: hscan %s: %w", s.prefix, key, err)
		}
		fields, values := make([]string, 0, len(kv)/2), make([][]byte, 0, len(kv)/2)
		for i := 0; i+1 < len(kv); i += 2 {
			fields, values = append(fields, kv[i]), append(values, []byte(kv[i+1]))
		}
		if len(fields) > 0 {
			if err := page(fields, values); err != nil {
				return err
			}
		}
		if next == 0 {
			return nil
		}
		cursor = next
	}
}

// HGet returns one field of the hash at key, or ErrNotFound.
func (s *Store) HGet(ctx context.Context, key, field string) ([]byte, error) {
	v, err := s.rdb.HGet(ctx, s.Key(key), field).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("store %s: hget %s %s: %w", s.prefix, key, field, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("store %s: hget %s %s: %w", s.prefix, key, field, err)
	}
	return v, nil
}

// ZRangeByLex returns, in order, at most limit members of the sorted set at
// key (an index whose members all have score 0, Tx.ZAdd) greater than
// after ("": from the first) and at most upto ("": to the last).
func (s *Store) ZRangeByLex(ctx context.Context, key, after, upto string, limit int64) ([]string, error) {
	lo, hi := "-", "+"
	if after != "" {
		lo = "(" + after
	}
	if upto != "" {
		hi = "[" + upto
	}
	m, err := s.rdb.ZRangeByLex(ctx, s.Key(key), &redis.ZRangeBy{Min: lo, Max: hi, Count: limit}).Result()
	if err != nil {
		return nil, fmt.Errorf("store %s: zrangebylex %s: %w", s.prefix, key, err)
	}
	return m, nil
}

// ZRevRangeByLex is ZRangeByLex backwards: in descending order, at most
// limit members less than before ("": from the last) and at least downto
// ("": to the first).
func (s *Store) ZRevRangeByLex(ctx context.Context, key, before, downto string, limit int64) ([]string, error) {
	lo, hi := "-", "+"
	if before != "" {
		hi = "(" + before
	}
	if downto != "" {
		lo = "[" + downto
	}
	m, err := s.rdb.ZRevRangeByLex(ctx, s.Key(key), &redis.ZRangeBy{Min: lo, Max: hi, Count: limit}).Result()
	if err != nil {
		return nil, fmt.Errorf("store %s: zrevrangebylex %s: %w", s.prefix, key, err)
	}
	return m, nil
}

// HMGet returns the given fields of the hash at key, in order (nil for a
// field it does not hold).
func (s *Store) HMGet(ctx context.Context, key string, fields []string) ([][]byte, error) {
	if len(fields) == 0 {
		return nil, nil
	}
	vals, err := s.rdb.HMGet(ctx, s.Key(key), fields...).Result()
	if err != nil {
		return nil, fmt.Errorf("store %s: hmget %s: %w", s.prefix, key, err)
	}
	out := make([][]byte, len(vals))
	for i, v := range vals {
		if str, ok := v.(string); ok {
			out[i] = []byte(str)
		}
	}
	return out, nil
}

// SMembers returns the members of the set at key.
func (s *Store) SMembers(ctx context.Context, key string) ([]string, error) {
	m, err := s.rdb.SMembers(ctx, s.Key(key)).Result()
	if err != nil {
		return nil, fmt.Errorf("store %s: smembers %s: %w", s.prefix, key, err)
	}
	return m, nil
}

// OutboxLen returns how many outbox entries wait to be published.
func (s *Store) OutboxLen(ctx context.Context) (int64, error) {
	n, err := s.rdb.XLen(ctx, s.outboxKey).Result()
	if err != nil {
		return 0, fmt.Errorf("store %s: outbox length: %w", s.prefix, err)
	}
	return n, nil
}
