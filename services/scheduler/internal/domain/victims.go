package domain

import (
	"cmp"
	"math"
	"slices"
	"strings"
)

// The preemption stage's victims: the running jobs a preemptor may requeue,
// lowest priority first. A pass lists them once per kind of preemptor (QOS
// and partition) from every run of the cluster (25,735 in the cycle
// benchmark), and a preemptor usually takes the first thousand or so. So the
// list costs little per run: what it reads of each run's job is kept on the
// run (victimIn), not looked up by name and computed again each pass; and it
// is put in order only as far as the preemptors read it (victimList), not
// sorted whole.

// victimIn is what the preemption stage reads of a live run's job. mirrorJob
// sets job, the job's version in the state, with live (nil when not live); a
// writer's pass fills in the rest from that version the first time it lists
// the run (fillVictim), and again only once the version or the state changed
// (of and s say what they came from). Only a run of the state whose job the
// change does not edit reads it (the fresh runs of eachClusterRun, as live).
// Commit writes job, writers' passes the rest: readers never look at it.
type victimIn struct {
	job *Job
	// What fillVictim took from job, of, in the state s (a snapshot's
	// records may be loaded into more than one).
	of   *Job
	s    *State
	num  int64  // jobNumber(of)
	part string // its partition ("" the default)
	// in is what sum reads of the job (its partition index left to the
	// pass). It holds across passes: the job's protobuf is never mutated,
	// the QOS table is the state's, and an interned association keeps its
	// id; one not interned marks it slow (sum must look again).
	in prioIn
}

// mirrorVictim sets what r.victim says of r's job in the state, j (r.live
// says whether r runs j's current attempt).
func (s *State) mirrorVictim(r *Run, j *Job) {
	if !r.live {
		j = nil
	}
	r.victim.job = j
}

// fillVictim returns what r.victim says of r's job, filled in from
// r.victim.job in the state s when it was not yet; in place when keep (a
// writer's pass), else in a copy.
func (s *State) fillVictim(r *Run, keep bool) *victimIn {
	m := &r.victim
	if m.of == m.job && m.s == s {
		return m
	}
	if !keep {
		c := *m
		m = &c
	}
	j := m.job
	var a jobAttrs
	s.prioAttrs(j, &a, r.assoc)
	m.of, m.s, m.num, m.part, m.in = j, s, jobNumber(j), j.Job.GetPartition(), prioInOf(&a, -1)
	return m
}

// victimRow is what the preemption stage reads of an active run of the
// state when it lists the victims (clusterIndex.victims): the run's own
// fields (a state's run is never modified) and its mirrored ones, live and
// victim, refreshed by mirrorJob and by a writer's pass that fills victim.
type victimRow struct {
	qos, part string // the run's QOS and Partition
	v         victimIn
	nodes     int32
	// preempting: PreemptBy set; keyed: the run's key is set.
	preempting, keyed, live bool
}

// victimRowOf is r's victim row.
func victimRowOf(r *Run) victimRow {
	return victimRow{qos: r.QOS, part: r.Partition, v: r.victim, nodes: int32(len(r.Nodes)),
		preempting: r.PreemptBy != "", keyed: r.key != "", live: r.live}
}

// victim is a running job's run that a preemptor may requeue.
type victim struct {
	run   *Run
	prio  int64
	id    int64 // −job number: among equals, the newest job goes first
	nodes int32 // len(run.Nodes), compared without a load of the run
	// pos is run's index in its cluster's active runs, -1 for a run of
	// the change (see viewIndexCache.heldViews).
	pos int32
}

// victimCmp orders victims: lowest priority first, then fewest nodes, then
// newest job. It ends on the run's key, unique among the runs of a pass: a
// total order, so a heap gives them in the one order a sort gives.
func victimCmp(a, b *victim) int {
	switch {
	case a.prio != b.prio:
		return cmp.Compare(a.prio, b.prio)
	case a.nodes != b.nodes:
		return int(a.nodes - b.nodes)
	case a.id != b.id:
		return cmp.Compare(a.id, b.id)
	}
	return strings.Compare(a.run.Key(), b.run.Key())
}

