// Package domain is the health service's pure core: which nodes it watches,
// when a node's silence makes it UNHEALTHY (or, when many fall silent
// together, only unreachable), when its heartbeats make it HEALTHY again, and
// how what nodes report (Xids, telemetry, check results), what the
// provisioner and scheduler answer, and what operators ask feed the
// remediation state machine (package remedy). Nothing here does I/O or reads
// a clock: every call is given the time.
package domain

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/clusterspec"
	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/hostlist"
	"github.com/loom-ml/loom/libs/noderate"
	"github.com/loom-ml/loom/libs/resname"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/health/internal/classify"
	"github.com/loom-ml/loom/services/health/internal/remedy"
	"github.com/loom-ml/loom/services/health/internal/scan"
)

// ReasonResumed is the reason of a HEALTHY verdict after heartbeats resume.
const ReasonResumed = "heartbeats resumed"

// ReasonLoginNode is the reason of the HEALTHY verdict that gives back a
// login node an earlier health took down (see Handle's NodeChanged).
const ReasonLoginNode = "a login node: a record only, not watched"

// Node is one member node and health's verdict on it: the durable part of
// the state.
type Node struct {
	Name    string `json:"name"`
	Cluster string `json:"cluster"`
	// State is the provisioner's view; it decides whether the node is watched.
	State     loomv1.Node_State `json:"state"`
	Unhealthy bool              `json:"unhealthy,omitempty"`
	Reason    string            `json:"reason,omitempty"`
	// Hostname is the provisioner's (operators name nodes by it).
	Hostname string `json:"hostname,omitempty"`
	// Unreachable: silent, but together with many of its cluster's nodes:
	// not declared failed until the silence is confirmed.
	Unreachable bool `json:"unreachable,omitempty"`
	// Simulated: the agent said its GPUs are the simulated device;
	// Registered that it said anything (faults are injected only into
	// simulated GPUs).
	Simulated  bool `json:"simulated,omitempty"`
	Registered bool `json:"registered,omitempty"`
	// GPUs is the node's GPU count as the provisioner has it (its machine
	// type's; 0: not known). A node's report about a GPU it does not have
	// is dropped (DropGPUIndex).
	GPUs int32 `json:"gpus,omitempty"`
}

// hasGPU reports whether gpu may be one of the node's GPUs: -1 (the node,
// or a GPU the driver did not name), or an index below its GPU count when
// that is known.
func (n *Node) hasGPU(gpu int32) bool {
	return gpu == -1 || gpu >= 0 && (n.GPUs <= 0 || gpu < n.GPUs)
}

// Watched reports whether the node's silence counts: it runs (READY), or it
// ran and is DOWN (so that resumed heartbeats are noticed). Nodes still
// provisioning have no agent yet; nodes being deleted are expected to fall
// silent.
func (n *Node) Watched() bool {
	return n.State == loomv1.Node_READY || n.State == loomv1.Node_DOWN
}

// DefaultMassSilence is the share of a cluster's watched nodes that, silent
// together (and at least two), are unreachable rather than failed.
const DefaultMassSilence = 0.5

// Config is the domain's policy.
type Config struct {
	// Timeout is how long a node may be silent.
	Timeout time.Duration
	// MassSilence: when at least this share of a cluster's watched nodes (and
	// at least 2) are silent together, they are unreachable, not failed,
	// until the silence is confirmed (DefaultMassSilence when 0; above 1 is off).
	MassSilence float64
	// Remedy is the remediation machine's policy.
	Remedy remedy.Config
	// Thresholds are the telemetry limits (classify.DefaultThresholds when zero).
	Thresholds classify.Thresholds
	// NodeRate and NodeBurst are each node's token bucket on the records it
	// signs on the telemetry topic: records a second, and at once
	// (DefaultNodeRate, DefaultNodeBurst when 0). Records past it are
	// dropped unhandled (Change.Dropped).
	NodeRate  float64
	NodeBurst int
}

