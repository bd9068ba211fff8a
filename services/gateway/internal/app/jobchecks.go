package app

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/paging"
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

// checkDependencyCycle refuses an update of the dependency of j (ref: of
// every task of j's array when ref.array) to spec that would have a job
// wait for itself, as slurmctld refuses it ("Job dependency problem"):
// spec naming one of the jobs updated (a job, an array's task "A_k", or
// the whole array a task is of), directly, or through the dependencies of
// the jobs it names, read (at most maxDependencyWalk of them) from the
// scheduler. Ended jobs end a chain.
func (g *Gateway) checkDependencyCycle(ctx context.Context, ref jobRef, j *loomv1.Job, spec string) error {
	if spec == "" {
		return nil
	}
	project, _ := authz.ProjectOf(j.GetName())
	array := j.GetArrayJobId() // the array j is a task of ("": none)
	if array == "" && j.GetArray() != "" {
		array = j.GetJobId() // an array not split into tasks yet
	}
	// A whole array's tasks have the ids first..first+count-1 (the gateway
	// gave them out together).
	first, _ := strconv.ParseInt(array, 10, 64)
	count := int64(domain.ArrayTaskCount(j.GetArray()))
	// selfIn says whether a dependency on (id, task) names a job updated.
	selfIn := func(dj slurmspec.DepJob) bool {
		switch {
		case dj.Task < 0:
			id, _ := strconv.ParseInt(dj.JobID, 10, 64)
			return dj.JobID == j.GetJobId() || (array != "" && dj.JobID == array) ||
				(ref.array && first > 0 && id >= first && id < first+count)
		default:
			return array != "" && dj.JobID == array && (ref.array || int32(dj.Task) == j.GetArrayTaskId())
		}
	}
	parse := func(spec string) []slurmspec.DepJob {
		d, err := slurmspec.ParseDependency(spec)
		if err != nil {
			return nil // checked before, or another job's as the scheduler took it
		}
		var out []slurmspec.DepJob
		for _, it := range d.Items {
			out = append(out, it.Jobs...)
		}
		return out
	}
	type hop struct {
		dj  slurmspec.DepJob
		via string // the job of spec's that leads here ("": spec names it)
	}
	var queue []hop
	seen := map[string]bool{}
	for _, dj := range parse(spec) {
		if selfIn(dj) {
			return errs.Invalid("dependency", "job %s cannot wait for itself (%s names it; Slurm: %s)", j.GetJobId(), depName(dj), domain.MsgDependency)
		}
		if !seen[depName(dj)] {
			seen[depName(dj)] = true
			queue = append(queue, hop{dj, ""})
		}
	}
	for n := 0; len(queue) > 0 && n < maxDependencyWalk; n++ {
		h := queue[0]
		queue = queue[1:]
		name := resname.Job{Project: project, ID: depName(h.dj)}.String()
		r, err := g.resolveJob(ctx, name, false)
		var dep *loomv1.Job
		if err == nil {
			dep, err = g.job(ctx, r.name)
		}
		if err != nil {
			if errors.Is(err, errs.NotFound) || isNotFound(err) {
				continue // not there (pruned and swept): waits for nothing
			}
			return fmt.Errorf("check the dependencies of job %s: %w", depName(h.dj), err)
		}
		if dep.GetState().Terminal() || dep.GetDependency() == "" {
			continue
		}
		via := h.via
		if via == "" {
			via = depName(h.dj)
		}
		for _, dj := range parse(dep.GetDependency()) {
			if selfIn(dj) {
				return errs.Invalid("dependency", "job %s would wait for itself: job %s already waits for it (Slurm: %s)", j.GetJobId(), via, domain.MsgDependency)
			}
			if !seen[depName(dj)] {
				seen[depName(dj)] = true
				queue = append(queue, hop{dj, via})
			}
		}
	}
	return nil
}

