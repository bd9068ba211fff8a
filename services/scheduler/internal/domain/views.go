package domain

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/paging"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// Reads: the Slurm views served by the read API (squeue/sacct's jobs with
// their priorities, runs and placement; sinfo's partitions and nodes).
// They read the state and never change it.

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

// JobView returns the job named name (array task names resolved) as GetJob
// serves it: the stored resource plus, as of now, its priority and factors
// (pending jobs), its runs (sacct) and its placement explanation. nil when
// unknown.
func (s *State) JobView(name string, now time.Time) *loomv1.Job {
	rec := s.jobs[s.ResolveJobName(name)]
	if rec == nil {
		return nil
	}
	v := newViewer(s, now)
	return v.job(rec)
}

// JobFilter selects jobs for ListJobs; empty fields select everything.
type JobFilter struct {
	// Project is "projects/{p}"; Cluster a cluster name.
	Project, Cluster         string
	Users, Names, Partitions []string
	States                   []loomv1.JobState
	// JobIDs are "12" (the job, or every task of array 12) or "12_3".
	JobIDs []string
	// ActiveOnly keeps pending and running jobs (squeue).
	ActiveOnly bool
}

func (f *JobFilter) keep(j *loomv1.Job) bool {
	if f.Project != "" && !strings.HasPrefix(j.GetName(), f.Project+"/jobs/") {
		return false
	}
	if f.Cluster != "" && j.GetCluster() != f.Cluster {
		return false
	}
	if f.ActiveOnly && j.GetState().Terminal() {
		return false
	}
	if len(f.Users) > 0 && !containsString(f.Users, j.GetUser()) {
		return false
	}
	if len(f.Names) > 0 && !containsString(f.Names, SlurmJobName(j)) {
		return false
	}
	if len(f.Partitions) > 0 && !containsString(f.Partitions, j.GetPartition()) {
		return false
	}
	if len(f.States) > 0 {
		ok := false
		for _, st := range f.States {
			ok = ok || st == j.GetState()
		}
		if !ok {
			return false
		}
	}
	if len(f.JobIDs) > 0 {
		ok := false
		task := ""
		if j.GetArrayJobId() != "" {
			task = j.GetArrayJobId() + "_" + strconv.Itoa(int(j.GetArrayTaskId()))
		}
		for _, id := range f.JobIDs {
			ok = ok || id == j.GetJobId() || (task != "" && (id == task || id == j.GetArrayJobId()))
		}
		if !ok {
			return false
		}
	}
	return true
}

// ListJobs returns every job f selects, in submission order, as JobView
// serves them.
func (s *State) ListJobs(f JobFilter, now time.Time) []*loomv1.Job {
	recs, _ := s.listed(f)
	v := newViewer(s, now)
	out := make([]*loomv1.Job, len(recs))
	for i, j := range recs {
		out[i] = v.job(j)
	}
	return out
}

// ListJobsPage returns one page of the jobs f selects, in submission order
// (paging.JobKey), as JobView serves them: those after the key after ("" for
// the first page), at most size and within paging.MaxBytes. next is the key
// to continue after, "" when no job follows. Only the page's jobs are
// viewed, so a page costs the same however many jobs there are.
func (s *State) ListJobsPage(f JobFilter, after string, size int, now time.Time) (jobs []*loomv1.Job, next string) {
	recs, keys := s.listed(f)
	i := sort.SearchStrings(keys, after)
	if i < len(keys) && keys[i] == after {
		i++
	}
	v := newViewer(s, now)
	b := paging.NewBuilder(size)
	for ; i < len(recs); i++ {
		j := v.job(recs[i])
		if !b.Add(j) {
			return jobs, keys[i-1]
		}
		jobs = append(jobs, j)
	}
	return jobs, ""
}

