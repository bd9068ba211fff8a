package app

import (
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/loom-ml/loom/libs/telemetry"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/scheduler/internal/domain"
	"github.com/loom-ml/loom/services/scheduler/internal/domain/views"
)

// MetricsInterval is how often the scheduler's gauges are computed at most:
// counting jobs by state walks every job record, so it is done once per
// interval whatever the scrape rate.
const MetricsInterval = 5 * time.Second

// reasons are the state_reason values loom_scheduler_jobs labels by name:
// the domain's fixed set. Any other (an agent's own words on a failed run)
// is "other", and no reason is "none", so the label's values stay bounded.
var reasons = map[string]bool{}

func init() {
	for _, r := range []string{domain.ReasonPriority, domain.ReasonResources, domain.ReasonReqNodeNotAvail,
		domain.ReasonDependency, domain.ReasonDependencyNeverSatisfied, domain.ReasonHeldUser, domain.ReasonHeldAdmin,
		domain.ReasonPartitionTimeLimit, domain.ReasonPartitionConfig, domain.ReasonPartitionNodeLimit,
		domain.ReasonPartitionDown, domain.ReasonPartitionInactive,
		domain.ReasonBadConstraints, domain.ReasonBeginTime, domain.ReasonQOSMaxGRESPerUser,
		domain.ReasonJobArrayTaskLimit, domain.ReasonClusterDeleted, domain.ReasonRequeued, domain.ReasonTimeLimit,
		domain.ReasonNonZeroExitCode, domain.ReasonAssocMaxJobsLimit,
		domain.ReasonAssocGrpCpuLimit, domain.ReasonAssocGrpMemLimit, domain.ReasonAssocGrpNodeLimit, domain.ReasonAssocGrpGRES,
		domain.ReasonAssocMaxCpuPerJobLimit, domain.ReasonAssocMaxMemPerJob, domain.ReasonAssocMaxNodePerJobLimit,
		domain.ReasonAssocMaxGRESPerJob, domain.ReasonAssocMaxWallDurationPerJobLimit} {
		reasons[r] = true
	}
}

// reasonLabel is r's label value.
func reasonLabel(r string) string {
	switch {
	case r == "":
		return "none"
	case reasons[r]:
		return r
	}
	return "other"
}

// stateLabel is a job state's label value: its name in lower case
// ("pending", "running").
func stateLabel(s loomv1.JobState) string { return strings.ToLower(s.String()) }

// metrics are the scheduler's own metrics besides the gauges.
type metrics struct {
	pass    prometheus.Histogram
	updates *prometheus.CounterVec
}

// RegisterMetrics registers the scheduler's domain row on reg:
//
//   - loom_scheduler_jobs{state,reason}: jobs held (pending, running, and
//     ended ones not yet pruned) by state and state_reason;
//   - loom_scheduler_queue_depth: pending jobs, all clusters;
//   - loom_scheduler_gpus{state="allocated|idle"}: GPUs of compute nodes;
//   - loom_scheduler_pass_seconds: time to compute one change (the event's
//     or the tick's effect with its scheduling pass), without the store write;
//   - loom_scheduler_memory_updates_total{how="log|reload"}: how memory was
//     brought up to date with the store (a follower's refresh, a leader's
//     start): the change log's writes applied, or every record read afresh.
//
// The gauges are computed from memory at most every MetricsInterval.
func (a *App) RegisterMetrics(reg prometheus.Registerer) error {
	m := &metrics{pass: prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "loom_scheduler_pass_seconds",
		Help:    "Time to compute one change of the scheduler's state: an event's or a tick's effect with its scheduling pass.",
		Buckets: telemetry.LatencyBuckets,
	}), updates: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "loom_scheduler_memory_updates_total",
		Help: "How the scheduler's memory was brought up to date with the store: the change log's writes applied (log), or every record read afresh (reload).",
	}, []string{"how"})}
	gauges := telemetry.NewGaugeSet(MetricsInterval, []telemetry.Gauge{
		{Name: "loom_scheduler_jobs", Help: "Jobs the scheduler holds, by state (lower case) and state_reason (reasons outside the scheduler's fixed set are \"other\").", Labels: []string{"state", "reason"}},
		{Name: "loom_scheduler_queue_depth", Help: "Jobs pending in the queues of all clusters."},
		{Name: "loom_scheduler_gpus", Help: "GPUs of compute nodes, allocated to runs or idle.", Labels: []string{"state"}},
	}, a.computeGauges)
	for _, c := range []prometheus.Collector{m.pass, m.updates, gauges} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	a.work.Lock()
	a.metrics = m
	a.work.Unlock()
	return nil
}

// computeGauges emits the gauges from memory, under the readers' lock.
func (a *App) computeGauges(emit telemetry.Emit) {
	type key struct{ state, reason string }
	counts := map[key]int{}
	var depth int
	var alloc, total int32
	a.mu.RLock()
	a.state.EachJob(func(j *loomv1.Job) {
		counts[key{stateLabel(j.GetState()), reasonLabel(j.GetStateReason())}]++
	})
	for _, c := range a.state.Clusters() {
		depth += a.state.PendingCount(c)
		for _, n := range views.SlurmNodes(a.state, c) {
			total += n.GetGpus()
			alloc += n.GetAllocGpus()
		}
	}
	a.mu.RUnlock()
	// Every state appears, at 0 when no job is in it, so that a panel of
	// running jobs is not empty on an idle scheduler.
	for v := range loomv1.JobState_name {
		s := loomv1.JobState(v)
		if s == loomv1.JobState_JOB_STATE_UNSPECIFIED {
			continue
		}
		counts[key{stateLabel(s), "none"}] += 0
	}
	for k, n := range counts {
		emit("loom_scheduler_jobs", float64(n), k.state, k.reason)
	}
	emit("loom_scheduler_queue_depth", float64(depth))
	emit("loom_scheduler_gpus", float64(alloc), "allocated")
	emit("loom_scheduler_gpus", float64(max(total-alloc, 0)), "idle")
}

// observePass records one change computed since start (a no-op before
// RegisterMetrics). Callers hold work.
func (a *App) observePass(start time.Time) {
	if a.metrics != nil {
		a.metrics.pass.Observe(time.Since(start).Seconds())
	}
}

// observeUpdate counts one update of memory (a no-op before
// RegisterMetrics). Callers hold work.
func (a *App) observeUpdate(how string) {
	if a.metrics != nil {
		a.metrics.updates.WithLabelValues(how).Inc()
	}
}
