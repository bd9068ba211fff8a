// Package sim is a simulated cloud: a provider that "boots" thousands of
// nodes without a single process. A launched node registers after a
// provisioning latency sampled from a lognormal distribution per capacity
// type (scaled by Config.TimeScale so tests run in milliseconds); from then on
// its simulated agent heartbeats on loom.node.telemetry.v1 like a real one.
// Failures are injectable, by probability (Config) or on demand (methods):
// stockouts (Launch fails with ZONE_RESOURCE_POOL_EXHAUSTED), boot failures
// (the node never registers and a BootFailed event follows), slow boots and
// spot preemptions (a Preempted event, and the heartbeats stop).
//
// Every random draw is derived from (Config.Seed, node name, attempt), so a
// run is reproducible whatever order the reconciler launches nodes in.
//
// The simulated cloud lives in memory: a provisioner restart starts an empty
// one, and its reconciler's next Launch of each node boots it again (with a
// new boot id), which the provisioner sees as an agent restart.
package sim

import (
	"cmp"
	"container/heap"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/envelope"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	"github.com/loom-ml/loom/services/provisioner/internal/provider"
)

// Publisher writes events to the bus; *bus.Producer satisfies it. The
// events of one call form one batch.
type Publisher interface {
	Publish(ctx context.Context, events ...envelope.Event) error
}

// Source is the CloudEvents source of the events the simulated agents emit.
const Source = "loom/sim-agent"

// ErrStockout is wrapped by the error Launch returns when the zone has no
// capacity for the machine type (GCE's ZONE_RESOURCE_POOL_EXHAUSTED). It is
// transient: a later Launch may succeed.
var ErrStockout = errors.New("ZONE_RESOURCE_POOL_EXHAUSTED")

// Latency is a lognormal provisioning-latency distribution in simulated time:
// Median × e^(Sigma·Z), Z standard normal.
type Latency struct {
	Median time.Duration
	// Sigma is the log-space standard deviation; 0 gives exactly Median.
	Sigma float64
}

// DefaultLatency is the provisioning latency by capacity type (a
// loomv1.CapacitySource_Type name), in simulated time: what creating an
// 8-GPU VM until its agent reports takes on a public cloud. FLEX_START waits
// for capacity, so it is slower and far more spread. Unknown and unset types
// use ON_DEMAND.
var DefaultLatency = map[string]Latency{
	"RESERVATION": {Median: 60 * time.Second, Sigma: 0.25},
	"ON_DEMAND":   {Median: 90 * time.Second, Sigma: 0.35},
	"SPOT":        {Median: 100 * time.Second, Sigma: 0.4},
	"FLEX_START":  {Median: 15 * time.Minute, Sigma: 0.8},
}

// Config configures the simulated cloud. The zero value is a cloud with the
// default latencies at real speed and no failures.
type Config struct {
	// Seed makes every random draw reproducible.
	Seed uint64
	// TimeScale multiplies every simulated duration (latencies,
	// BootFailureAfter, time to preemption) into real time: 1 is real speed,
	// 0.001 turns 90 s into 90 ms. Zero or less means 1 (the provisioner
	// refuses a negative one: Check).
	TimeScale float64
	// Latency overrides DefaultLatency per capacity type name.
	Latency map[string]Latency
	// StockoutRate is the probability that a Launch fails with ErrStockout.
	StockoutRate float64
	// BootFailureRate is the probability that a launched node never
	// registers; BootFailureAfter (simulated; default 10 min) later the
	// provider emits BootFailed for it.
	BootFailureRate  float64
	BootFailureAfter time.Duration
	// SlowBootRate is the probability that a boot takes SlowBootFactor
	// (default 5) times its sampled latency: the distribution's far tail.
	SlowBootRate   float64
	SlowBootFactor float64
	// PreemptionRate is how often a SPOT node is reclaimed: the expected
	// number of preemptions per node per simulated hour (exponential
	// inter-arrival). Zero: never, unless Preempt is called.
	PreemptionRate float64
	// RebootTime, ReimageTime and ReplaceTime are how long a repair takes
	// until the node's agent registers again (a replacement: the new
	// node's), in simulated time (defaults 3 min, 15 min, 1 h: a bare-metal
	// reboot, a reimage, getting a machine swapped).
	RebootTime, ReimageTime, ReplaceTime time.Duration
	// HeartbeatInterval is how often, in real time (unscaled, because the
	// health service times heartbeats in real time), every registered node
	// heartbeats. Default 5 s.
	HeartbeatInterval time.Duration
	// OnLaunch, when set, is called (synchronously, from Launch) for each
	// boot started, with the node's full name and the real time until it
	// registers (or, for a failing boot, until BootFailed): how a benchmark
	// learns the provider's share of the time to RUNNING. Its parameters are
	// plain types so that code outside the provisioner can set it.
	OnLaunch func(node string, latency time.Duration)
	// Log defaults to slog.Default().
	Log *slog.Logger
}

