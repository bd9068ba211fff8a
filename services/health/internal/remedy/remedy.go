// Package remedy is health's remediation state machine, one per node, in the
// style of Determined's searcher: an event goes in, actions come out, and
// nothing else happens. It reads no clock (every step is given the time),
// does no I/O, draws its ids from a seeded generator, and its whole state is
// a Snapshot that Restore brings back, so a crashed service resumes exactly
// where it stopped and a test replays any sequence deterministically.
//
// A node's life:
//
//	HEALTHY ──fault──▶ DRAINING ──drained (or urgent)──▶ REBOOTING │ REIMAGING │ REPLACING
//	   ▲  └─check error─▶ SUSPECT ──confirm fails──▶ DRAINING          │
//	   └────────────── repair done and the confirming check passes ◀───┘
//
// A repair that does not fix the node (it fails, the confirming check fails,
// or the failure recurs within the lemon window) climbs the ladder: reset the
// GPU / reboot → reimage → replace → QUARANTINED. A node that fails
// LemonFailures times within LemonWindow is QUARANTINED (a lemon). At most
// MaxRemediating of a cluster's nodes are being repaired at once; the others
// wait, drained. Operators override any of it (Override, Report).
//
// Step computes without changing the machine; Commit makes a step's result
// part of it, once its outputs are durably written (see the app).
package remedy

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/resname"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/health/internal/classify"
)

// SetBy is who health names as having set a state it decided itself.
const SetBy = "loom-health"

// NotAvailable is the summary of the CHECK_ERROR an agent without a check
// runner answers; such a node is confirmed by a new host boot id instead.
const NotAvailable = "checks not available"

// Mode is what the machine may do.
type Mode int

const (
	// ModeOn decides and acts.
	ModeOn Mode = iota
	// ModeDryRun decides and records (NodeHealth.dry_run) and takes nodes
	// out as ModeOn does, but asks for no repair (no RemediateNode).
	ModeDryRun
	// ModeOff ignores faults, checks and overrides: only membership is kept.
	ModeOff
)

// ParseMode reads "on", "dry-run" or "off".
func ParseMode(s string) (Mode, error) {
	switch s {
	case "on", "":
		return ModeOn, nil
	case "dry-run", "dryrun", "dry_run":
		return ModeDryRun, nil
	case "off":
		return ModeOff, nil
	}
	return ModeOn, fmt.Errorf("remediation mode %q: want on, dry-run or off", s)
}

// String is the mode as its flag writes it.
func (m Mode) String() string {
	switch m {
	case ModeDryRun:
		return "dry-run"
	case ModeOff:
		return "off"
	}
	return "on"
}

// Remediation's default waits (Config): for a checkpoint-first node's
// drain, for the check confirming a repair, for the provisioner's repair.
const (
	DefaultDrainTimeout   = 10 * time.Minute
	DefaultConfirmTimeout = 10 * time.Minute
	DefaultRepairTimeout  = 30 * time.Minute
	// RepairMargin is how long past the provisioner's own deadline for a
	// repair (RemediationProgress) health still waits for its answer: the
	// provisioner answers at its deadline, and that answer takes a moment
	// to arrive.
	RepairMargin = 5 * time.Minute
	// MaxRepairDeadline is the longest deadline_in of a RemediationProgress
	// health takes (a day: the provisioner's boot timeout plus its
	// provider's longest expected boot); a longer one is refused, and the
	// repair is waited for -repair-timeout only.
	MaxRepairDeadline = 24 * time.Hour
)

// Config is the machine's policy.
type Config struct {
	Mode Mode
	// MaxRemediating is the share of a cluster's nodes that may be in repair
	// at once (at least 1 node). Default 0.1.
	MaxRemediating float64
	// LemonFailures failures within LemonWindow quarantine a node. Defaults 3, 24h.
	LemonFailures int
	LemonWindow   time.Duration
	// DrainTimeout bounds the wait for a checkpoint-first node's NodeDrained
	// before it is repaired anyway. Default 10m.
	DrainTimeout time.Duration
	// ConfirmTimeout bounds the wait for the confirming check after a repair;
	// RepairTimeout the wait for the provisioner's RemediationFinished, or
	// longer when the provisioner said it gives the repair longer
	// (Progress: its deadline plus RepairMargin). Past either, the repair
	// counts as failed. Defaults 10m and 30m.
	ConfirmTimeout time.Duration
	RepairTimeout  time.Duration
	// Seed seeds the ids (remediation and check run ids).
	Seed uint64
}

func (c Config) withDefaults() Config {
	if c.MaxRemediating <= 0 {
		c.MaxRemediating = 0.1
	}
	if c.LemonFailures <= 0 {
		c.LemonFailures = 3
	}
	if c.LemonWindow <= 0 {
		c.LemonWindow = 24 * time.Hour
	}
	if c.DrainTimeout <= 0 {
		c.DrainTimeout = DefaultDrainTimeout
	}
	if c.ConfirmTimeout <= 0 {
		c.ConfirmTimeout = DefaultConfirmTimeout
	}
	if c.RepairTimeout <= 0 {
		c.RepairTimeout = DefaultRepairTimeout
	}
	return c
}

