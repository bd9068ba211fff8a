package training

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/series"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// TestMetricsRetention: through the metrics consumer's handler, a job that
// ended longer than the retention ago loses its series at the sweep's tick;
// one that ended recently, one still running and one requeued after an
// end keep theirs.
func TestMetricsRetention(t *testing.T) {
	t.Parallel()
	_, rdb := testkit.Redis(t)
	st := series.NewStore(rdb, "training:", series.Limits{})
	now := time.Unix(1800000000, 0)
	in := newIngest(st, slog.New(slog.NewTextHandler(io.Discard, nil)), func() time.Time { return now })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ret := 24 * time.Hour
	jobs := map[string]string{"old": "projects/p/jobs/1", "recent": "projects/p/jobs/2",
		"running": "projects/p/jobs/3", "requeued": "projects/p/jobs/4"}
	for _, j := range jobs {
		ev := envelope.Event{Topic: topics.StepEvents, Offset: 1, Payload: &eventsv1.MetricsReported{Job: j,
			Points: []*eventsv1.MetricsReported_Point{{Step: 1, Values: map[string]float64{"loss": 1}}}}}
		if err := in.handle(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	changed := func(job string, s loomv1.JobState, end time.Time) {
		t.Helper()
		j := &loomv1.Job{Name: job, State: s}
		if !end.IsZero() {
			j.EndTime = timestamppb.New(end)
		}
		ev := envelope.Event{Topic: topics.JobEvents, Time: now, Payload: &eventsv1.JobChanged{Job: j}}
		if err := in.handle(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	changed(jobs["old"], loomv1.JobState_COMPLETED, now.Add(-ret-time.Minute))
	changed(jobs["recent"], loomv1.JobState_FAILED, now.Add(-ret+time.Minute))
	changed(jobs["running"], loomv1.JobState_RUNNING, time.Time{})
	changed(jobs["requeued"], loomv1.JobState_NODE_FAIL, now.Add(-2*ret))
	changed(jobs["requeued"], loomv1.JobState_PENDING, time.Time{})
	changed("not a job", loomv1.JobState_COMPLETED, now.Add(-2*ret)) // passed over

	tick := make(chan time.Time)
	done := make(chan error, 1)
	go func() { done <- in.sweepMetrics(ctx, tick, ret) }()
	tick <- now
	has := func(job string) bool {
		l, err := st.List(context.Background(), job)
		if err != nil {
			t.Fatal(err)
		}
		return len(l) > 0
	}
	testkit.WaitFor(t, 10*time.Second, "the old job's series deleted", func() (bool, error) { return !has(jobs["old"]), nil })
	for _, k := range []string{"recent", "running", "requeued"} {
		if !has(jobs[k]) {
			t.Errorf("the %s job lost its series", k)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("sweep loop: %v", err)
	}
}

// TestMetricsRetentionSetting: a retention outside 1h..10y (but 0) stops
// the service at start-up with InvalidArgument naming the setting.
func TestMetricsRetentionSetting(t *testing.T) {
	t.Parallel()
	for _, arg := range []string{"-metrics-retention=30m", "-metrics-retention=-1h", "-metrics-retention=100000h"} {
		err := RunArgs(context.Background(), []string{arg})
		if errs.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "metrics-retention") {
			t.Errorf("%s: %v, want InvalidArgument naming metrics-retention", arg, err)
		}
	}
	for _, d := range []time.Duration{0, time.Hour, series.DefaultRetention, series.MaxRetention} {
		if err := checkRetention(d); err != nil {
			t.Errorf("%v: %v, want accepted", d, err)
		}
	}
}
