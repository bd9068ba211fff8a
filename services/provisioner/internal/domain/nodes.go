package domain

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/auth"
	"github.com/loom-ml/loom/libs/clusterspec"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/provisioner/internal/provider"
)

// LaunchReasonPrefix starts every node reason set by LaunchFailed, so that
// Launched clears only reasons the provider caused (never health's).
const LaunchReasonPrefix = "launch: "

// Reasons and next actions the provisioner puts on nodes.
const (
	ReasonPreempted = "preempted by provider"
	actionWaitDown  = "none: health marks it READY when its heartbeats resume"
)

// AgentRegistered decides an agent's registration: a node being repaired
// becomes READY when it is the new boot's agent, ending the repair (see
// repairRegistered); a PROVISIONING node becomes READY, and the cluster's progress moves (RUNNING, finishing the
// create, when every pool is at target). A DOWN node stays DOWN (health
// decides when it is healthy again); a FAILED, DRAINING or DELETING node
// stays as it is. The registration of the identity that signed it
// (ev.registration, which the consumer sets from the verified certificate)
// becomes the node's when it is a later one than the node's
// (auth.SupersedesRegistration), in the same change: the scheduler, which
// seals the node's step commands for it, learns it no later than it learns
// the node is READY, and an earlier registration's identity (the image
// before a reimage, valid for up to an hour) cannot make itself the node's
// again.
func (s *State) AgentRegistered(p Params, ev *eventsv1.AgentRegistered, now time.Time) Change {
	e := s.edit(p, now)
	e.agentRegistered(ev)
	return e.change()
}

func (e *edit) agentRegistered(ev *eventsv1.AgentRegistered) {
	if n, _ := e.live(ev.GetNode()); n != nil && auth.SupersedesRegistration(ev.GetRegistration(), n.GetRegistration()) {
		e.mutNode(n.GetName()).Registration = ev.GetRegistration()
	}
	if r := e.repairFor(ev.GetNode()); r != nil {
		e.repairRegistered(r, ev)
		return
	}
	n, _ := e.live(ev.GetNode())
	if n == nil || n.GetState() != loomv1.Node_PROVISIONING {
		return
	}
	nn := e.mutNode(n.GetName())
	nn.State, nn.Reason, nn.NextAction = loomv1.Node_READY, "", ""
}

// NodeHealthChanged decides a health verdict: UNHEALTHY (not merely
// unreachable, not an operator's drain) makes a READY or PROVISIONING node
// DOWN with the reason; HEALTHY makes a DOWN or
// PROVISIONING node READY. Nodes on their way out are left alone.
func (s *State) NodeHealthChanged(p Params, ev *eventsv1.NodeHealthChanged, now time.Time) Change {
	e := s.edit(p, now)
	e.nodeHealthChanged(ev)
	return e.change()
}

func (e *edit) nodeHealthChanged(ev *eventsv1.NodeHealthChanged) {
	n, _ := e.live(ev.GetNode())
	if n == nil {
		return
	}
	switch n.GetState() {
	case loomv1.Node_PROVISIONING, loomv1.Node_READY, loomv1.Node_DOWN:
	default:
		return
	}
	if ev.GetUnreachable() {
		// Out of reach, not confirmed failed (health says so with HEALTHY):
		// the scheduler keeps new work off it; the node is as it was.
		return
	}
	var state loomv1.Node_State
	var reason, action string
	switch ev.GetHealth() {
	case eventsv1.NodeHealth_UNHEALTHY:
		if ev.GetAction() == loomv1.RemediationAction_ACTION_DRAIN {
			// Not down: drained by an operator with its jobs still
			// running. The scheduler keeps new work off it; the node
			// itself is as it was.
			return
		}
		state, reason, action = loomv1.Node_DOWN, ev.GetReason(), actionWaitDown
		if reason == "" {
			reason = "unhealthy"
		}
	case eventsv1.NodeHealth_HEALTHY:
		state = loomv1.Node_READY
	default:
		return
	}
	if n.GetState() == state && n.GetReason() == reason {
		return
	}
	nn := e.mutNode(n.GetName())
	nn.State, nn.Reason, nn.NextAction = state, reason, action
	if ev.GetLastHeartbeat() != nil {
		nn.LastHeartbeat = ev.GetLastHeartbeat()
	}
}

// Batched reports whether Batch decides events of payload's type: the
// node reports that come by the thousand during a large create or an
// outage (registrations, health verdicts), whose decisions touch only
// their node and, through its status, its cluster.
func Batched(payload proto.Message) bool {
	switch payload.(type) {
	case *eventsv1.AgentRegistered, *eventsv1.NodeHealthChanged:
		return true
	}
	return false
}

