package gateway

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/loom-ml/loom/libs/testkit"
	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// fakeMetrics is the training service's MetricsService in the harness: one
// series, "loss", under any parent of project default.
type fakeMetrics struct {
	trainingv1.UnimplementedMetricsServiceServer
}

// unvouched are the parents the fake answers NotFound for, as the training
// service answers a job it does not know that has no series, and a
// CustomJob it does not hold: the gateway judges them.
var unvouched = map[string]bool{"projects/default/jobs/90": true, "projects/default/jobs/99999": true, location + "/customJobs/91": true}

func (fakeMetrics) ListMetrics(_ context.Context, r *trainingv1.ListMetricsRequest) (*trainingv1.ListMetricsResponse, error) {
	if unvouched[r.GetParent()] {
		return nil, status.Errorf(codes.NotFound, "%s: not found: none is known", r.GetParent())
	}
	return &trainingv1.ListMetricsResponse{Series: []*trainingv1.Series{{Metric: "loss", Count: 2, First: 1, Last: 0.5, Min: 0.5, Max: 1}}}, nil
}

func (fakeMetrics) ReadMetrics(_ context.Context, r *trainingv1.ReadMetricsRequest) (*trainingv1.ReadMetricsResponse, error) {
	if unvouched[r.GetParent()] {
		return nil, status.Errorf(codes.NotFound, "%s: not found: none is known", r.GetParent())
	}
	if r.GetMetric() != "loss" {
		return nil, status.Errorf(codes.NotFound, "metric %q", r.GetMetric())
	}
	return &trainingv1.ReadMetricsResponse{Metric: "loss", Total: 2, Points: []*trainingv1.Point{{Step: 1, Value: 1}, {Step: 2, Value: 0.5}}}, nil
}

// metricsMatrixRows are the matrix's rows of MetricsService: the project's
// viewers read every job's series, under the job's name (REST on the
// snake_case mux) and under a CustomJob's (the camelCase mux).
func metricsMatrixRows() []matrixRow {
	mc := func(c *grpc.ClientConn) trainingv1.MetricsServiceClient { return trainingv1.NewMetricsServiceClient(c) }
	return []matrixRow{
		{"ListMetrics", func(ctx context.Context, c *grpc.ClientConn, _ int) error {
			_, err := mc(c).ListMetrics(ctx, &trainingv1.ListMetricsRequest{Parent: matrixJob})
			return err
		}, func(int) (string, string, string) { return "GET", "/v1/" + matrixJob + "/metrics", "" }, viewerRow},
		{"ReadMetrics", func(ctx context.Context, c *grpc.ClientConn, _ int) error {
			_, err := mc(c).ReadMetrics(ctx, &trainingv1.ReadMetricsRequest{Parent: location + "/customJobs/40", Metric: "loss"})
			return err
		}, func(int) (string, string, string) {
			return "GET", "/v1/" + location + "/customJobs/40/metrics:read?metric=loss&points=10&from=1", ""
		}, viewerRow},
	}
}

// TestMetricsOfWhatDoesNotExist (a tester found `loom metrics 99999`
// answered as a job without metrics): what the training service cannot
// vouch for is asked of the scheduler (or the accepted CustomJobs): a job
// it knows without series is an empty list, a metric it has not reported
// NotFound; a job or CustomJob that does not exist is NotFound, over gRPC
// and REST.
func TestMetricsOfWhatDoesNotExist(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := testkit.Context(t, wait)
	h.w.setJob(&loomv1.Job{Name: "projects/default/jobs/90", User: "ana", State: loomv1.JobState_PENDING})
	mc := trainingv1.NewMetricsServiceClient(h.as(t, "ana"))
	if r, err := mc.ListMetrics(ctx, &trainingv1.ListMetricsRequest{Parent: "projects/default/jobs/90"}); err != nil || len(r.GetSeries()) != 0 {
		t.Errorf("a pending job without metrics: %v, %v; want no series", r, err)
	}
	if _, err := mc.ReadMetrics(ctx, &trainingv1.ReadMetricsRequest{Parent: "projects/default/jobs/90", Metric: "loss"}); status.Code(err) != codes.NotFound ||
		!strings.Contains(err.Error(), `metric "loss" of projects/default/jobs/90: not found: it has reported no such metric yet`) {
		t.Errorf("a metric of a job without metrics: %v", err)
	}
	for _, parent := range []string{"projects/default/jobs/99999", location + "/customJobs/91"} {
		if _, err := mc.ListMetrics(ctx, &trainingv1.ListMetricsRequest{Parent: parent}); status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), "none is known") {
			t.Errorf("list %s: %v, want NotFound", parent, err)
		}
		if _, err := mc.ReadMetrics(ctx, &trainingv1.ReadMetricsRequest{Parent: parent, Metric: "loss"}); status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), "none is known") {
			t.Errorf("read %s: %v, want NotFound", parent, err)
		}
	}
	if code, body := restCall(ctx, t, h.restAs("ana"), h.restBase, "GET", "/v1/projects/default/jobs/99999/metrics", ""); code != http.StatusNotFound {
		t.Errorf("REST metrics of job 99999: %d %s", code, body)
	}
	if code, body := restCall(ctx, t, h.restAs("ana"), h.restBase, "GET", "/v1/projects/default/jobs/90/metrics", ""); code != http.StatusOK {
		t.Errorf("REST metrics of pending job 90: %d %s", code, body)
	}
	// What has series is answered by the training service alone.
	if r, err := mc.ListMetrics(ctx, &trainingv1.ListMetricsRequest{Parent: "projects/default/jobs/41"}); err != nil || len(r.GetSeries()) != 1 {
		t.Errorf("a job with series: %v, %v", r, err)
	}
}
