package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel/trace"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/errs"
)

// outboxMessages reads the whole outbox as messages, oldest first.
func outboxMessages(t *testing.T, s *Store) []kafka.Message {
	t.Helper()
	entries, err := s.rdb.XRange(context.Background(), s.outboxKey, "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	var out []kafka.Message
	for _, e := range entries {
		m, err := decodeEntry(e.Values)
		if err != nil {
			t.Fatalf("entry %s: %v", e.ID, err)
		}
		out = append(out, m)
	}
	return out
}

func TestApplyWritesStateOutboxAndInboxTogether(t *testing.T) {
	t.Parallel()
	backends(t, func(t *testing.T, rdb *redis.Client) {
		ctx := context.Background()
		s := New(rdb, "svc:")
		ev := testEvent("projects/p/jobs/1", "one")
		var tx Tx
		tx.Set("job/1", []byte("v1"))
		tx.HSet("jobs", "1", []byte("h1"))
		tx.SAdd("pending", "1")
		tx.Emit(ev)
		applied, err := s.Apply(ctx, "in-1", &tx)
		if err != nil || !applied {
			t.Fatalf("Apply = %v, %v; want true, nil", applied, err)
		}
		if v, err := s.Get(ctx, "job/1"); err != nil || string(v) != "v1" {
			t.Fatalf("Get = %q, %v", v, err)
		}
		if v, err := s.HGet(ctx, "jobs", "1"); err != nil || string(v) != "h1" {
			t.Fatalf("HGet = %q, %v", v, err)
		}
		if m, err := s.SMembers(ctx, "pending"); err != nil || !slices.Equal(m, []string{"1"}) {
			t.Fatalf("SMembers = %v, %v", m, err)
		}
		if seen, err := s.Seen(ctx, "in-1"); err != nil || !seen {
			t.Fatalf("Seen = %v, %v", seen, err)
		}
		ttl, err := rdb.TTL(ctx, "svc:inbox:in-1").Result()
		if err != nil || ttl < InboxTTL-time.Minute || ttl > InboxTTL {
			t.Fatalf("inbox TTL = %v, %v; want about %v", ttl, err, InboxTTL)
		}
		msgs := outboxMessages(t, s)
		if len(msgs) != 1 {
			t.Fatalf("outbox has %d entries, want 1", len(msgs))
		}
		want, err := envelope.Encode(ev)
		if err != nil {
			t.Fatal(err)
		}
		got := msgs[0]
		if got.Topic != want.Topic || string(got.Key) != string(want.Key) ||
			string(got.Value) != string(want.Value) || !slices.EqualFunc(got.Headers, want.Headers,
			func(a, b kafka.Header) bool { return a.Key == b.Key && string(a.Value) == string(b.Value) }) {
			t.Fatalf("outbox entry %+v differs from the encoded event %+v", got, want)
		}
		// The same inbox id again writes nothing, however different the tx.
		var again Tx
		again.Set("job/1", []byte("v2"))
		again.Emit(testEvent("projects/p/jobs/1", "two"))
		applied, err = s.Apply(ctx, "in-1", &again)
		if err != nil || applied {
			t.Fatalf("second Apply = %v, %v; want false, nil", applied, err)
		}
		if v, _ := s.Get(ctx, "job/1"); string(v) != "v1" {
			t.Fatalf("duplicate changed state to %q", v)
		}
		if n, err := s.OutboxLen(ctx); err != nil || n != 1 {
			t.Fatalf("OutboxLen = %d, %v; want 1", n, err)
		}
	})
}

func TestApplyDeletesAndReads(t *testing.T) {
	t.Parallel()
	backends(t, func(t *testing.T, rdb *redis.Client) {
		ctx := context.Background()
		s := New(rdb, "svc:")
		var tx Tx
		tx.Set("a", []byte("1"))
		tx.HSet("h", "f1", []byte("x"))
		tx.HSet("h", "f2", []byte("y"))
		tx.SAdd("s", "m1")
		tx.SAdd("s", "m2")
		if _, err := s.Apply(ctx, "", &tx); err != nil {
			t.Fatal(err)
		}
		var del Tx
		del.Del("a")
		del.HDel("h", "f1")
		del.SRem("s", "m1")
		if applied, err := s.Apply(ctx, "", &del); err != nil || !applied {
			t.Fatalf("Apply = %v, %v", applied, err)
		}
		if _, err := s.Get(ctx, "a"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Get deleted key: %v, want ErrNotFound", err)
		}
		if _, err := s.HGet(ctx, "h", "f1"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("HGet deleted field: %v, want ErrNotFound", err)
		}
		h, err := s.HGetAll(ctx, "h")
		if err != nil || len(h) != 1 || string(h["f2"]) != "y" {
			t.Fatalf("HGetAll = %v, %v", h, err)
		}
		if h, err := s.HGetAll(ctx, "missing"); err != nil || len(h) != 0 {
			t.Fatalf("HGetAll of a missing key = %v, %v", h, err)
		}
		if vs, err := s.HMGet(ctx, "h", []string{"f2", "f1", "f2"}); err != nil || len(vs) != 3 ||
			string(vs[0]) != "y" || vs[1] != nil || string(vs[2]) != "y" {
			t.Fatalf("HMGet = %q, %v", vs, err)
		}
		// A sorted set as an index: members in order, by range and count.
		var z Tx
		for _, m := range []string{"b", "d", "a", "c", "e"} {
			z.ZAdd("idx", m)
		}
		z.ZRem("idx", "e")
		if _, err := s.Apply(ctx, "", &z); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			after, upto string
			limit       int64
			want        string
		}{{"", "", 10, "abcd"}, {"a", "", 2, "bc"}, {"b", "c", 10, "c"}, {"d", "", 10, ""}} {
			got, err := s.ZRangeByLex(ctx, "idx", c.after, c.upto, c.limit)
			if err != nil || strings.Join(got, "") != c.want {
				t.Fatalf("ZRangeByLex(%q, %q, %d) = %v, %v; want %s", c.after, c.upto, c.limit, got, err, c.want)
			}
		}
		if m, err := s.SMembers(ctx, "s"); err != nil || !slices.Equal(m, []string{"m2"}) {
			t.Fatalf("SMembers = %v, %v", m, err)
		}
		// Replacing a key's type inside one tx (DEL, then HSET) is allowed.
		var replace Tx
		replace.Set("k", []byte("string"))
		replace.Del("k")
		replace.HSet("k", "f", []byte("v"))
		if _, err := s.Apply(ctx, "", &replace); err != nil {
			t.Fatalf("DEL then HSET: %v", err)
		}
		if v, err := s.HGet(ctx, "k", "f"); err != nil || string(v) != "v" {
			t.Fatalf("HGet after replace = %q, %v", v, err)
		}
		if s.Key("x") != "svc:x" || s.Client() != redis.UniversalClient(rdb) {
			t.Fatalf("Key/Client do not reflect the store's prefix and client")
		}
		if applied, err := s.Apply(ctx, "", nil); err != nil || !applied {
			t.Fatalf("Apply(nil tx) = %v, %v", applied, err)
		}
		if !(&Tx{}).Empty() || (*Tx)(nil).Empty() == false || tx.Empty() {
			t.Fatal("Empty is wrong")
		}
	})
}