// Default repair times (simulated).
const (
	DefaultRebootTime  = 3 * time.Minute
	DefaultReimageTime = 15 * time.Minute
	DefaultReplaceTime = time.Hour
)

// Sample is what the simulated cloud decided about one boot.
type Sample struct {
	// Node is the node's full name; Attempt counts its Launch calls that
	// started or failed a boot, from 1.
	Node    string
	Attempt int
	// CapacityType is the capacity type whose distribution was used.
	CapacityType string
	// Simulated is the drawn provisioning latency in simulated time;
	// Latency the real time from Launch until the node registers (Simulated
	// × TimeScale; for a failing boot, until BootFailed).
	Simulated, Latency time.Duration
	// Slow is true for a tail-latency boot; BootFails for a boot that never
	// registers.
	Slow, BootFails bool
	// Repair is the repair this boot carries out (0 for a launch).
	Repair provider.RepairKind
}

// NodeState is where a simulated node is.
type NodeState int

// Node states.
const (
	// Absent: never launched, or removed.
	Absent NodeState = iota
	// Booting: launched, not registered yet.
	Booting
	// Running: registered and heartbeating.
	Running
	// Stopped: stopped by Stop.
	Stopped
	// Failed: its boot failed.
	Failed
	// Preempted: the provider reclaimed it.
	Preempted
)

func (s NodeState) String() string {
	switch s {
	case Absent:
		return "absent"
	case Booting:
		return "booting"
	case Running:
		return "running"
	case Stopped:
		return "stopped"
	case Failed:
		return "failed"
	case Preempted:
		return "preempted"
	}
	return fmt.Sprintf("NodeState(%d)", int(s))
}

// Stats counts what the simulated cloud did since New.
type Stats struct {
	Launches, Stockouts, Registered, BootFailures, Preemptions int
	// Heartbeats counts heartbeat events published; Publishes the Publish
	// calls (registrations and heartbeats) that succeeded.
	Heartbeats, Publishes int
	// Running is how many nodes heartbeat now.
	Running int
}

// timer kinds.
const (
	fireRegister = iota + 1
	fireBootFail
	firePreempt
)

type timer struct {
	at   time.Time
	node string
	gen  int // the boot it belongs to; stale when the node moved on
	kind int
}

type timers []timer

func (h timers) Len() int { return len(h) }
func (h timers) Less(i, j int) bool {
	if c := h[i].at.Compare(h[j].at); c != 0 {
		return c < 0
	}
	return h[i].node < h[j].node
}
func (h timers) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *timers) Push(x any)   { *h = append(*h, x.(timer)) }
func (h *timers) Pop() any {
	old := *h
	t := old[len(old)-1]
	*h = old[:len(old)-1]
	return t
}

// simNode is one node of the simulated cloud.
type simNode struct {
	n        provider.Node
	state    NodeState
	gen      int // boots started
	attempts int // Launch calls that drew (stockouts included)
	bootID   string
	launched time.Time
	sample   Sample
	// prevExit says how the previous boot ended, for Launched.PrevExit.
	prevExit string
	// failNext and slowNext force the next boot's outcome (tests).
	failNext, slowNext bool
}