// State is the member nodes, their verdicts, when each was last heard
// from, and their remediation. Last-seen times, unreachable-since times and
// the latest telemetry live only in memory; each GPU's last judged last_xid
// is durable (Change.Xids). State changes only through
// Commit; it is not safe for concurrent use.
type State struct {
	cfg     Config
	timeout time.Duration
	nodes   map[string]*Node
	// members counts each cluster's nodes (a node's cluster never changes).
	members  map[string]int
	lastSeen map[string]time.Time
	// unreachSince is when each unreachable node was found so; evidence
	// when the bus was first seen delivering again after that: recent
	// records of MinWitnesses distinct other nodes (witnesses, at most
	// that many per node, until then).
	unreachSince map[string]time.Time
	evidence     map[string]time.Time
	witnesses    map[string][]string
	// parts is where health stands in each partition of the telemetry
	// topic (its lag); started is when the state was loaded.
	parts   map[int]*partition
	started time.Time
	// partOf is the partition each member's records last arrived on (its
	// silence is judged by that partition's lag: behindFor).
	partOf map[string]int
	// buckets are the nodes' token buckets on their telemetry records
	// (only of nodes heard lately: noderate.Buckets.Prune).
	buckets *noderate.Buckets
	// telemetry is each node's latest GpuTelemetry (rates, ListNodeHealth).
	telemetry map[string]*eventsv1.GpuTelemetry
	// xids is each node's last_xid per GPU as last judged
	// (classify.LastXids of its latest sample): durable, so that a
	// restarted health judges a change that happened while it was down,
	// and not a value it judged before.
	xids map[string]map[int32]int32
	// lastCheck is when the check loop last ran.
	lastCheck time.Time
	machine   *remedy.Machine
}

// NewState returns an empty state that declares a node UNHEALTHY after
// timeout without a heartbeat, with the default policy otherwise.
func NewState(timeout time.Duration) *State { return NewStateWith(Config{Timeout: timeout}) }

// NewStateWith returns an empty state with cfg's policy.
func NewStateWith(cfg Config) *State {
	if cfg.MassSilence <= 0 {
		cfg.MassSilence = DefaultMassSilence
	}
	if cfg.Thresholds == (classify.Thresholds{}) {
		cfg.Thresholds = classify.DefaultThresholds()
	}
	if cfg.NodeRate <= 0 {
		cfg.NodeRate = DefaultNodeRate
	}
	if cfg.NodeBurst <= 0 {
		cfg.NodeBurst = DefaultNodeBurst
	}
	return &State{cfg: cfg, timeout: cfg.Timeout, nodes: map[string]*Node{}, members: map[string]int{}, lastSeen: map[string]time.Time{},
		unreachSince: map[string]time.Time{}, evidence: map[string]time.Time{}, witnesses: map[string][]string{}, parts: map[int]*partition{}, partOf: map[string]int{}, buckets: NewNodeBuckets(cfg.NodeRate, cfg.NodeBurst), telemetry: map[string]*eventsv1.GpuTelemetry{}, xids: map[string]map[int32]int32{},
		machine: remedy.New(cfg.Remedy)}
}

// Load adds the nodes read from storage at start-up. Nobody knows when they
// last spoke, so each gets a full timeout of grace from now (an unreachable
// one too: its confirmation starts again).
func (s *State) Load(now time.Time, nodes []*Node) {
	for _, n := range nodes {
		if s.nodes[n.Name] == nil {
			s.members[n.Cluster]++
		}
		s.nodes[n.Name] = n
		s.lastSeen[n.Name] = now
		if n.Unreachable {
			s.unreachSince[n.Name] = now
		}
	}
	s.lastCheck = now
	s.started = now
}

// LoadXids restores each node's last judged last_xid per GPU, as stored
// from Change.Xids; records of nodes that are not members are dropped.
func (s *State) LoadXids(xids map[string]map[int32]int32) {
	for name, m := range xids {
		if s.nodes[name] != nil && m != nil {
			s.xids[name] = m
		}
	}
}

// LoadRemedy restores the remediation machine from its stored snapshot.
func (s *State) LoadRemedy(snap remedy.Snapshot) error {
	m, err := remedy.Restore(s.cfg.Remedy, snap)
	if err != nil {
		return err
	}
	s.machine = m
	return nil
}

// Node returns the node's record (not to be modified), or nil.
func (s *State) Node(name string) *Node { return s.nodes[name] }

// Remedy returns a copy of the node's remediation record, or nil.
func (s *State) Remedy(name string) *remedy.Node { return s.machine.Node(name) }

// Machine returns the remediation machine, for reads.
func (s *State) Machine() *remedy.Machine { return s.machine }

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
// events to emit, the remediation machine's step, and what is kept in
// memory only (last-seen times, telemetry, when traffic and checks were).
type Change struct {
	Nodes  map[string]*Node
	Emits  []Emit
	Remedy *remedy.Result
	// Xids are nodes' last_xid per GPU to store, set only when a node's
	// differs from the stored one (a routine sample writes nothing); a node
	// removed from Nodes is removed here by the store as well.
	Xids map[string]map[int32]int32
	// Emptied are the clusters whose last node the change removes (their
	// history goes with them: a deleted cluster leaves nothing behind).
	Emptied []string
	// Dropped, when set, is why the record was not handled (DropRate: past
	// its node's rate): the change only moves health's position in its
	// partition.
	Dropped string
	// Unknown are the hostnames an operator's command named that health
	// has no node for (a login node, or one the provisioner listed before
	// health heard of it): the command acted on the others, and the app
	// logs these. Nothing is stored of them.
	Unknown []string
	seen    map[string]time.Time
	// unreach sets (or with a zero time clears) unreachable-since times.
	unreach   map[string]time.Time
	telemetry map[string]*eventsv1.GpuTelemetry
	// rec is the consumed record the change is of (its position moves
	// health's lag), at when it was handled; witness is its node when the
	// record proves the bus delivers (see witnessOf).
	rec     *Record
	at      time.Time
	witness string
	// token is the node whose bucket the record takes a token from.
	token   string
	checked time.Time
}

