package store

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/loom-ml/loom/libs/errs"
)

// TestChangeLogRecordsEachTransaction checks that a logged transaction
// appends one entry holding its writes in order, atomically with them: a
// refused one appends nothing, one without Log is not logged, one larger
// than the entry's bound logs that it overflowed, and a reader that fell
// behind the trimming is told so, on redis-server and miniredis.
func TestChangeLogRecordsEachTransaction(t *testing.T) {
	t.Parallel()
	backends(t, func(t *testing.T, rdb *redis.Client) {
		ctx := context.Background()
		s := New(rdb, "svc:")
		tail, _, err := s.LogTail(ctx, "changes", "")
		if err != nil || tail.ID != LogStart {
			t.Fatalf("LogTail of no log = %+v, %v; want %q", tail, err, LogStart)
		}
		if es, _, err := s.ReadLog(ctx, "changes", LogStart, 10, ""); err != nil || len(es) != 0 {
			t.Fatalf("ReadLog of no log = %v, %v", es, err)
		}

		var tx Tx
		tx.HSet("jobs", "j1", []byte("v1"))
		tx.HDel("jobs", "j0")
		tx.Set("version", []byte("7"))
		tx.SAdd("set", "m")
		tx.Log("changes", 100, 1<<20, "v7")
		if _, err := s.Apply(ctx, "", &tx); err != nil {
			t.Fatal(err)
		}
		var unlogged Tx
		unlogged.HSet("jobs", "j9", []byte("x"))
		if _, err := s.Apply(ctx, "", &unlogged); err != nil {
			t.Fatal(err)
		}
		refused := Tx{}
		refused.IfHField("jobs", "j1", []byte("not v1"))
		refused.HSet("jobs", "j2", []byte("v2"))
		refused.Log("changes", 100, 1<<20, "t")
		if _, err := s.Apply(ctx, "", &refused); !errors.Is(err, ErrConflict) {
			t.Fatalf("a refused transaction: %v, want ErrConflict", err)
		}
		// From an empty log's position the reader cannot tell what was trimmed.
		if _, _, err := s.ReadLog(ctx, "changes", LogStart, 10, ""); !errors.Is(err, ErrLogTrimmed) {
			t.Fatalf("ReadLog from an empty log's position once it has entries: %v, want ErrLogTrimmed", err)
		}
		tailEntry, version, err := s.LogTail(ctx, "changes", "version")
		if err != nil || tailEntry.ID == LogStart || string(version) != "7" || len(tailEntry.Ops) != 4 || tailEntry.Tag != "v7" {
			t.Fatalf("LogTail = %+v, %q, %v; want the logged transaction and version 7", tailEntry, version, err)
		}
		first := tailEntry.ID
		es, err := s.rdb.XRange(ctx, "svc:changes", "-", "+").Result()
		if err != nil || len(es) != 1 {
			t.Fatalf("the log holds %d entries, %v; want the one logged transaction's", len(es), err)
		}
		e, err := decodeLogEntry(es[0])
		if err != nil {
			t.Fatal(err)
		}
		want := []LogOp{{"HSET", "jobs", "j1", []byte("v1")}, {"HDEL", "jobs", "j0", nil}, {"SET", "version", "", []byte("7")}, {"SADD", "set", "m", nil}}
		if len(e.Ops) != len(want) || e.Overflowed {
			t.Fatalf("entry = %+v, want %+v", e, want)
		}
		for i, o := range e.Ops {
			if o.Op != want[i].Op || o.Key != want[i].Key || o.Field != want[i].Field || string(o.Value) != string(want[i].Value) {
				t.Fatalf("entry op %d = %+v, want %+v", i, o, want[i])
			}
		}

		big := Tx{}
		big.HSet("jobs", "j3", make([]byte, 600))
		big.Log("changes", 100, 512, "v8")
		if _, err := s.Apply(ctx, "", &big); err != nil {
			t.Fatal(err)
		}
		if v, _ := s.HGet(ctx, "jobs", "j3"); len(v) != 600 {
			t.Fatalf("an overflowing transaction still writes: got %d bytes", len(v))
		}
		got, _, err := s.ReadLog(ctx, "changes", first, 10, "")
		if err != nil || len(got) != 1 || !got[0].Overflowed || len(got[0].Ops) != 0 || got[0].Tag != "v8" {
			t.Fatalf("ReadLog after the first entry = %+v, %v; want one overflowed entry", got, err)
		}
		if tail, _, _ := s.LogTail(ctx, "changes", ""); tail.ID != got[0].ID || !tail.Overflowed {
			t.Fatalf("LogTail = %+v, want the last entry %s", tail, got[0].ID)
		}
		if got, v, err := s.ReadLog(ctx, "changes", got[0].ID, 10, "version"); err != nil || len(got) != 0 || string(v) != "7" {
			t.Fatalf("ReadLog at the tail = %+v, %q, %v; want nothing, and version 7", got, v, err)
		}

		// Many small transactions: a page at a time, and a reader left
		// behind by the trimming is told so.
		for i := range 300 {
			var tx Tx
			tx.HSet("n", strconv.Itoa(i), []byte("x"))
			tx.Log("changes", 50, 1<<10, "t")
			if _, err := s.Apply(ctx, "", &tx); err != nil {
				t.Fatal(err)
			}
		}
		if _, _, err := s.ReadLog(ctx, "changes", first, 10, ""); !errors.Is(err, ErrLogTrimmed) {
			t.Fatalf("ReadLog after a trimmed entry: %v, want ErrLogTrimmed", err)
		}
		n, _ := s.rdb.XLen(ctx, "svc:changes").Result()
		if n < 50 || n > 250 {
			t.Fatalf("the log holds %d entries, want about 50 (MAXLEN ~ 50)", n)
		}
		tail, _, err = s.LogTail(ctx, "changes", "")
		if err != nil {
			t.Fatal(err)
		}
		pos := tail.ID
		var next Tx
		next.HSet("n", "last", []byte("y"))
		next.Log("changes", 50, 1<<10, "t")
		if _, err := s.Apply(ctx, "", &next); err != nil {
			t.Fatal(err)
		}
		got, _, err = s.ReadLog(ctx, "changes", pos, 10, "")
		if err != nil || len(got) != 1 || got[0].Ops[0].Field != "last" {
			t.Fatalf("ReadLog from the tail = %+v, %v; want the one entry after it", got, err)
		}
	})
}

