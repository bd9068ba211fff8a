package domain

import (
	"fmt"
	"sort"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/loom-ml/loom/libs/clusterspec"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/provisioner/internal/provider"
)

// RepairPhase is how far a repair got. Each phase is written before the
// work of the next one starts, so a provisioner that crashes anywhere
// resumes the repair where the durable record says (the provider's steps
// are idempotent per boot id).
type RepairPhase string

// Repair phases.
const (
	// RepairRequested: accepted, the node shows REBOOTING, REIMAGING or
	// REPLACING; the provider has yet to act (a replace: to retire the node).
	RepairRequested RepairPhase = "requested"
	// RepairSwapped: a replace whose old node is gone and whose
	// replacement (Target) is on record, not booted yet.
	RepairSwapped RepairPhase = "swapped"
	// RepairBooting: the provider booted Target as BootID; the repair ends
	// when its agent registers, or fails at Deadline.
	RepairBooting RepairPhase = "booting"
)

// Repair is a repair in progress: a RemediateNode accepted and not yet
// answered with RemediationFinished. At most one per node.
type Repair struct {
	// ID is the remediation_id; RemediationFinished echoes it.
	ID string
	// Node is the node health asked about (the key), Cluster its cluster.
	Node, Cluster string
	// Action is ACTION_REBOOT, ACTION_RESET_GPU, ACTION_REIMAGE or ACTION_REPLACE.
	Action loomv1.RemediationAction
	// Reason is why health asked.
	Reason string
	// BootID is the host boot id the repaired (or replacement) node boots
	// with, chosen when the repair was accepted.
	BootID string
	Phase  RepairPhase
	// Target is the node being brought up: Node, or after a replace's swap
	// its replacement (also in Replacement).
	Target, Replacement string
	// Started is when it was accepted; Deadline when it fails unless its
	// agent registered (the boot timeout, plus what the provider said the
	// boot takes, from the last phase change).
	Started, Deadline time.Time
	// PID is the agent the provider started (0 where there is none).
	PID int32
}

// RepairKind returns the provider's repair for a remediation action and
// the node state it shows, false for actions that are no repair of the
// provisioner's. A GPU reset is a reboot: a node cannot reset its GPUs
// without ending what uses them.
func RepairKind(a loomv1.RemediationAction) (provider.RepairKind, loomv1.Node_State, bool) {
	switch a {
	case loomv1.RemediationAction_ACTION_REBOOT, loomv1.RemediationAction_ACTION_RESET_GPU:
		return provider.Reboot, loomv1.Node_REBOOTING, true
	case loomv1.RemediationAction_ACTION_REIMAGE:
		return provider.Reimage, loomv1.Node_REIMAGING, true
	case loomv1.RemediationAction_ACTION_REPLACE:
		return provider.Replace, loomv1.Node_REPLACING, true
	}
	return 0, 0, false
}

// RepairOf returns the repair bringing up node target (the repaired node,
// or a replacement being booted), nil when none.
func (s *State) RepairOf(target string) *Repair {
	if k, ok := s.repairTargets[target]; ok {
		return s.Repairs[k]
	}
	return nil
}

