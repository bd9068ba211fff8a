package place

import (
	"maps"
	"slices"
	"sort"
	"strings"
)

// Table is a pass's node table as placement uses it: the nodes' views (the
// pass owns them and indexes them by int32), and the policy's checks and
// rankers, in order.
type Table struct {
	Views   []NodeView
	Checks  []Check
	Rankers []Ranker
}

// ShapeKey identifies requests that fit the same nodes: within a pass, jobs
// of one shape share one scan of the nodes.
type ShapeKey struct {
	part    int
	gpn     int32
	gpuType string
	cpus    int32
	mem     int64
	excl    bool
	avoid   bool
	// exclUser and user: Request.ExclusiveUser and User.
	exclUser bool
	user     string
	// lists holds --nodelist and --exclude (and failed nodes), written out
	// only for the requests that have them.
	lists string
}

// KeyOf returns r's shape key.
func KeyOf(r *Request) ShapeKey {
	k := ShapeKey{part: r.Partition, gpn: r.GPUsPerNode, gpuType: r.GPUType, cpus: r.CPUsPerNode,
		mem: r.MemMB, excl: r.Exclusive, avoid: r.AvoidReserved, exclUser: r.ExclusiveUser, user: r.User}
	switch {
	case r.Lists != "":
		k.lists = r.Lists
	case len(r.Nodelist) > 0 || len(r.Exclude) > 0:
		k.lists = ListsKey(r.Nodelist, r.Exclude)
	}
	return k
}

// AvoidsReserved reports whether the key is of a request that keeps off
// the reserved nodes.
func (k ShapeKey) AvoidsReserved() bool { return k.avoid }

// ListsKey writes out a request's --nodelist and --exclude hosts for its
// shape key (Request.Lists): sorted, each once.
func ListsKey(nodelist, exclude map[string]bool) string {
	var b strings.Builder
	for _, h := range slices.Sorted(maps.Keys(nodelist)) {
		b.WriteString(h)
		b.WriteByte(',')
	}
	b.WriteByte('|')
	for _, h := range slices.Sorted(maps.Keys(exclude)) {
		b.WriteString(h)
		b.WriteByte(',')
	}
	return b.String()
}

// Shape is what a pass knows of the nodes for one shape.
type Shape struct {
	// Cand are the nodes (indexes into the table's views) that passed every
	// check when last looked at. Resources only get taken during a pass, so
	// a node that fails a capacity check never comes back and is dropped.
	Cand []int32
	// Avail are the nodes that pass the static and availability checks:
	// those a reservation or a preemption may count on.
	Avail []int32
	// Filtered counts the nodes filtered by each check's reason.
	Filtered map[string]int
	// Shared: Filtered is referenced by a decision; Refresh copies it
	// before a change.
	Shared bool
	// StaticOK and AvailOK count the nodes passing the static checks, and
	// the static and availability checks.
	StaticOK, AvailOK int
	// InAvail marks Avail by view index (built by the pass when a
	// preemption needs it).
	InAvail []bool
}

// Outcome says whether the shape has room for r's gang and, when not, the
// kind of check that left too few nodes.
func (sc *Shape) Outcome(r *Request) (ok bool, kind CheckKind) {
	switch {
	case len(sc.Cand) >= r.Nodes:
		return true, 0
	case sc.StaticOK < r.Nodes:
		return false, Static
	case sc.AvailOK < r.Nodes:
		return false, Availability
	}
	return false, Capacity
}

// StaticScan is what the static and availability checks made of a table's
// nodes for one shape: they depend on the request and the node records
// alone (not on what runs), so it holds across passes while the node
// records are the same.
type StaticScan struct {
	// Filtered counts the nodes each static or availability check filtered.
	Filtered map[string]int
	// StaticOK and AvailOK: as Shape's; Avail the nodes passing both kinds.
	StaticOK, AvailOK int
	Avail             []int32
}

// StaticScans caches StaticScans by shape key (AvoidReserved cleared: it only
// matters to a capacity check), for one table's node records.
type StaticScans map[ShapeKey]*StaticScan