// TestChangeLogRefusesBadBounds checks Apply refuses a log without positive
// bounds, naming the field, and writes nothing.
func TestChangeLogRefusesBadBounds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := New(miniRedis(t), "svc:")
	for _, c := range []struct {
		maxLen   int64
		maxBytes int
		field    string
		tag      string
	}{{0, 10, "tx.log.max_len", ""}, {10, -1, "tx.log.max_bytes", ""}, {10, 10, "tx.log.tag", strings.Repeat("t", 1025)}} {
		var tx Tx
		tx.HSet("h", "f", []byte("v"))
		tx.Log("changes", c.maxLen, c.maxBytes, c.tag)
		_, err := s.Apply(ctx, "", &tx)
		var inv *errs.InvalidError
		if !errors.As(err, &inv) || !strings.Contains(err.Error(), c.field) {
			t.Fatalf("Log(%d, %d): %v, want InvalidArgument naming %s", c.maxLen, c.maxBytes, err, c.field)
		}
		if v, err := s.HGet(ctx, "h", "f"); v != nil || !errors.Is(err, ErrNotFound) {
			t.Fatalf("a refused transaction wrote h.f = %q (%v)", v, err)
		}
	}
	// An entry no Tx.Log wrote is unreadable, not a crash.
	if err := s.rdb.XAdd(ctx, &redis.XAddArgs{Stream: "svc:junk", Values: []string{"e", "o\x05\xff"}}).Err(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.ReadLog(ctx, "junk", LogStart, 10, ""); !errors.Is(err, ErrLogTrimmed) {
		t.Fatalf("ReadLog from an empty log's position: %v", err)
	}
	if _, _, err := s.LogTail(ctx, "junk", ""); !errors.Is(err, ErrLogUnreadable) {
		t.Fatalf("LogTail of a corrupt entry: %v, want ErrLogUnreadable", err)
	}
	// The log's key must be a stream.
	var tx Tx
	tx.HSet("h", "f", []byte("v"))
	tx.Log("h", 10, 100, "")
	if _, err := s.Apply(ctx, "", &tx); err == nil {
		t.Fatal("a log on the hash the transaction writes was accepted")
	}
	var inv *errs.InvalidError
	if _, _, err := s.ReadLog(ctx, "changes", LogStart, 0, ""); !errors.As(err, &inv) {
		t.Fatalf("ReadLog of 0 entries: %v, want InvalidArgument", err)
	}
}

// FuzzLogEntry: whatever a log entry holds (anyone with access to Redis can
// write one), decoding it never panics; and the ops and tag Tx.Log encodes
// decode to what was written.
func FuzzLogEntry(f *testing.F) {
	f.Add([]byte("o"), "jobs", "j1", []byte("v1"), "t/1")
	f.Add([]byte{0x05, 'a'}, "", "", []byte(nil), "")
	f.Add([]byte{0x01, 't', 'n', '3'}, "k", "f", []byte{0}, "x")
	f.Fuzz(func(t *testing.T, raw []byte, key, field string, val []byte, tag string) {
		_, _ = decodeLogEntry(redis.XMessage{ID: "1-0", Values: map[string]any{"e": string(raw)}})
		if len(tag) > maxLogTag {
			return
		}
		ops := []op{{kind: opHSet, key: key, field: field, val: val}, {kind: opHDel, key: key, field: field}, {kind: opSet, key: key, val: val}}
		e, err := decodeLogEntry(redis.XMessage{ID: "1-0", Values: map[string]any{"e": string(encodeLogOps(ops, 1<<20, tag))}})
		if err != nil {
			t.Fatalf("decode what was encoded: %v", err)
		}
		if e.Tag != tag || e.Overflowed || len(e.Ops) != 3 || e.Ops[0].Op != "HSET" || e.Ops[0].Key != key || e.Ops[0].Field != field ||
			string(e.Ops[0].Value) != string(val) || e.Ops[1].Op != "HDEL" || e.Ops[1].Value != nil || e.Ops[2].Op != "SET" {
			t.Fatalf("decoded %+v, want the three writes and tag %q", e, tag)
		}
		over, err := decodeLogEntry(redis.XMessage{ID: "1-0", Values: map[string]any{"e": string(encodeLogOps(ops, 1, tag))}})
		if err != nil || !over.Overflowed || over.Tag != tag || len(over.Ops) != 0 {
			t.Fatalf("an overflowed entry decodes to %+v, %v; want overflowed with tag %q", over, err, tag)
		}
	})
}