// Durable reports whether the change has anything to persist or emit; a
// change that is not durable only refreshes what is kept in memory.
func (c *Change) Durable() bool {
	return len(c.Nodes) > 0 || len(c.Emits) > 0 || len(c.Xids) > 0 || len(c.Emptied) > 0 || (c.Remedy != nil && c.Remedy.Durable())
}

// AllEmits are the change's events: the domain's, then the machine's.
func (c *Change) AllEmits() []Emit {
	out := append([]Emit(nil), c.Emits...)
	if c.Remedy != nil {
		for _, e := range c.Remedy.Emits {
			out = append(out, Emit{Key: e.Key, Payload: e.Payload})
		}
	}
	return out
}

// Emit is an event to publish: the payload and its record key. Its topic is
// not the domain's to choose: the app routes it by type (topics.For).
type Emit struct {
	Key     string
	Payload proto.Message
}

// Commit makes c part of the state.
func (s *State) Commit(c *Change) {
	for name, n := range c.Nodes {
		if old := s.nodes[name]; old != nil && n == nil {
			if s.members[old.Cluster]--; s.members[old.Cluster] <= 0 {
				delete(s.members, old.Cluster)
			}
		} else if old == nil && n != nil {
			s.members[n.Cluster]++
		}
		if n == nil {
			delete(s.nodes, name)
			delete(s.lastSeen, name)
			delete(s.unreachSince, name)
			delete(s.evidence, name)
			delete(s.witnesses, name)
			delete(s.telemetry, name)
			delete(s.xids, name)
			delete(s.partOf, name)
		} else {
			s.nodes[name] = n
		}
	}
	for name, t := range c.seen {
		if s.nodes[name] != nil {
			s.lastSeen[name] = t
		}
	}
	for name, t := range c.unreach {
		delete(s.evidence, name)
		delete(s.witnesses, name)
		if t.IsZero() {
			delete(s.unreachSince, name)
		} else {
			s.unreachSince[name] = t
		}
	}
	if c.rec != nil {
		s.moved(c.at, *c.rec)
		if n := c.rec.Node; n != "" && s.nodes[n] != nil {
			s.partOf[n] = c.rec.Partition
		}
	}
	if c.token != "" {
		s.buckets.Take(c.at, c.token)
	}
	if c.witness != "" {
		for name, since := range s.unreachSince {
			if _, ok := s.evidence[name]; ok || !c.at.After(since) || name == c.witness || slices.Contains(s.witnesses[name], c.witness) {
				continue
			}
			if s.witnesses[name] = append(s.witnesses[name], c.witness); len(s.witnesses[name]) >= s.witnessesNeeded(name, c.at) {
				s.evidence[name] = c.at
				delete(s.witnesses, name)
			}
		}
	}
	for name, t := range c.telemetry {
		if s.nodes[name] != nil {
			s.telemetry[name] = t
		}
	}
	for name, m := range c.Xids {
		if s.nodes[name] != nil {
			s.xids[name] = m
		}
	}
	if !c.checked.IsZero() {
		s.lastCheck = c.checked
		s.buckets.Prune(c.checked)
	}
	if c.Remedy != nil {
		s.machine.Commit(c.Remedy)
	}
}

func newChange() *Change {
	return &Change{Nodes: map[string]*Node{}, Xids: map[string]map[int32]int32{}, seen: map[string]time.Time{}, unreach: map[string]time.Time{},
		telemetry: map[string]*eventsv1.GpuTelemetry{}}
}

// node returns the record as this change has it so far (not to be modified).
func (s *State) node(c *Change, name string) *Node {
	if n, ok := c.Nodes[name]; ok {
		return n
	}
	return s.nodes[name]
}

// edit returns a copy of the node's record to change, stored in c.
func (s *State) edit(c *Change, name string) *Node {
	n := s.node(c, name)
	if n == nil {
		return nil
	}
	if cn, ok := c.Nodes[name]; ok && cn != nil {
		return cn
	}
	cp := *n
	c.Nodes[name] = &cp
	return &cp
}

