package domain

import (
	"sort"

	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// drain handles the cluster's DRAINING nodes: it requeues the jobs of those
// past their deadline and emits NodeDrained, once, for each that holds no
// allocation any more.
func (t *txn) drain(cluster string) {
	nodes := t.drainingNodes(cluster)
	if len(nodes) == 0 {
		return
	}
	holders := t.holders()
	for _, n := range nodes {
		requeue, _ := t.drainWork(n, holders[n.Name])
		for _, r := range requeue {
			t.requeue(t.job(r.Job), r, n.Hostname)
		}
	}
	// Requeueing releases nothing (the old run holds its nodes until its
	// steps end), so the holders computed above still stand.
	for _, n := range nodes {
		if _, drained := t.drainWork(n, holders[n.Name]); drained {
			n = t.editNode(n.Name)
			n.Drained = true
			n.HealthDrained = n.HealthOut() // one NodeDrained says it to health too
			t.emit(cluster, n.Name, &eventsv1.NodeDrained{Node: n.Name, Cluster: cluster})
		}
	}
}

// drainWork says what a DRAINING node n, held by the runs holders, needs:
// the runs whose jobs are to be requeued because its deadline has passed,
// and whether NodeDrained is due (it holds nothing and was not announced).
func (t *txn) drainWork(n *Node, holders []*Run) (requeue []*Run, drained bool) {
	if n == nil || !n.Draining() {
		return nil, false
	}
	if len(holders) == 0 {
		return nil, !n.Drained
	}
	if n.DrainDeadline.IsZero() || t.now.Before(n.DrainDeadline) {
		return nil, false
	}
	for _, r := range holders {
		if j := t.job(r.Job); j != nil && j.Running() && j.Attempt == r.Attempt {
			requeue = append(requeue, r)
		}
	}
	return requeue, false
}

// requeue ends j's run r, which holds the draining node host past its
// deadline: every node of the run is told to stop, and the job is REQUEUED
// and back in the queue, PENDING, in its old place (or ends NODE_FAIL when
// it was submitted with --no-requeue). Its next start is a new attempt; the
// old run keeps its allocation until its steps end.
func (t *txn) requeue(j *Job, r *Run, host string) {
	reason := "node " + host + " draining"
	j = t.editJob(j.Name())
	t.stopSteps(r, "", reason, eventsv1.StopCause_STOP_CAUSE_NODE_FAILURE)
	if !j.requeueAllowed() {
		t.finish(j, loomv1.JobState_NODE_FAIL, 0, reason)
		t.dirty[j.Job.GetCluster()] = true
		return
	}
	t.endAttempt(r, loomv1.JobState_REQUEUED, 0, reason)
	t.requeueJob(j, reason)
}

// drainingNodes returns the cluster's DRAINING nodes, by name.
func (t *txn) drainingNodes(cluster string) []*Node {
	var out []*Node
	for name := range t.s.draining {
		if _, over := t.c.Nodes[name]; !over && t.s.nodes[name].Cluster == cluster {
			out = append(out, t.s.nodes[name])
		}
	}
	for _, n := range t.c.Nodes {
		if n != nil && n.Cluster == cluster && n.Draining() {
			out = append(out, n)
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Name < out[b].Name })
	return out
}

// holders maps each node name to the runs that hold an allocation on it.
func (t *txn) holders() map[string][]*Run {
	out := map[string][]*Run{}
	for _, r := range t.activeRuns() {
		for _, node := range r.Nodes {
			if r.Holds(node) {
				out[node] = append(out[node], r)
			}
		}
	}
	return out
}
