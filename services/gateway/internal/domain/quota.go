package domain

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/loom-ml/loom/libs/errs"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// Quota defaults (the gateway's -quota-* flags). They are generous: far
// above the demo, the tests and the benchmarks (slurmbench submits up to
// 100,000 jobs, slurm.conf's MaxJobCount), so that only a site that sets its
// own quotas meets them.
const (
	// DefaultQuotaNodes bounds a project's nodes: node_count plus
	// max_dynamic_node_count over every pool of its clusters (five clusters
	// of clusterspec.MaxClusterNodes).
	DefaultQuotaNodes = 100000
	// DefaultQuotaGPUs bounds a project's GPUs: each pool's nodes (as
	// counted for DefaultQuotaNodes) times its accelerator_count.
	DefaultQuotaGPUs = 800000
	// DefaultQuotaClusters bounds a project's clusters.
	DefaultQuotaClusters = 100
	// DefaultQuotaPendingJobs bounds a project's PENDING jobs (an array
	// counts one per task): slurm.conf's MaxJobCount.
	DefaultQuotaPendingJobs = 100000
	// DefaultQuotaTraining bounds a project's training resources in flight
	// (CustomJobs, tuning jobs and pipelines created through the gateway
	// that have not ended; a tuning job's trials and a pipeline's job are
	// their parent's, not counted apart).
	DefaultQuotaTraining = 1000
	// DefaultMaxSubmitJobs is Slurm's MaxSubmitJobs for a user without an
	// association limit: jobs pending or running at once, per project.
	DefaultMaxSubmitJobs = 100000
)

// Quota is one project's limits. Zero or negative is no limit.
type Quota struct {
	Nodes, GPUs, Clusters, PendingJobs int64
	// Training is the training resources in flight (DefaultQuotaTraining).
	Training int64
}

// Quotas are the defaults and the per-project overrides (-project-quotas).
type Quotas struct {
	Default  Quota
	Projects map[string]Quota
}

// Quota source names, as refusals cite them: the variable (and flag) the
// value came from.
const (
	quotaSourceProject = "LOOM_GATEWAY_PROJECT_QUOTAS"
)

// quotaKinds are the keys of a -project-quotas entry, with the variable of
// their default.
var quotaKinds = []struct {
	key, env string
	field    func(*Quota) *int64
}{
	{"nodes", "LOOM_GATEWAY_QUOTA_NODES", func(q *Quota) *int64 { return &q.Nodes }},
	{"gpus", "LOOM_GATEWAY_QUOTA_GPUS", func(q *Quota) *int64 { return &q.GPUs }},
	{"clusters", "LOOM_GATEWAY_QUOTA_CLUSTERS", func(q *Quota) *int64 { return &q.Clusters }},
	{"pending_jobs", "LOOM_GATEWAY_QUOTA_PENDING_JOBS", func(q *Quota) *int64 { return &q.PendingJobs }},
	{"training", "LOOM_GATEWAY_QUOTA_TRAINING", func(q *Quota) *int64 { return &q.Training }},
}

// For returns project's quota and, per kind ("nodes", "gpus", "clusters",
// "pending_jobs", "training"), where its value came from (the variable to change).
func (q Quotas) For(project string) (Quota, map[string]string) {
	out := q.Default
	src := map[string]string{}
	for _, k := range quotaKinds {
		src[k.key] = k.env
	}
	if o, ok := q.Projects[project]; ok {
		for _, k := range quotaKinds {
			if v := *k.field(&o); v != 0 {
				*k.field(&out) = v
				src[k.key] = quotaSourceProject
			}
		}
	}
	return out, src
}

