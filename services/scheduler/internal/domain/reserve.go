package domain

import (
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/loom-ml/loom/services/scheduler/internal/domain/place"
)

// holding is what one run holds on one node, and when it is expected to
// let go of it.
type holding struct {
	run  *Run
	end  time.Time
	mem  int64
	gpus int32
	cpus int32
	inf  bool // no time limit: no end can be promised
	excl bool
	// down: the run's attempt is over (its job no longer runs it), so it
	// lets go now (see runEnd; set only in keptHoldings' entries).
	down bool
}

// expectedEnd is when run r is expected to free its nodes: its start plus
// its time limit (the job's, else its partition's MaxTime; none means never),
// or the end of its preemption grace; now for a run whose attempt already
// ended and whose steps are stopping. fresh says whether r's mirrored job
// fields are current (else the job is looked up).
func (p *pass) expectedEnd(r *Run, fresh bool) (time.Time, bool) {
	end, inf, live := p.runEnd(r, fresh)
	return p.atNow(end, inf, !live)
}

// atNow is expectedEnd from runEnd's results: now for a run whose attempt
// is over (down) or whose end is past.
func (p *pass) atNow(end time.Time, inf, down bool) (time.Time, bool) {
	if down {
		return p.t.now, false
	}
	if !inf && end.Before(p.t.now) {
		end = p.t.now
	}
	return end, inf
}

// runEnd is expectedEnd before the clock is looked at: the end r's time
// limit or preemption gives, and whether r's attempt is still its job's
// running one (live false: end and inf mean nothing).
func (p *pass) runEnd(r *Run, fresh bool) (end time.Time, inf, live bool) {
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
		return time.Time{}, false, false
	}
	limit := time.Duration(limitSec) * time.Second
	if limit <= 0 {
		for _, pt := range p.parts {
			if pt.Name == r.Partition {
				limit = time.Duration(pt.MaxSeconds) * time.Second
			}
		}
	}
	end, inf = r.Start.Add(limit), limit <= 0
	if r.PreemptBy != "" && !r.PreemptAt.IsZero() && (inf || r.PreemptAt.Before(end)) {
		end, inf = r.PreemptAt, false
	}
	return end, inf, true
}

// current returns the version of run r the change holds, when it edited r
// during the pass (a preemption began, say), else r.
func (p *pass) current(r *Run) *Run {
	if r.key != "" && len(p.t.c.Runs) > 0 {
		return p.t.overRun(r)
	}
	return r
}

// holdings returns what the runs on view i hold there, soonest end first
// (in a buffer reused by the next call).
func (p *pass) holdings(i int32) []holding {
	if e := p.keptHoldings(i); e != nil {
		// The kept entries with the clock applied: in their order unless
		// it moved an end (then sorted as below).
		hs := append(p.hbuf[:0], e.hs...)
		moved := false
		for k := range hs {
			h := &hs[k]
			moved = moved || h.down || (!h.inf && h.end.Before(p.t.now))
			h.end, h.inf = p.atNow(h.end, h.inf, h.down)
			h.down = false
		}
		if moved {
			sortHoldings(hs)
		}
		p.hbuf = hs
		return hs
	}
	v := &p.views[i]
	hs := p.hbuf[:0]
	node := v.Node.Name
	overJobs := len(p.t.c.Jobs) > 0
	for _, r := range p.held[i] {
		r = p.current(r)
		fresh := r.key != ""
		if fresh && overJobs {
			if _, over := p.t.c.Jobs[r.Job]; over {
				fresh = false
			}
		}
		end, inf := p.expectedEnd(r, fresh)
		h := held(r, node)
		h.end, h.inf = end, inf
		hs = append(hs, h)
	}
	sortHoldings(hs)
	p.hbuf = hs
	return hs
}

