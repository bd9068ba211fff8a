package domain

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/hostlist"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// Condition types and reasons on ClusterStatus.conditions.
const (
	CondReady          = "Ready"
	CondDegraded       = "Degraded"
	CondSlurmConfig    = "SlurmConfigured"
	ReasonAllReady     = "AllNodesReady"
	ReasonProvisioning = "Provisioning"
	ReasonUpdating     = "Updating"
	ReasonNotReady     = "NodesNotReady"
	ReasonFailed       = "NodesFailed"
	ReasonDown         = "NodesDown"
	ReasonAsExpected   = "AsExpected"
	ReasonRendered     = "Rendered"
	ReasonRenderFailed = "RenderFailed"
	ReasonDeadline     = "DeadlineExceeded"
)

// Progress is the cluster status message for ready of total nodes.
func Progress(ready, total int32) string { return fmt.Sprintf("%d of %d nodes ready", ready, total) }

// drainedBy is when the cluster's last draining node's drain ends (its
// jobs requeued), zero when none has a deadline.
func (e *edit) drainedBy(cluster string) time.Time {
	var until time.Time
	for _, n := range e.clusterNodes(cluster) {
		if d := n.GetDrainDeadline(); n.GetState() == loomv1.Node_DRAINING && d != nil && d.AsTime().After(until) {
			until = d.AsTime()
		}
	}
	return until
}

// removalFailure is why the first (by name) of cluster's DELETING nodes
// whose stopping or removal failed is not gone yet (RetireFailed), with
// how many more are in that case; "" when none is.
func (e *edit) removalFailure(cluster string) string {
	var first *loomv1.Node
	failing := 0
	for _, n := range e.clusterNodes(cluster) {
		if n.GetState() != loomv1.Node_DELETING || !strings.HasPrefix(n.GetNextAction(), retryingRemoval) {
			continue
		}
		failing++
		if first == nil || n.GetName() < first.GetName() {
			first = n
		}
	}
	if first == nil {
		return ""
	}
	why := "removing " + first.GetHostname() + " failed, retrying: " + strings.TrimPrefix(first.GetNextAction(), retryingRemoval)
	if failing > 1 {
		why += fmt.Sprintf(" (and %d more)", failing-1)
	}
	return why
}