// victimKey identifies the preemptors that may requeue the same runs: a QOS
// (its table index, -1 unknown) and a partition.
type victimKey struct{ qos, part int32 }

// victimList is one key's victims, put in order as far as preemptors read
// them: done holds the lowest ones in order, rest the others, as a min-heap
// (by victimCmp) until sorted says they were sorted. A preemptor reads from
// the start of the list each time (skipping the runs taken since), so the
// list is shared by the preemptors of its key in a pass.
type victimList struct {
	done   []victim
	rest   []victim
	sorted bool
}

// newVictimList makes vs (which it keeps) a list read in order.
func newVictimList(vs []victim) *victimList {
	l := &victimList{rest: vs}
	for i := len(vs)/2 - 1; i >= 0; i-- {
		l.down(i)
	}
	return l
}

// at returns the k-th victim in order, false past the last.
func (l *victimList) at(k int) (victim, bool) {
	if k < len(l.done) {
		return l.done[k], true
	}
	if l.sorted {
		if k -= len(l.done); k < len(l.rest) {
			return l.rest[k], true
		}
		return victim{}, false
	}
	for k >= len(l.done) && len(l.rest) > 0 {
		if len(l.done) >= 1024 && len(l.done) >= len(l.rest)/8 {
			// Read this far, it is likely read to the end (a preemptor
			// that cannot fit walks all of it): a sort of what is left
			// costs less than a pop per run, and bounds the whole at
			// about what one sort of every run cost.
			slices.SortFunc(l.rest, func(a, b victim) int { return victimCmp(&a, &b) })
			l.sorted = true
			return l.at(k)
		}
		l.done = append(l.done, l.pop())
	}
	if k < len(l.done) {
		return l.done[k], true
	}
	return victim{}, false
}

// pop removes and returns the heap's least victim.
func (l *victimList) pop() victim {
	v := l.rest[0]
	last := len(l.rest) - 1
	l.rest[0] = l.rest[last]
	l.rest = l.rest[:last]
	if last > 0 {
		l.down(0)
	}
	return v
}

