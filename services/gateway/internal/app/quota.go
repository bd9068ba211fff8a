package app

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/loom-ml/loom/libs/auth"
	"github.com/loom-ml/loom/libs/paging"
	"github.com/loom-ml/loom/libs/resname"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/gateway/internal/domain"
)

// QuotaOptions are the gateway's quotas (Options.Quota). The zero value
// takes the domain's defaults.
type QuotaOptions struct {
	// Quotas are the per-project quotas: nodes, GPUs, clusters, pending jobs.
	// A zero Default field takes its domain.DefaultQuota* value; negative is
	// no limit.
	Quotas domain.Quotas
	// MaxSubmitJobs is Slurm's MaxSubmitJobs for a user whose association
	// sets none (default domain.DefaultMaxSubmitJobs; negative: no limit).
	MaxSubmitJobs int64
	// AssociationLimit, when set, returns the MaxSubmitJobs of user's
	// association in project (sacctmgr; 0 when it sets none, so the default
	// applies) and a source naming it for refusals ("association of ana
	// with account a1"). The AccountService wires it.
	AssociationLimit func(ctx context.Context, project, user string) (max int64, source string, err error)
}

func (o QuotaOptions) withDefaults() QuotaOptions {
	def := func(v *int64, d int64) {
		if *v == 0 {
			*v = d
		}
	}
	def(&o.Quotas.Default.Nodes, domain.DefaultQuotaNodes)
	def(&o.Quotas.Default.GPUs, domain.DefaultQuotaGPUs)
	def(&o.Quotas.Default.Clusters, domain.DefaultQuotaClusters)
	def(&o.Quotas.Default.PendingJobs, domain.DefaultQuotaPendingJobs)
	def(&o.MaxSubmitJobs, domain.DefaultMaxSubmitJobs)
	return o
}

// Job counts are read from the scheduler, and trusted for a while so that
// a burst of submissions does not read the project's jobs each time.
const (
	// quotaCountTTL is how long a count near its limit (past half of it)
	// is trusted.
	quotaCountTTL = time.Second
	// quotaCountMaxAge is how long a count far from its limit is trusted:
	// the jobs other gateway instances accepted meanwhile are not in it.
	quotaCountMaxAge = 30 * time.Second
	// quotaVisibleLag is how long after this instance accepted jobs it
	// still adds them to a count read from the scheduler, which may not
	// have consumed their SubmitJob yet (a job may then count twice: the
	// error is on the side of refusing).
	quotaVisibleLag = 2 * time.Second
	// quotaCountEntries bounds the counts kept (projects, project × user).
	quotaCountEntries = 4096
)

// jobCounts holds, per project (pending jobs) and per project × user
// (active jobs), the last count read from the scheduler and the jobs this
// instance accepted since.
type jobCounts struct {
	mu sync.Mutex
	m  map[string]*jobCount
}

type jobCount struct {
	read   int64     // as the scheduler counted them
	at     time.Time // when; zero: never read
	recent []acceptedJobs
}

// acceptedJobs is n jobs this instance accepted (or is about to) at at.
type acceptedJobs struct {
	at time.Time
	n  int64
}

// estimate is the count as of now: what was read plus what this instance
// accepted since (less quotaVisibleLag before the read).
func (c *jobCount) estimate() int64 {
	n := c.read
	for _, a := range c.recent {
		if a.at.After(c.at.Add(-quotaVisibleLag)) {
			n += a.n
		}
	}
	return n
}

// stale reports whether the count must be read again before judging n more
// against limit.
func (c *jobCount) stale(now time.Time, limit, n int64) bool {
	age := now.Sub(c.at)
	switch {
	case c.at.IsZero(), age < 0, age >= quotaCountMaxAge:
		return true
	case age >= quotaCountTTL:
		return 2*(c.estimate()+n) > limit
	}
	return false
}

// reserve judges n more jobs under key against limit with check, reading
// the count with read (which may stop counting at stopAt: the answer is a
// refusal then whatever the rest) when it is stale. On success the n jobs
// are counted in at once, and the returned release takes them out again
// (the submission then failed).
func (jc *jobCounts) reserve(ctx context.Context, key string, now time.Time, limit, n int64,
	read func(ctx context.Context, stopAt int64) (int64, error), check func(count int64) error) (release func(), err error) {
	noop := func() {}
	if limit <= 0 {
		return noop, nil
	}
	jc.mu.Lock()
	c := jc.m[key]
	stale := c == nil || c.stale(now, limit, n)
	jc.mu.Unlock()
	if stale {
		count, err := read(ctx, limit-n+1)
		if err != nil {
			return noop, err
		}
		jc.mu.Lock()
		if jc.m == nil {
			jc.m = map[string]*jobCount{}
		}
		if len(jc.m) >= quotaCountEntries {
			clear(jc.m) // a bound, not an LRU: a cleared count is read again
		}
		if c = jc.m[key]; c == nil {
			c = &jobCount{}
			jc.m[key] = c
		}
		c.read, c.at = count, now
		kept := c.recent[:0]
		for _, a := range c.recent {
			if a.at.After(now.Add(-quotaVisibleLag)) {
				kept = append(kept, a)
			}
		}
		c.recent = kept
		jc.mu.Unlock()
	}
	jc.mu.Lock()
	defer jc.mu.Unlock()
	if c = jc.m[key]; c == nil { // cleared meanwhile: judge on what was read
		c = &jobCount{at: now}
		jc.m[key] = c
	}
	if err := check(c.estimate()); err != nil {
		return noop, err
	}
	a := &acceptedJobs{at: now, n: n}
	c.recent = append(c.recent, *a)
	return func() {
		jc.mu.Lock()
		defer jc.mu.Unlock()
		for i := range c.recent {
			if c.recent[i] == *a {
				c.recent = append(c.recent[:i], c.recent[i+1:]...)
				return
			}
		}
	}, nil
}