// refresh recomputes a cluster's status from its nodes and moves its
// lifecycle: CREATING → RUNNING when every pool is at target (or, past the
// deadline, when every pool has a ready node; ERROR when one has none),
// UPDATING → RUNNING when every pool is at its new target and no node is
// draining, ERROR → RUNNING once every pool has a ready node. It re-renders
// the Slurm files when the cluster's nodes or spec changed. The record is
// written only when something in it changed.
func (e *edit) refresh(name string) {
	rec := e.cluster(name)
	if rec == nil || rec.State() == loomv1.Cluster_DELETING || slices.Contains(e.delCl, name) {
		return
	}
	t := e.tally(name)
	order, counts := countPools(rec, t)

	// Retired pools go once their last node is gone.
	var retired []*loomv1.NodePool
	for _, np := range rec.Retired {
		if c := counts[np.GetId()]; c.live()+c.draining+c.deleting+c.failed > 0 {
			retired = append(retired, np)
		}
	}

	var total, ready, failed, draining, down, deleting, repairing int32
	allAtTarget, everyHasReady, anyReady := true, true, false
	var noReady []string
	var pools []*loomv1.NodePoolStatus
	for _, id := range order {
		c := counts[id]
		if c.target == 0 && c.live()+c.draining+c.deleting+c.failed == 0 {
			continue // a removed pool whose last node just went
		}
		total += c.target
		ready += c.ready
		failed += c.failed
		draining += c.draining
		down += c.down
		deleting += c.deleting
		repairing += c.repairing
		anyReady = anyReady || c.ready > 0
		inSpec := c.target > 0
		if inSpec && c.ready != c.target {
			allAtTarget = false
		}
		if inSpec && c.ready == 0 {
			everyHasReady = false
			why := "no node ready"
			if _, last := c.failedHosts(); last != "" {
				why += "; last failure " + last
			}
			noReady = append(noReady, fmt.Sprintf("pool %s: %s", id, why))
		}
		if c.live() > c.target {
			allAtTarget = false // more nodes than wanted: a shrink is still on its way
		}
		pools = append(pools, &loomv1.NodePoolStatus{Id: id, Target: c.target, Ready: c.ready,
			Provisioning: c.provisioning, Failed: c.failed, Draining: c.draining})
	}
	settled := draining == 0 && deleting == 0 && len(retired) == 0

	next := rec.clone()
	next.Retired = retired
	st := next.Cluster.Status
	if st == nil {
		st = &loomv1.ClusterStatus{}
		next.Cluster.Status = st
	}
	prevState := st.GetState()
	st.TotalNodes, st.ReadyNodes, st.NodePools = total, ready, pools
	st.HomeDir = e.p.HomeDir(next.Cluster)
	st.ScratchDir = e.p.ScratchDir(next.Cluster)
	st.SharedDir = st.HomeDir
	st.LoginNode = t.loginHost()

	deadlinePassed := !rec.Deadline.IsZero() && !e.now.Before(rec.Deadline)
	var failure string
	switch prevState {
	case loomv1.Cluster_CREATING:
		switch {
		case allAtTarget:
			e.finish(next, loomv1.Cluster_RUNNING)
		case deadlinePassed && everyHasReady:
			e.finish(next, loomv1.Cluster_RUNNING)
		case deadlinePassed:
			failure = fmt.Sprintf("create did not bring every pool up within %s: %s", e.p.OperationTimeout, strings.Join(noReady, "; "))
			e.fail(next, loomv1.Cluster_ERROR, failure)
		}
	case loomv1.Cluster_UPDATING:
		switch {
		case allAtTarget && settled:
			e.finish(next, loomv1.Cluster_RUNNING)
		case deadlinePassed && settled && everyHasReady:
			e.finish(next, loomv1.Cluster_RUNNING)
		case deadlinePassed && settled:
			failure = fmt.Sprintf("update did not bring every pool up within %s: %s", e.p.OperationTimeout, strings.Join(noReady, "; "))
			state := loomv1.Cluster_RUNNING
			if !anyReady {
				state = loomv1.Cluster_ERROR
			}
			e.fail(next, state, failure)
		}
	case loomv1.Cluster_ERROR:
		if everyHasReady {
			st.State = loomv1.Cluster_RUNNING
		}
	}

	// The message: progress, or why the cluster is in ERROR.
	switch {
	case failure != "":
		st.Message = failure
	case st.State == loomv1.Cluster_ERROR && prevState == loomv1.Cluster_ERROR:
		// keep the reason it went into ERROR
	default:
		msg := Progress(ready, total)
		if failed > 0 {
			msg += fmt.Sprintf("; %d failed", failed)
		}
		if draining+deleting > 0 {
			msg += fmt.Sprintf("; %d draining", draining+deleting)
			if until := e.drainedBy(name); !until.IsZero() {
				// What an update waits for, and until when at most: the
				// jobs on those nodes are requeued then.
				msg += " (until " + until.UTC().Format(time.RFC3339) + " at the latest)"
			}
			if why := e.removalFailure(name); why != "" {
				msg += "; " + why
			}
		}
		if repairing > 0 {
			msg += fmt.Sprintf("; %d being repaired", repairing)
		}
		st.Message = msg
	}

	steady := st.State == loomv1.Cluster_RUNNING || st.State == loomv1.Cluster_ERROR
	conds := []*loomv1.Condition{readyCondition(st.State, allAtTarget, ready, total)}
	conds = append(conds, degradedCondition(order, counts, steady, failed, down))
	if e.p.Render != nil {
		conds = append(conds, e.render(next))
	}
	st.Conditions = mergeConditions(rec.Cluster.GetStatus().GetConditions(), conds, e.now)

	if _, changed := e.cl[name]; changed || !proto.Equal(rec.Cluster.GetStatus(), st) || len(retired) != len(rec.Retired) ||
		!rec.Deadline.Equal(next.Deadline) || rec.Operation != next.Operation {
		e.putCluster(next)
	}
}

// finish ends the cluster's operation successfully in state.
func (e *edit) finish(next *Cluster, state loomv1.Cluster_State) {
	next.Cluster.Status.State = state
	if next.Operation != "" {
		e.done[next.Name()] = next.Operation
	}
	next.Operation, next.Deadline = "", time.Time{}
}