// publishBatch bounds the events of one Publish call.
const publishBatch = 1000

// Provider is the simulated cloud. It is safe for concurrent use.
type Provider struct {
	cfg Config
	pub Publisher
	log *slog.Logger

	mu        sync.Mutex
	nodes     map[string]*simNode
	timers    timers
	stockouts map[[2]string]bool // (zone, machine type); "" matches any
	pending   []provider.Event   // not yet taken from Events()
	stats     Stats

	wake   chan struct{}
	events chan provider.Event
	cancel context.CancelFunc
	done   chan struct{}
	closed bool
}

var (
	_ provider.Provider = (*Provider)(nil)
	_ provider.Watcher  = (*Provider)(nil)
	_ provider.Repairer = (*Provider)(nil)
)

// New returns a simulated cloud publishing through pub and starts its clock
// (one goroutine, whatever the number of nodes); Close stops it. Out-of-range
// settings are clamped: probabilities to [0, 1], non-positive durations and
// factors to their defaults.
func New(cfg Config, pub Publisher) *Provider {
	if cfg.TimeScale <= 0 || math.IsNaN(cfg.TimeScale) || math.IsInf(cfg.TimeScale, 0) {
		cfg.TimeScale = 1
	}
	for _, r := range []*float64{&cfg.StockoutRate, &cfg.BootFailureRate, &cfg.SlowBootRate} {
		if !(*r > 0) { // NaN too
			*r = 0
		}
		*r = min(*r, 1)
	}
	if !(cfg.PreemptionRate > 0) || math.IsInf(cfg.PreemptionRate, 0) {
		cfg.PreemptionRate = 0
	}
	if cfg.BootFailureAfter <= 0 {
		cfg.BootFailureAfter = 10 * time.Minute
	}
	if !(cfg.SlowBootFactor >= 1) || math.IsInf(cfg.SlowBootFactor, 0) {
		cfg.SlowBootFactor = 5
	}
	if cfg.HeartbeatInterval <= 0 {
		cfg.HeartbeatInterval = 5 * time.Second
	}
	if cfg.RebootTime <= 0 {
		cfg.RebootTime = DefaultRebootTime
	}
	if cfg.ReimageTime <= 0 {
		cfg.ReimageTime = DefaultReimageTime
	}
	if cfg.ReplaceTime <= 0 {
		cfg.ReplaceTime = DefaultReplaceTime
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Provider{
		cfg: cfg, pub: pub, log: cfg.Log.With("provider", "sim"),
		nodes: map[string]*simNode{}, stockouts: map[[2]string]bool{},
		wake: make(chan struct{}, 1), events: make(chan provider.Event),
		cancel: cancel, done: make(chan struct{}),
	}
	go p.loop(ctx)
	return p
}

// Close stops the simulated cloud's clock: no more registrations,
// heartbeats or events. The Events channel is not closed. Idempotent.
func (p *Provider) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.cancel()
	<-p.done
	return nil
}

// Events returns the node events the simulated cloud produces on its own
// (BootFailed, Preempted), in order, none dropped: they wait until read.
func (p *Provider) Events() <-chan provider.Event { return p.events }

// scale turns a simulated duration into real time.
func (p *Provider) scale(d time.Duration) time.Duration {
	return time.Duration(float64(d) * p.cfg.TimeScale)
}

// rng is the random source of one attempt of one node: independent of the
// order in which nodes are launched.
func (p *Provider) rng(node string, attempt int) *rand.Rand {
	h := fnv.New64a()
	_, _ = h.Write([]byte(node))
	return rand.New(rand.NewPCG(p.cfg.Seed, h.Sum64()^uint64(attempt)*0x9e3779b97f4a7c15))
}