// listed returns the records f selects sorted by their list key, with the
// keys.
func (s *State) listed(f JobFilter) ([]*Job, []string) {
	var recs []*Job
	for _, j := range s.jobs {
		if f.keep(j.Job) {
			recs = append(recs, j)
		}
	}
	keys := make([]string, len(recs))
	for i, j := range recs {
		keys[i] = paging.JobKey(j.Job)
	}
	sort.Sort(byKey{recs, keys})
	return recs, keys
}

// byKey sorts records and their keys together.
type byKey struct {
	recs []*Job
	keys []string
}

func (b byKey) Len() int           { return len(b.recs) }
func (b byKey) Less(i, j int) bool { return b.keys[i] < b.keys[j] }
func (b byKey) Swap(i, j int) {
	b.recs[i], b.recs[j] = b.recs[j], b.recs[i]
	b.keys[i], b.keys[j] = b.keys[j], b.keys[i]
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
		_, pi := p.cluster.partition(out.GetPartition())
		prio, f := p.prio.priority(v.s.attrsOf(rec), pi)
		out.Priority, out.PriorityFactors = prio, f.proto()
		if d := rec.why; d != nil && placementReason(out.GetStateReason()) {
			out.Placement = d.explain()
		}
	} else if pl := rec.placed; pl != nil {
		out.Placement = pl.explain()
	}
	out.Runs = jobRuns(rec, func(key string) *Run { return v.s.runs[key] })
	return out
}

// jobRuns is Job.runs: the job's attempts as run finds them, oldest first;
// an attempt not ended yet shows the job's state.
func jobRuns(rec *Job, run func(key string) *Run) []*loomv1.JobRun {
	var out []*loomv1.JobRun
	for a := int32(1); a <= rec.Attempt; a++ {
		r := run(RunKey(rec.Name(), a))
		if r == nil {
			continue
		}
		jr := &loomv1.JobRun{Attempt: a, Nodes: append([]string(nil), r.Hostnames...), ExitCode: r.ExitCode, Reason: r.Reason}
		if !r.Start.IsZero() {
			jr.StartTime = timestamppb.New(r.Start)
		}
		if r.Ended() {
			jr.State, jr.EndTime = r.Outcome, timestamppb.New(r.End)
		} else {
			jr.State = rec.Job.GetState()
		}
		out = append(out, jr)
	}
	return out
}

func placementReason(r string) bool {
	switch r {
	case ReasonResources, ReasonPriority, ReasonReqNodeNotAvail, ReasonBadConstraints, ReasonPartitionNodeLimit,
		ReasonRequeued:
		return true
	}
	return false
}

// explain writes a decision as Job.placement: "12 nodes: InsufficientGPUs
// 8, NodeDrained 3, Excluded 1; preempting 1 job(s)", or its note alone for
// a decision taken without looking at nodes.
func (d *Decision) explain() string {
	if d.Nodes == 0 && len(d.Filtered) == 0 && d.Note != "" {
		return d.Note
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d nodes", d.Nodes)
	if len(d.Filtered) > 0 {
		keys := make([]string, 0, len(d.Filtered))
		for k := range d.Filtered {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(a, b int) bool {
			if d.Filtered[keys[a]] != d.Filtered[keys[b]] {
				return d.Filtered[keys[a]] > d.Filtered[keys[b]]
			}
			return keys[a] < keys[b]
		})
		b.WriteString(" filtered:")
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, " %s %d", k, d.Filtered[k])
		}
	}
	if d.Note != "" {
		b.WriteString("; " + d.Note)
	}
	return b.String()
}

