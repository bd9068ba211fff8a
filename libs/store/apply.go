package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/propagation"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/errs"
)

// applyScript writes a transaction, its outbox events and its inbox marks.
//
// KEYS: [1] outbox stream, [2..1+ninbox] inbox keys, then one per op, then
// one per condition.
// ARGV: inbox TTL seconds, ninbox,
//
//	nchecks, then (KEYS index, wanted TYPE) per check,
//	nconds, then (KEYS index, field, "=", "0" or "<", wanted value) per
//	condition ("<": the hash has fewer fields than the value),
//	nops, then (opcode, field or member, value) per op,
//	nevents, then (topic, key, value, packed headers) per event.
//
// Everything that can fail is checked before the first write: Redis does not
// undo a script's writes when a later command fails, so after the first write
// there must be nothing left that can. The checks are the inbox (any mark
// already there: the script writes nothing), the conditions (Tx.IfHField: a
// hash field that no longer holds what the transaction was decided on is a
// CONFLICT error reply, nothing written), the types of the keys the ops
// need to be hashes, sets or sorted sets (Go derived them; WRONGTYPE is the only way these
// commands fail on valid arguments) and the outbox's type. SET, DEL, HSET,
// HDEL, SADD, SREM, ZADD, ZREM and XADD with a generated id cannot fail past these checks
// (nor can the change log's XADD, 'X': its key's type is checked as a
// stream's, and its MAXLEN is a positive number Go wrote).
var applyScript = newScript(`
local ninbox = tonumber(ARGV[2])
for i = 1, ninbox do
  if redis.call('EXISTS', KEYS[1 + i]) == 1 then
    return 0
  end
end
local function typeof(k)
  local t = redis.call('TYPE', k)
  if type(t) == 'table' then t = t['ok'] end
  return t
end
local a = 3
local nchecks = tonumber(ARGV[a]); a = a + 1
for i = 1, nchecks do
  local k = KEYS[tonumber(ARGV[a])]
  local want = ARGV[a + 1]
  a = a + 2
  local t = typeof(k)
  if t ~= 'none' and t ~= want then
    return redis.error_reply('WRONGTYPE store key ' .. k .. ' holds a ' .. t .. ', want a ' .. want)
  end
end
local nconds = tonumber(ARGV[a]); a = a + 1
for i = 1, nconds do
  local k, f, mode, want = KEYS[tonumber(ARGV[a])], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3]
  a = a + 4
  local t = typeof(k)
  local cur = false
  if t ~= 'hash' and t ~= 'none' then
    return redis.error_reply('WRONGTYPE store key ' .. k .. ' holds a ' .. t .. ', want a hash')
  end
  if mode == '<' then
    local n = 0
    if t == 'hash' then n = redis.call('HLEN', k) end
    if n >= tonumber(want) then
      return redis.error_reply('CONFLICT store key ' .. k .. ' holds ' .. n .. ' fields, the bound the transaction was decided under is below ' .. want)
    end
  else
    if t == 'hash' then cur = redis.call('HGET', k, f) end
    if (mode == '0' and cur) or (mode == '=' and cur ~= want) then
      return redis.error_reply('CONFLICT store key ' .. k .. ' field ' .. f .. ' changed since the transaction was decided')
    end
  end
end
local nops = tonumber(ARGV[a]); a = a + 1
local na = a + 3 * nops
local nevents = tonumber(ARGV[na])
if nevents > 0 then
  local t = typeof(KEYS[1])
  if t ~= 'none' and t ~= 'stream' then
    return redis.error_reply('WRONGTYPE store outbox ' .. KEYS[1] .. ' holds a ' .. t)
  end
end
for i = 1, nops do
  local o, f, v, k = ARGV[a], ARGV[a + 1], ARGV[a + 2], KEYS[1 + ninbox + i]
  a = a + 3
  if o == 'S' then redis.call('SET', k, v)
  elseif o == 'D' then redis.call('DEL', k)
  elseif o == 'H' then redis.call('HSET', k, f, v)
  elseif o == 'h' then redis.call('HDEL', k, f)
  elseif o == 'A' then redis.call('SADD', k, f)
  elseif o == 'R' then redis.call('SREM', k, f)
  elseif o == 'Z' then redis.call('ZADD', k, 0, f)
  elseif o == 'z' then redis.call('ZREM', k, f)
  elseif o == 'X' then redis.call('XADD', k, 'MAXLEN', '~', f, '*', 'e', v)
  end
end
a = na + 1
for i = 1, nevents do
  redis.call('XADD', KEYS[1], '*', 't', ARGV[a], 'k', ARGV[a + 1], 'v', ARGV[a + 2], 'h', ARGV[a + 3])
  a = a + 4
end
for i = 1, ninbox do
  redis.call('SET', KEYS[1 + i], '1', 'EX', ARGV[1])
end
return 1
`)