func (p *Provider) latency(capType string) (string, Latency) {
	if l, ok := p.cfg.Latency[capType]; ok {
		return capType, l
	}
	if l, ok := DefaultLatency[capType]; ok {
		return capType, l
	}
	if l, ok := p.cfg.Latency["ON_DEMAND"]; ok {
		return "ON_DEMAND", l
	}
	return "ON_DEMAND", DefaultLatency["ON_DEMAND"]
}

func (p *Provider) stockedOut(zone, machine string) bool {
	return p.stockouts[[2]string{zone, machine}] || p.stockouts[[2]string{zone, ""}] ||
		p.stockouts[[2]string{"", machine}] || p.stockouts[[2]string{"", ""}]
}

// Launch boots the node unless it is booting or running. A new boot draws,
// in this order, a stockout (Launch fails with ErrStockout), a boot failure,
// a slow boot and the latency; a SPOT node also draws its time to preemption.
func (p *Provider) Launch(_ context.Context, n provider.Node) (provider.Launched, error) {
	if n.Name == "" || n.Hostname == "" {
		return provider.Launched{}, fmt.Errorf("sim: launch: node name %q and hostname %q are required", n.Name, n.Hostname)
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return provider.Launched{}, fmt.Errorf("sim: launch %s: provider closed", n.Name)
	}
	sn := p.nodes[n.Name]
	if sn == nil {
		sn = &simNode{n: n}
		p.nodes[n.Name] = sn
	}
	if sn.state == Booting || sn.state == Running {
		p.mu.Unlock()
		return provider.Launched{}, nil
	}
	sn.n = n
	sn.attempts++
	r := p.rng(n.Name, sn.attempts)
	if r.Float64() < p.cfg.StockoutRate || p.stockedOut(n.Zone, n.MachineType) {
		p.stats.Stockouts++
		p.mu.Unlock()
		return provider.Launched{}, fmt.Errorf("sim: launch %s: %w: the zone %q does not have enough resources available to fulfill the request (%s)",
			n.Name, ErrStockout, n.Zone, n.MachineType)
	}
	fails := r.Float64() < p.cfg.BootFailureRate || sn.failNext
	slow := r.Float64() < p.cfg.SlowBootRate || sn.slowNext
	capType, dist := p.latency(n.CapacityType)
	d := time.Duration(float64(dist.Median) * math.Exp(dist.Sigma*r.NormFloat64()))
	if slow {
		d = time.Duration(float64(d) * p.cfg.SlowBootFactor)
	}
	now := time.Now()
	sn.failNext, sn.slowNext = false, false
	sn.gen++
	sn.state = Booting
	sn.bootID = fmt.Sprintf("sim-%016x", r.Uint64())
	sn.launched = now
	sn.sample = Sample{Node: n.Name, Attempt: sn.attempts, CapacityType: capType, Simulated: d, Latency: p.scale(d), Slow: slow, BootFails: fails}
	if fails {
		sn.sample.Latency = p.scale(p.cfg.BootFailureAfter)
		heap.Push(&p.timers, timer{at: now.Add(sn.sample.Latency), node: n.Name, gen: sn.gen, kind: fireBootFail})
	} else {
		heap.Push(&p.timers, timer{at: now.Add(sn.sample.Latency), node: n.Name, gen: sn.gen, kind: fireRegister})
	}
	if n.CapacityType == "SPOT" && p.cfg.PreemptionRate > 0 {
		hours := r.ExpFloat64() / p.cfg.PreemptionRate
		heap.Push(&p.timers, timer{at: now.Add(p.scale(time.Duration(hours * float64(time.Hour)))), node: n.Name, gen: sn.gen, kind: firePreempt})
	}
	p.stats.Launches++
	prev := sn.prevExit
	sn.prevExit = ""
	sample := sn.sample
	p.mu.Unlock()
	p.poke()
	if p.cfg.OnLaunch != nil {
		p.cfg.OnLaunch(sample.Node, sample.Latency)
	}
	return provider.Launched{Started: true, PrevExit: prev}, nil
}

