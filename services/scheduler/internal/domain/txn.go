package domain

import (
	"maps"
	"slices"
	"sort"
	"time"

	"google.golang.org/protobuf/proto"

	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"

	"github.com/loom-ml/loom/services/scheduler/internal/domain/place"
)

// txn is the working view while one event is handled: reads see the state
// with the change laid over it, and edits copy a record into the change first,
// so the state itself is never touched before Commit.
type txn struct {
	s     *State
	now   time.Time
	c     *Change
	dirty map[string]bool // clusters whose queue needs a pass
	// scratch: buffers a pass may reuse (writers only: Handle, Tick and
	// Schedule run one at a time; reads may run beside them).
	scratch *scratch
	// badConstraints: a pass of this txn decided a job BadConstraints
	// (only those can be hopeless: endHopeless looks at the decisions
	// only then, not at 100,000 of them every pass).
	badConstraints bool
	// over maps each run of the state whose key the change holds a
	// version of to that version, as of overN versions in the change
	// (see overRun); nil until first used.
	over  map[*Run]*Run
	overN int
	// wantShares: newPrioCtx keeps the fair-share standing it computes
	// (prioCtx.shares), for Shares; passes do not ask for it.
	wantShares bool
	// jobGen counts the edits of jobs and arrays (editJob, putNewJob,
	// putArray): what deps memoized holds while it stays the same.
	jobGen uint64
	deps   depMemo
}

// scratch holds buffers reused from one pass to the next, so that a pass
// over 100,000 jobs does not allocate its working arrays anew.
type scratch struct {
	pend   []*pendEntry
	queued []queued
	sorted []queued
	ranks  []rankID
	keys   []keyed
	radix  []keyed
	views  []place.NodeView
	held   [][]*Run
	// perm is the last ordered queue's order (indexes into its unsorted
	// keys), which the next pass reuses while it still holds (sorted is
	// that queue in that order).
	perm []int32
	// loc: when as long as perm, loc[k] is the index in sorted of the
	// entry at position k of the order (a mend moves these, not the
	// entries); else sorted is in the order. locMends counts the mends
	// since sorted was last gathered in order (see pass.mend).
	loc      []int32
	locMends int
	// sortedAlt, permAlt and locAlt: the buffers a new order is written
	// to, so the last one is whole as it is read (see pass.mend); swapped
	// with sorted, perm and loc.
	sortedAlt []queued
	permAlt   []int32
	locAlt    []int32
	// permKeys[k] is the key perm[k] had when perm was made (valid while
	// as long as perm: a mend writes it, any other order empties it), so
	// the next mend reads the keys of the jobs that stay in order, not
	// all over ranks; permKeysAlt is its other buffer.
	permKeys    []rankID
	permKeysAlt []rankID
	// changed, moved and src: pass.reorder's marks of the jobs whose rank
	// changed, those jobs, and mendOrder's result.
	changed []uint64
	moved   []movedJob
	src     []int32
	// ageSteps: the steps of the weighted age factor (see ageSteps), for
	// the weight and MaxAge in ageStepsKey (zero: none made yet).
	ageSteps    []int64
	ageStepsKey ageStepsKey
	// prios: per entry of queued, its priority (as ranks holds its rank).
	prios []int64
	// prioIns: per entry of queued, what its priority is computed from,
	// when the queue may be reordered (see pass.reorder); else empty.
	prioIns []prioIn
	// queue says which queue queued, sorted and perm hold: when a pass
	// finds the same one, it reuses them (see pass.reorder); reorders
	// counts the passes that did (tests read it).
	queue    queueKey
	reorders int
	// mends counts the reorders that mended the last order (tests read it).
	mends int
	// static: per cluster, the static checks' results (see staticCache).
	static map[string]*staticCache
	// viewAt: per cluster, the last pass's node name → view index.
	viewAt map[string]*viewIndexCache
	// decisions: the array the passes' Change.Decisions reuse; filtered:
	// the interned filtered counts (see decisions.go).
	decisions []Decision
	filtered  map[string]map[string]int
	// accruals: fair share's table of decayed fractions (see accruals).
	accruals *accruals
	// prevRunStops: the previous-run gate's look-ups by job version, as of
	// the state's runsVer prevRunStopsAt (see prevRunStopOf).
	prevRunStops   map[*Job]prevRunStop
	prevRunStopsAt uint64
}