// ErrConflict marks an Apply refused by one of its transaction's conditions
// (Tx.IfHField): the state it was decided on changed in between, so it wrote
// nothing. It wraps errs.Aborted, gRPC's code for a read-modify-write that
// lost a race; the caller reads again and decides again.
var ErrConflict = fmt.Errorf("%w: the state the write was decided on has changed", errs.Aborted)

// WrongTypeError is an Apply refused because one of its keys holds another
// type than its op needs (an HSET on a string, say, or an outbox that is not
// a stream): nothing was written. It wraps errs.FailedPrecondition. Key names
// the key as the transaction did, without the store's prefix, so that a
// caller can tell a key it broke on purpose (a revoked fence) from one that
// was damaged.
type WrongTypeError struct {
	Key string
	msg string
}

func (e *WrongTypeError) Error() string { return e.msg }

// Unwrap makes a WrongTypeError an errs.FailedPrecondition.
func (e *WrongTypeError) Unwrap() error { return errs.FailedPrecondition }

// wrongType reads the key out of the script's WRONGTYPE reply ("WRONGTYPE
// store key K holds a T, want a W", "WRONGTYPE store outbox K holds a T").
func (s *Store) wrongType(err error) *WrongTypeError {
	msg := err.Error()
	key := ""
	for _, lead := range []string{"WRONGTYPE store key ", "WRONGTYPE store outbox "} {
		if _, rest, ok := strings.Cut(msg, lead); ok {
			key, _, _ = strings.Cut(rest, " holds a ")
			break
		}
	}
	return &WrongTypeError{Key: strings.TrimPrefix(key, s.prefix), msg: fmt.Sprintf("%v: %s", errs.FailedPrecondition, msg)}
}

// inboxTTLSeconds is InboxTTL as the script's EX argument.
var inboxTTLSeconds = strconv.FormatInt(int64(InboxTTL.Seconds()), 10)

// Apply writes tx atomically. With a non-empty inboxID it first checks the
// inbox: if the id was applied before it writes nothing and returns
// applied=false; otherwise it writes tx and the inbox mark together. The
// emitted events are stamped with the trace context in ctx when they have none.
//
// A tx that is invalid (an empty or reserved key, conflicting types of one key,
// an event without topic, key, id or payload) gives an errs.InvalidError naming
// the field and writes nothing. A key whose type in Redis does not fit its op
// (HSET on a string, say) gives an error wrapping errs.FailedPrecondition and
// writes nothing either; so does a condition of tx (Tx.IfHField) that does
// not hold, with an error wrapping ErrConflict. An error wrapping ErrOutcomeUnknown (no answer from
// Redis: a timeout, a lost connection, ctx ending while the script was sent)
// may or may not have written tx and its marks, all or nothing: callers that
// keep memory in step with Redis go through a Driver, which reloads then. A
// nil or empty tx with an empty inboxID is a no-op
// that reports applied=true.
func (s *Store) Apply(ctx context.Context, inboxID string, tx *Tx) (applied bool, err error) {
	if inboxID == "" {
		return s.apply(ctx, nil, tx)
	}
	return s.apply(ctx, []string{inboxID}, tx)
}

// ApplyBatch is Apply for a tx that is the outcome of several consumed
// events: it writes tx and every one of their inbox marks atomically, or,
// when any of inboxIDs was applied before, nothing at all (applied=false),
// so that the caller can fall back to applying the events one by one. An
// empty id is an InvalidError.
func (s *Store) ApplyBatch(ctx context.Context, inboxIDs []string, tx *Tx) (applied bool, err error) {
	for i, id := range inboxIDs {
		if id == "" {
			return false, fmt.Errorf("store %s: apply batch: %w", s.prefix,
				errs.Invalid(fmt.Sprintf("inbox_ids[%d]", i), "must not be empty"))
		}
	}
	return s.apply(ctx, inboxIDs, tx)
}

