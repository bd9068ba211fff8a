package bus_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/loom-ml/loom/libs/bus"
	"github.com/loom-ml/loom/libs/envelope"
)

// BenchmarkPublishConsume measures the latency of one lone record from
// Publish to the handler of a consumer group member, over loopback to an
// in-process broker: one op is one record published and handled (its
// offset is committed in the background, every CommitInterval). It
// reports p50 and p99 besides ns/op.
func BenchmarkPublishConsume(b *testing.B) {
	broker := startBroker(b)
	topic := newTopic(b, broker, 1)
	p := newProducer(b, broker)
	got := make(chan string, 1)
	startConsumer(b, bus.ConsumerConfig{Brokers: []string{broker}, GroupID: "bench", Topics: []string{topic}}, p,
		func(ctx context.Context, ev envelope.Event) error {
			got <- ev.ID
			return nil
		})
	ctx := context.Background()
	roundTrip := func() time.Duration {
		ev := event(topic, "k", 1)
		start := time.Now()
		if err := p.Publish(ctx, ev); err != nil {
			b.Fatalf("publish: %v", err)
		}
		for {
			select {
			case id := <-got:
				if id == ev.ID {
					return time.Since(start)
				}
			case <-time.After(20 * time.Second):
				b.Fatalf("record %s not consumed", ev.ID)
			}
		}
	}
	roundTrip() // the group join happens here, outside the measurement

	var lat []time.Duration
	for b.Loop() {
		lat = append(lat, roundTrip())
	}
	b.StopTimer()
	slices.Sort(lat)
	pct := func(q float64) float64 { return float64(lat[int(q*float64(len(lat)-1))].Nanoseconds()) }
	b.ReportMetric(pct(0.50), "p50-ns")
	b.ReportMetric(pct(0.99), "p99-ns")
}