// countJobs counts the jobs the scheduler lists for req (every page), and
// stops once it reached stopAt.
func (g *Gateway) countJobs(ctx context.Context, req *loomv1.ListJobsRequest, stopAt int64) (int64, error) {
	var n int64
	err := paging.Each(func(token string) (string, error) {
		req.PageSize, req.PageToken = paging.MaxSize, token
		resp, err := g.own.Jobs.ListJobs(ctx, req)
		n += int64(len(resp.GetJobs()))
		if n >= stopAt {
			return "", err
		}
		return resp.GetNextPageToken(), err
	})
	if err != nil {
		return 0, fmt.Errorf("ask the scheduler for jobs to count against the quota: %w", err)
	}
	return n, nil
}

// reserveJobs checks a submission of n jobs (an array's tasks) by user to
// project against the project's pending-jobs quota and the user's
// MaxSubmitJobs (their association's, else the default), and counts them
// in. The returned release takes them out again, for a submission that
// then failed. Pending jobs are the scheduler's PENDING jobs of the project
// (every cluster); a user's jobs are their active ones (ListJobs
// active_only); both plus what this instance accepted since it read them.
func (g *Gateway) reserveJobs(ctx context.Context, project, user string, n int64) (func(), error) {
	q, src := g.quota.Quotas.For(project)
	parent := resname.Project{ID: project}.String()
	now := g.now()
	releaseProject, err := g.jobCounts.reserve(ctx, "p\x00"+project, now, q.PendingJobs, n,
		func(ctx context.Context, stopAt int64) (int64, error) {
			return g.countJobs(ctx, &loomv1.ListJobsRequest{Parent: parent, States: []loomv1.JobState{loomv1.JobState_PENDING}}, stopAt)
		},
		func(count int64) error { return domain.CheckPendingQuota(project, q, src, count, n) })
	if err != nil || user == "" {
		return releaseProject, err
	}
	limit := domain.SubmitLimit{Max: g.quota.MaxSubmitJobs, Source: "LOOM_GATEWAY_MAX_SUBMIT_JOBS"}
	if f := g.quota.AssociationLimit; f != nil {
		max, source, err := f(ctx, project, user)
		if err != nil {
			releaseProject()
			return func() {}, fmt.Errorf("association of %s in %s: %w", user, project, err)
		}
		if max > 0 {
			limit = domain.SubmitLimit{Max: max, Source: source}
		}
	}
	releaseUser, err := g.jobCounts.reserve(ctx, "u\x00"+project+"\x00"+user, now, limit.Max, n,
		func(ctx context.Context, stopAt int64) (int64, error) {
			return g.countJobs(ctx, &loomv1.ListJobsRequest{Parent: parent, Users: []string{user}, ActiveOnly: true}, stopAt)
		},
		func(count int64) error { return domain.CheckSubmitLimit(project, user, limit, count, n) })
	if err != nil {
		releaseProject()
		return func() {}, err
	}
	return func() { releaseUser(); releaseProject() }, nil
}

// submitter is who a submission counts against: the authenticated
// principal's user, else the job's user as the request names it.
func submitter(ctx context.Context, j *loomv1.Job) string {
	if p, ok := auth.FromContext(ctx); ok && p.User != "" {
		return p.User
	}
	return j.GetUser()
}

// checkClusterQuota refuses a cluster change that would take the project
// past its quota of clusters, nodes or GPUs: next is the cluster as it
// would be (new, or merged by an update), counted with every other cluster
// of its project the provisioner lists (DELETED ones excepted; a cluster
// being deleted still holds its nodes). A create accepted but not yet
// applied by the provisioner is not counted (see the README's limits).
func (g *Gateway) checkClusterQuota(ctx context.Context, next *loomv1.Cluster) error {
	name, err := resname.ParseCluster(next.GetName())
	if err != nil {
		return nil // the request's validation reported it
	}
	q, src := g.quota.Quotas.For(name.Project)
	if q.Nodes <= 0 && q.GPUs <= 0 && q.Clusters <= 0 {
		return nil
	}
	parent := name.Parent().String()
	var others domain.Usage
	err = paging.Each(func(token string) (string, error) {
		resp, err := g.own.Clusters.ListClusters(ctx, &loomv1.ListClustersRequest{Parent: parent,
			PageSize: paging.MaxSize, PageToken: token})
		for _, c := range resp.GetClusters() {
			if c.GetName() == next.GetName() || !strings.HasPrefix(c.GetName(), parent+"/") ||
				c.GetStatus().GetState() == loomv1.Cluster_DELETED {
				continue
			}
			others = others.Add(domain.ClusterUsage(c))
		}
		return resp.GetNextPageToken(), err
	})
	if err != nil {
		return fmt.Errorf("ask the provisioner for the clusters of %s to count against the quota: %w", parent, err)
	}
	return domain.CheckClusterQuota(name.Project, name.ID, q, src, others, domain.ClusterUsage(next))
}
