package domain

import (
	"maps"
	"math"
	"math/bits"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/loom-ml/loom/libs/clusterspec"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/scheduler/internal/domain/place"
)

// pass runs the queue of every cluster the event touched.
func (t *txn) pass() {
	clusters := make([]string, 0, len(t.dirty))
	for c := range t.dirty {
		if c != "" {
			clusters = append(clusters, c)
		}
	}
	sort.Strings(clusters)
	for _, c := range clusters {
		t.drain(c)
		t.schedule(c)
	}
}

// pass is one scheduling pass over one cluster's queue: the nodes as the
// pass sees them (what is free, updated as jobs start), the feasible nodes
// per job shape, and the backfill reservation.
type pass struct {
	t       *txn
	name    string
	cluster *Cluster
	parts   []Partition
	views   []place.NodeView
	// held[i] are the runs holding part of views[i].
	held [][]*Run
	// shapes caches, per job shape, the nodes that may take it: jobs of one
	// shape share one scan of the nodes per pass.
	shapes map[place.ShapeKey]*place.Shape
	// lists holds the host lists of the jobs with lists, by the lists as
	// written (see hostLists).
	lists map[string]*hostLists
	// slots holds the same shapes by interned request, partition and
	// AvoidReserved (see shapeSlot), grown as needed.
	slots []*place.Shape
	// static: the static checks' results kept across passes (nil: none).
	static *staticCache
	// owned: some node is held by an --exclusive=user run, so which nodes
	// fit a job depends on its user (requestIn sets Request.User).
	// usersFilled: the views' OnlyUser are set (fillOnlyUsers).
	owned, usersFilled bool
	// partNodes and partMaxGPUs: compute nodes and the largest node's GPUs
	// per partition (lazy).
	partNodes   []int
	partMaxGPUs []int32
	// blocked has bit i set once a job of partition i could not start for
	// resources: the jobs after it wait with reason Priority.
	blocked uint64
	// fifoParts: without backfill, bit i is set once a job of partition i
	// could not start: the partition's later jobs wait (gateFIFO). fifoKept:
	// the Reserved views are the nodes those partitions share with others,
	// kept from every later job (blockFIFO), which avoids them.
	fifoParts uint64
	fifoKept  bool
	// gates are the gates this pass calls (passGates); plainGates those of
	// them a job without any of the flags in gateFlags goes through (the
	// gates that look only at flagged jobs left out: see consider).
	gates      []*gate
	plainGates []*gate
	gateFlags  qflags
	resv       *Reservation
	// resvGap is resv.Start less now, when resvGapOK (see avoidsReserved).
	resvGap     time.Duration
	resvGapOK   bool
	prio        *prioCtx
	schedulable bool
	// Lazy per-pass indexes.
	arrayRunning map[string]int32
	qosUse       map[assocKey]int32
	assocRunning map[assocKey]int32 // assoclimits.go
	tresUse      *tresCounts        // assoctres.go
	singleton    map[assocKey]int64
	viewAt       map[string]int32
	// viewCache is viewAt's entry in scratch, nil without scratch.
	viewCache *viewIndexCache
	hbuf      []holding
	// victimCache and preemptFor: lazy preemption indexes (see victims, preempting).
	victimCache map[victimKey]*victimList
	victimPrio  map[*Run]int64
	preemptFor  map[string][]preemptedRun
	preempts    int
	// reservedViews are the views of the backfill reservation's nodes;
	// capacityKnown caches defaultCapacity (0 not yet, 1 yes, 2 no).
	reservedViews []int32
	capacityKnown int8
	started       bool
	depWaiting    bool
	// requeued: a preemption in this pass put jobs back in the queue;
	// requeuedJobs names the jobs it requeued.
	requeued     bool
	requeuedJobs []string
	// unedited: the change held no job version when the pass began, so a
	// job of the queue has none until the pass gives it one (a pass edits
	// only the job it considers, and the running jobs it preempts, which
	// are not in its queue). Cleared before the requeued jobs are looked at.
	unedited bool
	// records: the walk gives jobs their reasons as reason records (see
	// Emit), not versions. at is the queue's order (indexes of the entries
	// as read, in memory order) when it was gathered, and pos the position
	// of the job being considered.
	records bool
	at      []int32
	pos     int32
	// loc, when not nil, maps a position of the order to its entry in
	// the queue order returned (see scratch.loc and pass.entry).
	loc []int32
	// prios are this pass's priorities by entry as read (at's indexes),
	// when the order came from them (nil: each queued entry's own prio;
	// see prioOf).
	prios []int64
	// fresh counts the queued jobs without a reason yet: each will get
	// one, and a record and an event in the change.
	fresh int
	// multiq are the jobs of several partitions whose next queue record
	// the walk has not reached yet, by that record's (rank, id); hold,
	// while one of them is decided, keeps its decision from being emitted
	// before its last record (multipart.go).
	multiq []*multiRec
	hold   *multiRec
	// ahead, when not nil, is the job of several partitions the pass's
	// reservation is kept for, to be made at its record ahead.ahead
	// (reservesLater): no other job reserves meanwhile.
	ahead *multiRec
	// req is the request of the job being considered, blk the job when it
	// is blocked; wide its request at a width of its node range other
	// than the minimum (placeWidths).
	req  place.Request
	wide place.Request
	blk  blocked
	wake time.Time
}

// queued is a pending job with its order keys, and the attributes the pass
// reads of every job: the queue is read in order, its entries in memory
// order, where the jobs' own entries would be read all over memory (the
// other attributes are read only for the few jobs whose flags say so).
type queued struct {
	// rank and prio: −(tier<<40 | priority), lower first, and the
	// priority in it (0 when the policy orders otherwise), as of the pass
	// that last wrote the entry: a mended queue's entry may hold an earlier
	// pass's (read the priority with pass.prioOf).
	rank int64
	prio int64
	id   int64
	e    *pendEntry
	j    *Job
	// name and reason: the job's name and its reason as read.
	name, reason string
	limit        int64 // --time in seconds; 0: the partition's
	part         int32
	shape        int32 // the interned request (jobAttrs.shape)
	qos          int32
	flags        qflags
}

// qflags are the attributes a gate needs to look further at a job for.
type qflags uint8

const (
	qHold qflags = 1 << iota
	qBegin
	qDeps
	qRan
	qArray
	// qMulti: the job names several partitions (multipart.go).
	qMulti
)

