package domain

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/errs"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

func nodeN(i int) string { return fmt.Sprintf("%s/nodes/gpu-%04d", cluster, i) }

// cluster3 is a fake with three READY nodes, each heard from now.
func cluster3(t *testing.T) *fake {
	f := newFake(t)
	for i := range 3 {
		f.handle(&eventsv1.NodeChanged{Node: &loomv1.Node{Name: nodeN(i), Cluster: cluster, Hostname: fmt.Sprintf("gpu-%04d", i), State: loomv1.Node_READY}})
		f.beat(nodeN(i))
	}
	return f
}

func allEmits(c *Change) []any {
	var out []any
	for _, e := range c.AllEmits() {
		out = append(out, e.Payload)
	}
	return out
}

func healthOf(c *Change) []*eventsv1.NodeHealthChanged {
	var out []*eventsv1.NodeHealthChanged
	for _, e := range c.AllEmits() {
		if v, ok := e.Payload.(*eventsv1.NodeHealthChanged); ok {
			out = append(out, v)
		}
	}
	return out
}

func (f *fake) checkAll() *Change {
	c := f.s.Check(f.now)
	f.s.Commit(c)
	return c
}

// TestMassSilenceIsUnreachable: every node of a cluster silent at once is
// unreachable, not failed; they stay so while nothing proves the bus
// delivers, and are failed one timeout after it does.
func TestMassSilenceIsUnreachable(t *testing.T) {
	t.Parallel()
	f := cluster3(t)
	for range 3 {
		f.advance(timeout / 4)
		if v := healthOf(f.checkAll()); len(v) != 0 {
			t.Fatalf("declared inside the timeout: %v", v)
		}
	}
	f.advance(timeout / 4)
	c := f.checkAll()
	v := healthOf(c)
	if len(v) != 3 {
		t.Fatalf("want 3 unreachable verdicts, got %v", v)
	}
	for _, x := range v {
		if x.GetHealth() != eventsv1.NodeHealth_HEALTHY || !x.GetUnreachable() || x.GetState() != loomv1.RemediationState_NODE_UNREACHABLE ||
			x.GetSetBy() != "loom-health" || x.GetTime() == nil {
			t.Fatalf("unreachable verdict: %v", x)
		}
	}
	// Silence goes on, but nothing else arrives either: no verdict.
	for range 12 {
		f.advance(timeout / 4)
		if v := healthOf(f.checkAll()); len(v) != 0 {
			t.Fatalf("declared without the bus delivering: %v", v)
		}
	}
	// A service's record (another cluster's node changing) proves nothing
	// of the nodes' path to the bus; two other nodes heard recently do:
	// one more timeout, then failed.
	f.handle(&eventsv1.NodeChanged{Node: &loomv1.Node{Name: "projects/default/clusters/c2/nodes/x", Cluster: "projects/default/clusters/c2", State: loomv1.Node_PROVISIONING}})
	f.advance(timeout / 4)
	if v := healthOf(f.checkAll()); len(v) != 0 {
		t.Fatalf("declared on a service's record: %v", v)
	}
	for i, name := range []string{"projects/default/clusters/c2/nodes/y", "projects/default/clusters/c2/nodes/z"} {
		f.handle(&eventsv1.NodeChanged{Node: &loomv1.Node{Name: name, Cluster: "projects/default/clusters/c2", State: loomv1.Node_READY}})
		f.record(name, int64(i), int64(i+1), f.now, &eventsv1.Heartbeat{Node: name})
	}
	got := 0
	for i := range 4 {
		f.advance(timeout / 4)
		for _, x := range healthOf(f.checkAll()) {
			if x.GetCluster() != cluster {
				continue // c2's nodes, silent since
			}
			if i < 3 {
				t.Fatalf("failed before a full timeout of the bus delivering: %v", x)
			}
			if x.GetHealth() != eventsv1.NodeHealth_UNHEALTHY || x.GetUnreachable() || x.GetReason() != "no heartbeat for 15s" {
				t.Fatalf("confirmed verdict: %v", x)
			}
			got++
		}
	}
	if got != 3 {
		t.Fatalf("%d nodes confirmed failed, want 3", got)
	}
}

