package training

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/series"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
)

// TestStoreMetricsRedelivered: a record handled twice (a redelivery after a
// crash before the commit) adds its points once, also when it is cut into
// several appends (more metrics than one append takes); NaN and bad names
// are dropped alone.
func TestStoreMetricsRedelivered(t *testing.T) {
	t.Parallel()
	_, rdb := testkit.Redis(t)
	st := series.NewStore(rdb, "training:", series.Limits{BatchMetrics: 3})
	in := newIngest(st, slog.New(slog.NewTextHandler(io.Discard, nil)), time.Now)
	vals := map[string]float64{"bad name!": 1, "nan": math.NaN()}
	for i := 0; i < 7; i++ {
		vals[fmt.Sprintf("m%d", i)] = float64(i)
	}
	ev := envelope.Event{Topic: topics.StepEvents, Partition: 3, Offset: 41, Payload: &eventsv1.MetricsReported{
		Job: "projects/p/jobs/9", Points: []*eventsv1.MetricsReported_Point{{Step: 1, Values: vals}, {Step: 2, Values: vals}}}}
	ctx := context.Background()
	for i := 0; i < 2; i++ {
		if err := in.handle(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	list, err := st.List(ctx, "projects/p/jobs/9")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 7 {
		t.Fatalf("%d series, want m0..m6 (the bad name and NaN dropped)", len(list))
	}
	for _, s := range list {
		if s.Count != 2 {
			t.Errorf("%s has %d points after a redelivery, want 2", s.Metric, s.Count)
		}
	}
	// The next record of the partition is applied.
	ev.Offset = 42
	if err := in.handle(ctx, ev); err != nil {
		t.Fatal(err)
	}
	if list, _ := st.List(ctx, "projects/p/jobs/9"); list[0].Count != 4 {
		t.Errorf("after the next record: %d points, want 4", list[0].Count)
	}
}

// TestStoreMetricsProjectBudget: records of a project's jobs past the
// project's budget keep what fits, and the points dropped are counted by
// the limit they were past (project, or the job's own).
func TestStoreMetricsProjectBudget(t *testing.T) {
	t.Parallel()
	_, rdb := testkit.Redis(t)
	st := series.NewStore(rdb, "training:", series.Limits{ProjectPoints: 5, Points: 3})
	in := newIngest(st, slog.New(slog.NewTextHandler(io.Discard, nil)), time.Now)
	ctx := context.Background()
	record := func(job string, off int64, steps int) {
		t.Helper()
		m := &eventsv1.MetricsReported{Job: job}
		for s := range steps {
			m.Points = append(m.Points, &eventsv1.MetricsReported_Point{Step: int64(s), Values: map[string]float64{"loss": 1}})
		}
		if err := in.handle(ctx, envelope.Event{Topic: topics.StepEvents, Partition: 0, Offset: off, Payload: m}); err != nil {
			t.Fatal(err)
		}
	}
	record("projects/p/jobs/1", 1, 5) // 3 kept (the series' bound), 2 past the job's limits
	record("projects/p/jobs/2", 2, 3) // 2 kept, 1 past the project's budget
	record("projects/q/jobs/1", 3, 3) // another project: all kept
	for job, want := range map[string]int64{"projects/p/jobs/1": 3, "projects/p/jobs/2": 2, "projects/q/jobs/1": 3} {
		if list, err := st.List(ctx, job); err != nil || len(list) != 1 || list[0].Count != want {
			t.Errorf("%s: %+v %v, want %d points", job, list, err, want)
		}
	}
	for limit, want := range map[string]float64{droppedJob: 2, droppedProject: 1} {
		if got := testutil.ToFloat64(in.dropped.WithLabelValues(limit)); got != want {
			t.Errorf("points_dropped_total{limit=%q} = %v, want %v", limit, got, want)
		}
	}
}
