package remedy

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/health/internal/classify"
)

const cluster = "projects/p/clusters/c1"

func nodeName(c string, i int) string { return fmt.Sprintf("%s/nodes/gpu-%04d", c, i) }

// harness drives a machine on a fake clock.
type harness struct {
	t   *testing.T
	m   *Machine
	now time.Time
}

func newHarness(t *testing.T, cfg Config, nodes int) *harness {
	h := &harness{t: t, m: New(cfg), now: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
	for i := range nodes {
		h.do(Join{Node: nodeName(cluster, i), Cluster: cluster, Hostname: fmt.Sprintf("gpu-%04d", i)})
	}
	return h
}

func (h *harness) do(ev Event) *Result { return h.m.Apply(h.now, ev) }

func (h *harness) state(i int) loomv1.RemediationState { return h.m.Node(nodeName(cluster, i)).State }

func health(r *Result) []*eventsv1.NodeHealthChanged {
	var out []*eventsv1.NodeHealthChanged
	for _, e := range r.Emits {
		if v, ok := e.Payload.(*eventsv1.NodeHealthChanged); ok {
			out = append(out, v)
		}
	}
	return out
}

func remediations(r *Result) []*eventsv1.RemediateNode {
	var out []*eventsv1.RemediateNode
	for _, e := range r.Emits {
		if v, ok := e.Payload.(*eventsv1.RemediateNode); ok {
			out = append(out, v)
		}
	}
	return out
}

func checks(r *Result) []*eventsv1.RunHealthCheck {
	var out []*eventsv1.RunHealthCheck
	for _, e := range r.Emits {
		if v, ok := e.Payload.(*eventsv1.RunHealthCheck); ok {
			out = append(out, v)
		}
	}
	return out
}

func pass(node, runID string) Check {
	return Check{Node: node, Result: &loomv1.HealthCheckResult{Name: cluster + "/healthResults/" + runID, Node: node, Check: "gpu_diag",
		Outcome: loomv1.CheckOutcome_CHECK_PASS, Trigger: "confirm"}}
}

func fail(node, runID string) Check {
	c := pass(node, runID)
	c.Result.Outcome = loomv1.CheckOutcome_CHECK_FAIL
	c.Result.Summary = "memory pattern mismatch"
	return c
}

// TestXid79RepairedAndConfirmed walks the whole happy path of an urgent
// fault: out at once, rebooted without waiting for the drain, confirmed,
// back with repaired=true.
func TestXid79RepairedAndConfirmed(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{Seed: 1}, 10)
	n := nodeName(cluster, 3)
	r := h.do(Fault{Node: n, Verdict: classify.Xid(3, 79)})
	hs, rs := health(r), remediations(r)
	if len(hs) != 2 || hs[0].GetHealth() != eventsv1.NodeHealth_UNHEALTHY || hs[0].GetState() != loomv1.RemediationState_NODE_DRAINING ||
		hs[0].GetReason() != "Xid 79: GPU has fallen off the bus" || hs[0].GetXid() != 79 || hs[0].GetCheckpointFirst() ||
		hs[0].GetSetBy() != SetBy || hs[0].GetAction() != loomv1.RemediationAction_ACTION_REBOOT || !hs[0].GetTime().AsTime().Equal(h.now) {
		// The action is the repair to come: the scheduler ends the node's runs now.
		t.Fatalf("first verdict: %v", hs)
	}
	if hs[1].GetState() != loomv1.RemediationState_NODE_REBOOTING || len(rs) != 1 || rs[0].GetAction() != loomv1.RemediationAction_ACTION_REBOOT ||
		rs[0].GetNode() != n || rs[0].GetCluster() != cluster || rs[0].GetRemediationId() == "" {
		t.Fatalf("repair: %v %v", hs, rs)
	}
	id := rs[0].GetRemediationId()
	if r := h.do(Repaired{Node: n, ID: "stale", OK: true}); len(r.Emits) != 0 {
		t.Fatalf("a stale answer acted: %v", r.Emits)
	}
	h.now = h.now.Add(time.Minute)
	r = h.do(Repaired{Node: n, ID: id, OK: true})
	cs := checks(r)
	if len(cs) != 1 || cs[0].GetTrigger() != "confirm" || cs[0].GetCheck() != "gpu_diag" || cs[0].GetRunId() == "" {
		t.Fatalf("confirm check: %v", r.Emits)
	}
	r = h.do(pass(n, cs[0].GetRunId()))
	hs = health(r)
	if len(hs) != 1 || hs[0].GetHealth() != eventsv1.NodeHealth_HEALTHY || !hs[0].GetRepaired() || hs[0].GetState() != loomv1.RemediationState_NODE_HEALTHY {
		t.Fatalf("back: %v", hs)
	}
	// The reason says what was repaired, long after the verdict.
	if want := "repaired (reboot) and confirmed by gpu_diag, for: Xid 79: GPU has fallen off the bus"; hs[0].GetReason() != want {
		t.Fatalf("reason back %q, want %q", hs[0].GetReason(), want)
	}
	if s := h.state(3); s != loomv1.RemediationState_NODE_HEALTHY {
		t.Fatalf("state %v", s)
	}
}