// RemediateNode decides health's RemediateNode. A node that is READY or
// DOWN, of a cluster not being deleted, with no repair under way, goes
// REBOOTING (reboot, GPU reset), REIMAGING or REPLACING with the reason,
// and the repair is recorded (phase RepairRequested, new boot id bootID);
// the reconciler carries it out. Anything else is refused with
// RemediationFinished{ok: false} saying why. The same remediation_id
// again while it runs changes nothing.
func (s *State) RemediateNode(p Params, cmd *eventsv1.RemediateNode, bootID string, now time.Time) Change {
	e := s.edit(p, now)
	refuse := func(format string, args ...any) Change {
		return only(&eventsv1.RemediationFinished{Node: cmd.GetNode(), Cluster: cmd.GetCluster(), RemediationId: cmd.GetRemediationId(),
			Action: cmd.GetAction(), Message: "refused: " + fmt.Sprintf(format, args...)})
	}
	kind, state, ok := RepairKind(cmd.GetAction())
	if !ok {
		return refuse("%s is not a repair the provisioner carries out (reboot, GPU reset, reimage, replace)", cmd.GetAction())
	}
	n := s.Nodes[cmd.GetNode()]
	if n == nil {
		return refuse("node %s not found", cmd.GetNode())
	}
	if r := s.Repairs[n.GetName()]; r != nil {
		if r.ID != "" && r.ID == cmd.GetRemediationId() {
			return Change{} // the same repair, asked again: it is under way
		}
		return refuse("node %s is already being repaired (%s, remediation %s)", n.GetHostname(), repairName(r.Action), r.ID)
	}
	if r := s.RepairOf(n.GetName()); r != nil {
		return refuse("node %s is the replacement of %s, still booting (remediation %s)", n.GetHostname(), r.Node, r.ID)
	}
	c := s.Clusters[n.GetCluster()]
	if c == nil || c.State() == loomv1.Cluster_DELETING {
		return refuse("cluster %s is being deleted", n.GetCluster())
	}
	if n.GetRole() == clusterspec.RoleLogin {
		return refuse("node %s is a login node: a record only, nothing runs to repair", n.GetHostname())
	}
	switch n.GetState() {
	case loomv1.Node_READY, loomv1.Node_DOWN:
	default:
		why := ""
		if n.GetReason() != "" {
			why = " (" + n.GetReason() + ")"
		}
		return refuse("node %s is %s%s; only a READY or DOWN node is repaired", n.GetHostname(), n.GetState(), why)
	}
	nn := e.mutNode(n.GetName())
	nn.State, nn.DrainDeadline = state, nil
	nn.Reason = kind.String() + " asked by health"
	if cmd.GetReason() != "" {
		nn.Reason += ": " + cmd.GetReason()
	}
	nn.NextAction = map[provider.RepairKind]string{
		provider.Reboot:  "kill every process of the node, then boot it again",
		provider.Reimage: "kill every process of the node, wipe its disk, then boot it from scratch",
		provider.Replace: "retire the node and boot a new one in its place",
	}[kind]
	e.putRepair(&Repair{
		ID: cmd.GetRemediationId(), Node: n.GetName(), Cluster: n.GetCluster(), Action: cmd.GetAction(), Reason: cmd.GetReason(),
		BootID: bootID, Phase: RepairRequested, Target: n.GetName(), Started: now, Deadline: now.Add(e.p.BootTimeout),
	})
	return e.change()
}

// RepairSwap decides, for a replace in phase RepairRequested, that the
// provider retired the old node (its processes ended, its directory
// removed): its record goes (NodeRemoved, its capacity released with the
// same write) and a new node of its pool takes its place (the pool's next
// hostname, PROVISIONING, claiming the capacity the old one held), which
// the repair now boots (phase RepairSwapped). A pool no longer in the spec
// gets no replacement: the repair ends not ok.
func (s *State) RepairSwap(p Params, node string, now time.Time) Change {
	e := s.edit(p, now)
	r := s.Repairs[node]
	if r == nil || r.Phase != RepairRequested || r.Action != loomv1.RemediationAction_ACTION_REPLACE {
		return Change{}
	}
	n, c := e.live(node)
	if n == nil || n.GetState() != loomv1.Node_REPLACING {
		return Change{}
	}
	var np *loomv1.NodePool
	for _, q := range c.Cluster.GetCompute().GetNodePools() {
		if q.GetId() == n.GetNodePool() {
			np = q
		}
	}
	e.delNode(node)
	if np == nil {
		e.finishRepair(r, false, fmt.Sprintf("%s removed; its pool %s is no longer in the cluster's spec, so nothing replaces it",
			n.GetHostname(), n.GetNodePool()))
		return e.change()
	}
	repl := e.addComputeNodes(e.mutCluster(c.Name()), np, 1)[0]
	repl.NextAction = fmt.Sprintf("boot as the replacement of %s, then wait for its agent to register", n.GetHostname())
	next := *r
	next.Phase, next.Target, next.Replacement, next.Deadline = RepairSwapped, repl.GetName(), repl.GetName(), now.Add(e.p.BootTimeout)
	e.putRepair(&next)
	return e.change()
}