// Handle computes what an event that did not come from the telemetry
// topic's consumer does (HandleRecord without a record): it moves no lag and
// proves no delivery.
func (s *State) Handle(now time.Time, payload proto.Message) (*Change, error) {
	return s.HandleRecord(now, Record{}, payload)
}

// HandleRecord computes what a consumed event does; rec is how it reached
// health. Events of other types give an empty change; a payload missing its
// node gives an *errs.InvalidError.
func (s *State) HandleRecord(now time.Time, rec Record, payload proto.Message) (*Change, error) {
	c := newChange()
	c.at = now
	if rec.Telemetry && rec.HighWaterMark > 0 {
		c.rec = &rec
	}
	if !s.admit(now, rec) {
		// Past its node's rate: not handled, and no proof of anything.
		c.Dropped = DropRate
		return c, nil
	}
	if rec.Telemetry && rec.Limited && rec.Node != "" {
		c.token = rec.Node
	}
	c.witness = s.witnessOf(now, rec)
	var evs []remedy.Event
	switch ev := payload.(type) {
	case *eventsv1.AgentRegistered:
		if ev.GetNode() == "" {
			return nil, fmt.Errorf("agent registered: %w", errs.Invalid("node", "required"))
		}
		s.heard(c, now, ev.GetNode())
		if n := s.node(c, ev.GetNode()); n != nil {
			if !n.Registered || n.Simulated != ev.GetSimulatedGpus() {
				e := s.edit(c, ev.GetNode())
				e.Registered, e.Simulated = true, ev.GetSimulatedGpus()
			}
			evs = append(evs, remedy.Registered{Node: ev.GetNode(), HostBootID: ev.GetHostBootId()})
		}
	case *eventsv1.Heartbeat:
		if ev.GetNode() == "" {
			return nil, fmt.Errorf("heartbeat: %w", errs.Invalid("node", "required"))
		}
		s.heard(c, now, ev.GetNode())
	case *eventsv1.GpuTelemetry:
		if ev.GetNode() == "" {
			return nil, fmt.Errorf("gpu telemetry: %w", errs.Invalid("node", "required"))
		}
		if s.nodes[ev.GetNode()] == nil {
			break
		}
		s.heard(c, now, ev.GetNode())
		ev = boundTelemetry(ev)
		// last_xid is judged against the stored value, not the sample in
		// memory, so that a restarted health still sees a change (and
		// does not judge again a value it judged before).
		judged, known := s.xids[ev.GetNode()]
		if v, ok := classify.Worst(s.cfg.Thresholds.Telemetry(s.telemetry[ev.GetNode()], ev, judged)); ok {
			evs = append(evs, remedy.Fault{Node: ev.GetNode(), Verdict: v})
		}
		c.telemetry[ev.GetNode()] = ev
		if cur := classify.LastXids(ev); !known || !maps.Equal(cur, judged) {
			c.Xids[ev.GetNode()] = cur
		}
	case *eventsv1.XidObserved:
		if ev.GetNode() == "" {
			return nil, fmt.Errorf("xid observed: %w", errs.Invalid("node", "required"))
		}
		if n := s.nodes[ev.GetNode()]; n != nil && !n.hasGPU(ev.GetGpu()) {
			// A GPU the node does not have: not a fault of this node's
			// hardware (an agent's bug, or a node's lie), and not a reason
			// to drain it.
			c.Dropped = DropGPUIndex
			return c, nil
		}
		evs = append(evs, remedy.Fault{Node: ev.GetNode(), Verdict: classify.Xid(ev.GetGpu(), ev.GetXid())})
	case *eventsv1.HealthCheckCompleted:
		r := ev.GetResult()
		if r.GetNode() == "" {
			return nil, fmt.Errorf("health check completed: %w", errs.Invalid("result.node", "required"))
		}
		// As a node reported it: cut and cleaned before its summary
		// becomes the node's reason, shown in sinfo -R and terminals.
		evs = append(evs, remedy.Check{Node: r.GetNode(), Result: scan.NodeResult(r, now)})
	case *eventsv1.RemediationFinished:
		if ev.GetNode() == "" {
			return nil, fmt.Errorf("remediation finished: %w", errs.Invalid("node", "required"))
		}
		evs = append(evs, remedy.Repaired{Node: ev.GetNode(), Cluster: ev.GetCluster(), ID: ev.GetRemediationId(), OK: ev.GetOk(), Message: ev.GetMessage(),
			Replacement: ev.GetReplacement(), Action: ev.GetAction()})
	case *eventsv1.RemediationProgress:
		if ev.GetNode() == "" {
			return nil, fmt.Errorf("remediation progress: %w", errs.Invalid("node", "required"))
		}
		if d := ev.GetDeadlineIn().AsDuration(); d > remedy.MaxRepairDeadline {
			// A deadline past any repair's would keep a broken node out
			// of escalation for ever.
			return nil, fmt.Errorf("remediation progress: %w", errs.Invalid("deadline_in", "%s is past the most health waits for a repair, %s", d, remedy.MaxRepairDeadline))
		}
		evs = append(evs, remedy.Progress{Node: ev.GetNode(), ID: ev.GetRemediationId(), DeadlineIn: ev.GetDeadlineIn().AsDuration()})
	case *eventsv1.NodeDrained:
		if ev.GetNode() == "" {
			return nil, fmt.Errorf("node drained: %w", errs.Invalid("node", "required"))
		}
		evs = append(evs, remedy.Drained{Node: ev.GetNode()})
	case *eventsv1.ReportFaultyNodes:
		names, unknown, err := s.resolve(ev.GetCluster(), ev.GetHostnames())
		if err != nil {
			return nil, fmt.Errorf("report faulty nodes: %w", err)
		}
		c.Unknown = unknown
		for _, n := range names {
			evs = append(evs, remedy.Report{Node: n, User: ev.GetUser(), Reason: ev.GetReason()})
		}
	case *eventsv1.UpdateNodeRemediation:
		names, _, err := s.resolve(ev.GetCluster(), []string{ev.GetHostname()})
		if err != nil {
			return nil, fmt.Errorf("update node remediation: %w", err)
		}
		for _, n := range names {
			evs = append(evs, remedy.Override{Node: n, Action: ev.GetAction(), User: ev.GetUser(), Reason: ev.GetReason()})
		}
	case *eventsv1.InjectFault:
		names, _, err := s.resolve(ev.GetCluster(), []string{ev.GetHostname()})
		if err != nil {
			return nil, fmt.Errorf("inject fault: %w", err)
		}
		for _, name := range names {
			n := s.nodes[name]
			if n.Registered && !n.Simulated {
				return nil, fmt.Errorf("inject fault: %w", errs.Invalid("hostname", "node %s has real GPUs: faults are injected only into simulated ones", n.Hostname))
			}
			c.Emits = append(c.Emits, Emit{Key: name, Payload: &eventsv1.InjectNodeFault{Node: name, Cluster: n.Cluster, Fault: ev.GetFault(), User: ev.GetUser()}})
		}
	case *eventsv1.NodeChanged:
		in := ev.GetNode()
		if in.GetName() == "" {
			return nil, fmt.Errorf("node changed: %w", errs.Invalid("node.name", "required"))
		}
		if in.GetRole() == clusterspec.RoleLogin {
			// A login node is a record only: nothing there heartbeats or
			// can be checked or repaired, so it is not a member. (A health
			// from before this rule watched them, found them silent and
			// took them down: one it had is let go, and one the
			// provisioner still has down for that is declared healthy.)
			if old := s.nodes[in.GetName()]; old != nil {
				c.Nodes[in.GetName()] = nil
				evs = append(evs, remedy.Leave{Node: in.GetName()})
				if in.GetState() == loomv1.Node_DOWN {
					c.Emits = append(c.Emits, Emit{Key: old.Name, Payload: &eventsv1.NodeHealthChanged{
						Node: old.Name, Cluster: old.Cluster, Health: eventsv1.NodeHealth_HEALTHY, Reason: ReasonLoginNode,
						State: loomv1.RemediationState_NODE_HEALTHY, SetBy: remedy.SetBy, Time: timestamppb.New(now)}})
				}
			}
			break
		}
		cluster := in.GetCluster()
		if cluster == "" {
			cluster = in.GetName()
			if n, err := resname.SplitNode(cluster); err == nil {
				cluster = n.Cluster.String()
			}
		}
		hostname := in.GetHostname()
		old := s.nodes[in.GetName()]
		if old != nil && hostname == "" {
			hostname = old.Hostname
		}
		evs = append(evs, remedy.Join{Node: in.GetName(), Cluster: cluster, Hostname: hostname})
		if old != nil && old.State == in.GetState() && old.Cluster == cluster && old.Hostname == hostname && old.GPUs == in.GetGpus() {
			break
		}
		n := &Node{Name: in.GetName(), Cluster: cluster, State: in.GetState(), Hostname: hostname, GPUs: in.GetGpus()}
		if old != nil {
			n.Unhealthy, n.Reason, n.Unreachable, n.Simulated, n.Registered = old.Unhealthy, old.Reason, old.Unreachable, old.Simulated, old.Registered
		}
		c.Nodes[n.Name] = n
		if _, ok := s.lastSeen[n.Name]; n.Watched() && (!ok || old == nil || !old.Watched()) {
			// A node that just joined, or is READY again after a repair or
			// provisioning, gets a full timeout from now.
			c.seen[n.Name] = now
		}
	case *eventsv1.NodeRemoved:
		if ev.GetNode() == "" {
			return nil, fmt.Errorf("node removed: %w", errs.Invalid("node", "required"))
		}
		if n := s.nodes[ev.GetNode()]; n != nil {
			c.Nodes[ev.GetNode()] = nil
			left := s.members[n.Cluster]
			for name, m := range c.Nodes {
				if m == nil && s.nodes[name] != nil && s.nodes[name].Cluster == n.Cluster {
					left-- // removed by this change, this node included
				}
			}
			if left <= 0 {
				c.Emptied = append(c.Emptied, n.Cluster)
			}
		}
		evs = append(evs, remedy.Leave{Node: ev.GetNode()})
	}
	if len(evs) > 0 {
		c.Remedy = s.machine.Step(now, evs...)
	}
	return c, nil
}