// TestStaggeredMassSilenceIsUnreachable: nodes cut off together fell
// silent at different points of their heartbeat cycles. The first to pass
// the timeout is not judged alone while the other is a moment behind it:
// both are unreachable (two of three), the third, heartbeating, is not.
func TestStaggeredMassSilenceIsUnreachable(t *testing.T) {
	t.Parallel()
	f := cluster3(t)
	f.advance(timeout / 4)
	f.beat(nodeN(1)) // node 1's last heartbeat is a quarter timeout after node 0's
	f.beat(nodeN(2))
	f.checkAll()
	for range 3 {
		f.advance(timeout / 4)
		f.beat(nodeN(2))
		if v := healthOf(f.checkAll()); len(v) != 0 && !(len(v) == 1 && v[0].GetNode() == nodeN(0)) {
			t.Fatalf("verdicts inside node 1's timeout: %v", v)
		}
	}
	// Node 0 passed the timeout at the last check: unreachable, not failed.
	if n := f.s.Node(nodeN(0)); !n.Unreachable || n.Unhealthy {
		t.Fatalf("node 0, silent with node 1 a quarter timeout behind: %+v, want unreachable", n)
	}
	f.advance(timeout / 4)
	f.beat(nodeN(2))
	f.checkAll()
	if n := f.s.Node(nodeN(1)); !n.Unreachable || n.Unhealthy {
		t.Fatalf("node 1: %+v, want unreachable", n)
	}
	if n := f.s.Node(nodeN(2)); n.Unreachable || n.Unhealthy {
		t.Fatalf("node 2 (heartbeating): %+v", n)
	}
}

// TestUnreachableHeardAgain: a node heard again is reachable, with no
// UNHEALTHY ever said.
func TestUnreachableHeardAgain(t *testing.T) {
	t.Parallel()
	f := cluster3(t)
	f.advance(timeout / 2)
	f.checkAll()
	f.advance(timeout / 2)
	if v := healthOf(f.checkAll()); len(v) != 3 {
		t.Fatalf("want unreachable, got %v", v)
	}
	v := healthOf(f.beat(nodeN(1)))
	if len(v) != 1 || v[0].GetHealth() != eventsv1.NodeHealth_HEALTHY || v[0].GetUnreachable() || v[0].GetReason() != ReasonResumed {
		t.Fatalf("reachable again: %v", v)
	}
	if n := f.s.Node(nodeN(1)); n.Unreachable || n.Unhealthy {
		t.Fatalf("record: %+v", n)
	}
}

// TestOneSilentOfThreeFails: an isolated silence is a failure at once.
func TestOneSilentOfThreeFails(t *testing.T) {
	t.Parallel()
	f := cluster3(t)
	for range 3 {
		f.advance(timeout / 4)
		f.beat(nodeN(0))
		f.beat(nodeN(1))
		f.checkAll()
	}
	f.advance(timeout / 4)
	v := healthOf(f.checkAll())
	if len(v) != 1 || v[0].GetNode() != nodeN(2) || v[0].GetHealth() != eventsv1.NodeHealth_UNHEALTHY || v[0].GetUnreachable() {
		t.Fatalf("want nodeN(2) UNHEALTHY, got %v", v)
	}
}

// TestHealthStallGivesGrace: a check loop that ran late by more than the
// timeout (health was stopped) declares nobody; the silence is counted again
// from then.
func TestHealthStallGivesGrace(t *testing.T) {
	t.Parallel()
	f := cluster3(t)
	f.checkAll()
	f.advance(170 * time.Second) // the whole machine stalled
	if v := healthOf(f.checkAll()); len(v) != 0 {
		t.Fatalf("declared after health's own stall: %v", v)
	}
	// Two nodes speak again; the third stays silent: it alone fails, a
	// full timeout after the stall ended.
	for range 3 {
		f.advance(timeout / 4)
		f.beat(nodeN(0))
		f.beat(nodeN(1))
		if v := healthOf(f.checkAll()); len(v) != 0 {
			t.Fatalf("declared inside the grace: %v", v)
		}
	}
	f.advance(timeout / 4)
	f.beat(nodeN(0))
	f.beat(nodeN(1))
	if v := healthOf(f.checkAll()); len(v) != 1 || v[0].GetNode() != nodeN(2) || v[0].GetHealth() != eventsv1.NodeHealth_UNHEALTHY {
		t.Fatalf("want nodeN(2) UNHEALTHY after the grace, got %v", v)
	}
}

