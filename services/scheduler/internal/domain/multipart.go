package domain

import (
	"math/bits"
	"slices"
	"strings"

	"github.com/loom-ml/loom/libs/slurmspec"
	"github.com/loom-ml/loom/services/scheduler/internal/domain/place"
)

// A job may name several partitions (sbatch -p a,b): Slurm's "the one
// offering earliest initiation will be used ... (although higher priority
// partitions will be considered first)". While it is pending its
// Job.partition is the list. As slurmctld's queue (build_job_queue: one
// job_queue_rec per job and partition, each at that partition's
// PriorityTier and priority), the pass considers it once per partition of
// the list the cluster has, each at that partition's rank: its tier, then
// its priority with that partition's factors (partition, size). Its queue
// entry is its first record (bestRecord: highest tier, then highest
// priority, first named among equals); the others wait in the pass's
// multiq, sorted by rank, and are taken up as the walk of the queue
// reaches their rank. So in a partition of lower tier it waits behind that
// partition's jobs that outrank it there, exactly as a job of that
// partition alone with the same priority would, and cannot jump their
// queue by naming a partition of higher tier first.
//
// At each record it starts in that partition when it passes the gates
// (MaxTime per partition) and fits (AvoidReserved as any job of it); its
// run records its priority there. Records of equal rank (partitions of
// equal tier and priority) are tried together, in the list's order, before
// any decision (with backfill: without it each record where it waits for
// resources is decided and blocks its partition before the next is tried,
// failFIFO). The first record whose gates it passes and where it does
// not start decides it, as a job of that partition alone would be decided
// at that point of the walk (consider: reason, preemption, the backfill
// reservation, Resources or Priority). A later record where it waits for
// resources takes the decision over (waitIn) when the job would start
// there first: the deciding partition lacks the nodes it needs, or no
// reservation is made yet, or the job holds the reservation and would
// start sooner there (it is moved: Slurm keeps the partition of the
// earliest start; a tie keeps the higher tier). The record that would make
// the pass's reservation first looks ahead (reservesLater): when a later
// record would start the job strictly sooner, the reservation is kept for
// that record and made there, so the jobs walked between are not kept off
// nodes the job will not wait for. Otherwise it marks its
// partition blocked (the jobs of that partition after it read Priority)
// and takes no reservation of its own. A job that starts at a
// later record gives back the reservation made for it at an earlier one
// (and does not keep off its nodes meanwhile): the pass's later jobs may
// use them, and a later blocked job may reserve. A later record
// where it waits for resources begins preemption there when no earlier one
// did (preemptIn), as slurmctld tries each record until one begins
// preempting; a job that began preempting for itself, at whichever record,
// waits for that room: it is not tried further. Without backfill, each
// record where it could not start blocks that partition alone (blockFIFO:
// its later jobs, and its nodes shared with other partitions): its own
// later records, in other partitions, are still tried (gateFIFO). It is
// one preemptor of MaxPreemptPerPass however many records look for
// victims (counted). Its
// reason is emitted once, at its last record; when no record passes the
// gates it is its first record's gate reason. Started, Job.partition is
// the partition used and JobRecord.Partitions the list, which a requeue
// puts back. A job that names one partition never comes here: its queue
// entry has no qMulti flag, and the walk compares nothing while multiq is
// empty.

// multiFirst is the index in p.parts of e's first record (bestRecord), or
// -1 when the cluster has none of its partitions.
func (p *pass) multiFirst(e *pendEntry) int {
	return bestRecord(p.parts, p.prio, &e.jobAttrs, e.part)
}

// bestRecord is the index in parts of the partition of list where a job of
// attributes a ranks first in the queue: the highest PriorityTier, then
// (with prio: the priority order) the highest priority, the first named
// among equals; -1 when parts has none of them. Only the first 64
// partitions (the pass's bit sets) count.
func bestRecord(parts []Partition, prio *prioCtx, a *jobAttrs, list string) int {
	best, bestPrio := -1, int64(0)
	for name := range strings.SplitSeq(list, ",") {
		for i := range parts {
			if parts[i].Name != name || i >= 64 {
				continue
			}
			pr := int64(0)
			if prio != nil {
				pr = prio.sum(a, i)
			}
			if best < 0 || parts[i].Tier > parts[best].Tier || (parts[i].Tier == parts[best].Tier && pr > bestPrio) {
				best, bestPrio = i, pr
			}
		}
	}
	return best
}

