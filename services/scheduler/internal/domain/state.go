package domain

import (
	"cmp"
	"iter"
	"slices"
	"sort"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"

	"github.com/loom-ml/loom/services/scheduler/internal/domain/place"
)

// MaxGPUsPerNode is the most GPUs a node may have (allocations are kept in a
// 64-bit mask per node).
const MaxGPUsPerNode = place.MaxGPUsPerNode

// State is everything the scheduler knows, with the indexes a scheduling pass
// needs (kept up to date by Commit, so that a pass never rescans runs). It
// changes only through Commit and Load; Handle, Tick and Schedule read it and
// return a Change, so a Change that fails to persist leaves it untouched.
// State is not safe for concurrent use: callers serialise Commit against
// readers.
type State struct {
	cfg      Config
	clusters map[string]*Cluster
	nodes    map[string]*Node
	jobs     map[string]*Job
	runs     map[string]*Run
	arrays   map[string]*Array
	usage    map[string]*Usage
	// ended: compact records of jobs pruned from the state (retention.go).
	ended map[string]*Ended
	// endedIdx: the same records by cluster and end (endedindex.go).
	endedIdx map[string]endedIndex
	// lists: each project's jobs in list order, nil until BuildLists
	// (listindex.go).
	lists map[string]*projectList

	byCluster map[string]*clusterIndex
	// clusterJobs: the names of each cluster's jobs (every record in
	// jobs, under its job's cluster), so that what reads one cluster's
	// jobs (ClusterGoodput) walks those, not every cluster's. Names, not
	// versions: only a job's arrival, departure or move changes it, so
	// the pass's hot paths (a new reason, a start) never touch it. nil
	// until IndexClusterJobs builds it, so that a restart's load does not
	// pay for it (the app builds it at the first ClusterGoodput). Apart
	// from byCluster, whose entries say which clusters a pass knows.
	clusterJobs map[string]map[string]struct{}
	// active: runs that still hold an allocation, by key.
	active map[string]*Run
	// alloc: what the active runs hold on each node.
	alloc map[string]*nodeAlloc
	// draining: names of the DRAINING nodes, for Tick.
	draining map[string]bool
	// healthOut: names of the nodes health took out (HealthOut) not yet
	// announced drained (NodeDrained), for healthDrained.
	healthOut map[string]bool
	// prologHeld: names of the nodes held out after a prolog failure
	// (Node.PrologHold), for Tick to let go of at PrologVerdictWait.
	prologHeld map[string]bool
	// wake: per cluster, the earliest time at which the clock alone makes a
	// pass worth running (a begin time or a dependency's delay).
	wake map[string]time.Time
	// reserved: per cluster, the backfill reservation its last pass made
	// (memory only: a pending job's expected start in the views).
	reserved map[string]Reservation
	// stepReqs are the requests of the job steps that wait for resources,
	// by StepRequestKey (jobsteps.go), nil when none.
	stepReqs map[string][]byte
	// stepReqBytes is the bytes of stepReqs, for Config.MaxStepRequestBytes.
	stepReqBytes int64
	// limits are the associations' limits (assoclimits.go), nil when none.
	limits map[limitKey]*AssocLimit
	// accounts are the accounts' parents and shares (AssocLimit with no
	// user; assoclimits.go), nil when none.
	accounts map[limitKey]*AssocLimit
	// tresLimits counts the records of limits and accounts that set a
	// TRES limit or MaxWall: without any, the gate assoc-tres is idle.
	tresLimits int
	// assocs interns account/user associations (memory only).
	assocs    map[assocKey]*assoc
	assocList []*assoc
	// shapeIDs and shapeReqs intern the requests of pending jobs (see
	// shapeID): a pass finds a job's shape by index, not by hashing it.
	shapeIDs  map[shapeOf]int32
	shapeReqs []place.Request
	// scratch is reused by the passes of writers (see writerTxn).
	scratch *scratch
	// reasonVersions: passes give reasons as versions, never as reason
	// records (see Emit): what the tests compare the records with.
	reasonVersions bool
	// versions numbers the changes of the indexes' version counters
	// (clusterIndex.pendVer): each change takes the next number, so a
	// version is never reused, even by an index made anew.
	versions uint64
	// allocVer changes whenever alloc gains or loses an entry (entries
	// themselves change in place): a pass's cache of the entries by node
	// holds while it is the same (see staticCache.allocsOf).
	allocVer uint64
	// allocVals changes whenever alloc or one of its entries changes: a
	// pass's copy of the entries by node holds while it is the same (see
	// staticCache.allocValsOf).
	allocVals uint64
	// runsVer counts the runs put (added, replaced or removed): what a
	// writer kept of the runs by key holds while it is the same (see
	// scratch.prevRunStopOf). The state's own count: it never goes back,
	// and the scratch is the state's.
	runsVer uint64
	// mirrored changes whenever a committed run's mirrored job fields
	// (live, limit) change in place: a writer's kept holdings of the
	// nodes' runs hold while it is the same (see pass.keptHoldings).
	mirrored uint64
}

