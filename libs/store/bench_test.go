package store

import (
	"context"
	"strconv"
	"testing"
)

// BenchmarkApply measures one consumed event's write: one state write, one
// outbox event and the inbox mark, against a real redis-server.
func BenchmarkApply(b *testing.B) {
	ctx := context.Background()
	s := New(realRedis(b), "bench:")
	val := make([]byte, 256)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		n := strconv.Itoa(i)
		var tx Tx
		tx.Set("job/"+n, val)
		tx.Emit(testEvent("projects/p/jobs/"+n, n))
		if applied, err := s.Apply(ctx, "ev-"+n, &tx); err != nil || !applied {
			b.Fatalf("Apply = %v, %v", applied, err)
		}
	}
}

// BenchmarkApplyParallel is BenchmarkApply from several goroutines, as
// concurrent request handlers would.
func BenchmarkApplyParallel(b *testing.B) {
	ctx := context.Background()
	s := New(realRedis(b), "bench:")
	val := make([]byte, 256)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			ev := testEvent("projects/p/jobs/x", "x")
			var tx Tx
			tx.Set("job/"+ev.ID, val)
			tx.Emit(ev)
			if applied, err := s.Apply(ctx, ev.ID, &tx); err != nil || !applied {
				b.Fatalf("Apply = %v, %v", applied, err)
			}
		}
	})
}
