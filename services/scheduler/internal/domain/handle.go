package domain

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// Handle computes what one consumed event does, followed by the scheduling
// pass it triggers on the clusters it touched. Events of types the scheduler
// does not act on give an empty change. A payload that can never be applied
// (a required field missing) gives an *errs.InvalidError.
func (s *State) Handle(now time.Time, payload proto.Message) (*Change, error) {
	t := newTxn(s, now)
	var err error
	switch ev := payload.(type) {
	case *eventsv1.SubmitJob:
		err = t.submit(ev)
	case *eventsv1.CancelJob:
		err = t.cancel(ev)
	case *eventsv1.ClusterChanged:
		err = t.clusterChanged(ev)
	case *eventsv1.ClusterDeleted:
		err = t.clusterDeleted(ev)
	case *eventsv1.NodeChanged:
		err = t.nodeChanged(ev)
	case *eventsv1.NodeRemoved:
		err = t.nodeRemoved(ev)
	case *eventsv1.NodeHealthChanged:
		err = t.nodeHealth(ev)
	case *eventsv1.StepChanged:
		err = t.stepChanged(ev)
	}
	if err != nil {
		return nil, err
	}
	t.pass()
	return t.c, nil
}

// Schedule runs a scheduling pass over every cluster, as at start-up.
func (s *State) Schedule(now time.Time) *Change {
	t := newTxn(s, now)
	for _, c := range s.Clusters() {
		t.dirty[c] = true
	}
	t.pass()
	return t.c
}

func (t *txn) submit(ev *eventsv1.SubmitJob) error {
	var v errs.Validator
	in := ev.GetJob()
	v.Check(in.GetName() != "", "job.name", "required")
	v.Check(in.GetJobId() != "", "job.job_id", "required")
	v.Check(in.GetCluster() != "", "job.cluster", "required")
	v.Check(in.GetNodeCount() >= 0, "job.node_count", "must not be negative, got %d", in.GetNodeCount())
	v.Check(in.GetGpusPerNode() >= 0, "job.gpus_per_node", "must not be negative, got %d", in.GetGpusPerNode())
	if err := v.Err(); err != nil {
		return fmt.Errorf("submit job: %w", err)
	}
	if t.job(in.GetName()) != nil {
		return nil // a copy of a submit already applied
	}
	j := &Job{Job: proto.Clone(in).(*loomv1.Job)}
	j.Job.State = loomv1.JobState_PENDING
	j.Job.StateReason = ""
	j.Job.ExitCode = 0
	j.Job.Nodes = nil
	j.Job.OutputPath = ""
	j.Job.StartTime, j.Job.EndTime = nil, nil
	j.Job.NodeCount = max(j.Job.NodeCount, 1)
	if j.Job.SubmitTime == nil {
		j.Job.SubmitTime = timestamppb.New(t.now)
	}
	if c := t.cluster(in.GetCluster()); c != nil && c.State == loomv1.Cluster_DELETED {
		t.end(j, loomv1.JobState_CANCELLED, 0, ReasonClusterDeleted)
	}
	t.putNewJob(j)
	t.emitJob(j)
	t.dirty[in.GetCluster()] = true
	return nil
}

func (t *txn) cancel(ev *eventsv1.CancelJob) error {
	if ev.GetJob() == "" {
		return fmt.Errorf("cancel job: %w", errs.Invalid("job", "required"))
	}
	j := t.job(ev.GetJob())
	switch {
	case j == nil, j.Terminal():
		return nil
	case j.Pending():
		j = t.editJob(j.Name())
		t.end(j, loomv1.JobState_CANCELLED, 0, "")
		t.emitJob(j)
	case j.Running():
		j = t.editJob(j.Name())
		t.end(j, loomv1.JobState_CANCELLED, 0, "")
		t.emitJob(j)
		if r := t.run(RunKey(j.Name(), j.Attempt)); r != nil {
			t.stopSteps(r, "", "job cancelled")
		}
	}
	t.dirty[j.Job.GetCluster()] = true
	return nil
}

func (t *txn) clusterChanged(ev *eventsv1.ClusterChanged) error {
	in := ev.GetCluster()
	if in.GetName() == "" {
		return fmt.Errorf("cluster changed: %w", errs.Invalid("cluster.name", "required"))
	}
	old := t.cluster(in.GetName())
	shared := in.GetStatus().GetSharedDir()
	if shared == "" && old != nil {
		shared = old.SharedDir
	}
	if old == nil || old.SharedDir != shared || old.State != in.GetStatus().GetState() {
		c := t.editCluster(in.GetName())
		c.SharedDir = shared
		c.State = in.GetStatus().GetState()
	}
	t.dirty[in.GetName()] = true
	return nil
}