// clusterIndex is the per-cluster part of the indexes.
type clusterIndex struct {
	// name is the cluster's.
	name string
	// nodes sorted by hostname, then name.
	nodes []*Node
	// pending jobs with what a pass reads of them, unordered and contiguous
	// (a pass over 100,000 jobs reads memory in order); pendPos gives each
	// one's index.
	pending []pendEntry
	pendPos map[string]int
	// pendVer changes whenever pending does (an entry added, removed or
	// moved): a pass that finds it as the last pass left it may reuse that
	// pass's queue (see pass.reorder).
	pendVer uint64
	// active runs, unordered; activePos gives each one's index.
	active    []*Run
	activePos map[string]int
	// usage holds, beside active (same index), what fair share reads of
	// each active run, contiguous: a pass sums 25,000 runs' usage without
	// visiting each run.
	usage []runUsage
	// pendAssoc counts the pending jobs per association id.
	pendAssoc []int32
	// preemptPos holds the indexes in active of the runs being preempted
	// (PreemptBy set), unordered: a pass finds them without a look at each
	// run (see pass.preempting).
	preemptPos []int32
	// victims holds, beside active (same index), what the preemption
	// stage reads of each active run to list the victims (victimRowOf),
	// contiguous: a list of 25,000 runs read from each run cost several
	// misses a run.
	victims []victimRow
}

// runUsage is what fair share reads of an active run (runs in the state
// are never modified, so the copy stays true).
type runUsage struct {
	key     string
	account string
	assoc   *assoc
	start   time.Time
	rate    float64
	ended   bool
}

// nodeAlloc is what the active runs hold on one node, and which runs they
// are. holders is never modified in place (copies share it).
type nodeAlloc struct {
	gpuMask   uint64
	gpus      int32
	cpus      int32
	memMB     int64
	runs      int32
	exclusive int32
	// exclUser counts the --exclusive=user runs (all of one user).
	exclUser int32
	holders  []*Run
}

// NewState returns an empty state that schedules as cfg says (its zero
// fields take their defaults).
func NewState(cfg Config) *State {
	return &State{
		cfg:        cfg.Defaults(),
		clusters:   map[string]*Cluster{},
		nodes:      map[string]*Node{},
		jobs:       map[string]*Job{},
		runs:       map[string]*Run{},
		arrays:     map[string]*Array{},
		usage:      map[string]*Usage{},
		byCluster:  map[string]*clusterIndex{},
		active:     map[string]*Run{},
		alloc:      map[string]*nodeAlloc{},
		draining:   map[string]bool{},
		healthOut:  map[string]bool{},
		prologHeld: map[string]bool{},
		wake:       map[string]time.Time{},
		reserved:   map[string]Reservation{},
		assocs:     map[assocKey]*assoc{},
	}
}

// Config returns the configuration the state schedules with, defaults filled in.
func (s *State) Config() Config { return s.cfg }

// Change is what handling one event did: the new version of every record it
// touched (a nil value means the record is deleted) and the events to emit, in
// order. Decisions explain the scheduling pass; Reservations are the backfill
// reservations it made.
type Change struct {
	Clusters map[string]*Cluster
	Nodes    map[string]*Node
	// Jobs are the job versions, except those the reason records of Emits
	// stand for (see Emit): AllJobs yields both, Job finds either.
	Jobs   map[string]*Job
	Runs   map[string]*Run
	Arrays map[string]*Array
	Usage  map[string]*Usage
	// Assocs are associations' new limits, by AssocLimitKey (nil: none).
	Assocs map[string]*AssocLimit
	// StepRequests are the requests of job steps that wait for resources
	// (an encoded CreateJobStep), by StepRequestKey; nil: deleted (the step
	// started or ended).
	StepRequests map[string][]byte
	Emits        []Emit
	// Decisions say, for every pending job a pass looked at, why it did not
	// start (memory only: they become Job.placement when read). A writer's
	// pass reuses their array: they are valid until the state's next Handle,
	// Tick or Schedule (see decisions.go).
	Decisions []Decision
	// Reservations are the start times the pass promised blocked jobs
	// (EASY backfill: one per cluster, for its highest-priority job that
	// cannot start).
	Reservations []Reservation
	// Placed explain the starts of the pass: the chosen nodes and each
	// ranker's score of them (memory only: Job.placement of a started job).
	Placed []*Placed

	// wake: per cluster, when the clock alone next makes a pass worthwhile.
	wake map[string]time.Time
	// passed are the clusters a pass looked at: their reservations are
	// Reservations' (none when it made none).
	passed []string
	// lastJobEmit: job name → index in Emits of its latest JobChanged, so
	// that a pass that only refines a reason updates it instead of adding one.
	lastJobEmit map[string]int
	// reasonSlab: the rest of the batch setReason carves versions from.
	reasonSlab []reasonVersion
	// reasons counts the reason records among Emits (see Emit.job), and
	// recs finds them by their jobs' pending positions, per cluster.
	reasons int
	recs    []clusterRecords
}

// clusterRecords are the reason records of one cluster's jobs: at[i] is
// 1 + the index in Emits of the record of the job at position i of the
// cluster's pending entries (0: none), as the pass read them. A store per
// record, not a map insertion; a look-up by name is the pending index's;
// and Commit reads them in the entries' memory order.
type clusterRecords struct {
	cluster string
	at      []int32
}

// records returns the reason records of cluster, nil when it has none.
func (c *Change) records(cluster string) *clusterRecords {
	for i := range c.recs {
		if c.recs[i].cluster == cluster {
			return &c.recs[i]
		}
	}
	return nil
}