// RepairBooted decides that the provider booted the repair's target (the
// node, or its replacement) with agent pid, expecting it to take expect
// before it registers: phase RepairBooting, failing at now + expect +
// BootTimeout unless the agent registers first. Only a repair in phase
// RepairRequested (not a replace) or RepairSwapped moves.
func (s *State) RepairBooted(p Params, node string, pid int32, expect time.Duration, now time.Time) Change {
	e := s.edit(p, now)
	r := s.Repairs[node]
	if r == nil {
		return Change{}
	}
	switch {
	case r.Phase == RepairSwapped:
	case r.Phase == RepairRequested && r.Action != loomv1.RemediationAction_ACTION_REPLACE:
	default:
		return Change{}
	}
	t, _ := e.live(r.Target)
	if t == nil {
		return Change{}
	}
	next := *r
	next.Phase, next.PID, next.Deadline = RepairBooting, pid, now.Add(expect+e.p.BootTimeout)
	e.putRepair(&next)
	nn := e.mutNode(r.Target)
	nn.NextAction = fmt.Sprintf("wait for its agent to register (by %s)", next.Deadline.UTC().Format(time.RFC3339))
	return e.change()
}

// repairRegistered ends repair r when the registration ev is its target's
// agent of the new boot: one naming the repair's host boot id. Every
// provider that repairs (provider.Repairer) boots the node as that id, and
// every agent reports its host boot id, so a registration naming another,
// or none, is not the new boot's: the old image's agent, whose certificate
// stays valid for up to an hour after the boot, could otherwise mark a
// reboot or reimage finished (the node READY) before the new boot came up.
// Only a repair recorded without a boot id (before repairs had them) takes
// an agent that reports none at its word once the boot happened.
// The node is READY.
//
// An agent naming the repair's own host boot id ends it in any phase: the
// provider writes that id only when the boot happens, so nothing else can
// name it, and the new agent may register before the provisioner has
// recorded the boot (RepairBooted comes after the provider's call returns).
// Waiting for a registration that already came would keep the node in repair
// until its deadline.
func (e *edit) repairRegistered(r *Repair, ev *eventsv1.AgentRegistered) {
	switch hb := ev.GetHostBootId(); {
	case hb != r.BootID && (hb != "" || r.BootID != ""):
		return // another boot's agent, or one that cannot say it is the new boot's
	case hb == "" && r.Phase != RepairBooting:
		return // an agent that cannot say it is the new boot's, before the boot
	case r.Phase == RepairRequested && r.Action == loomv1.RemediationAction_ACTION_REPLACE:
		return // the old node, not yet swapped for its replacement
	}
	n, _ := e.live(r.Target)
	if n == nil {
		return
	}
	nn := e.mutNode(r.Target)
	nn.State, nn.Reason, nn.NextAction, nn.LaunchAttempts = loomv1.Node_READY, "", "", 0
	msg := fmt.Sprintf("%s: %s is back (host boot id %s)", pastTense(r.Action), nn.GetHostname(), r.BootID)
	if r.Replacement != "" {
		msg = fmt.Sprintf("replaced: %s is READY in place of %s", nn.GetHostname(), hostOf(r.Node))
	}
	e.finishRepair(r, true, msg)
}

// tickRepairs fails the repairs whose deadline passed: the target is
// FAILED (and replaced when its pool needs it) and the repair ends not ok.
func (e *edit) tickRepairs() {
	keys := make([]string, 0, len(e.s.Repairs))
	for k := range e.s.Repairs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		r := e.s.Repairs[k]
		if e.now.Before(r.Deadline) {
			continue
		}
		what := "its agent did not register"
		if r.Phase != RepairBooting {
			what = "the provider did not carry it out"
		}
		msg := fmt.Sprintf("%s of %s failed: %s by %s", repairName(r.Action), hostOf(r.Target), what, r.Deadline.UTC().Format(time.RFC3339))
		e.finishRepair(r, false, msg)
		if t, _ := e.live(r.Target); t != nil && t.GetState() != loomv1.Node_FAILED && t.GetState() != loomv1.Node_DELETING {
			e.failNode(r.Target, msg)
		}
	}
}