func TestXidsDriveRemediation(t *testing.T) {
	t.Parallel()
	f := cluster3(t)
	c := f.handle(&eventsv1.XidObserved{Node: nodeN(0), Cluster: cluster, Gpu: 3, Xid: 79})
	em := allEmits(c)
	if len(em) != 3 {
		t.Fatalf("Xid 79: %v", em)
	}
	v := em[0].(*eventsv1.NodeHealthChanged)
	if v.GetHealth() != eventsv1.NodeHealth_UNHEALTHY || v.GetReason() != "Xid 79: GPU has fallen off the bus" || v.GetXid() != 79 {
		t.Fatalf("verdict: %v", v)
	}
	rn, ok := em[2].(*eventsv1.RemediateNode)
	if !ok || rn.GetAction() != loomv1.RemediationAction_ACTION_REBOOT {
		t.Fatalf("remediation: %v", em[2])
	}
	if !c.Durable() {
		t.Fatal("a remediation is not durable")
	}
	// The node goes silent while rebooting: no second UNHEALTHY; it comes
	// back: not put back in service by its heartbeat.
	f.advance(timeout)
	f.beat(nodeN(1))
	f.beat(nodeN(2))
	if v := healthOf(f.checkAll()); len(v) != 0 {
		t.Fatalf("silence of a node in repair: %v", v)
	}
	if v := healthOf(f.beat(nodeN(0))); len(v) != 0 {
		t.Fatalf("heartbeat put a node in repair back: %v", v)
	}
	// The provisioner finishes; the confirm check passes: HEALTHY repaired.
	c = f.handle(&eventsv1.RemediationFinished{Node: nodeN(0), Cluster: cluster, RemediationId: rn.GetRemediationId(), Ok: true,
		Action: loomv1.RemediationAction_ACTION_REBOOT})
	em = allEmits(c)
	chk, ok := em[0].(*eventsv1.RunHealthCheck)
	if len(em) != 1 || !ok || chk.GetTrigger() != "confirm" {
		t.Fatalf("confirm: %v", em)
	}
	c = f.handle(&eventsv1.HealthCheckCompleted{Result: &loomv1.HealthCheckResult{Name: cluster + "/healthResults/" + chk.GetRunId(),
		Node: nodeN(0), Check: "gpu_diag", Outcome: loomv1.CheckOutcome_CHECK_PASS, Trigger: "confirm"}})
	if v := healthOf(c); len(v) != 1 || !v[0].GetRepaired() || v[0].GetHealth() != eventsv1.NodeHealth_HEALTHY {
		t.Fatalf("repaired: %v", allEmits(c))
	}
	// An application Xid restarts the job and keeps the node.
	c = f.handle(&eventsv1.XidObserved{Node: nodeN(1), Cluster: cluster, Gpu: 0, Xid: 13})
	if v := healthOf(c); len(v) != 1 || v[0].GetAction() != loomv1.RemediationAction_ACTION_RESTART_JOB || v[0].GetHealth() != eventsv1.NodeHealth_HEALTHY {
		t.Fatalf("Xid 13: %v", allEmits(c))
	}
}

func TestTelemetryFault(t *testing.T) {
	t.Parallel()
	f := cluster3(t)
	ok := &eventsv1.GpuTelemetry{Node: nodeN(2), Cluster: cluster, Time: timestamppb.New(f.now), Gpus: []*loomv1.GpuSample{{Index: 0, TemperatureC: 50}}, Simulated: true}
	if c := f.handle(ok); len(c.AllEmits()) != 0 {
		t.Fatalf("healthy telemetry: %v", allEmits(c))
	}
	f.advance(time.Minute)
	bad := &eventsv1.GpuTelemetry{Node: nodeN(2), Cluster: cluster, Time: timestamppb.New(f.now), Gpus: []*loomv1.GpuSample{{Index: 0, EccDbeVolatile: 2}}}
	v := healthOf(f.handle(bad))
	if len(v) < 1 || v[0].GetHealth() != eventsv1.NodeHealth_UNHEALTHY || v[0].GetReason() != "ECC: 2 double-bit errors on GPU 0" {
		t.Fatalf("DBE: %v", v)
	}
	view := f.s.View(nodeN(2))
	if view.GetState() != loomv1.RemediationState_NODE_REBOOTING || len(view.GetGpus()) != 1 || view.GetNextAction() != loomv1.RemediationAction_ACTION_RESET_GPU ||
		view.GetHostname() != "gpu-0002" || view.GetFailures() != 1 {
		t.Fatalf("view: %v", view)
	}
}