// Batch decides several node reports (each Batched) as one Change. Each is
// decided as its own decision would, in order, against the records as the
// reports before it left them; the statuses of the clusters they touched
// are recomputed once, at the end. So a node that changed is written and
// announced once, with its final record (one NodeChanged), and a cluster
// once, with its final status (one ClusterChanged, operation_done when the
// batch finished its operation): what a reader of the latest state needs,
// at the cost of one status for the batch instead of one per report. The
// lifecycle moves on the batch's outcome: a create whose last registration
// is followed in the same batch by an UNHEALTHY verdict is not finished
// (as if the verdict had come first). A payload Batch does not decide is an
// error, and no Change.
func (s *State) Batch(p Params, payloads []proto.Message, now time.Time) (Change, error) {
	e := s.edit(p, now)
	for i, m := range payloads {
		switch ev := m.(type) {
		case *eventsv1.AgentRegistered:
			e.agentRegistered(ev)
		case *eventsv1.NodeHealthChanged:
			e.nodeHealthChanged(ev)
		default:
			return Change{}, fmt.Errorf("batch: payload %d is a %T, which is decided on its own", i, m)
		}
	}
	return e.change(), nil
}

// LaunchFailed records a failed launch of a node. A PROVISIONING node
// counts it in launch_attempts and says when the next try is
// ("retry launch in 4s (attempt 3 of 5)"); the MaxLaunchAttempts-th failure
// makes it FAILED and replaces it. A node that ran before (its agent died
// and could not be restarted) only gets the reason: health owns its state.
func (s *State) LaunchFailed(p Params, node, reason string, now time.Time) Change {
	e := s.edit(p, now)
	n, _ := e.live(node)
	if n == nil || n.GetRole() == clusterspec.RoleLogin {
		return Change{}
	}
	switch n.GetState() {
	case loomv1.Node_PROVISIONING:
		attempts := n.GetLaunchAttempts() + 1
		if attempts >= e.p.MaxLaunchAttempts {
			e.failNode(node, fmt.Sprintf("launch failed %d times, last: %s", attempts, reason))
			e.mutNode(node).LaunchAttempts = attempts
			return e.change()
		}
		nn := e.mutNode(node)
		nn.LaunchAttempts = attempts
		nn.Reason = LaunchReasonPrefix + reason
		nn.NextAction = fmt.Sprintf("retry launch in %s (attempt %d of %d)", e.p.Backoff(attempts), attempts+1, e.p.MaxLaunchAttempts)
	case loomv1.Node_READY, loomv1.Node_DOWN, loomv1.Node_DRAINING:
		if n.GetReason() == LaunchReasonPrefix+reason {
			return Change{}
		}
		nn := e.mutNode(node)
		nn.Reason = LaunchReasonPrefix + reason
		nn.NextAction = "retry launch with backoff"
	default:
		return Change{}
	}
	return e.change()
}

// Launched clears a launch problem once the node's agent runs.
func (s *State) Launched(p Params, node string, now time.Time) Change {
	e := s.edit(p, now)
	n, _ := e.live(node)
	if n == nil || !strings.HasPrefix(n.GetReason(), LaunchReasonPrefix) {
		return Change{}
	}
	nn := e.mutNode(node)
	nn.Reason, nn.NextAction = "", ""
	if nn.GetState() == loomv1.Node_PROVISIONING {
		nn.NextAction = fmt.Sprintf("wait for its agent to register (boot timeout %s)", e.p.BootTimeout)
	}
	return e.change()
}

// ProviderEvent applies what the provider reported on its own: a preempted
// or unbootable node is FAILED and replaced (when its pool needs it).
func (s *State) ProviderEvent(p Params, ev provider.Event, now time.Time) Change {
	e := s.edit(p, now)
	n, _ := e.live(ev.Node)
	if n == nil || n.GetRole() == clusterspec.RoleLogin {
		return Change{}
	}
	switch n.GetState() {
	case loomv1.Node_FAILED, loomv1.Node_DELETING:
		return Change{}
	}
	var reason string
	switch ev.Kind {
	case provider.Preempted:
		reason = ReasonPreempted
	case provider.BootFailed:
		reason = "boot failed"
	default:
		return Change{}
	}
	switch {
	case strings.HasPrefix(ev.Reason, reason):
		reason = ev.Reason
	case ev.Reason != "":
		reason += ": " + ev.Reason
	}
	e.failNode(ev.Node, reason)
	return e.change()
}

// NodeDrained decides the scheduler's word that a DRAINING node holds no
// job: the node goes DELETING, and the reconciler stops and removes it.
func (s *State) NodeDrained(p Params, ev *eventsv1.NodeDrained, now time.Time) Change {
	e := s.edit(p, now)
	n, _ := e.live(ev.GetNode())
	if n == nil || n.GetState() != loomv1.Node_DRAINING {
		return Change{}
	}
	nn := e.mutNode(n.GetName())
	nn.State, nn.Reason, nn.NextAction = loomv1.Node_DELETING, "drained", "stop and remove"
	return e.change()
}

