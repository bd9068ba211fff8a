package domain

import (
	"strconv"

	"github.com/loom-ml/loom/libs/slurmspec"

	"github.com/loom-ml/loom/services/scheduler/internal/domain/place"
)

// The scheduling pass is a chain (the scheduler's README draws it): each
// pending job, in the policy's order, goes through
//
//	gates → feasibility checks (Policy.Checks) → rankers → start
//	                                          ↘ no room: preemption → backfill
//
// Gates are job-level: the first that fails gives the job's pending reason
// and the pass moves on to the next job. The feasibility checks filter nodes
// (counted per reason in the placement explanation); the rankers order the
// nodes that passed; a job that fits starts on the best of them. Checks,
// rankers and the node choice are package place's, over the pass's node
// table (see place.go); gates and the blocked-job stages, which read jobs
// and runs, are here. A job that
// does not fit goes through the blocked-job stages, in order.

// gate is one job-level check of the pass, evaluated before any node is
// looked at.
type gate struct {
	// name names the gate in the chain (and the README's diagram).
	name string
	// reasons are the Slurm pending reasons the gate can give.
	reasons []string
	// check returns the job's pending reason when the gate stops it ("" to
	// let it through), and a note for its placement explanation, if any.
	check func(p *pass, q *queued) (reason, note string)
	// only, when non-zero: the gate lets through every job without one of
	// these flags (its check says so first), so the pass does not call it
	// for them: most jobs have none, and a call per gate and job adds up.
	only qflags
	// idle, when not nil, reports that the gate lets every job of the pass
	// through, whatever the pass does (looked at once, as the pass
	// begins): the pass then leaves it out of its gates (pass.gates).
	idle func(p *pass) bool
}

// gates are the pass's job-level gates, in order: the first that fails gives
// the job's reason, so the order is Slurm's (a held job reads JobHeldUser
// even when its dependency is unmet too).
var gates = []gate{
	{"held", []string{ReasonHeldUser, ReasonHeldAdmin}, gateHeld, qHold, nil},
	{"begin-time", []string{ReasonBeginTime}, gateBeginTime, qBegin, nil},
	{"dependency", []string{ReasonDependency, ReasonDependencyNeverSatisfied}, gateDependency, qDeps, nil},
	{"previous-run-stopping", []string{ReasonRequeued}, gatePreviousRun, qRan, nil},
	{"cluster-schedulable", []string{ReasonReqNodeNotAvail}, gateSchedulable, 0, idleSchedulable},
	{"partition", []string{ReasonPartitionConfig}, gatePartition, 0, nil},
	{"partition-state", []string{ReasonPartitionDown, ReasonPartitionInactive}, gatePartitionState, 0, idlePartitionState},
	{"partition-time-limit", []string{ReasonPartitionTimeLimit}, gateTimeLimit, 0, idleTimeLimit},
	{"array-task-limit", []string{ReasonJobArrayTaskLimit}, gateArrayLimit, qArray, nil},
	{"assoc-max-jobs", []string{ReasonAssocMaxJobsLimit}, gateAssocMaxJobs, 0, idleAssocMaxJobs}, // assoclimits.go
	{"assoc-tres", tresReasons, gateAssocTRES, 0, idleAssocTRES},                                 // assoctres.go
	{"qos-gres-per-user", []string{ReasonQOSMaxGRESPerUser}, gateQOSLimit, 0, idleQOSLimit},
	{"fifo", []string{ReasonPriority}, gateFIFO, 0, idleFIFO},
}

// passGates returns the gates p calls: gates less those idle for p, in
// order. A gate costs a call per job and pass; most passes have no use
// for half of them.
func passGates(p *pass) []*gate {
	out := make([]*gate, 0, len(gates))
	for i := range gates {
		if g := &gates[i]; g.idle == nil || !g.idle(p) {
			out = append(out, g)
		}
	}
	return out
}

// idleSchedulable: the cluster is schedulable for the whole pass.
func idleSchedulable(p *pass) bool { return p.schedulable }