// Empty reports whether the change touches nothing and emits nothing.
func (c *Change) Empty() bool {
	return len(c.Clusters) == 0 && len(c.Nodes) == 0 && len(c.Jobs) == 0 && len(c.Runs) == 0 &&
		len(c.Arrays) == 0 && len(c.Usage) == 0 && len(c.Emits) == 0 && len(c.Assocs) == 0 && len(c.StepRequests) == 0
}

// Emit is an event to publish: the payload, its record key and the entity it
// is about (the job's name for job and step events). Its topic is not the
// domain's to choose: the app routes it by type (topics.For).
//
// A pass that only gives a stored pending job a new reason (the first pass
// over a burst of submissions gives 100,000 jobs theirs) adds no version of
// the job to Change.Jobs and builds no payload: its Emit is a reason record
// (job, reason), which Message turns into the JobChanged, Change.AllJobs into
// the job's new version, and Commit applies to the stored job.
type Emit struct {
	Key     string
	Subject string
	// Payload is the event; nil for a reason record not built yet: read it
	// with Message.
	Payload proto.Message
	// job and reason: a reason record, the stored version of the job named
	// Subject and its new reason (job nil otherwise); pos is the job's
	// position in its cluster's pending entries when the pass read it (see
	// clusterRecords).
	job    *Job
	reason string
	pos    int32
}

// Message returns the event: Payload, built first for a reason record (the
// JobChanged of the stored job with its new reason), and kept in e so that
// the event, the job's stored record (AllJobs) and the committed version
// share one copy, as they would for a version of Change.Jobs. A reason
// record's event is valid until the job's next change is committed.
func (e *Emit) Message() proto.Message {
	if e.Payload == nil && e.job != nil {
		e.build(new(reasonEvent))
	}
	return e.Payload
}

// reasonEvent is a reason record's event and its protobuf, built together.
type reasonEvent struct {
	pj loomv1.Job
	ev eventsv1.JobChanged
}

// build builds reason record e's event (see Message) in re.
func (e *Emit) build(re *reasonEvent) {
	shallowJobInto(&re.pj, e.job.Job)
	re.pj.StateReason = e.reason
	re.ev = eventsv1.JobChanged{Job: &re.pj, Attempt: e.job.Attempt, ModelDir: e.job.ModelDir}
	e.Payload = &re.ev
}

// reasonJob returns the version of the job a reason record gives it (see
// Message), into v.
func (e *Emit) reasonJob(v *Job) *Job {
	*v = Job{JobRecord: e.job.JobRecord, tmpl: e.job.tmpl, shared: true}
	v.Job = e.Message().(*eventsv1.JobChanged).Job
	return v
}

// AllJobs yields every job version of the change: those of Jobs (nil: the
// job is deleted) and those its reason records give their jobs (see Emit),
// which go to the job's stored record like any other. A reason record's
// version is built in one Job reused for each: valid until the next is
// yielded. Its event is built on the way (see Message), 1,024 to an
// allocation, as the pass built them before it made records.
func (c *Change) AllJobs() iter.Seq2[string, *Job] {
	return func(yield func(string, *Job) bool) {
		for name, j := range c.Jobs {
			if !yield(name, j) {
				return
			}
		}
		if c.reasons == 0 {
			return
		}
		var v Job
		var batch []reasonEvent
		left := c.reasons
		for i := range c.Emits {
			e := &c.Emits[i]
			if e.job == nil {
				continue
			}
			left--
			if e.Payload == nil {
				if len(batch) == 0 {
					batch = make([]reasonEvent, min(left+1, reasonBatch))
				}
				e.build(&batch[0])
				batch = batch[1:]
			}
			if !yield(e.Subject, e.reasonJob(&v)) {
				return
			}
		}
	}
}

// Job returns the change's version of the job named name, whether in Jobs
// or given by a reason record, and whether it has one. A reason record is
// found by a scan of Emits: for tests and the odd look, not for every job.
func (c *Change) Job(name string) (*Job, bool) {
	if j, ok := c.Jobs[name]; ok {
		return j, true
	}
	if c.reasons > 0 {
		for i := range c.Emits {
			if e := &c.Emits[i]; e.job != nil && e.Subject == name {
				return e.reasonJob(new(Job)), true
			}
		}
	}
	return nil, false
}

// JobCount is how many job versions the change holds (those of AllJobs).
func (c *Change) JobCount() int { return len(c.Jobs) + c.reasons }

// Decision records why a pending job did not start in a pass, and how many
// nodes each feasibility check filtered out (Filtered is shared between the
// jobs of one shape, and interned across passes: do not modify).
type Decision struct {
	Job      string
	Reason   string
	Filtered map[string]int
	// Nodes is how many nodes were looked at.
	Nodes int
	// Note adds what the counts do not say ("preempting 2 jobs").
	Note string
}

// Reservation is the earliest time a blocked job can start, on the nodes
// that will be free by then.
type Reservation struct {
	Job     string
	Cluster string
	Start   time.Time
	// Unbounded: some job it waits for has no time limit, so no start can
	// be promised and the nodes are kept from every other job.
	Unbounded bool
	Nodes     []string
}