// Repair carries out a repair with its simulated time (RebootTime,
// ReimageTime, ReplaceTime, scaled by TimeScale): the node stops
// heartbeating at once and registers again, with boot id bootID, when the
// time has passed. Repairs draw no failures. A call for a node already
// booting or running as bootID changes nothing (Expect is the time left).
func (p *Provider) Repair(_ context.Context, n provider.Node, kind provider.RepairKind, bootID string) (provider.Launched, error) {
	if n.Name == "" || bootID == "" {
		return provider.Launched{}, fmt.Errorf("sim: %s: node name %q and boot id %q are required", kind, n.Name, bootID)
	}
	var d time.Duration
	switch kind {
	case provider.Reboot:
		d = p.cfg.RebootTime
	case provider.Reimage:
		d = p.cfg.ReimageTime
	case provider.Replace:
		d = p.cfg.ReplaceTime
	default:
		return provider.Launched{}, fmt.Errorf("sim: repair %s: unknown kind %d", n.Name, kind)
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return provider.Launched{}, fmt.Errorf("sim: %s %s: provider closed", kind, n.Name)
	}
	sn := p.nodes[n.Name]
	if sn == nil {
		sn = &simNode{n: n}
		p.nodes[n.Name] = sn
	}
	now := time.Now()
	if sn.bootID == bootID && (sn.state == Booting || sn.state == Running) {
		left := max(sn.launched.Add(sn.sample.Latency).Sub(now), 0)
		p.mu.Unlock()
		return provider.Launched{Expect: left}, nil
	}
	sn.n = n
	sn.gen++
	sn.state = Booting
	sn.bootID = bootID
	sn.launched = now
	sn.sample = Sample{Node: n.Name, Attempt: sn.attempts, CapacityType: n.CapacityType, Simulated: d, Latency: p.scale(d), Repair: kind}
	heap.Push(&p.timers, timer{at: now.Add(sn.sample.Latency), node: n.Name, gen: sn.gen, kind: fireRegister})
	prev := sn.prevExit
	sn.prevExit = ""
	latency := sn.sample.Latency
	p.mu.Unlock()
	p.poke()
	return provider.Launched{Started: true, PrevExit: prev, Expect: latency}, nil
}

// Stop stops the node's simulated agent: no registration, no heartbeats,
// no events for it any more. Nothing when it does not run.
func (p *Provider) Stop(_ context.Context, n provider.Node) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if sn := p.nodes[n.Name]; sn != nil && (sn.state == Booting || sn.state == Running) {
		sn.state = Stopped
		sn.prevExit = "stopped"
	}
	return nil
}

// Remove forgets the node (stopping it first if needed).
func (p *Provider) Remove(_ context.Context, n provider.Node) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.nodes, n.Name)
	return nil
}

// RemoveCluster forgets every node of the cluster.
func (p *Provider) RemoveCluster(_ context.Context, clusterID string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for name, sn := range p.nodes {
		if sn.n.ClusterID == clusterID {
			delete(p.nodes, name)
		}
	}
	return nil
}

// SetStockout makes Launch fail with ErrStockout for machineType in zone
// (either "" for any) until it is called again with exhausted false: the
// way a test takes capacity away and gives it back.
func (p *Provider) SetStockout(zone, machineType string, exhausted bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := [2]string{zone, machineType}
	if exhausted {
		p.stockouts[k] = true
	} else {
		delete(p.stockouts, k)
	}
}

// FailBoot makes the node's boot fail: the current one if it is booting,
// else its next one. BootFailed follows BootFailureAfter after the launch.
func (p *Provider) FailBoot(node string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	sn := p.nodes[node]
	if sn == nil {
		sn = &simNode{n: provider.Node{Name: node}}
		p.nodes[node] = sn
	}
	if sn.state != Booting {
		sn.failNext = true
		return
	}
	// The pending registration (and preemption) go stale with the
	// generation; the failure is reported as if decided at launch.
	sn.gen++
	sn.sample.BootFails = true
	sn.sample.Latency = p.scale(p.cfg.BootFailureAfter)
	heap.Push(&p.timers, timer{at: sn.launched.Add(sn.sample.Latency), node: node, gen: sn.gen, kind: fireBootFail})
	p.poke()
}