func (s *Store) apply(ctx context.Context, inboxIDs []string, tx *Tx) (applied bool, err error) {
	if tx == nil {
		tx = &Tx{}
	}
	if len(inboxIDs) == 0 && tx.Empty() {
		return true, nil
	}
	label := strings.Join(inboxIDs, ",")
	firstOpKey := 2 + len(inboxIDs)
	tx, err = tx.withLog()
	if err != nil {
		return false, fmt.Errorf("store %s: apply %s: %w", s.prefix, label, err)
	}
	checks, err := tx.validate(firstOpKey)
	if err != nil {
		return false, fmt.Errorf("store %s: apply %s: %w", s.prefix, label, err)
	}

	keys := make([]string, 0, 1+len(inboxIDs)+len(tx.ops)+len(tx.conds))
	keys = append(keys, s.outboxKey)
	for _, id := range inboxIDs {
		keys = append(keys, s.inboxPfx+id)
	}
	args := make([]any, 0, 6+2*len(checks)+4*len(tx.conds)+3*len(tx.ops)+4*len(tx.events))
	args = append(args, inboxTTLSeconds, len(inboxIDs), len(checks))
	for _, c := range checks {
		args = append(args, c.keyIndex, c.want)
	}
	args = append(args, len(tx.conds))
	firstCondKey := firstOpKey + len(tx.ops)
	for i, c := range tx.conds {
		mode, want := "=", c.want
		switch {
		case c.count:
			mode, want = "<", []byte(strconv.FormatInt(c.below, 10))
		case c.want == nil:
			mode = "0"
		}
		args = append(args, firstCondKey+i, c.field, mode, want)
	}
	args = append(args, len(tx.ops))
	for _, o := range tx.ops {
		keys = append(keys, s.Key(o.key))
		args = append(args, string(o.kind), o.field, o.val)
	}
	for _, c := range tx.conds {
		keys = append(keys, s.Key(c.key))
	}
	args = append(args, len(tx.events))
	var traceParent string
	for i, ev := range tx.events {
		if ev.TraceParent == "" {
			if traceParent == "" {
				traceParent = traceParentOf(ctx)
			}
			ev.TraceParent = traceParent
		}
		m, err := envelope.Encode(ev)
		if err != nil {
			return false, fmt.Errorf("store %s: apply %s: event %d: %w", s.prefix, label, i, err)
		}
		args = append(args, m.Topic, m.Key, m.Value, encodeHeaders(m.Headers))
	}

	if f := s.fp.beforeApplyScript; f != nil {
		if err := f(); err != nil {
			return false, fmt.Errorf("store %s: apply %s: %w", s.prefix, label, crashError{err})
		}
	}
	res, err := s.runScript(ctx, applyScript, keys, args...).Int()
	if err != nil {
		var reply redis.Error
		switch {
		case strings.Contains(err.Error(), "WRONGTYPE store "):
			err = s.wrongType(err)
		case strings.Contains(err.Error(), "CONFLICT store "):
			err = fmt.Errorf("%w: %v", ErrConflict, err)
		case errors.Is(err, errScriptNotLoaded):
			// The script never ran: Redis had it in no cache and
			// this user may not EVAL it (runScript).
		case errors.As(err, &reply):
			// An error reply: the script's checks, which run before its
			// first write, refused; nothing was written.
		default:
			// No answer: the script may have run.
			err = fmt.Errorf("%w: %w", ErrOutcomeUnknown, err)
		}
		return false, fmt.Errorf("store %s: apply %s: %w", s.prefix, label, err)
	}
	if res == 0 {
		return false, nil
	}
	if len(tx.events) > 0 {
		select {
		case s.wake <- struct{}{}:
		default: // a wake-up is already pending; it covers these events too
		}
	}
	return true, nil
}

// traceParentOf returns the W3C traceparent of the span in ctx, or "" when
// ctx carries none.
func traceParentOf(ctx context.Context) string {
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	return c[envelope.HeaderTraceParent]
}
