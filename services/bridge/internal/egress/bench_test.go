package egress

import (
	"fmt"
	"testing"
	"time"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// BenchmarkMap is the pure mapping of one JobChanged (protojson included).
//
//	go test -run '^$' -bench BenchmarkMap -benchtime 2s ./services/bridge/internal/egress
func BenchmarkMap(b *testing.B) {
	ev := internal(&eventsv1.JobChanged{Attempt: 1, Job: &loomv1.Job{Name: "projects/p/jobs/1", JobId: "1",
		Cluster: "projects/p/clusters/c", State: loomv1.JobState_RUNNING, User: "alice", DisplayName: "train"}}, "01B")
	b.ReportAllocs()
	for b.Loop() {
		if _, ok, err := Map(ev); !ok || err != nil {
			b.Fatal(ok, err)
		}
	}
}

// BenchmarkHandleBatch is the egress's work per consumer batch of MaxBatch
// job state changes (every one a change): map, read the last states from
// Redis, publish to the embedded broker with acks, record the states.
// events/s is what one bridge's egress sustains on this machine.
//
//	go test -run '^$' -bench BenchmarkHandleBatch -benchtime 50x ./services/bridge/internal/egress
func BenchmarkHandleBatch(b *testing.B) {
	broker := testkit.BrokerWith(b, topics.Spec{Name: topics.Public, Partitions: 4})
	_, rdb := testkit.Redis(b)
	routes, err := ParseRoutes([]string{"kafka:" + topics.Public})
	if err != nil {
		b.Fatal(err)
	}
	ctx := testkit.Context(b, 10*time.Minute)
	eg, err := New(ctx, Options{Routes: routes, Openers: map[string]SinkOpener{"kafka": KafkaOpener([]string{broker}, nil)}, Redis: rdb})
	if err != nil {
		b.Fatal(err)
	}
	defer eg.Close()
	n := 0
	batch := func() []envelope.Event {
		evs := make([]envelope.Event, MaxBatch)
		for i := range evs {
			n++
			evs[i] = internal(&eventsv1.JobChanged{Attempt: 1, Job: &loomv1.Job{Name: fmt.Sprintf("projects/p%d/jobs/%d", n%8, n),
				JobId: fmt.Sprint(n), Cluster: "projects/p/clusters/c", State: loomv1.JobState_RUNNING}}, fmt.Sprintf("01B%08d", n))
		}
		return evs
	}
	for b.Loop() {
		b.StopTimer()
		evs := batch()
		b.StartTimer()
		if err := eg.HandleBatch(ctx, evs); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*MaxBatch)/b.Elapsed().Seconds(), "events/s")
}