// checkRepairs ends, not ok, each repair whose target another decision
// took somewhere a repair does not go (deleted, DELETING with its cluster,
// DRAINING in a shrink, FAILED by a preemption): the repair must not act
// on it any more, and health must hear that it did not happen.
func (e *edit) checkRepairs() {
	for _, name := range e.ndOrder {
		r := e.repairFor(name)
		if r == nil {
			continue
		}
		n := e.nd[name]
		if n != nil && repairAllows(r, n.GetState()) {
			continue
		}
		what := "removed"
		if n != nil {
			what = n.GetState().String()
			if n.GetReason() != "" {
				what += " (" + n.GetReason() + ")"
			}
		}
		e.finishRepair(r, false, fmt.Sprintf("%s of %s abandoned: the node is %s", repairName(r.Action), hostOf(name), what))
	}
}

// repairAllows reports whether a repair's target may be in state.
func repairAllows(r *Repair, state loomv1.Node_State) bool {
	if r.Target != r.Node { // a replacement
		switch state {
		case loomv1.Node_PROVISIONING, loomv1.Node_READY, loomv1.Node_DOWN:
			return true
		}
		return false
	}
	_, want, _ := RepairKind(r.Action)
	return state == want
}

// repairFor returns the repair bringing up node target as this edit
// leaves it, nil when none.
func (e *edit) repairFor(target string) *Repair {
	for _, k := range e.rpOrder {
		if r := e.rp[k]; r != nil && r.Target == target {
			return r
		}
	}
	if k, ok := e.s.repairTargets[target]; ok {
		if _, changed := e.rp[k]; !changed {
			return e.s.Repairs[k]
		}
	}
	return nil
}

// putRepair makes r the working record of its node's repair.
func (e *edit) putRepair(r *Repair) {
	if _, ok := e.rp[r.Node]; !ok {
		e.rpOrder = append(e.rpOrder, r.Node)
	}
	e.rp[r.Node] = r
	// Health waits for the answer until this deadline (plus its margin),
	// not only its -repair-timeout: a simulated hour-long replacement or a
	// cloud's long reimage must not be given up on while it runs.
	e.after = append(e.after, &eventsv1.RemediationProgress{Node: r.Node, Cluster: r.Cluster, RemediationId: r.ID,
		Action: r.Action, DeadlineIn: durationpb.New(max(r.Deadline.Sub(e.now), 0))})
}

// finishRepair ends repair r and emits RemediationFinished (after the
// node changes, so a reader sees the node's new state first).
func (e *edit) finishRepair(r *Repair, ok bool, msg string) {
	if _, seen := e.rp[r.Node]; !seen {
		e.rpOrder = append(e.rpOrder, r.Node)
	}
	e.rp[r.Node] = nil
	e.after = append(e.after, &eventsv1.RemediationFinished{Node: r.Node, Cluster: r.Cluster, RemediationId: r.ID,
		Action: r.Action, Ok: ok, Message: msg, Replacement: r.Replacement})
}

func repairName(a loomv1.RemediationAction) string {
	if a == loomv1.RemediationAction_ACTION_RESET_GPU {
		return "GPU reset (a reboot)"
	}
	k, _, _ := RepairKind(a)
	return k.String()
}

func pastTense(a loomv1.RemediationAction) string {
	switch a {
	case loomv1.RemediationAction_ACTION_RESET_GPU:
		return "GPUs reset (rebooted)"
	case loomv1.RemediationAction_ACTION_REIMAGE:
		return "reimaged"
	}
	return "rebooted"
}

// hostOf is the last segment of a node name.
func hostOf(node string) string {
	for i := len(node) - 1; i >= 0; i-- {
		if node[i] == '/' {
			return node[i+1:]
		}
	}
	return node
}
