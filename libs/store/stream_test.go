package store

import (
	"context"
	"strconv"
	"strings"
	"testing"
)

// A capped stream (Tx.XAdd) keeps about its last maxLen entries, written
// with the transaction's state, and reads back newest first, a page at a
// time.
func TestCappedStream(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := New(realRedis(t), "svc:")
	for i := range 300 {
		var tx Tx
		tx.Set("last", []byte(strconv.Itoa(i)))
		tx.XAdd("history", 100, []byte("e"+strconv.Itoa(i)))
		if _, err := s.Apply(ctx, "", &tx); err != nil {
			t.Fatal(err)
		}
	}
	page, err := s.StreamEntries(ctx, "history", "", 10)
	if err != nil || len(page) != 10 || string(page[0].Val) != "e299" || string(page[9].Val) != "e290" {
		t.Fatalf("first page: %v, %v", page, err)
	}
	next, err := s.StreamEntries(ctx, "history", page[9].ID, 10)
	if err != nil || len(next) != 10 || string(next[0].Val) != "e289" {
		t.Fatalf("second page: %v, %v", next, err)
	}
	all, err := s.StreamEntries(ctx, "history", "", 1000)
	if err != nil || len(all) < 100 || len(all) > 200 {
		t.Fatalf("trimmed to %d entries (%v), want about 100", len(all), err)
	}
	if none, err := s.StreamEntries(ctx, "nothing", "", 10); err != nil || len(none) != 0 {
		t.Fatalf("missing stream: %v, %v", none, err)
	}
	// A bound must be given; the transaction is refused whole.
	var tx Tx
	tx.Set("last", []byte("x"))
	tx.XAdd("history", 0, []byte("bad"))
	if _, err := s.Apply(ctx, "", &tx); err == nil || !strings.Contains(err.Error(), "max_len") {
		t.Fatalf("XAdd with maxLen 0 = %v, want refused", err)
	}
	if v, _ := s.Get(ctx, "last"); string(v) != "299" {
		t.Fatalf("a refused transaction wrote %q", v)
	}
}