func TestApplyEmptyTxStillMarksInbox(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := New(miniRedis(t), "svc:")
	if applied, err := s.Apply(ctx, "ev-1", &Tx{}); err != nil || !applied {
		t.Fatalf("Apply = %v, %v", applied, err)
	}
	if applied, err := s.Apply(ctx, "ev-1", &Tx{}); err != nil || applied {
		t.Fatalf("second Apply = %v, %v; want false", applied, err)
	}
}

// TestHScanAllReadsEveryField: a hash read in chunks is the hash HGetAll
// reads, whatever the chunk; a missing hash is empty.
func TestHScanAllReadsEveryField(t *testing.T) {
	t.Parallel()
	backends(t, func(t *testing.T, rdb *redis.Client) {
		ctx := context.Background()
		s := New(rdb, "svc:")
		var tx Tx
		for i := range 2500 {
			tx.HSet("big", "f"+strconv.Itoa(i), []byte(strings.Repeat("v", i%7)+strconv.Itoa(i)))
		}
		if _, err := s.Apply(ctx, "", &tx); err != nil {
			t.Fatal(err)
		}
		want, err := s.HGetAll(ctx, "big")
		if err != nil || len(want) != 2500 {
			t.Fatalf("HGetAll: %d fields, %v", len(want), err)
		}
		for _, count := range []int64{1, 100, 10000} {
			got, err := s.HScanAll(ctx, "big", count)
			if err != nil || len(got) != len(want) {
				t.Fatalf("HScanAll by %d: %d fields, %v", count, len(got), err)
			}
			for f, v := range want {
				if string(got[f]) != string(v) {
					t.Fatalf("HScanAll by %d: %s = %q, want %q", count, f, got[f], v)
				}
			}
		}
		if got, err := s.HScanAll(ctx, "missing", 100); err != nil || len(got) != 0 {
			t.Fatalf("HScanAll of a missing key = %v, %v", got, err)
		}
		// HScanPages hands over pages as they come, and stops at its
		// callback's error.
		stop, pages := errors.New("stop"), 0
		err = s.HScanPages(ctx, "big", 100, func(fields []string, values [][]byte) error {
			if pages++; len(fields) == 0 || len(fields) != len(values) || string(values[0]) != string(want[fields[0]]) {
				t.Errorf("page %d: %d fields, %d values", pages, len(fields), len(values))
			}
			return stop
		})
		if !errors.Is(err, stop) || pages != 1 {
			t.Fatalf("HScanPages stopped after %d pages with %v; want 1, %v", pages, err, stop)
		}
	})
}

