package domain

import (
	"maps"
	"slices"
	"sort"
	"strings"
)

// shapeKey identifies jobs that fit the same nodes: within a pass, jobs of
// one shape share one scan of the nodes.
type shapeKey struct {
	part    int
	gpn     int32
	gpuType string
	cpus    int32
	mem     int64
	excl    bool
	avoid   bool
	// lists holds --nodelist and --exclude (and failed nodes), written out
	// only for the jobs that have them.
	lists string
}

// shapeCand is what a pass knows of the nodes for one shape.
type shapeCand struct {
	// cand are the nodes (indexes into the pass's views) that passed every
	// check when last looked at. Resources only get taken during a pass, so
	// a node that fails a capacity check never comes back and is dropped.
	cand []int32
	// avail are the nodes that pass the static and availability checks:
	// those a reservation or a preemption may count on.
	avail []int32
	// filtered counts the nodes filtered by each check's reason.
	filtered map[string]int
	// shared: filtered is referenced by a decision; copy it before a change.
	shared bool
	// static and availOK count the nodes passing the static checks, and
	// the static and availability checks.
	static, availOK int
	// inAvail marks avail by view index (built when a preemption needs it).
	inAvail []bool
}

// placement is the outcome of placing one job.
type placement struct {
	ok    bool
	nodes []int32
	shape *shapeCand
	// kind is the kind of check that left too few nodes.
	kind CheckKind
}

func (p *pass) shapeKey(r *Request) shapeKey {
	k := shapeKey{part: r.Partition, gpn: r.GPUsPerNode, gpuType: r.GPUType, cpus: r.CPUsPerNode,
		mem: r.MemMB, excl: r.Exclusive, avoid: r.AvoidReserved}
	if len(r.Nodelist) > 0 || len(r.Exclude) > 0 {
		var b strings.Builder
		for _, h := range slices.Sorted(maps.Keys(r.Nodelist)) {
			b.WriteString(h)
			b.WriteByte(',')
		}
		b.WriteByte('|')
		for _, h := range slices.Sorted(maps.Keys(r.Exclude)) {
			b.WriteString(h)
			b.WriteByte(',')
		}
		k.lists = b.String()
	}
	return k
}

// shapeSlot returns where the pass keeps the shape of interned request id
// in partition r.Partition with r.AvoidReserved, or nil when it keeps none
// (the shape is then found by its key alone).
func (p *pass) shapeSlot(r *Request, id int32) **shapeCand {
	if id < 0 || r.Partition < 0 || r.Partition >= len(p.parts) {
		return nil
	}
	i := (int(id)*len(p.parts)+r.Partition)*2 + b2i(r.AvoidReserved)
	if i >= len(p.slots) {
		n := len(p.t.s.shapeReqs) * len(p.parts) * 2
		if i >= n {
			return nil
		}
		p.slots = append(p.slots, make([]*shapeCand, n-len(p.slots))...)
	}
	return &p.slots[i]
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// shape returns the nodes for r's shape: a fresh scan the first time in the
// pass, else the cached candidates with the nodes that filled up since
// dropped. id is r's interned request (-1: none): jobs of one interned
// request find their shape by index, the others by hashing its key; both
// lead to the same shapeCand.
func (p *pass) shape(r *Request, id int32) *shapeCand {
	checks := p.t.s.cfg.Policy.Checks
	var sc *shapeCand
	slot := p.shapeSlot(r, id)
	if slot != nil {
		sc = *slot
	}
	if sc == nil {
		key := p.shapeKey(r)
		sc = p.shapes[key]
		fresh := sc == nil
		if fresh {
			sc = p.scan(r, key, checks)
			p.shapes[key] = sc
		}
		if slot != nil {
			*slot = sc
		}
		if fresh {
			return sc
		}
	}
	return p.refresh(r, sc, checks)
}

// staticScan is what the static and availability checks made of a
// cluster's nodes for one shape: they depend on the request and the node
// records alone (not on what runs), so it holds across passes while the
// cluster's node records are the same (see staticCache).
type staticScan struct {
	// filtered counts the nodes each static or availability check filtered.
	filtered map[string]int
	// static and availOK: as shapeCand's; avail the nodes passing both kinds.
	static, availOK int
	avail           []int32
}

// staticCache holds a cluster's staticScans, by shape (AvoidReserved
// cleared: it only matters to a capacity check), for the node records nodes
// of the cluster record cluster, in that order.
type staticCache struct {
	cluster *Cluster
	nodes   []*Node
	scans   map[shapeKey]*staticScan
}

// maxStaticScans bounds a cluster's cached scans (jobs with node lists
// each have their own shape): past it the cache starts again.
const maxStaticScans = 1024

// staticCacheFor returns the writer's cache of static scans for the pass's
// cluster, emptied when its node records or its record changed since the
// scans were made, or nil for a txn without scratch (reads).
func (t *txn) staticCacheFor(name string, c *Cluster, nodes []*Node) *staticCache {
	if t.scratch == nil {
		return nil
	}
	if t.scratch.static == nil {
		t.scratch.static = map[string]*staticCache{}
	}
	sc := t.scratch.static[name]
	if sc != nil && sc.cluster == c && slices.Equal(sc.nodes, nodes) && len(sc.scans) < maxStaticScans {
		return sc
	}
	sc = &staticCache{cluster: c, nodes: slices.Clone(nodes), scans: map[shapeKey]*staticScan{}}
	t.scratch.static[name] = sc
	return sc
}

// staticScan returns the static and availability checks' results for r
// (key is r's shape key): from the cache, or a scan of every node.
func (p *pass) staticScan(r *Request, key shapeKey, checks []Check) *staticScan {
	key.avoid = false
	if p.static != nil {
		if ss := p.static.scans[key]; ss != nil {
			return ss
		}
	}
	ss := &staticScan{filtered: map[string]int{}}
	for i := range p.views {
		v := &p.views[i]
		failed := -1
		for ci := range checks {
			if checks[ci].Kind != Capacity && !checks[ci].Fits(r, v) {
				failed = ci
				break
			}
		}
		if failed >= 0 {
			ss.filtered[checks[failed].Reason]++
			if checks[failed].Kind > Static {
				ss.static++
			}
			continue
		}
		ss.static++
		ss.availOK++
		ss.avail = append(ss.avail, int32(i))
	}
	if p.static != nil {
		p.static.scans[key] = ss
	}
	return ss
}

// scan looks at every node for r: the checks each fails, the nodes that
// pass every one. The static and availability checks' results come from
// staticScan; only the capacity checks look at the nodes those leave.
func (p *pass) scan(r *Request, key shapeKey, checks []Check) *shapeCand {
	if p.staticFirst(checks) {
		ss := p.staticScan(r, key, checks)
		sc := &shapeCand{filtered: maps.Clone(ss.filtered), static: ss.static, availOK: ss.availOK, avail: ss.avail}
		for _, i := range ss.avail {
			v := &p.views[i]
			failed := -1
			for ci := range checks {
				if checks[ci].Kind == Capacity && !checks[ci].Fits(r, v) {
					failed = ci
					break
				}
			}
			if failed >= 0 {
				sc.filtered[checks[failed].Reason]++
				continue
			}
			sc.cand = append(sc.cand, i)
		}
		return sc
	}
	sc := &shapeCand{filtered: map[string]int{}}
	for i := range p.views {
		v := &p.views[i]
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
			sc.filtered[checks[failed].Reason]++
		}
		if kind > Static {
			sc.static++
		}
		if kind > Availability {
			sc.availOK++
			sc.avail = append(sc.avail, int32(i))
		}
		if failed < 0 {
			sc.cand = append(sc.cand, int32(i))
		}
	}
	return sc
}