// TestCheckpointFirstWaitsForDrain: a fault that is not urgent asks the job
// to checkpoint first; the repair starts when the scheduler says the node is
// drained, or after the drain timeout.
func TestCheckpointFirstWaitsForDrain(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{Seed: 1, DrainTimeout: 5 * time.Minute}, 10)
	n := nodeName(cluster, 0)
	v := classify.Verdict{Severity: classify.SeverityWarning, Action: loomv1.RemediationAction_ACTION_RESET_GPU, CheckpointFirst: true,
		Reason: "ECC: single-bit errors at 20/min on GPU 1", GPU: 1}
	r := h.do(Fault{Node: n, Verdict: v})
	if hs := health(r); len(hs) != 1 || !hs[0].GetCheckpointFirst() || hs[0].GetHealth() != eventsv1.NodeHealth_UNHEALTHY || len(remediations(r)) != 0 {
		t.Fatalf("checkpoint first: %v", r.Emits)
	}
	h.now = h.now.Add(time.Minute)
	if r := h.do(Tick{}); len(r.Emits) != 0 {
		t.Fatalf("repair before the drain: %v", r.Emits)
	}
	r = h.do(Drained{Node: n})
	if rs := remediations(r); len(rs) != 1 || rs[0].GetAction() != loomv1.RemediationAction_ACTION_REBOOT {
		t.Fatalf("GPU reset after the drain: %v", r.Emits)
	}
	// Another one, never drained: the timeout starts it.
	m := nodeName(cluster, 1)
	h.do(Fault{Node: m, Verdict: v})
	h.now = h.now.Add(5 * time.Minute)
	r = h.do(Tick{})
	if len(remediations(r)) != 0 || h.state(1) != loomv1.RemediationState_NODE_DRAINING {
		t.Fatalf("started beyond the blast radius (1 of 10): %v", r.Emits)
	}
}

// TestLadder: a repair that does not fix the node climbs reboot → reimage →
// replace → quarantine.
func TestLadder(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{Seed: 7}, 10)
	n := nodeName(cluster, 2)
	r := h.do(Fault{Node: n, Verdict: classify.Xid(0, 79)})
	id := remediations(r)[0].GetRemediationId()
	r = h.do(Repaired{Node: n, ID: id, OK: true})
	r = h.do(fail(n, checks(r)[0].GetRunId()))
	rs := remediations(r)
	if len(rs) != 1 || rs[0].GetAction() != loomv1.RemediationAction_ACTION_REIMAGE || h.state(2) != loomv1.RemediationState_NODE_REIMAGING {
		t.Fatalf("after a failed confirm: %v state %v", r.Emits, h.state(2))
	}
	r = h.do(Repaired{Node: n, ID: rs[0].GetRemediationId(), OK: false, Message: "disk wipe failed"})
	rs = remediations(r)
	if len(rs) != 1 || rs[0].GetAction() != loomv1.RemediationAction_ACTION_REPLACE || h.state(2) != loomv1.RemediationState_NODE_REPLACING {
		t.Fatalf("after a failed reimage: %v", r.Emits)
	}
	r = h.do(Repaired{Node: n, ID: rs[0].GetRemediationId(), OK: false, Message: "no capacity"})
	if h.state(2) != loomv1.RemediationState_NODE_QUARANTINED {
		t.Fatalf("after a failed replace: %v", h.state(2))
	}
	if hs := health(r); len(hs) != 1 || hs[0].GetState() != loomv1.RemediationState_NODE_QUARANTINED || hs[0].GetReason() != "replace failed: no capacity" {
		t.Fatalf("quarantine verdict: %v", r.Emits)
	}
	// A successful replacement frees the slot; the node leaves.
	m := nodeName(cluster, 4)
	h.do(Override{Node: m, Action: loomv1.RemediationAction_ACTION_REPLACE, User: "alice"})
	r = h.do(Drained{Node: m})
	rs = remediations(r)
	if len(rs) != 1 || rs[0].GetAction() != loomv1.RemediationAction_ACTION_REPLACE {
		t.Fatalf("replace now: %v", r.Emits)
	}
	r = h.do(Repaired{Node: m, ID: rs[0].GetRemediationId(), OK: true, Replacement: nodeName(cluster, 99)})
	if h.m.Node(m).Repairing {
		t.Fatal("a finished replacement holds its slot")
	}
	// The history says which node took its place; nothing is published
	// about a node that is leaving.
	if len(health(r)) != 0 || len(r.History) != 1 || r.History[0].GetNode() != m || !r.History[0].GetRepaired() ||
		r.History[0].GetReason() != "replaced by "+hostOf(nodeName(cluster, 99)) || r.History[0].GetAction() != loomv1.RemediationAction_ACTION_REPLACE {
		t.Fatalf("a finished replacement: published %v, history %v", r.Emits, r.History)
	}
	h.do(Leave{Node: m})
	if h.m.Node(m) != nil {
		t.Fatal("removed node kept")
	}
	// The provisioner removes the replaced node before it says the
	// replacement is done: the history says it all the same.
	m = nodeName(cluster, 5)
	h.do(Override{Node: m, Action: loomv1.RemediationAction_ACTION_REPLACE, User: "alice"})
	rs = remediations(h.do(Drained{Node: m}))
	h.do(Leave{Node: m})
	r = h.do(Repaired{Node: m, ID: rs[0].GetRemediationId(), OK: true, Replacement: nodeName(cluster, 98)})
	if len(health(r)) != 0 || len(r.History) != 1 || r.History[0].GetNode() != m || r.History[0].GetCluster() != cluster ||
		r.History[0].GetReason() != "replaced by "+hostOf(nodeName(cluster, 98)) || r.History[0].GetState() != loomv1.RemediationState_NODE_REPLACING {
		t.Fatalf("a replacement finished after its node left: published %v, history %v", r.Emits, r.History)
	}
	// Replaced in place (same name): confirmed as after any repair.
	k := nodeName(cluster, 6)
	h.do(Override{Node: k, Action: loomv1.RemediationAction_ACTION_REPLACE, User: "alice"})
	r = h.do(Drained{Node: k})
	r = h.do(Repaired{Node: k, ID: remediations(r)[0].GetRemediationId(), OK: true})
	if cs := checks(r); len(cs) != 1 || !h.m.Node(k).Confirming {
		t.Fatalf("in-place replacement not confirmed: %v", r.Emits)
	}
}