func TestApplyRejectsInvalidTx(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := miniRedis(t)
	s := New(rdb, "svc:")
	var tx Tx
	tx.Set("ok", []byte("1"))                              // ops[0]
	tx.Set("", []byte("x"))                                // ops[1]: empty
	tx.SAdd("inbox:x", "m")                                // ops[2]: reserved
	tx.HSet("outbox", "f", nil)                            // ops[3]: reserved
	tx.Set("str", []byte("s"))                             // ops[4]
	tx.HSet("str", "f", []byte("v"))                       // ops[5]: string made here
	tx.Emit(envelope.Event{ID: "1", Key: "k", Topic: "t"}) // events[0]: no payload
	tx.Emit(envelope.Event{})                              // events[1]: nothing
	_, err := s.Apply(ctx, "in-1", &tx)
	var inv *errs.InvalidError
	if !errors.As(err, &inv) {
		t.Fatalf("Apply = %v, want an InvalidError", err)
	}
	var fields []string
	for _, v := range inv.Violations {
		fields = append(fields, v.Field)
	}
	want := []string{"tx.ops[1].key", "tx.ops[2].key", "tx.ops[3].key", "tx.ops[5].key",
		"tx.events[0].payload", "tx.events[1].topic", "tx.events[1].key", "tx.events[1].id", "tx.events[1].payload"}
	if !slices.Equal(fields, want) {
		t.Fatalf("violations %v, want %v", fields, want)
	}
	if n, _ := rdb.DBSize(ctx).Result(); n != 0 {
		t.Fatalf("an invalid tx wrote %d keys", n)
	}
}

