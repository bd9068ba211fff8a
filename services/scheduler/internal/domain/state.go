package domain

import (
	"sort"

	"google.golang.org/protobuf/proto"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// State is everything the scheduler knows, with the indexes a scheduling pass
// needs. It changes only through Commit; Handle and Schedule read it and
// return a Change, so a Change that fails to persist leaves it untouched.
// State is not safe for concurrent use: callers serialise Commit against
// readers.
type State struct {
	cfg      Config
	clusters map[string]*Cluster
	nodes    map[string]*Node
	jobs     map[string]*Job
	runs     map[string]*Run

	// clusterNodes: cluster name → node names.
	clusterNodes map[string]map[string]bool
	// pending: cluster name → names of its PENDING jobs.
	pending map[string]map[string]bool
	// active: keys of runs that still hold an allocation.
	active map[string]bool
	// draining: names of the DRAINING nodes, for Tick.
	draining map[string]bool
}

// Config is what the domain is told at start.
type Config struct {
	Policy Policy
	// MasterAddr is every run's MASTER_ADDR; "" means the hostname of the
	// run's first node (Slurm's usual choice).
	MasterAddr string
}

// NewState returns an empty state that schedules as cfg says.
func NewState(cfg Config) *State {
	if cfg.Policy.Less == nil {
		cfg.Policy = DefaultPolicy()
	}
	return &State{
		cfg:          cfg,
		clusters:     map[string]*Cluster{},
		nodes:        map[string]*Node{},
		jobs:         map[string]*Job{},
		runs:         map[string]*Run{},
		clusterNodes: map[string]map[string]bool{},
		pending:      map[string]map[string]bool{},
		active:       map[string]bool{},
		draining:     map[string]bool{},
	}
}

// Change is what handling one event did: the new version of every record it
// touched (a nil value means the record is deleted) and the events to emit, in
// order. Decisions explain the scheduling pass, for logs.
type Change struct {
	Clusters  map[string]*Cluster
	Nodes     map[string]*Node
	Jobs      map[string]*Job
	Runs      map[string]*Run
	Emits     []Emit
	Decisions []Decision

	// lastJobEmit: job name → index in Emits of its latest JobChanged, so
	// that a pass that only refines a reason updates it instead of adding one.
	lastJobEmit map[string]int
}

// Empty reports whether the change touches nothing and emits nothing.
func (c *Change) Empty() bool {
	return len(c.Clusters) == 0 && len(c.Nodes) == 0 && len(c.Jobs) == 0 && len(c.Runs) == 0 && len(c.Emits) == 0
}

// Emit is an event to publish: the payload, its topic, its record key and
// the entity it is about (the job's name for job and step events).
type Emit struct {
	Topic   string
	Key     string
	Subject string
	Payload proto.Message
}

// Decision records why a pending job did not start in a pass, and how many
// nodes each feasibility check filtered out.
type Decision struct {
	Job      string
	Reason   string
	Filtered map[string]int
}

// Commit makes c part of the state. c must come from this state's Handle or
// Schedule with no Commit in between.
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
	for name, j := range c.Jobs {
		s.putJob(name, j)
	}
	for key, r := range c.Runs {
		s.putRun(key, r)
	}
}

// Load adds records read from storage, as at start-up.
func (s *State) Load(clusters []*Cluster, nodes []*Node, jobs []*Job, runs []*Run) {
	for _, c := range clusters {
		s.clusters[c.Name] = c
	}
	for _, n := range nodes {
		s.putNode(n.Name, n)
	}
	for _, j := range jobs {
		s.putJob(j.Name(), j)
	}
	for _, r := range runs {
		s.putRun(r.Key(), r)
	}
}

func (s *State) putNode(name string, n *Node) {
	if old, ok := s.nodes[name]; ok {
		delete(s.clusterNodes[old.Cluster], name)
	}
	delete(s.draining, name)
	if n == nil {
		delete(s.nodes, name)
		return
	}
	s.nodes[name] = n
	set(s.clusterNodes, n.Cluster)[name] = true
	if n.Draining() {
		s.draining[name] = true
	}
}

func (s *State) putJob(name string, j *Job) {
	if old, ok := s.jobs[name]; ok {
		delete(s.pending[old.Job.GetCluster()], name)
	}
	if j == nil {
		delete(s.jobs, name)
		return
	}
	s.jobs[name] = j
	if j.Pending() {
		set(s.pending, j.Job.GetCluster())[name] = true
	}
}

func (s *State) putRun(key string, r *Run) {
	delete(s.active, key)
	if r == nil {
		delete(s.runs, key)
		return
	}
	s.runs[key] = r
	if !r.Released {
		s.active[key] = true
	}
}

func set(m map[string]map[string]bool, k string) map[string]bool {
	if m[k] == nil {
		m[k] = map[string]bool{}
	}
	return m[k]
}

// Job returns a copy of the job's resource, or nil when unknown.
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
	for n := range s.clusterNodes {
		seen[n] = true
	}
	for n := range s.pending {
		seen[n] = true
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// ActiveRuns returns the runs that hold an allocation (not to be modified).
func (s *State) ActiveRuns() []*Run {
	out := make([]*Run, 0, len(s.active))
	for k := range s.active {
		out = append(out, s.runs[k])
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Key() < out[b].Key() })
	return out
}