// TestMissingGPUsTakeTheNodeOut: a node whose telemetry lists fewer GPUs
// than the node offers is taken out at once, as for a GPU fallen off the
// bus, with the count as its reason; an offered count no sample could be
// held to is read as unknown.
func TestMissingGPUsTakeTheNodeOut(t *testing.T) {
	t.Parallel()
	f := cluster3(t)
	one := []*loomv1.GpuSample{{Index: 0, TemperatureC: 40}}
	if c := f.handle(&eventsv1.GpuTelemetry{Node: nodeN(1), Cluster: cluster, Time: timestamppb.New(f.now), Gpus: one,
		OfferedGpus: MaxGPUSamples + 1}); len(c.AllEmits()) != 0 {
		t.Fatalf("an offered count past the bound: %v", allEmits(c))
	}
	v := healthOf(f.handle(&eventsv1.GpuTelemetry{Node: nodeN(2), Cluster: cluster, Time: timestamppb.New(f.now), Gpus: one, OfferedGpus: 8}))
	if len(v) < 1 || v[0].GetHealth() != eventsv1.NodeHealth_UNHEALTHY || v[0].GetReason() != "GPU count: the driver lists 1 of the node's 8 GPUs" {
		t.Fatalf("1 of 8 GPUs: %v", v)
	}
	if view := f.s.View(nodeN(2)); view.GetState() != loomv1.RemediationState_NODE_REBOOTING {
		t.Fatalf("view: %v", view)
	}
}

// TestPolicy: the policy health applies to a cluster, defaults filled in,
// with its repairs now: one node of three in repair, one at most.
func TestPolicy(t *testing.T) {
	t.Parallel()
	f := cluster3(t)
	f.handle(&eventsv1.XidObserved{Node: nodeN(1), Cluster: cluster, Gpu: 0, Xid: 79})
	p := f.s.Policy(cluster)
	if p.GetCluster() != cluster || p.GetRemediation() != "on" || p.GetNodes() != 3 || p.GetRemediatingNodes() != 1 ||
		p.GetMaxRemediatingNodes() != 1 || p.GetMaxRemediating() != 0.1 || p.GetLemonFailures() != 3 ||
		p.GetLemonWindow().AsDuration() != 24*time.Hour || p.GetThresholds().GetGpuTemperatureMaxC() != 90 ||
		p.GetThresholds().GetDiskFull() != 0.97 || p.GetRepairTimeout().AsDuration() != 30*time.Minute || p.GetMassSilence() != DefaultMassSilence {
		t.Fatalf("policy: %v", p)
	}
	if other := f.s.Policy("projects/p/clusters/none"); other.GetNodes() != 0 || other.GetRemediatingNodes() != 0 || other.GetMaxRemediatingNodes() != 1 {
		t.Fatalf("another cluster's policy: %v", other)
	}
}

// TestTelemetryIsBounded: a node's telemetry is its word, kept as its last
// sample and shown to operators: text with terminal escapes is cleaned and
// cut, GPUs and disks past the bounds are dropped, an infinite temperature
// reads 0.
func TestTelemetryIsBounded(t *testing.T) {
	t.Parallel()
	f := cluster3(t)
	gpus := make([]*loomv1.GpuSample, MaxGPUSamples+10)
	for i := range gpus {
		gpus[i] = &loomv1.GpuSample{Index: int32(i), Name: "NVIDIA H100\x1b]0;pwned\x07", Uuid: strings.Repeat("u", 4096),
			TemperatureC: math.Inf(1)}
	}
	disks := make([]*loomv1.DiskSample, MaxDiskSamples+1)
	for i := range disks {
		disks[i] = &loomv1.DiskSample{Mount: "/\x1b[2J" + strings.Repeat("m", 1000)}
	}
	f.handle(&eventsv1.GpuTelemetry{Node: nodeN(2), Cluster: cluster, Time: timestamppb.New(f.now), Gpus: gpus, Disks: disks, Simulated: true})
	view := f.s.View(nodeN(2))
	if len(view.GetGpus()) != MaxGPUSamples || len(view.GetDisks()) != MaxDiskSamples {
		t.Fatalf("kept %d GPUs and %d disks; want %d and %d", len(view.GetGpus()), len(view.GetDisks()), MaxGPUSamples, MaxDiskSamples)
	}
	g, d := view.GetGpus()[0], view.GetDisks()[0]
	if strings.ContainsAny(g.GetName()+d.GetMount(), "\x1b\x07") || len(g.GetUuid()) > MaxGPUTextBytes ||
		len(d.GetMount()) > MaxMountBytes || g.GetTemperatureC() != 0 {
		t.Fatalf("GPU %q %q %v, disk %q: want cleaned, cut and finite", g.GetName(), g.GetUuid(), g.GetTemperatureC(), d.GetMount())
	}
}

