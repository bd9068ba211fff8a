package domain

import (
	"sort"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// txn is the working view while one event is handled: reads see the state
// with the change laid over it, and edits copy a record into the change first,
// so the state itself is never touched before Commit.
type txn struct {
	s     *State
	now   time.Time
	c     *Change
	dirty map[string]bool // clusters whose queue needs a pass
}

func newTxn(s *State, now time.Time) *txn {
	return &txn{s: s, now: now, dirty: map[string]bool{}, c: &Change{
		Clusters:    map[string]*Cluster{},
		Nodes:       map[string]*Node{},
		Jobs:        map[string]*Job{},
		Runs:        map[string]*Run{},
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
	var out []*Node
	for name := range t.s.clusterNodes[cluster] {
		if _, over := t.c.Nodes[name]; !over {
			out = append(out, t.s.nodes[name])
		}
	}
	for _, n := range t.c.Nodes {
		if n != nil && n.Cluster == cluster {
			out = append(out, n)
		}
	}
	sort.Slice(out, func(a, b int) bool {
		if out[a].Hostname != out[b].Hostname {
			return out[a].Hostname < out[b].Hostname
		}
		return out[a].Name < out[b].Name
	})
	return out
}

func (t *txn) job(name string) *Job {
	if j, ok := t.c.Jobs[name]; ok {
		return j
	}
	return t.s.jobs[name]
}

func (t *txn) editJob(name string) *Job {
	if j, ok := t.c.Jobs[name]; ok && j != nil {
		return j
	}
	old := t.s.jobs[name]
	j := &Job{Attempt: old.Attempt, ModelDir: old.ModelDir, Job: proto.Clone(old.Job).(*loomv1.Job)}
	t.c.Jobs[name] = j
	return j
}

func (t *txn) putNewJob(j *Job) { t.c.Jobs[j.Name()] = j }

// pendingJobs returns the cluster's pending jobs in queue order.
func (t *txn) pendingJobs(cluster string) []*Job {
	var out []*Job
	for name := range t.s.pending[cluster] {
		if _, over := t.c.Jobs[name]; !over {
			out = append(out, t.s.jobs[name])
		}
	}
	for _, j := range t.c.Jobs {
		if j != nil && j.Pending() && j.Job.GetCluster() == cluster {
			out = append(out, j)
		}
	}
	less := t.s.cfg.Policy.Less
	sort.Slice(out, func(a, b int) bool { return less(out[a], out[b]) })
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
	t.c.Runs[key] = r
	return r
}

// activeRuns returns the runs that hold an allocation, in a stable order.
func (t *txn) activeRuns() []*Run {
	var out []*Run
	for key := range t.s.active {
		if _, over := t.c.Runs[key]; !over {
			out = append(out, t.s.runs[key])
		}
	}
	for _, r := range t.c.Runs {
		if r != nil && !r.Released {
			out = append(out, r)
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Key() < out[b].Key() })
	return out
}

// usedGPUs returns the GPU indices held on each node of the cluster.
func (t *txn) usedGPUs(cluster string) map[string]map[int32]bool {
	used := map[string]map[int32]bool{}
	for _, r := range t.activeRuns() {
		if r.Cluster != cluster {
			continue
		}
		for _, node := range r.Nodes {
			if !r.Holds(node) {
				continue
			}
			for _, g := range r.GPUs[node] {
				if used[node] == nil {
					used[node] = map[int32]bool{}
				}
				used[node][g] = true
			}
		}
	}
	return used
}

// emitJob emits the job's current state. When the change already emits the
// job in the same state, that event is updated instead: a pass that refines a
// new job's reason yields one JobChanged, not two.
func (t *txn) emitJob(j *Job) {
	ev := &eventsv1.JobChanged{Job: proto.Clone(j.Job).(*loomv1.Job), Attempt: j.Attempt, ModelDir: j.ModelDir}
	if i, ok := t.c.lastJobEmit[j.Name()]; ok {
		prev := t.c.Emits[i].Payload.(*eventsv1.JobChanged)
		if prev.GetJob().GetState() == j.Job.GetState() && prev.GetAttempt() == j.Attempt {
			t.c.Emits[i].Payload = ev
			return
		}
	}
	t.c.lastJobEmit[j.Name()] = len(t.c.Emits)
	t.emit(topics.JobEvents, j.Job.GetCluster(), j.Name(), ev)
}

func (t *txn) emit(topic, key, subject string, payload proto.Message) {
	t.c.Emits = append(t.c.Emits, Emit{Topic: topic, Key: key, Subject: subject, Payload: payload})
}