// sortHoldings orders hs soonest end first (unbounded last), then by job
// and attempt: an order of its own for the runs of one node.
func sortHoldings(hs []holding) {
	if len(hs) < 2 {
		return
	}
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

// heldEntry is what the runs of one node hold there, kept across a
// writer's passes (staticCache.held): the runs, as the node's allocation
// entry lists them (a list never modified in place: another list is
// another set of runs), and their holdings before the clock is looked at
// (runEnd), in sortHoldings' order of those.
type heldEntry struct {
	runs []*Run
	hs   []holding
	made bool
}

// keptHoldings returns the kept holdings of view i's runs, made anew when
// its runs are others, or nil when the pass cannot use them: without a
// static cache (reads), or once the change edits a run or a job (the
// pass's versions then differ from the state's). The runs' mirrored job
// fields change in place (Commit's mirrorJob): the state's mirrored
// counter says when, and every entry is then made anew. The rest of what
// runEnd and held read of a committed run never changes (an edit is a
// copy). The reservation reads the 25,000 runs of 10,000 nodes each pass:
// a few cache misses each, where the kept entries are read in a walk.
func (p *pass) keptHoldings(i int32) *heldEntry {
	st := p.static
	if st == nil || len(p.t.c.Runs) > 0 || len(p.t.c.Jobs) > 0 {
		return nil
	}
	if len(st.held) != len(p.views) || st.heldAt != p.t.s.mirrored {
		st.held, st.heldAt, st.heldSlab = make([]heldEntry, len(p.views)), p.t.s.mirrored, nil
	}
	e := &st.held[i]
	runs := p.held[i]
	if e.made && len(e.runs) == len(runs) && (len(runs) == 0 || &e.runs[0] == &runs[0]) {
		return e
	}
	if cap(e.hs) < len(runs) {
		if cap(st.heldSlab)-len(st.heldSlab) < len(runs) {
			st.heldSlab = make([]holding, 0, max(len(runs), 4096))
		}
		n := len(st.heldSlab)
		st.heldSlab = st.heldSlab[:n+len(runs)]
		e.hs = st.heldSlab[n : n : n+len(runs)]
	}
	hs := e.hs[:0]
	node := p.views[i].Node.Name
	for _, r := range runs {
		end, inf, live := p.runEnd(r, r.key != "")
		h := held(r, node)
		h.end, h.inf, h.down = end, inf, !live
		hs = append(hs, h)
	}
	sortHoldings(hs)
	e.runs, e.hs, e.made = runs, hs, true
	return e
}

// viewIndex maps node names to views (built on first use). The writer keeps
// the map of its last pass over the cluster, and reuses it while the views
// are of the same placement nodes in the same order (staticCacheFor keeps
// them while the node records are unchanged): building it hashes every
// node name (10,000), comparing the pointers is a walk.
func (p *pass) viewIndex() map[string]int32 {
	if p.viewAt != nil {
		return p.viewAt
	}
	sc := p.t.scratch
	if sc != nil {
		if vi := sc.viewAt[p.name]; vi != nil && len(vi.nodes) == len(p.views) {
			same := true
			for i := range p.views {
				if p.views[i].Node != vi.nodes[i] {
					same = false
					break
				}
			}
			if same {
				p.viewAt, p.viewCache = vi.at, vi
				return p.viewAt
			}
		}
	}
	p.viewAt = make(map[string]int32, len(p.views))
	nodes := make([]*place.Node, len(p.views))
	for i := range p.views {
		p.viewAt[p.views[i].Node.Name] = int32(i)
		nodes[i] = p.views[i].Node
	}
	if sc != nil {
		if sc.viewAt == nil {
			sc.viewAt = map[string]*viewIndexCache{}
		}
		p.viewCache = &viewIndexCache{nodes: nodes, at: p.viewAt}
		sc.viewAt[p.name] = p.viewCache
	}
	return p.viewAt
}

// viewIndexCache is a pass's viewIndex, for the views of nodes (in order).
// Nothing writes into the map once built.
type viewIndexCache struct {
	nodes []*place.Node
	at    map[string]int32
	// heldRun and held are, by index in the cluster's active runs, the
	// run last seen there and the nodes of it the preemption walk looks
	// at (heldViews): a preemptor that cannot fit walks every run, and a
	// look-up of each node in at and in the run's steps was most of its
	// cost. A state's run never changes, nor does at: an entry stays true
	// while the run at its index is the same.
	heldRun []*Run
	held    [][]heldView
}

// heldView is a node a run holds and its view's index.
type heldView struct {
	node string
	i    int32
}

// heldViews returns the nodes of r, the state's run at index pos of its
// cluster's active runs, that it holds and that have a view in at, in
// r.Nodes' order: the nodes for which at[node] is found and r.Holds(node).
func (vi *viewIndexCache) heldViews(r *Run, pos int32) []heldView {
	if int(pos) >= len(vi.heldRun) {
		n := max(int(pos)+1, 2*len(vi.heldRun))
		vi.heldRun = append(vi.heldRun, make([]*Run, n-len(vi.heldRun))...)
		vi.held = append(vi.held, make([][]heldView, n-len(vi.held))...)
	}
	if vi.heldRun[pos] == r {
		return vi.held[pos]
	}
	hs := vi.held[pos][:0]
	for _, node := range r.Nodes {
		if i, ok := vi.at[node]; ok && r.Holds(node) {
			hs = append(hs, heldView{node, i})
		}
	}
	vi.heldRun[pos], vi.held[pos] = r, hs
	return hs
}

// room is what is free on a node, as a reservation or a preemption counts it.
type room struct {
	gpus, cpus int32
	mem        int64
	runs, excl int32
	// users: the request's user matters (some node is owned, or the
	// request is --exclusive=user: usersMatter), and user, others and
	// owned are kept: the request's user, the node's runs of other users,
	// and their --exclusive=user runs (of owner) that keep it off.
	users         bool
	user, owner   string
	others, owned int32
}

// usersMatter reports whether the runs' users can keep r off a node: some
// node is held by an --exclusive=user run, or r is one (the passes where
// requestIn sets r.User). Otherwise place.CheckUser passes everywhere and
// the rooms count no users.
func (p *pass) usersMatter(r *place.Request) bool {
	return p.owned || r.ExclusiveUser
}

// roomOf is what is free on view i for r, with the users of its runs
// counted when they matter for r.
func (p *pass) roomOf(r *place.Request, i int32) room {
	v := &p.views[i]
	rm := room{gpus: v.FreeGPUs, cpus: v.FreeCPUs, mem: v.FreeMemMB, runs: v.Runs}
	if p.usersMatter(r) {
		rm.users, rm.user = true, r.User
		if r.ExclusiveUser || v.Owner != "" {
			// Only another user's run, or an owner's, can keep r off:
			// the node's runs are read for them.
			for _, rn := range p.held[i] {
				rm.count(rn, 1)
			}
		}
	}
	if !v.Exclusive {
		// No run of the node is exclusive (newPass sets the flag from the
		// node's count of them, Take when the pass starts one): no walk
		// of its runs, for each of the 10,000 nodes the reservation looks at.
		return rm
	}
	for _, r := range p.held[i] {
		if r.Exclusive {
			rm.excl++
		}
	}
	return rm
}

// count adds (sign 1) or takes away (-1) run rn in the room's users.
func (rm *room) count(rn *Run, sign int32) {
	if rn.User == rm.user {
		return
	}
	rm.others += sign
	if rn.ExclusiveUser {
		rm.owned += sign
		rm.owner = rn.User
	}
}

func (rm *room) release(h holding) {
	rm.gpus += h.gpus
	rm.cpus += h.cpus
	rm.mem += h.mem
	rm.runs--
	if h.excl {
		rm.excl--
	}
	if rm.users {
		rm.count(h.run, -1)
	}
}

// fits reports whether r fits on view i given rm free there. The users of
// the runs left (when they matter) pass place.CheckUser's rule, as the
// node's view would show them to r: its owner while another user's
// --exclusive=user run is left, and r's user as the only one while no
// other user's is.
func (p *pass) fits(r *place.Request, i int32, rm room) bool {
	n := p.views[i].Node
	if rm.users {
		v := place.NodeView{Runs: rm.runs}
		if rm.owned > 0 {
			v.Owner = rm.owner
		}
		if rm.others <= 0 && rm.runs > 0 {
			v.OnlyUser = r.User
		}
		if !place.CheckUser.Fits(r, &v) {
			return false
		}
	}
	return rm.excl <= 0 && (!r.Exclusive || rm.runs <= 0) && rm.gpus >= r.GPUsPerNode &&
		(n.CPUs == 0 || rm.cpus >= r.CPUsPerNode) && (n.MemoryMB == 0 || rm.mem >= r.MemMB)
}

// availableAt is the earliest time r fits on view i as the runs there end.
func (p *pass) availableAt(r *place.Request, i int32) (time.Time, bool) {
	rm := p.roomOf(r, i)
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
func (p *pass) reserve(j *Job, r *place.Request, sc *place.Shape) {
	slots := p.soonest(r, sc)
	if slots == nil {
		return
	}
	res := Reservation{Job: j.Name(), Cluster: p.name}
	res.Start, res.Unbounded = p.slotsStart(slots)
	for _, s := range slots {
		p.views[s.i].Reserved = true
		p.reservedViews = append(p.reservedViews, s.i)
		res.Nodes = append(res.Nodes, p.views[s.i].Node.Hostname)
	}
	slices.Sort(res.Nodes)
	p.resv = &res
	if gap := res.Start.Sub(p.t.now); gap > -1<<61 && gap < 1<<61 {
		p.resvGap, p.resvGapOK = gap, true
	}
	p.t.c.Reservations = append(p.t.c.Reservations, res)
}

// resvSlot is a node a reservation may take, and when r fits there.
type resvSlot struct {
	i   int32
	at  time.Time
	inf bool
}

// soonest returns the r.Nodes nodes of sc.Avail where r fits soonest as
// the runs there end (unbounded last, then by view), or nil when sc.Avail
// has too few.
func (p *pass) soonest(r *place.Request, sc *place.Shape) []resvSlot {
	if len(sc.Avail) < r.Nodes {
		return nil
	}
	slots := make([]resvSlot, 0, len(sc.Avail))
	for _, i := range sc.Avail {
		at, inf := p.availableAt(r, i)
		slots = append(slots, resvSlot{i, at, inf})
	}
	slices.SortFunc(slots, func(a, b resvSlot) int {
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
	return slots[:r.Nodes]
}

// slotsStart is when a reservation of slots starts: when the last of them
// frees up (now when all are free), unbounded when one never does.
func (p *pass) slotsStart(slots []resvSlot) (start time.Time, unbounded bool) {
	for _, s := range slots {
		if s.inf {
			unbounded = true
		} else if s.at.After(start) {
			start = s.at
		}
	}
	if start.IsZero() {
		start = p.t.now
	}
	return start, unbounded
}

// startsBefore reports whether r, in sc's nodes, would start before the
// pass's reservation does (a job of several partitions that holds it
// compares its other partitions: multipart.go).
func (p *pass) startsBefore(r *place.Request, sc *place.Shape) bool {
	slots := p.soonest(r, sc)
	if slots == nil {
		return false
	}
	start, unbounded := p.slotsStart(slots)
	return !unbounded && (p.resv.Unbounded || start.Before(p.resv.Start))
}

// unreserve takes the pass's reservation back: its job, of several
// partitions, started in another of them or reserves in one where it
// starts sooner (multipart.go). Its nodes are free for every later job
// again, and the change no longer holds it. The shapes found for jobs that
// kept off the reserved nodes (AvoidReserved) dropped those nodes for good
// (Refresh only drops): they are scanned again when next needed.
func (p *pass) unreserve() {
	for _, i := range p.reservedViews {
		p.views[i].Reserved = false
	}
	p.reservedViews = p.reservedViews[:0]
	rs := p.t.c.Reservations
	for i := len(rs) - 1; i >= 0; i-- {
		if rs[i].Cluster == p.name && rs[i].Job == p.resv.Job {
			p.t.c.Reservations = slices.Delete(rs, i, i+1)
			break
		}
	}
	p.resv, p.resvGap, p.resvGapOK = nil, 0, false
	for i := 1; i < len(p.slots); i += 2 { // shapeSlot: odd indexes avoid
		p.slots[i] = nil
	}
	for k := range p.shapes {
		if k.AvoidsReserved() {
			delete(p.shapes, k)
		}
	}
}

// mayPreempt reports whether j could preempt anything: its QOS may preempt
// some QOS, or its partition is above the cluster's lowest tier.
func (p *pass) mayPreempt(qos int32, pi int) bool {
	if qos >= 0 && len(p.t.s.cfg.QOS[qos].Preempt) > 0 {
		return true
	}
	for _, pt := range p.parts {
		if pt.Tier < p.parts[pi].Tier {
			return true
		}
	}
	return false
}

// preemptedRun is a run being preempted and its index in its cluster's
// active runs, -1 for the change's version of a run.
type preemptedRun struct {
	run *Run
	pos int32
}

// preempting returns, per preemptor, the runs already being preempted for
// it (built once per pass, kept current by preempt).
func (p *pass) preempting() map[string][]preemptedRun {
	if p.preemptFor == nil {
		p.preemptFor = map[string][]preemptedRun{}
		if ci := p.t.s.byCluster[p.name]; ci != nil && len(p.t.c.Runs) == 0 {
			// The change edits no run: the stored runs being preempted
			// are those whose indexes preemptPos keeps, taken in the
			// order of the runs, without a look at each of 25,000 runs.
			pos := slices.Clone(ci.preemptPos)
			slices.Sort(pos)
			for _, i := range pos {
				r := ci.active[i]
				p.preemptFor[r.PreemptBy] = append(p.preemptFor[r.PreemptBy], preemptedRun{r, i})
			}
			return p.preemptFor
		}
		p.t.eachClusterRun(p.name, func(r *Run, pos int32, _ bool) {
			if c := p.current(r); c.PreemptBy != "" {
				if c != r {
					pos = -1
				}
				p.preemptFor[c.PreemptBy] = append(p.preemptFor[c.PreemptBy], preemptedRun{c, pos})
			}
		})
	}
	return p.preemptFor
}

// held returns what run r holds on node.
func held(r *Run, node string) holding {
	h := holding{run: r, mem: r.MemMB, excl: r.Exclusive}
	if r.key != "" && len(r.Nodes) > 0 && r.Nodes[0] == node {
		// A committed run on its first node (every single-node run): its
		// GPUs there were counted by putRun, and its rank is 0.
		h.gpus = r.gpu0
		if len(r.CPUs) > 0 {
			h.cpus = r.CPUs[0]
		}
		return h
	}
	h.gpus = int32(len(r.GPUs[node]))
	if k := r.rank(node); k >= 0 && k < len(r.CPUs) {
		h.cpus = r.CPUs[k]
	}
	return h
}

// preempt looks for running jobs whose requeue would let j start: the
// lowest-priority victims first (fewest nodes among equals), as few as it
// takes. It reports how many it began preempting, or waiting=true when the
// jobs already being preempted for j will make room. Runs being preempted
// for other jobs are theirs: they are neither counted nor chosen again.
//
// Without backfill, the nodes kept for a blocked partition (blockFIFO) are
// neither counted nor freed: slurmctld preempts within avail_node_bitmap,
// which no longer has them.
//
// Only the nodes the victims touch are looked at closely: the count of
// nodes that fit j already is a comparison per node of its shape.
func (p *pass) preempt(j *Job, a *jobAttrs, r *place.Request, sc *place.Shape) (victims int, waiting bool) {
	if len(sc.Avail) < r.Nodes {
		return 0, false
	}
	pi := r.Partition // the one the job is judged in (a multi-partition job: multipart.go)
	at := p.viewIndex()
	if sc.InAvail == nil {
		sc.InAvail = make([]bool, len(p.views))
		for _, i := range sc.Avail {
			sc.InAvail[i] = true
		}
	}
	fitting := p.fittingNow(r, sc)
	rooms := map[int32]*room{}
	// release frees what run h.run holds on view i, counting the node
	// once it newly fits.
	release := func(i int32, node string, rn *Run) {
		rm := rooms[i]
		if rm == nil {
			x := p.roomOf(r, i)
			rm = &x
			rooms[i] = rm
		}
		before := p.fits(r, i, *rm)
		rm.release(held(rn, node))
		if !before && p.fits(r, i, *rm) {
			fitting++
		}
	}
	for _, pr := range p.preempting()[j.Name()] { // its own victims, already on their way out
		rn := pr.run
		if pr.pos >= 0 && p.viewCache != nil {
			for _, h := range p.viewCache.heldViews(rn, pr.pos) {
				if sc.InAvail[h.i] && !p.fifoExcluded(h.i) {
					release(h.i, h.node, rn)
				}
			}
			continue
		}
		for _, node := range rn.Nodes {
			if i, ok := at[node]; ok && sc.InAvail[i] && !p.fifoExcluded(i) && rn.Holds(node) {
				release(i, node, rn)
			}
		}
	}
	if fitting >= r.Nodes {
		return 0, true
	}
	var chosen []*Run
	vl := p.victims(j.Job.GetQos(), a.qos, pi)
	for k := 0; ; k++ {
		v, ok := vl.at(k)
		if !ok {
			break
		}
		rn := p.current(v.run)
		if rn.PreemptBy != "" || rn.Ended() {
			continue
		}
		touches := false
		if rn == v.run && v.pos >= 0 && p.viewCache != nil {
			// The state's run, unedited: its nodes as the walk below
			// finds them, kept from the last pass.
			for _, h := range p.viewCache.heldViews(rn, v.pos) {
				if sc.InAvail[h.i] && !p.fifoExcluded(h.i) {
					touches = true
					release(h.i, h.node, rn)
				}
			}
		} else {
			for _, node := range rn.Nodes {
				if i, ok := at[node]; ok && sc.InAvail[i] && !p.fifoExcluded(i) && rn.Holds(node) {
					touches = true
					release(i, node, rn)
				}
			}
		}
		if !touches {
			continue
		}
		chosen = append(chosen, rn)
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
			p.requeuedJobs = append(p.requeuedJobs, rn.Job)
		}
		if p.preemptFor != nil {
			p.preemptFor[j.Name()] = append(p.preemptFor[j.Name()], preemptedRun{p.current(rn), -1})
		}
	}
	return len(chosen), false
}

// fittingNow counts the nodes of sc.Avail on which r fits with what is free
// now, the backfill reservation's included (not those kept for a blocked
// partition without backfill: blockFIFO). With the default capacity checks those are
// the shape's candidates, which place refreshed for r just before, plus the
// reserved nodes that fit when r avoids them: no scan of the partition's
// nodes per preemptor. Other checks get the scan.
func (p *pass) fittingNow(r *place.Request, sc *place.Shape) int {
	fits := func(i int32) bool {
		v := &p.views[i]
		return !v.Exclusive && place.CheckUser.Fits(r, v) && p.fits(r, i, room{gpus: v.FreeGPUs, cpus: v.FreeCPUs, mem: v.FreeMemMB, runs: v.Runs})
	}
	if !p.defaultCapacity() {
		n := 0
		for _, i := range sc.Avail {
			if fits(i) && !p.fifoExcluded(i) {
				n++
			}
		}
		return n
	}
	n := len(sc.Cand)
	if r.AvoidReserved && !p.fifoKept { // nodes kept for a blocked partition are not its to take (blockFIFO)
		for _, i := range p.reservedViews {
			if sc.InAvail[i] && fits(i) {
				n++
			}
		}
	}
	return n
}

// defaultCapacity reports whether the policy's capacity checks are exactly
// the default ones (CheckIdle, CheckUser, CheckGPUs, CheckCPUs, CheckMemory,
// CheckNotReserved), which test what fits (with CheckUser, fittingNow)
// tests and the reservation.
func (p *pass) defaultCapacity() bool {
	if p.capacityKnown == 0 {
		p.capacityKnown = 2
		want := map[uintptr]bool{}
		for _, c := range []place.Check{place.CheckIdle, place.CheckUser, place.CheckGPUs, place.CheckCPUs, place.CheckMemory, place.CheckNotReserved} {
			want[reflect.ValueOf(c.Fits).Pointer()] = true
		}
		n := 0
		for _, c := range p.t.s.cfg.Policy.Checks {
			if c.Kind != place.Capacity {
				continue
			}
			if !want[reflect.ValueOf(c.Fits).Pointer()] {
				return false
			}
			n++
		}
		if n == len(want) {
			p.capacityKnown = 1
		}
	}
	return p.capacityKnown == 1
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