// SlowBoot makes the node's next boot a tail-latency one (SlowBootFactor
// times its sampled latency).
func (p *Provider) SlowBoot(node string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	sn := p.nodes[node]
	if sn == nil {
		sn = &simNode{n: provider.Node{Name: node}}
		p.nodes[node] = sn
	}
	sn.slowNext = true
}

// Preempt reclaims a booting or running node now: its heartbeats stop and a
// Preempted event follows. It fails for a node that is neither.
func (p *Provider) Preempt(node string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	sn := p.nodes[node]
	if sn == nil || (sn.state != Booting && sn.state != Running) {
		st := Absent
		if sn != nil {
			st = sn.state
		}
		return fmt.Errorf("sim: preempt %s: node is %s", node, st)
	}
	p.preemptLocked(sn, time.Now())
	return nil
}

func (p *Provider) preemptLocked(sn *simNode, now time.Time) {
	sn.state = Preempted
	sn.prevExit = "preempted by provider"
	p.stats.Preemptions++
	p.pending = append(p.pending, provider.Event{Node: sn.n.Name, Kind: provider.Preempted,
		Reason: "preempted by provider: spot capacity reclaimed", At: now})
	p.poke()
}

// State returns where the node is.
func (p *Provider) State(node string) NodeState {
	p.mu.Lock()
	defer p.mu.Unlock()
	if sn := p.nodes[node]; sn != nil && sn.gen > 0 {
		return sn.state
	}
	return Absent
}

// LastSample returns the draw of the node's latest boot.
func (p *Provider) LastSample(node string) (Sample, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if sn := p.nodes[node]; sn != nil && sn.gen > 0 {
		return sn.sample, true
	}
	return Sample{}, false
}

// Stats returns the counters.
func (p *Provider) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stats
	for _, sn := range p.nodes {
		if sn.state == Running {
			s.Running++
		}
	}
	return s
}

func (p *Provider) poke() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// loop is the simulated cloud's clock: it fires due timers, publishes
// registrations and heartbeats in batches, and hands out events.
func (p *Provider) loop(ctx context.Context) {
	defer close(p.done)
	nextHB := time.Now().Add(p.cfg.HeartbeatInterval)
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		regs := p.fire(time.Now())
		if len(regs) > 0 {
			p.register(ctx, regs)
		}
		if now := time.Now(); !now.Before(nextHB) {
			p.heartbeat(ctx, now)
			nextHB = now.Add(p.cfg.HeartbeatInterval)
		}

		p.mu.Lock()
		wait := time.Until(nextHB)
		if len(p.timers) > 0 {
			wait = min(wait, time.Until(p.timers[0].at))
		}
		var out chan provider.Event
		var head provider.Event
		if len(p.pending) > 0 {
			out, head = p.events, p.pending[0]
		}
		p.mu.Unlock()

		// Since Go 1.23 Reset discards a value the timer sent but nobody
		// received, so there is nothing to drain.
		t.Reset(max(wait, 0))
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-p.wake:
		case out <- head:
			p.mu.Lock()
			p.pending = p.pending[1:]
			p.mu.Unlock()
		}
	}
}

// fire applies the timers due at now and returns the nodes to register.
func (p *Provider) fire(now time.Time) []*simNode {
	p.mu.Lock()
	defer p.mu.Unlock()
	var regs []*simNode
	for len(p.timers) > 0 && !p.timers[0].at.After(now) {
		tm := heap.Pop(&p.timers).(timer)
		sn := p.nodes[tm.node]
		if sn == nil || sn.gen != tm.gen {
			continue // removed, or relaunched since
		}
		switch {
		case tm.kind == fireRegister && sn.state == Booting:
			sn.state = Running
			regs = append(regs, sn)
		case tm.kind == fireBootFail && sn.state == Booting:
			sn.state = Failed
			sn.prevExit = "boot failed"
			p.stats.BootFailures++
			p.pending = append(p.pending, provider.Event{Node: sn.n.Name, Kind: provider.BootFailed,
				Reason: fmt.Sprintf("instance did not boot within %v (simulated boot failure)", p.cfg.BootFailureAfter), At: now})
		case tm.kind == firePreempt && (sn.state == Booting || sn.state == Running):
			p.preemptLocked(sn, now)
		}
	}
	return regs
}