// schedule serves the cluster's queue in policy order (see Policy): each job
// that may run and fits starts; the others wait with their Slurm reason.
func (t *txn) schedule(cluster string) {
	t.c.passed = append(t.c.passed, cluster)
	pend := t.pendingEntries(cluster)
	if len(pend) == 0 {
		if _, ok := t.s.wake[cluster]; ok {
			t.c.wake[cluster] = time.Time{}
		}
		return
	}
	c := t.cluster(cluster)
	if c == nil {
		c = &Cluster{Name: cluster}
	}
	p := t.newPass(cluster, c)
	p.unedited = len(t.c.Jobs) == 0
	if cap(t.c.Decisions) == 0 {
		t.c.Decisions = t.decisionsBuffer(len(pend))
	}
	queue := p.order(pend)
	// Every job of the queue is a stored one (unedited), read from its
	// pending entry: the reasons the walk gives are records. at says where
	// each entry is (else a record finds it by name).
	p.records = p.unedited && !t.s.reasonVersions
	if p.fresh > 1024 {
		t.c.reserveJobs(p.fresh, p.records)
	}
	p.pos = -1
	for i := range queue {
		q := p.entry(queue, i)
		if len(p.multiq) > 0 {
			// The records of jobs of several partitions that rank
			// before this entry (multipart.go).
			p.runMulti(p.rankAt(q, i), q.id)
		}
		if p.at != nil {
			p.pos = p.at[i]
		}
		p.consider(q)
	}
	p.runMulti(math.MaxInt64, math.MaxInt64)
	p.prios = nil // the requeued jobs' entries below carry their own
	if p.requeued {
		// Jobs preempted by this pass are pending again: give them their
		// reason now, after every job that was already waiting. Only the
		// pass's victims can have become pending since the queue was read
		// (the others were in it or were not pending), so only they are
		// looked at, not every job of the change.
		p.unedited = false
		back := map[string]*pendEntry{}
		for _, name := range p.requeuedJobs {
			if j := t.job(name); j != nil && j.Pending() && j.Job.GetCluster() == cluster {
				back[name] = nil
			}
		}
		// A job started by this pass, then preempted, was seen: the queue
		// entries are matched by job id first (fixed at submission, parsed
		// as newAttrs does), and only an entry of a victim's id by name:
		// not a hash of each of the 100,000 queued names.
		ids := make(map[int64]bool, len(back))
		for name := range back {
			id, _ := strconv.ParseInt(t.job(name).Job.GetJobId(), 10, 64)
			ids[id] = true
		}
		for i := range queue {
			if q := &queue[i]; ids[q.id] {
				delete(back, q.e.name)
			}
		}
		// In name order: the decisions (and emits) must not depend on
		// the order victims were picked in.
		for _, name := range slices.Sorted(maps.Keys(back)) {
			j := t.job(name)
			q := p.queued(&pendEntry{j: j, jobAttrs: *t.s.newAttrs(j, false)})
			p.consider(&q)
			p.runMulti(math.MaxInt64, math.MaxInt64)
		}
	}
	if p.started && p.depWaiting {
		// A job that started may satisfy an "after" dependency of one
		// looked at before it: look again at the next tick.
		p.wakeAt(t.now)
	}
	if !p.wake.IsZero() {
		t.c.wake[cluster] = p.wake
	} else if _, ok := t.s.wake[cluster]; ok {
		t.c.wake[cluster] = time.Time{}
	}
}

func (p *pass) wakeAt(at time.Time) {
	if p.wake.IsZero() || at.Before(p.wake) {
		p.wake = at
	}
}

// newPass builds the pass's view of the cluster's nodes: partitions and what
// the active runs (as the change leaves them) hold on each.
func (t *txn) newPass(name string, c *Cluster) *pass {
	nodes := t.clusterNodes(name)
	var views []place.NodeView
	var held [][]*Run
	if t.scratch != nil && cap(t.scratch.views) >= len(nodes) {
		views = t.scratch.views[:len(nodes)]
		clear(views)
		held = t.scratch.held[:len(nodes)]
		clear(held)
	} else {
		views = make([]place.NodeView, len(nodes))
		held = make([][]*Run, len(nodes))
		if t.scratch != nil {
			t.scratch.views, t.scratch.held = views, held
		}
	}
	p := &pass{t: t, name: name, cluster: c, parts: c.EffectivePartitions(), views: views, held: held,
		shapes: map[place.ShapeKey]*place.Shape{}, schedulable: c.Schedulable()}
	p.static = t.staticCacheFor(name, c, nodes)
	p.gates = passGates(p)
	for _, g := range p.gates {
		if g.only != 0 {
			p.gateFlags |= g.only
		} else {
			p.plainGates = append(p.plainGates, g)
		}
	}
	// Each node's partitions are kept with the static cache (the same
	// cluster record and node records): the pass reads the node records
	// only through the cache's contiguous copy (placeNode), not each of
	// 10,000 records all over memory and a map look-up for each.
	var parts []uint64
	if p.static != nil {
		parts = p.static.parts
	}
	if parts == nil {
		parts = make([]uint64, len(nodes))
		byPool, bySet := partitionMasks(c)
		for i, n := range nodes {
			switch {
			case len(c.Partitions) == 0:
				parts[i] = 1
			case n.Pool != "":
				parts[i] = byPool[n.Pool]
			default:
				prefix := n.Hostname
				if k := strings.LastIndexByte(prefix, '-'); k > 0 {
					prefix = prefix[:k]
				}
				parts[i] = bySet[prefix] | byPool[prefix]
			}
		}
		if p.static != nil {
			p.static.parts = parts
		}
	}
	over := t.allocOverlay()
	var allocs []nodeAlloc
	if p.static != nil {
		allocs = p.static.allocValsOf(t.s)
	}
	for i := range nodes {
		v := &p.views[i]
		v.Node = p.placeNode(i, nodes[i])
		n := v.Node
		v.Parts = parts[i]
		var a nodeAlloc
		if oa, ok := over[n.Name]; ok {
			a = oa
		} else if allocs != nil {
			a = allocs[i]
		} else if sa := t.s.alloc[n.Name]; sa != nil {
			a = *sa
		}
		all := uint64(1)<<uint(min(n.GPUs, MaxGPUsPerNode)) - 1
		if n.GPUs >= MaxGPUsPerNode {
			all = ^uint64(0)
		}
		v.FreeMask = all &^ a.gpuMask
		v.FreeGPUs = int32(bits.OnesCount64(v.FreeMask))
		v.FreeCPUs = n.CPUs - a.cpus
		v.FreeMemMB = n.MemoryMB - a.memMB
		v.Runs = a.runs
		v.Exclusive = a.exclusive > 0
		if a.exclUser > 0 {
			for _, r := range a.holders {
				if r.ExclusiveUser {
					v.Owner = r.User
				}
			}
			p.owned = true
		}
		p.held[i] = a.holders
	}
	return p
}

// allocOverlay returns the allocation of every node touched by a run the
// change edits, as the change leaves it.
func (t *txn) allocOverlay() map[string]nodeAlloc {
	if len(t.c.Runs) == 0 {
		return nil
	}
	out := map[string]nodeAlloc{}
	get := func(node string) nodeAlloc {
		if a, ok := out[node]; ok {
			return a
		}
		if sa := t.s.alloc[node]; sa != nil {
			return *sa
		}
		return nodeAlloc{}
	}
	for key := range t.c.Runs {
		if old := t.s.active[key]; old != nil {
			for i, node := range old.Nodes {
				if old.Holds(node) {
					a := get(node)
					a.add(old, i, node, -1)
					out[node] = a
				}
			}
		}
	}
	for _, r := range t.c.Runs {
		if r == nil || r.Released {
			continue
		}
		for i, node := range r.Nodes {
			if r.Holds(node) {
				a := get(node)
				a.add(r, i, node, 1)
				out[node] = a
			}
		}
	}
	return out
}

// partitionMasks maps node pools and node set ids to the partitions (bits)
// they are in.
func partitionMasks(c *Cluster) (byPool, bySet map[string]uint64) {
	byPool, bySet = map[string]uint64{}, map[string]uint64{}
	pools := map[string][]string{}
	for _, ns := range c.NodeSets {
		pools[ns.ID] = append(pools[ns.ID], ns.Pool)
	}
	for i, p := range c.Partitions {
		if i >= 64 {
			break
		}
		for _, set := range p.NodeSets {
			bySet[set] |= 1 << uint(i)
			for _, pool := range pools[set] {
				byPool[pool] |= 1 << uint(i)
			}
		}
	}
	return byPool, bySet
}