// ParseProjectQuotas reads -project-quotas: "p1=nodes:16,gpus:64;p2=clusters:2",
// projects separated by ';', each with the kinds it overrides (nodes, gpus,
// clusters, pending_jobs, training; the others keep the defaults). A value of -1 is
// no limit for that project. "" is no overrides.
func ParseProjectQuotas(s string) (map[string]Quota, error) {
	out := map[string]Quota{}
	for _, entry := range strings.Split(s, ";") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		project, kinds, ok := strings.Cut(entry, "=")
		project = strings.TrimSpace(project)
		if !ok || project == "" {
			return nil, fmt.Errorf("project quotas: %q: want project=kind:N,kind:N", entry)
		}
		if _, dup := out[project]; dup {
			return nil, fmt.Errorf("project quotas: project %s given twice", project)
		}
		var q Quota
		for _, kv := range strings.Split(kinds, ",") {
			key, val, ok := strings.Cut(strings.TrimSpace(kv), ":")
			n, err := strconv.ParseInt(strings.TrimSpace(val), 10, 64)
			if !ok || err != nil || n < -1 || n == 0 {
				return nil, fmt.Errorf("project quotas: %s: %q: want kind:N with N ≥ 1 (or -1: no limit)", project, kv)
			}
			found := false
			for _, k := range quotaKinds {
				if k.key == strings.TrimSpace(key) {
					*k.field(&q) = n
					found = true
				}
			}
			if !found {
				return nil, fmt.Errorf("project quotas: %s: unknown kind %q (want nodes, gpus, clusters, pending_jobs or training)", project, key)
			}
		}
		out[project] = q
	}
	return out, nil
}

// Usage is what a project's clusters hold, as the quota counts it.
type Usage struct {
	Nodes, GPUs, Clusters int64
}

// ClusterUsage is what one cluster counts against its project's quota:
// each pool's node_count plus max_dynamic_node_count (what the provisioner
// claims capacity for), and those nodes times the pool's accelerator_count.
func ClusterUsage(c *loomv1.Cluster) Usage {
	u := Usage{Clusters: 1}
	for _, p := range c.GetCompute().GetNodePools() {
		n := int64(max(p.GetNodeCount(), 0)) + int64(max(p.GetMaxDynamicNodeCount(), 0))
		u.Nodes += n
		u.GPUs += n * int64(max(p.GetAcceleratorCount(), 0))
	}
	return u
}

// Add returns u plus o.
func (u Usage) Add(o Usage) Usage {
	return Usage{Nodes: u.Nodes + o.Nodes, GPUs: u.GPUs + o.GPUs, Clusters: u.Clusters + o.Clusters}
}

// CheckClusterQuota refuses (errs.ResourceExhausted) a project whose
// clusters would hold more than its quota once next is in place: others is
// what the project's other clusters hold, next what the new or updated
// cluster would. The message names the project, what it would hold, the
// quota and the variable that sets it, and what each part counts:
// "project p1: 17 nodes would exceed the quota of 16 nodes
// (LOOM_GATEWAY_QUOTA_NODES): 12 in its other clusters, 5 in c2".
func CheckClusterQuota(project, cluster string, q Quota, src map[string]string, others, next Usage) error {
	total := others.Add(next)
	var over []string
	check := func(kind, what string, limit, have, asked int64) {
		if limit > 0 && have > limit {
			over = append(over, fmt.Sprintf("%d %s would exceed the quota of %d %s (%s): %d in its other clusters, %d in %s",
				have, what, limit, what, src[kind], have-asked, asked, cluster))
		}
	}
	check("clusters", "clusters", q.Clusters, total.Clusters, next.Clusters)
	check("nodes", "nodes", q.Nodes, total.Nodes, next.Nodes)
	check("gpus", "GPUs", q.GPUs, total.GPUs, next.GPUs)
	if len(over) == 0 {
		return nil
	}
	return fmt.Errorf("project %s: %s: %w", project, strings.Join(over, "; "), errs.ResourceExhausted)
}