func TestOperatorCommands(t *testing.T) {
	t.Parallel()
	f := cluster3(t)
	f.handle(&eventsv1.AgentRegistered{Node: nodeN(0), Cluster: cluster, SimulatedGpus: true})
	f.handle(&eventsv1.AgentRegistered{Node: nodeN(1), Cluster: cluster, SimulatedGpus: false})
	fault := &loomv1.Fault{Kind: loomv1.FaultKind_FAULT_XID, Gpu: 3, Xid: 79}
	c := f.handle(&eventsv1.InjectFault{Cluster: cluster, Hostname: "gpu-0000", Fault: fault, User: "alice"})
	em := c.AllEmits()
	if len(em) != 1 || em[0].Key != nodeN(0) {
		t.Fatalf("inject: %v", em)
	}
	if in := em[0].Payload.(*eventsv1.InjectNodeFault); in.GetNode() != nodeN(0) || in.GetFault().GetXid() != 79 || in.GetUser() != "alice" {
		t.Fatalf("inject: %v", in)
	}
	var inv *errs.InvalidError
	if _, err := f.s.Handle(f.now, &eventsv1.InjectFault{Cluster: cluster, Hostname: "gpu-0001", Fault: fault}); !errors.As(err, &inv) {
		t.Fatalf("inject into real GPUs: %v", err)
	}
	if _, err := f.s.Handle(f.now, &eventsv1.UpdateNodeRemediation{Cluster: cluster, Hostname: "nope", Action: loomv1.RemediationAction_ACTION_DRAIN}); !errors.As(err, &inv) {
		t.Fatalf("unknown host: %v", err)
	}
	c = f.handle(&eventsv1.UpdateNodeRemediation{Cluster: cluster, Hostname: "gpu-0002", Action: loomv1.RemediationAction_ACTION_DRAIN, User: "bob"})
	if v := healthOf(c); len(v) != 1 || v[0].GetSetBy() != "bob" || v[0].GetState() != loomv1.RemediationState_NODE_DRAINING {
		t.Fatalf("drain: %v", allEmits(c))
	}
	c = f.handle(&eventsv1.ReportFaultyNodes{Cluster: cluster, Hostnames: []string{"gpu-[0000-0001]"}, Reason: "slow", User: "carol"})
	if v := healthOf(c); len(v) != 2 || v[0].GetReason() != "slow" || !v[0].GetCheckpointFirst() {
		t.Fatalf("report: %v", allEmits(c))
	}
	c = f.handle(&eventsv1.NodeDrained{Node: nodeN(0), Cluster: cluster})
	if em := allEmits(c); len(em) != 2 {
		t.Fatalf("drained node's repair: %v", em)
	}
}

// TestReadyAfterRepairGetsGrace: a node the provisioner reports READY again
// after rebooting (unwatched meanwhile) is not flagged for the silence of
// its reboot.
func TestReadyAfterRepairGetsGrace(t *testing.T) {
	t.Parallel()
	f := cluster3(t)
	f.handle(&eventsv1.NodeChanged{Node: &loomv1.Node{Name: nodeN(0), Cluster: cluster, Hostname: "gpu-0000", State: loomv1.Node_REBOOTING}})
	f.advance(3 * timeout)
	f.beat(nodeN(1))
	f.beat(nodeN(2))
	f.handle(&eventsv1.NodeChanged{Node: &loomv1.Node{Name: nodeN(0), Cluster: cluster, Hostname: "gpu-0000", State: loomv1.Node_READY}})
	f.s.lastCheck = f.now
	f.advance(timeout / 2)
	f.beat(nodeN(1))
	f.beat(nodeN(2))
	if v := healthOf(f.checkAll()); len(v) != 0 {
		t.Fatalf("flagged for its reboot's silence: %v", v)
	}
}