func (t *txn) clusterDeleted(ev *eventsv1.ClusterDeleted) error {
	name := ev.GetCluster()
	if name == "" {
		return fmt.Errorf("cluster deleted: %w", errs.Invalid("cluster", "required"))
	}
	for _, j := range t.pendingJobs(name) {
		j = t.editJob(j.Name())
		t.end(j, loomv1.JobState_CANCELLED, 0, ReasonClusterDeleted)
		t.emitJob(j)
	}
	for _, r := range t.activeRuns() {
		if r.Cluster != name {
			continue
		}
		r = t.editRun(r.Key())
		for node, st := range r.Steps {
			st.Abandoned = true
			r.Steps[node] = st
		}
		r.Released = true
		if j := t.job(r.Job); j != nil && j.Running() && j.Attempt == r.Attempt {
			j = t.editJob(j.Name())
			t.end(j, loomv1.JobState_CANCELLED, 0, ReasonClusterDeleted)
			t.emitJob(j)
		}
	}
	for _, n := range t.clusterNodes(name) {
		t.deleteNode(n.Name)
	}
	// The cluster stays as a tombstone so that a late submit for it ends at once.
	c := t.editCluster(name)
	c.State = loomv1.Cluster_DELETED
	t.dirty[name] = true
	return nil
}

func (t *txn) nodeChanged(ev *eventsv1.NodeChanged) error {
	in := ev.GetNode()
	if in.GetName() == "" {
		return fmt.Errorf("node changed: %w", errs.Invalid("node.name", "required"))
	}
	cluster, host := splitNodeName(in.GetName())
	if in.GetCluster() != "" {
		cluster = in.GetCluster()
	}
	if in.GetHostname() != "" {
		host = in.GetHostname()
	}
	var deadline time.Time
	if in.GetDrainDeadline() != nil {
		deadline = in.GetDrainDeadline().AsTime()
	}
	old := t.node(in.GetName())
	if old != nil && old.Cluster == cluster && old.Hostname == host && old.GPUs == in.GetGpus() &&
		old.State == in.GetState() && old.Reason == in.GetReason() && old.Role == in.GetRole() &&
		old.DrainDeadline.Equal(deadline) {
		t.dirty[cluster] = true
		return nil
	}
	if old != nil && old.Cluster != cluster {
		t.dirty[old.Cluster] = true
	}
	n := t.editNode(in.GetName())
	n.Cluster, n.Hostname, n.GPUs, n.State, n.Reason = cluster, host, in.GetGpus(), in.GetState(), in.GetReason()
	n.Role, n.DrainDeadline = in.GetRole(), deadline
	if !n.Draining() {
		n.Drained = false // a later drain is a new one, with its own NodeDrained
	}
	if n.lost() {
		t.failNode(n)
	}
	t.dirty[cluster] = true
	return nil
}

func (t *txn) nodeRemoved(ev *eventsv1.NodeRemoved) error {
	if ev.GetNode() == "" {
		return fmt.Errorf("node removed: %w", errs.Invalid("node", "required"))
	}
	n := t.node(ev.GetNode())
	if n == nil {
		return nil
	}
	gone := *n
	gone.State, gone.Unhealthy, gone.Reason = loomv1.Node_DELETING, false, "removed"
	t.failNode(&gone)
	t.deleteNode(n.Name)
	t.dirty[n.Cluster] = true
	return nil
}

func (t *txn) nodeHealth(ev *eventsv1.NodeHealthChanged) error {
	if ev.GetNode() == "" {
		return fmt.Errorf("node health changed: %w", errs.Invalid("node", "required"))
	}
	unhealthy := ev.GetHealth() == eventsv1.NodeHealth_UNHEALTHY
	if ev.GetHealth() == eventsv1.NodeHealth_NODE_HEALTH_UNSPECIFIED {
		return nil
	}
	old := t.node(ev.GetNode())
	if old != nil && old.Unhealthy == unhealthy && old.HealthReason == ev.GetReason() {
		return nil
	}
	n := t.editNode(ev.GetNode())
	if n.Cluster == "" || n.Hostname == "" {
		// Health spoke before the provisioner: keep the verdict for when it does.
		n.Cluster, n.Hostname = splitNodeName(ev.GetNode())
		if ev.GetCluster() != "" {
			n.Cluster = ev.GetCluster()
		}
	}
	n.Unhealthy, n.HealthReason = unhealthy, ev.GetReason()
	if unhealthy {
		t.failNode(n)
	}
	t.dirty[n.Cluster] = true
	return nil
}