// writerTxn is a txn of Handle, Tick or Schedule.
func writerTxn(s *State, now time.Time) *txn {
	t := newTxn(s, now)
	if s.scratch == nil {
		s.scratch = &scratch{}
	}
	t.scratch = s.scratch
	return t
}

func newTxn(s *State, now time.Time) *txn {
	return &txn{s: s, now: now, dirty: map[string]bool{}, c: &Change{
		Clusters:    map[string]*Cluster{},
		Nodes:       map[string]*Node{},
		Jobs:        map[string]*Job{},
		Runs:        map[string]*Run{},
		Arrays:      map[string]*Array{},
		Usage:       map[string]*Usage{},
		wake:        map[string]time.Time{},
		lastJobEmit: map[string]int{},
	}}
}

func (t *txn) cluster(name string) *Cluster {
	if c, ok := t.c.Clusters[name]; ok {
		return c
	}
	return t.s.clusters[name]
}

func (t *txn) editCluster(name string) *Cluster {
	if c, ok := t.c.Clusters[name]; ok && c != nil {
		return c
	}
	c := &Cluster{Name: name}
	if old := t.s.clusters[name]; old != nil {
		cp := *old
		c = &cp
	}
	t.c.Clusters[name] = c
	return c
}

func (t *txn) node(name string) *Node {
	if n, ok := t.c.Nodes[name]; ok {
		return n
	}
	return t.s.nodes[name]
}

// editNode returns the node's copy in the change, a new node when unknown.
func (t *txn) editNode(name string) *Node {
	if n, ok := t.c.Nodes[name]; ok && n != nil {
		return n
	}
	n := &Node{Name: name}
	if old := t.s.nodes[name]; old != nil {
		cp := *old
		n = &cp
	}
	t.c.Nodes[name] = n
	return n
}

func (t *txn) deleteNode(name string) { t.c.Nodes[name] = nil }

// clusterNodes returns the cluster's nodes sorted by hostname.
func (t *txn) clusterNodes(cluster string) []*Node {
	var base []*Node
	if ci := t.s.byCluster[cluster]; ci != nil {
		base = ci.nodes
	}
	if len(t.c.Nodes) == 0 {
		return base
	}
	out := make([]*Node, 0, len(base)+len(t.c.Nodes))
	for _, n := range base {
		if _, over := t.c.Nodes[n.Name]; !over {
			out = append(out, n)
		}
	}
	added := false
	for _, n := range t.c.Nodes {
		if n != nil && n.Cluster == cluster {
			out = append(out, n)
			added = true
		}
	}
	if added {
		sort.Slice(out, func(a, b int) bool { return nodeBefore(out[a], out[b]) })
	}
	return out
}

func (t *txn) job(name string) *Job {
	if j, ok := t.c.Jobs[name]; ok {
		return j
	}
	j := t.s.jobs[name]
	if t.c.reasons > 0 && j != nil && j.Pending() {
		if v := t.reasonVersion(name); v != nil {
			return v
		}
	}
	return j
}

// reasonVersion turns the change's reason record of the job named name, if
// it has one, into a version in Jobs (setReason's) and returns it: what
// reads or edits the job after the pass that gave it its reason sees it
// as every other version. Only a stored pending job can have one.
func (t *txn) reasonVersion(name string) *Job {
	j := t.s.jobs[name]
	if j == nil {
		return nil
	}
	cr := t.c.records(j.Job.GetCluster())
	if cr == nil {
		return nil
	}
	p, ok := t.s.byCluster[cr.cluster].pendPos[name]
	if !ok || p >= len(cr.at) || cr.at[p] == 0 {
		return nil
	}
	return t.unrecord(int(cr.at[p] - 1))
}