// A key of the wrong type in Redis would make a command fail mid-script;
// the script checks types before its first write, so nothing is written.
func TestApplyWrongTypeWritesNothing(t *testing.T) {
	t.Parallel()
	backends(t, func(t *testing.T, rdb *redis.Client) {
		ctx := context.Background()
		s := New(rdb, "svc:")
		var setup Tx
		setup.Set("str", []byte("s"))
		setup.HSet("hash", "f", []byte("v"))
		if _, err := s.Apply(ctx, "", &setup); err != nil {
			t.Fatal(err)
		}
		for i, bad := range []func(*Tx){
			func(tx *Tx) { tx.HSet("str", "f", []byte("v")) },
			func(tx *Tx) { tx.HDel("str", "f") },
			func(tx *Tx) { tx.SAdd("hash", "m") },
			func(tx *Tx) { tx.SRem("str", "m") },
			func(tx *Tx) { tx.ZAdd("hash", "m") },
			func(tx *Tx) { tx.ZRem("str", "m") },
		} {
			wantKey := []string{"str", "str", "hash", "str", "hash", "str"}[i]
			var tx Tx
			tx.Set("other", []byte("x")) // a write the script would do first
			tx.SAdd("members", "m")
			tx.Emit(testEvent("k", "lost"))
			bad(&tx)
			inbox := fmt.Sprintf("in-%d", i)
			applied, err := s.Apply(ctx, inbox, &tx)
			if applied || !errors.Is(err, errs.FailedPrecondition) {
				t.Fatalf("case %d: Apply = %v, %v; want a FailedPrecondition error", i, applied, err)
			}
			// The error names the key as the transaction did.
			var wt *WrongTypeError
			if !errors.As(err, &wt) || wt.Key != wantKey {
				t.Fatalf("case %d: Apply = %v; want a WrongTypeError naming %q", i, err, wantKey)
			}
			if _, err := s.Get(ctx, "other"); !errors.Is(err, ErrNotFound) {
				t.Fatalf("case %d: state written despite the error (%v)", i, err)
			}
			if m, _ := s.SMembers(ctx, "members"); len(m) != 0 {
				t.Fatalf("case %d: set written despite the error: %v", i, m)
			}
			if n, _ := s.OutboxLen(ctx); n != 0 {
				t.Fatalf("case %d: outbox has %d entries despite the error", i, n)
			}
			if seen, _ := s.Seen(ctx, inbox); seen {
				t.Fatalf("case %d: inbox marked despite the error", i)
			}
		}
		// An outbox key that is not a stream is caught before writing as well.
		if err := rdb.Set(ctx, "bad:outbox", "x", 0).Err(); err != nil {
			t.Fatal(err)
		}
		bs := New(rdb, "bad:")
		var tx Tx
		tx.Set("k", []byte("v"))
		tx.Emit(testEvent("k", "e"))
		var wt *WrongTypeError
		if _, err := bs.Apply(ctx, "in", &tx); !errors.Is(err, errs.FailedPrecondition) || !errors.As(err, &wt) || wt.Key != "outbox" {
			t.Fatalf("Apply with a broken outbox = %v, want a WrongTypeError naming outbox", err)
		}
		if _, err := bs.Get(ctx, "k"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("state written despite a broken outbox (%v)", err)
		}
	})
}