// Commit makes c part of the state. c must come from this state's Handle,
// Tick or Schedule with no Commit in between, or hold only records (Follow:
// what the store holds after the leader's writes).
func (s *State) Commit(c *Change) {
	for name, cl := range c.Clusters {
		if cl == nil {
			delete(s.clusters, name)
		} else {
			s.clusters[name] = cl
		}
	}
	for name, n := range c.Nodes {
		s.putNode(name, n)
	}
	// The reason records first: they give their positions in the pending
	// entries as the pass read them, which putJob moves.
	s.putReasons(c)
	for name, j := range c.Jobs {
		s.putJob(name, j)
	}
	// Every old version lets go of its GPUs before any new one takes them:
	// GPU masks cannot count, so a GPU passed from one run to another in one
	// change must be cleared before it is set.
	for key := range c.Runs {
		s.unaccount(key)
	}
	for key, r := range c.Runs {
		s.putRun(key, r)
	}
	for name, j := range c.Jobs {
		if j == nil {
			continue // deleted (a follower's prune, Follow)
		}
		if _, put := c.Runs[RunKey(name, j.Attempt)]; j.Attempt > 0 && !put {
			if r := s.runs[RunKey(name, j.Attempt)]; r != nil {
				live, limit := r.live, r.limit
				s.mirrorJob(r)
				if r.live != live || r.limit != limit {
					s.mirrored++
				}
			}
		}
	}
	for name, a := range c.Arrays {
		if a == nil {
			delete(s.arrays, name)
		} else {
			s.arrays[name] = a
		}
	}
	for key, u := range c.Usage {
		if u == nil {
			delete(s.usage, key)
		} else {
			s.usage[key] = u
		}
	}
	s.commitAssocLimits(c)
	s.putStepRequests(c.StepRequests)
	for cluster, at := range c.wake {
		if at.IsZero() {
			delete(s.wake, cluster)
		} else {
			s.wake[cluster] = at
		}
	}
	s.keepDecisions(c)
	for _, cluster := range c.passed {
		delete(s.reserved, cluster)
	}
	for _, r := range c.Reservations {
		s.reserved[r.Cluster] = r
	}
	for _, pl := range c.Placed {
		if j := s.jobs[pl.Job]; j != nil && !j.Pending() {
			j.placed = pl
		}
	}
}

// putReasons applies the change's reason records (see Emit) to the stored
// jobs, cluster by cluster, each in the order of its pending entries, as
// they lie in memory: the job's new
// version (with the record's event's protobuf, if built: see Emit.Message)
// takes the stored one's place, in its pending entry too. Only the reason
// changes: the entry stays where it is, and the attributes are the stored
// version's. The stored version itself is left as it is (a snapshot's
// records may be loaded into more than one state).
func (s *State) putReasons(c *Change) {
	if c.reasons == 0 {
		return
	}
	slabs := reasonSlabs{left: c.reasons}
	for _, cr := range c.recs {
		ci := s.index(cr.cluster)
		for p, m := range cr.at {
			if m != 0 {
				s.putReason(ci, &c.Emits[m-1], p, &slabs)
			}
		}
		s.versions++
		ci.pendVer = s.versions
	}
}

// reasonSlabs are the batches putReasons carves the new versions from, a
// few allocations per 1024 records instead of two each; left counts the
// records not applied yet (the last batches are no larger than needed).
type reasonSlabs struct {
	left int
	jobs []Job
	pjs  []loomv1.Job
}

// putReason applies reason record e, of the job at position p of ci's
// pending entries as the pass read them.
func (s *State) putReason(ci *clusterIndex, e *Emit, p int, sl *reasonSlabs) {
	sl.left--
	old := e.job
	if p >= len(ci.pending) || ci.pending[p].j != old {
		// Not where the pass read it: find it by name.
		i, ok := ci.pendPos[e.Subject]
		if !ok || s.jobs[e.Subject] != old || ci.pending[i].j != old {
			// Not the stored pending version: put a whole new version.
			var v Job
			nj := *e.reasonJob(&v)
			nj.why = old.why
			s.putJob(e.Subject, &nj)
			return
		}
		p = i
	}
	if len(sl.jobs) == 0 {
		sl.jobs = make([]Job, min(sl.left+1, reasonBatch))
	}
	nj := &sl.jobs[0]
	sl.jobs = sl.jobs[1:]
	if ev, ok := e.Payload.(*eventsv1.JobChanged); ok {
		*nj = Job{JobRecord: old.JobRecord, tmpl: old.tmpl, shared: true}
		nj.Job = ev.Job
	} else {
		if len(sl.pjs) == 0 {
			sl.pjs = make([]loomv1.Job, min(sl.left+1, reasonBatch))
		}
		pj := &sl.pjs[0]
		sl.pjs = sl.pjs[1:]
		shallowJobInto(pj, old.Job)
		pj.StateReason = e.reason
		*nj = Job{JobRecord: old.JobRecord, tmpl: old.tmpl}
		nj.Job = pj
	}
	nj.why = old.why
	// A reason changes neither the job's list key nor its state: its
	// project's lists stay as they are (relist).
	s.jobs[e.Subject] = nj
	// The entry holds the job's attributes (the stored version's): only
	// the reason changes.
	ci.pending[p].j = nj
	ci.pending[p].reason = e.reason
	if nj.Attempt > 0 {
		// An attempt's run mirrors its job (see mirrorJob).
		if r := s.runs[RunKey(e.Subject, nj.Attempt)]; r != nil {
			s.mirrorJob(r)
		}
	}
}

