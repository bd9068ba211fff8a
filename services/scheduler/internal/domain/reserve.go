package domain

import (
	"slices"
	"sort"
	"strings"
	"time"
)

// holding is what one run holds on one node, and when it is expected to
// let go of it.
type holding struct {
	run  *Run
	end  time.Time
	inf  bool // no time limit: no end can be promised
	gpus int32
	cpus int32
	mem  int64
	excl bool
}

// expectedEnd is when run r is expected to free its nodes: its start plus
// its time limit (the job's, else its partition's MaxTime; none means never),
// or the end of its preemption grace; now for a run whose attempt already
// ended and whose steps are stopping. fresh says whether r's mirrored job
// fields are current (else the job is looked up).
func (p *pass) expectedEnd(r *Run, fresh bool) (time.Time, bool) {
	t := p.t
	live, limitSec := r.live, r.limit
	if !fresh {
		j := t.job(r.Job)
		live = j != nil && j.Running() && j.Attempt == r.Attempt && !r.Ended()
		if j != nil {
			limitSec = j.Job.GetTimeLimitSeconds()
		}
	}
	if !live {
		return t.now, false
	}
	limit := time.Duration(limitSec) * time.Second
	if limit <= 0 {
		for _, pt := range p.parts {
			if pt.Name == r.Partition {
				limit = time.Duration(pt.MaxSeconds) * time.Second
			}
		}
	}
	end, inf := r.Start.Add(limit), limit <= 0
	if r.PreemptBy != "" && !r.PreemptAt.IsZero() && (inf || r.PreemptAt.Before(end)) {
		end, inf = r.PreemptAt, false
	}
	if !inf && end.Before(t.now) {
		end = t.now
	}
	return end, inf
}

// current returns the version of run r the change holds, when it edited r
// during the pass (a preemption began, say), else r.
func (p *pass) current(r *Run) *Run {
	if r.key != "" && len(p.t.c.Runs) > 0 {
		if nr, ok := p.t.c.Runs[r.key]; ok && nr != nil {
			return nr
		}
	}
	return r
}

// holdings returns what the runs on view i hold there, soonest end first
// (in a buffer reused by the next call).
func (p *pass) holdings(i int32) []holding {
	v := &p.views[i]
	hs := p.hbuf[:0]
	node := v.Node.Name
	overJobs := len(p.t.c.Jobs) > 0
	for _, r := range v.held {
		r = p.current(r)
		fresh := r.key != ""
		if fresh && overJobs {
			if _, over := p.t.c.Jobs[r.Job]; over {
				fresh = false
			}
		}
		end, inf := p.expectedEnd(r, fresh)
		h := holding{run: r, end: end, inf: inf, gpus: int32(len(r.GPUs[node])), mem: r.MemMB, excl: r.Exclusive}
		if k := r.rank(node); k >= 0 && k < len(r.CPUs) {
			h.cpus = r.CPUs[k]
		}
		hs = append(hs, h)
	}
	if len(hs) > 1 {
		slices.SortFunc(hs, func(a, b holding) int {
			switch {
			case a.inf != b.inf:
				if a.inf {
					return 1
				}
				return -1
			case !a.end.Equal(b.end):
				return a.end.Compare(b.end)
			case a.run.Job != b.run.Job:
				return strings.Compare(a.run.Job, b.run.Job)
			}
			return int(a.run.Attempt - b.run.Attempt)
		})
	}
	p.hbuf = hs
	return hs
}

// viewIndex maps node names to views (built on first use).
func (p *pass) viewIndex() map[string]int32 {
	if p.viewAt == nil {
		p.viewAt = make(map[string]int32, len(p.views))
		for i := range p.views {
			p.viewAt[p.views[i].Node.Name] = int32(i)
		}
	}
	return p.viewAt
}

// room is what is free on a node, as a reservation or a preemption counts it.
type room struct {
	gpus, cpus int32
	mem        int64
	runs, excl int32
}

func (p *pass) roomOf(i int32) room {
	v := &p.views[i]
	rm := room{gpus: v.FreeGPUs, cpus: v.FreeCPUs, mem: v.FreeMemMB, runs: v.Runs}
	for _, r := range v.held {
		if r.Exclusive {
			rm.excl++
		}
	}
	return rm
}

func (rm *room) release(h holding) {
	rm.gpus += h.gpus
	rm.cpus += h.cpus
	rm.mem += h.mem
	rm.runs--
	if h.excl {
		rm.excl--
	}
}

// fits reports whether r fits on view i given rm free there.
func (p *pass) fits(r *Request, i int32, rm room) bool {
	n := p.views[i].Node
	return rm.excl <= 0 && (!r.Exclusive || rm.runs <= 0) && rm.gpus >= r.GPUsPerNode &&
		(n.CPUs == 0 || rm.cpus >= r.CPUsPerNode) && (n.MemoryMB == 0 || rm.mem >= r.MemMB)
}

// availableAt is the earliest time r fits on view i as the runs there end.
func (p *pass) availableAt(r *Request, i int32) (time.Time, bool) {
	rm := p.roomOf(i)
	if p.fits(r, i, rm) {
		return p.t.now, false
	}
	for _, h := range p.holdings(i) {
		rm.release(h)
		if p.fits(r, i, rm) {
			return h.end, h.inf
		}
	}
	return time.Time{}, true
}

