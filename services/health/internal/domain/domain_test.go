package domain

import (
	"errors"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/errs"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

const (
	cluster = "projects/default/clusters/c1"
	node    = cluster + "/nodes/gpu-0001"
	timeout = 15 * time.Second
)

// fake drives a State with a fake clock, committing every change.
type fake struct {
	t   *testing.T
	s   *State
	now time.Time
}

func newFake(t *testing.T) *fake {
	return &fake{t: t, s: NewState(timeout), now: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
}

func (f *fake) handle(ev proto.Message) *Change {
	f.t.Helper()
	c, err := f.s.Handle(f.now, ev)
	if err != nil {
		f.t.Fatalf("handle %T: %v", ev, err)
	}
	f.s.Commit(c)
	return c
}

func (f *fake) check() []*eventsv1.NodeHealthChanged {
	c := f.s.Check(f.now)
	f.s.Commit(c)
	return verdicts(c)
}

func (f *fake) advance(d time.Duration) { f.now = f.now.Add(d) }

func (f *fake) join(name string, state loomv1.Node_State) *Change {
	return f.handle(&eventsv1.NodeChanged{Node: &loomv1.Node{Name: name, Cluster: cluster, State: state}})
}

func (f *fake) beat(name string) *Change {
	return f.handle(&eventsv1.Heartbeat{Node: name, Cluster: cluster})
}

func verdicts(c *Change) []*eventsv1.NodeHealthChanged {
	var out []*eventsv1.NodeHealthChanged
	for _, e := range c.Emits {
		out = append(out, e.Payload.(*eventsv1.NodeHealthChanged))
	}
	return out
}

func TestSilenceGivesOneUnhealthy(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	f.join(node, loomv1.Node_READY)
	f.beat(node)
	f.advance(timeout - time.Millisecond)
	if v := f.check(); len(v) != 0 {
		t.Fatalf("flagged before the timeout: %v", v)
	}
	f.advance(time.Millisecond)
	v := f.check()
	if len(v) != 1 || v[0].GetHealth() != eventsv1.NodeHealth_UNHEALTHY || v[0].GetReason() != "no heartbeat for 15s" ||
		v[0].GetNode() != node || v[0].GetCluster() != cluster {
		t.Fatalf("want one UNHEALTHY 'no heartbeat for 15s', got %v", v)
	}
	if !v[0].GetLastHeartbeat().AsTime().Equal(f.now.Add(-timeout)) {
		t.Fatalf("last_heartbeat %v, want %v", v[0].GetLastHeartbeat().AsTime(), f.now.Add(-timeout))
	}
	for range 5 {
		f.advance(timeout)
		if v := f.check(); len(v) != 0 {
			t.Fatalf("UNHEALTHY repeated: %v", v)
		}
	}
	if n := f.s.Node(node); !n.Unhealthy {
		t.Fatal("verdict not kept in state")
	}
}

func TestHeartbeatHeals(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	f.join(node, loomv1.Node_READY)
	f.advance(timeout)
	if v := f.check(); len(v) != 1 {
		t.Fatalf("want UNHEALTHY for a silent new node after its grace, got %v", v)
	}
	// The provisioner marks it DOWN: it is still watched.
	f.join(node, loomv1.Node_DOWN)
	v := verdicts(f.beat(node))
	if len(v) != 1 || v[0].GetHealth() != eventsv1.NodeHealth_HEALTHY || v[0].GetReason() != ReasonResumed {
		t.Fatalf("want one HEALTHY, got %v", v)
	}
	if v := verdicts(f.beat(node)); len(v) != 0 {
		t.Fatalf("HEALTHY repeated: %v", v)
	}
	f.advance(timeout)
	if v := f.check(); len(v) != 1 || v[0].GetHealth() != eventsv1.NodeHealth_UNHEALTHY {
		t.Fatalf("want UNHEALTHY again after new silence, got %v", v)
	}
}

func TestHeartbeatsKeepNodeHealthy(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	f.join(node, loomv1.Node_READY)
	for range 20 {
		f.advance(timeout / 2)
		if c := f.beat(node); c.Durable() {
			t.Fatalf("a routine heartbeat is durable: %v", c)
		}
		if v := f.check(); len(v) != 0 {
			t.Fatalf("flagged while beating: %v", v)
		}
	}
}

func TestRemovedNodeNeverFlagged(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	f.join(node, loomv1.Node_READY)
	f.beat(node)
	f.handle(&eventsv1.NodeRemoved{Node: node, Cluster: cluster})
	f.beat(node) // a straggler from the dying agent
	f.advance(10 * timeout)
	if v := f.check(); len(v) != 0 {
		t.Fatalf("removed node flagged: %v", v)
	}
	if f.s.Node(node) != nil {
		t.Fatal("removed node still a member")
	}
}

// TestLastNodeEmptiesTheCluster: the change that removes a cluster's last
// node says so (the store drops the cluster's history with it); removing
// one of two does not, nor does a node joining again after.
func TestLastNodeEmptiesTheCluster(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	other := cluster + "/nodes/gpu-0002"
	f.join(node, loomv1.Node_READY)
	f.join(other, loomv1.Node_READY)
	f.join(node, loomv1.Node_DOWN) // a change of state is no new member
	if c := f.handle(&eventsv1.NodeRemoved{Node: node, Cluster: cluster}); len(c.Emptied) != 0 {
		t.Fatalf("one of two removed: emptied %v", c.Emptied)
	}
	if c := f.handle(&eventsv1.NodeRemoved{Node: node, Cluster: cluster}); len(c.Emptied) != 0 || c.Durable() {
		t.Fatalf("a node removed twice: emptied %v", c.Emptied)
	}
	if c := f.handle(&eventsv1.NodeRemoved{Node: other, Cluster: cluster}); len(c.Emptied) != 1 || c.Emptied[0] != cluster || !c.Durable() {
		t.Fatalf("the last removed: emptied %v", c.Emptied)
	}
	f.join(node, loomv1.Node_READY)
	if c := f.handle(&eventsv1.NodeRemoved{Node: node, Cluster: cluster}); len(c.Emptied) != 1 {
		t.Fatalf("the only node of a cluster joined again, then removed: emptied %v", c.Emptied)
	}
}

// TestLoginNodeIsNotAMember: a login node is a record only (nothing there
// heartbeats), so it is never found silent, taken down or repaired; one an
// earlier health took down is let go and declared healthy, so that the
// provisioner gives it back.
func TestLoginNodeIsNotAMember(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	login := cluster + "/nodes/c1-login-001"
	loginNode := func(state loomv1.Node_State, role string) *eventsv1.NodeChanged {
		return &eventsv1.NodeChanged{Node: &loomv1.Node{Name: login, Cluster: cluster, Hostname: "c1-login-001", State: state, Role: role}}
	}
	if c := f.handle(loginNode(loomv1.Node_READY, "login")); len(c.Emits) != 0 || c.Durable() {
		t.Fatalf("a login node's record changed health's state: %+v", c)
	}
	for range 5 {
		f.advance(timeout)
		if v := f.check(); len(v) != 0 {
			t.Fatalf("a login node was judged: %v", v)
		}
	}
	if f.s.Node(login) != nil || f.s.machine.Node(login) != nil {
		t.Fatal("a login node is a member")
	}

	// As an earlier health had it: watched, silent, down.
	f.handle(loginNode(loomv1.Node_READY, ""))
	f.advance(timeout)
	if v := f.check(); len(v) != 1 || v[0].GetHealth() != eventsv1.NodeHealth_UNHEALTHY {
		t.Fatalf("want the old rule's UNHEALTHY, got %v", v)
	}
	v := verdicts(f.handle(loginNode(loomv1.Node_DOWN, "login")))
	if len(v) != 1 || v[0].GetHealth() != eventsv1.NodeHealth_HEALTHY || v[0].GetReason() != ReasonLoginNode ||
		v[0].GetState() != loomv1.RemediationState_NODE_HEALTHY || v[0].GetNode() != login {
		t.Fatalf("want one HEALTHY %q for the login node taken down, got %v", ReasonLoginNode, v)
	}
	if f.s.Node(login) != nil || f.s.machine.Node(login) != nil {
		t.Fatal("the login node is still a member")
	}
	f.advance(10 * timeout)
	if v := f.check(); len(v) != 0 {
		t.Fatalf("the login node was judged again: %v", v)
	}
}

func TestUnwatchedStates(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	f.join(node, loomv1.Node_PROVISIONING)
	f.advance(10 * timeout)
	if v := f.check(); len(v) != 0 {
		t.Fatalf("provisioning node flagged: %v", v)
	}
	// Ready now: the grace starts when it joins the watched set.
	f.join(node, loomv1.Node_READY)
	f.advance(timeout / 2)
	if v := f.check(); len(v) != 0 {
		t.Fatalf("flagged inside its grace: %v", v)
	}
	f.join(node, loomv1.Node_DELETING)
	f.advance(10 * timeout)
	if v := f.check(); len(v) != 0 {
		t.Fatalf("deleting node flagged: %v", v)
	}
}

func TestRestartGrace(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	f.join(node, loomv1.Node_READY)
	f.advance(timeout - time.Second)
	// A new instance loads the members: each gets a full timeout from now.
	g := &fake{t: t, s: NewState(timeout), now: f.now}
	g.s.Load(g.now, f.s.Nodes())
	g.advance(timeout - time.Millisecond)
	if v := g.check(); len(v) != 0 {
		t.Fatalf("flagged inside the restart grace: %v", v)
	}
	g.advance(time.Millisecond)
	if v := g.check(); len(v) != 1 {
		t.Fatalf("want UNHEALTHY after the grace, got %v", v)
	}
}

func TestInvalidEvents(t *testing.T) {
	t.Parallel()
	s := NewState(timeout)
	for _, ev := range []proto.Message{&eventsv1.Heartbeat{}, &eventsv1.AgentRegistered{}, &eventsv1.NodeChanged{}, &eventsv1.NodeRemoved{}} {
		_, err := s.Handle(time.Now(), ev)
		var inv *errs.InvalidError
		if !errors.As(err, &inv) {
			t.Errorf("%T: got %v, want InvalidError", ev, err)
		}
	}
	if c, err := s.Handle(time.Now(), &eventsv1.SubmitJob{}); err != nil || c.Durable() {
		t.Errorf("unrelated event: %v %v", c, err)
	}
}
