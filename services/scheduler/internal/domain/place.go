package domain

import (
	"slices"

	"github.com/loom-ml/loom/libs/slurmspec"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"

	"github.com/loom-ml/loom/services/scheduler/internal/domain/place"
)

// The pass's side of placement: package place checks, ranks and chooses
// nodes over the pass's node table; the pass keeps the shapes it found for
// its jobs (by interned request, else by shape key) and, across passes, the
// static checks' results and the node records as placement reads them.

// placement is the outcome of placing one job.
type placement struct {
	ok    bool
	nodes []int32
	shape *place.Shape
	// kind is the kind of check that left too few nodes.
	kind place.CheckKind
}

// table returns the pass's node table with the policy's checks and rankers.
func (p *pass) table() place.Table {
	pol := &p.t.s.cfg.Policy
	return place.Table{Views: p.views, Checks: pol.Checks, Rankers: pol.Rankers}
}

// shapeSlot returns where the pass keeps the shape of interned request id
// in partition r.Partition with r.AvoidReserved, or nil when it keeps none
// (the shape is then found by its key alone).
func (p *pass) shapeSlot(r *place.Request, id int32) **place.Shape {
	if id < 0 || r.Partition < 0 || r.Partition >= len(p.parts) {
		return nil
	}
	i := (int(id)*len(p.parts)+r.Partition)*2 + b2i(r.AvoidReserved)
	if i >= len(p.slots) {
		n := len(p.t.s.shapeReqs) * len(p.parts) * 2
		if i >= n {
			return nil
		}
		p.slots = append(p.slots, make([]*place.Shape, n-len(p.slots))...)
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
// lead to the same Shape.
func (p *pass) shape(r *place.Request, id int32) *place.Shape {
	if r.User != "" {
		// The shape is the user's (requestIn): its interned request's
		// slot is shared by every user.
		id = -1
		if r.ExclusiveUser {
			p.fillOnlyUsers()
		}
	}
	tb := p.table()
	var sc *place.Shape
	slot := p.shapeSlot(r, id)
	if slot != nil {
		sc = *slot
	}
	if sc == nil {
		key := place.KeyOf(r)
		sc = p.shapes[key]
		fresh := sc == nil
		if fresh {
			var scans place.StaticScans
			if p.static != nil {
				scans = p.static.scans
			}
			sc = tb.Scan(r, key, scans)
			p.shapes[key] = sc
		}
		if slot != nil {
			*slot = sc
		}
		if fresh {
			return sc
		}
	}
	return tb.Refresh(r, sc)
}

// staticCache holds what placement made of a cluster's node records across
// passes, for the node records nodes of the cluster record cluster, in that
// order: the static scans by shape, and the records as placement reads them.
type staticCache struct {
	cluster *Cluster
	nodes   []*Node
	scans   place.StaticScans
	// placed[i] is nodes[i] as placement reads it, parts[i] its
	// partitions (NodeView.Parts; nil until a pass fills it in).
	placed []place.Node
	parts  []uint64
	// held[i] is what the runs on nodes[i] hold there, as of the state's
	// mirrored heldAt (see pass.keptHoldings); heldSlab lends them room.
	held     []heldEntry
	heldAt   uint64
	heldSlab []holding
	// allocs[i] is the state's allocation entry of nodes[i] (nil: none)
	// as of the state's allocVer allocAt (see allocsOf); vals[i] a copy of
	// what it held as of the state's allocVals valsAt (see allocValsOf).
	allocs  []*nodeAlloc
	allocAt uint64
	vals    []nodeAlloc
	valsAt  uint64
}

// allocsOf returns the state's allocation entry of each node of the cache,
// looked up again only when the state's entries were added or removed since
// the last time: a pass reads 10,000 nodes' entries, a map look-up each.
func (sc *staticCache) allocsOf(s *State) []*nodeAlloc {
	if sc.allocs != nil && sc.allocAt == s.allocVer {
		return sc.allocs
	}
	if sc.allocs == nil {
		sc.allocs = make([]*nodeAlloc, len(sc.nodes))
	}
	for i, n := range sc.nodes {
		sc.allocs[i] = s.alloc[n.Name]
	}
	sc.allocAt = s.allocVer
	return sc.allocs
}

// allocValsOf returns what the state's allocation entry of each node of the
// cache holds (zero: no entry), contiguous: copied again only when an entry
// changed since the last time. A pass reads all 10,000 nodes' entries, and
// the entries, all over memory, cost a cache miss each.
func (sc *staticCache) allocValsOf(s *State) []nodeAlloc {
	if sc.vals != nil && sc.valsAt == s.allocVals {
		return sc.vals
	}
	if sc.vals == nil {
		sc.vals = make([]nodeAlloc, len(sc.nodes))
	}
	for i, a := range sc.allocsOf(s) {
		if a != nil {
			sc.vals[i] = *a
		} else {
			sc.vals[i] = nodeAlloc{}
		}
	}
	sc.valsAt = s.allocVals
	return sc.vals
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
	sc = &staticCache{cluster: c, nodes: slices.Clone(nodes), scans: place.StaticScans{}, placed: placeNodes(nodes)}
	t.scratch.static[name] = sc
	return sc
}

// placeNodes returns the node records as placement reads them.
func placeNodes(nodes []*Node) []place.Node {
	out := make([]place.Node, len(nodes))
	for i, n := range nodes {
		out[i] = place.Node{Name: n.Name, Hostname: n.Hostname, Block: n.Block, Role: n.Role, State: n.State,
			Unhealthy: n.Unhealthy || n.HealthDrain || n.Unreachable || n.PrologHold, AdminDrain: n.AdminDrain, AdminDown: n.AdminDown, GPUs: n.GPUs, GresType: n.GresType, CPUs: n.CPUs,
			MemoryMB: n.MemoryMB}
	}
	return out
}

// placeNode returns node record i of the pass's cluster, n, as placement
// reads it: kept across passes when the pass has a static cache.
func (p *pass) placeNode(i int, n *Node) *place.Node {
	if p.static != nil {
		return &p.static.placed[i]
	}
	return &placeNodes([]*Node{n})[0]
}

// place finds r's nodes: all of them or none (a gang).
func (p *pass) place(r *place.Request, id int32) placement {
	sc := p.shape(r, id)
	out := placement{shape: sc}
	if out.ok, out.kind = sc.Outcome(r); out.ok {
		out.nodes = p.table().Choose(r, sc.Cand)
	}
	return out
}

// rangeWidens reports whether spec's node range is placed at its widths
// (slurmspec.RangeWidest above its minimum): such a job has no interned shape, as
// the minimum's shape settling empty (decideSettled) says nothing of the
// wider widths.
func rangeWidens(spec *loomv1.Job) bool {
	least := int(max(spec.GetNodeCount(), 1))
	return slurmspec.RangeWidest(spec, least) > least
}

// placeWidths places q's job with req, its request at its minimum: for a
// node range of -n tasks (slurmspec.RangeWidest), at each width from the widest
// down to the minimum, each with that width's per-node CPUs (the tasks
// over that many nodes), the first that fits within the limits a start is
// checked against (fitsLimits) winning. As Slurm 22.05's select gives a
// range the most nodes it can up to its maximum, the tasks spread over
// them (measured on 4-CPU nodes: -N1-3 -n5 idle ran 3,1,1 on 3 nodes,
// with node1 and node2 full 4,1 on node[3-4]; -N1-2 -n4 with 2 CPUs free
// on node1 2,2 on node[1-2]), where placing at the minimum's share alone
// left -N1-3 -n5 pending for ever (5 CPUs a node on none) and passed over
// a node with less than that share free. At most max-min+1 placements
// (fewer: a width with c candidates rules out the widths between it and
// c), each of a shape the pass caches; and as many again, upward from the
// minimum up to the nodes that pass the static checks at the widest, for
// the narrowest width that can ever fit (below) when the minimum cannot. When none fits it returns the minimum's request and
// placement, so that the job waits, is planned (backfill) and preempts
// for as before; unless the minimum can never fit
// (its per-node share past every node: a static outcome) and a wider
// width could, whose request it then returns, so that the job waits for
// resources and is planned at a width that can start. A job no width can
// ever fit keeps the minimum's static outcome (BadConstraints).
func (p *pass) placeWidths(q *queued, req *place.Request) (*place.Request, placement) {
	spec := q.j.Job
	top := slurmspec.RangeWidest(spec, req.Nodes)
	if top <= req.Nodes {
		return req, p.place(req, q.shape)
	}
	// ever bounds the widths that can ever fit: the nodes that pass the
	// static checks at the widest, whose per-node share is the least (a
	// narrower width's pass at most those). Past it every width is static.
	ever := top
	for w := top; w > req.Nodes; {
		r := p.widthRequest(req, spec, w)
		res := p.place(r, -1)
		if w == top {
			ever = res.shape.StaticOK
		}
		if res.ok && p.fitsLimits(q, r, w) {
			return r, res
		}
		next := w - 1
		if !res.ok {
			// A narrower width asks more of each node: its candidates are
			// some of these, so none wider than their count fits.
			next = min(next, len(res.shape.Cand))
		}
		w = next
	}
	res := p.place(req, q.shape)
	if res.ok || res.kind != place.Static {
		return req, res
	}
	// The minimum can never fit: the narrowest width that can, if any
	// (at most ever: a width past the nodes that can ever be candidates
	// is static, and trying each up to a maximum of thousands, on every
	// pass, cost a placement and a cached static scan apiece).
	for w := req.Nodes + 1; w <= min(top, ever); w++ {
		r := p.widthRequest(req, spec, w)
		wres := p.place(r, -1)
		if wres.ok {
			// It fits there now, so past its limits (fitsLimits: the
			// loop above tried it): it waits, as for resources, rather
			// than start past them.
			wres.ok, wres.kind, wres.nodes = false, place.Capacity, nil
		}
		if wres.kind != place.Static {
			return r, wres
		}
	}
	return req, res
}

// widthRequest is req (a request at the job's minimum) at width nodes:
// that many nodes, each with the CPUs of the job's tasks spread over them
// and, for --mem-per-cpu, the memory of those CPUs (slurmspec.WidthMemMB:
// sized by the minimum's CPUs, a wider width asked each node for more
// memory than Slurm's and could fit no node with less free). It lives in
// the pass (p.wide) until the next call.
func (p *pass) widthRequest(req *place.Request, spec *loomv1.Job, nodes int) *place.Request {
	p.wide = *req
	p.wide.Nodes = nodes
	p.wide.CPUsPerNode = cpusPerNode(spec, nodes, req.GPUsPerNode)
	p.wide.MemMB = slurmspec.WidthMemMB(spec, p.wide.CPUsPerNode)
	return &p.wide
}

// widen returns the nodes a job placed on res.nodes (its minimum, r.Nodes)
// starts on: for a node range (-N MIN-MAX) as many of the shape's
// candidates as there are, up to the maximum, as Slurm's select gives a
// job up to its max_nodes when free (measured on 22.05: -N1-3 on an idle
// 4-node partition takes 3, on 2 free nodes 2). As Slurm, a range takes no
// more nodes than the job has tasks (-n, else --ntasks-per-node times the
// minimum: -N1-3 -n2 takes 2, -N1-3 --ntasks-per-node=2 2), and a job whose
// GPUs the scheduler spreads (--gpus without a per-node count) keeps its
// minimum, as Slurm's -N1-3 --gpus=4 runs on 1 node. The candidates all
// meet r's per-node needs, which only shrink as nodes are added (tasks
// spread thinner), so every one can take its share. A range of -n tasks
// was already placed at its wider widths, each with its own thinner
// per-node request (placeWidths), so this adds no node to it. Only the
// start widens: reservations and backfill plan on the minimum (on the
// narrowest width that can ever fit, when the minimum cannot:
// placeWidths), so a range never holds back a job behind it for nodes it
// merely could use. Nor does a range
// take a start past its association's, account's or QOS's limits: those
// gates looked at its minimum only.
func (p *pass) widen(q *queued, r *place.Request, res placement) []int32 {
	spec := q.j.Job
	most := int(spec.GetMaxNodeCount())
	if most <= len(res.nodes) || len(res.shape.Cand) <= len(res.nodes) || spec.GetGpusPerNode() == 0 && spec.GetGpus() > 0 {
		return res.nodes
	}
	switch {
	case spec.GetNtasks() > 0:
		most = min(most, int(spec.GetNtasks()))
	case spec.GetNtasksPerNode() > 0:
		most = min(most, int(spec.GetNtasksPerNode())*r.Nodes)
	}
	most = min(most, len(res.shape.Cand))
	// Within the limits the gates checked the minimum against: the most
	// nodes whose start they would let through (Slurm caps max_nodes by
	// the node limits, acct_policy_get_max_nodes, and refuses an
	// allocation past the others after select).
	for most > len(res.nodes) && !p.fitsLimits(q, r, most) {
		most--
	}
	if most <= len(res.nodes) {
		return res.nodes
	}
	wide := *r
	wide.Nodes = most
	return p.table().Choose(&wide, res.shape.Cand)
}

// fitsLimits reports whether a start of q on n nodes of r's per-node needs
// (an upper bound: a wider start's tasks spread thinner) stays within the
// TRES limits of its association and accounts (tresOver) and its QOS's
// MaxGPUsPerUser, as gates assoc-tres and qos-gres-per-user check a start
// on the minimum.
func (p *pass) fitsLimits(q *queued, r *place.Request, n int) bool {
	spec := q.j.Job
	gpus := q.e.gpus
	if g := spec.GetGpusPerNode(); g > 0 {
		gpus = int64(g) * int64(n)
	}
	req := satTRES(int64(r.CPUsPerNode), r.MemMB, int64(n), gpus)
	if p.tresOver(spec, &req) != "" {
		return false
	}
	if q.qos >= 0 {
		if qs := &p.t.s.cfg.QOS[q.qos]; qs.MaxGPUsPerUser > 0 {
			if p.qosUse == nil {
				p.countQOS()
			}
			if int64(p.qosUse[assocKey{qs.Name, spec.GetUser()}])+gpus > int64(qs.MaxGPUsPerUser) {
				return false
			}
		}
	}
	return true
}

// take gives user's run the resources it needs on view i and returns the
// GPU indices it got (lowest free first). The first --exclusive=user run
// of the pass makes every later shape its user's (see requestIn): the
// shapes found so far, for no user, are dropped.
func (p *pass) take(i int32, gpus int32, cpus int32, mem int64, exclusive bool, user string, exclUser bool) []int32 {
	if exclUser && !p.owned {
		p.owned = true
		clear(p.shapes)
		clear(p.slots)
	}
	return p.table().Take(i, gpus, cpus, mem, exclusive, user, exclUser)
}

// fillOnlyUsers sets each view's OnlyUser from the runs on it, once a pass,
// before an --exclusive=user request is first placed: it reads every run
// on every node, which the passes without such a job skip.
func (p *pass) fillOnlyUsers() {
	if p.usersFilled {
		return
	}
	p.usersFilled = true
	for i := range p.views {
		v := &p.views[i]
		v.OnlyUser = ""
		for k, r := range p.held[i] {
			if k == 0 {
				v.OnlyUser = r.User
			} else if r.User != v.OnlyUser {
				v.OnlyUser = ""
				break
			}
		}
	}
}