// order returns the pending jobs in the policy's order.
func (p *pass) order(pend []*pendEntry) []queued {
	pol := &p.t.s.cfg.Policy
	sc := p.t.scratch
	var out []queued
	if sc != nil && cap(sc.queued) >= len(pend) {
		out = sc.queued[:len(pend)]
	} else {
		out = make([]queued, len(pend))
		if sc != nil {
			sc.queued = out
		}
	}
	if pol.Less == nil && pol.Order == OrderPriority {
		p.prio = p.t.newPrioCtx(p.name, p.cluster, p.views, pend)
	}
	// The order keys are also copied apart, as the entries are built: the
	// mend of the previous order (reuseOrder) compares them all over, and
	// a reorder of this queue compares its new keys and priorities with
	// these (see reorder).
	var keys []rankID
	var prios []int64
	if sc != nil {
		if cap(sc.ranks) < len(pend) {
			sc.ranks = make([]rankID, len(pend))
		}
		keys = sc.ranks[:len(pend)]
	}
	key := p.queueKey(pend)
	if key.ci != nil && sc.queue == key && len(sc.sorted) >= len(pend) {
		if sorted, ok := p.reorder(out, pend, keys); ok {
			return sorted
		}
	}
	if sc != nil {
		sc.queue = queueKey{}
		if cap(sc.prios) < len(pend) {
			sc.prios = make([]int64, len(pend))
		}
		prios = sc.prios[:len(pend)]
	}
	// The priority inputs are copied apart too when a later pass may
	// reorder this queue (see reorder): 24 bytes a job to read again
	// where the entries are hundreds.
	var ins []prioIn
	var steps []int64
	if key.ci != nil && p.prio != nil && len(p.parts) <= math.MaxInt16 {
		if cap(sc.prioIns) < len(pend) {
			sc.prioIns = make([]prioIn, len(pend))
		}
		ins = sc.prioIns[:len(pend)]
		steps = sc.ageStepsMade(p.prio.cfg)
	} else if sc != nil {
		sc.prioIns = sc.prioIns[:0]
	}
	for i, e := range pend {
		out[i] = p.queued(e)
		if keys != nil {
			keys[i], prios[i] = rankID{out[i].rank, out[i].id}, out[i].prio
		}
		if ins != nil {
			ins[i] = prioInOf(&e.jobAttrs, out[i].part)
			// The job's age step now, which the next pass's sumIn
			// checks and most likely reuses: else that pass, the first
			// to reorder, finds it for every job.
			if in := &ins[i]; steps != nil && !in.slow && !in.hold && in.eligible > 0 && p.prio.now > in.eligible {
				in.age = int16(ageLevel(steps, p.prio.now-in.eligible)) // at most maxAgeSteps+1
			}
		}
		if e.reason == "" {
			p.fresh++
		}
	}
	if ins != nil {
		sc.prioIns = ins
	}
	if pol.Less != nil {
		slices.SortStableFunc(out, func(a, b queued) int {
			switch {
			case pol.Less(a.e.j, b.e.j):
				return -1
			case pol.Less(b.e.j, a.e.j):
				return 1
			}
			return 0
		})
		return out
	}
	// Higher tier and priority first, then lower id. When the spans of
	// ranks and ids fit 64 bits together and ids are distinct numbers
	// (always, for gateway-assigned ids), one radix sort does it. The
	// queue is then gathered in that order: one walk of independent reads
	// all over it, which the processor overlaps, where reading the entries
	// in that order as the pass goes would wait for each.
	at, _, ok := reuseOrder(keys, sc)
	if !ok {
		at, ok = radixOrder(out, sc)
	}
	if ok {
		if key.ci != nil {
			key.fresh = p.fresh
			sc.queue = key
		}
		var sorted []queued
		if sc != nil {
			if cap(sc.sorted) < len(out) {
				sc.sorted = make([]queued, len(out))
			}
			sorted = sc.sorted[:len(out)]
		} else {
			sorted = make([]queued, len(out))
		}
		if keys != nil {
			sc.permKeys = gatherQueue(sorted, sc.permKeys, out, at)
			sc.loc, sc.locMends = sc.loc[:0], 0
		} else {
			for k, i := range at {
				sorted[k] = out[i]
			}
		}
		p.at, p.prios = at, prios
		return sorted
	}
	// Else a comparison sort (the name breaks ties between ids that are not numbers).
	slices.SortFunc(out, func(a, b queued) int {
		switch {
		case a.rank != b.rank:
			if a.rank < b.rank {
				return -1
			}
			return 1
		case a.id != b.id:
			if a.id < b.id {
				return -1
			}
			return 1
		}
		return strings.Compare(a.e.name, b.e.name)
	})
	return out
}

// queueKey identifies the queue pend is: the cluster's pending entries as
// of their version, in the pass's partitions (its cluster record). Its ci
// is nil when the pass cannot reuse a queue: a txn without scratch, a
// policy with its own order, or a change that edits jobs (pend then holds
// entries of its own).
type queueKey struct {
	ci      *clusterIndex
	ver     uint64
	cluster *Cluster
	first   *pendEntry
	n       int
	// fresh is the queue's count of jobs without a reason (pass.fresh).
	fresh int
}

func (p *pass) queueKey(pend []*pendEntry) queueKey {
	t := p.t
	ci := t.s.byCluster[p.name]
	if t.scratch == nil || t.s.cfg.Policy.Less != nil || !p.unedited || ci == nil || len(pend) == 0 ||
		len(pend) != len(ci.pending) {
		return queueKey{}
	}
	return queueKey{ci: ci, ver: ci.pendVer, cluster: p.cluster, first: pend[0], n: len(pend)}
}

// reorder is order for the queue the last pass ordered (the same entries,
// unchanged, in the same memory order: scratch's queue key says so). Only
// the priorities can differ (the clock ages jobs, fair share decays): out
// keeps its entries, each gets its new priority, and the last order is
// mended (mendOrder), else sorted again; when no job's rank changed, the
// last pass's queue stands as it is. It reports false when the comparison
// sort must order the queue.
func (p *pass) reorder(out []queued, pend []*pendEntry, keys []rankID) ([]queued, bool) {
	sc := p.t.scratch
	n := len(pend)
	if cap(sc.prios) < n {
		sc.prios = make([]int64, n)
	}
	prios := sc.prios[:n]
	// changed marks the jobs whose rank or priority is not the last
	// pass's (keys and prios still hold the last pass's as each is
	// replaced): every job left unmarked keeps its entry as it is.
	words := (n + 63) / 64
	if cap(sc.changed) < words {
		sc.changed = make([]uint64, words)
	}
	changed := sc.changed[:words]
	clear(changed)
	m := 0
	mark := func(i int, rank, prio int64) {
		if rank != keys[i].rank || prio != prios[i] {
			changed[i>>6] |= 1 << (i & 63)
			m++
		}
	}
	// fresh: out's entries do not hold the new priorities (only keys and
	// prios do) until written back below.
	fresh := false
	if p.prio != nil && len(sc.prioIns) == n {
		// From the compact copy of the inputs, without a look at the
		// entries (out) or the pending entries (pend): a walk of 2.4 MB
		// where the two are tens.
		tiers := p.prio.tierRanks(p.parts)
		steps := sc.ageStepsOf(p.prio.cfg)
		for i := range sc.prioIns {
			in := &sc.prioIns[i]
			prio, ok := p.prio.sumIn(in, steps)
			if !ok {
				prio = p.prio.sum(&pend[i].jobAttrs, int(in.part))
			}
			rank := -prio
			if in.part >= 0 {
				rank = -(tiers[in.part] | prio)
			}
			// Written only when changed: most jobs keep theirs, and a
			// store of the same value still dirties 2.4 MB of lines.
			if rank != keys[i].rank || prio != prios[i] {
				mark(i, rank, prio)
				keys[i].rank, prios[i] = rank, prio
			}
		}
		fresh = true
	} else if p.prio != nil {
		for i, e := range pend {
			q := &out[i]
			tier := int32(0)
			if q.part >= 0 {
				tier = p.parts[q.part].Tier
			}
			q.prio = p.prio.sum(&e.jobAttrs, int(q.part))
			q.rank = -(int64(tier)<<40 | q.prio)
			mark(i, q.rank, q.prio)
			keys[i] = rankID{q.rank, q.id}
			prios[i] = q.prio
		}
	} else {
		for i := range out {
			mark(i, out[i].rank, out[i].prio)
			keys[i] = rankID{out[i].rank, out[i].id}
			prios[i] = out[i].prio
		}
	}
	var sorted []queued
	switch {
	case len(sc.perm) == n && m == 0:
		// No job marked: the last order and its queue stand, ranks and
		// priorities included.
		sorted, p.at = sc.sorted[:n], sc.perm
		if len(sc.loc) == n {
			p.loc = sc.loc
		}
	case len(sc.perm) == n && m <= n/2 && p.mend(keys, prios, changed):
		sorted = sc.sorted[:n]
	default:
		// Too many moved (or their keys tie): sort the entries anew,
		// still without building them anew.
		if fresh {
			for i := range out {
				out[i].rank, out[i].prio = keys[i].rank, prios[i]
			}
		}
		at, ok := radixOrder(out, sc)
		if !ok {
			return nil, false
		}
		sorted = sc.sorted[:n]
		sc.permKeys = gatherQueue(sorted, sc.permKeys, out, at)
		sc.loc, sc.locMends = sc.loc[:0], 0
		p.at = at
	}
	// The queue's entries may hold older priorities than prios (mend
	// does not write the moved jobs' into their entries): the pass reads
	// them from prios (prioOf).
	p.prios = prios
	p.fresh = sc.queue.fresh
	sc.reorders++
	return sorted, true
}