// resolve expands a command's hostnames (hostlists) into the names of
// cluster's nodes, without duplicates. Hostnames it has no node for are
// returned apart, so that one of them does not drop the command for the
// others; it is an error only when none is known (nothing to act on) or
// a hostlist is malformed.
func (s *State) resolve(cluster string, hostnames []string) (names, unknown []string, err error) {
	if cluster == "" {
		return nil, nil, errs.Invalid("cluster", "required")
	}
	seen := map[string]bool{}
	for _, expr := range hostnames {
		hosts := []string{expr}
		if strings.ContainsAny(expr, "[,") {
			if hosts, err = hostlist.Expand(expr); err != nil {
				return nil, nil, errs.Invalid("hostnames", "%v", err)
			}
		}
		for _, h := range hosts {
			name := s.byHostname(cluster, h)
			if name == "" {
				if !slices.Contains(unknown, h) {
					unknown = append(unknown, h)
				}
				continue
			}
			if !seen[name] {
				seen[name] = true
				names = append(names, name)
			}
		}
	}
	if len(names) == 0 && len(unknown) > 0 {
		return nil, nil, errs.Invalid("hostnames", "no node %q in cluster %s", unknown[0], cluster)
	}
	if len(names) == 0 {
		return nil, nil, errs.Invalid("hostnames", "at least one is required")
	}
	return names, unknown, nil
}