// idleTimeLimit: no partition has a MaxTime, so no job's limit is past it.
func idleTimeLimit(p *pass) bool {
	for i := range p.parts {
		if p.parts[i].MaxSeconds > 0 {
			return false
		}
	}
	return true
}

// idleAssocMaxJobs: no association has limits, stored or in the change
// (a pass adds none).
func idleAssocMaxJobs(p *pass) bool { return len(p.t.s.limits) == 0 && len(p.t.c.Assocs) == 0 }

// idleQOSLimit: no QOS caps a user's GPUs.
func idleQOSLimit(p *pass) bool {
	for i := range p.t.s.cfg.QOS {
		if p.t.s.cfg.QOS[i].MaxGPUsPerUser > 0 {
			return false
		}
	}
	return true
}

// idleFIFO: with backfill, no job blocks the later ones (fifoParts is
// only set without it).
func idleFIFO(p *pass) bool { return p.t.s.cfg.Policy.Backfill }

func gateHeld(_ *pass, q *queued) (string, string) {
	if q.flags&qHold == 0 {
		return "", ""
	}
	if q.reason == ReasonHeldAdmin {
		return ReasonHeldAdmin, ""
	}
	return ReasonHeldUser, ""
}

func gateBeginTime(p *pass, q *queued) (string, string) {
	if q.flags&qBegin == 0 {
		return "", ""
	}
	if a := &q.e.jobAttrs; a.begin > 0 && p.t.now.UnixNano() < a.begin {
		p.wakeAt(q.e.j.Job.GetBeginTime().AsTime())
		return ReasonBeginTime, ""
	}
	return "", ""
}

func gateDependency(p *pass, q *queued) (string, string) {
	if q.flags&qDeps == 0 {
		return "", ""
	}
	reason, wake := p.t.dependencyReason(q.e.j, p.singletonBlocked)
	if !wake.IsZero() {
		p.wakeAt(wake)
	}
	if reason == ReasonDependency {
		p.depWaiting = true
	}
	return reason, ""
}

func gatePreviousRun(p *pass, q *queued) (string, string) {
	if q.flags&qRan == 0 {
		return "", ""
	}
	return p.previousRunStopping(q.j) // q.e.j, without a read of q.e
}

func gateSchedulable(p *pass, _ *queued) (string, string) {
	if !p.schedulable {
		return ReasonReqNodeNotAvail, ""
	}
	return "", ""
}

func gatePartition(_ *pass, q *queued) (string, string) {
	if q.part < 0 || q.part >= 64 {
		return ReasonPartitionConfig, ""
	}
	return "", ""
}

// idlePartitionState: every partition starts its jobs (UP or DRAIN).
func idlePartitionState(p *pass) bool {
	for i := range p.parts {
		if !slurmspec.PartitionSchedules(p.parts[i].State) {
			return false
		}
	}
	return true
}

// gatePartitionState holds the jobs of a DOWN or INACTIVE partition
// (Slurm's PARTITION_SCHED off): they wait with its reason; what runs there
// goes on. A DRAIN partition refuses submissions (the gateway's) but
// starts what it has queued.
func gatePartitionState(p *pass, q *queued) (string, string) {
	switch p.parts[q.part].State {
	case slurmspec.PartitionDown:
		return ReasonPartitionDown, ""
	case slurmspec.PartitionInactive:
		return ReasonPartitionInactive, ""
	}
	return "", ""
}

func gateTimeLimit(p *pass, q *queued) (string, string) {
	if max := p.parts[q.part].MaxSeconds; q.limit > 0 && max > 0 && q.limit > max {
		return ReasonPartitionTimeLimit, ""
	}
	return "", ""
}

func gateArrayLimit(p *pass, q *queued) (string, string) {
	if q.flags&qArray == 0 {
		return "", ""
	}
	j := q.e.j
	name := jobsPrefix(j.Name()) + j.Job.GetArrayJobId()
	if a := p.t.array(name); a != nil && a.Limit > 0 {
		if p.arrayRunning == nil {
			p.countArrays()
		}
		if p.arrayRunning[name] >= a.Limit {
			return ReasonJobArrayTaskLimit, ""
		}
	}
	return "", ""
}