// unrecord turns reason record i of the change's Emits into a version in
// Jobs and its event, as setReason makes them.
func (t *txn) unrecord(i int) *Job {
	c := t.c
	e := &c.Emits[i]
	v := t.newReasonVersion()
	v.src, v.reason = e.job, e.reason
	t.fill(v)
	e.Payload, e.job, e.reason = &v.ev, nil, ""
	c.reasons--
	c.records(e.Key).at[e.pos] = 0
	c.Jobs[e.Subject] = &v.job
	c.lastJobEmit[e.Subject] = i
	return &v.job
}

// unrecordCluster turns every reason record of cluster into a version
// (see unrecord).
func (t *txn) unrecordCluster(cluster string) {
	for i := range t.c.Emits {
		if e := &t.c.Emits[i]; e.job != nil && e.Key == cluster {
			t.unrecord(i)
		}
	}
}

func (t *txn) editJob(name string) *Job {
	if t.c.reasons > 0 {
		if _, ok := t.c.Jobs[name]; !ok {
			if j := t.s.jobs[name]; j != nil && j.Pending() {
				t.reasonVersion(name)
			}
		}
	}
	t.jobGen++
	if j, ok := t.c.Jobs[name]; ok && j != nil {
		if j.shared {
			// Its protobuf is the one emitted and shares the stored
			// version's parts: edit a deep copy.
			j.Job, j.shared = cloneTask(j.Job, j.tmpl), false
		}
		return j
	}
	old := t.s.jobs[name]
	j := &Job{JobRecord: old.JobRecord, tmpl: old.tmpl}
	j.Job = cloneTask(old.Job, old.tmpl)
	t.c.Jobs[name] = j
	return j
}

func (t *txn) putNewJob(j *Job) {
	t.jobGen++
	t.c.Jobs[j.Name()] = j
}

// putArray makes a the change's version of its array.
func (t *txn) putArray(a *Array) {
	t.jobGen++
	t.c.Arrays[a.Name] = a
}

// cloneTask deep-copies job, except that a task of an array with template
// tmpl (non-nil) goes on sharing tmpl's environment map, so that an array's
// environment is held once in memory however often its tasks change (the
// copy Clone makes is garbage at once). Nothing writes into a job's Env and
// a task's environment is its array's, so sharing it is safe.
func cloneTask(job, tmpl *loomv1.Job) *loomv1.Job {
	cp := proto.Clone(job).(*loomv1.Job)
	if tmpl != nil {
		cp.Env = tmpl.Env
	}
	return cp
}

// pendingJobs returns the cluster's pending jobs, unordered.
func (t *txn) pendingJobs(cluster string) []*Job {
	pend := t.pendingEntries(cluster)
	out := make([]*Job, len(pend))
	for i, e := range pend {
		out[i] = e.j
	}
	return out
}

// pendingEntries returns the cluster's pending jobs with their attributes,
// unordered: the state's entries, and fresh ones for jobs the change edits.
func (t *txn) pendingEntries(cluster string) []*pendEntry {
	var base []pendEntry
	if ci := t.s.byCluster[cluster]; ci != nil {
		base = ci.pending
	}
	if t.c.reasons > 0 {
		// A second look at a queue a pass gave reasons to (not one pass
		// does): its jobs are read as versions.
		t.unrecordCluster(cluster)
	}
	var out []*pendEntry
	if t.scratch != nil {
		out = t.scratch.pend[:0]
		defer func() { t.scratch.pend = out[:0] }()
	} else {
		out = make([]*pendEntry, 0, len(base)+len(t.c.Jobs))
	}
	over := len(t.c.Jobs) > 0
	for i := range base {
		if over {
			if _, ok := t.c.Jobs[base[i].name]; ok {
				continue
			}
		}
		out = append(out, &base[i])
	}
	for _, j := range t.c.Jobs {
		if j != nil && j.Pending() && j.Job.GetCluster() == cluster {
			out = append(out, &pendEntry{j: j, jobAttrs: *t.s.newAttrs(j, false)})
		}
	}
	return out
}