// partsByTier returns the indexes in parts of list's partitions, higher
// PriorityTier first, the list's order among equals; only the first 64
// partitions (the pass's bit sets) count.
func partsByTier(parts []Partition, list string) []int {
	names, _ := slurmspec.ParsePartitions(list)
	out := make([]int, 0, len(names))
	for _, name := range names {
		for i := range parts {
			if parts[i].Name == name && i < 64 {
				out = append(out, i)
			}
		}
	}
	// Insertion sort: stable, on a list of at most MaxJobPartitions.
	for i := 1; i < len(out); i++ {
		for k := i; k > 0 && parts[out[k]].Tier > parts[out[k-1]].Tier; k-- {
			out[k], out[k-1] = out[k-1], out[k]
		}
	}
	return out
}

// multiRec is a pending job of several partitions between its queue
// records in one pass.
type multiRec struct {
	// q is a copy of its queue entry; q.part is set to each record's
	// partition in turn. pos is the pass's pos of the entry.
	q   queued
	pos int32
	// parts, ranks and prios: its records, in rank order (the list's
	// order by tier among equal ranks): the partition, the rank there
	// (0 without the priority order) and the priority there.
	parts []int32
	ranks []int64
	prios []int64
	// next is the next record to consider.
	next int
	// decided: a record decided the job (consider, held by pass.hold):
	// d is the decision, emitted at its last record (waitDecided when
	// withD, else wait with d.Reason).
	decided bool
	withD   bool
	d       Decision
	// resv: the pass's reservation is its job's, made at one of its
	// records (see waitIn).
	resv bool
	// ahead: while the pass's ahead is m, the index of the later record
	// the pass's reservation is kept for (see reservesLater).
	ahead int
	// counted: it is one of the pass's preemptors (MaxPreemptPerPass),
	// counted at the first record where it looked for victims; its
	// other records look without counting again (stagePreempt).
	counted bool
}

// considerMulti considers q, a job of several partitions that the cluster
// has some of, at its queue entry: its records of the entry's rank now,
// the others as the walk reaches theirs (runMulti).
func (p *pass) considerMulti(q *queued) {
	list := partsByTier(p.parts, q.e.part)
	m := &multiRec{q: *q, pos: p.pos, parts: make([]int32, len(list)), ranks: make([]int64, len(list)),
		prios: make([]int64, len(list))}
	for k, pi := range list {
		m.parts[k] = int32(pi)
		if p.prio != nil {
			m.prios[k] = p.prio.sum(&q.e.jobAttrs, pi)
			m.ranks[k] = -(int64(p.parts[pi].Tier)<<40 | m.prios[k])
		}
	}
	// Rank order; stable, so the list's order by tier among equals.
	for i := 1; i < len(list); i++ {
		for k := i; k > 0 && m.ranks[k] < m.ranks[k-1]; k-- {
			m.parts[k], m.parts[k-1] = m.parts[k-1], m.parts[k]
			m.ranks[k], m.ranks[k-1] = m.ranks[k-1], m.ranks[k]
			m.prios[k], m.prios[k-1] = m.prios[k-1], m.prios[k]
		}
	}
	p.multiStep(m)
}