func gateQOSLimit(p *pass, q *queued) (string, string) {
	if q.qos < 0 {
		return "", ""
	}
	if qs := &p.t.s.cfg.QOS[q.qos]; qs.MaxGPUsPerUser > 0 {
		if p.qosUse == nil {
			p.countQOS()
		}
		if int64(p.qosUse[assocKey{qs.Name, q.j.Job.GetUser()}])+q.e.gpus > int64(qs.MaxGPUsPerUser) {
			return ReasonQOSMaxGRESPerUser, ""
		}
	}
	return "", ""
}

// gateFIFO holds, without backfill, the jobs of a partition where an
// earlier job of the pass could not start (pass.fifoParts, blockFIFO), as
// slurmctld's failed_parts: the jobs of the other partitions are still
// tried. q is one record of a job of several partitions (multipart.go):
// each is held by its own partition's block alone, so a job blocked in its
// first partition is still tried in its others, as slurmctld tries each
// of a job's job_queue_recs. A job held so keeps a reason placement gave
// it (keepsReasonBehindBlock) rather than Priority.
func gateFIFO(p *pass, q *queued) (string, string) {
	if p.fifoParts != 0 && q.part >= 0 && q.part < 64 && p.fifoParts&(uint64(1)<<uint(q.part)) != 0 {
		if keepsReasonBehindBlock(q.reason) {
			return q.reason, ""
		}
		return ReasonPriority, ""
	}
	return "", ""
}

// keepsReasonBehindBlock reports whether a job of a blocked partition
// (gateFIFO) keeps reason, its reason before the pass, instead of reading
// Priority. slurmctld's _schedule sets WAIT_PRIORITY on a job of a failed
// partition only when it has no reason or WAIT_RESOURCES, and keeps any
// other ("Retaining previous scheduling Reason"); the reasons its checks
// before that one set afresh (dependency, begin time, holds, partition
// limits) are none by then when they pass, as they are here when the gates
// before fifo pass. What is left to keep is what placement decided on the
// job's nodes, which this pass does not look at for it: ReqNodeNotAvail and
// BadConstraints (with its placement explanation, as Slurm keeps the
// reason's description). The limit reasons (Assoc*, QOS*) are not kept:
// their gates, before fifo, have just found them lifted.
func keepsReasonBehindBlock(reason string) bool {
	return reason == ReasonReqNodeNotAvail || reason == ReasonBadConstraints
}

// blockFIFO blocks partition pi for the rest of the pass (without
// backfill): its later jobs wait (gateFIFO), and its nodes that a
// partition not blocked also has are kept from every later job (marked
// Reserved, which the later requests avoid: pass.fifoKept), so the jobs
// of an overlapping partition do not take the room its blocked job waits
// for. That is slurmctld's _schedule on a job:partition record that could
// not start (fail_by_part): "Do not schedule more jobs in this partition
// or on nodes in this partition" (failed_parts, and the partition's nodes
// taken out of avail_node_bitmap).
func (p *pass) blockFIFO(pi int) {
	if pi < 0 || pi >= 64 {
		return
	}
	bit := uint64(1) << uint(pi)
	if p.fifoParts&bit != 0 {
		return
	}
	p.fifoParts |= bit
	for i := range p.views {
		// A node of blocked partitions alone is used by none of the
		// later jobs (gateFIFO): no need to keep it.
		if v := &p.views[i]; v.Parts&bit != 0 && v.Parts&^p.fifoParts != 0 && !v.Reserved {
			v.Reserved = true
			p.reservedViews = append(p.reservedViews, int32(i))
			p.fifoKept = true
		}
	}
}