// fail ends the cluster's operation with ClusterOperationFailed
// (DEADLINE_EXCEEDED) and leaves the cluster in state.
func (e *edit) fail(next *Cluster, state loomv1.Cluster_State, msg string) {
	next.Cluster.Status.State = state
	if next.Operation != "" {
		e.after = append(e.after, failed(next.Operation, next.Name(), context.DeadlineExceeded, msg))
	}
	next.Operation, next.Deadline = "", time.Time{}
}

func readyCondition(state loomv1.Cluster_State, allAtTarget bool, ready, total int32) *loomv1.Condition {
	c := &loomv1.Condition{Type: CondReady, Status: "False", Message: Progress(ready, total)}
	switch {
	case allAtTarget:
		c.Status, c.Reason = "True", ReasonAllReady
	case state == loomv1.Cluster_CREATING:
		c.Reason = ReasonProvisioning
	case state == loomv1.Cluster_UPDATING:
		c.Reason = ReasonUpdating
	default:
		c.Reason = ReasonNotReady
	}
	return c
}

// degradedCondition is True while nodes are FAILED or DOWN, and, once the
// cluster is past its create or update, while a pool is below target.
func degradedCondition(order []string, counts map[string]*poolCounts, steady bool, failed, down int32) *loomv1.Condition {
	var parts []string
	reason := ""
	for _, id := range order {
		c := counts[id]
		if c.failed > 0 {
			hosts, last := c.failedHosts()
			parts = append(parts, fmt.Sprintf("pool %s: %d failed (%s; last: %s), replacing", id, c.failed,
				hostlist.Compress(hosts), last))
			reason = ReasonFailed
		}
	}
	for _, id := range order {
		if c := counts[id]; c.down > 0 {
			parts = append(parts, fmt.Sprintf("pool %s: %d down (%s)", id, c.down, hostlist.Compress(c.downHosts())))
			if reason == "" {
				reason = ReasonDown
			}
		}
	}
	if steady {
		for _, id := range order {
			if c := counts[id]; c.target > 0 && c.ready < c.target && c.failed == 0 && c.down == 0 {
				parts = append(parts, fmt.Sprintf("pool %s: %d of %d nodes ready", id, c.ready, c.target))
				if reason == "" {
					reason = ReasonNotReady
				}
			}
		}
	}
	if reason == "" {
		return &loomv1.Condition{Type: CondDegraded, Status: "False", Reason: ReasonAsExpected}
	}
	return &loomv1.Condition{Type: CondDegraded, Status: "True", Reason: reason, Message: strings.Join(parts, "; ")}
}

// render re-renders the cluster's Slurm files when its nodes or spec
// changed and returns the SlurmConfigured condition. Only then does it read
// every node of the cluster.
func (e *edit) render(next *Cluster) *loomv1.Condition {
	name := next.Name()
	prev := condition(next.Cluster.GetStatus().GetConditions(), CondSlurmConfig)
	if !e.members[name] && prev != nil {
		return proto.Clone(prev).(*loomv1.Condition)
	}
	var in []*loomv1.Node
	for _, n := range e.clusterNodes(name) {
		if inSlurm(n) {
			in = append(in, n)
		}
	}
	cfg, err := e.p.Render(next.Cluster, in)
	if err != nil {
		return &loomv1.Condition{Type: CondSlurmConfig, Status: "False", Reason: ReasonRenderFailed, Message: err.Error()}
	}
	if old := e.s.Slurm[name]; old == nil || !proto.Equal(old, cfg) {
		e.slurm[name] = cfg
	}
	return &loomv1.Condition{Type: CondSlurmConfig, Status: "True", Reason: ReasonRendered}
}

func condition(cs []*loomv1.Condition, typ string) *loomv1.Condition {
	for _, c := range cs {
		if c.GetType() == typ {
			return c
		}
	}
	return nil
}

// mergeConditions stamps each condition's last_transition_time: kept from
// the previous condition of its type when its status did not change.
func mergeConditions(prev, next []*loomv1.Condition, now time.Time) []*loomv1.Condition {
	for _, c := range next {
		if p := condition(prev, c.GetType()); p != nil && p.GetStatus() == c.GetStatus() {
			c.LastTransitionTime = p.GetLastTransitionTime()
		} else {
			c.LastTransitionTime = timestamppb.New(now)
		}
	}
	return next
}