// multiStep considers m's next records, those of one rank: it starts the
// job in the first where it passes the gates and fits; otherwise the first
// of them whose gates it passed decides it, unless an earlier record did,
// the others where it waits for resources may move its decision and
// reservation there (waitIn), and m waits in multiq for its next rank, or,
// at its last record, its decision is emitted.
func (p *pass) multiStep(m *multiRec) {
	q := &m.q
	rank := m.ranks[m.next]
	deciding := -1
	var waits uint64 // the records (bits by index in m.parts) where it waits for resources
	for m.next < len(m.parts) && m.ranks[m.next] == rank {
		k := m.next
		m.next++
		pi := int(m.parts[k])
		q.part = int32(pi)
		if p.gateReason(q) != "" {
			continue
		}
		if deciding < 0 {
			deciding = k
		}
		req := p.requestIn(q, pi)
		if m.resv {
			req.AvoidReserved = false // the reservation is its own
		}
		req, res := p.placeIn(q, pi, req)
		if res.ok {
			p.start(q.j, p.parts[pi], req, p.widen(q, req, res), m.prios[k], len(res.shape.Cand))
			if m.resv {
				// Reserved at an earlier record: it starts here instead.
				p.unreserve()
			}
			if p.ahead == m {
				p.ahead = nil // the reservation kept for it is not needed
			}
			return
		}
		if res.kind != place.Static && res.kind != place.Availability {
			if !p.t.s.cfg.Policy.Backfill {
				// slurmctld's record here fails before its next one is
				// tried: fail_by_part takes this partition's nodes out of
				// avail_node_bitmap, so the job's records of the same rank
				// after it do not take the nodes they share with it.
				if !p.failFIFO(m, deciding, k) {
					return // consider started it
				}
				if m.preempting() {
					break // preempt_in_progress: its other records are skipped
				}
				continue
			}
			waits |= uint64(1) << uint(k)
		}
	}
	last := m.next == len(m.parts)
	if !m.decided && (deciding >= 0 || last) {
		k := max(deciding, 0) // none passed the gates: the first record's gate
		waits &^= uint64(1) << uint(k)
		if !p.decideMulti(m, k) {
			return // consider started it
		}
		if m.preempting() {
			// It began preempting for room in that partition (or waits
			// for its victims to stop): it waits for that room.
			last = true
		}
	}
	for ; waits != 0; waits &= waits - 1 {
		p.waitIn(m, bits.TrailingZeros64(waits))
	}
	if m.preempting() {
		last = true // it began preempting at one of them: it waits for that room
	}
	if last {
		if p.ahead == m {
			// The record kept the reservation for did not take it (a
			// gate stopped it there): the next blocked job may reserve.
			p.ahead = nil
		}
		if m.decided {
			p.emitMulti(m)
		}
		return
	}
	// Wait for the next rank, in multiq's (rank, id) order.
	r, id := m.ranks[m.next], m.q.id
	i := len(p.multiq)
	for i > 0 {
		o := p.multiq[i-1]
		if or := o.ranks[o.next]; or < r || (or == r && o.q.id <= id) {
			break
		}
		i--
	}
	p.multiq = slices.Insert(p.multiq, i, m)
}

// failFIFO is, without backfill, m's record k where its job waits for
// resources, as slurmctld's record that could not start: decided (its
// first record of this rank whose gates it passed, deciding, decides the
// job unless an earlier one did), then, when k is not that record, waitIn
// (its preemption there, else its partition blocked). Either blocks k's
// partition and keeps the nodes it shares with others (blockFIFO) before
// the job's next record is tried. It reports false when the decision
// started the job.
func (p *pass) failFIFO(m *multiRec, deciding, k int) bool {
	if !m.decided {
		if !p.decideMulti(m, deciding) {
			return false
		}
		if deciding == k {
			return true
		}
	}
	p.waitIn(m, k)
	return true
}

// decideMulti decides m's job as a job of its record k's partition alone
// (consider on a copy of its entry, at its priority there). The decision
// is kept in m (see pass.hold), to be emitted at its last record, and m
// notes whether it made the pass's reservation. It reports false when
// consider started the job.
func (p *pass) decideMulti(m *multiRec, k int) bool {
	c := m.q
	c.flags &^= qMulti
	c.part, c.prio = m.parts[k], m.prios[k]
	prios := p.prios
	p.prios = nil // prioOf reads c.prio
	p.hold = m
	p.consider(&c)
	p.hold, p.prios = nil, prios
	m.resv = p.resv != nil && p.resv.Job == m.q.name
	return m.decided
}

// waitIn is m's record k, after its decision, where its job waits for
// resources. With backfill, the record takes over its decision, as a job
// of that partition alone blocked there (stageBackfill: its reason, the
// pass's reservation when none is made), when the job would start there
// first: its decision was not a wait for resources (a partition without
// the nodes it needs: never), or the pass has no reservation yet, or the
// job holds it and would start here before it starts (then it is moved
// here). Slurm keeps the partition of the earliest start; a tie keeps the
// earlier record (higher tier). Otherwise, or once it began preempting,
// the record marks its partition blocked (its later jobs read Priority);
// without backfill, it blocks that partition (blockFIFO) unless the job
// waits for room it preempts.
func (p *pass) waitIn(m *multiRec, k int) {
	pi := int(m.parts[k])
	q := &m.q
	q.part = int32(pi)
	if p.preemptIn(m, pi) {
		return
	}
	take := false
	switch {
	case !p.t.s.cfg.Policy.Backfill || m.preempting():
	case m.d.Reason != ReasonResources && m.d.Reason != ReasonPriority:
		take = true
	case p.ahead != nil:
		// The reservation is kept for a record where a job starts
		// sooner: this one if it is m's (or one before it a gate stopped).
		take = p.ahead == m && k >= m.ahead
	case p.resv == nil:
		take = true
	case m.resv:
		req := *p.requestIn(q, pi)
		req.AvoidReserved = false
		take = p.startsBefore(&req, p.place(&req, q.shape).shape)
	}
	if !take {
		p.blocked |= uint64(1) << uint(pi)
		if !p.t.s.cfg.Policy.Backfill && !m.preempting() {
			// The record could not start: it blocks its partition as
			// any job of it would (slurmctld's fail_by_part per record);
			// not once the job waits for room it preempts elsewhere
			// (preempt_in_progress: "scheduled in another partition").
			p.blockFIFO(pi)
		}
		return
	}
	if m.resv {
		p.unreserve()
		m.resv = false
	}
	if p.ahead == m {
		p.ahead = nil // kept for this record
	}
	req, res := p.placeIn(q, pi, p.requestIn(q, pi))
	p.blk = blocked{j: q.j, e: q.e, qos: q.qos, pi: pi, req: req, sc: res.shape,
		d: Decision{Job: q.name, Filtered: p.shareFiltered(res.shape), Nodes: len(p.views)}}
	p.hold = m // stageBackfill looks at its later records (reservesLater)
	stageBackfill(p, &p.blk)
	p.hold = nil
	m.d, m.withD = p.blk.d, true
	m.resv = p.resv != nil && p.resv.Job == q.name
}

