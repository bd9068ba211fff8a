package domain

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/slurmspec"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/scheduler/internal/domain/goodput"
	"github.com/loom-ml/loom/services/scheduler/internal/domain/jobstore"
	"github.com/loom-ml/loom/services/scheduler/internal/domain/views"
)

// Reads: State is the source package views renders the read API from
// (views.JobSource, views.NodeSource): what it hands out is copies, or
// stored resources lent for the call, never its internals.

// ResolveJobName returns the record name a job name refers to: "jobs/A_i"
// is task i of array A ("" when there is none); any other name is itself.
func (s *State) ResolveJobName(name string) string {
	prefix := jobsPrefix(name)
	id := name[len(prefix):]
	a, task, isTask := strings.Cut(id, "_")
	if !isTask {
		return name
	}
	arr := s.arrays[prefix+a]
	n, err := strconv.Atoi(task)
	if arr == nil || err != nil {
		return ""
	}
	for i, idx := range arr.Indexes {
		if int(idx) == n {
			return arr.Tasks[i]
		}
	}
	return ""
}

// EachJob calls fn with every job record's stored resource (see
// views.JobSource): fn must neither change nor keep it.
func (s *State) EachJob(fn func(j *loomv1.Job)) {
	for _, j := range s.jobs {
		fn(j.Job)
	}
}

// JobViewer returns the job records as GetJob serves them as of now (see
// views.JobSource): a copy with the read-time fields, nil when unknown.
func (s *State) JobViewer(now time.Time) func(name string) *loomv1.Job {
	v := newViewer(s, now)
	return func(name string) *loomv1.Job {
		rec := s.jobs[name]
		if rec == nil {
			return nil
		}
		return v.job(rec)
	}
}

// viewer computes read-time fields, one priority context per cluster.
type viewer struct {
	s    *State
	now  time.Time
	prio map[string]*pass
}

func newViewer(s *State, now time.Time) *viewer {
	return &viewer{s: s, now: now, prio: map[string]*pass{}}
}

func (v *viewer) pass(cluster string) *pass {
	if p, ok := v.prio[cluster]; ok {
		return p
	}
	t := newTxn(v.s, v.now)
	c := v.s.clusters[cluster]
	if c == nil {
		c = &Cluster{Name: cluster}
	}
	p := t.newPass(cluster, c)
	p.prio = t.newPrioCtx(cluster, c, p.views, t.pendingEntries(cluster))
	v.prio[cluster] = p
	return p
}

func (v *viewer) job(rec *Job) *loomv1.Job {
	out := proto.Clone(rec.Job).(*loomv1.Job)
	if rec.Pending() {
		p := v.pass(out.GetCluster())
		_, pi := p.cluster.Partition(out.GetPartition())
		a := v.s.attrsOf(rec)
		if slurmspec.IsPartitionList(out.GetPartition()) {
			// Its first queue record's (multipart.go).
			pi = bestRecord(p.parts, p.prio, a, out.GetPartition())
		}
		prio, f := p.prio.priority(a, pi)
		out.Priority, out.PriorityFactors = prio, f.proto()
		if d := rec.why; d != nil && placementReason(out.GetStateReason()) {
			out.Placement = views.Explain(d.Nodes, d.Filtered, d.Note)
		}
		if rec.Avoid != "" {
			// The node it keeps off (requeueUnlaunched) is in no filtered
			// count: a pass that does not start it decides it as without it.
			out.Placement = views.WithAvoided(out.Placement, rec.Avoid)
		}
		if r, ok := v.s.reserved[out.GetCluster()]; ok && r.Job == rec.Name() {
			out.SchedNodes = slices.Clone(r.Nodes)
			if !r.Unbounded {
				out.ExpectedStartTime = timestamppb.New(r.Start)
			}
		}
	} else if pl := rec.placed; pl != nil {
		out.Placement = pl.explain()
	}
	out.Runs = jobRuns(rec, func(key string) *Run { return v.s.runs[key] })
	withDerivedExit(out, rec, func(key string) *Run { return v.s.runs[key] })
	out.ExcludedNodes = slices.Clone(rec.Excluded)
	return out
}