// staticFirst reports whether every static and availability check comes
// before every capacity check, as in DefaultChecks: then a node's first
// failed check is a static or availability one whenever it fails one, and
// staticScan's results can be reused.
func (p *pass) staticFirst(checks []Check) bool {
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

// refresh drops from sc's candidates the nodes that no longer have room for r.
func (p *pass) refresh(r *Request, sc *shapeCand, checks []Check) *shapeCand {
	keep := sc.cand[:0]
	for _, i := range sc.cand {
		v := &p.views[i]
		ok := true
		for ci := range checks {
			if checks[ci].Kind == Capacity && !checks[ci].Fits(r, v) {
				if sc.shared {
					sc.filtered = maps.Clone(sc.filtered)
					sc.shared = false
				}
				sc.filtered[checks[ci].Reason]++
				ok = false
				break
			}
		}
		if ok {
			keep = append(keep, i)
		}
	}
	sc.cand = keep
	return sc
}

// place finds r's nodes: all of them or none (a gang).
func (p *pass) place(r *Request, id int32) placement {
	sc := p.shape(r, id)
	out := placement{shape: sc}
	if len(sc.cand) >= r.Nodes {
		out.ok = true
		out.nodes = p.choose(r, sc.cand)
		return out
	}
	switch {
	case sc.static < r.Nodes:
		out.kind = Static
	case sc.availOK < r.Nodes:
		out.kind = Availability
	default:
		out.kind = Capacity
	}
	return out
}

// rank compares candidate nodes a and b for r by the policy's rankers in
// order (the first that tells them apart decides): < 0 when a is better.
func (p *pass) rank(r *Request, a, b int32) int {
	va, vb := &p.views[a], &p.views[b]
	for _, rk := range p.t.s.cfg.Policy.Rankers {
		if sa, sb := rk.Score(r, va), rk.Score(r, vb); sa != sb {
			if sa < sb {
				return -1
			}
			return 1
		}
	}
	return 0
}

// choose picks r.Nodes of cand, topology first: the smallest block that holds
// the whole gang, else the fewest blocks (largest first); within a block the
// best-ranked nodes (see rank). The result is in hostname order (rank order).
func (p *pass) choose(r *Request, cand []int32) []int32 {
	n := r.Nodes
	out := make([]int32, 0, n)
	if n == len(cand) {
		return append(out, cand...)
	}
	if n == 1 {
		best := cand[0]
		for _, i := range cand[1:] {
			if p.rank(r, i, best) < 0 {
				best = i
			}
		}
		return append(out, best)
	}
	byScore := func(list []int32) {
		slices.SortStableFunc(list, func(a, b int32) int { return p.rank(r, a, b) })
	}
	blocks := map[string][]int32{}
	for _, i := range cand {
		b := p.views[i].Node.Block
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

// take gives a run the resources it needs on view i and returns the GPU
// indices it got (lowest free first).
func (p *pass) take(i int32, gpus int32, cpus int32, mem int64, exclusive bool) []int32 {
	v := &p.views[i]
	var got []int32
	for g := 0; g < MaxGPUsPerNode && int32(len(got)) < gpus; g++ {
		if v.freeMask&(1<<uint(g)) != 0 {
			got = append(got, int32(g))
			v.freeMask &^= 1 << uint(g)
		}
	}
	v.FreeGPUs -= int32(len(got))
	v.FreeCPUs -= cpus
	v.FreeMemMB -= mem
	v.Runs++
	if exclusive {
		v.Exclusive = true
	}
	return got
}