func (s *State) byHostname(cluster, h string) string {
	if n := s.nodes[h]; n != nil && n.Cluster == cluster {
		return h
	}
	if n := s.nodes[cluster+"/nodes/"+h]; n != nil {
		return n.Name
	}
	for _, n := range s.Nodes() {
		if n.Cluster == cluster && n.Hostname == h {
			return n.Name
		}
	}
	return ""
}

// inService reports whether remediation leaves the node in service (so that
// a silence verdict on it means something to the scheduler).
func (s *State) inService(c *Change, name string) bool {
	var r *remedy.Node
	if c.Remedy != nil {
		if rn, ok := c.Remedy.Nodes[name]; ok {
			r = rn
		}
	}
	if r == nil {
		r = s.machine.Node(name)
	}
	return r == nil || r.InService()
}

// heard records a member's sign of life; an UNHEALTHY node becomes HEALTHY
// and an unreachable one reachable. A node that remediation holds out stays
// out: only its silence is forgotten. Signs from nodes not (yet, or any
// more) members are not remembered: a node that joins gets its grace from
// joining.
func (s *State) heard(c *Change, now time.Time, name string) {
	n := s.node(c, name)
	if n == nil {
		return
	}
	c.seen[name] = now
	if !n.Unhealthy && !n.Unreachable {
		return
	}
	healed := s.edit(c, name)
	wasUnhealthy := healed.Unhealthy
	healed.Unhealthy, healed.Unreachable, healed.Reason = false, false, ReasonResumed
	c.unreach[name] = time.Time{}
	if !s.inService(c, name) && wasUnhealthy {
		return
	}
	c.Emits = append(c.Emits, s.verdict(c, healed, now, now))
}