// fifoExcluded reports whether view i is kept for a blocked partition's job
// (blockFIFO): no later job starts or preempts there.
func (p *pass) fifoExcluded(i int32) bool { return p.fifoKept && p.views[i].Reserved }

// blocked is a job that passed every gate but found too few nodes with room:
// what the blocked-job stages work on.
type blocked struct {
	j *Job
	// e is the job's entry: its attributes, read only by a stage that acts.
	e *pendEntry
	// qos is e's (read from the queue, not from e).
	qos int32
	pi  int
	req *place.Request
	sc  *place.Shape
	// d is the decision the stages complete (reason, note).
	d Decision
}

// stage is one step for a blocked job, after placement failed for capacity.
type stage struct {
	name string
	run  func(p *pass, b *blocked)
}

// blockedStages are what the pass does, in order, for a job that waits for
// resources: preempt lower jobs for it, then keep its place (a backfill
// reservation, or, without backfill, block its partition).
var blockedStages = []stage{
	{"preemption", stagePreempt},
	{"backfill", stageBackfill},
}

// stagePreempt begins requeueing running jobs that make room for b, when the
// policy preempts and b's QOS or partition tier may (up to MaxPreemptPerPass
// preemptors a pass; a job of several partitions, pass.hold, is one of them
// however many of its partitions it looks in).
func stagePreempt(p *pass, b *blocked) {
	cfg := &p.t.s.cfg
	m := p.hold
	if !cfg.Policy.Preempt || !p.preemptorRoom(m) || !p.mayPreempt(b.qos, b.pi) {
		return
	}
	if m == nil || !m.counted {
		p.preempts++
		if m != nil {
			m.counted = true
		}
	}
	if n, waiting := p.preempt(b.j, &b.e.jobAttrs, b.req, b.sc); n > 0 {
		b.d.Note = "preempting " + strconv.Itoa(n) + " job(s)"
	} else if waiting {
		b.d.Note = "waiting for preempted jobs to stop"
	}
}

// preemptorRoom reports whether MaxPreemptPerPass leaves room for one more
// preemptor, m being the job of several partitions being considered (nil
// for another): the bound counts jobs, so one already counted at an earlier
// record of its own may look in its other partitions too.
func (p *pass) preemptorRoom(m *multiRec) bool {
	return p.preempts < p.t.s.cfg.MaxPreemptPerPass || (m != nil && m.counted)
}

// stageBackfill keeps b's place: the first blocked job of the pass gets the
// EASY reservation that later jobs must not delay; without backfill a
// blocked job blocks the later jobs of its partition (blockFIFO). The first
// blocked job of each partition reads Resources, the ones after it Priority,
// but for a job whose -w names all the nodes it needs: slurmctld 22.05's
// _schedule judges such a job on its own nodes, not behind the queue, and
// says Resources (measured: behind a blocked "-w node1" job, a blocked
// "-w node2" job read Resources, a blocked -N3 job Priority).
func stageBackfill(p *pass, b *blocked) {
	bit := uint64(1) << uint(b.pi)
	first := p.blocked&bit == 0
	p.blocked |= bit
	switch {
	case !p.t.s.cfg.Policy.Backfill:
		p.blockFIFO(b.pi)
	case p.resv == nil && p.ahead == nil && !b.req.AvoidReserved:
		// A job of several partitions that starts sooner at a later
		// record, and did not begin preempting here, reserves there
		// (multipart.go).
		if m := p.hold; m == nil || b.d.Note != "" || !p.reservesLater(m, b) {
			p.reserve(b.j, b.req, b.sc)
		}
	}
	b.d.Reason = ReasonPriority
	if first || ownNodes(b.req) {
		b.d.Reason = ReasonResources
	}
}

// ownNodes reports whether r's node list names at least the nodes r needs,
// Slurm's test for a job that waits on its own nodes (req_node_bitmap
// covering min_nodes) rather than behind the jobs ahead of it.
func ownNodes(r *place.Request) bool {
	return len(r.Nodelist) > 0 && len(r.Nodelist) >= r.Nodes
}