// reservesLater reports whether m's job, blocked as b at one of its
// records with the pass's reservation to make, would start strictly sooner
// at one of its later records, where it passes the gates and fits now or
// waits for resources; it then keeps the reservation for the soonest of
// them (the first among equals): pass.ahead is m and m.ahead that record,
// and no job reserves until the job's walk reaches it (waitIn takes the
// decision and reserves there). So the jobs walked between, b's
// partition's later jobs among them, are not kept off nodes in b's
// partition the job will not wait for, as they were when it reserved here
// first and moved its reservation at the later record; and they are not
// kept off the later partition's either, as they rank before the job's
// record there (a job of that partition alone would not have reserved
// yet). The starts are judged on what is free now: the jobs walked
// between may take some of it, and the reservation made at that record
// is then as late as what they leave.
func (p *pass) reservesLater(m *multiRec, b *blocked) bool {
	kb := slices.Index(m.parts, int32(b.pi))
	if kb < 0 || kb == len(m.parts)-1 {
		return false
	}
	slots := p.soonest(b.req, b.sc)
	if slots == nil {
		return false // no reservation here: a later record takes one (waitIn)
	}
	best, bestUnbounded := p.slotsStart(slots)
	q := &m.q
	part, req := q.part, p.req // p.req is b.req: kept for reserve
	ahead := -1
	for k := kb + 1; k < len(m.parts); k++ {
		q.part = m.parts[k]
		if p.gateReason(q) != "" {
			continue
		}
		r, res := p.placeIn(q, int(q.part), p.requestIn(q, int(q.part)))
		start, unbounded := p.t.now, false
		switch {
		case res.ok:
		case res.kind == place.Static || res.kind == place.Availability:
			continue
		default:
			s := p.soonest(r, res.shape)
			if s == nil {
				continue
			}
			start, unbounded = p.slotsStart(s)
		}
		if !unbounded && (bestUnbounded || start.Before(best)) {
			best, bestUnbounded, ahead = start, false, k
		}
	}
	q.part, p.req = part, req
	if ahead < 0 {
		return false
	}
	p.ahead, m.ahead = m, ahead
	return true
}

// preemptIn tries, at m's record in partition pi where its job waits for
// resources, the preemption a job of pi alone would begin there
// (stagePreempt), unless it began preempting at an earlier record: as
// slurmctld tries each record of a job, preemption included, until one
// begins preempting (preempt_in_progress: "scheduled in another
// partition"), so a job that can preempt only in its second partition
// does. When it begins (or its victims of an earlier pass are stopping
// there) the record takes over the decision, as a job of pi alone: its
// reason and note, the pass's reservation when none is made (a reservation
// of its own made at an earlier record moves here), and it is not tried
// further. It reports whether it did.
func (p *pass) preemptIn(m *multiRec, pi int) bool {
	cfg := &p.t.s.cfg
	q := &m.q
	if m.preempting() || !cfg.Policy.Preempt || !p.preemptorRoom(m) || !p.mayPreempt(q.qos, pi) {
		return false
	}
	req := p.requestIn(q, pi)
	if m.resv {
		req.AvoidReserved = false // the reservation is its own
	}
	req, res := p.placeIn(q, pi, req)
	p.blk = blocked{j: q.j, e: q.e, qos: q.qos, pi: pi, req: req, sc: res.shape,
		d: Decision{Job: q.name, Filtered: p.shareFiltered(res.shape), Nodes: len(p.views)}}
	p.hold = m // counted once against MaxPreemptPerPass, at its first try
	stagePreempt(p, &p.blk)
	p.hold = nil
	if p.blk.d.Note == "" {
		return false
	}
	if m.resv {
		p.unreserve()
		m.resv = false
	}
	if p.ahead == m {
		p.ahead = nil
	}
	stageBackfill(p, &p.blk)
	m.decided, m.withD, m.d = true, true, p.blk.d
	m.resv = p.resv != nil && p.resv.Job == q.name
	return true
}