func remediationsOf(c *Change) []*eventsv1.RemediateNode {
	var out []*eventsv1.RemediateNode
	for _, e := range c.AllEmits() {
		if v, ok := e.Payload.(*eventsv1.RemediateNode); ok {
			out = append(out, v)
		}
	}
	return out
}

// TestSilentNodeIsRebootedAfterASecondTimeout: a node silent for one
// timeout is DOWN (its runs end) but not repaired — an agent restarting
// comes back by itself; silent for a second timeout, it is rebooted.
// A node that speaks again in between is healthy, with no repair.
func TestSilentNodeIsRebootedAfterASecondTimeout(t *testing.T) {
	t.Parallel()
	f := cluster3(t)
	var repairs []*eventsv1.RemediateNode
	var down, back, out bool
	for i := 0; i < 12; i++ { // three timeouts, in quarters
		f.advance(timeout / 4)
		f.beat(nodeN(0))
		if i < 4 || i > 8 {
			// Silent for a little over one timeout only.
			for _, v := range healthOf(f.beat(nodeN(1))) {
				back = back || v.GetHealth() == eventsv1.NodeHealth_HEALTHY
			}
		}
		c := f.checkAll()
		for _, v := range healthOf(c) {
			switch {
			case v.GetNode() == nodeN(2) && v.GetHealth() == eventsv1.NodeHealth_UNHEALTHY && v.GetState() == loomv1.RemediationState_NODE_DOWN:
				down = true
			case v.GetNode() == nodeN(1) && v.GetHealth() == eventsv1.NodeHealth_UNHEALTHY:
				out = true
			}
		}
		r := remediationsOf(c)
		if len(r) > 0 && i < 7 {
			t.Fatalf("repair asked after %v of silence: %v", time.Duration(i+1)*timeout/4, r)
		}
		repairs = append(repairs, r...)
	}
	if !down {
		t.Error("the silent node was never declared DOWN")
	}
	if !out || !back {
		t.Errorf("the briefly silent node: declared UNHEALTHY %v, HEALTHY again %v; want both", out, back)
	}
	if len(repairs) != 1 || repairs[0].GetNode() != nodeN(2) || repairs[0].GetAction() != loomv1.RemediationAction_ACTION_REBOOT {
		t.Fatalf("repairs %v, want one reboot of %s", repairs, nodeN(2))
	}
	if r := f.s.Remedy(nodeN(2)); r == nil || r.State != loomv1.RemediationState_NODE_REBOOTING {
		t.Fatalf("remediation of the silent node: %+v", r)
	}
	if r := f.s.Remedy(nodeN(1)); r != nil && !r.InService() {
		t.Fatalf("the node that spoke again is under remediation: %+v", r)
	}
}