// TestEscalationTakesTheFailuresOwnAction: a node repaired for one fault
// that fails its confirmation with a fault asking for more (a GPU reset for
// Xid 64, then the telemetry's row remapping failure, which asks for a
// replacement) goes straight to what that fault asks for, not to the
// ladder's next rung (a reimage, which would not help and costs an hour).
func TestEscalationTakesTheFailuresOwnAction(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{Seed: 3}, 10)
	n := nodeName(cluster, 5)
	r := h.do(Fault{Node: n, Verdict: classify.Xid(0, 64)})
	rs := remediations(r)
	if len(rs) != 1 || rs[0].GetAction() != loomv1.RemediationAction_ACTION_REBOOT {
		t.Fatalf("Xid 64: %v", r.Emits)
	}
	h.now = h.now.Add(time.Minute)
	h.do(Repaired{Node: n, ID: rs[0].GetRemediationId(), OK: true})
	h.do(Registered{Node: n, HostBootID: "boot-2"})
	remap := classify.Verdict{Severity: classify.SeverityCritical, Action: loomv1.RemediationAction_ACTION_REPLACE, CheckpointFirst: true,
		Reason: "row remapping failure on GPU 0", GPU: 0}
	r = h.do(Fault{Node: n, Verdict: remap})
	if rs := remediations(r); len(rs) != 1 || rs[0].GetAction() != loomv1.RemediationAction_ACTION_REPLACE || h.state(5) != loomv1.RemediationState_NODE_REPLACING {
		t.Fatalf("remap failure after the reset: %v, state %v; want a replacement", r.Emits, h.state(5))
	}
	// A lighter failure still climbs one rung: reset → reimage.
	h = newHarness(t, Config{Seed: 3}, 10)
	m := nodeName(cluster, 6)
	r = h.do(Fault{Node: m, Verdict: classify.Xid(0, 48)})
	h.do(Repaired{Node: m, ID: remediations(r)[0].GetRemediationId(), OK: true})
	h.do(Registered{Node: m, HostBootID: "boot-2"})
	r = h.do(Fault{Node: m, Verdict: classify.Xid(0, 48)})
	if rs := remediations(r); len(rs) != 1 || rs[0].GetAction() != loomv1.RemediationAction_ACTION_REIMAGE {
		t.Fatalf("Xid 48 again after the reset: %v; want a reimage", r.Emits)
	}
}

// TestStaleConfirmIsIgnored: a confirming check's result answers only the
// confirm asked for last; an earlier one's (a repair cut short, its command
// run again by the new agent) passes nothing.
func TestStaleConfirmIsIgnored(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{Seed: 5}, 10)
	n := nodeName(cluster, 1)
	r := h.do(Fault{Node: n, Verdict: classify.Xid(0, 79)})
	r = h.do(Repaired{Node: n, ID: remediations(r)[0].GetRemediationId(), OK: true})
	current := checks(r)[0].GetRunId()
	if r := h.do(pass(n, "an-earlier-confirm")); len(health(r)) != 0 || h.state(1) == loomv1.RemediationState_NODE_HEALTHY {
		t.Fatalf("a stale confirm passed the node: %v, state %v", r.Emits, h.state(1))
	}
	if hs := health(h.do(pass(n, current))); len(hs) != 1 || hs[0].GetState() != loomv1.RemediationState_NODE_HEALTHY || !hs[0].GetRepaired() {
		t.Fatalf("the current confirm: %v", hs)
	}
}