// StaticScan returns the static and availability checks' results for r
// (key is r's shape key): from cache (nil: none), or a scan of every node,
// then kept in cache.
func (t Table) StaticScan(r *Request, key ShapeKey, cache StaticScans) *StaticScan {
	// Capacity only: the user's checks pass or fail on what runs.
	key.avoid, key.exclUser, key.user = false, false, ""
	if cache != nil {
		if ss := cache[key]; ss != nil {
			return ss
		}
	}
	checks := t.Checks
	ss := &StaticScan{Filtered: map[string]int{}}
	var buf [32]int
	counts := checkCounts(&buf, len(checks))
	defer addCounts(ss.Filtered, checks, counts)
	for i := range t.Views {
		v := &t.Views[i]
		failed := -1
		for ci := range checks {
			if checks[ci].Kind != Capacity && !checks[ci].Fits(r, v) {
				failed = ci
				break
			}
		}
		if failed >= 0 {
			counts[failed]++
			if checks[failed].Kind > Static {
				ss.StaticOK++
			}
			continue
		}
		ss.StaticOK++
		ss.AvailOK++
		ss.Avail = append(ss.Avail, int32(i))
	}
	if cache != nil {
		cache[key] = ss
	}
	return ss
}

// Scan looks at every node for r (key is r's shape key): the checks each
// fails, the nodes that pass every one. When StaticFirst holds for the
// checks, the static and availability checks' results come from StaticScan
// (and cache), and only the capacity checks look at the nodes those leave.
func (t Table) Scan(r *Request, key ShapeKey, cache StaticScans) *Shape {
	checks := t.Checks
	if StaticFirst(checks) {
		ss := t.StaticScan(r, key, cache)
		sc := &Shape{Filtered: maps.Clone(ss.Filtered), StaticOK: ss.StaticOK, AvailOK: ss.AvailOK, Avail: ss.Avail}
		// Nodes filtered are counted by check index, then by reason in
		// the map once: a map update per node filtered costs a hash each.
		var buf [32]int
		counts := checkCounts(&buf, len(checks))
		// StaticFirst: the capacity checks are the last ones.
		first := firstCapacity(checks)
		for _, i := range ss.Avail {
			v := &t.Views[i]
			failed := -1
			for ci := first; ci < len(checks); ci++ {
				if !checks[ci].Fits(r, v) {
					failed = ci
					break
				}
			}
			if failed >= 0 {
				counts[failed]++
				continue
			}
			sc.Cand = append(sc.Cand, i)
		}
		addCounts(sc.Filtered, checks, counts)
		return sc
	}
	sc := &Shape{Filtered: map[string]int{}}
	var buf [32]int
	counts := checkCounts(&buf, len(checks))
	defer addCounts(sc.Filtered, checks, counts)
	for i := range t.Views {
		v := &t.Views[i]
		failed := -1
		for ci := range checks {
			if !checks[ci].Fits(r, v) {
				failed = ci
				break
			}
		}
		kind := Capacity + 1
		if failed >= 0 {
			kind = checks[failed].Kind
			counts[failed]++
		}
		if kind > Static {
			sc.StaticOK++
		}
		if kind > Availability {
			sc.AvailOK++
			sc.Avail = append(sc.Avail, int32(i))
		}
		if failed < 0 {
			sc.Cand = append(sc.Cand, int32(i))
		}
	}
	return sc
}

// StaticFirst reports whether every static and availability check comes
// before every capacity check, as in DefaultChecks: then a node's first
// failed check is a static or availability one whenever it fails one, and
// StaticScan's results can be reused.
func StaticFirst(checks []Check) bool {
	seenCapacity := false
	for _, c := range checks {
		if c.Kind == Capacity {
			seenCapacity = true
		} else if seenCapacity {
			return false
		}
	}
	return true
}

// Refresh drops from sc's candidates the nodes that no longer have room for
// r, counting each under the capacity check it fails.
func (t Table) Refresh(r *Request, sc *Shape) *Shape {
	if len(sc.Cand) == 0 {
		return sc // nothing to drop (most blocked jobs' shapes)
	}
	checks := t.Checks
	var buf [32]int
	counts := checkCounts(&buf, len(checks))
	dropped := false
	first := firstCapacity(checks) // none before it to look at
	keep := sc.Cand[:0]
	for _, i := range sc.Cand {
		v := &t.Views[i]
		ok := true
		for ci := first; ci < len(checks); ci++ {
			if checks[ci].Kind == Capacity && !checks[ci].Fits(r, v) {
				counts[ci]++
				dropped = true
				ok = false
				break
			}
		}
		if ok {
			keep = append(keep, i)
		}
	}
	sc.Cand = keep
	if dropped {
		if sc.Shared {
			sc.Filtered = maps.Clone(sc.Filtered)
			sc.Shared = false
		}
		addCounts(sc.Filtered, checks, counts)
	}
	return sc
}

