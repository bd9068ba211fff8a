package store

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/errs"
)

// opKind is a state change; its value is the opcode the apply script reads.
type opKind string

const (
	opSet  opKind = "S"
	opDel  opKind = "D"
	opHSet opKind = "H"
	opHDel opKind = "h"
	opSAdd opKind = "A"
	opSRem opKind = "R"
	// opZAdd and opZRem add a member (score 0: an index read by its
	// members' order, Store.ZRangeByLex) to a sorted set, or remove it.
	opZAdd opKind = "Z"
	opZRem opKind = "z"
	// opXAdd appends an entry to a capped stream (Tx.XAdd, and the
	// change-log entry of Tx.Log): field holds the stream's MAXLEN, val the
	// entry.
	opXAdd opKind = "X"
)

func (k opKind) String() string {
	switch k {
	case opSet:
		return "SET"
	case opDel:
		return "DEL"
	case opHSet:
		return "HSET"
	case opHDel:
		return "HDEL"
	case opSAdd:
		return "SADD"
	case opSRem:
		return "SREM"
	case opZAdd:
		return "ZADD"
	case opZRem:
		return "ZREM"
	case opXAdd:
		return "XADD"
	}
	return string(k)
}

// op is one state change. field holds the hash field or set member.
type op struct {
	kind  opKind
	key   string
	field string
	val   []byte
}

// Tx collects state changes and outbox events to apply atomically. Keys are
// relative to the store's prefix. The zero value is ready to use.
type Tx struct {
	ops    []op
	conds  []cond
	events []envelope.Event
	log    *logSpec
}

// cond is a condition of a transaction: field of the hash at key holds
// want, or (want nil) is absent; with count, the hash at key has fewer
// than below fields (field and want unused).
type cond struct {
	key   string
	field string
	want  []byte
	count bool
	below int64
}

// IfHField makes the transaction conditional on what field of the hash at
// key holds when it is applied: exactly want, or nothing when want is nil
// (an empty non-nil want is the empty value). This is compare-and-set for a
// read-modify-write: pass the bytes the decision was made from. Apply checks
// every condition before its first write and, when one does not hold,
// writes nothing (no state, no events, no inbox mark) and fails with an
// error wrapping ErrConflict. A condition reads the key as it is before the
// transaction, whatever tx writes to it.
func (t *Tx) IfHField(key, field string, want []byte) {
	t.conds = append(t.conds, cond{key: key, field: field, want: want})
}

// IfHLenBelow makes the transaction conditional on the hash at key having
// fewer than n fields when it is applied (a missing key has none): a
// bound on a hash's size that holds under racing writers, each of which
// adds one field (pass the bound; the check reads the key as it is before
// the transaction). When it does not hold, Apply writes nothing and fails
// with an error wrapping ErrConflict, as IfHField. n must be positive.
func (t *Tx) IfHLenBelow(key string, n int64) {
	t.conds = append(t.conds, cond{key: key, count: true, below: n})
}

// Set sets key to val.
func (t *Tx) Set(key string, val []byte) { t.ops = append(t.ops, op{kind: opSet, key: key, val: val}) }

// XAdd appends val to the capped stream at key (an entry whose one field,
// "e", holds it), trimming the stream to about maxLen entries (XADD MAXLEN
// ~), atomically with the transaction's other writes: a bounded history
// kept with the state it records (StreamEntries reads it). maxLen must be
// positive; Apply refuses the transaction otherwise. A change log (Tx.Log)
// does not record these appends.
func (t *Tx) XAdd(key string, maxLen int64, val []byte) {
	t.ops = append(t.ops, op{kind: opXAdd, key: key, field: strconv.FormatInt(maxLen, 10), val: val})
}

// Del deletes key.
func (t *Tx) Del(key string) { t.ops = append(t.ops, op{kind: opDel, key: key}) }

// HSet sets field of the hash at key.
func (t *Tx) HSet(key, field string, val []byte) {
	t.ops = append(t.ops, op{kind: opHSet, key: key, field: field, val: val})
}

// HDel deletes field of the hash at key.
func (t *Tx) HDel(key, field string) { t.ops = append(t.ops, op{kind: opHDel, key: key, field: field}) }

// SAdd adds member to the set at key.
func (t *Tx) SAdd(key, member string) {
	t.ops = append(t.ops, op{kind: opSAdd, key: key, field: member})
}

// SRem removes member from the set at key.
func (t *Tx) SRem(key, member string) {
	t.ops = append(t.ops, op{kind: opSRem, key: key, field: member})
}

// ZAdd adds member to the sorted set at key with score 0: the set is an
// index whose members Store.ZRangeByLex reads in order.
func (t *Tx) ZAdd(key, member string) {
	t.ops = append(t.ops, op{kind: opZAdd, key: key, field: member})
}