// IfHField is compare-and-set: a transaction whose condition no longer
// holds writes nothing (state, events, inbox mark) and fails with
// ErrConflict; one whose conditions hold writes as usual.
func TestApplyIfHFieldIsCompareAndSet(t *testing.T) {
	t.Parallel()
	backends(t, func(t *testing.T, rdb *redis.Client) {
		ctx := context.Background()
		s := New(rdb, "svc:")
		var setup Tx
		setup.HSet("ops", "a", []byte("v1"))
		setup.Set("str", []byte("s"))
		if _, err := s.Apply(ctx, "", &setup); err != nil {
			t.Fatal(err)
		}
		write := func(inbox string, cond func(*Tx)) (bool, error) {
			var tx Tx
			cond(&tx)
			tx.HSet("ops", "a", []byte("v2"))
			tx.Set("other", []byte(inbox))
			tx.Emit(testEvent("k", inbox))
			return s.Apply(ctx, inbox, &tx)
		}
		for i, stale := range []func(*Tx){
			func(tx *Tx) { tx.IfHField("ops", "a", []byte("v0")) },     // changed since
			func(tx *Tx) { tx.IfHField("ops", "a", nil) },              // wanted absent
			func(tx *Tx) { tx.IfHField("ops", "a", []byte{}) },         // wanted empty
			func(tx *Tx) { tx.IfHField("ops", "b", []byte("v1")) },     // absent field
			func(tx *Tx) { tx.IfHField("missing", "a", []byte("v1")) }, // absent key
		} {
			inbox := fmt.Sprintf("in-%d", i)
			applied, err := write(inbox, stale)
			if applied || !errors.Is(err, ErrConflict) || !errors.Is(err, errs.Aborted) {
				t.Fatalf("case %d: Apply = %v, %v; want ErrConflict (Aborted)", i, applied, err)
			}
			if b, _ := s.HGet(ctx, "ops", "a"); string(b) != "v1" {
				t.Fatalf("case %d: field overwritten (%q) despite the conflict", i, b)
			}
			if _, err := s.Get(ctx, "other"); !errors.Is(err, ErrNotFound) {
				t.Fatalf("case %d: state written despite the conflict (%v)", i, err)
			}
			if n, _ := s.OutboxLen(ctx); n != 0 {
				t.Fatalf("case %d: outbox has %d entries despite the conflict", i, n)
			}
			if seen, _ := s.Seen(ctx, inbox); seen {
				t.Fatalf("case %d: inbox marked despite the conflict", i)
			}
		}
		// A condition on a key that is not a hash is a FailedPrecondition.
		if _, err := write("in-str", func(tx *Tx) { tx.IfHField("str", "a", nil) }); !errors.Is(err, errs.FailedPrecondition) {
			t.Fatalf("condition on a string key = %v, want FailedPrecondition", err)
		}
		// Conditions that hold: the write goes through, and a second writer
		// that decided on the same bytes then loses.
		applied, err := write("in-ok", func(tx *Tx) {
			tx.IfHField("ops", "a", []byte("v1"))
			tx.IfHField("ops", "none", nil)
		})
		if !applied || err != nil {
			t.Fatalf("Apply with holding conditions = %v, %v", applied, err)
		}
		if b, _ := s.HGet(ctx, "ops", "a"); string(b) != "v2" {
			t.Fatalf("field = %q, want v2", b)
		}
		if _, err := write("in-late", func(tx *Tx) { tx.IfHField("ops", "a", []byte("v1")) }); !errors.Is(err, ErrConflict) {
			t.Fatalf("the second writer on the same read = %v, want ErrConflict", err)
		}
		// An invalid condition is refused before Redis.
		var bad Tx
		bad.IfHField("inbox:x", "f", nil)
		var inv *errs.InvalidError
		if _, err := s.Apply(ctx, "", &bad); !errors.As(err, &inv) || !strings.Contains(err.Error(), "tx.conds[0].key") {
			t.Fatalf("condition on a reserved key = %v, want InvalidArgument", err)
		}
	})
}

