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
	// Quotas are the per-project quotas: nodes, GPUs, clusters, pending
	// jobs, training resources in flight.
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
	def(&o.Quotas.Default.Training, domain.DefaultQuotaTraining)
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
	// quotaRecentKeep is how long this instance adds the jobs it accepted
	// to a count when the scheduler does not list them (it has not
	// consumed their SubmitJob yet).
	quotaRecentKeep = 30 * time.Second
	// quotaCountEntries bounds the counts kept (projects, project × user).
	quotaCountEntries = 4096
)

// jobCounts holds, per project (pending jobs) and per project × user
// (active jobs), the last count read from the scheduler and the jobs this
// instance accepted that it did not list then.
type jobCounts struct {
	mu sync.Mutex
	m  map[string]*jobCount
}

type jobCount struct {
	read   int64     // as the scheduler counted them
	at     time.Time // when; zero: never read
	recent []*acceptedJobs
}

// acceptedJobs is n jobs (an array's tasks: ids first … first+n-1) this
// instance accepted, or is accepting (first 0: ids not taken yet), at at.
type acceptedJobs struct {
	at      time.Time
	project string
	first   int64
	n       int64
	// listed is how many of them the scheduler listed at the last read
	// (they are in read already).
	listed int64
}

// estimate is the count as of now: what was read plus what this instance
// accepted that the scheduler did not list.
func (c *jobCount) estimate() int64 {
	n := c.read
	for _, a := range c.recent {
		n += a.n - a.listed
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

// refresh sets the count read now: count jobs, of which the scheduler
// listed the names in listed (all of them unless the count stopped early).
// c's jobs.mu is held.
func (c *jobCount) refresh(now time.Time, count int64, listed map[string]bool) {
	c.read, c.at = count, now
	kept := c.recent[:0]
	for _, a := range c.recent {
		a.listed = 0
		if a.first > 0 {
			for k := range a.n {
				if listed[resname.JobOf(a.project, a.first+k).String()] {
					a.listed++
				}
			}
		}
		if a.listed < a.n && now.Sub(a.at) < quotaRecentKeep {
			kept = append(kept, a)
		}
	}
	clear(c.recent[len(kept):])
	c.recent = kept
}

// jobReservation is a submission counted in before it is stored: commit
// names its job ids once taken, release takes it out again (it failed).
type jobReservation struct {
	jc      *jobCounts
	entries []*acceptedJobs
	// dry judges the jobs without counting them in (a validate_only
	// submission): nothing to commit or release.
	dry bool
}

func (r *jobReservation) commit(first int64) {
	r.jc.mu.Lock()
	defer r.jc.mu.Unlock()
	for _, a := range r.entries {
		a.first = first
	}
}

func (r *jobReservation) release() {
	r.jc.mu.Lock()
	defer r.jc.mu.Unlock()
	for _, a := range r.entries {
		a.n = a.listed // counts nothing more; dropped at the next read
	}
}

// counter reads a count from the scheduler: how many jobs (stopping once
// it reached stopAt: the answer is a refusal whatever the rest) and the
// names of those it listed.
type counter func(ctx context.Context, stopAt int64) (int64, map[string]bool, error)

// reserve judges n more jobs of project under key against limit with
// check, reading the count again when it is stale. On success the n jobs
// are counted in at once, in r.
func (jc *jobCounts) reserve(ctx context.Context, r *jobReservation, key, project string, now time.Time, limit, n int64,
	read counter, check func(count int64) error) error {
	if limit <= 0 {
		return nil
	}
	jc.mu.Lock()
	c := jc.m[key]
	stale := c == nil || c.stale(now, limit, n)
	jc.mu.Unlock()
	var (
		count  int64
		listed map[string]bool
	)
	if stale {
		var err error
		if count, listed, err = read(ctx, limit-n+1); err != nil {
			return err
		}
	}
	jc.mu.Lock()
	defer jc.mu.Unlock()
	if jc.m == nil {
		jc.m = map[string]*jobCount{}
	}
	if c = jc.m[key]; c == nil {
		if len(jc.m) >= quotaCountEntries {
			clear(jc.m) // a bound, not an LRU: a cleared count is read again
		}
		c = &jobCount{}
		jc.m[key] = c
	}
	if stale {
		c.refresh(now, count, listed)
	}
	if err := check(c.estimate()); err != nil {
		return err
	}
	if r.dry {
		return nil
	}
	a := &acceptedJobs{at: now, project: project, n: n}
	c.recent = append(c.recent, a)
	r.entries = append(r.entries, a)
	return nil
}

// countJobs counts the jobs the scheduler lists for req (every page), and
// stops once it reached stopAt; it returns their names.
func (g *Gateway) countJobs(ctx context.Context, req *loomv1.ListJobsRequest, stopAt int64) (int64, map[string]bool, error) {
	names := map[string]bool{}
	err := paging.Each(func(token string) (string, error) {
		req.PageSize, req.PageToken = paging.MaxSize, token
		resp, err := g.own.Jobs.ListJobs(ctx, req)
		for _, j := range resp.GetJobs() {
			names[j.GetName()] = true
		}
		if int64(len(names)) >= stopAt {
			return "", err
		}
		return resp.GetNextPageToken(), err
	})
	if err != nil {
		return 0, nil, fmt.Errorf("ask the scheduler for jobs to count against the quota: %w", err)
	}
	return int64(len(names)), names, nil
}

// reserveJobs checks a submission of n jobs (an array's tasks) by user to
// project against the project's pending-jobs quota and the user's
// MaxSubmitJobs (their association's, else the default), and counts them
// in: the caller commits the reservation with the job ids it took, or
// releases it when the submission failed. Pending jobs are the scheduler's
// PENDING jobs of the project (every cluster); a user's jobs are their
// active ones (ListJobs active_only); both plus the jobs this instance
// accepted that the scheduler did not list yet. dry (validate_only) only
// judges them: nothing is counted in.
func (g *Gateway) reserveJobs(ctx context.Context, project, user string, n int64, dry bool) (*jobReservation, error) {
	r := &jobReservation{jc: &g.jobCounts, dry: dry}
	q, src := g.quota.Quotas.For(project)
	parent := resname.Project{ID: project}.String()
	now := g.now()
	err := g.jobCounts.reserve(ctx, r, "p\x00"+project, project, now, q.PendingJobs, n,
		func(ctx context.Context, stopAt int64) (int64, map[string]bool, error) {
			return g.countJobs(ctx, &loomv1.ListJobsRequest{Parent: parent, States: []loomv1.JobState{loomv1.JobState_PENDING}}, stopAt)
		},
		func(count int64) error { return domain.CheckPendingQuota(project, q, src, count, n) })
	if err != nil || user == "" {
		if err != nil {
			r.release()
		}
		return r, err
	}
	limit := domain.SubmitLimit{Max: g.quota.MaxSubmitJobs, Source: "LOOM_GATEWAY_MAX_SUBMIT_JOBS"}
	if f := g.quota.AssociationLimit; f != nil {
		max, source, err := f(ctx, project, user)
		if err != nil {
			r.release()
			return r, fmt.Errorf("association of %s in %s: %w", user, project, err)
		}
		if max > 0 {
			limit = domain.SubmitLimit{Max: max, Source: source}
		}
	}
	err = g.jobCounts.reserve(ctx, r, "u\x00"+project+"\x00"+user, project, now, limit.Max, n,
		func(ctx context.Context, stopAt int64) (int64, map[string]bool, error) {
			return g.countJobs(ctx, &loomv1.ListJobsRequest{Parent: parent, Users: []string{user}, ActiveOnly: true}, stopAt)
		},
		func(count int64) error { return domain.CheckSubmitLimit(project, user, limit, count, n) })
	if err != nil {
		r.release()
	}
	return r, err
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