// Node is one node's remediation record. It is plain data (JSON) so that it
// is stored as it is.
type Node struct {
	Name     string                  `json:"name"`
	Cluster  string                  `json:"cluster"`
	Hostname string                  `json:"hostname,omitempty"`
	State    loomv1.RemediationState `json:"state"`
	Reason   string                  `json:"reason,omitempty"`
	SetBy    string                  `json:"set_by,omitempty"`
	Since    time.Time               `json:"since"`
	// Next is the repair the node is waiting for, or undergoing.
	Next            loomv1.RemediationAction `json:"next,omitempty"`
	Xid             int32                    `json:"xid,omitempty"`
	Urgent          bool                     `json:"urgent,omitempty"`
	CheckpointFirst bool                     `json:"checkpoint_first,omitempty"`
	// Failures are when the node failed, within the lemon window.
	Failures []time.Time `json:"failures,omitempty"`
	// LastRepair and LastRepairAt are the latest repair started, for the
	// ladder: a failure soon after it climbs past it.
	LastRepair   loomv1.RemediationAction `json:"last_repair,omitempty"`
	LastRepairAt time.Time                `json:"last_repair_at"`
	// Repairing: a repair holds one of the cluster's slots (RemediateNode
	// sent, or its confirming check awaited). RepairID names it.
	Repairing bool   `json:"repairing,omitempty"`
	RepairID  string `json:"repair_id,omitempty"`
	// RepairDeadline is the provisioner's deadline for the repair in
	// flight (Progress) plus RepairMargin; zero when it said none (a
	// provisioner from before RemediationProgress): RepairTimeout alone.
	RepairDeadline time.Time `json:"repair_deadline,omitzero"`
	// GaveUpID is the repair health last gave up waiting for (its
	// timeout): its late answer changes nothing but the history.
	GaveUpID string `json:"gave_up_id,omitempty"`
	// Confirming: the repair is done; the confirming check (ConfirmID) is
	// awaited. ConfirmErrors counts its CHECK_ERRORs.
	Confirming    bool   `json:"confirming,omitempty"`
	ConfirmID     string `json:"confirm_id,omitempty"`
	ConfirmErrors int    `json:"confirm_errors,omitempty"`
	// AwaitBoot: the confirming check is not available on the node: a new
	// host boot id confirms it.
	AwaitBoot bool `json:"await_boot,omitempty"`
	// BootID is the node's latest host boot id; BootAtRepair the one it had
	// when the repair started; Registered that the agent registered since.
	BootID       string `json:"boot_id,omitempty"`
	BootAtRepair string `json:"boot_at_repair,omitempty"`
	Registered   bool   `json:"registered,omitempty"`
	// Drained: the scheduler says the node holds no job any more.
	Drained bool `json:"drained,omitempty"`
	// Hold: an operator drained it: no repair, it stays out until resumed.
	Hold bool `json:"hold,omitempty"`
	// HoldReason and HoldBy are the drain's, when it was asked during a
	// repair: the node's reason and setter once the repair is done.
	HoldReason string `json:"hold_reason,omitempty"`
	HoldBy     string `json:"hold_by,omitempty"`
	// CheckErrors counts CHECK_ERRORs in a row outside a repair.
	CheckErrors int `json:"check_errors,omitempty"`
	// SuspectCheck names the check a SUSPECT node awaits (its run id).
	SuspectCheck string `json:"suspect_check,omitempty"`
	DryRun       bool   `json:"dry_run,omitempty"`
}

// InService reports whether the node takes work: HEALTHY or SUSPECT.
func (n *Node) InService() bool {
	return n.State == loomv1.RemediationState_NODE_HEALTHY || n.State == loomv1.RemediationState_NODE_SUSPECT
}

func (n *Node) clone() *Node {
	c := *n
	c.Failures = append([]time.Time(nil), n.Failures...)
	return &c
}

// Event is something that happened to a node: one of the types below.
type Event interface{ node() string }

// Join says a node exists (or changed its hostname); Leave that it is gone.
type Join struct{ Node, Cluster, Hostname string }

// Leave says a node was removed.
type Leave struct{ Node string }

// Fault is a finding that calls for a repair (classify's verdict), by SetBy
// (empty: loom-health).
type Fault struct {
	Node    string
	Verdict classify.Verdict
	SetBy   string
}

// Report is an operator's ReportFaultyNodes: taken out and repaired as if a
// check had failed.
type Report struct{ Node, User, Reason string }

// Check is a health check's result on the node.
type Check struct {
	Node   string
	Result *loomv1.HealthCheckResult
}

// Registered is the node's agent registering, with its host boot id.
type Registered struct{ Node, HostBootID string }

// Repaired is the provisioner's RemediationFinished. Replacement is the new
// node's name after a replacement (empty, or the node's own name, when it
// was replaced in place). Cluster is the node's (the history's, when the
// replaced node has already left).
type Repaired struct {
	Node, Cluster, ID string
	OK                bool
	Message           string
	Replacement       string
	// Action is the repair the answer is about.
	Action loomv1.RemediationAction
}

// Progress is the provisioner's RemediationProgress: it gives repair ID of
// the node DeadlineIn from now before it answers it failed.
type Progress struct {
	Node, ID   string
	DeadlineIn time.Duration
}

// Drained is the scheduler's NodeDrained: the node holds no job.
type Drained struct{ Node string }

// Override is an operator's UpdateNodeRemediation: ACTION_DRAIN,
// ACTION_RESUME (also releases from quarantine), ACTION_QUARANTINE,
// ACTION_REBOOT, ACTION_REIMAGE or ACTION_REPLACE.
type Override struct {
	Node   string
	Action loomv1.RemediationAction
	User   string
	Reason string
}

// Tick lets time pass: drain, repair and confirm timeouts.
type Tick struct{}

func (e Join) node() string       { return e.Node }
func (e Leave) node() string      { return e.Node }
func (e Fault) node() string      { return e.Node }
func (e Report) node() string     { return e.Node }
func (e Check) node() string      { return e.Node }
func (e Registered) node() string { return e.Node }
func (e Repaired) node() string   { return e.Node }
func (e Progress) node() string   { return e.Node }
func (e Drained) node() string    { return e.Node }
func (e Override) node() string   { return e.Node }
func (Tick) node() string         { return "" }

// Emit is an event the step asks to publish, keyed by node name:
// NodeHealthChanged, RemediateNode or RunHealthCheck.
type Emit struct {
	Key     string
	Payload proto.Message
}

// Result is what one step decided: the node records it changed (nil: the
// node is gone), the events to emit, and the generator's state after it.
type Result struct {
	Nodes map[string]*Node
	Emits []Emit
	// History are NodeHealthChanged records for the cluster's health
	// history only, not published: what happened to a node that no
	// consumer is to act on (a node replaced, about to leave).
	History []*eventsv1.NodeHealthChanged
	rng     rand.PCG
	drew    bool
}

