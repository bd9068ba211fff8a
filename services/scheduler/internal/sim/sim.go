// Package sim runs the scheduler's real domain (internal/domain) in virtual
// time against a workload trace. It plays every other part of the system:
// the provisioner (NodeChanged and ClusterChanged build the cluster), the
// gateway (SubmitJob at each job's submit time, CancelJob when the trace's
// user cancelled) and the agents (each StartStep the scheduler emits becomes
// a StepChanged EXITED at start + runtime, each StopStep a StepChanged KILLED
// at once). Events are taken from a heap of future events in time order; the
// clock jumps from one to the next. The scheduler sees exactly the protobuf
// events the service consumes, through State.Handle and State.Commit, and
// State.Tick where the passing of time alone may change something (a job
// reaching its time limit).
package sim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/clusterspec"
	"github.com/loom-ml/loom/libs/resname"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/scheduler/internal/domain"
	"github.com/loom-ml/loom/services/scheduler/internal/sim/trace"
)

// Names of the simulated cluster and its records.
const (
	Project   = "projects/sim"
	Cluster   = Project + "/clusters/sim"
	Partition = "batch"
	SharedDir = "/sim"
)

// Epoch is the virtual time of a trace's first submission.
var Epoch = time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)

// Options say how to run a trace.
type Options struct {
	// Policy is one of Policies.
	Policy string
	// ArrivalScale divides every submit (and cancel) time: 10 offers the
	// same jobs ten times as fast. 0 means 1, the trace as recorded.
	ArrivalScale float64
}

// JobResult is what became of one job of the trace. Times are seconds from
// the trace's first submission; Start and End are -1 when it never started
// or never ended.
type JobResult struct {
	ID      int64  `json:"id"`
	Account string `json:"account"`
	// Slots is the resource the job holds while it runs.
	Slots  int64 `json:"slots"`
	Submit int64 `json:"submit"`
	// Start is its first start; LastStart that of the run that ended it.
	Start     int64           `json:"start"`
	LastStart int64           `json:"last_start"`
	End       int64           `json:"end"`
	State     loomv1.JobState `json:"state"`
	// Requeues counts runs that ended without ending the job.
	Requeues int `json:"requeues,omitempty"`
}

// Result is one policy's run of one trace.
type Result struct {
	Policy string `json:"policy"`
	Trace  string `json:"trace"`
	// Capacity is the cluster's total resource (GPUs, or processors).
	Capacity int64       `json:"capacity"`
	Jobs     []JobResult `json:"-"`
	// Held is the resource-seconds held by runs, killed ones included.
	Held float64 `json:"held"`
	// Events counts the events handled (each with its scheduling pass) and
	// Ticks the clock ticks.
	Events int           `json:"events"`
	Ticks  int           `json:"ticks"`
	Wall   time.Duration `json:"wall_ns"`
	// Reservations counts the backfill reservations the passes made;
	// Delayed lists those that moved a job's reserved start later, which
	// EASY backfill must never do under FCFS order (checked only there).
	Reservations int     `json:"reservations"`
	Delayed      []Delay `json:"delayed,omitempty"`
	// Metrics are computed from Jobs and Held.
	Metrics Metrics `json:"metrics"`
}

// Delay is a reserved start that moved later: job's reservation said Was,
// then, at At, a new one said Now (or the job started, at Now).
type Delay struct {
	Job int64 `json:"job"`
	At  int64 `json:"at"`
	Was int64 `json:"was"`
	Now int64 `json:"now"`
}

// Run replays tr under opts.Policy and measures the outcome.
func Run(ctx context.Context, tr *trace.Trace, opts Options) (*Result, error) {
	cfg, err := DomainConfig(opts.Policy)
	if err != nil {
		return nil, err
	}
	scale := opts.ArrivalScale
	if scale == 0 {
		scale = 1
	}
	if scale < 0 || math.IsNaN(scale) || math.IsInf(scale, 0) {
		return nil, fmt.Errorf("arrival scale must be positive, got %v", opts.ArrivalScale)
	}
	e := &engine{tr: tr, st: domain.NewState(cfg), scale: scale,
		res:     &Result{Policy: opts.Policy, Trace: tr.Name, Capacity: tr.Capacity(), Jobs: make([]JobResult, len(tr.Jobs))},
		stopped: map[stepKey]bool{}, ticks: map[int64]bool{}, reserved: map[int32]int64{},
		fcfs: cfg.Policy.Order == domain.OrderFCFS && cfg.Policy.Less == nil}
	for i, j := range tr.Jobs {
		e.res.Jobs[i] = JobResult{ID: j.ID, Account: j.Account, Slots: j.Slots(), Submit: e.submitAt(j), Start: -1, LastStart: -1, End: -1}
	}
	began := time.Now()
	if err := e.build(); err != nil {
		return nil, err
	}
	if err := e.loop(ctx); err != nil {
		return nil, err
	}
	e.res.Wall = time.Since(began)
	e.res.Metrics = Measure(e.res.Jobs, e.res.Held, e.res.Capacity)
	return e.res, nil
}