// TestTelemetryLastXid: an Xid seen only in telemetry's last_xid (raised
// while the node's agent was down) takes the node out as the Xid event
// would; the previous sample outlives the agent's restart. An Xid already
// reported as an event and then seen in the next sample, or a last_xid
// that stays, starts no second remediation; an application Xid in a sample
// restarts nothing (its event does that).
func TestTelemetryLastXid(t *testing.T) {
	t.Parallel()
	f := cluster3(t)
	sample := func(node string, xid int32) *eventsv1.GpuTelemetry {
		return &eventsv1.GpuTelemetry{Node: node, Cluster: cluster, Time: timestamppb.New(f.now), Simulated: true,
			Gpus: []*loomv1.GpuSample{{Index: 0, TemperatureC: 50}, {Index: 1, TemperatureC: 50, LastXid: xid}}}
	}
	for i := range 3 {
		f.handle(&eventsv1.AgentRegistered{Node: nodeN(i), Cluster: cluster, SimulatedGpus: true, HostBootId: "boot-1"})
		if c := f.handle(sample(nodeN(i), 0)); len(c.AllEmits()) != 0 {
			t.Fatalf("healthy telemetry of %s: %v", nodeN(i), allEmits(c))
		}
	}
	f.advance(time.Minute)

	// Node 0: its agent crashed and came back (same boot); the Xid it
	// missed is in its first sample.
	f.handle(&eventsv1.AgentRegistered{Node: nodeN(0), Cluster: cluster, SimulatedGpus: true, HostBootId: "boot-1"})
	v := healthOf(f.handle(sample(nodeN(0), 79)))
	want := "Xid 79: GPU has fallen off the bus"
	// Drained and its repair started at once (an urgent Xid): two changes.
	if len(v) < 1 || v[0].GetHealth() != eventsv1.NodeHealth_UNHEALTHY || v[0].GetReason() != want || v[0].GetXid() != 79 {
		t.Fatalf("last_xid 79 after the agent's restart: %v", v)
	}
	if view := f.s.View(nodeN(0)); view.GetState() == loomv1.RemediationState_NODE_HEALTHY || view.GetFailures() != 1 || view.GetReason() != want {
		t.Fatalf("view after last_xid 79: %v", view)
	}
	f.advance(time.Minute)
	if c := f.handle(sample(nodeN(0), 79)); len(c.AllEmits()) != 0 {
		t.Fatalf("a last_xid that stays acted again: %v", allEmits(c))
	}

	// Node 1: the Xid arrives as an event first; the next sample carries
	// it too, and must not start a second remediation.
	v = healthOf(f.handle(&eventsv1.XidObserved{Node: nodeN(1), Cluster: cluster, Gpu: 1, Xid: 79}))
	if len(v) < 1 || v[0].GetHealth() != eventsv1.NodeHealth_UNHEALTHY || v[0].GetReason() != want {
		t.Fatalf("Xid 79 event: %v", v)
	}
	before := f.s.View(nodeN(1))
	if c := f.handle(sample(nodeN(1), 79)); len(c.AllEmits()) != 0 {
		t.Fatalf("the sample after the Xid event acted again: %v", allEmits(c))
	}
	if after := f.s.View(nodeN(1)); after.GetFailures() != 1 || after.GetState() != before.GetState() || after.GetNextAction() != before.GetNextAction() {
		t.Fatalf("the sample after the Xid event changed the remediation: %v, was %v", after, before)
	}

	// Node 2: an application Xid in a sample is the event path's to act on.
	if c := f.handle(sample(nodeN(2), 13)); len(c.AllEmits()) != 0 {
		t.Fatalf("last_xid 13 acted: %v", allEmits(c))
	}
	if view := f.s.View(nodeN(2)); view.GetState() != loomv1.RemediationState_NODE_HEALTHY || view.GetFailures() != 0 {
		t.Fatalf("view after last_xid 13: %v", view)
	}
}