// Check declares UNHEALTHY every watched node silent for the timeout or
// longer, once: a node already UNHEALTHY is not declared again. When many of
// a cluster's nodes are silent together (Config.MassSilence; together: each
// silent for half a timeout or more when the first passes it), they are only
// unreachable: the scheduler places nothing there but ends no run, and they
// are declared UNHEALTHY when their silence lasts another full timeout from
// when the bus demonstrably delivered again (traffic arrived after they were
// found unreachable). When the
// check loop itself ran late by more than the timeout, health was stalled,
// not the nodes: everyone gets a full timeout of grace.
func (s *State) Check(now time.Time) *Change {
	c := newChange()
	c.checked = now
	c.Remedy = s.machine.Step(now, remedy.Tick{})
	if !s.lastCheck.IsZero() && now.Sub(s.lastCheck) > s.timeout {
		for _, n := range s.Nodes() {
			if n.Watched() {
				c.seen[n.Name] = now
			}
			if n.Unreachable {
				c.unreach[n.Name] = now
			}
		}
		return c
	}
	// A node whose records health is behind on (its partition's, or for a
	// node of unknown partition the worst, by more than half a timeout)
	// is not judged: its silence now may be records waiting in the topic,
	// health's own delay, not the node's. It still counts as quiet when
	// it looks so (a mass silence is judged as conservatively as before).
	worst := s.Behind(now)
	blind := func(name string) bool { return s.behindFor(name, now, worst) > s.timeout/2 }
	byCluster := map[string][]*Node{}
	for _, n := range s.Nodes() {
		if n.Watched() {
			byCluster[n.Cluster] = append(byCluster[n.Cluster], n)
		}
	}
	clusters := make([]string, 0, len(byCluster))
	for cl := range byCluster {
		clusters = append(clusters, cl)
	}
	sort.Strings(clusters)
	// faults are the nodes silent for a second full timeout after they were
	// declared UNHEALTHY, that remediation has not taken yet: a node that
	// does not come back by itself is repaired (a reboot first), not just
	// left out. One timeout alone does not: an agent restarting, a node
	// briefly cut off, come back without a reboot.
	var faults []remedy.Event
	for _, cl := range clusters {
		watched := byCluster[cl]
		var silent, fresh []*Node
		// quiet counts the nodes silent for half a timeout or more: nodes
		// cut off together fell silent at different points of their
		// heartbeat cycles, and the first to pass the timeout must not be
		// judged alone while the others are a moment behind it.
		quiet := 0
		for _, n := range watched {
			if n.Unhealthy {
				if last, ok := s.lastSeen[n.Name]; ok && now.Sub(last) >= 2*s.timeout && s.inService(c, n.Name) && !blind(n.Name) {
					faults = append(faults, remedy.Fault{Node: n.Name, Verdict: classify.Verdict{
						Severity: classify.SeverityCritical, Action: loomv1.RemediationAction_ACTION_REBOOT, Urgent: true,
						Reason: "no heartbeat for " + now.Sub(last).Truncate(time.Second).String(), GPU: -1}})
				}
				continue
			}
			last, ok := s.lastSeen[n.Name]
			if !ok {
				c.seen[n.Name] = now // never heard of since it joined: start its grace now
				continue
			}
			if now.Sub(last) >= s.timeout/2 {
				quiet++
			}
			if now.Sub(last) < s.timeout || blind(n.Name) {
				continue
			}
			silent = append(silent, n)
			if !n.Unreachable {
				fresh = append(fresh, n)
			}
		}
		mass := quiet >= 2 && float64(quiet) >= s.cfg.MassSilence*float64(len(watched))
		for _, n := range fresh {
			last := s.lastSeen[n.Name]
			if mass {
				un := s.edit(c, n.Name)
				un.Unreachable = true
				un.Reason = fmt.Sprintf("no heartbeat for %s, with %d of %d nodes: unreachable until confirmed", s.timeout, quiet, len(watched))
				c.unreach[n.Name] = now
				c.Emits = append(c.Emits, s.verdict(c, un, last, now))
				continue
			}
			s.fail(c, n, last, now)
		}
		// Unreachable nodes: failed once their silence outlasted another
		// full timeout since the bus was seen delivering again.
		for _, n := range silent {
			ev, ok := s.evidence[n.Name]
			if !n.Unreachable || !ok || now.Sub(ev) < s.timeout {
				continue
			}
			s.fail(c, n, s.lastSeen[n.Name], now)
		}
	}
	if len(faults) > 0 {
		c.Remedy = s.machine.Step(now, append([]remedy.Event{remedy.Tick{}}, faults...)...)
	}
	return c
}

// fail declares a silent node UNHEALTHY; the verdict is emitted unless
// remediation already holds the node out.
func (s *State) fail(c *Change, n *Node, last, now time.Time) {
	sick := s.edit(c, n.Name)
	sick.Unhealthy, sick.Unreachable, sick.Reason = true, false, "no heartbeat for "+s.timeout.String()
	c.unreach[n.Name] = time.Time{}
	if s.inService(c, n.Name) {
		c.Emits = append(c.Emits, s.verdict(c, sick, last, now))
	}
}

