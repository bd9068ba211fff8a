package app

import (
	"context"
	"fmt"

	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/resname"
	"github.com/loom-ml/loom/libs/slurmspec"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/gateway/internal/authz"
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

// maxDependencyWalk bounds the jobs checkDependencyCycle reads: a chain
// longer than it is let through (the scheduler leaves such a job pending,
// reason Dependency, until someone breaks the chain).
const maxDependencyWalk = 100

// checkDependencyCycle refuses an update of j's dependency to spec that
// would have j wait for itself, as slurmctld refuses it ("Job dependency
// problem"): on j (or, for a task, its array) directly, or through the
// dependencies of the jobs spec names, read from the scheduler, at most
// maxDependencyWalk of them. Ended jobs end a chain.
func (g *Gateway) checkDependencyCycle(ctx context.Context, j *loomv1.Job, spec string) error {
	if spec == "" {
		return nil
	}
	project, _ := authz.ProjectOf(j.GetName())
	self := map[string]bool{j.GetJobId(): true}
	if a := j.GetArrayJobId(); a != "" {
		self[a] = true
	}
	if j.GetArray() != "" {
		self[j.GetJobId()] = true
	}
	seen := map[string]bool{}
	type hop struct{ id, via string }
	var queue []hop
	push := func(spec, via string) {
		d, err := slurmspec.ParseDependency(spec)
		if err != nil {
			return // checked before, or another job's as the scheduler took it
		}
		for _, it := range d.Items {
			for _, dj := range it.Jobs {
				if !seen[dj.JobID] {
					seen[dj.JobID] = true
					queue = append(queue, hop{dj.JobID, via})
				}
			}
		}
	}
	push(spec, "")
	for n := 0; len(queue) > 0 && n < maxDependencyWalk; n++ {
		h := queue[0]
		queue = queue[1:]
		if self[h.id] {
			if h.via == "" {
				return errs.Invalid("dependency", "job %s cannot wait for itself (Slurm: %s)", j.GetJobId(), domain.MsgDependency)
			}
			return errs.Invalid("dependency", "job %s would wait for itself: job %s already waits for it (Slurm: %s)", j.GetJobId(), h.via, domain.MsgDependency)
		}
		dep, err := g.own.Jobs.GetJob(ctx, &loomv1.GetJobRequest{Name: resname.Job{Project: project, ID: h.id}.String()})
		if err != nil {
			if isNotFound(err) {
				continue // pruned: ended, so it waits for nothing
			}
			return fmt.Errorf("check the dependencies of job %s: %w", h.id, err)
		}
		if !dep.GetState().Terminal() && dep.GetDependency() != "" {
			via := h.via
			if via == "" {
				via = h.id
			}
			push(dep.GetDependency(), via)
		}
	}
	return nil
}