// Durable reports whether the result changes anything.
func (r *Result) Durable() bool {
	return len(r.Nodes) > 0 || len(r.Emits) > 0 || len(r.History) > 0 || r.drew
}

// RNG is the generator's state after the step, to store with its nodes.
func (r *Result) RNG() []byte {
	b, _ := r.rng.MarshalBinary() // a PCG always marshals
	return b
}

// Machine is every node's remediation state. Not safe for concurrent use.
type Machine struct {
	cfg   Config
	nodes map[string]*Node
	rng   rand.PCG
}

// New returns an empty machine with cfg's policy (defaults filled in).
func New(cfg Config) *Machine {
	cfg = cfg.withDefaults()
	return &Machine{cfg: cfg, nodes: map[string]*Node{}, rng: *rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)}
}

// Config returns the machine's policy, defaults filled in.
func (m *Machine) Config() Config { return m.cfg }

// Slots reports cluster's nodes in repair now (used), how many may be at
// once (limit: MaxRemediating of them, at least one) and its nodes
// (members), as committed.
func (m *Machine) Slots(cluster string) (used, limit, members int) {
	for _, n := range m.nodes {
		if n.Cluster != cluster {
			continue
		}
		members++
		if n.Repairing {
			used++
		}
	}
	return used, Limit(m.cfg.MaxRemediating, members), members
}

// Snapshot is a machine's whole state.
type Snapshot struct {
	Nodes []*Node `json:"nodes"`
	RNG   []byte  `json:"rng"`
}

// Snapshot returns a copy of the state, nodes by name.
func (m *Machine) Snapshot() Snapshot {
	s := Snapshot{RNG: mustMarshal(&m.rng)}
	for _, n := range m.Nodes() {
		s.Nodes = append(s.Nodes, n)
	}
	return s
}

func mustMarshal(p *rand.PCG) []byte {
	b, _ := p.MarshalBinary()
	return b
}

// Restore returns a machine with cfg's policy and s's state. An empty RNG
// (nothing stored yet) starts the generator from cfg.Seed.
func Restore(cfg Config, s Snapshot) (*Machine, error) {
	m := New(cfg)
	if len(s.RNG) > 0 {
		if err := m.rng.UnmarshalBinary(s.RNG); err != nil {
			return nil, fmt.Errorf("restore remediation: %w", err)
		}
	}
	for _, n := range s.Nodes {
		m.nodes[n.Name] = n.clone()
	}
	return m, nil
}

// Node returns a copy of the node's record, or nil.
func (m *Machine) Node(name string) *Node {
	if n := m.nodes[name]; n != nil {
		return n.clone()
	}
	return nil
}

// Nodes returns copies of every record, by name.
func (m *Machine) Nodes() []*Node {
	out := make([]*Node, 0, len(m.nodes))
	for _, n := range m.nodes {
		out = append(out, n.clone())
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Name < out[b].Name })
	return out
}

// Commit makes r part of the machine.
func (m *Machine) Commit(r *Result) {
	for name, n := range r.Nodes {
		if n == nil {
			delete(m.nodes, name)
		} else {
			m.nodes[name] = n
		}
	}
	m.rng = r.rng
}

// Apply is Step then Commit, for callers with nothing to write in between.
func (m *Machine) Apply(now time.Time, evs ...Event) *Result {
	r := m.Step(now, evs...)
	m.Commit(r)
	return r
}

// step is one Step's working set: records it read for writing are copied
// into r.Nodes, so the machine itself is untouched until Commit.
type step struct {
	m   *Machine
	now time.Time
	r   *Result
}

func (s *step) get(name string) *Node {
	if n, ok := s.r.Nodes[name]; ok {
		return n
	}
	n := s.m.nodes[name]
	if n == nil {
		return nil
	}
	c := n.clone()
	s.r.Nodes[name] = c
	return c
}

// peek reads a node without marking it changed.
func (s *step) peek(name string) *Node {
	if n, ok := s.r.Nodes[name]; ok {
		return n
	}
	return s.m.nodes[name]
}

