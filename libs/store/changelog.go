package store

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/loom-ml/loom/libs/errs"
)

// A change log is a Redis stream to which every transaction that asks for it
// (Tx.Log) appends one entry, atomically with its writes: the writes
// themselves, keys relative to the store's prefix, in order. A reader that
// holds a copy of the state (a follower's memory) applies the entries after
// the last one it read instead of reading the state again: it sees each
// transaction whole, in the order Redis applied them. The stream keeps about
// the last maxLen entries (XADD MAXLEN ~), and an entry holds at most
// maxBytes of writes: a transaction larger than that logs that it overflowed,
// without its writes. A reader that fell behind the trimming
// (ErrLogTrimmed) or meets an overflowed entry reads the state afresh.

// logSpec is what Tx.Log asked for.
type logSpec struct {
	key      string
	maxLen   int64
	maxBytes int
	tag      string
}

// Log makes the transaction append one entry recording all its state writes
// (SET, DEL, HSET, HDEL, SADD, SREM; not its outbox events, inbox marks or
// conditions) to the change log at key, atomically with them, trimming the
// log to about maxLen entries (MAXLEN ~: Redis trims whole nodes, so a
// little more may stay). A transaction whose writes may encode to more than
// maxBytes (checked against an upper estimate: 16 bytes a write beyond its
// key, field and value) appends an entry that only says so
// (LogEntry.Overflowed): a reader must read the state afresh at it, which
// is also how a writer tells readers to (a maxBytes of 1 always overflows).
// The entry carries tag whole, even when it overflowed (LogEntry.Tag): the
// writer's name for the transaction, such as its version, by which a reader
// can tell whether the log holds the last write (see LogTail).
// Both bounds must be positive, and tag at most 1 KiB; Apply refuses the
// transaction otherwise.
func (t *Tx) Log(key string, maxLen int64, maxBytes int, tag string) {
	t.log = &logSpec{key: key, maxLen: maxLen, maxBytes: maxBytes, tag: tag}
}

// maxLogTag bounds Tx.Log's tag.
const maxLogTag = 1 << 10

// What a log entry's one field, "e", holds after the writer's tag (a
// uvarint length and its bytes).
const (
	logOps      = 'o' // followed by the writes (encodeLogOps)
	logOverflow = 'n' // followed by the number of writes left out, decimal
)

// withLog returns tx with the op that appends its log entry added last, or
// tx itself when it asks for no log. tx is not modified.
func (t *Tx) withLog() (*Tx, error) {
	if t.log == nil {
		return t, nil
	}
	var v errs.Validator
	v.Check(t.log.maxLen > 0, "tx.log.max_len", "must be positive, got %d", t.log.maxLen)
	v.Check(t.log.maxBytes > 0, "tx.log.max_bytes", "must be positive, got %d", t.log.maxBytes)
	v.Check(len(t.log.tag) <= maxLogTag, "tx.log.tag", "must be at most %d bytes, got %d", maxLogTag, len(t.log.tag))
	if err := v.Err(); err != nil {
		return nil, err
	}
	// A capped stream's appends (Tx.XAdd) are history, not state a
	// follower copies.
	ops := make([]op, 0, len(t.ops))
	for _, o := range t.ops {
		if o.kind != opXAdd {
			ops = append(ops, o)
		}
	}
	payload := encodeLogOps(ops, t.log.maxBytes, t.log.tag)
	c := *t
	c.ops = append(slices.Clip(t.ops), op{kind: opXAdd, key: t.log.key, field: strconv.FormatInt(t.log.maxLen, 10), val: payload})
	return &c, nil
}

// encodeLogOps encodes ops as a log entry's payload: the tag (a uvarint
// length and its bytes), then logOps and per op its kind byte, then key,
// field and value, each as a uvarint length and its bytes. When that would
// exceed maxBytes (the tag aside) the payload is the tag, logOverflow and
// how many ops it left out.
func encodeLogOps(ops []op, maxBytes int, tag string) []byte {
	size := 1
	for _, o := range ops {
		size += 1 + 3*binary.MaxVarintLen32 + len(o.key) + len(o.field) + len(o.val)
	}
	b := binary.AppendUvarint(make([]byte, 0, binary.MaxVarintLen32+len(tag)+min(size, maxBytes)), uint64(len(tag)))
	b = append(b, tag...)
	if size > maxBytes {
		return strconv.AppendInt(append(b, logOverflow), int64(len(ops)), 10)
	}
	b = append(b, logOps)
	for _, o := range ops {
		b = append(b, o.kind[0])
		for _, s := range [][]byte{[]byte(o.key), []byte(o.field), o.val} {
			b = binary.AppendUvarint(b, uint64(len(s)))
			b = append(b, s...)
		}
	}
	return b
}

// LogOp is one write of a logged transaction. Key is relative to the
// store's prefix. Value is the value of a SET or HSET, nil for the others;
// Field is the hash field or set member of HSET, HDEL, SADD and SREM.
type LogOp struct {
	Op    string // "SET", "DEL", "HSET", "HDEL", "SADD", "SREM", "ZADD" or "ZREM"
	Key   string
	Field string
	Value []byte
}

// LogEntry is one transaction's entry in a change log.
type LogEntry struct {
	// ID is the entry's stream id: pass the last one read to ReadLog.
	ID string
	// Tag is Tx.Log's tag, kept even when the entry Overflowed.
	Tag string
	// Ops are the transaction's writes, in order; none when Overflowed.
	Ops []LogOp
	// Overflowed: the transaction's writes did not fit the entry (Tx.Log's
	// maxBytes). A reader must read the state afresh.
	Overflowed bool
}