// Partitions returns the cluster's partitions as sinfo shows them: nodes,
// GPU totals and allocations, state up (down when the cluster cannot take
// work).
func (s *State) Partitions(cluster string) []*loomv1.Partition {
	c := s.clusters[cluster]
	if c == nil && s.byCluster[cluster] == nil {
		return nil
	}
	if c == nil {
		c = &Cluster{Name: cluster}
	}
	p := newTxn(s, time.Time{}).newPass(cluster, c)
	var out []*loomv1.Partition
	for i, pt := range c.partitions() {
		lp := &loomv1.Partition{Name: pt.Name, Cluster: cluster, Default: pt.Default, State: "up",
			MaxTime: pt.MaxTime, PriorityTier: pt.Tier}
		if lp.MaxTime == "" {
			lp.MaxTime = "UNLIMITED"
		}
		if !c.Schedulable() {
			lp.State = "down"
		}
		for k := range p.views {
			v := &p.views[k]
			if v.Node.Role == RoleLogin || !v.InPartition(i) {
				continue
			}
			lp.Nodes = append(lp.Nodes, v.Node.Hostname)
			lp.TotalGpus += v.Node.GPUs
			lp.AllocGpus += v.Node.GPUs - v.FreeGPUs
		}
		out = append(out, lp)
	}
	return out
}

// SlurmNodes returns the cluster's compute nodes as sinfo -N shows them:
// IDLE, MIXED or ALLOCATED by what runs there; DRAINING or DRAINED when
// drained (by scontrol, or by the provisioner for removal) with or without
// jobs; DOWN when it cannot run work.
func (s *State) SlurmNodes(cluster string) []*loomv1.SlurmNode {
	c := s.clusters[cluster]
	if c == nil && s.byCluster[cluster] == nil {
		return nil
	}
	if c == nil {
		c = &Cluster{Name: cluster}
	}
	t := newTxn(s, time.Time{})
	p := t.newPass(cluster, c)
	// The views are in clusterNodes' order; the rows read the records.
	nodes := t.clusterNodes(cluster)
	parts := c.partitions()
	features := map[string][]string{}
	for _, ns := range c.NodeSets {
		features[ns.Pool] = append(features[ns.Pool], ns.Features...)
	}
	var out []*loomv1.SlurmNode
	for k := range p.views {
		v := &p.views[k]
		n := nodes[k]
		if n.Role == RoleLogin {
			continue
		}
		sn := &loomv1.SlurmNode{Hostname: n.Hostname, Node: n.Name, Cluster: cluster, Gpus: n.GPUs,
			AllocGpus: n.GPUs - v.FreeGPUs, GpuType: n.GresType, Cpus: n.CPUs, MemoryMb: n.MemoryMB,
			Block: n.Block, Features: features[n.Pool]}
		if n.CPUs > 0 {
			sn.AllocCpus = n.CPUs - v.FreeCPUs
		}
		for i, pt := range parts {
			if v.InPartition(i) {
				sn.Partitions = append(sn.Partitions, pt.Name)
			}
		}
		busy := v.Runs > 0
		full := v.Exclusive || (n.GPUs > 0 && v.FreeGPUs == 0) || (n.CPUs > 0 && v.FreeCPUs <= 0)
		switch {
		case n.lost():
			sn.State, sn.Reason = loomv1.SlurmNode_DOWN, strings.TrimPrefix(n.downReason(), "node "+n.Hostname+" down: ")
		case n.AdminDrain || n.Draining():
			sn.State = loomv1.SlurmNode_DRAINED
			if busy {
				sn.State = loomv1.SlurmNode_DRAINING
			}
			sn.Reason = n.AdminReason
			if n.AdminDrain {
				sn.ReasonUser = n.AdminReasonUser
				if !n.AdminReasonTime.IsZero() {
					sn.ReasonTime = timestamppb.New(n.AdminReasonTime)
				}
			} else {
				sn.Reason = n.Reason
				if sn.Reason == "" {
					sn.Reason = "node is being removed"
				}
			}
		case !busy:
			sn.State = loomv1.SlurmNode_IDLE
		case full:
			sn.State = loomv1.SlurmNode_ALLOCATED
		default:
			sn.State = loomv1.SlurmNode_MIXED
		}
		out = append(out, sn)
	}
	return out
}