func (s *step) names() []string {
	seen := map[string]bool{}
	var out []string
	for name := range s.m.nodes {
		seen[name] = true
		out = append(out, name)
	}
	for name, n := range s.r.Nodes {
		if !seen[name] && n != nil {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

func (s *step) id() string {
	s.r.drew = true
	return fmt.Sprintf("%016x", s.r.rng.Uint64())
}

func (s *step) emit(key string, p proto.Message) {
	s.r.Emits = append(s.r.Emits, Emit{Key: key, Payload: p})
}

// Step computes what evs do at now, one after the other, without changing
// the machine: the result holds every record they changed.
func (m *Machine) Step(now time.Time, evs ...Event) *Result {
	s := &step{m: m, now: now, r: &Result{Nodes: map[string]*Node{}, rng: m.rng}}
	for _, ev := range evs {
		s.apply(ev)
	}
	// Records read but left as they were are not changes.
	for name, n := range s.r.Nodes {
		if old := m.nodes[name]; n != nil && old != nil && equal(old, n) {
			delete(s.r.Nodes, name)
		}
	}
	return s.r
}

func (s *step) apply(ev Event) {
	off := s.m.cfg.Mode == ModeOff
	switch e := ev.(type) {
	case Join:
		s.join(e)
	case Leave:
		if n := s.peek(e.Node); n != nil {
			s.r.Nodes[e.Node] = nil
			s.startWaiting(n.Cluster)
		}
	case Registered:
		s.registered(e)
	case Tick:
		if !off {
			s.tick()
		}
	case Fault:
		if !off {
			if n := s.get(e.Node); n != nil {
				s.fault(n, e.Verdict, orDefault(e.SetBy, SetBy))
			}
		}
	case Report:
		if !off {
			if n := s.get(e.Node); n != nil {
				v := classify.Verdict{Severity: classify.SeverityCritical, Action: loomv1.RemediationAction_ACTION_REBOOT,
					CheckpointFirst: true, Reason: orDefault(e.Reason, "reported faulty"), GPU: -1}
				s.fault(n, v, orDefault(e.User, SetBy))
			}
		}
	case Check:
		if !off {
			if n := s.get(e.Node); n != nil {
				s.check(n, e.Result)
			}
		}
	case Repaired:
		if !off {
			if n := s.get(e.Node); n != nil {
				s.repaired(n, e)
			} else if e.OK && e.Replacement != "" && e.Replacement != e.Node {
				// The provisioner removes the replaced node (NodeRemoved, so
				// it has left) before it says the replacement is done.
				s.replacedHistory(e.Node, e.Cluster, loomv1.RemediationState_NODE_REPLACING, e.Replacement)
			}
		}
	case Progress:
		if n := s.peek(e.Node); !off && n != nil && n.Repairing && !n.Confirming && e.ID != "" && e.ID == n.RepairID {
			n = s.get(e.Node)
			n.RepairDeadline = s.now.Add(max(e.DeadlineIn, 0) + RepairMargin)
		}
	case Drained:
		if !off {
			if n := s.get(e.Node); n != nil {
				n.Drained = true
				if n.State == loomv1.RemediationState_NODE_DRAINING {
					s.tryStart(n)
				}
			}
		}
	case Override:
		if !off {
			if n := s.get(e.Node); n != nil {
				s.override(n, e)
			}
		}
	}
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

func (s *step) join(e Join) {
	if n := s.peek(e.Node); n != nil {
		if n.Cluster != e.Cluster || (e.Hostname != "" && n.Hostname != e.Hostname) {
			n = s.get(e.Node)
			n.Cluster = e.Cluster
			if e.Hostname != "" {
				n.Hostname = e.Hostname
			}
		}
		return
	}
	s.r.Nodes[e.Node] = &Node{Name: e.Node, Cluster: e.Cluster, Hostname: e.Hostname,
		State: loomv1.RemediationState_NODE_HEALTHY, SetBy: SetBy, Since: s.now}
	s.startWaiting(e.Cluster) // one more member may mean one more slot
}

func (s *step) registered(e Registered) {
	n := s.peek(e.Node)
	if n == nil {
		return
	}
	if n.BootID == e.HostBootID && (!n.Repairing || n.Registered) {
		return
	}
	if n.Repairing && e.HostBootID != "" && e.HostBootID == n.BootAtRepair && n.BootID != n.BootAtRepair {
		// The boot before the repair, reported after a newer one: late,
		// or replayed by the node's earlier identity. A boot id never
		// comes again, so it is stale, and taking it would make the node
		// look never rebooted until the confirmation times out and the
		// repair escalates.
		return
	}
	n = s.get(e.Node)
	if e.HostBootID != "" {
		n.BootID = e.HostBootID
	}
	if n.Repairing {
		n.Registered = true
	}
	if n.Confirming && n.AwaitBoot && s.rebooted(n) {
		s.healthy(n, true, SetBy, "repaired ("+actionName(n.LastRepair)+"): the node came back with a new boot")
	}
}

// rebooted reports whether the node has booted since its repair started: a
// new host boot id, or (for an agent that reports none) a registration.
func (s *step) rebooted(n *Node) bool {
	if n.BootID != "" {
		return n.BootID != n.BootAtRepair
	}
	return n.Registered
}

// fault takes an in-service node out for v, or makes an out-of-service one's
// case worse. A restart-job verdict only restarts the node's job.
func (s *step) fault(n *Node, v classify.Verdict, by string) {
	if !v.Acts() {
		return
	}
	if v.Action == loomv1.RemediationAction_ACTION_RESTART_JOB {
		if n.InService() {
			s.emitHealth(n, eventsv1.NodeHealth_HEALTHY, loomv1.RemediationAction_ACTION_RESTART_JOB, v.Xid, v.Reason, by, false)
		}
		return
	}
	if !n.InService() {
		s.worse(n, v)
		return
	}
	n.Failures = append(s.recent(n.Failures), s.now)
	if len(n.Failures) >= s.m.cfg.LemonFailures {
		s.quarantine(n, SetBy, fmt.Sprintf("lemon: %d failures within %s: %s", len(n.Failures), s.m.cfg.LemonWindow, v.Reason))
		return
	}
	action := v.Action
	if n.LastRepair != loomv1.RemediationAction_REMEDIATION_ACTION_UNSPECIFIED && s.now.Sub(n.LastRepairAt) < s.m.cfg.LemonWindow &&
		classify.Rank(action) <= classify.Rank(n.LastRepair) {
		// The failure came back after a repair: that repair does not fix it.
		action = next(n.LastRepair)
		if action == loomv1.RemediationAction_REMEDIATION_ACTION_UNSPECIFIED {
			s.quarantine(n, SetBy, "failed again after a replacement: "+v.Reason)
			return
		}
	}
	n.State = loomv1.RemediationState_NODE_DRAINING
	n.Since = s.now
	n.Reason, n.SetBy, n.Xid = v.Reason, by, v.Xid
	n.Next = action
	n.Urgent = v.Urgent
	n.CheckpointFirst = !v.Urgent
	n.Drained = false
	n.Hold, n.HoldReason, n.HoldBy = false, "", ""
	n.CheckErrors = 0
	n.SuspectCheck = ""
	s.emitHealth(n, eventsv1.NodeHealth_UNHEALTHY, n.Next, v.Xid, v.Reason, by, n.CheckpointFirst)
	s.tryStart(n)
}

// worse handles a new fault on a node already out of service: a repaired
// node awaiting its confirmation failed again (climb the ladder); a node
// still draining for a checkpoint takes a heavier or urgent verdict.
func (s *step) worse(n *Node, v classify.Verdict) {
	switch {
	case n.Confirming:
		if !n.Registered {
			// Reported before the repaired node's agent registered: the
			// old boot's news (a node's telemetry is one ordered stream).
			return
		}
		s.escalate(n, "failed again after "+actionName(n.LastRepair)+": "+v.Reason, v.Action)
	case n.State == loomv1.RemediationState_NODE_DRAINING && !n.Hold:
		changed := false
		if classify.Rank(v.Action) > classify.Rank(n.Next) {
			n.Next, n.Reason, n.Xid = v.Action, v.Reason, v.Xid
			changed = true
		}
		if v.Urgent && !n.Urgent {
			n.Urgent, n.CheckpointFirst = true, false
			n.Reason, n.Xid = v.Reason, v.Xid
			changed = true
		}
		if changed {
			s.emitHealth(n, eventsv1.NodeHealth_UNHEALTHY, n.Next, n.Xid, n.Reason, n.SetBy, n.CheckpointFirst)
			s.tryStart(n)
		}
	}
}

func (s *step) recent(ts []time.Time) []time.Time {
	var out []time.Time
	for _, t := range ts {
		if s.now.Sub(t) < s.m.cfg.LemonWindow {
			out = append(out, t)
		}
	}
	return out
}

// next is the ladder's next rung after a repair that did not help;
// UNSPECIFIED after a replacement (quarantine).
func next(a loomv1.RemediationAction) loomv1.RemediationAction {
	switch a {
	case loomv1.RemediationAction_ACTION_RESET_GPU, loomv1.RemediationAction_ACTION_REBOOT:
		return loomv1.RemediationAction_ACTION_REIMAGE
	case loomv1.RemediationAction_ACTION_REIMAGE:
		return loomv1.RemediationAction_ACTION_REPLACE
	case loomv1.RemediationAction_ACTION_REPLACE:
		return loomv1.RemediationAction_REMEDIATION_ACTION_UNSPECIFIED
	}
	return loomv1.RemediationAction_ACTION_REBOOT
}

// stateOf is the state a node is in while action is done to it.
func stateOf(a loomv1.RemediationAction) loomv1.RemediationState {
	switch a {
	case loomv1.RemediationAction_ACTION_REIMAGE:
		return loomv1.RemediationState_NODE_REIMAGING
	case loomv1.RemediationAction_ACTION_REPLACE:
		return loomv1.RemediationState_NODE_REPLACING
	}
	return loomv1.RemediationState_NODE_REBOOTING
}

// provisionerAction is what the provisioner is asked to do: it knows reboot,
// reimage and replace; a GPU reset is done as a reboot (the local provider
// has no GPU to reset, and a reboot resets every GPU).
func provisionerAction(a loomv1.RemediationAction) loomv1.RemediationAction {
	if a == loomv1.RemediationAction_ACTION_RESET_GPU {
		return loomv1.RemediationAction_ACTION_REBOOT
	}
	return a
}

func actionName(a loomv1.RemediationAction) string {
	return strings.ToLower(strings.TrimPrefix(a.String(), "ACTION_"))
}

// Limit is how many of a cluster of members nodes may be in repair at once:
// share of them, at least one.
func Limit(share float64, members int) int {
	return max(1, int(math.Floor(share*float64(members)+1e-9)))
}

// slots returns how many of cluster's nodes are in repair, and the limit.
func (s *step) slots(cluster string) (used, limit int) {
	members := 0
	for _, name := range s.names() {
		n := s.peek(name)
		if n == nil || n.Cluster != cluster {
			continue
		}
		members++
		if n.Repairing {
			used++
		}
	}
	return used, Limit(s.m.cfg.MaxRemediating, members)
}

// tryStart starts a draining node's repair if it may: it is urgent or
// drained (or waited DrainTimeout), is not held, and a slot is free.
// Otherwise it waits, drained.
func (s *step) tryStart(n *Node) {
	if n.State != loomv1.RemediationState_NODE_DRAINING || n.Hold || n.Repairing {
		return
	}
	if !n.Urgent && !n.Drained && s.now.Sub(n.Since) < s.m.cfg.DrainTimeout {
		return
	}
	if s.m.cfg.Mode == ModeDryRun {
		n.DryRun = true
		return
	}
	if used, limit := s.slots(n.Cluster); used >= limit {
		return
	}
	a := n.Next
	n.State = stateOf(a)
	n.Since = s.now
	n.Repairing = true
	n.RepairID = s.id()
	n.RepairDeadline = time.Time{}
	n.LastRepair, n.LastRepairAt = a, s.now
	n.BootAtRepair, n.Registered = n.BootID, false
	n.Confirming, n.ConfirmID, n.ConfirmErrors, n.AwaitBoot = false, "", 0, false
	n.DryRun = false
	s.emitHealth(n, eventsv1.NodeHealth_UNHEALTHY, a, n.Xid, n.Reason, n.SetBy, false)
	s.emit(n.Name, &eventsv1.RemediateNode{Node: n.Name, Cluster: n.Cluster, Action: provisionerAction(a),
		RemediationId: n.RepairID, Reason: n.Reason})
}

// startWaiting starts the repairs that wait for a slot in cluster, oldest
// first (then by name), as far as the slots go.
func (s *step) startWaiting(cluster string) {
	var waiting []*Node
	for _, name := range s.names() {
		n := s.peek(name)
		if n != nil && n.Cluster == cluster && n.State == loomv1.RemediationState_NODE_DRAINING && !n.Hold && !n.Repairing {
			waiting = append(waiting, n)
		}
	}
	sort.SliceStable(waiting, func(a, b int) bool { return waiting[a].Since.Before(waiting[b].Since) })
	for _, w := range waiting {
		if used, limit := s.slots(cluster); used >= limit && s.m.cfg.Mode != ModeDryRun {
			return
		}
		s.tryStart(s.get(w.Name))
	}
}

func (s *step) repaired(n *Node, e Repaired) {
	if e.ID != "" && e.ID == n.GaveUpID && (!n.Repairing || e.ID != n.RepairID) {
		// The answer to a repair health gave up waiting for: it counted as
		// failed and the ladder went on, but the history says how it ended.
		n.GaveUpID = ""
		if e.OK && e.Replacement != "" && e.Replacement != n.Name {
			s.replacedHistory(n.Name, n.Cluster, n.State, e.Replacement)
			return
		}
		outcome := "finished"
		if !e.OK {
			outcome = "failed"
		}
		s.r.History = append(s.r.History, &eventsv1.NodeHealthChanged{Node: n.Name, Cluster: n.Cluster, Health: eventsv1.NodeHealth_UNHEALTHY,
			Reason: fmt.Sprintf("%s %s after health gave up waiting: %s", actionName(provisionerAction(cmp.Or(e.Action, n.LastRepair))), outcome, e.Message), State: n.State,
			Action: n.Next, SetBy: SetBy, Time: timestamppb.New(s.now)})
		return
	}
	if !n.Repairing || n.Confirming || e.ID != n.RepairID {
		return // a stale or repeated answer
	}
	if !e.OK {
		s.escalate(n, fmt.Sprintf("%s failed: %s", actionName(n.LastRepair), e.Message), 0)
		return
	}
	if n.LastRepair == loomv1.RemediationAction_ACTION_REPLACE && e.Replacement != "" && e.Replacement != n.Name {
		// The old node leaves (NodeRemoved); its replacement joins as a new
		// member. The slot is free now. The history says which node took
		// its place; nothing is published, since a verdict on a node that
		// is leaving could reach the scheduler after it left.
		n.Repairing = false
		n.Reason = "replaced by " + hostOf(e.Replacement)
		s.replacedHistory(n.Name, n.Cluster, n.State, e.Replacement)
		s.startWaiting(n.Cluster)
		return
	}
	n.Confirming = true
	n.Since = s.now
	s.confirm(n)
}

// replacedHistory records in the history (only: node is leaving, see
// Result.History) that replacement took node's place.
func (s *step) replacedHistory(node, cluster string, state loomv1.RemediationState, replacement string) {
	if n, err := resname.SplitNode(node); cluster == "" && err == nil {
		cluster = n.Cluster.String()
	}
	s.r.History = append(s.r.History, &eventsv1.NodeHealthChanged{Node: node, Cluster: cluster,
		Health: eventsv1.NodeHealth_UNHEALTHY, Reason: "replaced by " + hostOf(replacement), State: state,
		Action: loomv1.RemediationAction_ACTION_REPLACE, SetBy: SetBy, Time: timestamppb.New(s.now), Repaired: true})
}

// hostOf is a node name's host part ("gpu-0002"), or the name itself when
// it is not a node's.
func hostOf(name string) string {
	if n, err := resname.SplitNode(name); err == nil {
		return n.Host
	}
	return name
}

// confirm asks the repaired node for a confirming check.
func (s *step) confirm(n *Node) {
	n.ConfirmID = s.id()
	s.emit(n.Name, &eventsv1.RunHealthCheck{Node: n.Name, Cluster: n.Cluster, RunId: n.ConfirmID, Check: "gpu_diag", Level: 1,
		Trigger: "confirm", AllowBusy: true})
}

// escalate climbs the ladder after a repair that did not fix the node: to
// its next rung, or to atLeast, the action the failure itself asks for,
// when that is heavier (0: none).
func (s *step) escalate(n *Node, reason string, atLeast loomv1.RemediationAction) {
	a := next(n.LastRepair)
	// The ladder's next rung, unless the failure itself asks for more: a
	// row remapping failure seen after a GPU reset needs the replacement
	// it asks for, not a reimage first.
	if a != loomv1.RemediationAction_REMEDIATION_ACTION_UNSPECIFIED && classify.Rank(atLeast) > classify.Rank(a) {
		a = atLeast
	}
	n.Repairing, n.Confirming, n.AwaitBoot, n.ConfirmErrors = false, false, false, 0
	if a == loomv1.RemediationAction_REMEDIATION_ACTION_UNSPECIFIED {
		s.quarantine(n, SetBy, reason)
		s.startWaiting(n.Cluster)
		return
	}
	n.State = loomv1.RemediationState_NODE_DRAINING
	n.Since = s.now
	n.Next = a
	n.Reason = reason
	n.SetBy = SetBy
	n.Drained, n.Urgent, n.CheckpointFirst = true, true, false // it runs nothing: it was being repaired
	s.tryStart(n)
	s.startWaiting(n.Cluster)
}

func (s *step) quarantine(n *Node, by, reason string) {
	wasIn := n.InService()
	n.State = loomv1.RemediationState_NODE_QUARANTINED
	n.Since = s.now
	n.Reason, n.SetBy = reason, by
	n.Next = loomv1.RemediationAction_ACTION_QUARANTINE
	n.Repairing, n.Confirming, n.AwaitBoot = false, false, false
	n.RepairID = ""
	n.SuspectCheck = ""
	s.emitHealth(n, eventsv1.NodeHealth_UNHEALTHY, loomv1.RemediationAction_ACTION_QUARANTINE, n.Xid, reason, by, wasIn)
}

// withCause is reason, and when a repair of n has just ended (ended), ",
// for: " and the verdict that took n out: a local repair takes about a
// second, and that verdict would be gone from the node's health before
// anyone looked.
func withCause(n *Node, reason string, ended bool) string {
	if ended && n.Reason != "" {
		return reason + ", for: " + n.Reason
	}
	return reason
}

// healthy puts the node back in service. repaired says it was repaired (or
// an operator vouches for it) and confirmed: jobs' exclusions of it expire.
func (s *step) healthy(n *Node, repaired bool, by, reason string) {
	wasRepairing := n.Repairing
	if n.Hold && by == SetBy {
		// An operator drained it during the repair: it stays out, drained
		// as they asked (their reason in sinfo -R), and the history says
		// the repair is done (only there: published, a HEALTHY would put
		// the node back in service for a moment).
		done := withCause(n, reason, repaired && wasRepairing)
		holdBy := orDefault(n.HoldBy, n.SetBy)
		s.r.History = append(s.r.History, &eventsv1.NodeHealthChanged{Node: n.Name, Cluster: n.Cluster, Health: eventsv1.NodeHealth_UNHEALTHY,
			Reason: done + "; held by " + holdBy + "'s drain", State: n.State, Action: loomv1.RemediationAction_ACTION_DRAIN,
			SetBy: SetBy, Time: timestamppb.New(s.now)})
		n.State = loomv1.RemediationState_NODE_DRAINING
		n.Repairing, n.Confirming, n.AwaitBoot = false, false, false
		n.Reason, n.SetBy = orDefault(n.HoldReason, "drained by "+holdBy), holdBy
		n.Next = loomv1.RemediationAction_ACTION_DRAIN
		n.Xid = 0
		n.Urgent, n.CheckpointFirst = false, false
		n.Since = s.now
		s.emitHealth(n, eventsv1.NodeHealth_UNHEALTHY, loomv1.RemediationAction_ACTION_DRAIN, 0, n.Reason, holdBy, false)
		if wasRepairing {
			s.startWaiting(n.Cluster)
		}
		return
	}
	reason = withCause(n, reason, repaired && by == SetBy && wasRepairing)
	n.State = loomv1.RemediationState_NODE_HEALTHY
	n.Since = s.now
	n.Reason, n.SetBy = reason, by
	n.Next = loomv1.RemediationAction_ACTION_NONE
	n.Repairing, n.Confirming, n.AwaitBoot, n.Hold, n.DryRun = false, false, false, false, false
	n.HoldReason, n.HoldBy = "", ""
	n.RepairID, n.ConfirmID, n.SuspectCheck = "", "", ""
	n.Urgent, n.CheckpointFirst, n.Drained = false, false, false
	n.ConfirmErrors, n.CheckErrors = 0, 0
	n.Xid = 0
	s.emitHealthRepaired(n, reason, by, repaired)
	if wasRepairing {
		s.startWaiting(n.Cluster)
	}
}

func (s *step) check(n *Node, r *loomv1.HealthCheckResult) {
	out := r.GetOutcome()
	runID := r.GetName()
	if i := strings.LastIndexByte(runID, '/'); i >= 0 {
		runID = runID[i+1:]
	}
	switch {
	case n.Confirming:
		// Only the confirming check asked for last answers it: an earlier
		// confirm's result (one a repair cut short, re-run by the new
		// agent from its uncommitted command; one asked again after an
		// error) says nothing of this repair.
		if runID != n.ConfirmID {
			if r.GetTrigger() != "confirm" && out == loomv1.CheckOutcome_CHECK_FAIL && n.Registered {
				s.escalate(n, classify.CheckFailed(r).Reason, classify.CheckFailed(r).Action)
			}
			return
		}
		switch out {
		case loomv1.CheckOutcome_CHECK_PASS, loomv1.CheckOutcome_CHECK_WARN:
			s.healthy(n, true, SetBy, "repaired ("+actionName(n.LastRepair)+") and confirmed by "+orDefault(r.GetCheck(), "a check"))
		case loomv1.CheckOutcome_CHECK_FAIL:
			s.escalate(n, "confirm after "+actionName(n.LastRepair)+": "+classify.CheckFailed(r).Reason, classify.CheckFailed(r).Action)
		default: // ERROR, SKIPPED
			if out == loomv1.CheckOutcome_CHECK_SKIPPED || strings.Contains(r.GetSummary(), NotAvailable) {
				if s.rebooted(n) {
					s.healthy(n, true, SetBy, "repaired ("+actionName(n.LastRepair)+"): the node came back with a new boot")
				} else {
					n.AwaitBoot = true
				}
				return
			}
			n.ConfirmErrors++
			if n.ConfirmErrors >= 2 {
				s.escalate(n, "confirm after "+actionName(n.LastRepair)+": check errored twice: "+r.GetSummary(), 0)
				return
			}
			s.confirm(n)
		}
	case n.InService():
		switch out {
		case loomv1.CheckOutcome_CHECK_PASS, loomv1.CheckOutcome_CHECK_WARN:
			n.CheckErrors = 0
			if n.State == loomv1.RemediationState_NODE_SUSPECT {
				s.healthy(n, false, SetBy, "confirmed by "+orDefault(r.GetCheck(), "a check"))
			}
		case loomv1.CheckOutcome_CHECK_FAIL:
			s.fault(n, classify.CheckFailed(r), SetBy)
		case loomv1.CheckOutcome_CHECK_ERROR:
			if strings.Contains(r.GetSummary(), NotAvailable) {
				// The node cannot run checks at all: neither for nor against it.
				if n.State == loomv1.RemediationState_NODE_SUSPECT {
					s.healthy(n, false, SetBy, "no checks available to confirm")
				}
				return
			}
			n.CheckErrors++
			if n.CheckErrors >= 2 {
				v := classify.CheckFailed(r)
				v.Reason = "check " + r.GetCheck() + " errored twice in a row: " + r.GetSummary()
				s.fault(n, v, SetBy)
				return
			}
			// One error counts against the check, not the node: ask again.
			n.State = loomv1.RemediationState_NODE_SUSPECT
			n.Since = s.now
			n.Reason = "check " + r.GetCheck() + " errored: " + r.GetSummary()
			n.SetBy = SetBy
			n.SuspectCheck = s.id()
			level := r.GetLevel()
			s.emit(n.Name, &eventsv1.RunHealthCheck{Node: n.Name, Cluster: n.Cluster, RunId: n.SuspectCheck, Check: orDefault(r.GetCheck(), "gpu_diag"),
				Level: level, Trigger: "confirm", AllowBusy: true})
			s.emitHealth(n, eventsv1.NodeHealth_HEALTHY, loomv1.RemediationAction_ACTION_NONE, 0, n.Reason, SetBy, false)
		}
	}
}

func (s *step) override(n *Node, e Override) {
	by := orDefault(e.User, "operator")
	switch e.Action {
	case loomv1.RemediationAction_ACTION_DRAIN:
		if !n.InService() {
			n.Hold = true
			n.SetBy = by
			n.HoldReason, n.HoldBy = orDefault(e.Reason, "drained by "+by), by
			return
		}
		n.State = loomv1.RemediationState_NODE_DRAINING
		n.Since = s.now
		n.Reason, n.SetBy = orDefault(e.Reason, "drained by "+by), by
		n.Next = loomv1.RemediationAction_ACTION_DRAIN
		// Slurm's drain: no new work, the node's jobs run to their end.
		n.Hold, n.Drained, n.Urgent, n.CheckpointFirst = true, false, false, false
		n.SuspectCheck = ""
		s.emitHealth(n, eventsv1.NodeHealth_UNHEALTHY, loomv1.RemediationAction_ACTION_DRAIN, 0, n.Reason, by, false)
	case loomv1.RemediationAction_ACTION_RESUME:
		wasRepairing := n.Repairing
		if n.State == loomv1.RemediationState_NODE_QUARANTINED {
			n.Failures = nil // released: its history starts again
		}
		n.Hold, n.HoldReason, n.HoldBy = false, "", ""
		n.Repairing = false
		s.healthy(n, true, by, orDefault(e.Reason, "resumed by "+by))
		if wasRepairing {
			s.startWaiting(n.Cluster)
		}
	case loomv1.RemediationAction_ACTION_QUARANTINE:
		wasRepairing := n.Repairing
		s.quarantine(n, by, orDefault(e.Reason, "quarantined by "+by))
		if wasRepairing {
			s.startWaiting(n.Cluster)
		}
	case loomv1.RemediationAction_ACTION_REBOOT, loomv1.RemediationAction_ACTION_REIMAGE, loomv1.RemediationAction_ACTION_REPLACE,
		loomv1.RemediationAction_ACTION_RESET_GPU:
		if n.Repairing {
			return // one repair at a time: the running one finishes first
		}
		reason := orDefault(e.Reason, actionName(e.Action)+" asked by "+by)
		if n.InService() {
			n.State = loomv1.RemediationState_NODE_DRAINING
			n.Since = s.now
			n.Drained, n.Urgent, n.CheckpointFirst = false, false, true
			n.Reason, n.SetBy, n.Xid = reason, by, 0
			n.Next, n.Hold, n.HoldReason, n.HoldBy = e.Action, false, "", ""
			s.emitHealth(n, eventsv1.NodeHealth_UNHEALTHY, e.Action, 0, reason, by, true)
		} else {
			// Out of service already: it runs nothing, repair it as soon as a slot frees.
			n.State = loomv1.RemediationState_NODE_DRAINING
			n.Since = s.now
			n.Drained, n.Urgent, n.CheckpointFirst = true, true, false
			n.Reason, n.SetBy = reason, by
			n.Next, n.Hold, n.HoldReason, n.HoldBy = e.Action, false, "", ""
		}
		s.tryStart(n)
	}
}

func (s *step) tick() {
	clusters := map[string]bool{}
	for _, name := range s.names() {
		n := s.peek(name)
		if n == nil {
			continue
		}
		clusters[n.Cluster] = true
		switch {
		case n.State == loomv1.RemediationState_NODE_DRAINING && !n.Hold && !n.Repairing && !n.Drained && !n.Urgent &&
			s.now.Sub(n.Since) >= s.m.cfg.DrainTimeout && !n.DryRun:
			s.tryStart(s.get(name))
		case n.Confirming && s.now.Sub(n.Since) >= s.m.cfg.ConfirmTimeout:
			s.escalate(s.get(name), fmt.Sprintf("no confirmation within %s after %s", s.m.cfg.ConfirmTimeout, actionName(n.LastRepair)), 0)
		case n.Repairing && !n.Confirming && n.State != loomv1.RemediationState_NODE_DRAINING && s.now.Sub(n.Since) >= s.repairWait(n):
			g := s.get(name)
			g.GaveUpID = g.RepairID
			s.escalate(g, fmt.Sprintf("%s not finished within %s", actionName(n.LastRepair), s.repairWait(n).Round(time.Second)), 0)
		case n.State == loomv1.RemediationState_NODE_SUSPECT && s.now.Sub(n.Since) >= s.m.cfg.ConfirmTimeout:
			// The confirming check never came back: give the node the benefit.
			s.healthy(s.get(name), false, SetBy, "no confirming check came back")
		}
	}
	cs := make([]string, 0, len(clusters))
	for c := range clusters {
		cs = append(cs, c)
	}
	sort.Strings(cs)
	for _, c := range cs {
		s.startWaiting(c)
	}
}

// repairWait is how long health waits for the answer to n's repair in
// flight: RepairTimeout, or until the provisioner's own deadline plus
// RepairMargin when that is later (a repair the provider expects to take
// longer, e.g. the sim's hour-long replacement).
func (s *step) repairWait(n *Node) time.Duration {
	w := s.m.cfg.RepairTimeout
	if d := n.RepairDeadline.Sub(n.Since); !n.RepairDeadline.IsZero() && d > w {
		w = d
	}
	return w
}

// emitHealth emits the node's verdict. For UNHEALTHY, action tells the
// scheduler what becomes of the node's runs: ACTION_DRAIN (an operator's
// drain) lets them run to their end; with ckpt they are signalled to
// checkpoint and moved after a grace; any other action (the repair to come)
// ends them now.
func (s *step) emitHealth(n *Node, h eventsv1.NodeHealth, action loomv1.RemediationAction, xid int32, reason, by string, ckpt bool) {
	s.emit(n.Name, &eventsv1.NodeHealthChanged{Node: n.Name, Cluster: n.Cluster, Health: h, Reason: reason, State: n.State,
		Action: action, Xid: xid, SetBy: by, Time: timestamppb.New(s.now), CheckpointFirst: ckpt})
}

func (s *step) emitHealthRepaired(n *Node, reason, by string, repaired bool) {
	s.emit(n.Name, &eventsv1.NodeHealthChanged{Node: n.Name, Cluster: n.Cluster, Health: eventsv1.NodeHealth_HEALTHY, Reason: reason,
		State: n.State, Action: loomv1.RemediationAction_ACTION_RESUME, SetBy: by, Time: timestamppb.New(s.now), Repaired: repaired})
}

// equal reports whether two records hold the same state (times compared as
// instants, as their JSON keeps them).
func equal(a, b *Node) bool {
	x, errx := json.Marshal(a)
	y, erry := json.Marshal(b)
	return errx == nil && erry == nil && bytes.Equal(x, y)
}