// Event kinds, in the order they are handled when due at the same second:
// steps ending free resources before the jobs submitted that second look
// for them; the clock ticks last.
const (
	kindKill = iota
	kindExit
	kindCancel
	kindSubmit
	kindTick
)

type event struct {
	at      int64
	kind    int
	seq     int64
	job     int32 // index in the trace
	attempt int32
	node    string
}

func (a *event) before(b *event) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	if a.kind != b.kind {
		return a.kind < b.kind
	}
	return a.seq < b.seq
}

// queue is a binary min-heap of events.
type queue []event

func (q *queue) push(e event) {
	*q = append(*q, e)
	h := *q
	for i := len(h) - 1; i > 0; {
		p := (i - 1) / 2
		if !h[i].before(&h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

func (q *queue) pop() event {
	h := *q
	top := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h = h[:last]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(h) && h[l].before(&h[m]) {
			m = l
		}
		if r < len(h) && h[r].before(&h[m]) {
			m = r
		}
		if m == i {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	*q = h
	return top
}

type stepKey struct {
	job     int32
	attempt int32
	node    string
}

type engine struct {
	tr    *trace.Trace
	st    *domain.State
	scale float64
	res   *Result

	now  int64
	seq  int64
	q    queue
	next int // the next job of tr to submit
	// running: the attempt each job runs now (0: none).
	running []int32
	// stopped: steps killed, whose scheduled exit is void.
	stopped map[stepKey]bool
	// ticks: seconds at which a tick is already queued.
	ticks map[int64]bool
	// reserved: each job's latest reserved start; fcfs says the policy
	// serves the queue in submission order, where that start must never
	// move later.
	reserved map[int32]int64
	fcfs     bool
}

func (e *engine) submitAt(j trace.Job) int64 { return int64(float64(j.Submit) / e.scale) }

func (e *engine) at(sec int64) time.Time { return Epoch.Add(time.Duration(sec) * time.Second) }

func (e *engine) push(ev event) {
	e.seq++
	ev.seq = e.seq
	e.q.push(ev)
}

// JobName is the full name of the trace's job with id.
func JobName(id int64) string { return resname.JobOf(projectID, id).String() }

// projectID is the id of Project.
var projectID = func() string { p, _ := resname.ParseProject(Project); return p.ID }()

// NodeName is the full name of the node with hostname.
func NodeName(host string) string { return resname.NodeIn(Cluster, host) }

// ClusterSpec is the simulated cluster as the provisioner describes it: one
// node pool per pool of the trace, a node set per pool, and one default
// partition over all of them without a time limit.
func ClusterSpec(tr *trace.Trace) *loomv1.Cluster {
	c := &loomv1.Cluster{
		Name: Cluster,
		Status: &loomv1.ClusterStatus{State: loomv1.Cluster_RUNNING, SharedDir: SharedDir,
			HomeDir: SharedDir, ReadyNodes: int32(len(tr.Nodes)), TotalNodes: int32(len(tr.Nodes))},
		Compute:      &loomv1.ComputeResources{},
		Orchestrator: &loomv1.Orchestrator{Slurm: &loomv1.SlurmOrchestrator{}},
	}
	part := &loomv1.SlurmPartition{Id: Partition, Default: true, MaxTime: "UNLIMITED"}
	seen := map[string]*loomv1.NodePool{}
	for _, n := range tr.Nodes {
		if p := seen[n.Pool]; p != nil {
			p.NodeCount++
			continue
		}
		p := &loomv1.NodePool{Id: n.Pool, NodeCount: 1, AcceleratorCount: n.Slots, AcceleratorType: n.Model}
		seen[n.Pool] = p
		c.Compute.NodePools = append(c.Compute.NodePools, p)
		c.Orchestrator.Slurm.NodeSets = append(c.Orchestrator.Slurm.NodeSets, &loomv1.SlurmNodeSet{Id: n.Pool, NodePoolId: n.Pool})
		part.NodeSetIds = append(part.NodeSetIds, n.Pool)
	}
	c.Orchestrator.Slurm.Partitions = []*loomv1.SlurmPartition{part}
	return c
}

// NodeEvent is the NodeChanged that brings a trace's node up.
func NodeEvent(n trace.Node) *eventsv1.NodeChanged {
	return &eventsv1.NodeChanged{Node: &loomv1.Node{
		Name: NodeName(n.Hostname), Cluster: Cluster, NodePool: n.Pool, Hostname: n.Hostname,
		State: loomv1.Node_READY, Gpus: n.Slots, AcceleratorType: n.Model, Role: clusterspec.RoleCompute,
	}}
}

// SubmitEvent is the SubmitJob of a trace's job, submitted at submit.
func SubmitEvent(j trace.Job, submit time.Time) *eventsv1.SubmitJob {
	job := &loomv1.Job{
		Name: JobName(j.ID), JobId: strconv.FormatInt(j.ID, 10), Cluster: Cluster,
		DisplayName: j.Name, Command: []string{"true"},
		NodeCount: j.Nodes, GpusPerNode: j.PerNode, User: j.User, Account: j.Account,
		TimeLimitSeconds: j.TimeLimit, CpusPerTask: j.CPUsPerTask, MemMb: j.MemMB,
		State: loomv1.JobState_PENDING,
	}
	job.SubmitTime = timestampOf(submit)
	return &eventsv1.SubmitJob{Job: job}
}

// build brings the cluster up: its spec, then every node READY.
func (e *engine) build() error {
	if err := e.handle(&eventsv1.ClusterChanged{Cluster: ClusterSpec(e.tr)}); err != nil {
		return err
	}
	for _, n := range e.tr.Nodes {
		if err := e.handle(NodeEvent(n)); err != nil {
			return err
		}
	}
	e.running = make([]int32, len(e.tr.Jobs))
	return nil
}

// loop handles events until none is left.
func (e *engine) loop(ctx context.Context) error {
	jobs := e.tr.Jobs
	for n := 0; ; n++ {
		if n%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		var ev event
		switch {
		case e.next < len(jobs) && (len(e.q) == 0 || e.res.Jobs[e.next].Submit < e.q[0].at ||
			(e.res.Jobs[e.next].Submit == e.q[0].at && e.q[0].kind > kindSubmit)):
			ev = event{at: e.res.Jobs[e.next].Submit, kind: kindSubmit, job: int32(e.next)}
			e.next++
		case len(e.q) > 0:
			ev = e.q.pop()
		default:
			return nil
		}
		e.now = ev.at
		var err error
		switch ev.kind {
		case kindSubmit:
			j := jobs[ev.job]
			err = e.handle(SubmitEvent(j, e.at(e.now)))
			if err == nil && j.Cancelled {
				e.push(event{at: max(int64(float64(j.CancelAt)/e.scale), e.now), kind: kindCancel, job: ev.job})
			}
		case kindCancel:
			err = e.handle(&eventsv1.CancelJob{Job: JobName(jobs[ev.job].ID), Cluster: Cluster})
		case kindExit, kindKill:
			k := stepKey{ev.job, ev.attempt, ev.node}
			state, code := eventsv1.StepState_STEP_EXITED, jobs[ev.job].ExitCode
			if ev.kind == kindKill {
				state, code = eventsv1.StepState_STEP_KILLED, 137
			} else if e.stopped[k] {
				delete(e.stopped, k)
				continue // killed before it could exit
			}
			err = e.handle(&eventsv1.StepChanged{Job: JobName(jobs[ev.job].ID), Attempt: ev.attempt, Node: ev.node,
				State: state, ExitCode: code, Cluster: Cluster})
		case kindTick:
			delete(e.ticks, ev.at)
			e.res.Ticks++
			c := e.st.Tick(e.at(e.now))
			e.st.Commit(c)
			err = e.apply(c)
		}
		if err != nil {
			return err
		}
	}
}

// handle gives the domain one event, commits its change and plays the
// events it emits.
func (e *engine) handle(payload proto.Message) error {
	c, err := e.st.Handle(e.at(e.now), payload)
	if err != nil {
		return fmt.Errorf("at %ds, %T: %w", e.now, payload, err)
	}
	e.res.Events++
	e.st.Commit(c)
	return e.apply(c)
}

// apply plays what the scheduler emitted: it records job transitions and
// acts as the agents.
func (e *engine) apply(c *domain.Change) error {
	for _, r := range c.Reservations {
		e.reserve(r)
	}
	for i := range c.Emits {
		switch ev := c.Emits[i].Message().(type) {
		case *eventsv1.JobChanged:
			i, ok := e.index(ev.GetJob().GetName())
			if !ok {
				continue
			}
			e.transition(i, ev)
		case *eventsv1.StartStep:
			i, ok := e.index(ev.GetJob())
			if !ok {
				return fmt.Errorf("StartStep for unknown job %q", ev.GetJob())
			}
			j := e.tr.Jobs[i]
			if j.Cancelled {
				continue // runs until its user cancels it
			}
			e.push(event{at: e.now + j.Runtime, kind: kindExit, job: i, attempt: ev.GetAttempt(), node: ev.GetNode()})
			if j.Runtime > j.TimeLimit && ev.GetNodeIndex() == 0 {
				// It would outrun its limit: let the clock tell the scheduler when it is reached.
				e.tick(e.now + j.TimeLimit)
			}
		case *eventsv1.SignalStep:
			// A preempted job's --signal: its grace ends on the clock.
			e.tick(e.now + int64(e.st.Config().PreemptGrace/time.Second))
		case *eventsv1.StopStep:
			i, ok := e.index(ev.GetJob())
			if !ok {
				continue
			}
			k := stepKey{i, ev.GetAttempt(), ev.GetNode()}
			if !e.stopped[k] {
				e.stopped[k] = true
				e.push(event{at: e.now, kind: kindKill, job: i, attempt: ev.GetAttempt(), node: ev.GetNode()})
			}
		}
	}
	return nil
}

// reserve checks a backfill reservation against the ones made before for
// the same job: with FCFS order and every job ending by its time limit, a
// job's reserved start may move earlier (jobs end early) but never later.
func (e *engine) reserve(r domain.Reservation) {
	i, ok := e.index(r.Job)
	if !ok || r.Unbounded {
		return
	}
	at := int64(r.Start.Sub(Epoch) / time.Second)
	if prev, ok := e.reserved[i]; ok && at > prev && e.fcfs {
		e.res.Delayed = append(e.res.Delayed, Delay{Job: e.tr.Jobs[i].ID, At: e.now, Was: prev, Now: at})
	}
	e.reserved[i] = at
	e.res.Reservations++
}

func (e *engine) tick(at int64) {
	if !e.ticks[at] {
		e.ticks[at] = true
		e.push(event{at: at, kind: kindTick})
	}
}

// transition records a job's new state.
func (e *engine) transition(i int32, ev *eventsv1.JobChanged) {
	r := &e.res.Jobs[i]
	st := ev.GetJob().GetState()
	switch {
	case st == loomv1.JobState_RUNNING || st == loomv1.JobState_CONFIGURING: // a start (CONFIGURING: an older scheduler's)
		if e.running[i] != ev.GetAttempt() {
			if at, ok := e.reserved[i]; ok && e.fcfs && e.now > at {
				e.res.Delayed = append(e.res.Delayed, Delay{Job: e.tr.Jobs[i].ID, At: e.now, Was: at, Now: e.now})
			}
			delete(e.reserved, i)
			e.running[i] = ev.GetAttempt()
			if r.Start < 0 {
				r.Start = e.now
			}
			r.LastStart = e.now
		}
	case e.running[i] != 0 && (st.Terminal() || st == loomv1.JobState_REQUEUED || st == loomv1.JobState_PENDING):
		// The run ends (the job, or only this attempt when it is requeued).
		e.res.Held += float64(r.Slots) * float64(e.now-r.LastStart)
		e.running[i] = 0
		if !st.Terminal() {
			r.Requeues++
		}
	}
	if st.Terminal() {
		r.State, r.End = st, e.now
	} else {
		r.State = st
	}
}

// index returns the trace index of a job name.
func (e *engine) index(name string) (int32, bool) {
	j, err := resname.SplitJob(name)
	if err != nil {
		return 0, false
	}
	id, err := strconv.ParseInt(j.ID, 10, 64)
	if err != nil || id < 1 || id > int64(len(e.tr.Jobs)) {
		return 0, false
	}
	return int32(id - 1), true
}

// ErrUnknownPolicy is returned for a policy name not in Policies.
var ErrUnknownPolicy = errors.New("unknown policy")