// mend makes scratch's perm (the last pass's order) this pass's when the
// jobs marked in changed have new ranks (keys, prios): the order from
// mendOrder, and the positions of the queue's entries (scratch.loc) moved
// with it, a run of unmoved jobs at a time: the entries themselves stay
// where they are (sorted), read through loc (pass.entry) nearly in memory
// order, where copying 100 bytes a job into the new order cost more than
// the pass reading them a little out of it; every mendsPerGather mends
// they are gathered in the order again. The moved jobs' entries keep
// their last rank and priority: only prios (by entry as read, in the
// order's own indexes) holds the new ones, which the pass reads (prioOf).
// The new order is written to the other of scratch's two buffers of each,
// so the last one stays whole as it is read, and then swapped in. It
// reports false, changing nothing, when keys tie.
func (p *pass) mend(keys []rankID, prios []int64, changed []uint64) bool {
	sc := p.t.scratch
	n := len(keys)
	if cap(sc.src) < n {
		sc.src = make([]int32, n)
	}
	var pk []rankID
	if len(sc.permKeys) == n {
		pk = sc.permKeys
	}
	src, ok := mendOrder(keys, sc.perm, pk, changed, sc, sc.src[:n])
	if !ok {
		return false
	}
	if cap(sc.permKeysAlt) < n {
		sc.permKeysAlt = make([]rankID, n)
	}
	if cap(sc.permAlt) < n {
		sc.permAlt = make([]int32, n)
	}
	if cap(sc.locAlt) < n {
		sc.locAlt = make([]int32, n)
	}
	oldPerm, oldLoc := sc.perm, sc.loc
	if len(oldLoc) != n {
		oldLoc = nil // sorted is in the last order
	}
	at, loc, npk := sc.permAlt[:n], sc.locAlt[:n], sc.permKeysAlt[:n]
	// The moved jobs come in src in mendOrder's order of sc.moved, whose
	// keys are theirs.
	mi := 0
	for w := 0; w < n; {
		s := src[w]
		if s < 0 {
			k := ^s
			at[w] = oldPerm[k]
			if oldLoc != nil {
				loc[w] = oldLoc[k]
			} else {
				loc[w] = k
			}
			npk[w] = sc.moved[mi].key
			mi++
			w++
			continue
		}
		e := w + 1
		for e < n && src[e] == s+int32(e-w) {
			e++
		}
		copy(at[w:e], oldPerm[s:int(s)+e-w])
		if oldLoc != nil {
			copy(loc[w:e], oldLoc[s:int(s)+e-w])
		} else {
			for x := w; x < e; x++ {
				loc[x] = s + int32(x-w)
			}
		}
		if pk != nil {
			copy(npk[w:e], pk[s:int(s)+e-w])
		} else {
			for x := w; x < e; x++ {
				npk[x] = keys[at[x]]
			}
		}
		w = e
	}
	sc.perm, sc.permAlt = at, oldPerm[:0]
	sc.loc, sc.locAlt = loc, sc.loc[:0]
	sc.permKeys, sc.permKeysAlt = npk, sc.permKeys[:0]
	sc.mends++
	p.at, p.loc = at, loc
	if sc.locMends++; sc.locMends >= mendsPerGather {
		// The order has strayed from the entries' memory order for a
		// while: gather them in it again.
		if len(sc.sortedAlt) < n {
			sc.sortedAlt = make([]queued, len(sc.sorted))
		}
		sorted := sc.sortedAlt[:n]
		for k, i := range loc {
			sorted[k] = sc.sorted[i]
		}
		sc.sorted, sc.sortedAlt = sc.sortedAlt, sc.sorted
		sc.loc, sc.locMends = sc.loc[:0], 0
		p.loc = nil
	}
	return true
}

// mendsPerGather is how many mends in a row move the order's positions
// (scratch.loc) before the entries are gathered in the order again: a mend
// moves ~15% of the jobs a short way each, so the entries stay read nearly
// in memory order for a while, and a gather (the copy of every entry)
// costs what each mend's copy did.
const mendsPerGather = 16

// entry is the entry at position k of the pass's order of queue (see loc).
func (p *pass) entry(queue []queued, k int) *queued {
	if p.loc != nil {
		return &queue[p.loc[k]]
	}
	return &queue[k]
}

// gatherQueue writes out's entries in the order at into sorted, and
// returns their keys along it (scratch.permKeys), in buf's array when it
// is large enough: read from the entries just written, not all over the
// keys by entry (the entries hold their keys as the order was made).
func gatherQueue(sorted []queued, buf []rankID, out []queued, at []int32) []rankID {
	if cap(buf) < len(at) {
		buf = make([]rankID, len(at))
	}
	buf = buf[:len(at)]
	for k, i := range at {
		sorted[k] = out[i]
		buf[k] = rankID{sorted[k].rank, sorted[k].id}
	}
	return buf
}

// movedJob is a job mendOrder moves: its new key and its position in the
// last order.
type movedJob struct {
	key rankID
	pos int32
}

// mendOrder returns the order of keys from perm, their order when the
// keys of the jobs marked in changed were others: the unmarked jobs keep
// their order among themselves (their keys are the same), so the new
// order is theirs merged with the marked jobs' sorted. It costs a walk of
// perm and a sort of the marked jobs (found in perm's order, which is
// nearly theirs: a user's fair share moves all of its jobs alike, age
// moves jobs a step at a time), where a sort of every key costs several
// walks. The result is exact, as reuseOrder's: keys strictly increasing
// along a permutation are their one sorted order. It is given as src,
// per position of the new order: the position in perm of the job there,
// for an unmarked job, else ^that position. It reports false when keys
// tie (the sort's tie-break decides). sc lends the buffer for the marked
// jobs (sc.moved: in the order they are in src). permKeys, when not nil,
// are the keys along perm as the last order had them (an unmarked job's
// is its key): the walk then reads them in order, not keys all over.
func mendOrder(keys []rankID, perm []int32, permKeys []rankID, changed []uint64, sc *scratch, src []int32) ([]int32, bool) {
	less := func(a, b rankID) bool { return a.rank < b.rank || (a.rank == b.rank && a.id < b.id) }
	moved := sc.moved[:0]
	for k, i := range perm {
		if changed[i>>6]&(1<<(i&63)) != 0 {
			moved = append(moved, movedJob{keys[i], int32(k)})
		}
	}
	sc.moved = moved
	// An insertion sort while the moves stay few, else a sort.
	budget := 4*len(moved) + 64
	for k := 1; k < len(moved) && budget >= 0; k++ {
		x := moved[k]
		m := k
		for ; m > 0 && less(x.key, moved[m-1].key); m-- {
			moved[m] = moved[m-1]
			budget--
		}
		moved[m] = x
	}
	if budget < 0 {
		slices.SortFunc(moved, func(a, b movedJob) int {
			switch {
			case less(a.key, b.key):
				return -1
			case less(b.key, a.key):
				return 1
			}
			return 0
		})
	}
	for k := 1; k < len(moved); k++ {
		if moved[k].key == moved[k-1].key {
			return nil, false
		}
	}
	w, k := 0, 0
	for _, c := range moved {
		for ; k < len(perm); k++ {
			i := perm[k]
			if changed[i>>6]&(1<<(i&63)) != 0 {
				continue
			}
			var ki rankID
			if permKeys != nil {
				ki = permKeys[k]
			} else {
				ki = keys[i]
			}
			if !less(ki, c.key) {
				if ki == c.key {
					return nil, false
				}
				break
			}
			src[w] = int32(k)
			w++
		}
		src[w] = ^c.pos
		w++
	}
	for ; k < len(perm); k++ {
		if i := perm[k]; changed[i>>6]&(1<<(i&63)) == 0 {
			src[w] = int32(k)
			w++
		}
	}
	return src[:w], true
}

