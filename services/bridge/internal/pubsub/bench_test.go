package pubsub

import (
	"context"
	"fmt"
	"testing"

	"github.com/loom-ml/loom/services/bridge/internal/cloudevent"
)

// BenchmarkSinkPublish: events published to pstest in batches of 100,
// each Publish waiting for every result (go test -run - -bench SinkPublish
// -benchtime 2000x ./internal/pubsub/).
func BenchmarkSinkPublish(b *testing.B) {
	f := newFake(b)
	f.topic(b, "events", false)
	sink, err := NewSink(testCtx(b), f.client(b), "events")
	if err != nil {
		b.Fatal(err)
	}
	batch := make([]cloudevent.Event, 0, 100)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		batch = append(batch, cloudevent.Event{ID: fmt.Sprint(i), Source: "loom/scheduler", Type: "loom.public.v1.JobStateChanged",
			Extensions: map[string]string{cloudevent.ExtProject: fmt.Sprint("p", i%4)}, Data: []byte(`{"state":"RUNNING"}`)})
		if len(batch) == cap(batch) || i == b.N-1 {
			if err := sink.Publish(testCtx(b), batch...); err != nil {
				b.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkSourceReceive: messages taken from pstest by a Source whose
// handler acknowledges at once; pstest's streaming is the bound (go test
// -run - -bench SourceReceive -benchtime 200x ./internal/pubsub/).
func BenchmarkSourceReceive(b *testing.B) {
	f := newFake(b)
	f.topic(b, "ingress", false)
	src, err := f.client(b).Source(testCtx(b), "ingress", ReceiveOptions{})
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < b.N; i++ {
		f.srv.Publish(topicName("ingress"), []byte("{}"), ceAttrs(fmt.Sprint(i)))
	}
	got := make(chan struct{}, b.N)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	b.ResetTimer()
	go func() {
		done <- src.Run(ctx, func(context.Context, cloudevent.Delivery) error { got <- struct{}{}; return nil })
	}()
	for i := 0; i < b.N; i++ {
		<-got
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	cancel()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}