func (t *txn) run(key string) *Run {
	if r, ok := t.c.Runs[key]; ok {
		return r
	}
	return t.s.runs[key]
}

func (t *txn) editRun(key string) *Run {
	if r, ok := t.c.Runs[key]; ok && r != nil {
		return r
	}
	r := t.s.runs[key].clone()
	t.putRunVersion(key, r)
	return r
}

// putRunVersion makes r the change's version of the run stored as key,
// keeping overRun's map in step.
func (t *txn) putRunVersion(key string, r *Run) {
	t.c.Runs[key] = r
	if t.over != nil {
		if sr := t.s.runs[key]; sr != nil {
			t.over[sr] = r
		}
		t.overN = len(t.c.Runs)
	}
}

// overRun returns the change's version of the key of r, a run of the state
// (only those have a key: addRun sets it, clone drops it), when the change
// holds one (not nil), else r: what c.Runs[r.key] says, from a map by run
// instead of a hash of the key, which the preemption stage asked for every
// victim it read (a thousand per preemptor). The map follows the change
// through putRunVersion, and is made again from c.Runs when the change
// holds versions it was not told of (a version in the change is edited in
// place, never replaced by another: editRun, start).
func (t *txn) overRun(r *Run) *Run {
	if t.over == nil || t.overN != len(t.c.Runs) {
		t.over = make(map[*Run]*Run, len(t.c.Runs))
		for key, nr := range t.c.Runs {
			if sr := t.s.runs[key]; sr != nil {
				t.over[sr] = nr
			}
		}
		t.overN = len(t.c.Runs)
	}
	if nr := t.over[r]; nr != nil {
		return nr
	}
	return r
}

// currentRun returns the run of j's current attempt, or nil.
func (t *txn) currentRun(j *Job) *Run {
	if j.Attempt == 0 {
		return nil
	}
	return t.run(RunKey(j.Name(), j.Attempt))
}

// eachClusterRun calls f for every run of cluster that holds an allocation,
// in no particular order. fresh says whether the run's mirrored job fields
// (live, limit) are current: false for runs and jobs the change edits. pos
// is a state's run's index in its cluster's active runs (clusterIndex.active),
// -1 for a run of the change.
func (t *txn) eachClusterRun(cluster string, f func(r *Run, pos int32, fresh bool)) {
	if ci := t.s.byCluster[cluster]; ci != nil {
		overRuns, overJobs := len(t.c.Runs) > 0, len(t.c.Jobs) > 0
		for pos, r := range ci.active {
			fresh := true
			if overRuns {
				if _, over := t.c.Runs[r.key]; over {
					continue
				}
			}
			if overJobs {
				if _, over := t.c.Jobs[r.Job]; over {
					fresh = false
				}
			}
			f(r, int32(pos), fresh)
		}
	}
	for _, r := range t.c.Runs {
		if r != nil && !r.Released && r.Cluster == cluster {
			f(r, -1, false)
		}
	}
}

// activeRuns returns the runs that hold an allocation, in a stable order.
func (t *txn) activeRuns() []*Run {
	out := make([]*Run, 0, len(t.s.active)+len(t.c.Runs))
	for key, r := range t.s.active {
		if _, over := t.c.Runs[key]; !over {
			out = append(out, r)
		}
	}
	for _, r := range t.c.Runs {
		if r != nil && !r.Released {
			out = append(out, r)
		}
	}
	sort.Slice(out, func(a, b int) bool {
		if out[a].Job != out[b].Job {
			return out[a].Job < out[b].Job
		}
		return out[a].Attempt < out[b].Attempt
	})
	return out
}