// TestRecurrenceEscalatesAndLemon: a failure soon after a confirmed repair
// skips that repair; the third failure in the window quarantines.
func TestRecurrenceEscalatesAndLemon(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{Seed: 3}, 10)
	n := nodeName(cluster, 5)
	repair := func(want loomv1.RemediationAction) {
		t.Helper()
		r := h.do(Fault{Node: n, Verdict: classify.Xid(0, 79)})
		rs := remediations(r)
		if len(rs) != 1 || rs[0].GetAction() != want {
			t.Fatalf("want %v, got %v", want, r.Emits)
		}
		r = h.do(Repaired{Node: n, ID: rs[0].GetRemediationId(), OK: true})
		h.do(pass(n, checks(r)[0].GetRunId()))
		h.now = h.now.Add(time.Hour)
	}
	repair(loomv1.RemediationAction_ACTION_REBOOT)
	repair(loomv1.RemediationAction_ACTION_REIMAGE)
	r := h.do(Fault{Node: n, Verdict: classify.Xid(0, 79)})
	if h.state(5) != loomv1.RemediationState_NODE_QUARANTINED || len(remediations(r)) != 0 {
		t.Fatalf("third failure in 24h: state %v %v", h.state(5), r.Emits)
	}
	if hs := health(r); len(hs) != 1 || hs[0].GetReason() != "lemon: 3 failures within 24h0m0s: Xid 79: GPU has fallen off the bus" {
		t.Fatalf("lemon verdict: %v", hs)
	}
	// Released by an operator: back, repaired, history cleared.
	r = h.do(Override{Node: n, Action: loomv1.RemediationAction_ACTION_RESUME, User: "alice"})
	if hs := health(r); len(hs) != 1 || !hs[0].GetRepaired() || hs[0].GetSetBy() != "alice" || len(h.m.Node(n).Failures) != 0 {
		t.Fatalf("release: %v", r.Emits)
	}
	// Failures outside the window do not count.
	h.now = h.now.Add(48 * time.Hour)
	r = h.do(Fault{Node: n, Verdict: classify.Xid(0, 79)})
	if rs := remediations(r); len(rs) != 1 || rs[0].GetAction() != loomv1.RemediationAction_ACTION_REBOOT {
		t.Fatalf("a fresh failure starts the ladder again: %v", r.Emits)
	}
}

func TestBlastRadiusWaitsThenStarts(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{Seed: 1, MaxRemediating: 0.2}, 10) // 2 at once
	var ids []string
	for i := range 4 {
		r := h.do(Fault{Node: nodeName(cluster, i), Verdict: classify.Xid(0, 79)})
		for _, x := range remediations(r) {
			ids = append(ids, x.GetRemediationId())
		}
	}
	if len(ids) != 2 || h.state(2) != loomv1.RemediationState_NODE_DRAINING || h.state(3) != loomv1.RemediationState_NODE_DRAINING {
		t.Fatalf("%d repairs started, want 2 (states %v %v)", len(ids), h.state(2), h.state(3))
	}
	r := h.do(Repaired{Node: nodeName(cluster, 0), ID: ids[0], OK: true})
	if len(remediations(r)) != 0 {
		t.Fatal("slot freed before the confirmation")
	}
	r = h.do(pass(nodeName(cluster, 0), checks(r)[0].GetRunId()))
	if rs := remediations(r); len(rs) != 1 || rs[0].GetNode() != nodeName(cluster, 2) {
		t.Fatalf("the oldest waiting node starts when a slot frees: %v", r.Emits)
	}
	if Limit(0.1, 5) != 1 || Limit(0.1, 30) != 3 || Limit(0.5, 3) != 1 {
		t.Fatal("Limit")
	}
}

func TestDryRun(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{Seed: 1, Mode: ModeDryRun}, 10)
	n := nodeName(cluster, 1)
	r := h.do(Fault{Node: n, Verdict: classify.Xid(0, 79)})
	if len(remediations(r)) != 0 || len(health(r)) != 1 {
		t.Fatalf("dry run: %v", r.Emits)
	}
	rec := h.m.Node(n)
	if !rec.DryRun || rec.Next != loomv1.RemediationAction_ACTION_REBOOT || rec.State != loomv1.RemediationState_NODE_DRAINING {
		t.Fatalf("dry-run record: %+v", rec)
	}
	off := newHarness(t, Config{Mode: ModeOff}, 2)
	if r := off.do(Fault{Node: nodeName(cluster, 0), Verdict: classify.Xid(0, 79)}); len(r.Emits) != 0 {
		t.Fatalf("off acted: %v", r.Emits)
	}
}

// TestDrainDuringARepair: a drain asked during a repair holds the node once
// it is repaired: drained with the operator's reason and name (sinfo -R's),
// the repair's end in the history only (a HEALTHY published would put it
// back in service for a moment); resume puts it back.
func TestDrainDuringARepair(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{Seed: 1}, 10)
	k := nodeName(cluster, 2)
	r := h.do(Fault{Node: k, Verdict: classify.Xid(0, 79)})
	id := remediations(r)[0].GetRemediationId()
	h.do(Override{Node: k, Action: loomv1.RemediationAction_ACTION_DRAIN, User: "dave", Reason: "cable check"})
	r = h.do(Repaired{Node: k, ID: id, OK: true})
	r = h.do(pass(k, checks(r)[0].GetRunId()))
	hs := health(r)
	if len(hs) != 1 || hs[0].GetHealth() != eventsv1.NodeHealth_UNHEALTHY || hs[0].GetAction() != loomv1.RemediationAction_ACTION_DRAIN ||
		hs[0].GetReason() != "cable check" || hs[0].GetSetBy() != "dave" || hs[0].GetCheckpointFirst() {
		t.Fatalf("held after its repair, published: %v", hs)
	}
	if len(r.History) != 1 || !strings.HasPrefix(r.History[0].GetReason(), "repaired (reboot) and confirmed by gpu_diag, for: Xid 79") ||
		!strings.HasSuffix(r.History[0].GetReason(), "; held by dave's drain") {
		t.Fatalf("held after its repair, the history: %v", r.History)
	}
	if nk := h.m.Node(k); nk.State != loomv1.RemediationState_NODE_DRAINING || nk.Next != loomv1.RemediationAction_ACTION_DRAIN || nk.Repairing {
		t.Fatalf("held after its repair: %+v", nk)
	}
	h.now = h.now.Add(time.Hour)
	if r := h.do(Tick{}); len(remediations(r)) != 0 {
		t.Fatalf("a held node was repaired again: %v", r.Emits)
	}
	r = h.do(Override{Node: k, Action: loomv1.RemediationAction_ACTION_RESUME, User: "dave"})
	if hs := health(r); len(hs) != 1 || hs[0].GetHealth() != eventsv1.NodeHealth_HEALTHY || h.m.Node(k).HoldReason != "" {
		t.Fatalf("resume of a held node: %v", r.Emits)
	}
}