// jobRuns is Job.runs (views.JobRuns): the job's attempts as run finds
// them, oldest first.
func jobRuns(rec *Job, run func(key string) *Run) []*loomv1.JobRun {
	return views.JobRuns(rec.Attempt, rec.Job.GetState(), func(a int32) (views.Run, bool) {
		r := run(RunKey(rec.Name(), a))
		if r == nil {
			return views.Run{}, false
		}
		out := views.Run{Hostnames: r.Hostnames, ExitCode: r.ExitCode, ExitSignal: r.ExitSignal, Reason: r.Reason, Start: r.Start,
			End: r.End, Ended: r.Ended(), Outcome: r.Outcome, DerivedExit: proto.Int32(runDerivedExit(r))}
		// The batch script runs on the run's first node.
		if len(r.Nodes) > 0 && len(r.Hostnames) > 0 {
			if u := r.Steps[r.Nodes[0]].Usage; u != nil {
				out.BatchUsage = u.Proto(0, r.Hostnames[0])
			}
		}
		if len(r.Nodes) > 0 {
			// How the script ended, as its agent said: killed by the
			// cancel or the time limit (15), where the run's own end
			// says CANCELLED or TIMEOUT with code 0.
			st := r.Steps[r.Nodes[0]]
			if !st.Idle && !st.Abandoned && st.ExitSignal != nil &&
				(st.State == eventsv1.StepState_STEP_EXITED || st.State == eventsv1.StepState_STEP_KILLED) {
				out.BatchExitCode, out.BatchExitSignal = st.ExitCode, st.ExitSignal
			}
		}
		return out, true
	})
}

// withDerivedExit gives out, the job rec as shown, its current run's
// DerivedExitCode (Job.derived_exit_code and derived_exit_signal) once it
// started: as the scheduler keeps it over every step that ended
// (runDerivedExit), not only over the steps the run still keeps.
func withDerivedExit(out *loomv1.Job, rec *Job, run func(key string) *Run) {
	if out.GetStartTime() == nil || rec.Attempt == 0 {
		return
	}
	if r := run(RunKey(rec.Name(), rec.Attempt)); r != nil {
		out.DerivedExitCode, out.DerivedExitSignal = views.DerivedExit(runDerivedExit(r))
	}
}

func placementReason(r string) bool {
	switch r {
	case ReasonResources, ReasonPriority, ReasonReqNodeNotAvail, ReasonBadConstraints, ReasonPartitionNodeLimit,
		ReasonRequeued:
		return true
	}
	return false
}

// NodeTable returns the cluster's partitions and nodes as a pass sees them
// now (see views.NodeSource); ok is false for a cluster the state does not
// know.
func (s *State) NodeTable(cluster string) (views.ClusterTable, bool) {
	c := s.clusters[cluster]
	if c == nil && s.byCluster[cluster] == nil {
		return views.ClusterTable{}, false
	}
	if c == nil {
		c = &Cluster{Name: cluster}
	}
	t := newTxn(s, time.Time{})
	p := t.newPass(cluster, c)
	// The views are in clusterNodes' order.
	nodes := t.clusterNodes(cluster)
	features := map[string][]string{}
	for _, ns := range c.NodeSets {
		features[ns.Pool] = append(features[ns.Pool], ns.Features...)
	}
	out := views.ClusterTable{Schedulable: c.Schedulable(), Nodes: make([]views.NodeRow, len(nodes))}
	for _, pt := range c.EffectivePartitions() {
		out.Partitions = append(out.Partitions, views.Partition{Name: pt.Name, Default: pt.Default,
			MaxTime: pt.MaxTime, Tier: pt.Tier, State: pt.State})
	}
	for k, n := range nodes {
		row := views.NodeRow{View: p.views[k], Features: features[n.Pool], Down: n.Lost(), AdminDown: n.AdminDown, Reason: n.Reason,
			AdminReason: n.AdminReason, AdminReasonUser: n.AdminReasonUser, AdminReasonTime: n.AdminReasonTime}
		if row.Down {
			row.DownReason = n.DownReason()
		}
		row.Health = nodeHealthView(n)
		out.Nodes[k] = row
	}
	return out, true
}