// TestLastXidOutlivesHealthRestart: each GPU's last judged last_xid is part
// of the durable change (written once for a node's first sample, then only
// when it changes: a routine sample writes nothing), and a health restored
// from it with no sample in memory judges a last_xid that changed while it
// was down, and not one that stayed (an Xid a node was already failed or
// repaired for).
func TestLastXidOutlivesHealthRestart(t *testing.T) {
	t.Parallel()
	f := cluster3(t)
	sample := func(node string, xid int32) *eventsv1.GpuTelemetry {
		return &eventsv1.GpuTelemetry{Node: node, Cluster: cluster, Time: timestamppb.New(f.now), Simulated: true,
			Gpus: []*loomv1.GpuSample{{Index: 0, TemperatureC: 50}, {Index: 1, TemperatureC: 50, LastXid: xid}}}
	}
	// stored is what the store holds: every Change.Xids written.
	stored := map[string]map[int32]int32{}
	write := func(c *Change) {
		for n, m := range c.Xids {
			stored[n] = m
		}
	}
	// Node 1 already carries an Xid in its first sample (not judged:
	// nothing to compare with); the others are clean.
	first := []int32{0, 79, 0}
	for i, x := range first {
		c := f.handle(sample(nodeN(i), x))
		if len(c.AllEmits()) != 0 || !c.Durable() || c.Xids[nodeN(i)][1] != x {
			t.Fatalf("first sample of %s: emits %v, durable %v, xids %v", nodeN(i), allEmits(c), c.Durable(), c.Xids)
		}
		write(c)
	}
	f.advance(time.Minute)
	for i, x := range first {
		if c := f.handle(sample(nodeN(i), x)); c.Durable() || len(c.Xids) != 0 {
			t.Fatalf("an unchanged sample of %s is written: %v", nodeN(i), c.Xids)
		}
	}

	// Health restarts: members and the stored last_xid, no sample in memory.
	r := &fake{t: t, s: NewState(timeout), now: f.now.Add(time.Minute)}
	var nodes []*Node
	for _, n := range f.s.Nodes() {
		cp := *n
		nodes = append(nodes, &cp)
	}
	r.s.Load(r.now, nodes)
	if err := r.s.LoadRemedy(f.s.Machine().Snapshot()); err != nil {
		t.Fatal(err)
	}
	r.s.LoadXids(stored)

	// Node 0's GPU 1 raised Xid 79 while health was down.
	v := healthOf(r.handle(sample(nodeN(0), 79)))
	if len(v) < 1 || v[0].GetHealth() != eventsv1.NodeHealth_UNHEALTHY || v[0].GetReason() != "Xid 79: GPU has fallen off the bus" {
		t.Fatalf("a last_xid that changed while health was down: %v", v)
	}
	// Node 1's Xid is the one health saw before: nothing.
	if c := r.handle(sample(nodeN(1), 79)); len(c.AllEmits()) != 0 || len(c.Xids) != 0 {
		t.Fatalf("an unchanged last_xid after health's restart acted: %v, xids %v", allEmits(c), c.Xids)
	}
	if view := r.s.View(nodeN(1)); view.GetState() != loomv1.RemediationState_NODE_HEALTHY || view.GetFailures() != 0 {
		t.Fatalf("node 1 after health's restart: %v", view)
	}
	if c := r.handle(sample(nodeN(2), 0)); len(c.AllEmits()) != 0 {
		t.Fatalf("a clean node after health's restart: %v", allEmits(c))
	}
	// A removed node's record goes with it.
	c := r.handle(&eventsv1.NodeRemoved{Node: nodeN(2)})
	if n, ok := c.Nodes[nodeN(2)]; !ok || n != nil {
		t.Fatalf("removal: %v", c.Nodes)
	}
	r.s.LoadXids(map[string]map[int32]int32{nodeN(2): {0: 0}})
	if r.s.xids[nodeN(2)] != nil {
		t.Fatal("last_xid of a node that is not a member was loaded")
	}
}

// TestReportNamingAnUnknownNodeActsOnTheOthers: a report naming a node
// health has no record of (a login node, or one the provisioner listed
// first) acts on the nodes it knows and returns the others apart, for the
// app to log; before, the whole command was refused and dead-lettered,
// gpu-0000's report with it. A command naming none it knows is refused.
func TestReportNamingAnUnknownNodeActsOnTheOthers(t *testing.T) {
	t.Parallel()
	f := cluster3(t)
	f.handle(&eventsv1.NodeChanged{Node: &loomv1.Node{Name: cluster + "/nodes/c1-login-001", Cluster: cluster, Hostname: "c1-login-001",
		State: loomv1.Node_READY, Role: "login"}})
	c, err := f.s.Handle(f.now, &eventsv1.ReportFaultyNodes{Cluster: cluster, Hostnames: []string{"gpu-0000", "c1-login-001", "gpu-0099"}, Reason: "NCCL hangs", User: "root"})
	if err != nil {
		t.Fatalf("a report naming gpu-0000 and two nodes health does not know: %v", err)
	}
	if v := healthOf(c); len(v) != 1 || v[0].GetNode() != nodeN(0) || v[0].GetReason() != "NCCL hangs" {
		t.Errorf("health changes %v, want gpu-0000 reported", v)
	}
	if !slices.Equal(c.Unknown, []string{"c1-login-001", "gpu-0099"}) {
		t.Errorf("unknown %v, want the login node and gpu-0099", c.Unknown)
	}
	if _, err := f.s.Handle(f.now, &eventsv1.UpdateNodeRemediation{Cluster: cluster, Hostname: "c1-login-001",
		Action: loomv1.RemediationAction_ACTION_DRAIN, Reason: "x", User: "root"}); err == nil {
		t.Error("a drain of only a node health does not know was taken")
	}
}
