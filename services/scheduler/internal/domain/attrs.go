package domain

import (
	"strconv"
	"strings"

	"github.com/loom-ml/loom/libs/slurmspec"
	"github.com/loom-ml/loom/services/scheduler/internal/domain/place"
)

// Compact, memory-only copies of what a scheduling pass reads of each job,
// computed once when a record enters the state (records are immutable
// there), so that a pass over 100,000 jobs does not chase pointers through
// every job's protobuf or parse its id on every pass.

// assoc is an account/user association, interned per state.
type assoc struct {
	account, user string
	// id indexes State.assocList; -1 for one not interned (a job or run
	// that exists only in a change).
	id int32
}

// jobAttrs is what a pass reads of a pending job.
type jobAttrs struct {
	name string
	id   int64
	// eligible is when the job became eligible (submit, or --begin when
	// later), begin its --begin; unix nanoseconds, 0 when none.
	eligible, begin int64
	limit           int64 // --time in seconds; 0: the partition's
	gpus            int64 // GPUs in all
	assoc           *assoc
	qos             int32 // index in the QOS table; -1 when unknown
	nice            int32 // --nice, subtracted from the priority
	part            string
	reason          string
	// req is the job's request with Partition, AvoidReserved, Nodelist and
	// Exclude left to the pass.
	req    place.Request
	hold   bool
	deps   bool
	array  bool
	lists  bool // --nodelist, --exclude or failed nodes
	spread bool // --gpus without --gpus-per-node: the node count depends on the partition
	// ran: an earlier attempt ran (Attempt > 0), so the pass looks at
	// whether its run is still stopping, without a look at the job itself.
	ran bool
	// multi: part names several partitions (-p a,b; multipart.go).
	multi bool
	// shape is req's index in the state's interned requests (see
	// internShape), -1 for a job with lists or spread GPUs (its request
	// depends on more than its attributes), a node range placed at its
	// widths (rangeWidens) or one not interned.
	shape int32
}

// shapeOf is what identifies an interned request: every field a pass does
// not fill in itself.
type shapeOf struct {
	nodes       int
	gpusPerNode int32
	gpuType     string
	cpusPerNode int32
	memMB       int64
	exclusive   bool
	exclUser    bool
}

// maxShapes bounds the interned requests (they are never forgotten): past
// it, jobs of new shapes are placed as those with lists are.
const maxShapes = 4096

// shapeID returns the index of r among the interned requests, interning it
// when intern is set (Commit and Load only: passes and reads run beside
// each other and only look), or -1.
func (s *State) shapeID(r *place.Request, intern bool) int32 {
	k := shapeOf{r.Nodes, r.GPUsPerNode, r.GPUType, r.CPUsPerNode, r.MemMB, r.Exclusive, r.ExclusiveUser}
	if id, ok := s.shapeIDs[k]; ok {
		return id
	}
	if !intern || len(s.shapeReqs) >= maxShapes {
		return -1
	}
	if s.shapeIDs == nil {
		s.shapeIDs = map[shapeOf]int32{}
	}
	id := int32(len(s.shapeReqs))
	s.shapeIDs[k] = id
	s.shapeReqs = append(s.shapeReqs, *r)
	return id
}

// pendEntry is a pending job and its attributes, by value.
type pendEntry struct {
	j *Job
	jobAttrs
}

// internAssoc returns the interned association of account and user.
func (s *State) internAssoc(account, user string) *assoc {
	k := assocKey{account, user}
	if a := s.assocs[k]; a != nil {
		return a
	}
	a := &assoc{account: account, user: user, id: int32(len(s.assocList))}
	s.assocs[k] = a
	s.assocList = append(s.assocList, a)
	return a
}

// lookupAssoc returns the interned association, or a fresh uninterned one.
func (s *State) lookupAssoc(account, user string) *assoc {
	if a := s.assocs[assocKey{account, user}]; a != nil {
		return a
	}
	return &assoc{account: account, user: user, id: -1}
}

// assocOf is lookupAssoc(account, user), answered without the look-up by
// hint when hint is the interned association of those names in s (a run's,
// interned by addRun: a running job's is most often its run's). Interned
// associations are never dropped, but a run's records may be loaded into
// more than one state: hint is checked to be s's own.
func (s *State) assocOf(account, user string, hint *assoc) *assoc {
	if hint != nil && hint.id >= 0 && int(hint.id) < len(s.assocList) && s.assocList[hint.id] == hint &&
		hint.account == account && hint.user == user {
		return hint
	}
	return s.lookupAssoc(account, user)
}

// attrsOf returns j's attributes: those computed when it entered the state,
// else (a record of the change) computed now. Valid until the next Commit.
func (s *State) attrsOf(j *Job) *jobAttrs {
	if a := s.storedAttrs(j); a != nil {
		return a
	}
	return s.newAttrs(j, false)
}

