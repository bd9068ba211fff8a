package gateway

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
)

// fakeMetrics is the training service's MetricsService in the harness: one
// series, "loss", under any parent of project default.
type fakeMetrics struct {
	trainingv1.UnimplementedMetricsServiceServer
}

func (fakeMetrics) ListMetrics(_ context.Context, r *trainingv1.ListMetricsRequest) (*trainingv1.ListMetricsResponse, error) {
	return &trainingv1.ListMetricsResponse{Series: []*trainingv1.Series{{Metric: "loss", Count: 2, First: 1, Last: 0.5, Min: 0.5, Max: 1}}}, nil
}

func (fakeMetrics) ReadMetrics(_ context.Context, r *trainingv1.ReadMetricsRequest) (*trainingv1.ReadMetricsResponse, error) {
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