// Load adds records read from storage, as at start-up. Each kind of
// record loaded into a state that has none of that kind yet (a restart)
// takes a bulk path: maps and indexes sized once, no look-up of an old
// version, the pending jobs' attributes carved from shared arrays and each
// cluster's nodes sorted once. The state it leaves is the one adding the
// records one at a time, as before, leaves (TestBulkLoadMatchesEach).
func (s *State) Load(clusters []*Cluster, nodes []*Node, jobs []*Job, runs []*Run, arrays []*Array, usage []*Usage) {
	for _, c := range clusters {
		s.clusters[c.Name] = c
	}
	if !s.loadNodes(nodes) {
		for _, n := range nodes {
			s.putNode(n.Name, n)
		}
	}
	for _, a := range arrays {
		s.arrays[a.Name] = a
	}
	if !s.loadJobs(jobs) {
		for _, j := range jobs {
			s.withTemplate(j)
			s.putJob(j.Name(), j)
		}
	}
	if !s.loadRuns(runs) {
		for _, r := range runs {
			s.putRun(r.Key(), r)
		}
	}
	for _, u := range usage {
		s.usage[u.Key] = u
	}
}

// withTemplate makes a loaded task share its array's template, environment
// included (Array.Template). The arrays must be loaded first.
func (s *State) withTemplate(j *Job) {
	if id := j.Job.GetArrayJobId(); id != "" && j.tmpl == nil {
		if a := s.arrays[jobsPrefix(j.Name())+id]; a != nil && a.Template != nil {
			j.tmpl, j.Job.Env = a.Template, a.Template.Env
		}
	}
}

// loadNodes is Load's bulk path for nodes: into a state without nodes, each
// cluster's nodes sorted once (inserting 10,000 nodes one at a time into a
// sorted slice moves ~25 million pointers). It reports false, having
// changed nothing, when the state has nodes or two records share a name:
// then the nodes go one at a time.
func (s *State) loadNodes(nodes []*Node) bool {
	if len(s.nodes) > 0 || len(nodes) == 0 {
		return len(nodes) == 0
	}
	s.nodes = make(map[string]*Node, len(nodes))
	for _, n := range nodes {
		s.nodes[n.Name] = n
	}
	if len(s.nodes) != len(nodes) {
		s.nodes = map[string]*Node{}
		return false
	}
	if len(s.alloc) == 0 {
		s.alloc = make(map[string]*nodeAlloc, len(nodes))
	}
	var ci *clusterIndex
	touched := map[*clusterIndex]bool{}
	for _, n := range nodes {
		if ci == nil || ci.name != n.Cluster {
			ci = s.index(n.Cluster)
			touched[ci] = true
		}
		ci.nodes = append(ci.nodes, n)
		// As putNode marks them (a state without nodes has none marked).
		if n.Draining() {
			s.draining[n.Name] = true
		}
		if n.HealthOut() && !n.HealthDrained {
			s.healthOut[n.Name] = true
		}
		if n.PrologHold {
			s.prologHeld[n.Name] = true
		}
	}
	for ci := range touched {
		// Hostname then name, as insertNode keeps them: names are unique,
		// so the order is the one inserting them one at a time gives.
		slices.SortFunc(ci.nodes, func(a, b *Node) int {
			return cmp.Or(strings.Compare(a.Hostname, b.Hostname), strings.Compare(a.Name, b.Name))
		})
	}
	return true
}

// loadJobs is Load's bulk path for jobs: into a state without jobs, one
// walk of the records (no look-up of an old version) that builds each
// pending job's queue entry in place, in one array sized for the jobs left
// to walk; that array becomes the cluster's queue when all pending jobs are
// of one cluster and it is not much too big (else each cluster's queue is
// copied from it, sized once). It reports false when the state has jobs or
// two records share a name: then the jobs go one at a time (what it did to
// them, the same as putJob does, is done again).
func (s *State) loadJobs(jobs []*Job) bool {
	if len(s.jobs) > 0 || len(jobs) == 0 {
		return len(jobs) == 0
	}
	s.jobs = make(map[string]*Job, len(jobs))
	var pend []pendEntry
	var ci *clusterIndex
	mixed := false
	for i, j := range jobs {
		s.withTemplate(j)
		s.jobs[j.Name()] = j
		if !j.Pending() {
			continue
		}
		if pend == nil {
			pend = make([]pendEntry, 0, len(jobs)-i)
		}
		pend = pend[:len(pend)+1]
		e := &pend[len(pend)-1]
		e.j = j
		s.fillAttrs(&e.jobAttrs, j, true)
		if cluster := j.Job.GetCluster(); ci == nil || ci.name != cluster {
			mixed = ci != nil
			ci = s.index(cluster)
		}
	}
	if len(s.jobs) != len(jobs) {
		s.jobs = map[string]*Job{}
		return false
	}
	s.clusterJobs = nil // built again when asked for
	// The jobs went in without relist: project lists made before (of a
	// state with no jobs) are dropped, and the next list makes them anew.
	s.lists = nil
	if len(pend) == 0 {
		return true
	}
	if !mixed && cap(pend)-len(pend) <= len(pend)/2 {
		ci.pending = pend
		ci.pendPos = make(map[string]int, len(pend))
		for i := range pend {
			ci.pendPos[pend[i].name] = i
			ci.countAssoc(pend[i].assoc.id, 1)
		}
		s.versions += uint64(len(pend))
		ci.pendVer = s.versions
		return true
	}
	counts := map[string]int{}
	for i := range pend {
		counts[pend[i].j.Job.GetCluster()]++
	}
	for cluster, n := range counts {
		ci := s.index(cluster)
		ci.pending = make([]pendEntry, 0, n)
		ci.pendPos = make(map[string]int, n)
	}
	ci = nil
	for i := range pend {
		e := &pend[i]
		if cluster := e.j.Job.GetCluster(); ci == nil || ci.name != cluster {
			ci = s.index(cluster)
		}
		ci.pendPos[e.name] = len(ci.pending)
		ci.pending = append(ci.pending, *e)
		s.versions++
		ci.pendVer = s.versions
		ci.countAssoc(e.assoc.id, 1)
	}
	return true
}