func TestOperatorOverrides(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{Seed: 1}, 10)
	n := nodeName(cluster, 0)
	r := h.do(Override{Node: n, Action: loomv1.RemediationAction_ACTION_DRAIN, User: "alice", Reason: "bad fan"})
	hs := health(r)
	// Slurm's drain: ACTION_DRAIN without checkpoint_first lets the node's jobs run to their end.
	if len(hs) != 1 || hs[0].GetHealth() != eventsv1.NodeHealth_UNHEALTHY || hs[0].GetCheckpointFirst() ||
		hs[0].GetAction() != loomv1.RemediationAction_ACTION_DRAIN || hs[0].GetSetBy() != "alice" ||
		hs[0].GetReason() != "bad fan" || hs[0].GetState() != loomv1.RemediationState_NODE_DRAINING {
		t.Fatalf("drain: %v", hs)
	}
	if r := h.do(Drained{Node: n}); len(remediations(r)) != 0 {
		t.Fatal("a held drain was repaired")
	}
	h.now = h.now.Add(time.Hour)
	if r := h.do(Tick{}); len(r.Emits) != 0 {
		t.Fatalf("a held drain timed out: %v", r.Emits)
	}
	r = h.do(Override{Node: n, Action: loomv1.RemediationAction_ACTION_RESUME, User: "alice"})
	if hs := health(r); len(hs) != 1 || hs[0].GetHealth() != eventsv1.NodeHealth_HEALTHY || hs[0].GetReason() != "resumed by alice" {
		t.Fatalf("resume: %v", r.Emits)
	}
	r = h.do(Override{Node: n, Action: loomv1.RemediationAction_ACTION_QUARANTINE, User: "bob"})
	if h.state(0) != loomv1.RemediationState_NODE_QUARANTINED || health(r)[0].GetSetBy() != "bob" {
		t.Fatalf("quarantine: %v", r.Emits)
	}
	// Reboot now on a node that is out: at once.
	r = h.do(Override{Node: n, Action: loomv1.RemediationAction_ACTION_REBOOT, User: "bob"})
	if rs := remediations(r); len(rs) != 1 || rs[0].GetAction() != loomv1.RemediationAction_ACTION_REBOOT {
		t.Fatalf("reboot now: %v", r.Emits)
	}
	// Report faulty: as a failed check, checkpoint first.
	m := nodeName(cluster, 1)
	r = h.do(Report{Node: m, User: "carol", Reason: "slow all-reduce"})
	if hs := health(r); len(hs) != 1 || !hs[0].GetCheckpointFirst() || hs[0].GetSetBy() != "carol" || hs[0].GetReason() != "slow all-reduce" {
		t.Fatalf("report: %v", r.Emits)
	}
}

// TestConfirmWithoutCheckRunner: a node that answers "checks not available"
// is confirmed by a new host boot id, whichever comes first.
func TestConfirmWithoutCheckRunner(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{Seed: 1}, 10)
	n := nodeName(cluster, 0)
	h.do(Registered{Node: n, HostBootID: "boot-1"})
	r := h.do(Fault{Node: n, Verdict: classify.Xid(0, 79)})
	id := remediations(r)[0].GetRemediationId()
	r = h.do(Repaired{Node: n, ID: id, OK: true})
	na := Check{Node: n, Result: &loomv1.HealthCheckResult{Name: cluster + "/healthResults/" + checks(r)[0].GetRunId(), Check: "gpu_diag",
		Outcome: loomv1.CheckOutcome_CHECK_ERROR, Summary: NotAvailable, Trigger: "confirm"}}
	if r := h.do(na); len(r.Emits) != 0 || h.state(0) != loomv1.RemediationState_NODE_REBOOTING {
		t.Fatalf("not available, same boot: %v %v", r.Emits, h.state(0))
	}
	if r := h.do(Registered{Node: n, HostBootID: "boot-1"}); len(r.Emits) != 0 {
		t.Fatal("an agent restart without a reboot confirmed")
	}
	r = h.do(Registered{Node: n, HostBootID: "boot-2"})
	if hs := health(r); len(hs) != 1 || !hs[0].GetRepaired() {
		t.Fatalf("new boot: %v", r.Emits)
	}
	// The other order: the node rebooted before the check answered.
	r = h.do(Fault{Node: n, Verdict: classify.Xid(0, 119)})
	h.do(Registered{Node: n, HostBootID: "boot-3"})
	// A stale report of the boot before the repair (delivered late, or
	// replayed by the node's earlier identity) does not take the new boot
	// back: a boot id never comes again.
	h.do(Registered{Node: n, HostBootID: "boot-2"})
	r = h.do(Repaired{Node: n, ID: remediations(r)[0].GetRemediationId(), OK: true})
	na.Result.Name = cluster + "/healthResults/" + checks(r)[0].GetRunId()
	if hs := health(h.do(na)); len(hs) != 1 || !hs[0].GetRepaired() {
		t.Fatal("not available after the new boot did not confirm")
	}
}

