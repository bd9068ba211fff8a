package domain

import (
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/loom-ml/loom/libs/auth"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

func remediate(s *State, host string, action loomv1.RemediationAction, id, bootID string, at time.Time) Change {
	return apply(s, s.RemediateNode(p, &eventsv1.RemediateNode{Node: demo + "/nodes/" + host, Cluster: demo, Action: action,
		RemediationId: id, Reason: "Xid 79: GPU has fallen off the bus"}, bootID, at))
}

func registerBoot(s *State, host, bootID string, at time.Time) Change {
	return apply(s, s.AgentRegistered(p, &eventsv1.AgentRegistered{Node: demo + "/nodes/" + host, Cluster: demo, Hostname: host,
		HostBootId: bootID}, at))
}

// finished returns the change's only RemediationFinished.
func finished(t *testing.T, ch Change) *eventsv1.RemediationFinished {
	t.Helper()
	fs := eventsOf[*eventsv1.RemediationFinished](ch)
	if len(fs) != 1 {
		t.Fatalf("want one RemediationFinished, got %v", ch.Events)
	}
	return fs[0]
}

func TestRebootLifecycle(t *testing.T) {
	t.Parallel()
	for _, action := range []loomv1.RemediationAction{loomv1.RemediationAction_ACTION_REBOOT, loomv1.RemediationAction_ACTION_RESET_GPU} {
		t.Run(action.String(), func(t *testing.T) {
			t.Parallel()
			s := running(t)
			at := t0.Add(time.Hour)
			ch := remediate(s, "gpu-0001", action, "rem-1", "boot-1", at)
			n := node(s, "gpu-0001")
			if n.GetState() != loomv1.Node_REBOOTING || n.GetReason() != "reboot asked by health: Xid 79: GPU has fallen off the bus" ||
				len(eventsOf[*eventsv1.NodeChanged](ch)) != 1 || len(eventsOf[*eventsv1.RemediationFinished](ch)) != 0 {
				t.Fatalf("node %v, events %v", n, ch.Events)
			}
			r := s.Repairs[n.GetName()]
			if r == nil || r.Phase != RepairRequested || r.BootID != "boot-1" || r.Target != n.GetName() || s.RepairOf(n.GetName()) != r {
				t.Fatalf("repair = %+v", r)
			}
			if msg := cluster(s).GetStatus().GetMessage(); msg != "1 of 2 nodes ready; 1 being repaired" {
				t.Fatalf("cluster message %q", msg)
			}
			// Asked again with the same id: under way, nothing to do.
			if ch := s.RemediateNode(p, &eventsv1.RemediateNode{Node: n.GetName(), Action: action, RemediationId: "rem-1"}, "boot-2", at); !ch.Empty() {
				t.Fatalf("same remediation again = %+v", ch)
			}
			// The old agent's registration before the boot ends nothing.
			if ch := registerBoot(s, "gpu-0001", "", at); !ch.Empty() || node(s, "gpu-0001").GetState() != loomv1.Node_REBOOTING {
				t.Fatalf("registration before the boot = %+v", ch)
			}
			apply(s, s.RepairBooted(p, n.GetName(), 42, 0, at.Add(time.Second)))
			if r := s.Repairs[n.GetName()]; r.Phase != RepairBooting || r.PID != 42 || !r.Deadline.Equal(at.Add(time.Second+p.BootTimeout)) {
				t.Fatalf("booted repair = %+v", r)
			}
			// An agent of another boot does not end it.
			if ch := registerBoot(s, "gpu-0001", "boot-0", at); !ch.Empty() {
				t.Fatalf("registration of another boot = %+v", ch)
			}
			ch = registerBoot(s, "gpu-0001", "boot-1", at.Add(2*time.Second))
			f := finished(t, ch)
			if n := node(s, "gpu-0001"); n.GetState() != loomv1.Node_READY || n.GetReason() != "" || n.GetNextAction() != "" {
				t.Fatalf("node after the repair = %v", n)
			}
			if !f.GetOk() || f.GetRemediationId() != "rem-1" || f.GetAction() != action || f.GetNode() != n.GetName() ||
				!strings.Contains(f.GetMessage(), "gpu-0001 is back (host boot id boot-1)") || len(s.Repairs) != 0 ||
				len(ch.DelRepairs) != 1 || s.RepairOf(n.GetName()) != nil {
				t.Fatalf("finished = %v, repairs %v", f, s.Repairs)
			}
			// The node changes before the answer: a reader sees it READY first.
			if _, ok := ch.Events[len(ch.Events)-1].(*eventsv1.RemediationFinished); !ok {
				t.Fatalf("RemediationFinished is not last: %v", ch.Events)
			}
		})
	}
}

// The provider boots the node and only then is the boot recorded
// (RepairBooted): a fast agent registers in between. Found on an H200,
// where a rebooted node stayed REBOOTING with its agent heartbeating.
func TestRegistrationBeforeTheBootIsRecorded(t *testing.T) {
	t.Parallel()
	t.Run("reboot", func(t *testing.T) {
		t.Parallel()
		s := running(t)
		at := t0.Add(time.Hour)
		remediate(s, "gpu-0001", loomv1.RemediationAction_ACTION_REBOOT, "rem-1", "boot-1", at)
		name := node(s, "gpu-0001").GetName()
		// Neither an agent that names no boot nor one of another boot ends it.
		for _, hb := range []string{"", "boot-0"} {
			if ch := registerBoot(s, "gpu-0001", hb, at); !ch.Empty() || s.Repairs[name] == nil {
				t.Fatalf("registration %q before the boot = %+v", hb, ch)
			}
		}
		f := finished(t, registerBoot(s, "gpu-0001", "boot-1", at.Add(time.Second)))
		if !f.GetOk() || node(s, "gpu-0001").GetState() != loomv1.Node_READY || len(s.Repairs) != 0 {
			t.Fatalf("finished %v, node %v, repairs %v", f, node(s, "gpu-0001"), s.Repairs)
		}
		// The boot's record, arriving after, changes nothing.
		if ch := s.RepairBooted(p, name, 42, 0, at.Add(2*time.Second)); !ch.Empty() {
			t.Fatalf("booted after the registration = %+v", ch)
		}
	})
	t.Run("replace", func(t *testing.T) {
		t.Parallel()
		s := running(t)
		at := t0.Add(time.Hour)
		old := demo + "/nodes/gpu-0002"
		remediate(s, "gpu-0002", loomv1.RemediationAction_ACTION_REPLACE, "rem-r", "boot-r", at)
		// The old node's agent, before the swap, names its own boot.
		if ch := registerBoot(s, "gpu-0002", "boot-old", at); !ch.Empty() || node(s, "gpu-0002").GetState() != loomv1.Node_REPLACING {
			t.Fatalf("old agent's registration = %+v", ch)
		}
		apply(s, s.RepairSwap(p, old, at.Add(time.Second)))
		f := finished(t, registerBoot(s, "gpu-0003", "boot-r", at.Add(2*time.Second)))
		if !f.GetOk() || f.GetReplacement() != demo+"/nodes/gpu-0003" || node(s, "gpu-0003").GetState() != loomv1.Node_READY || len(s.Repairs) != 0 {
			t.Fatalf("finished %v, node %v", f, node(s, "gpu-0003"))
		}
		if ch := s.RepairBooted(p, old, 7, 0, at.Add(3*time.Second)); !ch.Empty() {
			t.Fatalf("booted after the registration = %+v", ch)
		}
	})
}

// A registration that names no host boot id never ends a repair that has
// one, not even once the boot is recorded: the old image's agent (its
// certificate good for up to an hour) would otherwise mark a reimage
// finished, the node READY, before the new boot registered.
func TestRegistrationWithoutTheBootIDEndsNoRepair(t *testing.T) {
	t.Parallel()
	for _, action := range []loomv1.RemediationAction{loomv1.RemediationAction_ACTION_REBOOT, loomv1.RemediationAction_ACTION_REIMAGE} {
		t.Run(action.String(), func(t *testing.T) {
			t.Parallel()
			s := running(t)
			at := t0.Add(time.Hour)
			remediate(s, "gpu-0001", action, "rem-1", "boot-1", at)
			name := node(s, "gpu-0001").GetName()
			state := node(s, "gpu-0001").GetState()
			apply(s, s.RepairBooted(p, name, 42, 0, at.Add(time.Second)))
			for _, hb := range []string{"", "boot-0"} {
				if ch := registerBoot(s, "gpu-0001", hb, at.Add(2*time.Second)); !ch.Empty() || s.Repairs[name] == nil ||
					node(s, "gpu-0001").GetState() != state {
					t.Fatalf("registration %q after the boot: events %d, repair %v, node %s", hb, len(ch.Events), s.Repairs[name] != nil, node(s, "gpu-0001").GetState())
				}
			}
			if f := finished(t, registerBoot(s, "gpu-0001", "boot-1", at.Add(3*time.Second))); !f.GetOk() || node(s, "gpu-0001").GetState() != loomv1.Node_READY {
				t.Fatalf("finished %v, node %v", f, node(s, "gpu-0001"))
			}
		})
	}
	// A repair recorded before repairs had boot ids takes an agent that
	// names none once the boot happened.
	t.Run("no boot id", func(t *testing.T) {
		t.Parallel()
		s := running(t)
		at := t0.Add(time.Hour)
		remediate(s, "gpu-0001", loomv1.RemediationAction_ACTION_REBOOT, "rem-1", "", at)
		name := node(s, "gpu-0001").GetName()
		if ch := registerBoot(s, "gpu-0001", "", at); !ch.Empty() {
			t.Fatalf("registration before the boot = %+v", ch)
		}
		apply(s, s.RepairBooted(p, name, 42, 0, at.Add(time.Second)))
		if f := finished(t, registerBoot(s, "gpu-0001", "", at.Add(2*time.Second))); !f.GetOk() {
			t.Fatalf("finished %v", f)
		}
	})
}

func TestRemediateNodeRefusals(t *testing.T) {
	t.Parallel()
	s := running(t)
	remediate(s, "gpu-0001", loomv1.RemediationAction_ACTION_REIMAGE, "rem-1", "b1", t0)
	if node(s, "gpu-0001").GetState() != loomv1.Node_REIMAGING {
		t.Fatalf("node = %v", node(s, "gpu-0001"))
	}
	prov := created(t)
	for _, c := range []struct {
		name   string
		s      *State
		host   string
		action loomv1.RemediationAction
		want   string
	}{
		{"not a repair", s, "gpu-0002", loomv1.RemediationAction_ACTION_DRAIN, "ACTION_DRAIN is not a repair the provisioner carries out"},
		{"unknown node", s, "gpu-0009", loomv1.RemediationAction_ACTION_REBOOT, "node " + demo + "/nodes/gpu-0009 not found"},
		{"under repair", s, "gpu-0001", loomv1.RemediationAction_ACTION_REBOOT, "node gpu-0001 is already being repaired (reimage, remediation rem-1)"},
		{"provisioning", prov, "gpu-0001", loomv1.RemediationAction_ACTION_REBOOT, "node gpu-0001 is PROVISIONING"},
	} {
		before := len(c.s.Repairs)
		ch := remediate(c.s, c.host, c.action, "rem-2", "b2", t0)
		f := finished(t, ch)
		if f.GetOk() || !strings.HasPrefix(f.GetMessage(), "refused: ") || !strings.Contains(f.GetMessage(), c.want) ||
			f.GetRemediationId() != "rem-2" || len(ch.PutNodes)+len(ch.PutRepairs) != 0 || len(c.s.Repairs) != before {
			t.Errorf("%s: %v (writes %+v)", c.name, f, ch)
		}
	}

	// A node being deleted with its cluster is refused too.
	d := running(t)
	apply(d, d.DeleteCluster(&eventsv1.DeleteCluster{Operation: "del", Cluster: demo}, t0))
	if f := finished(t, remediate(d, "gpu-0001", loomv1.RemediationAction_ACTION_REBOOT, "r", "b", t0)); f.GetOk() ||
		!strings.Contains(f.GetMessage(), "is being deleted") {
		t.Fatalf("repair in a deleting cluster: %v", f)
	}
}

func TestReplaceSwapsTheNodeKeepingCapacity(t *testing.T) {
	t.Parallel()
	s := running(t)
	claims := maps.Clone(Claims(s.Clusters[demo], s.ClusterNodes(demo)))
	at := t0.Add(time.Hour)
	old := demo + "/nodes/gpu-0002"
	remediate(s, "gpu-0002", loomv1.RemediationAction_ACTION_REPLACE, "rem-r", "boot-r", at)
	if node(s, "gpu-0002").GetState() != loomv1.Node_REPLACING {
		t.Fatalf("node = %v", node(s, "gpu-0002"))
	}
	// Booting only follows the swap.
	if ch := s.RepairBooted(p, old, 1, 0, at); !ch.Empty() {
		t.Fatalf("booted before the swap = %+v", ch)
	}
	ch := apply(s, s.RepairSwap(p, old, at.Add(time.Second)))
	if rm := eventsOf[*eventsv1.NodeRemoved](ch); len(rm) != 1 || rm[0].GetNode() != old || node(s, "gpu-0002") != nil {
		t.Fatalf("old node not removed: %v", ch.Events)
	}
	repl := node(s, "gpu-0003")
	r := s.Repairs[old]
	if repl.GetState() != loomv1.Node_PROVISIONING || r.Phase != RepairSwapped || r.Target != repl.GetName() || r.Replacement != repl.GetName() ||
		s.RepairOf(repl.GetName()) != r || s.RepairOf(old) != nil {
		t.Fatalf("replacement %v, repair %+v", repl, r)
	}
	if got := Claims(s.Clusters[demo], s.ClusterNodes(demo)); !maps.Equal(got, claims) || len(s.ClusterNodes(demo)) != 2 {
		t.Fatalf("claims %v, want %v; nodes %s", got, claims, hostnames(s.ClusterNodes(demo)))
	}
	if !strings.Contains(s.Slurm[demo].GetSlurmConf(), "gpu-0001,gpu-0003") {
		t.Fatalf("slurm.conf = %q", s.Slurm[demo].GetSlurmConf())
	}
	// A replacement the provider expects to take an hour (sim) is given
	// that hour on top of the boot timeout.
	apply(s, s.RepairBooted(p, old, 0, time.Hour, at.Add(2*time.Second)))
	tick := apply(s, s.Tick(p, at.Add(30*time.Minute)))
	if repl := node(s, "gpu-0003"); repl.GetState() != loomv1.Node_PROVISIONING || len(eventsOf[*eventsv1.RemediationFinished](tick)) != 0 {
		t.Fatalf("replacement failed before its expected boot: %v, %v", repl, tick.Events)
	}
	f := finished(t, registerBoot(s, "gpu-0003", "boot-r", at.Add(61*time.Minute)))
	if !f.GetOk() || f.GetReplacement() != repl.GetName() || f.GetNode() != old || node(s, "gpu-0003").GetState() != loomv1.Node_READY ||
		f.GetMessage() != "replaced: gpu-0003 is READY in place of gpu-0002" || len(s.Repairs) != 0 {
		t.Fatalf("finished %v, node %v", f, node(s, "gpu-0003"))
	}
	if st := cluster(s).GetStatus(); st.GetReadyNodes() != 2 || st.GetTotalNodes() != 2 {
		t.Fatalf("status = %v", st)
	}
}

func TestRepairPastItsDeadlineFailsTheNode(t *testing.T) {
	t.Parallel()
	s := running(t)
	at := t0.Add(time.Hour)
	name := demo + "/nodes/gpu-0001"
	remediate(s, "gpu-0001", loomv1.RemediationAction_ACTION_REBOOT, "rem-1", "b1", at)
	apply(s, s.RepairBooted(p, name, 7, 0, at))
	if ch := s.Tick(p, at.Add(p.BootTimeout-time.Second)); len(ch.PutNodes) != 0 {
		t.Fatalf("failed before the deadline: %+v", ch)
	}
	ch := apply(s, s.Tick(p, at.Add(p.BootTimeout)))
	f := finished(t, ch)
	n := node(s, "gpu-0001")
	if f.GetOk() || !strings.Contains(f.GetMessage(), "reboot of gpu-0001 failed: its agent did not register by") ||
		n.GetState() != loomv1.Node_FAILED || !strings.HasPrefix(n.GetNextAction(), "replaced by gpu-0003") || len(s.Repairs) != 0 {
		t.Fatalf("finished %v, node %v", f, n)
	}
	if node(s, "gpu-0003").GetState() != loomv1.Node_PROVISIONING {
		t.Fatalf("no replacement: %s", hostnames(s.ClusterNodes(demo)))
	}
}

func TestOtherDecisionsAbandonARepair(t *testing.T) {
	t.Parallel()
	// A delete takes the node: the repair ends not ok, at once.
	s := running(t)
	remediate(s, "gpu-0001", loomv1.RemediationAction_ACTION_REIMAGE, "rem-1", "b1", t0)
	f := finished(t, apply(s, s.DeleteCluster(&eventsv1.DeleteCluster{Operation: "del", Cluster: demo}, t0)))
	if f.GetOk() || f.GetMessage() != "reimage of gpu-0001 abandoned: the node is DELETING (cluster is being deleted)" || len(s.Repairs) != 0 {
		t.Fatalf("finished %v, repairs %v", f, s.Repairs)
	}

	// A shrink that drains the node being repaired.
	s = running(t)
	remediate(s, "gpu-0002", loomv1.RemediationAction_ACTION_REBOOT, "rem-2", "b2", t0)
	f = finished(t, update(s, "op-shrink", clusterSpec(demo, gpuPool("gpu", 1)), 60))
	if f.GetOk() || !strings.Contains(f.GetMessage(), "the node is DRAINING") || node(s, "gpu-0002").GetState() != loomv1.Node_DRAINING {
		t.Fatalf("finished %v, node %v", f, node(s, "gpu-0002"))
	}
}

func TestRepairingNodesCountAsLive(t *testing.T) {
	t.Parallel()
	// A pool grown while a node reboots gets the nodes it lacks, not one
	// more for the rebooting node; health verdicts leave that node alone.
	s := running(t)
	remediate(s, "gpu-0001", loomv1.RemediationAction_ACTION_REBOOT, "rem-1", "b1", t0)
	apply(s, s.NodeHealthChanged(p, &eventsv1.NodeHealthChanged{Node: demo + "/nodes/gpu-0001", Health: eventsv1.NodeHealth_UNHEALTHY}, t0))
	if node(s, "gpu-0001").GetState() != loomv1.Node_REBOOTING {
		t.Fatal("a health verdict moved a rebooting node")
	}
	update(s, "op-grow", clusterSpec(demo, gpuPool("gpu", 3)), 60)
	if got := hostnames(s.ClusterNodes(demo)); got != "gpu-0001,gpu-0002,gpu-0003" {
		t.Fatalf("nodes = %s", got)
	}
}

// A reimaged node's agent registers anew: the node's registration becomes
// the new one in the change that makes the node READY (so the scheduler
// seals for it no later than it may place work there), and a registration
// signed by the earlier identity — the old image's, valid for up to an hour
// — never makes the earlier registration the node's again.
func TestNodeRegistrationFollowsTheLatestRegistration(t *testing.T) {
	t.Parallel()
	s := running(t)
	at := t0.Add(time.Hour)
	name := node(s, "gpu-0001").GetName()
	before, after := auth.NewRegistration(at, "tok-1"), auth.NewRegistration(at.Add(10*time.Minute), "tok-2")
	registerAs := func(reg, hostBoot string, when time.Time) Change {
		return apply(s, s.AgentRegistered(p, &eventsv1.AgentRegistered{Node: name, Cluster: demo, Hostname: "gpu-0001",
			HostBootId: hostBoot, Registration: reg}, when))
	}
	registerAs(before, "boot-0", at)
	if got := node(s, "gpu-0001").GetRegistration(); got != before {
		t.Fatalf("registration %q, want %q", got, before)
	}
	remediate(s, "gpu-0001", loomv1.RemediationAction_ACTION_REIMAGE, "rem-1", "boot-1", at.Add(time.Minute))
	apply(s, s.RepairBooted(p, name, 42, 0, at.Add(2*time.Minute)))
	ch := registerAs(after, "boot-1", at.Add(11*time.Minute))
	var ready *loomv1.Node
	for _, n := range ch.PutNodes {
		if n.GetName() == name {
			ready = n
		}
	}
	if ready == nil || ready.GetState() != loomv1.Node_READY || ready.GetRegistration() != after {
		t.Fatalf("node written by the new image's registration: %v; want READY of registration %q", ready, after)
	}
	// The old image's identity registers (or replays its registration).
	registerAs(before, "boot-0", at.Add(12*time.Minute))
	registerAs("", "boot-1", at.Add(13*time.Minute))
	if got := node(s, "gpu-0001").GetRegistration(); got != after {
		t.Fatalf("after the earlier registration's report: %q, want %q", got, after)
	}
}