// queued is e with its order keys.
func (p *pass) queued(e *pendEntry) queued {
	q := queued{e: e, j: e.j, id: e.id, part: int32(p.partIndex(e.part)), name: e.name, reason: e.reason,
		limit: e.limit, shape: e.shape, qos: e.qos}
	if e.hold {
		q.flags |= qHold
	}
	if e.begin > 0 {
		q.flags |= qBegin
	}
	if e.deps {
		q.flags |= qDeps
	}
	if e.ran {
		q.flags |= qRan
	}
	if e.array {
		q.flags |= qArray
	}
	if e.multi {
		q.flags |= qMulti
		q.part = int32(p.multiFirst(e))
	}
	if p.prio != nil {
		tier := int32(0)
		if q.part >= 0 {
			tier = p.parts[q.part].Tier
		}
		q.prio = p.prio.sum(&e.jobAttrs, int(q.part))
		q.rank = -(int64(tier)<<40 | q.prio)
	}
	return q
}

// reuseOrder returns the order of keys (indexes into keys),
// starting from the previous pass's order: from one pass to the next the
// queue rarely changes, nor the order of its priorities, so an insertion
// sort along the previous permutation costs a walk, where a sort costs
// several passes over every key. It gives up (false) when the permutation
// is of another length, when ids tie, or when more than a few moves would
// be needed; then the caller sorts. The result is exact: keys strictly
// increasing along a permutation of them are their one sorted order,
// whatever jobs came and went. The keys are the queue's (rank, id), apart
// from its entries: 16 bytes a job to compare where the entries are 100.
func reuseOrder(keys []rankID, sc *scratch) (perm []int32, moved, ok bool) {
	if sc == nil || len(sc.perm) != len(keys) || len(keys) == 0 {
		return nil, false, false
	}
	perm = sc.perm
	sc.permKeys = sc.permKeys[:0] // the keys change, and perm may
	less := func(a, b int32) bool {
		ka, kb := &keys[a], &keys[b]
		return ka.rank < kb.rank || (ka.rank == kb.rank && ka.id < kb.id)
	}
	budget := len(keys)/8 + 64 // moves allowed before a sort is cheaper
	for k := 1; k < len(perm); k++ {
		x := perm[k]
		if less(perm[k-1], x) {
			continue
		}
		m := k
		for m > 0 && !less(perm[m-1], x) {
			if ka, kb := &keys[perm[m-1]], &keys[x]; ka.rank == kb.rank && ka.id == kb.id {
				sc.perm = sc.perm[:0] // a tie: the sort's tie-break decides
				return nil, false, false
			}
			perm[m] = perm[m-1]
			m--
			moved = true
			if budget--; budget < 0 {
				sc.perm = sc.perm[:0]
				return nil, false, false
			}
		}
		perm[m] = x
	}
	return perm, moved, true
}

// rankID is a queued job's order key.
type rankID struct{ rank, id int64 }

// radixOrder returns the order of out by (rank, id) (indexes into out),
// from radixSort when the keys allow it (in sc's buffers when sc is not
// nil).
func radixOrder(out []queued, sc *scratch) ([]int32, bool) {
	if len(out) == 0 {
		return nil, true
	}
	minR, maxR, minID, maxID := out[0].rank, out[0].rank, out[0].id, out[0].id
	for _, q := range out {
		if q.id <= 0 {
			return nil, false
		}
		minR, maxR = min(minR, q.rank), max(maxR, q.rank)
		minID, maxID = min(minID, q.id), max(maxID, q.id)
	}
	// The key is rank·2^idBits + id, with as many bits for ids as their
	// span needs: tiers put ranks 2^40 apart, so a fixed split would not do.
	idBits := uint(bits.Len64(uint64(maxID - minID)))
	if bits.Len64(uint64(maxR-minR))+int(idBits) > 64 {
		return nil, false
	}
	var keys, buf []keyed
	if sc != nil {
		if cap(sc.keys) < len(out) {
			sc.keys, sc.radix = make([]keyed, len(out)), make([]keyed, len(out))
		}
		keys, buf = sc.keys[:len(out)], sc.radix[:len(out)]
	} else {
		keys, buf = make([]keyed, len(out)), make([]keyed, len(out))
	}
	for i, q := range out {
		keys[i] = keyed{key: uint64(q.rank-minR)<<idBits | uint64(q.id-minID), i: int32(i)}
	}
	radixSort(keys, buf)
	var perm []int32
	if sc != nil {
		perm = sc.perm[:0]
		sc.permKeys = sc.permKeys[:0]
	}
	perm = slices.Grow(perm, len(keys))
	for k, key := range keys {
		if k > 0 && key.key == keys[k-1].key {
			if sc != nil {
				sc.perm = perm[:0]
			}
			return nil, false // duplicate ids: the comparison sort breaks the tie
		}
		perm = append(perm, key.i)
	}
	if sc != nil {
		sc.perm = perm
	}
	return perm, true
}

// rankAt is the rank in this pass of q, the entry at position i of the
// order: from the order's keys when the pass has them (see prioOf), else
// the entry's.
func (p *pass) rankAt(q *queued, i int) int64 {
	if p.prios != nil {
		return p.t.scratch.ranks[p.at[i]].rank
	}
	return q.rank
}

// prioOf is the priority of q's job in this pass: from prios when the
// pass has them (the entry's own may be an earlier pass's, see mend),
// else the entry's.
func (p *pass) prioOf(q *queued) int64 {
	if p.prios != nil {
		return p.prios[p.pos]
	}
	return q.prio
}

// partIndex is the index of the partition named name ("" the default), or -1.
func (p *pass) partIndex(name string) int {
	for i := range p.parts {
		if (name == "" && p.parts[i].Default) || (name != "" && p.parts[i].Name == name) {
			return i
		}
	}
	if name == "" && len(p.parts) > 0 {
		return 0
	}
	return -1
}

// jobGPUs is how many GPUs a job asks for in all.
func jobGPUs(j *Job) int32 {
	if g := j.Job.GetGpusPerNode(); g > 0 {
		return g * max(j.Job.GetNodeCount(), 1)
	}
	return j.Job.GetGpus()
}