func (t *txn) array(name string) *Array {
	if a, ok := t.c.Arrays[name]; ok {
		return a
	}
	return t.s.arrays[name]
}

func (t *txn) usage(key string) *Usage {
	if u, ok := t.c.Usage[key]; ok {
		return u
	}
	return t.s.usage[key]
}

// reserveJobs makes room in the change for n more job records and their
// JobChanged events at once, instead of growing the map and the slice by
// doubling (a first pass over a burst of submissions adds 100,000); only
// for the events when they are reason records (records: see Emit).
func (c *Change) reserveJobs(n int, records bool) {
	if !records {
		jobs := make(map[string]*Job, len(c.Jobs)+n)
		maps.Copy(jobs, c.Jobs)
		c.Jobs = jobs
	}
	c.Emits = slices.Grow(c.Emits, n)
}

// emitJob emits the job's current state. A change emits a job's progress
// once: when its latest JobChanged of the job shows it PENDING, CONFIGURING
// or RUNNING (or in the same state and attempt), that event is updated
// instead, so that it says how the change leaves the job. A job submitted and
// started by one change is emitted RUNNING, not PENDING then RUNNING,
// and a short step whose start and end reach the scheduler together ends the
// job in one event. What marks an attempt's end (REQUEUED, PREEMPTED, a final
// state) is never replaced, except a final state by COMPLETING, so that
// watchers never see a final state before COMPLETING. Consumers therefore
// see every state a change leaves a job in, each attempt's end, and always
// the final state.
//
// A job in a final state is emitted with its runs (Job.runs, as GetJob
// shows them) and its runs' job steps (Job.steps), so that the accounting
// history needs nothing else.
func (t *txn) emitJob(j *Job) {
	pj := j.Job
	if !j.shared || j.Terminal() {
		// The event must not see later edits of the change's copy.
		pj = proto.Clone(j.Job).(*loomv1.Job)
	}
	ev := &eventsv1.JobChanged{Job: pj, Attempt: j.Attempt, ModelDir: j.ModelDir}
	if j.Terminal() {
		ev.Job.Runs = jobRuns(j, t.run)
		withDerivedExit(ev.Job, j, t.run)
		ev.Job.Steps, ev.Job.StepsOmitted = historySteps(j, t.run) // jobsteps.go
	}
	if i, ok := t.lastJobEmit(j); ok && replaces(t.c.Emits[i].Payload.(*eventsv1.JobChanged), ev) {
		t.c.Emits[i].Payload = ev
		return
	}
	t.c.lastJobEmit[j.Name()] = len(t.c.Emits)
	t.emit(j.Job.GetCluster(), j.Name(), ev)
}

// lastJobEmit returns the index in the change's Emits of j's latest
// JobChanged, if the change has one. (A reason record is turned into a
// version before its job is edited, with its index: see unrecord.)
func (t *txn) lastJobEmit(j *Job) (int, bool) {
	i, ok := t.c.lastJobEmit[j.Name()]
	return i, ok
}

// replaces reports whether next, a later JobChanged of the same job in the
// same change, may stand for prev (see emitJob).
func replaces(prev, next *eventsv1.JobChanged) bool {
	ps, ns := prev.GetJob().GetState(), next.GetJob().GetState()
	switch {
	case prev.GetAttempt() == next.GetAttempt() && ps == ns:
		return true
	case ps == loomv1.JobState_PENDING || ps == loomv1.JobState_CONFIGURING || ps == loomv1.JobState_RUNNING:
		return true
	}
	return prev.GetAttempt() == next.GetAttempt() && ns == loomv1.JobState_COMPLETING && ps.Terminal()
}

// emit adds payload to the change's events, keyed by key and about subject;
// the app routes it to its topic (topics.For), which the domain does not pick.
func (t *txn) emit(key, subject string, payload proto.Message) {
	t.c.Emits = append(t.c.Emits, Emit{Key: key, Subject: subject, Payload: payload})
}