func decodeLogEntry(m redis.XMessage) (LogEntry, error) {
	e := LogEntry{ID: m.ID}
	s, _ := m.Values["e"].(string)
	if s == "" {
		return e, fmt.Errorf("log entry %s: no payload", m.ID)
	}
	b := []byte(s)
	n, k := binary.Uvarint(b)
	if k <= 0 || uint64(len(b)-k) <= n {
		return e, fmt.Errorf("log entry %s: truncated tag", m.ID)
	}
	e.Tag = string(b[k : k+int(n)])
	b = b[k+int(n):]
	switch b[0] {
	case logOverflow:
		e.Overflowed = true
		return e, nil
	case logOps:
	default:
		return e, fmt.Errorf("log entry %s: unknown payload tag %q", m.ID, b[0])
	}
	b = b[1:]
	next := func() ([]byte, bool) {
		n, k := binary.Uvarint(b)
		if k <= 0 || uint64(len(b)-k) < n {
			return nil, false
		}
		v := b[k : k+int(n)]
		b = b[k+int(n):]
		return v, true
	}
	for len(b) > 0 {
		kind := opKind(b[:1])
		b = b[1:]
		key, ok1 := next()
		field, ok2 := next()
		val, ok3 := next()
		if !ok1 || !ok2 || !ok3 {
			return e, fmt.Errorf("log entry %s: truncated write %d", m.ID, len(e.Ops))
		}
		o := LogOp{Op: kind.String(), Key: string(key), Field: string(field)}
		if kind == opSet || kind == opHSet {
			o.Value = val
		}
		e.Ops = append(e.Ops, o)
	}
	return e, nil
}

// ErrLogTrimmed is returned by ReadLog when the entry the reader last read is
// no longer in the log (trimmed away while the reader fell behind), or when
// the reader read from an empty log, which has had entries since, some of
// which may have been trimmed: either way the reader must read the state
// afresh.
var ErrLogTrimmed = errors.New("the change log no longer holds the entry last read")

// ErrLogUnreadable is returned by ReadLog and LogTail for an entry they
// cannot decode (not written by Tx.Log, or by a later release of it): the
// reader must read the state afresh.
var ErrLogUnreadable = errors.New("a change log entry cannot be read")

// LogStart is the position of a reader of an empty log (LogTail's answer
// when the log has no entry).
const LogStart = "0-0"

// LogTail returns the last entry of the change log at key (ID LogStart and
// no writes when it has none) and, read atomically with it, the value of
// the string key also (nil when also is "" or the key is absent). A reader
// that reads the state afresh takes the tail before reading, then ReadLog
// from it (the entries after it are the writes its read may have missed
// part of); also lets it check that the writer logged its last write (a
// value the writer sets in every logged transaction, such as a version).
func (s *Store) LogTail(ctx context.Context, key, also string) (LogEntry, []byte, error) {
	var ms *redis.XMessageSliceCmd
	var get *redis.StringCmd
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		ms = p.XRevRangeN(ctx, s.Key(key), "+", "-", 1)
		if also != "" {
			get = p.Get(ctx, s.Key(also))
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return LogEntry{}, nil, fmt.Errorf("store %s: log tail %s: %w", s.prefix, key, err)
	}
	v := alsoValue(get)
	if len(ms.Val()) == 0 {
		return LogEntry{ID: LogStart}, v, nil
	}
	e, err := decodeLogEntry(ms.Val()[0])
	if err != nil {
		return LogEntry{}, nil, fmt.Errorf("store %s: log tail %s: %w: %w", s.prefix, key, ErrLogUnreadable, err)
	}
	return e, v, nil
}

func alsoValue(get *redis.StringCmd) []byte {
	if get == nil || get.Err() != nil {
		return nil
	}
	return []byte(get.Val())
}

// ReadLog returns up to max entries of the change log at key that come after
// the entry after (an ID from LogTail or an earlier ReadLog; LogStart for a
// log that was empty), oldest first, none when the reader is at the tail,
// and, read atomically with them, the value of the string key also (as
// LogTail). It returns ErrLogTrimmed when the log no longer holds after, and
// ErrLogUnreadable for an entry it cannot decode.
func (s *Store) ReadLog(ctx context.Context, key, after string, max int64, also string) ([]LogEntry, []byte, error) {
	if max <= 0 {
		return nil, nil, fmt.Errorf("store %s: read log %s: %w", s.prefix, key, errs.Invalid("max", "must be positive, got %d", max))
	}
	start := after
	if after == LogStart {
		start = "-"
	}
	var rng *redis.XMessageSliceCmd
	var get *redis.StringCmd
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		rng = p.XRangeN(ctx, s.Key(key), start, "+", max+1)
		if also != "" {
			get = p.Get(ctx, s.Key(also))
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, nil, fmt.Errorf("store %s: read log %s after %s: %w", s.prefix, key, after, err)
	}
	ms, v := rng.Val(), alsoValue(get)
	if after == LogStart {
		if len(ms) > 0 {
			return nil, nil, fmt.Errorf("store %s: read log %s: %w", s.prefix, key, ErrLogTrimmed)
		}
		return nil, v, nil
	}
	if len(ms) == 0 || ms[0].ID != after {
		return nil, nil, fmt.Errorf("store %s: read log %s after %s: %w", s.prefix, key, after, ErrLogTrimmed)
	}
	out := make([]LogEntry, 0, len(ms)-1)
	for _, m := range ms[1:] {
		e, err := decodeLogEntry(m)
		if err != nil {
			return nil, nil, fmt.Errorf("store %s: read log %s: %w: %w", s.prefix, key, ErrLogUnreadable, err)
		}
		out = append(out, e)
	}
	return out, v, nil
}