// consider decides what becomes of one pending job in the pass: the gates,
// then placement (the feasibility checks and the rankers), then, for a job
// with too few nodes free, the blocked-job stages (see chain.go).
func (p *pass) consider(q *queued) {
	// Only q is read here, in queue order; the job's entry (q.e) only by
	// the gates whose flags say so, and by the blocked-job stages that act.
	// Not even its address is taken before: &q.e.jobAttrs reads q.e (a nil
	// check), a cache miss per job in a queue read all over memory.
	if q.flags&qMulti != 0 && q.part >= 0 {
		// A record per partition, each at its rank (multipart.go); the
		// queue's entry, which a later pass may reuse, is left as it is.
		p.considerMulti(q)
		return
	}
	j := q.j
	// Most jobs have no flag: they skip the gates that only look at
	// flagged jobs without a test per gate.
	gs := p.gates
	if q.flags&p.gateFlags == 0 {
		gs = p.plainGates
	}
	for _, g := range gs {
		if g.only != 0 && q.flags&g.only == 0 {
			continue
		}
		if reason, note := g.check(p, q); reason != "" {
			if note != "" {
				p.waitDecided(q, Decision{Job: q.name, Reason: reason, Note: note})
			} else {
				p.wait(q, reason)
			}
			return
		}
	}
	pi := int(q.part)
	if p.decideSettled(q, pi) {
		return
	}
	part := p.parts[pi]
	req, res := p.placeIn(q, pi, p.requestIn(q, pi))
	if res.ok {
		p.start(j, part, req, p.widen(q, req, res), p.prioOf(q), len(res.shape.Cand))
		return
	}
	// The blocked job lives in the pass, as the request: the stages get a
	// pointer to it, which would otherwise cost an allocation per job.
	p.blk = blocked{j: j, e: q.e, qos: q.qos, pi: pi, req: req, sc: res.shape,
		d: Decision{Job: q.name, Filtered: p.shareFiltered(res.shape), Nodes: len(p.views)}}
	d := &p.blk.d
	switch res.kind {
	case place.Static:
		reason := ReasonBadConstraints
		switch n := p.partitionNodes(pi); {
		case n == 0:
			reason = ReasonReqNodeNotAvail
		case n < req.Nodes:
			reason = ReasonPartitionNodeLimit
		}
		d.Reason = reason
		p.waitDecided(q, *d)
		return
	case place.Availability:
		d.Reason = ReasonReqNodeNotAvail
		p.waitDecided(q, *d)
		return
	}
	for si := range blockedStages {
		blockedStages[si].run(p, &p.blk)
	}
	p.waitDecided(q, *d)
}

// requestIn is the request of q's job in partition pi: its interned
// shape's, or one built for it, keeping off the backfill reservation as
// its limits say (avoidsReserved), or, without backfill, off the nodes
// kept for the partitions blocked so far (blockFIFO). It lives in the pass (p.req: one per
// pass, not one allocation per job), until the next job's.
func (p *pass) requestIn(q *queued, pi int) *place.Request {
	if q.shape >= 0 {
		p.req = p.t.s.shapeReqs[q.shape]
		p.req.Partition = pi
	} else {
		p.req = p.request(q.j, &q.e.jobAttrs, pi)
	}
	if p.owned || p.req.ExclusiveUser {
		p.req.User = q.j.Job.GetUser()
	}
	switch {
	case p.resv != nil:
		p.req.AvoidReserved = p.avoidsReserved(p.limitIn(q.limit, pi))
	case p.fifoKept:
		p.req.AvoidReserved = true // the nodes of a blocked partition (blockFIFO)
	}
	return &p.req
}

// placeIn places q's job in partition pi with req, its requestIn there
// (p.req). A job whose last run never launched on a node (Job.Avoid:
// requeueUnlaunched) is kept off that node only while another has room:
// req keeps off it, and when the job does not fit so it is placed again
// without that. It returns the request and placement to go on with: req's
// when the job fits, else the one without the avoided node, so that a job
// that fits nowhere now is decided (its reason, preemption, reservation)
// as it would be without it. A job with a shape (no lists) avoids nothing
// and is placed once.
//
// A node range whose per-node request depends on its width is placed at
// its widths (placeWidths): the request returned may be a wider one's.
func (p *pass) placeIn(q *queued, pi int, req *place.Request) (*place.Request, placement) {
	req, res := p.placeWidths(q, req)
	if res.ok || q.shape >= 0 || q.j.Avoid == "" {
		return req, res
	}
	avoidReserved := req.AvoidReserved
	p.req = p.requestAvoiding(q.j, &q.e.jobAttrs, pi, false)
	p.req.AvoidReserved = avoidReserved
	return p.placeWidths(q, &p.req)
}

// decideSettled decides q's job without placing it when its decision is
// settled for the rest of the pass, and reports whether it did. It is when
// the job's shape (found by an earlier job of the pass) has no candidate
// left: resources are only taken during a pass, so that shape stays empty
// and its counts stay as they are (Refresh returns it unchanged), and the
// job's outcome is the kind of check that emptied it. For a job blocked for
// resources the blocked-job stages must also be settled: no preemption to
// try for it (see stagePreempt), its partition already blocked by an
// earlier job and, with backfill, the reservation made or not for it to
// make (see stageBackfill). The decision is then consider's to the letter,
// without the request's copy, the placement and the stages: what most of a
// large queue's jobs cost each pass.
func (p *pass) decideSettled(q *queued, pi int) bool {
	if q.shape < 0 {
		return false
	}
	req := &p.t.s.shapeReqs[q.shape]
	avoid := req.AvoidReserved
	switch {
	case p.resv != nil:
		avoid = p.avoidsReserved(p.limitIn(q.limit, pi))
	case p.fifoKept:
		avoid = true // as requestIn
	}
	i := (int(q.shape)*len(p.parts)+pi)*2 + b2i(avoid)
	if i >= len(p.slots) || req.Nodes <= 0 {
		return false
	}
	sc := p.slots[i]
	if sc == nil || len(sc.Cand) != 0 {
		return false
	}
	d := Decision{Job: q.name, Nodes: len(p.views)}
	switch _, kind := sc.Outcome(req); kind {
	case place.Static:
		d.Reason = ReasonBadConstraints
		switch n := p.partitionNodes(pi); {
		case n == 0:
			d.Reason = ReasonReqNodeNotAvail
		case n < req.Nodes:
			d.Reason = ReasonPartitionNodeLimit
		}
	case place.Availability:
		d.Reason = ReasonReqNodeNotAvail
	default:
		cfg := &p.t.s.cfg
		preempts := cfg.Policy.Preempt && p.preemptorRoom(p.hold) && p.mayPreempt(q.qos, pi)
		if preempts || p.blocked&(uint64(1)<<uint(pi)) == 0 {
			return false
		}
		if cfg.Policy.Backfill && p.resv == nil && p.ahead == nil && !avoid {
			return false
		}
		if !cfg.Policy.Backfill {
			p.blockFIFO(pi)
		}
		d.Reason = ReasonPriority
	}
	d.Filtered = p.shareFiltered(sc)
	p.waitDecided(q, d)
	return true
}

// previousRunStopping keeps a requeued job pending (Requeued) while its
// previous run's processes have not all been reported gone, up to
// RequeueStopWait after that run ended: it returns the reason and the note
// naming what it waits for, or "" when the job may go on.
func (p *pass) previousRunStopping(j *Job) (reason, note string) {
	t := p.t
	var st prevRunStop
	if len(t.c.Runs) == 0 && t.scratch != nil {
		// The change edits no run: the state's run and what it says are
		// kept across passes (see scratch.prevRunStopOf).
		st = t.scratch.prevRunStopOf(t.s, j)
	} else {
		st = prevRunStopAt(t.s, t.c.Runs, j)
	}
	r := st.run
	if r == nil || r.Released {
		return "", ""
	}
	if st.fenced {
		p.wakeAt(r.FenceUntil)
		return st.reason, st.note
	}
	if !r.End.IsZero() {
		// At the stop wait's end the clock gives up on the nodes that did
		// not answer (Tick: giveUpStopping), and the job may start: never
		// while the old run still holds a node.
		if until := r.End.Add(t.s.cfg.RequeueStopWait); t.now.Before(until) {
			p.wakeAt(until)
		}
	}
	return st.reason, st.note
}