// verdict is the NodeHealthChanged of a silence, a resumption, or an
// unreachability: health and remediation state as health sees them now.
func (s *State) verdict(c *Change, n *Node, last, now time.Time) Emit {
	h := eventsv1.NodeHealth_HEALTHY
	if n.Unhealthy {
		h = eventsv1.NodeHealth_UNHEALTHY
	}
	return Emit{Key: n.Name, Payload: &eventsv1.NodeHealthChanged{
		Node: n.Name, Cluster: n.Cluster, Health: h, Reason: n.Reason, LastHeartbeat: timestamppb.New(last),
		State: s.viewState(c, n), SetBy: remedy.SetBy, Time: timestamppb.New(now), Unreachable: n.Unreachable,
		Action: silenceAction(n),
	}}
}

// silenceAction is a silence verdict's action: ACTION_NONE either way. A
// silent node's runs end now (ACTION_DRAIN would let them run on, as an
// operator's drain does); silence alone starts no repair (remediation acts
// on faults and checks; the provisioner relaunches a dead agent).
func silenceAction(*Node) loomv1.RemediationAction {
	return loomv1.RemediationAction_ACTION_NONE
}

// viewState is the remediation state health reports for a node: an
// unreachable node is NODE_UNREACHABLE; a silent one that remediation has in
// service is NODE_DRAINING (it is out); otherwise the machine's state.
func (s *State) viewState(c *Change, n *Node) loomv1.RemediationState {
	if n.Unreachable {
		return loomv1.RemediationState_NODE_UNREACHABLE
	}
	var r *remedy.Node
	if c != nil && c.Remedy != nil {
		r = c.Remedy.Nodes[n.Name]
	}
	if r == nil {
		r = s.machine.Node(n.Name)
	}
	if n.Unhealthy && (r == nil || r.InService()) {
		// Silent, and no repair holds it: down, as Slurm says of a node
		// that stopped answering (not drained: nobody took it out).
		return loomv1.RemediationState_NODE_DOWN
	}
	if r == nil {
		return loomv1.RemediationState_NODE_HEALTHY
	}
	return r.State
}

// View is health's whole view of one node, for ListNodeHealth.
func (s *State) View(name string) *loomv1.NodeHealth {
	n := s.nodes[name]
	if n == nil {
		return nil
	}
	out := &loomv1.NodeHealth{Node: n.Name, Hostname: n.Hostname, Cluster: n.Cluster, State: s.viewState(nil, n),
		Reason: n.Reason, SetBy: remedy.SetBy, Simulated: n.Simulated}
	if r := s.machine.Node(name); r != nil {
		if !n.Unhealthy && !n.Unreachable || !r.InService() {
			out.Reason, out.SetBy = r.Reason, r.SetBy
			out.StateTime = timestamppb.New(r.Since)
		}
		out.NextAction = r.Next
		out.DryRun = r.DryRun
		out.Failures = int32(len(r.Failures))
	}
	if last, ok := s.lastSeen[name]; ok {
		out.LastHeartbeat = timestamppb.New(last)
	}
	if t := s.telemetry[name]; t != nil {
		out.Gpus, out.Disks = t.GetGpus(), t.GetDisks()
		out.Simulated = out.Simulated || t.GetSimulated()
	}
	return out
}

// Policy is the policy health applies to cluster's nodes, as far as the
// state knows it (GetHealthPolicy without the scans' part, which is the
// scan package's): remediation's, with the cluster's repairs now, the
// heartbeat rules and the telemetry thresholds. Defaults are filled in.
func (s *State) Policy(cluster string) *loomv1.HealthPolicy {
	rc := s.machine.Config()
	used, limit, members := s.machine.Slots(cluster)
	th := s.cfg.Thresholds
	return &loomv1.HealthPolicy{Cluster: cluster, Remediation: rc.Mode.String(),
		MaxRemediating: rc.MaxRemediating, MaxRemediatingNodes: int32(limit), RemediatingNodes: int32(used), Nodes: int32(members),
		LemonFailures: int32(rc.LemonFailures), LemonWindow: durationpb.New(rc.LemonWindow),
		HeartbeatTimeout: durationpb.New(s.timeout), MassSilence: s.cfg.MassSilence,
		Thresholds: &loomv1.TelemetryThresholds{SbePerMinute: th.SBEPerMinute, NvlinkPerMinute: th.NVLinkPerMinute,
			GpuTemperatureMaxC: th.TemperatureC, DiskFull: th.DiskFull, DiskWarn: th.DiskWarn},
		DrainTimeout: durationpb.New(rc.DrainTimeout), ConfirmTimeout: durationpb.New(rc.ConfirmTimeout),
		RepairTimeout: durationpb.New(rc.RepairTimeout)}
}