// firstCapacity returns the index of the first capacity check (len(checks)
// when none).
func firstCapacity(checks []Check) int {
	for ci := range checks {
		if checks[ci].Kind == Capacity {
			return ci
		}
	}
	return len(checks)
}

// checkCounts returns n zeroed counters, one per check: in buf when it
// holds them (no allocation), else fresh.
func checkCounts(buf *[32]int, n int) []int {
	if n <= len(buf) {
		return buf[:n]
	}
	return make([]int, n)
}

// addCounts adds the nodes counted by check index to filtered, by each
// check's reason (only the checks that filtered some: an entry is there
// only for a reason that filtered a node).
func addCounts(filtered map[string]int, checks []Check, counts []int) {
	for ci, n := range counts {
		if n > 0 {
			filtered[checks[ci].Reason] += n
		}
	}
}

// Rank compares candidate nodes a and b for r by the rankers in order (the
// first that tells them apart decides): < 0 when a is better.
func (t Table) Rank(r *Request, a, b int32) int {
	va, vb := &t.Views[a], &t.Views[b]
	for _, rk := range t.Rankers {
		if sa, sb := rk.Score(r, va), rk.Score(r, vb); sa != sb {
			if sa < sb {
				return -1
			}
			return 1
		}
	}
	return 0
}

// Choose picks r.Nodes of cand (at least that many), topology first: the
// smallest block that holds the whole gang, else the fewest blocks (largest
// first); within a block the best-ranked nodes (see Rank). The result is in
// view order (the pass's views are in hostname order).
func (t Table) Choose(r *Request, cand []int32) []int32 {
	n := r.Nodes
	out := make([]int32, 0, n)
	if n == len(cand) {
		return append(out, cand...)
	}
	if n == 1 {
		best := cand[0]
		for _, i := range cand[1:] {
			if t.Rank(r, i, best) < 0 {
				best = i
			}
		}
		return append(out, best)
	}
	byScore := func(list []int32) {
		slices.SortStableFunc(list, func(a, b int32) int { return t.Rank(r, a, b) })
	}
	blocks := map[string][]int32{}
	for _, i := range cand {
		b := t.Views[i].Node.Block
		blocks[b] = append(blocks[b], i)
	}
	if len(blocks) == 1 {
		list := slices.Clone(cand)
		byScore(list)
		out = append(out, list[:n]...)
		slices.Sort(out)
		return out
	}
	names := make([]string, 0, len(blocks))
	for b := range blocks {
		names = append(names, b)
	}
	sort.Strings(names)
	bestFit := ""
	for _, b := range names {
		if len(blocks[b]) >= n && b != "" && (bestFit == "" || len(blocks[b]) < len(blocks[bestFit])) {
			bestFit = b
		}
	}
	if bestFit != "" {
		list := blocks[bestFit]
		byScore(list)
		out = append(out, list[:n]...)
		slices.Sort(out)
		return out
	}
	// No one block holds the gang: the fewest blocks, largest first (nodes
	// without a block last).
	sort.SliceStable(names, func(a, b int) bool {
		if (names[a] == "") != (names[b] == "") {
			return names[b] == ""
		}
		return len(blocks[names[a]]) > len(blocks[names[b]])
	})
	for _, b := range names {
		list := blocks[b]
		byScore(list)
		for _, i := range list {
			if len(out) == n {
				break
			}
			out = append(out, i)
		}
	}
	slices.Sort(out)
	return out
}

// Take records in view i an allocation of gpus GPUs (the lowest free
// first), cpus CPUs and mem MB for user's run, held whole when exclusive,
// kept to user's jobs when exclUser, and returns the GPU indices it got.
func (t Table) Take(i int32, gpus int32, cpus int32, mem int64, exclusive bool, user string, exclUser bool) []int32 {
	v := &t.Views[i]
	var got []int32
	for g := 0; g < MaxGPUsPerNode && int32(len(got)) < gpus; g++ {
		if v.FreeMask&(1<<uint(g)) != 0 {
			got = append(got, int32(g))
			v.FreeMask &^= 1 << uint(g)
		}
	}
	v.FreeGPUs -= int32(len(got))
	v.FreeCPUs -= cpus
	v.FreeMemMB -= mem
	if v.Runs == 0 {
		v.OnlyUser = user
	} else if v.OnlyUser != user {
		v.OnlyUser = ""
	}
	v.Runs++
	if exclusive {
		v.Exclusive = true
	}
	if exclUser {
		v.Owner = user
	}
	return got
}