// loadRuns is Load's bulk path for runs: into a state without runs, maps
// and each cluster's active runs sized once, no old version taken out of
// the allocations. It reports false, having changed nothing, when the
// state has runs or two records share a key: then they go one at a time.
func (s *State) loadRuns(runs []*Run) bool {
	if len(s.runs) > 0 || len(s.active) > 0 || len(runs) == 0 {
		return len(runs) == 0
	}
	s.runs = make(map[string]*Run, len(runs))
	keys := make([]string, len(runs))
	counts := map[string]int{}
	for i, r := range runs {
		keys[i] = r.Key()
		s.runs[keys[i]] = r
		if !r.Released {
			counts[r.Cluster]++
		}
	}
	if len(s.runs) != len(runs) {
		s.runs = map[string]*Run{}
		return false
	}
	s.runsVer += uint64(len(runs)) // as putRun's, one a run
	s.active = make(map[string]*Run, len(runs))
	for cluster, n := range counts {
		if ci := s.index(cluster); len(ci.active) == 0 {
			ci.active, ci.usage, ci.victims = make([]*Run, 0, n), make([]runUsage, 0, n), make([]victimRow, 0, n)
			ci.activePos = make(map[string]int, n)
		}
	}
	for i, r := range runs {
		s.addRun(keys[i], r)
	}
	return true
}

func (s *State) index(cluster string) *clusterIndex {
	ci := s.byCluster[cluster]
	if ci == nil {
		ci = &clusterIndex{name: cluster, pendPos: map[string]int{}, activePos: map[string]int{}}
		s.byCluster[cluster] = ci
	}
	return ci
}

// indexJob keeps name as one of cluster's jobs (clusterJobs).
func (s *State) indexJob(cluster, name string) {
	m := s.clusterJobs[cluster]
	if m == nil {
		m = map[string]struct{}{}
		s.clusterJobs[cluster] = m
	}
	m[name] = struct{}{}
}

// ClusterJobsIndexed says whether IndexClusterJobs has built the index of
// each cluster's jobs since the last bulk load (ClusterGoodput walks every
// job without it).
func (s *State) ClusterJobsIndexed() bool { return s.clusterJobs != nil }

// IndexClusterJobs builds the index of each cluster's jobs, each cluster's
// set sized once; from then on every change of the jobs keeps it. It
// writes the state: the caller holds it exclusively.
func (s *State) IndexClusterJobs() {
	if s.clusterJobs != nil {
		return
	}
	counts := map[string]int{}
	for _, j := range s.jobs {
		counts[j.Job.GetCluster()]++
	}
	s.clusterJobs = make(map[string]map[string]struct{}, len(counts))
	for c, n := range counts {
		s.clusterJobs[c] = make(map[string]struct{}, n)
	}
	for name, j := range s.jobs {
		s.clusterJobs[j.Job.GetCluster()][name] = struct{}{}
	}
}

// unindexJob takes name out of cluster's jobs, and a cluster left with
// none out of clusterJobs.
func (s *State) unindexJob(cluster, name string) {
	m := s.clusterJobs[cluster]
	delete(m, name)
	if len(m) == 0 {
		delete(s.clusterJobs, cluster)
	}
}

func nodeBefore(a, b *Node) bool {
	if a.Hostname != b.Hostname {
		return a.Hostname < b.Hostname
	}
	return a.Name < b.Name
}

func (ci *clusterIndex) removeNode(n *Node) {
	i := sort.Search(len(ci.nodes), func(i int) bool { return !nodeBefore(ci.nodes[i], n) })
	for ; i < len(ci.nodes); i++ {
		if ci.nodes[i].Name == n.Name {
			ci.nodes = append(ci.nodes[:i], ci.nodes[i+1:]...)
			return
		}
		if ci.nodes[i].Hostname != n.Hostname {
			break
		}
	}
	// Not where its order says: look everywhere (an index out of order is a bug
	// elsewhere, but must not leave a stale node behind).
	for i, m := range ci.nodes {
		if m.Name == n.Name {
			ci.nodes = append(ci.nodes[:i], ci.nodes[i+1:]...)
			return
		}
	}
}

func (ci *clusterIndex) insertNode(n *Node) {
	i := sort.Search(len(ci.nodes), func(i int) bool { return !nodeBefore(ci.nodes[i], n) })
	ci.nodes = append(ci.nodes, nil)
	copy(ci.nodes[i+1:], ci.nodes[i:])
	ci.nodes[i] = n
}