// IfHLenBelow bounds a hash's size under racing writers: a transaction
// that would add a field to a hash already holding the bound writes
// nothing and fails with ErrConflict; below it, it writes as usual. A
// missing key holds no fields; a key of another type is
// FailedPrecondition; a bound that is not positive is refused before
// Redis.
func TestApplyIfHLenBelowBoundsAHash(t *testing.T) {
	t.Parallel()
	backends(t, func(t *testing.T, rdb *redis.Client) {
		ctx := context.Background()
		s := New(rdb, "svc:")
		add := func(field string, bound int64) error {
			var tx Tx
			tx.IfHLenBelow("h", bound)
			tx.HSet("h", field, []byte("v"))
			tx.Emit(testEvent("k", field))
			_, err := s.Apply(ctx, "", &tx)
			return err
		}
		for i := range 3 {
			if err := add(fmt.Sprintf("f%d", i), 3); err != nil {
				t.Fatalf("field %d of 3: %v", i, err)
			}
		}
		if err := add("f3", 3); !errors.Is(err, ErrConflict) || !errors.Is(err, errs.Aborted) {
			t.Fatalf("a fourth field under a bound of 3 = %v, want ErrConflict (Aborted)", err)
		}
		if n, _ := rdb.HLen(ctx, "svc:h").Result(); n != 3 {
			t.Fatalf("hash holds %d fields, want 3", n)
		}
		if n, _ := s.OutboxLen(ctx); n != 3 {
			t.Fatalf("outbox has %d entries, want 3 (the refused one wrote nothing)", n)
		}
		// Writers racing for the last place: exactly one gets it.
		errc := make(chan error, 8)
		for i := range 8 {
			go func() { errc <- add(fmt.Sprintf("r%d", i), 4) }()
		}
		won := 0
		for range 8 {
			switch err := <-errc; {
			case err == nil:
				won++
			case !errors.Is(err, ErrConflict):
				t.Fatalf("a racing writer: %v, want nil or ErrConflict", err)
			}
		}
		if n, _ := rdb.HLen(ctx, "svc:h").Result(); won != 1 || n != 4 {
			t.Fatalf("%d racing writers won, the hash holds %d fields; want 1 and 4", won, n)
		}
		var missing Tx
		missing.IfHLenBelow("none", 1)
		missing.Set("s", []byte("x"))
		if _, err := s.Apply(ctx, "", &missing); err != nil {
			t.Fatalf("a bound on a missing key = %v, want it to hold", err)
		}
		var wrong Tx
		wrong.IfHLenBelow("s", 1)
		wrong.HSet("h", "w", []byte("v"))
		if _, err := s.Apply(ctx, "", &wrong); !errors.Is(err, errs.FailedPrecondition) {
			t.Fatalf("a bound on a string key = %v, want FailedPrecondition", err)
		}
		var bad Tx
		bad.IfHLenBelow("h", 0)
		var inv *errs.InvalidError
		if _, err := s.Apply(ctx, "", &bad); !errors.As(err, &inv) || !strings.Contains(err.Error(), "tx.conds[0].below") {
			t.Fatalf("a bound of 0 = %v, want InvalidArgument naming tx.conds[0].below", err)
		}
	})
}

func TestApplyStampsTraceContext(t *testing.T) {
	t.Parallel()
	s := New(miniRedis(t), "svc:")
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:     trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
		TraceFlags: trace.FlagsSampled,
	})
	ctx := trace.ContextWithSpanContext(context.Background(), sc)
	own := testEvent("k", "own")
	own.TraceParent = "00-11111111111111111111111111111111-2222222222222222-01"
	var tx Tx
	tx.Emit(testEvent("k", "stamped"))
	tx.Emit(own)
	if _, err := s.Apply(ctx, "", &tx); err != nil {
		t.Fatal(err)
	}
	msgs := outboxMessages(t, s)
	if len(msgs) != 2 {
		t.Fatalf("outbox has %d entries", len(msgs))
	}
	if got := headerValue(msgs[0].Headers, envelope.HeaderTraceParent); got != "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" {
		t.Fatalf("stamped traceparent = %q", got)
	}
	if got := headerValue(msgs[1].Headers, envelope.HeaderTraceParent); got != own.TraceParent {
		t.Fatalf("an event's own traceparent was replaced: %q", got)
	}
	// Without a span in ctx no traceparent is invented.
	var plain Tx
	plain.Emit(testEvent("k", "plain"))
	if _, err := s.Apply(context.Background(), "", &plain); err != nil {
		t.Fatal(err)
	}
	if got := headerValue(outboxMessages(t, s)[2].Headers, envelope.HeaderTraceParent); got != "" {
		t.Fatalf("traceparent %q without a span", got)
	}
}