// ZRem removes member from the sorted set at key.
func (t *Tx) ZRem(key, member string) {
	t.ops = append(t.ops, op{kind: opZRem, key: key, field: member})
}

// Emit adds an event to the outbox. Its Topic, Key, ID and Payload must be set.
func (t *Tx) Emit(ev envelope.Event) { t.events = append(t.events, ev) }

// Empty reports whether the transaction holds no change, no event and no
// condition.
func (t *Tx) Empty() bool {
	return t == nil || (len(t.ops) == 0 && len(t.events) == 0 && len(t.conds) == 0)
}

// reservedKey reports whether a relative key belongs to the store itself.
func reservedKey(k string) bool {
	return k == "outbox" || strings.HasPrefix(k, "outbox:") || strings.HasPrefix(k, "inbox:")
}

// keyType is what a key holds at a point of a transaction, as far as Go can
// tell without asking Redis.
type keyType int

const (
	typeUnknown keyType = iota // untouched so far: whatever Redis holds
	typeNone
	typeString
	typeHash
	typeSet
	typeStream
	typeZSet
)

func (k keyType) String() string {
	return [...]string{"unknown", "none", "string", "hash", "set", "stream", "zset"}[k]
}

// typeCheck asks the script to verify, before its first write, that a key
// holds want (a Redis TYPE name) or nothing.
type typeCheck struct {
	keyIndex int // 1-based index into the script's KEYS
	want     string
}

// validate checks every op and simulates the keys' types through the
// transaction, so that no command in the apply script can fail after it
// started writing: conflicts inside tx are InvalidArgument here, and the types
// the ops need from keys tx does not overwrite first become typeChecks that
// the script runs before writing anything. firstKey is the KEYS index of the
// first op's key.
func (t *Tx) validate(firstKey int) ([]typeCheck, error) {
	var v errs.Validator
	var checks []typeCheck
	types := map[string]keyType{}
	for i, o := range t.ops {
		field := fmt.Sprintf("tx.ops[%d].key", i)
		if o.key == "" {
			v.Add(field, "must not be empty (%s)", o.kind)
			continue
		}
		if reservedKey(o.key) {
			v.Add(field, "%q is reserved for the store's outbox and inbox", o.key)
			continue
		}
		cur := types[o.key]
		switch o.kind {
		case opSet:
			types[o.key] = typeString // SET replaces a value of any type
		case opDel:
			types[o.key] = typeNone
		case opHSet, opHDel, opSAdd, opSRem, opZAdd, opZRem, opXAdd:
			want, redisName := typeHash, "hash"
			switch o.kind {
			case opSAdd, opSRem:
				want, redisName = typeSet, "set"
			case opZAdd, opZRem:
				want, redisName = typeZSet, "zset"
			case opXAdd:
				want, redisName = typeStream, "stream"
			}
			switch cur {
			case typeUnknown:
				checks = append(checks, typeCheck{keyIndex: firstKey + i, want: redisName})
			case typeNone, want:
			default:
				v.Add(field, "%s on %q, which this transaction made a %s", o.kind, o.key, cur)
				continue
			}
			if o.kind == opXAdd {
				if n, err := strconv.ParseInt(o.field, 10, 64); err != nil || n <= 0 {
					v.Add(fmt.Sprintf("tx.ops[%d].max_len", i), "must be positive, got %q", o.field)
					continue
				}
			}
			if o.kind == opHSet || o.kind == opSAdd || o.kind == opZAdd || o.kind == opXAdd {
				types[o.key] = want
			} else if cur == typeUnknown {
				// HDEL/SREM may empty the key; either way it is hash/set-or-none,
				// which the check just recorded covers for the ops that follow.
				types[o.key] = want
			}
		default:
			v.Add(field, "unknown operation %q", o.kind)
		}
	}
	for i, c := range t.conds {
		field := fmt.Sprintf("tx.conds[%d].key", i)
		switch {
		case c.key == "":
			v.Add(field, "must not be empty (IfHField)")
		case reservedKey(c.key):
			v.Add(field, "%q is reserved for the store's outbox and inbox", c.key)
		case c.count && c.below <= 0:
			v.Add(fmt.Sprintf("tx.conds[%d].below", i), "must be positive, got %d (IfHLenBelow)", c.below)
		}
	}
	for i, e := range t.events {
		p := fmt.Sprintf("tx.events[%d]", i)
		v.Check(e.Topic != "", p+".topic", "is required")
		v.Check(e.Key != "", p+".key", "is required")
		v.Check(e.ID != "", p+".id", "is required")
		v.Check(e.Payload != nil, p+".payload", "is required")
	}
	return checks, v.Err()
}