// register publishes AgentRegistered for nodes that just came up; a failed
// publish leaves them booting and retries a second later.
func (p *Provider) register(ctx context.Context, regs []*simNode) {
	p.mu.Lock()
	evs := make([]envelope.Event, 0, len(regs))
	gens := make([]int, len(regs))
	var err error // a payload libs/topics does not route fails the batch as a publish would
	for i, sn := range regs {
		gens[i] = sn.gen
		ev, rerr := envelope.Route(sn.n.Name, Source, &eventsv1.AgentRegistered{
			Node: sn.n.Name, Cluster: sn.n.Cluster, Hostname: sn.n.Hostname,
			Gpus: int32(sn.n.GPUs), BootId: sn.bootID, HostBootId: sn.bootID,
		})
		err = cmp.Or(err, rerr)
		evs = append(evs, ev)
	}
	p.mu.Unlock()
	if err == nil {
		err = p.publish(ctx, evs)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err == nil {
		p.stats.Registered += len(regs)
		return
	}
	if ctx.Err() != nil {
		return
	}
	p.log.Warn("sim: publishing registrations failed; retrying", "nodes", len(regs), "err", err)
	retry := time.Now().Add(time.Second)
	for i, sn := range regs {
		if sn.gen == gens[i] && sn.state == Running {
			sn.state = Booting
			heap.Push(&p.timers, timer{at: retry, node: sn.n.Name, gen: sn.gen, kind: fireRegister})
		}
	}
}

// heartbeat publishes one Heartbeat per running node, in name order. A
// failed publish is logged and skipped: the next interval sends fresh ones.
func (p *Provider) heartbeat(ctx context.Context, now time.Time) {
	p.mu.Lock()
	var live []*simNode
	for _, sn := range p.nodes {
		if sn.state == Running {
			live = append(live, sn)
		}
	}
	slices.SortFunc(live, func(a, b *simNode) int { return cmp.Compare(a.n.Name, b.n.Name) })
	evs := make([]envelope.Event, 0, len(live))
	ts := timestamppb.New(now)
	var err error // a payload libs/topics does not route fails the batch as a publish would
	for _, sn := range live {
		ev, rerr := envelope.Route(sn.n.Name, Source, &eventsv1.Heartbeat{
			Node: sn.n.Name, Cluster: sn.n.Cluster, BootId: sn.bootID, Time: ts,
		})
		err = cmp.Or(err, rerr)
		evs = append(evs, ev)
	}
	p.mu.Unlock()
	if len(evs) == 0 {
		return
	}
	if err == nil {
		err = p.publish(ctx, evs)
	}
	if err != nil {
		if ctx.Err() == nil {
			p.log.Warn("sim: publishing heartbeats failed", "nodes", len(evs), "err", err)
		}
		return
	}
	p.mu.Lock()
	p.stats.Heartbeats += len(evs)
	p.mu.Unlock()
}

// publishTimeout bounds one Publish call: the clock stops while it runs.
const publishTimeout = 30 * time.Second

// publish writes evs in batches of publishBatch.
func (p *Provider) publish(ctx context.Context, evs []envelope.Event) error {
	for b := range slices.Chunk(evs, publishBatch) {
		pctx, cancel := context.WithTimeout(ctx, publishTimeout)
		err := p.pub.Publish(pctx, b...)
		cancel()
		if err != nil {
			return err
		}
		p.mu.Lock()
		p.stats.Publishes++
		p.mu.Unlock()
	}
	return nil
}
