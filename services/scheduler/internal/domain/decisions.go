package domain

import (
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/loom-ml/loom/services/scheduler/internal/domain/place"
)

// Kept decisions. A steady pass decides nearly every blocked job as the last
// one did; writing 100,000 fresh 64-byte records into a new array every pass
// (fresh pages, each first touched by the append) was a third of the steady
// pass. So:
//
//   - a writer's pass appends its decisions to the scratch's array, reused
//     from pass to pass (Change.Decisions is valid until the state's next
//     Handle, Tick or Schedule);
//   - nothing of the state points into that array: Commit keeps a job's
//     previous decision (Job.why) when the new one is equal to it, and
//     otherwise points the job at a copy of its own (keepDecisions);
//   - "equal" includes the filtered counts: the counts a decision refers to
//     are interned (canonFiltered), so equal counts are the same map from
//     pass to pass and are compared by identity.

// maxCanonFiltered bounds the interned filtered counts: past it the table
// starts over (the next equal decisions are copied once more, no more).
const maxCanonFiltered = 4096

// canonFiltered returns the interned map with m's counts: m itself the first
// time these counts are seen. The result must not be modified (decisions
// share it: place.Shape.Shared).
func (t *txn) canonFiltered(m map[string]int) map[string]int {
	sc := t.scratch
	if sc == nil || m == nil {
		return m
	}
	key := filteredKey(m)
	if c, ok := sc.filtered[key]; ok {
		return c
	}
	if sc.filtered == nil || len(sc.filtered) >= maxCanonFiltered {
		sc.filtered = map[string]map[string]int{}
	}
	sc.filtered[key] = m
	return m
}

// filteredKey is m's counts as a string, keys in order.
func filteredKey(m map[string]int) string {
	var buf [16]string
	keys := buf[:0]
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(strconv.Itoa(m[k]))
		b.WriteByte(';')
	}
	return b.String()
}

// shareFiltered marks sc's counts as referenced by a decision, interning them
// first (see canonFiltered), and returns them.
func (p *pass) shareFiltered(sc *place.Shape) map[string]int {
	if !sc.Shared {
		sc.Filtered = p.t.canonFiltered(sc.Filtered)
		sc.Shared = true
	}
	return sc.Filtered
}

// sameMap reports whether a and b are the same map (not merely equal).
func sameMap(a, b map[string]int) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

// sameDecision reports whether a and b say the same: same job, reason, note,
// nodes looked at, and the same (interned) filtered counts.
func sameDecision(a, b *Decision) bool {
	return a.Job == b.Job && a.Reason == b.Reason && a.Nodes == b.Nodes && a.Note == b.Note &&
		sameMap(a.Filtered, b.Filtered)
}

// decisionsBuffer returns the array a pass of n jobs appends its decisions
// to: the scratch's, emptied, for a writer (the last change's decisions are
// not read past the next pass, and nothing of the state points into them:
// see keepDecisions), else a new one.
func (t *txn) decisionsBuffer(n int) []Decision {
	sc := t.scratch
	if sc == nil {
		return make([]Decision, 0, n)
	}
	if cap(sc.decisions) < n {
		sc.decisions = make([]Decision, 0, n)
	}
	return sc.decisions[:0]
}

// keepDecisions makes c's decisions the pending jobs' explanations (Job.why):
// a job's previous one is kept when the new one is the same, else the job
// gets a copy of the new one, so that the state never points into c's array
// (which the next pass reuses).
func (s *State) keepDecisions(c *Change) {
	var slab []Decision
	for i := range c.Decisions {
		d := &c.Decisions[i]
		j := s.jobs[d.Job]
		if j == nil || !j.Pending() {
			continue
		}
		if j.why != nil && sameDecision(j.why, d) {
			continue
		}
		if len(slab) == cap(slab) {
			// Chunks grow with the copies made (16, 32, ... 4,096): a
			// commit that changes a few decisions allocates little, and a
			// chunk, kept while any job points into it, is never much
			// larger than what was copied into it.
			slab = make([]Decision, 0, min(max(2*cap(slab), 16), 4096))
		}
		slab = append(slab, *d)
		j.why = &slab[len(slab)-1]
	}
}