// prevRunStop is what previousRunStopping reads of job's previous run, run
// (nil: none), whatever the clock says: the reason and note it gives while
// run is not released, and whether that is for a fenced step (the wake
// then at run.FenceUntil).
type prevRunStop struct {
	run          *Run
	reason, note string
	fenced       bool
}

// prevRunStopAt is j's prevRunStop in the state s with the change's
// versions of runs over it.
func prevRunStopAt(s *State, over map[string]*Run, j *Job) prevRunStop {
	// RunKey's key, built on the stack: the look-ups do not keep it, and
	// this gate looks at every requeued job of the queue each pass.
	var buf [96]byte
	key := strconv.AppendInt(append(append(buf[:0], j.Name()...), '#'), int64(j.Attempt), 10)
	r, ok := over[string(key)]
	if !ok {
		r = s.runs[string(key)]
	}
	if r == nil || r.Released {
		return prevRunStop{run: r}
	}
	if !r.FenceUntil.IsZero() {
		// A failed node's step may still run: no stop wait shortens its
		// fence (it ends with the step, the node's repair or removal, or
		// FenceTimeout; the clock lifts it).
		var fenced []string
		for _, node := range r.Nodes {
			if r.Steps[node].Fenced() {
				fenced = append(fenced, hostOf(r, node))
			}
		}
		if len(fenced) > 0 {
			return prevRunStop{run: r, fenced: true, reason: ReasonRequeued,
				note: "waiting for its previous run to stop on failed node(s) " + strings.Join(fenced, ",") +
					" (fenced until " + r.FenceUntil.UTC().Format(time.RFC3339) + ")"}
		}
	}
	var stopping []string
	for _, node := range r.Nodes {
		if !r.Steps[node].Terminal() {
			stopping = append(stopping, hostOf(r, node))
		}
	}
	if len(stopping) == 0 {
		return prevRunStop{run: r, reason: ReasonRequeued, note: "waiting for its previous run's job steps (srun) to end"}
	}
	return prevRunStop{run: r, reason: ReasonRequeued, note: "waiting for its previous run to stop on " + strings.Join(stopping, ",")}
}

// prevRunStopOf is prevRunStopAt(s, nil, j), kept across a writer's passes
// by job version while the state's runs are the same (State.runsVer): a
// requeued job's look-up of its previous run (its name and attempt read
// from its records, a key built and hashed, the run's steps looked up by
// node) is made once, not each pass for each of the thousands a
// preemption requeues. A job version's name and attempt never change, nor
// does a run of the state (an edit is another version, put by putRun).
func (sc *scratch) prevRunStopOf(s *State, j *Job) prevRunStop {
	if sc.prevRunStops == nil || sc.prevRunStopsAt != s.runsVer || len(sc.prevRunStops) >= maxPrevRunStops {
		sc.prevRunStops, sc.prevRunStopsAt = map[*Job]prevRunStop{}, s.runsVer
	}
	if st, ok := sc.prevRunStops[j]; ok {
		return st
	}
	st := prevRunStopAt(s, nil, j)
	sc.prevRunStops[j] = st
	return st
}

// maxPrevRunStops bounds scratch.prevRunStops: past it (the versions of
// jobs that left the queue add up while no run changes) it starts over.
const maxPrevRunStops = 1 << 16

// liveRuns calls f for every run of the cluster that is its job's running attempt.
func (p *pass) liveRuns(f func(r *Run, j *Job)) {
	p.t.eachClusterRun(p.name, func(r *Run, _ int32, _ bool) {
		if r.Ended() {
			return
		}
		if j := p.t.job(r.Job); j != nil && j.Running() && j.Attempt == r.Attempt {
			f(r, j)
		}
	})
}

func (p *pass) countArrays() {
	p.arrayRunning = map[string]int32{}
	p.liveRuns(func(_ *Run, j *Job) {
		if id := j.Job.GetArrayJobId(); id != "" {
			p.arrayRunning[jobsPrefix(j.Name())+id]++
		}
	})
}

func (p *pass) countQOS() {
	p.qosUse = map[assocKey]int32{}
	p.liveRuns(func(r *Run, _ *Job) {
		q, _ := p.t.s.cfg.qos(r.QOS)
		p.qosUse[assocKey{q.Name, r.User}] += r.gpuCount()
	})
}

// singletonBlocked reports whether a job submitted before j by the same
// user under the same name is still pending or running.
func (p *pass) singletonBlocked(j *Job) bool {
	if p.singleton == nil {
		p.singleton = map[assocKey]int64{}
		note := func(o *Job) {
			id, err := strconv.ParseInt(o.Job.GetJobId(), 10, 64)
			if err != nil {
				return
			}
			k := assocKey{o.Job.GetUser(), SlurmJobName(o.Job)}
			if cur, ok := p.singleton[k]; !ok || id < cur {
				p.singleton[k] = id
			}
		}
		for _, o := range p.t.pendingEntries(p.name) {
			note(o.j)
		}
		p.liveRuns(func(_ *Run, o *Job) { note(o) })
	}
	id, _ := strconv.ParseInt(j.Job.GetJobId(), 10, 64)
	first, ok := p.singleton[assocKey{j.Job.GetUser(), SlurmJobName(j.Job)}]
	return ok && first < id
}

// timeLimit is the job's time limit in partition pi; 0 means none.
func (p *pass) timeLimit(a *jobAttrs, pi int) time.Duration {
	return p.limitIn(a.limit, pi)
}

// limitIn is the time limit of a job with --time limit seconds (0: none)
// in partition pi; 0 means none.
func (p *pass) limitIn(limit int64, pi int) time.Duration {
	if limit > 0 {
		return time.Duration(limit) * time.Second
	}
	if pi >= 0 && pi < len(p.parts) {
		return time.Duration(p.parts[pi].MaxSeconds) * time.Second
	}
	return 0
}

// avoidsReserved reports whether a job with time limit lim (limitIn) must
// keep off the backfill reservation's nodes (p.resv must be set): the
// reservation is unbounded, the job has no limit, or it would not end by
// the time the reservation starts (now+lim after its start). The last is
// compared as lim against the reservation's distance from now, computed
// once (reserve): the same answer as the times' sum and comparison,
// which cost more than the rest of a settled job's decision, wherever the
// distance and lim are far from overflowing a Duration.
func (p *pass) avoidsReserved(lim time.Duration) bool {
	r := p.resv
	if r.Unbounded || lim <= 0 {
		return true
	}
	if p.resvGapOK && lim < 1<<61 {
		return lim > p.resvGap
	}
	return p.t.now.Add(lim).After(r.Start)
}

// partitionNodes counts the compute nodes of partition pi.
func (p *pass) partitionNodes(pi int) int {
	p.partitionStats()
	return p.partNodes[pi]
}

func (p *pass) partitionStats() {
	if p.partNodes != nil {
		return
	}
	p.partNodes = make([]int, len(p.parts))
	p.partMaxGPUs = make([]int32, len(p.parts))
	for i := range p.views {
		v := &p.views[i]
		if v.Node.Role == clusterspec.RoleLogin {
			continue
		}
		for pi := range p.parts {
			if v.InPartition(pi) {
				p.partNodes[pi]++
				p.partMaxGPUs[pi] = max(p.partMaxGPUs[pi], v.Node.GPUs)
			}
		}
	}
}

// hostLists is a job's --nodelist and --exclude (with the nodes whose
// failure ended a run of it, and, with avoid, the node it avoids: Job.Avoid)
// as placement reads them: sets, and their shape key (place.ListsKey).
type hostLists struct {
	nodelist, exclude map[string]bool
	key               string
}