// reserve gives j, the first job of the pass that cannot start for lack of
// resources, a reservation: the r.Nodes nodes that free up soonest (by the
// running jobs' time limits), kept from every later job that would not end
// before the reservation starts (EASY backfill).
func (p *pass) reserve(j *Job, r *Request, sc *shapeCand) {
	if len(sc.avail) < r.Nodes {
		return
	}
	type slot struct {
		i   int32
		at  time.Time
		inf bool
	}
	slots := make([]slot, 0, len(sc.avail))
	for _, i := range sc.avail {
		at, inf := p.availableAt(r, i)
		slots = append(slots, slot{i, at, inf})
	}
	slices.SortFunc(slots, func(a, b slot) int {
		switch {
		case a.inf != b.inf:
			if a.inf {
				return 1
			}
			return -1
		case !a.at.Equal(b.at):
			return a.at.Compare(b.at)
		}
		return int(a.i - b.i)
	})
	res := Reservation{Job: j.Name(), Cluster: p.name}
	for _, s := range slots[:r.Nodes] {
		p.views[s.i].Reserved = true
		res.Nodes = append(res.Nodes, p.views[s.i].Node.Hostname)
		if s.inf {
			res.Unbounded = true
		} else if s.at.After(res.Start) {
			res.Start = s.at
		}
	}
	if res.Start.IsZero() {
		res.Start = p.t.now
	}
	slices.Sort(res.Nodes)
	p.resv = &res
	p.t.c.Reservations = append(p.t.c.Reservations, res)
}

// mayPreempt reports whether j could preempt anything: its QOS may preempt
// some QOS, or its partition is above the cluster's lowest tier.
func (p *pass) mayPreempt(a *jobAttrs, pi int) bool {
	if a.qos >= 0 && len(p.t.s.cfg.QOS[a.qos].Preempt) > 0 {
		return true
	}
	for _, pt := range p.parts {
		if pt.Tier < p.parts[pi].Tier {
			return true
		}
	}
	return false
}

// canPreempt reports whether j (in partition pi) may preempt run r.
func (p *pass) canPreempt(j *Job, pi int, r *Run) bool {
	if p.t.s.cfg.canPreemptQOS(j.Job.GetQos(), r.QOS) {
		return true
	}
	for _, pt := range p.parts {
		if pt.Name == r.Partition {
			return p.parts[pi].Tier > pt.Tier
		}
	}
	return false
}

// preempt looks for running jobs whose requeue would let j start: the
// lowest-priority victims first (fewest nodes among equals), as few as it
// takes. It reports how many it began preempting, or waiting=true when the
// jobs already being preempted for j will make room. Runs being preempted
// for other jobs are theirs: they are neither counted nor chosen again.
func (p *pass) preempt(j *Job, r *Request, sc *shapeCand) (victims int, waiting bool) {
	if len(sc.avail) < r.Nodes {
		return 0, false
	}
	_, pi := p.cluster.partition(j.Job.GetPartition())
	at := p.viewIndex()
	rooms := make(map[int32]*room, len(sc.avail))
	fitting := 0
	for _, i := range sc.avail {
		rm := p.roomOf(i)
		for _, h := range p.holdings(i) {
			if h.run.PreemptBy == j.Name() { // its own victims, already on their way out
				rm.release(h)
			}
		}
		rooms[i] = &rm
		if p.fits(r, i, rm) {
			fitting++
		}
	}
	if fitting >= r.Nodes {
		return 0, true
	}
	type victim struct {
		run  *Run
		prio int64
		id   int64
	}
	var cands []victim
	seen := map[string]bool{}
	for _, i := range sc.avail {
		for _, rn := range p.views[i].held {
			rn = p.current(rn)
			if seen[rn.Key()] || rn.PreemptBy != "" || rn.Ended() {
				continue
			}
			seen[rn.Key()] = true
			vj := p.t.job(rn.Job)
			if vj == nil || !vj.Running() || vj.Attempt != rn.Attempt || !p.canPreempt(j, pi, rn) {
				continue
			}
			v := victim{run: rn, id: -jobNumber(vj)}
			if p.prio != nil {
				_, vpi := p.cluster.partition(vj.Job.GetPartition())
				v.prio, _ = p.prio.priority(p.t.s.attrsOf(vj), vpi)
			}
			cands = append(cands, v)
		}
	}
	sort.SliceStable(cands, func(a, b int) bool {
		if cands[a].prio != cands[b].prio {
			return cands[a].prio < cands[b].prio
		}
		if la, lb := len(cands[a].run.Nodes), len(cands[b].run.Nodes); la != lb {
			return la < lb
		}
		return cands[a].id < cands[b].id
	})
	var chosen []*Run
	for _, v := range cands {
		chosen = append(chosen, v.run)
		for _, node := range v.run.Nodes {
			i, ok := at[node]
			rm := rooms[i]
			if !ok || rm == nil {
				continue
			}
			before := p.fits(r, i, *rm)
			for _, h := range p.holdings(i) {
				if h.run.Key() == v.run.Key() {
					rm.release(h)
				}
			}
			if !before && p.fits(r, i, *rm) {
				fitting++
			}
		}
		if fitting >= r.Nodes {
			break
		}
	}
	if fitting < r.Nodes {
		return 0, false
	}
	for _, rn := range chosen {
		if p.t.beginPreempt(rn, j) {
			p.requeued = true
		}
	}
	return len(chosen), false
}

// jobNumber is a job's numeric id (0 when not a number).
func jobNumber(j *Job) int64 {
	var n int64
	for _, c := range j.Job.GetJobId() {
		if c < '0' || c > '9' {
			return 0
		}
		n = n*10 + int64(c-'0')
	}
	return n
}