func (s *State) putNode(name string, n *Node) {
	old, ok := s.nodes[name]
	delete(s.draining, name)
	delete(s.healthOut, name)
	delete(s.prologHeld, name)
	if ok && n != nil && old.Cluster == n.Cluster && old.Hostname == n.Hostname {
		// Same place in the order: replace in place.
		ci := s.index(n.Cluster)
		i := sort.Search(len(ci.nodes), func(i int) bool { return !nodeBefore(ci.nodes[i], n) })
		for ; i < len(ci.nodes) && ci.nodes[i].Hostname == n.Hostname; i++ {
			if ci.nodes[i].Name == name {
				ci.nodes[i] = n
				break
			}
		}
	} else {
		if ok {
			s.index(old.Cluster).removeNode(old)
		}
		if n != nil {
			s.index(n.Cluster).insertNode(n)
		}
	}
	if n == nil {
		delete(s.nodes, name)
		return
	}
	s.nodes[name] = n
	if n.Draining() {
		s.draining[name] = true
	}
	if n.HealthOut() && !n.HealthDrained {
		s.healthOut[name] = true
	}
	if n.PrologHold {
		s.prologHeld[name] = true
	}
}

func (s *State) putJob(name string, j *Job) {
	old, had := s.jobs[name]
	if had && old.Pending() {
		ci := s.index(old.Job.GetCluster())
		if i, ok := ci.pendPos[name]; ok {
			ci.countAssoc(ci.pending[i].assoc.id, -1)
			last := len(ci.pending) - 1
			moved := ci.pending[last]
			ci.pending[i] = moved
			ci.pendPos[moved.name] = i
			ci.pending[last] = pendEntry{}
			ci.pending = ci.pending[:last]
			delete(ci.pendPos, name)
			s.versions++
			ci.pendVer = s.versions
		}
	}
	s.relist(old, j)
	indexed := s.clusterJobs != nil
	moved := indexed && had && (j == nil || old.Job.GetCluster() != j.Job.GetCluster())
	if moved {
		s.unindexJob(old.Job.GetCluster(), name)
	}
	if j == nil {
		delete(s.jobs, name)
		return
	}
	if indexed && (!had || moved) {
		s.indexJob(j.Job.GetCluster(), name)
	}
	pending := j.Pending()
	if had && j.why == nil && pending {
		j.why = old.why
	}
	if had && j.placed == nil && !pending && old.Attempt == j.Attempt {
		j.placed = old.placed // the start of the same attempt
	}
	s.jobs[name] = j
	if pending {
		ci := s.index(j.Job.GetCluster())
		ci.pendPos[name] = len(ci.pending)
		ci.pending = append(ci.pending, pendEntry{j: j})
		e := &ci.pending[len(ci.pending)-1]
		s.fillAttrs(&e.jobAttrs, j, true)
		s.versions++
		ci.pendVer = s.versions
		ci.countAssoc(e.assoc.id, 1)
	}
}

// movePreemptPos changes the index from in preemptPos to to, or removes it
// when to is negative.
func (ci *clusterIndex) movePreemptPos(from, to int32) {
	k := slices.Index(ci.preemptPos, from)
	if k < 0 {
		return
	}
	if to >= 0 {
		ci.preemptPos[k] = to
		return
	}
	last := len(ci.preemptPos) - 1
	ci.preemptPos[k] = ci.preemptPos[last]
	ci.preemptPos = ci.preemptPos[:last]
}

// countAssoc adds d to the count of pending jobs of association id (none
// for an uninterned one, id -1).
func (ci *clusterIndex) countAssoc(id int32, d int32) {
	if id < 0 {
		return
	}
	for int(id) >= len(ci.pendAssoc) {
		ci.pendAssoc = append(ci.pendAssoc, 0)
	}
	ci.pendAssoc[id] += d
}

// unaccount takes the run stored under key out of the allocation counters.
func (s *State) unaccount(key string) {
	if old, ok := s.active[key]; ok {
		s.account(old, -1)
		delete(s.active, key)
		ci := s.index(old.Cluster)
		if i, ok := ci.activePos[key]; ok {
			last := len(ci.active) - 1
			moved := ci.active[last]
			ci.usage[i] = ci.usage[last]
			ci.usage[last] = runUsage{}
			ci.usage = ci.usage[:last]
			ci.victims[i] = ci.victims[last]
			ci.victims[last] = victimRow{}
			ci.victims = ci.victims[:last]
			ci.active[i] = moved
			ci.activePos[moved.key] = i
			ci.active[last] = nil
			ci.active = ci.active[:last]
			delete(ci.activePos, key)
			if old.PreemptBy != "" {
				ci.movePreemptPos(int32(i), -1)
			}
			if moved.PreemptBy != "" && i != last {
				ci.movePreemptPos(int32(last), int32(i))
			}
		}
	}
}

func (s *State) putRun(key string, r *Run) {
	s.runsVer++
	s.unaccount(key)
	if r == nil {
		delete(s.runs, key)
		return
	}
	s.runs[key] = r
	s.addRun(key, r)
}

// addRun fills in r's memory-only fields and adds it to the indexes (to the
// allocations unless released); r is stored under key and no other version
// is in the indexes.
func (s *State) addRun(key string, r *Run) {
	r.assoc = s.internAssoc(r.Account, r.User)
	r.key, r.gpuN, r.rate = key, r.gpuCount(), runRate(r)
	r.gpu0 = 0
	if len(r.Nodes) > 0 {
		r.gpu0 = int32(len(r.GPUs[r.Nodes[0]]))
	}
	s.mirrorJob(r)
	if !r.Released {
		s.active[key] = r
		s.account(r, 1)
		ci := s.index(r.Cluster)
		ci.activePos[key] = len(ci.active)
		ci.active = append(ci.active, r)
		if r.PreemptBy != "" {
			ci.preemptPos = append(ci.preemptPos, int32(len(ci.active)-1))
		}
		// The account as the association holds it (equal to r.Account, the
		// interning's key): newPrioCtx compares the two per run each pass,
		// which one string then answers by its pointer.
		ci.usage = append(ci.usage, runUsage{key: key, account: r.assoc.account, assoc: r.assoc, start: r.Start, rate: r.rate, ended: r.Ended()})
		ci.victims = append(ci.victims, victimRowOf(r))
	}
}