// failNode ends every run that holds n (which can no longer run work): its
// step there is abandoned (freeing the node's GPUs at once), the job ends
// NODE_FAIL (CANCELLED when its cluster is going away) and its other nodes are
// told to stop.
func (t *txn) failNode(n *Node) {
	for _, r := range t.activeRuns() {
		if !r.Holds(n.Name) {
			continue
		}
		r = t.editRun(r.Key())
		st := r.Steps[n.Name]
		st.Abandoned = true
		r.Steps[n.Name] = st
		if j := t.job(r.Job); j != nil && j.Running() && j.Attempt == r.Attempt {
			j = t.editJob(j.Name())
			state, reason := loomv1.JobState_NODE_FAIL, n.downReason()
			if c := t.cluster(r.Cluster); c != nil && (c.State == loomv1.Cluster_DELETING || c.State == loomv1.Cluster_DELETED) {
				state, reason = loomv1.JobState_CANCELLED, ReasonClusterDeleted
			}
			t.end(j, state, 0, reason)
			t.emitJob(j)
			t.stopSteps(r, n.Name, reason)
		}
		if r.allTerminal() {
			r.Released = true
		}
		t.dirty[r.Cluster] = true
	}
}

func (t *txn) stepChanged(ev *eventsv1.StepChanged) error {
	var v errs.Validator
	v.Check(ev.GetJob() != "", "job", "required")
	v.Check(ev.GetNode() != "", "node", "required")
	if err := v.Err(); err != nil {
		return fmt.Errorf("step changed: %w", err)
	}
	key := RunKey(ev.GetJob(), ev.GetAttempt())
	r := t.run(key)
	if r == nil {
		return nil
	}
	st, ok := r.Steps[ev.GetNode()]
	if !ok || st.Terminal() || ev.GetState() == eventsv1.StepState_STEP_STATE_UNSPECIFIED ||
		(ev.GetState() == st.State && ev.GetState() == eventsv1.StepState_STEP_RUNNING) {
		return nil
	}
	r = t.editRun(key)
	r.Steps[ev.GetNode()] = Step{State: ev.GetState(), ExitCode: ev.GetExitCode(), Message: ev.GetMessage()}
	host := hostOf(r, ev.GetNode())
	if j := t.job(r.Job); j != nil && j.Running() && j.Attempt == r.Attempt {
		fail := func(code int32, reason string) {
			if code == 0 {
				code = 1
			}
			j = t.editJob(j.Name())
			t.end(j, loomv1.JobState_FAILED, code, reason)
			t.emitJob(j)
			t.stopSteps(r, ev.GetNode(), "job failed")
		}
		switch ev.GetState() {
		case eventsv1.StepState_STEP_EXITED:
			if ev.GetExitCode() != 0 {
				fail(ev.GetExitCode(), "NonZeroExitCode")
			} else if allExitedZero(r) {
				j = t.editJob(j.Name())
				t.end(j, loomv1.JobState_COMPLETED, 0, "")
				t.emitJob(j)
			}
		case eventsv1.StepState_STEP_FAILED_TO_START:
			fail(ev.GetExitCode(), detail("JobLaunchFailure on "+host, ev.GetMessage()))
		case eventsv1.StepState_STEP_LOST:
			fail(ev.GetExitCode(), detail("step lost on "+host, ev.GetMessage()))
		case eventsv1.StepState_STEP_KILLED:
			fail(ev.GetExitCode(), detail("step killed on "+host, ev.GetMessage()))
		}
	}
	if r.allTerminal() {
		r.Released = true
		t.dirty[r.Cluster] = true
	}
	return nil
}

func detail(what, msg string) string {
	if msg == "" {
		return what
	}
	return what + ": " + msg
}

func allExitedZero(r *Run) bool {
	for _, st := range r.Steps {
		if st.Abandoned || st.State != eventsv1.StepState_STEP_EXITED || st.ExitCode != 0 {
			return false
		}
	}
	return true
}

func hostOf(r *Run, node string) string {
	for i, n := range r.Nodes {
		if n == node && i < len(r.Hostnames) {
			return r.Hostnames[i]
		}
	}
	_, host := splitNodeName(node)
	return host
}

// end moves j to a terminal state.
func (t *txn) end(j *Job, state loomv1.JobState, exit int32, reason string) {
	j.Job.State, j.Job.ExitCode, j.Job.StateReason = state, exit, reason
	j.Job.EndTime = timestamppb.New(t.now)
}

// stopSteps tells every node of r but except whose step has not ended to stop it.
func (t *txn) stopSteps(r *Run, except, reason string) {
	for _, node := range r.Nodes {
		if node == except || r.Steps[node].Terminal() {
			continue
		}
		t.emit(topics.StepCommands, node, r.Job, &eventsv1.StopStep{Job: r.Job, Attempt: r.Attempt, Node: node, Reason: reason})
	}
}

// splitNodeName splits "{cluster}/nodes/{hostname}".
func splitNodeName(name string) (cluster, host string) {
	if i := strings.LastIndex(name, "/nodes/"); i >= 0 {
		return name[:i], name[i+len("/nodes/"):]
	}
	return "", name
}

// pass runs the queue of every cluster the event touched.
func (t *txn) pass() {
	clusters := make([]string, 0, len(t.dirty))
	for c := range t.dirty {
		if c != "" {
			clusters = append(clusters, c)
		}
	}
	sort.Strings(clusters)
	for _, c := range clusters {
		t.drain(c)
		t.schedule(c)
	}
}