// preempting reports whether m's decision is a wait for room its job
// preempts (stagePreempt's note).
func (m *multiRec) preempting() bool {
	return m.decided && m.withD && m.d.Note != "" && (m.d.Reason == ReasonResources || m.d.Reason == ReasonPriority)
}

// emitMulti emits m's decision: its job waits for it.
func (p *pass) emitMulti(m *multiRec) {
	if m.withD {
		p.waitDecided(&m.q, m.d)
	} else {
		p.wait(&m.q, m.d.Reason)
	}
}

// runMulti considers the records waiting in multiq that rank before the
// queue entry of rank and id, in rank order (all of them with
// math.MaxInt64).
func (p *pass) runMulti(rank, id int64) {
	pos := p.pos
	for len(p.multiq) > 0 {
		m := p.multiq[0]
		if r := m.ranks[m.next]; r > rank || (r == rank && m.q.id >= id) {
			break
		}
		p.multiq = p.multiq[1:]
		p.pos = m.pos
		p.multiStep(m)
	}
	p.pos = pos
}

// gateReason is the reason the first of the pass's gates that stops q
// gives, or "" when every gate lets it through (consider's gates, without
// the decision).
func (p *pass) gateReason(q *queued) string {
	for _, g := range p.gates {
		if g.only != 0 && q.flags&g.only == 0 {
			continue
		}
		if reason, _ := g.check(p, q); reason != "" {
			return reason
		}
	}
	return ""
}

// hasPartitions reports whether c has the partition list names (one
// name, or several comma-separated: every one of them).
func hasPartitions(c *Cluster, list string) bool {
	if !slurmspec.IsPartitionList(list) {
		_, i := c.Partition(list)
		return i >= 0
	}
	for name := range strings.SplitSeq(list, ",") {
		if _, i := c.Partition(name); name == "" || i < 0 {
			return false
		}
	}
	return true
}

// allGone reports whether every partition of list (one name, or a pending
// job's a,b) is in gone: a job that names several partitions keeps
// waiting while one of them remains (the pass ignores the others), as
// slurmctld keeps it in the partitions that remain.
func allGone(gone map[string]bool, list string) bool {
	if !slurmspec.IsPartitionList(list) {
		return gone[list]
	}
	for name := range strings.SplitSeq(list, ",") {
		if !gone[name] {
			return false
		}
	}
	return true
}

// usedFirst returns list with used, the partition a job started in, moved
// to the front ("a,b" started in b is "b,a"): slurmctld's
// rebuild_job_part_list, so a requeued job shows (and, among partitions of
// equal tier, tries first) the one it ran in.
func usedFirst(list, used string) string {
	out := used
	for name := range strings.SplitSeq(list, ",") {
		if name != used {
			out += "," + name
		}
	}
	return out
}

// withoutGone returns list less the partitions in gone, in order ("" when
// none remains): slurmctld drops a removed partition from the list of a
// job that names several.
func withoutGone(list string, gone map[string]bool) string {
	var keep []string
	for name := range strings.SplitSeq(list, ",") {
		if !gone[name] {
			keep = append(keep, name)
		}
	}
	return strings.Join(keep, ",")
}

// anyGone reports whether a partition of list is in gone.
func anyGone(gone map[string]bool, list string) bool {
	for name := range strings.SplitSeq(list, ",") {
		if gone[name] {
			return true
		}
	}
	return false
}

// mostSeconds is the largest MaxTime, in seconds, of the partitions of list
// (one name or several) that c has: the longest a job of the list may run
// in one of them. 0: one of them is unlimited, or c has none of them.
func mostSeconds(c *Cluster, list string) int64 {
	most := int64(0)
	for name := range strings.SplitSeq(list, ",") {
		p, i := c.Partition(name)
		if i < 0 {
			continue
		}
		if p.MaxSeconds == 0 {
			return 0
		}
		most = max(most, p.MaxSeconds)
	}
	return most
}