// JobGoodput returns the goodput of the job name ("…/jobs/A_i": task i of
// array A) as of now (package goodput): from its runs while the scheduler
// keeps it, then from its compact record (final figures) once retention
// pruned it; nil when it knows neither, or the record predates goodput.
func (s *State) JobGoodput(name string, now time.Time) *loomv1.Goodput {
	name = s.ResolveJobName(name)
	if j := s.jobs[name]; j != nil {
		return goodput.Job(j.Job, s.runsOf(j), now)
	}
	if e := s.ended[name]; e != nil && e.Goodput != nil {
		return goodput.FromCompact(name, e.Goodput)
	}
	return nil
}

// ClusterGoodput sums, as of now, the goodput of the cluster's jobs that
// were live at or after since: every job the scheduler keeps that has not
// ended before since, and every pruned one (its compact record, kept for
// the retention's EndedAge) that ended at or after since. Each job counts
// whole (its whole wall time, not the part inside the window), so a job
// counts the same before and after it is pruned. nil when the cluster is
// unknown. It reads the cluster's live jobs (clusterJobs, once
// IndexClusterJobs has built it; every job until then), not every
// cluster's, and the pruned jobs' records by the hour of their end
// (endedindex.go): those of one hour, and each later hour's sum.
func (s *State) ClusterGoodput(cluster string, since, now time.Time) *loomv1.Goodput {
	if s.clusters[cluster] == nil {
		return nil
	}
	var total goodput.Total
	var runs []*jobstore.RunRecord
	add := func(j *Job) {
		if j.Terminal() && j.Job.GetEndTime() != nil && j.Job.GetEndTime().AsTime().Before(since) {
			return
		}
		runs = s.appendRuns(runs[:0], j)
		f := goodput.Figures(j.Job, runs, now)
		total.Add(&f)
	}
	if s.clusterJobs == nil {
		for _, j := range s.jobs {
			if j.Job.GetCluster() == cluster {
				add(j)
			}
		}
	}
	for name := range s.clusterJobs[cluster] {
		add(s.jobs[name])
	}
	s.endedGoodput(cluster, since, &total)
	return total.Goodput(cluster)
}

// runsOf returns j's runs in attempt order (nil for attempts not kept).
func (s *State) runsOf(j *Job) []*jobstore.RunRecord {
	return s.appendRuns(make([]*jobstore.RunRecord, 0, j.Attempt), j)
}

// appendRuns appends j's runs to out in attempt order.
func (s *State) appendRuns(out []*jobstore.RunRecord, j *Job) []*jobstore.RunRecord {
	for a := int32(1); a <= j.Attempt; a++ {
		if r := s.runs[RunKey(j.Name(), a)]; r != nil {
			out = append(out, &r.RunRecord)
		}
	}
	return out
}

// nodeHealthView is health's part in n's Slurm state (views.NodeHealth).
func nodeHealthView(n *Node) views.NodeHealth {
	h := views.NodeHealth{Out: n.HealthOut(), NotResponding: n.Unreachable, Reason: n.HealthReason, SetBy: n.HealthSetBy, Time: n.HealthTime}
	if (h.Out || h.NotResponding) && h.SetBy == "" {
		h.SetBy = "loom-health"
	}
	switch {
	case n.State == loomv1.Node_REBOOTING || n.State == loomv1.Node_REIMAGING:
		h.RebootIssued = true
		if h.SetBy == "" {
			h.SetBy = "loom-health"
		}
	case h.Out && (n.HealthState == loomv1.RemediationState_NODE_REBOOTING || n.HealthState == loomv1.RemediationState_NODE_REIMAGING):
		h.RebootRequested = true
	case n.HealthDrain, h.Out && (n.HealthState == loomv1.RemediationState_NODE_DRAINING ||
		n.HealthState == loomv1.RemediationState_NODE_QUARANTINED):
		h.Drain = true
	case n.PrologHold:
		// Held after a failed prolog until health's verdict: drained, as
		// slurmctld drains a node whose prolog failed.
		h.Out, h.Drain, h.Reason, h.SetBy, h.Time = true, true, "Prolog error: "+n.PrologReason, "loom-scheduler", n.PrologFailed
	}
	return h
}
