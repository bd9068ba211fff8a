package app

import (
	"context"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"

	"github.com/loom-ml/loom/libs/errs"
	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// Training metrics (loom.training.v1.MetricsService, docs/metrics.md): the
// project's viewers read any job's series (the authz table); where jobs
// are private (-private-jobs) a caller who may not see the job, CustomJob
// or tuning job gets NotFound, as for the resource itself. Reads go to the
// training service's internal gRPC, which keeps the series.

// metrics is the training service's MetricsService client, or Unavailable.
func (g *Gateway) metrics() (trainingv1.MetricsServiceClient, error) {
	if g.own.Metrics == nil {
		return nil, fmt.Errorf("the gateway has no training service to ask (-training-addr): %w", errs.Unavailable)
	}
	return g.own.Metrics, nil
}

// metricsVisible checks, where jobs are private, that the caller may see
// parent's job, CustomJob or tuning job.
func (g *Gateway) metricsVisible(ctx context.Context, parent string) error {
	if len(parent) > 512 {
		return errs.Invalid("parent", "is %d bytes, over the limit of 512", len(parent))
	}
	if !g.opt.PrivateJobs || callerOf(ctx, parent).Admin {
		return nil
	}
	p := strings.Split(parent, "/")
	var err error
	switch {
	case len(p) == 4 && p[2] == "jobs":
		_, err = g.GetJob(ctx, &loomv1.GetJobRequest{Name: parent})
	case len(p) == 6 && p[4] == "customJobs":
		_, err = g.GetCustomJob(ctx, &trainingv1.GetCustomJobRequest{Name: parent})
	case len(p) == 8 && p[4] == "hyperparameterTuningJobs":
		_, err = g.GetHyperparameterTuningJob(ctx, &trainingv1.GetHyperparameterTuningJobRequest{Name: strings.Join(p[:6], "/")})
	}
	return err
}

// ListMetrics lists a job's, CustomJob's or trial's metric series. What
// does not exist is NotFound (metricsParentExists), not a job without
// metrics.
func (g *Gateway) ListMetrics(ctx context.Context, req *trainingv1.ListMetricsRequest) (*trainingv1.ListMetricsResponse, error) {
	if err := g.metricsVisible(ctx, req.GetParent()); err != nil {
		return nil, err
	}
	m, err := g.metrics()
	if err != nil {
		return nil, err
	}
	out, err := m.ListMetrics(ctx, req)
	if err != nil {
		if exists, xerr := g.metricsParentExists(ctx, req.GetParent(), err); xerr != nil || exists {
			return &trainingv1.ListMetricsResponse{}, xerr
		}
		return nil, fromTraining("metrics of "+req.GetParent(), err)
	}
	return out, nil
}

// ReadMetrics reads one series, downsampled by the training service. A
// metric the job has not reported is NotFound, and so is a parent that
// does not exist, each saying which.
func (g *Gateway) ReadMetrics(ctx context.Context, req *trainingv1.ReadMetricsRequest) (*trainingv1.ReadMetricsResponse, error) {
	if err := g.metricsVisible(ctx, req.GetParent()); err != nil {
		return nil, err
	}
	m, err := g.metrics()
	if err != nil {
		return nil, err
	}
	out, err := m.ReadMetrics(ctx, req)
	if err != nil {
		if exists, xerr := g.metricsParentExists(ctx, req.GetParent(), err); xerr != nil {
			return nil, xerr
		} else if exists {
			return nil, fmt.Errorf("metric %q of %s: %w: it has reported no such metric yet; list its metrics (loom metrics) to see which it has",
				req.GetMetric(), req.GetParent(), errs.NotFound)
		}
		return nil, fromTraining("metric "+req.GetMetric()+" of "+req.GetParent(), err)
	}
	return out, nil
}

// metricsParentExists judges the training service's NotFound (err) for
// parent, which it answers for what it cannot vouch for: a job it does not
// know (only the scheduler knows plain jobs) and that has no series, and a
// CustomJob it has not read the create of yet. It reports true when the
// parent exists all the same (the scheduler knows the job, in its state,
// history or accepted records; the gateway accepted the CustomJob): a job
// without metrics yet. Only this path asks: a job with series never does.
// For anything else, or when the parent does not exist, it is false and
// the service's answer stands (it says what is missing, and where a tuning
// job's or pipeline's metrics are); an error is one asking.
func (g *Gateway) metricsParentExists(ctx context.Context, parent string, err error) (bool, error) {
	if errs.Code(err) != codes.NotFound {
		return false, nil
	}
	var gerr error
	switch p := strings.Split(parent, "/"); {
	case len(p) == 4 && p[2] == "jobs":
		_, gerr = g.GetJob(ctx, &loomv1.GetJobRequest{Name: parent})
	case len(p) == 6 && p[4] == "customJobs":
		_, gerr = g.GetCustomJob(ctx, &trainingv1.GetCustomJobRequest{Name: parent})
	default:
		return false, nil
	}
	switch code := errs.Code(gerr); code {
	case codes.OK:
		return true, nil
	case codes.NotFound, codes.InvalidArgument, codes.PermissionDenied:
		return false, nil
	}
	return false, fmt.Errorf("metrics of %s: ask whether it exists: %w", parent, gerr)
}