// TestCheckErrorsMakeSuspect: one CHECK_ERROR only asks again; a second in a
// row is a failure; a pass clears it.
func TestCheckErrorsMakeSuspect(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{Seed: 1}, 10)
	n := nodeName(cluster, 0)
	errored := Check{Node: n, Result: &loomv1.HealthCheckResult{Check: "allreduce", Outcome: loomv1.CheckOutcome_CHECK_ERROR, Summary: "killed after 5m0s", Trigger: "scan"}}
	r := h.do(errored)
	cs := checks(r)
	if h.state(0) != loomv1.RemediationState_NODE_SUSPECT || len(cs) != 1 || cs[0].GetCheck() != "allreduce" || cs[0].GetTrigger() != "confirm" {
		t.Fatalf("suspect: %v %v", h.state(0), r.Emits)
	}
	if hs := health(r); len(hs) != 1 || hs[0].GetHealth() != eventsv1.NodeHealth_HEALTHY || hs[0].GetState() != loomv1.RemediationState_NODE_SUSPECT {
		t.Fatalf("a suspect node stays in service: %v", hs)
	}
	h.do(pass(n, cs[0].GetRunId()))
	if h.state(0) != loomv1.RemediationState_NODE_HEALTHY {
		t.Fatal("pass did not clear the suspicion")
	}
	h.do(errored)
	r = h.do(errored)
	if h.state(0) != loomv1.RemediationState_NODE_DRAINING || len(health(r)) != 1 {
		t.Fatalf("two errors in a row: %v", h.state(0))
	}
	// "Not available" counts neither way.
	m := nodeName(cluster, 1)
	na := Check{Node: m, Result: &loomv1.HealthCheckResult{Check: "gpu_diag", Outcome: loomv1.CheckOutcome_CHECK_ERROR, Summary: NotAvailable}}
	h.do(na)
	h.do(na)
	if h.state(1) != loomv1.RemediationState_NODE_HEALTHY {
		t.Fatalf("a node without checks was taken out: %v", h.state(1))
	}
}

// TestSuspectWithoutAnAnswerGoesBack: a SUSPECT node whose confirming check
// never answers within the confirm timeout, or answers that no checks are
// available, returns to HEALTHY (docs/health.md, Node states): a suspicion
// only the check's own failure raised does not keep a node out.
func TestSuspectWithoutAnAnswerGoesBack(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{Seed: 1, ConfirmTimeout: 10 * time.Minute}, 2)
	errored := func(node string) Check {
		return Check{Node: node, Result: &loomv1.HealthCheckResult{Check: "gpu_diag", Outcome: loomv1.CheckOutcome_CHECK_ERROR, Summary: "killed after 1m0s", Trigger: "scan"}}
	}
	h.do(errored(nodeName(cluster, 0)))
	h.do(errored(nodeName(cluster, 1)))
	if h.state(0) != loomv1.RemediationState_NODE_SUSPECT || h.state(1) != loomv1.RemediationState_NODE_SUSPECT {
		t.Fatalf("one error: %v %v, want both SUSPECT", h.state(0), h.state(1))
	}
	h.now = h.now.Add(10*time.Minute - time.Second)
	h.do(Tick{})
	if h.state(0) != loomv1.RemediationState_NODE_SUSPECT {
		t.Fatalf("before the confirm timeout: %v, want SUSPECT", h.state(0))
	}
	h.do(Check{Node: nodeName(cluster, 1), Result: &loomv1.HealthCheckResult{Check: "gpu_diag", Outcome: loomv1.CheckOutcome_CHECK_ERROR, Summary: NotAvailable, Trigger: "confirm"}})
	if got := h.m.Node(nodeName(cluster, 1)); got.State != loomv1.RemediationState_NODE_HEALTHY || !strings.Contains(got.Reason, "no checks available") {
		t.Fatalf("confirm answered %q: %v %q, want HEALTHY", NotAvailable, got.State, got.Reason)
	}
	h.now = h.now.Add(time.Second)
	r := h.do(Tick{})
	if got := h.m.Node(nodeName(cluster, 0)); got.State != loomv1.RemediationState_NODE_HEALTHY || !strings.Contains(got.Reason, "no confirming check came back") {
		t.Fatalf("at the confirm timeout: %v %q, want HEALTHY", got.State, got.Reason)
	}
	if hs := health(r); len(hs) != 1 || hs[0].GetState() != loomv1.RemediationState_NODE_HEALTHY {
		t.Fatalf("the return is not announced: %v", hs)
	}
}

func TestRestartJobKeepsNode(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{Seed: 1}, 2)
	r := h.do(Fault{Node: nodeName(cluster, 0), Verdict: classify.Xid(1, 13)})
	hs := health(r)
	if len(hs) != 1 || hs[0].GetHealth() != eventsv1.NodeHealth_HEALTHY || hs[0].GetAction() != loomv1.RemediationAction_ACTION_RESTART_JOB ||
		hs[0].GetXid() != 13 || len(remediations(r)) != 0 || h.state(0) != loomv1.RemediationState_NODE_HEALTHY {
		t.Fatalf("Xid 13: %v", r.Emits)
	}
	if r := h.do(Fault{Node: nodeName(cluster, 0), Verdict: classify.Xid(1, 63)}); len(r.Emits) != 0 {
		t.Fatalf("ignored Xid acted: %v", r.Emits)
	}
}

