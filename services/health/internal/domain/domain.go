// Package domain is the health service's pure core: which nodes it watches,
// when a node's silence makes it UNHEALTHY, and when its heartbeats make it
// HEALTHY again. Nothing here does I/O or reads a clock: every call is given
// the time.
package domain

import (
	"fmt"
	"sort"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/resname"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// ReasonResumed is the reason of a HEALTHY verdict after heartbeats resume.
const ReasonResumed = "heartbeats resumed"

// Node is one member node and health's verdict on it: the durable part of
// the state.
type Node struct {
	Name    string `json:"name"`
	Cluster string `json:"cluster"`
	// State is the provisioner's view; it decides whether the node is watched.
	State     loomv1.Node_State `json:"state"`
	Unhealthy bool              `json:"unhealthy,omitempty"`
	Reason    string            `json:"reason,omitempty"`
}

// Watched reports whether the node's silence counts: it runs (READY), or it
// ran and is DOWN (so that resumed heartbeats are noticed). Nodes still
// provisioning have no agent yet; nodes being deleted are expected to fall
// silent.
func (n *Node) Watched() bool {
	return n.State == loomv1.Node_READY || n.State == loomv1.Node_DOWN
}

// State is the member nodes, their verdicts, and when each was last heard
// from. Last-seen times live only in memory. State changes only through
// Commit; it is not safe for concurrent use.
type State struct {
	timeout  time.Duration
	nodes    map[string]*Node
	lastSeen map[string]time.Time
}

// NewState returns an empty state that declares a node UNHEALTHY after
// timeout without a heartbeat.
func NewState(timeout time.Duration) *State {
	return &State{timeout: timeout, nodes: map[string]*Node{}, lastSeen: map[string]time.Time{}}
}

// Load adds the nodes read from storage at start-up. Nobody knows when they
// last spoke, so each gets a full timeout of grace from now.
func (s *State) Load(now time.Time, nodes []*Node) {
	for _, n := range nodes {
		s.nodes[n.Name] = n
		s.lastSeen[n.Name] = now
	}
}

// Node returns the node's record (not to be modified), or nil.
func (s *State) Node(name string) *Node { return s.nodes[name] }

// Nodes returns every member node (not to be modified), by name.
func (s *State) Nodes() []*Node {
	out := make([]*Node, 0, len(s.nodes))
	for _, n := range s.nodes {
		out = append(out, n)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Name < out[b].Name })
	return out
}

// Change is what one event or tick did: node records to write (nil deletes),
// events to emit, and last-seen times to remember (memory only).
type Change struct {
	Nodes map[string]*Node
	Emits []Emit
	seen  map[string]time.Time
}

// Durable reports whether the change has anything to persist or emit; a
// change that is not durable only refreshes last-seen times.
func (c *Change) Durable() bool { return len(c.Nodes) > 0 || len(c.Emits) > 0 }

// Emit is an event to publish: the payload and its record key. Its topic is
// not the domain's to choose: the app routes it by type (topics.For).
type Emit struct {
	Key     string
	Payload proto.Message
}

// Commit makes c part of the state.
func (s *State) Commit(c *Change) {
	for name, n := range c.Nodes {
		if n == nil {
			delete(s.nodes, name)
			delete(s.lastSeen, name)
		} else {
			s.nodes[name] = n
		}
	}
	for name, t := range c.seen {
		s.lastSeen[name] = t
	}
}

func newChange() *Change {
	return &Change{Nodes: map[string]*Node{}, seen: map[string]time.Time{}}
}

// Handle computes what a consumed event does. Events of other types give an
// empty change; a payload missing its node gives an *errs.InvalidError.
func (s *State) Handle(now time.Time, payload proto.Message) (*Change, error) {
	c := newChange()
	switch ev := payload.(type) {
	case *eventsv1.AgentRegistered:
		if ev.GetNode() == "" {
			return nil, fmt.Errorf("agent registered: %w", errs.Invalid("node", "required"))
		}
		s.heard(c, now, ev.GetNode())
	case *eventsv1.Heartbeat:
		if ev.GetNode() == "" {
			return nil, fmt.Errorf("heartbeat: %w", errs.Invalid("node", "required"))
		}
		s.heard(c, now, ev.GetNode())
	case *eventsv1.NodeChanged:
		in := ev.GetNode()
		if in.GetName() == "" {
			return nil, fmt.Errorf("node changed: %w", errs.Invalid("node.name", "required"))
		}
		cluster := in.GetCluster()
		if cluster == "" {
			cluster = in.GetName()
			if n, err := resname.SplitNode(cluster); err == nil {
				cluster = n.Cluster.String()
			}
		}
		old := s.nodes[in.GetName()]
		if old != nil && old.State == in.GetState() && old.Cluster == cluster {
			break
		}
		n := &Node{Name: in.GetName(), Cluster: cluster, State: in.GetState()}
		if old != nil {
			n.Unhealthy, n.Reason = old.Unhealthy, old.Reason
		}
		c.Nodes[n.Name] = n
		if _, ok := s.lastSeen[n.Name]; !ok && n.Watched() {
			c.seen[n.Name] = now // a node that just joined gets a full timeout
		}
	case *eventsv1.NodeRemoved:
		if ev.GetNode() == "" {
			return nil, fmt.Errorf("node removed: %w", errs.Invalid("node", "required"))
		}
		if s.nodes[ev.GetNode()] != nil {
			c.Nodes[ev.GetNode()] = nil
		}
	}
	return c, nil
}

// heard records a member's sign of life; an UNHEALTHY node becomes HEALTHY.
// Signs from nodes not (yet, or any more) members are not remembered: a node
// that joins gets its grace from joining.
func (s *State) heard(c *Change, now time.Time, name string) {
	n := s.nodes[name]
	if n == nil {
		return
	}
	c.seen[name] = now
	if !n.Unhealthy {
		return
	}
	healed := *n
	healed.Unhealthy, healed.Reason = false, ReasonResumed
	c.Nodes[name] = &healed
	c.Emits = append(c.Emits, verdict(&healed, now))
}

// Check declares UNHEALTHY every watched node silent for the timeout or
// longer, once: a node already UNHEALTHY is not declared again.
func (s *State) Check(now time.Time) *Change {
	c := newChange()
	for _, n := range s.Nodes() {
		if !n.Watched() || n.Unhealthy {
			continue
		}
		last, ok := s.lastSeen[n.Name]
		if !ok {
			c.seen[n.Name] = now // never heard of since it joined: start its grace now
			continue
		}
		if now.Sub(last) < s.timeout {
			continue
		}
		sick := *n
		sick.Unhealthy, sick.Reason = true, "no heartbeat for "+s.timeout.String()
		c.Nodes[n.Name] = &sick
		c.Emits = append(c.Emits, verdict(&sick, last))
	}
	return c
}

func verdict(n *Node, last time.Time) Emit {
	h := eventsv1.NodeHealth_HEALTHY
	if n.Unhealthy {
		h = eventsv1.NodeHealth_UNHEALTHY
	}
	return Emit{Key: n.Name, Payload: &eventsv1.NodeHealthChanged{
		Node: n.Name, Cluster: n.Cluster, Health: h, Reason: n.Reason, LastHeartbeat: timestamppb.New(last),
	}}
}