// mirrorJob copies into run r what a pass needs of its job.
func (s *State) mirrorJob(r *Run) {
	j := s.jobs[r.Job]
	r.live = j != nil && j.Running() && j.Attempt == r.Attempt && !r.Ended()
	r.limit = 0
	if j != nil {
		r.limit = j.Job.GetTimeLimitSeconds()
	}
	s.mirrorVictim(r, j)
	// An active run's victim row mirrors live and victim in turn (addRun
	// makes the row of a run it adds, after this).
	if ci := s.byCluster[r.Cluster]; ci != nil && r.key != "" {
		if i, ok := ci.activePos[r.key]; ok && ci.active[i] == r {
			ci.victims[i] = victimRowOf(r)
		}
	}
}

// account adds (sign 1) or removes (sign -1) what r holds to the per-node
// allocation counters.
func (s *State) account(r *Run, sign int32) {
	s.versions++
	s.allocVals = s.versions
	for i, node := range r.Nodes {
		if !r.Holds(node) {
			continue
		}
		a := s.alloc[node]
		if a == nil {
			a = &nodeAlloc{}
			s.alloc[node] = a
			s.versions++
			s.allocVer = s.versions
		}
		a.add(r, i, node, sign)
		if a.runs == 0 {
			delete(s.alloc, node)
			s.versions++
			s.allocVer = s.versions
		}
	}
}

func (a *nodeAlloc) add(r *Run, rank int, node string, sign int32) {
	gpus := r.GPUs[node]
	for _, g := range gpus {
		if sign > 0 {
			a.gpuMask |= 1 << uint(g)
		} else {
			a.gpuMask &^= 1 << uint(g)
		}
	}
	a.gpus += sign * int32(len(gpus))
	if rank < len(r.CPUs) {
		a.cpus += sign * r.CPUs[rank]
	}
	a.memMB += int64(sign) * r.MemMB
	a.runs += sign
	if r.Exclusive {
		a.exclusive += sign
	}
	if r.ExclusiveUser {
		a.exclUser += sign
	}
	if sign > 0 {
		a.holders = append(a.holders[:len(a.holders):len(a.holders)], r)
		return
	}
	kept := make([]*Run, 0, len(a.holders))
	for _, h := range a.holders {
		if h != r {
			kept = append(kept, h)
		}
	}
	a.holders = kept
}

// Job returns a copy of the job's resource as stored (without the read-time
// fields; see views.Job), or nil when unknown.
func (s *State) Job(name string) *loomv1.Job {
	j, ok := s.jobs[name]
	if !ok {
		return nil
	}
	return proto.Clone(j.Job).(*loomv1.Job)
}

// JobRecord returns the job's record (not to be modified), or nil.
func (s *State) JobRecord(name string) *Job { return s.jobs[name] }

// Run returns the run's record (not to be modified), or nil.
func (s *State) Run(job string, attempt int32) *Run { return s.runs[RunKey(job, attempt)] }

// Node returns the node's record (not to be modified), or nil.
func (s *State) Node(name string) *Node { return s.nodes[name] }

// Cluster returns the cluster's record (not to be modified), or nil.
func (s *State) Cluster(name string) *Cluster { return s.clusters[name] }

// ArrayRecord returns the array's record (not to be modified), or nil.
func (s *State) ArrayRecord(name string) *Array { return s.arrays[name] }

// Jobs returns copies of the jobs that keep returns true for (all when keep is
// nil), in queue order (numeric job id).
func (s *State) Jobs(keep func(*loomv1.Job) bool) []*loomv1.Job {
	var recs []*Job
	for _, j := range s.jobs {
		if keep == nil || keep(j.Job) {
			recs = append(recs, j)
		}
	}
	sort.Slice(recs, func(a, b int) bool { return FCFS(recs[a], recs[b]) })
	out := make([]*loomv1.Job, len(recs))
	for i, j := range recs {
		out[i] = proto.Clone(j.Job).(*loomv1.Job)
	}
	return out
}

// Clusters returns the names of every known cluster.
func (s *State) Clusters() []string {
	seen := map[string]bool{}
	for n := range s.clusters {
		seen[n] = true
	}
	for n, ci := range s.byCluster {
		if len(ci.nodes) > 0 || len(ci.pending) > 0 {
			seen[n] = true
		}
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// ActiveRuns returns the runs that hold an allocation (not to be modified),
// by key.
func (s *State) ActiveRuns() []*Run {
	out := make([]*Run, 0, len(s.active))
	for _, r := range s.active {
		out = append(out, r)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Key() < out[b].Key() })
	return out
}

// PendingCount returns how many jobs wait in the cluster's queue.
func (s *State) PendingCount(cluster string) int {
	if ci := s.byCluster[cluster]; ci != nil {
		return len(ci.pending)
	}
	return 0
}