// hostLists returns j's lists, made once per pass for the jobs that list
// the same hosts in the same order (an array's tasks): up to 4,096 of each,
// for each pending job of the array, at each pass.
func (p *pass) hostLists(j *Job, avoid bool) *hostLists {
	spec := j.Job
	var b strings.Builder
	for _, l := range [][]string{spec.GetNodelist(), spec.GetExclude(), j.Excluded} {
		for _, h := range l {
			b.WriteString(h)
			b.WriteByte(0)
		}
		b.WriteByte(1)
	}
	avoided := ""
	if avoid {
		avoided = j.Avoid
		b.WriteString(avoided)
	}
	raw := b.String()
	if l, ok := p.lists[raw]; ok {
		return l
	}
	l := new(hostLists)
	if nl := spec.GetNodelist(); len(nl) > 0 {
		l.nodelist = make(map[string]bool, len(nl))
		for _, h := range nl {
			l.nodelist[h] = true
		}
	}
	if ex := spec.GetExclude(); len(ex) > 0 || len(j.Excluded) > 0 || avoided != "" {
		l.exclude = make(map[string]bool, len(ex)+len(j.Excluded)+1)
		for _, h := range ex {
			l.exclude[h] = true
		}
		for _, h := range j.Excluded {
			l.exclude[h] = true
		}
		if avoided != "" {
			l.exclude[avoided] = true
		}
	}
	l.key = place.ListsKey(l.nodelist, l.exclude)
	if p.lists == nil {
		p.lists = map[string]*hostLists{}
	}
	p.lists[raw] = l
	return l
}

// request resolves what j asks of each node in partition pi, keeping off
// the node it avoids (Job.Avoid; see placeIn).
func (p *pass) request(j *Job, a *jobAttrs, pi int) place.Request {
	return p.requestAvoiding(j, a, pi, true)
}

// requestAvoiding is request, keeping off Job.Avoid only with avoid.
func (p *pass) requestAvoiding(j *Job, a *jobAttrs, pi int, avoid bool) place.Request {
	r := a.req
	r.Partition = pi
	if p.owned || r.ExclusiveUser {
		r.User = j.Job.GetUser() // see requestIn
	}
	if !a.lists && !a.spread {
		return r
	}
	spec := j.Job
	if len(spec.GetNodelist()) > 0 || len(spec.GetExclude()) > 0 || len(j.Excluded) > 0 || (avoid && j.Avoid != "") {
		l := p.hostLists(j, avoid)
		r.Nodelist, r.Exclude, r.Lists = l.nodelist, l.exclude, l.key
		if len(l.nodelist) > 0 {
			r.Nodes = max(r.Nodes, len(l.nodelist))
		}
	}
	if a.spread {
		g := spec.GetGpus()
		if spec.GetNodeCount() <= 1 && len(r.Nodelist) == 0 {
			p.partitionStats()
			if most := p.partMaxGPUs[pi]; most > 0 && g > most {
				r.Nodes = int((g + most - 1) / most)
			}
		}
		r.GPUsPerNode = (g + int32(r.Nodes) - 1) / int32(r.Nodes)
	}
	r.CPUsPerNode = cpusPerNode(spec, r.Nodes, r.GPUsPerNode)
	return r
}

// wait keeps j pending for reason, emitting only when the reason changes.
func (t *txn) wait(j *Job, reason string) {
	if j.Job.GetStateReason() == reason {
		return
	}
	t.setReason(j, j.Name(), reason, false)
}

// setReason gives pending job j (named name) a new reason and emits it.
// unedited says the caller knows the change holds no version of j.
func (t *txn) setReason(j *Job, name, reason string, unedited bool) {
	if !unedited {
		if _, edited := t.c.Jobs[name]; edited {
			j = t.editJob(name)
			j.Job.StateReason = reason
			t.emitJob(j)
			return
		}
	}
	// Only the reason changes (the first pass over a burst of submissions
	// gives 100,000 jobs theirs): the new version is a shallow copy, and
	// the event carries that copy itself instead of two deep copies.
	// editJob copies it deeply before any edit.
	v := t.newReasonVersion()
	v.src, v.reason = j, reason
	t.fill(v)
	t.c.Jobs[name] = &v.job
	// emitJob without its look-up: a job the change had no version of has
	// no JobChanged in it (every emitted job is one of the change's).
	t.c.lastJobEmit[name] = len(t.c.Emits)
	t.emit(v.pj.Cluster, name, &v.ev)
}

// record gives stored pending job j, named name, of cluster, at position
// pos of its pending entries (-1: unknown, found by name), reason as a
// reason record in the change's events: no version of the job, no
// protobuf, no entry in Jobs (see Emit).
func (t *txn) record(cluster, name string, j *Job, reason string, pos int32) {
	c := t.c
	ci := t.s.byCluster[cluster]
	if pos < 0 {
		i, ok := ci.pendPos[name]
		if !ok {
			t.setReason(j, name, reason, false) // not a stored pending job
			return
		}
		pos = int32(i)
	}
	var cr *clusterRecords
	if n := len(c.recs); n > 0 && c.recs[n-1].cluster == cluster {
		cr = &c.recs[n-1]
	} else if cr = c.records(cluster); cr == nil {
		c.recs = append(c.recs, clusterRecords{cluster: cluster, at: make([]int32, len(ci.pending))})
		cr = &c.recs[len(c.recs)-1]
	}
	c.Emits = append(c.Emits, Emit{Key: cluster, Subject: name, job: j, reason: reason, pos: pos})
	cr.at[pos] = int32(len(c.Emits))
	c.reasons++
}

// fill builds reason-only version v from its source (once).
func (t *txn) fill(v *reasonVersion) {
	j := v.src
	if j == nil {
		return
	}
	v.job = Job{JobRecord: j.JobRecord, tmpl: j.tmpl, shared: true}
	v.job.Job = &v.pj
	shallowJobInto(&v.pj, j.Job)
	v.pj.StateReason = v.reason
	v.ev = eventsv1.JobChanged{Job: &v.pj, Attempt: j.Attempt, ModelDir: j.ModelDir}
	v.src = nil
}

// reasonVersion is a reason-only job version (setReason) and its event.
type reasonVersion struct {
	job Job
	pj  loomv1.Job
	ev  eventsv1.JobChanged
	// src and reason: what it is built from, until it is (see fill).
	src    *Job
	reason string
}

// newReasonVersion returns a zero reasonVersion from the change's batch: a pass
// that gives 100,000 jobs a reason allocates a batch per 1024 of them, not
// three objects each. A batch lives while any of its versions or events is
// referenced, at most as long as the burst's versions together.
func (t *txn) newReasonVersion() *reasonVersion {
	if len(t.c.reasonSlab) == 0 {
		t.c.reasonSlab = make([]reasonVersion, reasonBatch)
	}
	v := &t.c.reasonSlab[0]
	t.c.reasonSlab = t.c.reasonSlab[1:]
	return v
}

// reasonBatch is how many reason-only versions one allocation holds.
const reasonBatch = 1024

// wait keeps q's job pending for reason, emitting only when the reason
// changes (q.reason is its reason as read: no look at its protobuf).
func (p *pass) wait(q *queued, reason string) {
	if m := p.hold; m != nil {
		m.decided, m.withD, m.d = true, false, Decision{Reason: reason}
		return
	}
	if q.reason == reason {
		return
	}
	if p.records {
		p.t.record(p.name, q.name, q.j, reason, p.pos)
		return
	}
	p.t.setReason(q.j, q.name, reason, p.unedited)
}

// waitDecided keeps q's job pending for d.Reason and records the decision.
func (p *pass) waitDecided(q *queued, d Decision) {
	if m := p.hold; m != nil {
		m.decided, m.withD, m.d = true, true, d
		return
	}
	p.t.c.Decisions = append(p.t.c.Decisions, d)
	if d.Reason == ReasonBadConstraints {
		p.t.badConstraints = true
	}
	p.wait(q, d.Reason)
}