// depName is a dependency's job as written: "12" or "12_3".
func depName(dj slurmspec.DepJob) string {
	if dj.Task < 0 {
		return dj.JobID
	}
	return fmt.Sprintf("%s_%d", dj.JobID, dj.Task)
}

// checkTimeLimit refuses a caller who is not an administrator a raise of
// j's time limit to limit (domain.Caller.CheckTimeLimit), or, for a whole
// array (ref.array), of any of its tasks not ended, each judged against
// its own limit or its partition's MaxTime (the cluster read once, only
// for a job without a limit of its own).
func (g *Gateway) checkTimeLimit(ctx context.Context, caller domain.Caller, ref jobRef, j *loomv1.Job, limit int64) error {
	if limit <= 0 || caller.Admin {
		return nil
	}
	jobs := []*loomv1.Job{j}
	if a := j.GetArrayJobId(); ref.array && a != "" {
		project, _ := authz.ProjectOf(j.GetName())
		err := paging.Each(func(token string) (string, error) {
			resp, err := g.own.Jobs.ListJobs(ctx, &loomv1.ListJobsRequest{Parent: resname.Project{ID: project}.String(), JobIds: []string{a},
				ActiveOnly: true, PageSize: paging.MaxSize, PageToken: token})
			jobs = append(jobs, resp.GetJobs()...)
			return resp.GetNextPageToken(), err
		})
		if err != nil {
			return fmt.Errorf("ask the scheduler for the tasks of array %s: %w", a, err)
		}
	}
	var cluster *loomv1.Cluster
	for _, t := range jobs {
		if t.GetState().Terminal() && len(jobs) > 1 {
			continue // an ended task of the array: its limit no longer matters
		}
		max := int64(0)
		if t.GetTimeLimitSeconds() == 0 {
			if cluster == nil {
				c, err := g.own.Clusters.GetCluster(ctx, &loomv1.GetClusterRequest{Name: t.GetCluster()})
				if err != nil {
					return fmt.Errorf("ask the provisioner for %s: %w", t.GetCluster(), err)
				}
				cluster = c
			}
			max = domain.PartitionMaxSeconds(cluster, t)
		}
		if err := caller.CheckTimeLimit(t, limit, max); err != nil {
			return err
		}
	}
	return nil
}

// checkArraySignal refuses a signal to j, when j is an array or one of its
// tasks, while tasks of the array are still pending
// (domain.PendingArraySignal): an array accepted but not yet split into
// tasks has them all pending; otherwise the scheduler's pending tasks of
// it say.
func (g *Gateway) checkArraySignal(ctx context.Context, j *loomv1.Job) error {
	a := j.GetArrayJobId()
	spec, err := slurmspec.ParseArray(j.GetArray(), slurmspec.MaxArraySizeCeiling)
	limit := 0
	if err == nil {
		limit = spec.Limit
	}
	if a == "" {
		if j.GetArray() == "" || err != nil || j.GetState() != loomv1.JobState_PENDING {
			return nil
		}
		return domain.PendingArraySignal(j.GetJobId(), spec.Indexes(), limit)
	}
	project, _ := authz.ProjectOf(j.GetName())
	var pending []int
	err = paging.Each(func(token string) (string, error) {
		resp, err := g.own.Jobs.ListJobs(ctx, &loomv1.ListJobsRequest{Parent: resname.Project{ID: project}.String(), JobIds: []string{a},
			States: []loomv1.JobState{loomv1.JobState_PENDING}, PageSize: paging.MaxSize, PageToken: token})
		for _, t := range resp.GetJobs() {
			if t.GetArrayJobId() == a && t.GetState() == loomv1.JobState_PENDING {
				pending = append(pending, int(t.GetArrayTaskId()))
			}
		}
		return resp.GetNextPageToken(), err
	})
	if err != nil {
		return fmt.Errorf("ask the scheduler for the pending tasks of array %s: %w", a, err)
	}
	return domain.PendingArraySignal(a, pending, limit)
}
