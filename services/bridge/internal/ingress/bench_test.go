package ingress

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// BenchmarkHandle is the bridge's own cost of one new message, one at a
// time as the Kafka source hands them over: the dedupe check and the
// record in real Redis, the decision, a call to a stand-in gateway on
// loopback (the principal cached) and the result. End to end through the
// real gateway is bench/cmd/ingressbench's.
//
//	go test -run '^$' -bench BenchmarkHandle -benchtime 2000x ./services/bridge/internal/ingress/
func BenchmarkHandle(b *testing.B) {
	f := newFixture(b)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if err := f.h(ctx, submit(fmt.Sprintf("b-%d", i), "loomk_good")); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkHandleDuplicate is a redelivery's cost: one Redis script.
func BenchmarkHandleDuplicate(b *testing.B) {
	f := newFixture(b)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	d := submit("dup", "loomk_good")
	if err := f.h(ctx, d); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		if err := f.h(ctx, d); err != nil {
			b.Fatal(err)
		}
	}
}