// randomEvent draws an event for one of nodes, some of them answers to what
// the machine asked (so that repairs finish and slots turn over).
func randomEvent(rng *rand.Rand, m *Machine, nodes []string) Event {
	n := nodes[rng.IntN(len(nodes))]
	rec := m.Node(n)
	switch k := rng.IntN(13); {
	case rec == nil:
		c := cluster
		if rng.IntN(2) == 0 {
			c = "projects/p/clusters/c2"
		}
		return Join{Node: n, Cluster: c}
	case k == 0:
		return Fault{Node: n, Verdict: classify.Xid(0, []int32{79, 13, 48, 119, 151, 54, 63}[rng.IntN(7)])}
	case k == 1:
		return Fault{Node: n, Verdict: classify.Verdict{Action: loomv1.RemediationAction_ACTION_REBOOT, CheckpointFirst: true, Reason: "thermal"}}
	case k == 2:
		return Drained{Node: n}
	case k == 3 && rec.Repairing:
		return Repaired{Node: n, ID: rec.RepairID, OK: rng.IntN(4) != 0, Message: "x"}
	case k == 4 && rec.Confirming:
		if rng.IntN(3) == 0 {
			return fail(n, rec.ConfirmID)
		}
		return pass(n, rec.ConfirmID)
	case k == 5:
		return Override{Node: n, User: "op", Action: []loomv1.RemediationAction{loomv1.RemediationAction_ACTION_DRAIN,
			loomv1.RemediationAction_ACTION_RESUME, loomv1.RemediationAction_ACTION_QUARANTINE, loomv1.RemediationAction_ACTION_REBOOT,
			loomv1.RemediationAction_ACTION_REIMAGE, loomv1.RemediationAction_ACTION_REPLACE}[rng.IntN(6)]}
	case k == 6:
		return Registered{Node: n, HostBootID: fmt.Sprintf("b%d", rng.IntN(3))}
	case k == 7:
		return Check{Node: n, Result: &loomv1.HealthCheckResult{Check: "disk", Outcome: loomv1.CheckOutcome(1 + rng.IntN(5)), Trigger: "scan"}}
	case k == 8:
		return Report{Node: n, User: "op"}
	case k == 9 && rng.IntN(10) == 0:
		return Leave{Node: n}
	}
	return Tick{}
}

func repairing(m *Machine) map[string]int {
	out := map[string]int{}
	for _, n := range m.Nodes() {
		if n.Repairing {
			out[n.Cluster]++
		}
	}
	return out
}

func members(m *Machine) map[string]int {
	out := map[string]int{}
	for _, n := range m.Nodes() {
		out[n.Cluster]++
	}
	return out
}

// TestPropertyBlastRadius: random event sequences never start a repair that
// takes a cluster past its limit.
func TestPropertyBlastRadius(t *testing.T) {
	t.Parallel()
	for seed := range uint64(40) {
		rng := rand.New(rand.NewPCG(seed, 99))
		share := []float64{0.1, 0.2, 0.34, 0.5}[seed%4]
		m := New(Config{Seed: seed, MaxRemediating: share, DrainTimeout: time.Minute, ConfirmTimeout: 2 * time.Minute, RepairTimeout: 3 * time.Minute})
		var nodes []string
		for i := range 12 {
			nodes = append(nodes, nodeName(cluster, i))
		}
		now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
		started := 0
		for step := range 600 {
			now = now.Add(time.Duration(rng.IntN(40)) * time.Second)
			before := repairing(m)
			r := m.Apply(now, randomEvent(rng, m, nodes))
			started += len(remediations(r))
			after, mem := repairing(m), members(m)
			for c, used := range after {
				if used > before[c] && used > Limit(share, mem[c]) {
					t.Fatalf("seed %d step %d: cluster %s has %d in repair, limit %d of %d", seed, step, c, used, Limit(share, mem[c]), mem[c])
				}
			}
			for _, e := range r.Emits {
				if rn, ok := e.Payload.(*eventsv1.RemediateNode); ok {
					if rec := m.Node(rn.GetNode()); rec == nil || !rec.Repairing || rec.RepairID != rn.GetRemediationId() {
						t.Fatalf("seed %d step %d: RemediateNode for a node not repairing: %v", seed, step, rec)
					}
				}
			}
		}
		if started == 0 {
			t.Fatalf("seed %d: no repair ever started: the property says nothing", seed)
		}
	}
}

func sameEmits(t *testing.T, what string, a, b *Result) {
	t.Helper()
	if len(a.Emits) != len(b.Emits) {
		t.Fatalf("%s: %d emits vs %d", what, len(a.Emits), len(b.Emits))
	}
	for i := range a.Emits {
		if a.Emits[i].Key != b.Emits[i].Key || !proto.Equal(a.Emits[i].Payload, b.Emits[i].Payload) {
			t.Fatalf("%s: emit %d differs: %v vs %v", what, i, a.Emits[i].Payload, b.Emits[i].Payload)
		}
	}
}