// storedAttrs returns the attributes computed when j entered the state, in
// its queue entry (valid until the next Commit), or nil when j is not a
// pending job of the state (a record of a change, or not pending). They are
// kept only there: one copy per job, built in place by Load.
func (s *State) storedAttrs(j *Job) *jobAttrs {
	if !j.Pending() {
		return nil
	}
	ci := s.byCluster[j.Job.GetCluster()]
	if ci == nil {
		return nil
	}
	if i, ok := ci.pendPos[j.Name()]; ok && ci.pending[i].j == j {
		return &ci.pending[i].jobAttrs
	}
	return nil
}

func (s *State) newAttrs(j *Job, intern bool) *jobAttrs {
	a := new(jobAttrs)
	s.fillAttrs(a, j, intern)
	return a
}

// fillAttrs sets *a (zero) to j's attributes (see newAttrs).
func (s *State) fillAttrs(a *jobAttrs, j *Job, intern bool) {
	spec := j.Job
	*a = jobAttrs{name: spec.GetName(), limit: spec.GetTimeLimitSeconds(), gpus: int64(jobGPUs(j)),
		part: spec.GetPartition(), reason: spec.GetStateReason(), hold: spec.GetHold(),
		deps: spec.GetDependency() != "", array: spec.GetArrayJobId() != "",
		lists:  len(spec.GetNodelist()) > 0 || len(spec.GetExclude()) > 0 || len(j.Excluded) > 0 || j.Avoid != "",
		spread: spec.GetGpusPerNode() == 0 && spec.GetGpus() > 0, qos: -1, nice: spec.GetNice(), ran: j.Attempt > 0,
		multi: slurmspec.IsPartitionList(spec.GetPartition())}
	a.id, _ = strconv.ParseInt(spec.GetJobId(), 10, 64)
	if ts := spec.GetSubmitTime(); ts != nil {
		a.eligible = ts.AsTime().UnixNano()
	}
	if b := spec.GetBeginTime(); b != nil {
		a.begin = b.AsTime().UnixNano()
		a.eligible = max(a.eligible, a.begin)
	}
	if intern {
		a.assoc = s.internAssoc(spec.GetAccount(), spec.GetUser())
	} else {
		a.assoc = s.lookupAssoc(spec.GetAccount(), spec.GetUser())
	}
	name := spec.GetQos()
	if name == "" {
		name = s.cfg.DefaultQOS
	}
	for i, q := range s.cfg.QOS {
		if q.Name == name {
			a.qos = int32(i)
		}
	}
	a.req = place.Request{Nodes: int(max(spec.GetNodeCount(), 1)), GPUsPerNode: spec.GetGpusPerNode(),
		GPUType: strings.ToLower(spec.GetGpuType()), MemMB: spec.GetMemMb(), Exclusive: spec.GetExclusive(),
		ExclusiveUser: spec.GetExclusiveUser()}
	a.req.CPUsPerNode = minCPUsPerNode(spec)
	// --mem-per-cpu sizes the minimum's memory by its CPUs: mem_mb holds
	// a running job's width's, which a requeue must not keep.
	a.req.MemMB = slurmspec.WidthMemMB(spec, a.req.CPUsPerNode)
	a.shape = -1
	if !a.lists && !a.spread && !rangeWidens(spec) {
		a.shape = s.shapeID(&a.req, intern)
	}
}

// prioAttrs sets in a what a priority reads of j (hold, eligible, GPUs,
// association, QOS, node count) as newAttrs(j, false) sets them, for the
// running jobs the preemption stage ranks, whose attributes are not kept:
// the rest (request, shape) is not built. hint, when not nil, is the
// association j's run holds (see assocOf).
func (s *State) prioAttrs(j *Job, a *jobAttrs, hint *assoc) {
	// No look for stored attributes first: only pending jobs have them,
	// and a look costs the rank of 25,000 running jobs a read of each
	// one's state.
	spec := j.Job
	a.hold, a.gpus, a.qos, a.nice = spec.GetHold(), int64(jobGPUs(j)), -1, spec.GetNice()
	a.eligible = 0
	if ts := spec.GetSubmitTime(); ts != nil {
		a.eligible = ts.AsTime().UnixNano()
	}
	if b := spec.GetBeginTime(); b != nil {
		a.eligible = max(a.eligible, b.AsTime().UnixNano())
	}
	a.assoc = s.assocOf(spec.GetAccount(), spec.GetUser(), hint)
	name := spec.GetQos()
	if name == "" {
		name = s.cfg.DefaultQOS
	}
	for i, q := range s.cfg.QOS {
		if q.Name == name {
			a.qos = int32(i)
		}
	}
	a.req.Nodes = int(max(spec.GetNodeCount(), 1))
}

// runAssoc returns a run's association.
func (s *State) runAssoc(r *Run) *assoc {
	if r.assoc != nil {
		return r.assoc
	}
	return s.lookupAssoc(r.Account, r.User)
}
