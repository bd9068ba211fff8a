package ports

import (
	"context"

	"google.golang.org/grpc"

	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
	"github.com/loom-ml/loom/services/gateway/internal/app"
)

// RegisterMetrics registers loom.training.v1.MetricsService of g on s.
func RegisterMetrics(s grpc.ServiceRegistrar, g *app.Gateway) {
	trainingv1.RegisterMetricsServiceServer(s, metrics{g: g})
}

type metrics struct {
	trainingv1.UnimplementedMetricsServiceServer
	g *app.Gateway
}

func (s metrics) ListMetrics(ctx context.Context, r *trainingv1.ListMetricsRequest) (*trainingv1.ListMetricsResponse, error) {
	return unary(s.g.ListMetrics(ctx, r))
}

func (s metrics) ReadMetrics(ctx context.Context, r *trainingv1.ReadMetricsRequest) (*trainingv1.ReadMetricsResponse, error) {
	return unary(s.g.ReadMetrics(ctx, r))
}