func snapJSON(t *testing.T, m *Machine) string {
	t.Helper()
	b, err := json.Marshal(m.Snapshot())
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestPropertySnapshotRestoreAndDeterminism: a machine restored from a
// snapshot (through JSON, as stored) behaves exactly as the original from
// there on; two machines with one seed and one history are identical; and
// a step does not change the machine until it is committed.
func TestPropertySnapshotRestoreAndDeterminism(t *testing.T) {
	t.Parallel()
	for seed := range uint64(20) {
		cfg := Config{Seed: seed, MaxRemediating: 0.25, DrainTimeout: time.Minute}
		rng := rand.New(rand.NewPCG(seed, 7))
		a, twin := New(cfg), New(cfg)
		var nodes []string
		for i := range 8 {
			nodes = append(nodes, nodeName(cluster, i))
		}
		now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
		var b *Machine
		for step := range 400 {
			now = now.Add(time.Duration(rng.IntN(30)) * time.Second)
			ev := randomEvent(rng, a, nodes)
			if step == 200 {
				var s Snapshot
				if err := json.Unmarshal([]byte(snapJSON(t, a)), &s); err != nil {
					t.Fatal(err)
				}
				var err error
				if b, err = Restore(cfg, s); err != nil {
					t.Fatal(err)
				}
				if snapJSON(t, a) != snapJSON(t, b) {
					t.Fatalf("seed %d: restored snapshot differs", seed)
				}
			}
			before := snapJSON(t, a)
			ra := a.Step(now, ev)
			if snapJSON(t, a) != before {
				t.Fatalf("seed %d step %d: Step changed the machine before Commit", seed, step)
			}
			a.Commit(ra)
			sameEmits(t, fmt.Sprintf("seed %d step %d twin", seed, step), ra, twin.Apply(now, ev))
			if b != nil {
				sameEmits(t, fmt.Sprintf("seed %d step %d restored", seed, step), ra, b.Apply(now, ev))
			}
		}
		if snapJSON(t, a) != snapJSON(t, b) || snapJSON(t, a) != snapJSON(t, twin) {
			t.Fatalf("seed %d: final states differ", seed)
		}
	}
	// Another seed draws other ids.
	x, y := New(Config{Seed: 1}), New(Config{Seed: 2})
	for _, m := range []*Machine{x, y} {
		m.Apply(time.Unix(0, 0), Join{Node: "n", Cluster: cluster})
		m.Apply(time.Unix(0, 0), Fault{Node: "n", Verdict: classify.Xid(0, 79)})
	}
	if x.Node("n").RepairID == y.Node("n").RepairID {
		t.Fatal("two seeds drew one id")
	}
}

// TestStaleFaultAfterRepairIgnored: a fault the old boot reported, consumed
// after the repair finished but before the node's agent registered again,
// does not escalate; one after the registration does.
func TestStaleFaultAfterRepairIgnored(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{Seed: 1}, 10)
	n := nodeName(cluster, 0)
	h.do(Registered{Node: n, HostBootID: "boot-1"})
	r := h.do(Fault{Node: n, Verdict: classify.Xid(0, 79)})
	h.do(Repaired{Node: n, ID: remediations(r)[0].GetRemediationId(), OK: true})
	if r := h.do(Fault{Node: n, Verdict: classify.Xid(0, 79)}); len(r.Emits) != 0 || !h.m.Node(n).Confirming {
		t.Fatalf("a stale fault escalated: %v", r.Emits)
	}
	h.do(Registered{Node: n, HostBootID: "boot-2"})
	if h.state(0) != loomv1.RemediationState_NODE_REBOOTING {
		t.Fatalf("new boot before the check answered: %v", h.state(0))
	}
	r = h.do(Fault{Node: n, Verdict: classify.Xid(0, 79)})
	if rs := remediations(r); len(rs) != 1 || rs[0].GetAction() != loomv1.RemediationAction_ACTION_REIMAGE {
		t.Fatalf("a fault of the new boot: %v", r.Emits)
	}
}

// TestPrologFailureDrainsWithSlurmReason: a check that failed in a job's
// prolog (or epilog) drains the node with the reason Slurm gives such a
// node ("Prolog error: ...", "Epilog error: ..."), naming the check.
func TestPrologFailureDrainsWithSlurmReason(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{Seed: 1}, 3)
	for i, tc := range []struct{ trigger, check, want string }{
		{classify.TriggerProlog, "gpu_diag", "Prolog error: check gpu_diag failed: memory pattern mismatch"},
		{classify.TriggerEpilog, "disk", "Epilog error: check disk failed: memory pattern mismatch"},
	} {
		n := nodeName(cluster, i)
		c := fail(n, fmt.Sprintf("%s-%d", tc.trigger, i))
		c.Result.Trigger, c.Result.Check = tc.trigger, tc.check
		hs := health(h.do(c))
		if len(hs) == 0 || hs[0].GetHealth() != eventsv1.NodeHealth_UNHEALTHY || hs[0].GetState() != loomv1.RemediationState_NODE_DRAINING ||
			hs[0].GetReason() != tc.want {
			t.Fatalf("%s failure: %v, want DRAINING with reason %q", tc.trigger, hs, tc.want)
		}
		if got := h.m.Node(n).Reason; got != tc.want {
			t.Errorf("node %s reason %q, want %q", n, got, tc.want)
		}
	}
}