// RemoveNode removes a node's record once the reconciler stopped it and
// removed its directories: a DELETING node of a cluster that is not being
// deleted always; a FAILED node once its pool is back at target, or when it
// is not among the KeepFailed newest failures of its pool. The capacity the
// node held is free with the same write.
func (s *State) RemoveNode(p Params, node string, now time.Time) Change {
	e := s.edit(p, now)
	n, c := e.live(node)
	if n == nil {
		return Change{}
	}
	switch n.GetState() {
	case loomv1.Node_DELETING:
	case loomv1.Node_FAILED:
		if !e.failedRemovable(c, n) {
			return Change{}
		}
	default:
		return Change{}
	}
	e.delNode(node)
	return e.change()
}

// failedRemovable reports whether a FAILED node's record may go.
func (e *edit) failedRemovable(c *Cluster, n *loomv1.Node) bool {
	var target int32 = -1
	for _, np := range c.Cluster.GetCompute().GetNodePools() {
		if np.GetId() == n.GetNodePool() {
			target = np.GetNodeCount()
		}
	}
	var ready int32
	var failures []*loomv1.Node
	for _, o := range e.poolNodes(c.Name(), n.GetNodePool()) {
		switch o.GetState() {
		case loomv1.Node_READY:
			ready++
		case loomv1.Node_FAILED:
			failures = append(failures, o)
		}
	}
	if target < 0 || ready >= target {
		return true
	}
	byNumberDesc(failures)
	for i, o := range failures {
		if o.GetName() == n.GetName() {
			return i >= e.p.KeepFailed
		}
	}
	return true
}

// failNode makes a node FAILED with a reason and, when its pool is below
// target without it, launches a replacement (the next number), so that no
// node is ever FAILED without a next step.
func (e *edit) failNode(node, reason string) {
	n := e.mutNode(node)
	n.State, n.Reason, n.DrainDeadline = loomv1.Node_FAILED, reason, nil
	n.NextAction = "remove (its pool is at target)"
	c := e.cluster(n.GetCluster())
	var np *loomv1.NodePool
	for _, p := range c.Cluster.GetCompute().GetNodePools() {
		if p.GetId() == n.GetNodePool() {
			np = p
		}
	}
	if np == nil {
		return
	}
	var live int32
	for _, o := range e.poolNodes(c.Name(), np.GetId()) {
		if isLive(o) {
			live++
		}
	}
	if live >= np.GetNodeCount() {
		return
	}
	rec := e.mutCluster(c.Name())
	repl := e.addComputeNodes(rec, np, 1)
	n.NextAction = "replaced by " + repl[0].GetHostname() + "; removed once the pool is back at target"
}

// Tick decides what time alone brings: repairs past their deadline fail
// (the node FAILED and replaced, RemediationFinished not ok); compute nodes that did not register
// within BootTimeout of their creation are FAILED and replaced; DRAINING
// nodes whose drain deadline passed DrainTimeout ago without NodeDrained
// are removed anyway; creates and updates past their deadline complete
// (see refresh).
func (s *State) Tick(p Params, now time.Time) Change {
	e := s.edit(p, now)
	e.tickRepairs()
	names := make([]string, 0, len(s.Clusters))
	for name := range s.Clusters {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		c := s.Clusters[name]
		if c.State() == loomv1.Cluster_DELETING {
			continue
		}
		if !c.Deadline.IsZero() && !now.Before(c.Deadline) {
			e.touched[name] = true
		}
		for _, n := range s.ClusterNodes(name) {
			n = e.node(n.GetName()) // as a failed repair left it
			switch n.GetState() {
			case loomv1.Node_PROVISIONING:
				if n.GetRole() != clusterspec.RoleLogin && n.GetCreateTime() != nil && !now.Before(n.GetCreateTime().AsTime().Add(e.p.BootTimeout)) &&
					e.repairFor(n.GetName()) == nil { // a replacement being booted: its repair's deadline rules
					e.failNode(n.GetName(), fmt.Sprintf("did not register within %s of its creation (boot timeout)", e.p.BootTimeout))
				}
			case loomv1.Node_DRAINING:
				if dl := n.GetDrainDeadline(); dl != nil && !now.Before(dl.AsTime().Add(e.p.DrainTimeout)) {
					nn := e.mutNode(n.GetName())
					nn.State, nn.NextAction = loomv1.Node_DELETING, "stop and remove"
					nn.Reason = fmt.Sprintf("no NodeDrained within %s of its drain deadline; removed anyway", e.p.DrainTimeout)
				}
			}
		}
	}
	return e.change()
}