// down sifts the heap's entry i down to its place.
func (l *victimList) down(i int) {
	h := l.rest
	n := len(h)
	for {
		c := 2*i + 1
		if c >= n {
			return
		}
		if c+1 < n && victimCmp(&h[c+1], &h[c]) < 0 {
			c++
		}
		if victimCmp(&h[c], &h[i]) >= 0 {
			return
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
}

// victims returns the runs a job of QOS qos (table index qi) in partition pi
// may preempt, in order (see victimList), built once per pass and key.
// Whether a run is still free to take (not already being preempted) is for
// the caller to check against the pass's current version of it.
func (p *pass) victims(qos string, qi int32, pi int) *victimList {
	key := victimKey{qi, int32(pi)}
	if l, ok := p.victimCache[key]; ok {
		return l
	}
	t := p.t
	may := p.preemptableBy(qos, pi)
	// Runs of one partition come in runs of their own: the index of the
	// last partition name looked up is kept.
	var lastPart string
	lastIdx, looked := -1, false
	partIndex := func(name string) int {
		if !looked || name != lastPart {
			_, lastIdx = p.cluster.Partition(name)
			lastPart, looked = name, true
		}
		return lastIdx
	}
	// Room for every run: appends that grew the list by doubling were a
	// third of its cost.
	var vs []victim
	var rows []victimRow
	if ci := t.s.byCluster[p.name]; ci != nil {
		vs = make([]victim, 0, len(ci.active)+len(t.c.Runs))
		rows = ci.victims
	}
	keep := t.scratch != nil
	t.eachClusterRun(p.name, func(r *Run, pos int32, fresh bool) {
		if fresh {
			// A run of the state whose job the change did not edit: what
			// is read of it is in its row, without a load of the run.
			row := &rows[pos]
			if row.preempting || !may(row.qos, row.part) {
				return
			}
			if !row.keyed {
				p.changedVictim(r, pos, &vs)
				return
			}
			// What liveRuns would pass says the run itself (live), and
			// its job's fields are kept on it and its row (victimIn).
			if !row.live {
				return
			}
			m := &row.v
			if m.of != m.job || m.s != t.s {
				m = t.s.fillVictim(r, keep)
				if keep {
					row.v = *m
				}
			}
			p.keptVictim(r, pos, row.nodes, m, partIndex, &vs)
			return
		}
		if r.PreemptBy == "" && may(r.QOS, r.Partition) {
			p.changedVictim(r, pos, &vs)
		}
	})
	l := newVictimList(vs)
	if p.victimCache == nil {
		p.victimCache = map[victimKey]*victimList{}
	}
	p.victimCache[key] = l
	return l
}

// keptVictim appends to vs the victim of r, a live run of the state whose
// job the change did not edit, from m, what is kept of its job (victimIn).
func (p *pass) keptVictim(r *Run, pos, nodes int32, m *victimIn, partIndex func(string) int, vs *[]victim) {
	v := victim{run: r, nodes: nodes, pos: pos, id: -m.num}
	if p.prio != nil {
		in := m.in
		pi := partIndex(m.part)
		in.part = int16(pi)
		prio, ok := p.prio.sumIn(&in, nil)
		if !ok || pi > math.MaxInt16 {
			prio = p.victimPriority(r, m.job, true)
		}
		v.prio = prio
	}
	*vs = append(*vs, v)
}

// changedVictim appends to vs the victim of r, a run the change holds or
// whose job it edits, when its job still runs it.
func (p *pass) changedVictim(r *Run, pos int32, vs *[]victim) {
	vj := p.t.job(r.Job)
	if r.Ended() || vj == nil || !vj.Running() || vj.Attempt != r.Attempt {
		return
	}
	v := victim{run: r, nodes: int32(len(r.Nodes)), pos: pos}
	v.id = -jobNumber(vj)
	if p.prio != nil {
		v.prio = p.victimPriority(r, vj, false)
	}
	*vs = append(*vs, v)
}

// victimPriority is the priority of vj, the job of running run r, in its
// partition, computed from the job. Preemptors of several kinds each list
// the victims; the priority of a state's run whose job the change did not
// edit (stored: both are the state's, unchanged in the pass) is computed
// once a pass.
func (p *pass) victimPriority(r *Run, vj *Job, stored bool) int64 {
	if stored {
		if v, ok := p.victimPrio[r]; ok {
			return v
		}
	}
	_, vpi := p.cluster.Partition(vj.Job.GetPartition())
	var a jobAttrs
	p.t.s.prioAttrs(vj, &a, nil)
	v := p.prio.sum(&a, vpi)
	if stored {
		if p.victimPrio == nil {
			p.victimPrio = map[*Run]int64{}
		}
		p.victimPrio[r] = v
	}
	return v
}

// preemptableBy returns whether a job of QOS qos in partition pi may
// preempt a run: the QOS may preempt the run's QOS
// (Config.canPreemptQOS), or the run's partition is of a lower tier. What
// depends on the preemptor alone is looked up once, and the answer for
// the last QOS and partition names seen is kept (runs come in runs of one).
func (p *pass) preemptableBy(qos string, pi int) func(rQOS, rPart string) bool {
	cfg := &p.t.s.cfg
	qa, _ := cfg.qos(qos)
	tier := p.parts[pi].Tier
	var lastQOS, lastPart string
	var qosOK, partOK, qosSeen, partSeen bool
	return func(rQOS, rPart string) bool {
		if !qosSeen || rQOS != lastQOS {
			b := rQOS
			if b == "" {
				b = cfg.DefaultQOS
			}
			lastQOS, qosOK, qosSeen = rQOS, slices.Contains(qa.Preempt, b), true
		}
		if qosOK {
			return true
		}
		if !partSeen || rPart != lastPart {
			lastPart, partOK, partSeen = rPart, false, true
			for _, pt := range p.parts {
				if pt.Name == rPart {
					partOK = tier > pt.Tier
					break
				}
			}
		}
		return partOK
	}
}
