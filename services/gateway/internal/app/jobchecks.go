package app

import (
	"context"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/gateway/internal/domain"
)

// The checks of a submission or an update that need more than the request
// and the cluster: its hosts against the cluster's nodes, its dependencies
// against the job ids issued.

// checkJobNodes checks a job's --nodelist and --exclude against its
// cluster's nodes (domain.CheckJobNodes); a job that names none costs no
// look-up.
func (g *Gateway) checkJobNodes(ctx context.Context, j *loomv1.Job, cluster *loomv1.Cluster) error {
	if len(j.GetNodelist()) == 0 && len(j.GetExclude()) == 0 {
		return nil
	}
	nodes, err := g.clusterNodes(ctx, cluster.GetName())
	if err != nil {
		return err
	}
	return domain.CheckJobNodes(j, cluster, nodes)
}

// checkDependencyJobs refuses a --dependency on a job id never issued
// (domain.CheckDependencyJobs); one without dependencies costs no look-up.
func (g *Gateway) checkDependencyJobs(ctx context.Context, spec, field string) error {
	if spec == "" {
		return nil
	}
	last, err := g.repo.LastJobID(ctx)
	if err != nil {
		return err
	}
	return domain.CheckDependencyJobs(spec, field, last)
}