// A reader taking consistent snapshots (MULTI/EXEC) while Apply runs must
// see the state, the outbox entry and the inbox mark of each Apply together
// or not at all: after n applies the counter is n, the outbox holds n entries
// and the database holds the counter, the outbox and n inbox marks.
func TestApplyIsAtomicForConcurrentReaders(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := realRedis(t)
	s := New(rdb, "svc:")
	const n = 300
	done := make(chan error, 1)
	go func() {
		for i := 1; i <= n; i++ {
			var tx Tx
			tx.Set("counter", []byte(strconv.Itoa(i)))
			tx.Emit(testEvent("k", strconv.Itoa(i)))
			if _, err := s.Apply(ctx, "ev-"+strconv.Itoa(i), &tx); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	snapshots := 0
	for finished := false; !finished; {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			finished = true
		default:
		}
		var get *redis.StringCmd
		var xlen, size *redis.IntCmd
		_, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			get = p.Get(ctx, s.Key("counter"))
			xlen = p.XLen(ctx, s.outboxKey)
			size = p.DBSize(ctx)
			return nil
		})
		if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatal(err)
		}
		c, _ := strconv.ParseInt(get.Val(), 10, 64)
		wantSize := int64(0)
		if c > 0 {
			wantSize = c + 2
		}
		if xlen.Val() != c || size.Val() != wantSize {
			t.Fatalf("snapshot: counter %d, outbox %d, keys %d; want %d, %d", c, xlen.Val(), size.Val(), c, wantSize)
		}
		snapshots++
	}
	if v, _ := s.Get(ctx, "counter"); string(v) != strconv.Itoa(n) {
		t.Fatalf("counter = %s, want %d", v, n)
	}
	t.Logf("%d consistent snapshots", snapshots)
}

// Failpoint (a): a crash after Apply validated tx but before the script ran
// leaves nothing behind, and the retry applies exactly once.
func TestCrashBeforeApplyScriptWritesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := realRedis(t)
	s := New(rdb, "svc:")
	crash := errors.New("crash")
	s.fp.beforeApplyScript = func() error { return crash }
	tx := func() *Tx {
		var tx Tx
		tx.Set("job", []byte("running"))
		tx.Emit(testEvent("k", "changed"))
		return &tx
	}
	if applied, err := s.Apply(ctx, "ev-1", tx()); applied || !errors.Is(err, crash) {
		t.Fatalf("Apply with the failpoint = %v, %v", applied, err)
	}
	if n, _ := rdb.DBSize(ctx).Result(); n != 0 {
		t.Fatalf("the crashed Apply wrote %d keys", n)
	}
	s.fp.beforeApplyScript = nil
	if applied, err := s.Apply(ctx, "ev-1", tx()); err != nil || !applied {
		t.Fatalf("retried Apply = %v, %v", applied, err)
	}
	if applied, err := s.Apply(ctx, "ev-1", tx()); err != nil || applied {
		t.Fatalf("third Apply = %v, %v; want false", applied, err)
	}
	if n, _ := s.OutboxLen(ctx); n != 1 {
		t.Fatalf("outbox has %d entries, want 1", n)
	}
}

// Failpoint (c): the consumer applied an event but crashed before committing
// it to Kafka; the redelivered copy changes nothing and emits nothing.
func TestRedeliveryAfterCrashBeforeCommitIsNoop(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := New(realRedis(t), "consumer:")
	in := testEvent("projects/p/jobs/1", "submit")
	handle := func(ev envelope.Event) (bool, error) {
		n := 0
		if v, err := s.Get(ctx, "count"); err == nil {
			n, _ = strconv.Atoi(string(v))
		} else if !errors.Is(err, ErrNotFound) {
			return false, err
		}
		var tx Tx
		tx.Set("count", []byte(strconv.Itoa(n+1)))
		tx.Emit(testEvent(ev.Key, "reaction"))
		return s.Apply(ctx, ev.ID, &tx)
	}
	if applied, err := handle(in); err != nil || !applied {
		t.Fatalf("first delivery = %v, %v", applied, err)
	}
	// crash: no commit, so Kafka delivers the same record again
	if applied, err := handle(in); err != nil || applied {
		t.Fatalf("redelivery = %v, %v; want applied=false", applied, err)
	}
	if v, _ := s.Get(ctx, "count"); string(v) != "1" {
		t.Fatalf("count = %s after a redelivery, want 1", v)
	}
	if n, _ := s.OutboxLen(ctx); n != 1 {
		t.Fatalf("outbox has %d reactions, want 1", n)
	}
}

func TestApplyConcurrentDuplicatesApplyOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := New(realRedis(t), "svc:")
	var wg sync.WaitGroup
	var mu sync.Mutex
	applied := 0
	for range 16 {
		wg.Go(func() {
			var tx Tx
			tx.SAdd("s", "m")
			tx.Emit(testEvent("k", "e"))
			ok, err := s.Apply(ctx, "same", &tx)
			if err != nil {
				t.Error(err)
			}
			if ok {
				mu.Lock()
				applied++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if n, _ := s.OutboxLen(ctx); applied != 1 || n != 1 {
		t.Fatalf("%d concurrent copies applied, %d outbox entries; want 1, 1", applied, n)
	}
}

func TestApplyBatchMarksEveryInboxOrWritesNothing(t *testing.T) {
	t.Parallel()
	backends(t, func(t *testing.T, rdb *redis.Client) {
		ctx := context.Background()
		s := New(rdb, "svc:")
		var tx Tx
		tx.Set("job/1", []byte("v1"))
		tx.HSet("jobs", "1", []byte("h1"))
		tx.Emit(testEvent("projects/p/jobs/1", "one"))
		applied, err := s.ApplyBatch(ctx, []string{"in-1", "in-2", "in-3"}, &tx)
		if err != nil || !applied {
			t.Fatalf("ApplyBatch = %v, %v; want true, nil", applied, err)
		}
		if v, err := s.Get(ctx, "job/1"); err != nil || string(v) != "v1" {
			t.Fatalf("Get = %q, %v", v, err)
		}
		// Every event of the batch is marked: each alone is now a duplicate.
		for _, id := range []string{"in-1", "in-2", "in-3"} {
			var again Tx
			again.Set("job/1", []byte("dup "+id))
			if applied, err := s.Apply(ctx, id, &again); err != nil || applied {
				t.Fatalf("Apply(%s) after the batch = %v, %v; want false, nil", id, applied, err)
			}
		}
		// A batch holding one applied id writes nothing, not even the new marks.
		var tx2 Tx
		tx2.Set("job/2", []byte("v2"))
		tx2.Emit(testEvent("projects/p/jobs/2", "two"))
		if applied, err := s.ApplyBatch(ctx, []string{"in-4", "in-2"}, &tx2); err != nil || applied {
			t.Fatalf("ApplyBatch with a duplicate = %v, %v; want false, nil", applied, err)
		}
		if _, err := s.Get(ctx, "job/2"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("job/2 written by a refused batch: %v", err)
		}
		if n := len(outboxMessages(t, s)); n != 1 {
			t.Fatalf("outbox has %d events, want 1 (the refused batch emitted)", n)
		}
		var tx3 Tx
		tx3.Set("job/4", []byte("v4"))
		if applied, err := s.Apply(ctx, "in-4", &tx3); err != nil || !applied {
			t.Fatalf("in-4 was marked by the refused batch: %v, %v", applied, err)
		}
		// An empty id is refused with the field named.
		_, err = s.ApplyBatch(ctx, []string{"in-5", ""}, &tx3)
		var inv *errs.InvalidError
		if !errors.As(err, &inv) || !strings.Contains(err.Error(), "inbox_ids[1]") {
			t.Fatalf("ApplyBatch with an empty id = %v; want an InvalidError naming inbox_ids[1]", err)
		}
	})
}