// CheckPendingQuota refuses (errs.ResourceExhausted) a submission of n jobs
// (an array's tasks) to a project that has pending PENDING jobs already.
func CheckPendingQuota(project string, q Quota, src map[string]string, pending, n int64) error {
	if q.PendingJobs <= 0 || pending+n <= q.PendingJobs {
		return nil
	}
	return fmt.Errorf("project %s: %d pending jobs would exceed the quota of %d pending jobs (%s): %d pending, %d submitted: %w",
		project, pending+n, q.PendingJobs, src["pending_jobs"], pending, n, errs.ResourceExhausted)
}

// SubmitLimit is a user's MaxSubmitJobs in a project and where it comes
// from ("LOOM_GATEWAY_MAX_SUBMIT_JOBS", or an association "account a1").
// Max ≤ 0 is no limit.
type SubmitLimit struct {
	Max    int64
	Source string
}

// CheckSubmitLimit refuses (errs.ResourceExhausted) a submission of n jobs
// by user, who has active jobs pending or running in project, past their
// MaxSubmitJobs, in Slurm's spirit ("MaxSubmitJobs" names the limit).
func CheckSubmitLimit(project, user string, l SubmitLimit, active, n int64) error {
	if l.Max <= 0 || active+n <= l.Max {
		return nil
	}
	return fmt.Errorf("user %s in project %s: %d jobs would exceed MaxSubmitJobs of %d (%s): %d pending or running, %d submitted: %w",
		user, project, active+n, l.Max, l.Source, active, n, errs.ResourceExhausted)
}

// FormatProjectQuotas is ParseProjectQuotas' inverse, in project order (for
// logs and docs).
func FormatProjectQuotas(m map[string]Quota) string {
	projects := make([]string, 0, len(m))
	for p := range m {
		projects = append(projects, p)
	}
	sort.Strings(projects)
	var parts []string
	for _, p := range projects {
		q := m[p]
		var kv []string
		for _, k := range quotaKinds {
			if v := *k.field(&q); v != 0 {
				kv = append(kv, fmt.Sprintf("%s:%d", k.key, v))
			}
		}
		parts = append(parts, p+"="+strings.Join(kv, ","))
	}
	return strings.Join(parts, ";")
}

// TrainingUsage is what a project's training resources in flight hold, as
// the quota counts them: how many (top-level: a tuning job's trials and a
// pipeline's job are their parent's) and the GPUs their own clusters ask
// for (TrainingGPUs). Accepted counts those the gateway accepted that the
// training service has not read yet (in InFlight and GPUs already).
type TrainingUsage struct {
	InFlight, GPUs, Accepted int64
}

// CheckTrainingQuota refuses (errs.ResourceExhausted) a training create of
// name asking for gpus GPUs (TrainingGPUs) in a project whose training
// resources in flight (usage) and clusters' GPUs (clusterGPUs: every
// cluster but the training resources' own) are at its quota: the
// in-flight count past q.Training, or the GPUs past q.GPUs. The message
// names the project, the quota, its variable and each part of the count.
func CheckTrainingQuota(project, name string, q Quota, src map[string]string, usage TrainingUsage, clusterGPUs, gpus int64) error {
	var over []string
	if q.Training > 0 && usage.InFlight+1 > q.Training {
		over = append(over, fmt.Sprintf("%d training resources in flight would exceed the quota of %d (%s): %d in flight (%d accepted, not yet started), 1 more asked; wait for one to end or cancel one",
			usage.InFlight+1, q.Training, src["training"], usage.InFlight, usage.Accepted))
	}
	if total := clusterGPUs + usage.GPUs + gpus; q.GPUs > 0 && gpus > 0 && total > q.GPUs {
		over = append(over, fmt.Sprintf("%d GPUs would exceed the quota of %d GPUs (%s): %d in its clusters, %d in its training resources in flight, %d asked by %s",
			total, q.GPUs, src["gpus"], clusterGPUs, usage.GPUs, gpus, name))
	}
	if len(over) == 0 {
		return nil
	}
	return fmt.Errorf("project %s: %s: %w", project, strings.Join(over, "; "), errs.ResourceExhausted)
}
