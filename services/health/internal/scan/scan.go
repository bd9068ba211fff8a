// Package scan is the health service's pure core of health checks as
// Cluster Health Scanner runs them: which checks to send to which nodes
// (ScanNodes, scheduled scans, NodesNeedCheck), the all-reduce rings and
// their pairwise bisection to the bad node or link, the speed check against
// the fleet's median, and the stored results with their validity windows.
//
// Event in, state and actions out: State.Handle and State.Tick compute a
// Change (records to write, RunHealthCheck commands to emit, verdicts for
// the remediation side) without doing I/O or reading a clock; State.Commit
// makes it the state once the app has written it.
package scan

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/clusterspec"
	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/healthcheck"
	"github.com/loom-ml/loom/libs/hostlist"
	"github.com/loom-ml/loom/libs/paging"
	"github.com/loom-ml/loom/libs/resname"
	"github.com/loom-ml/loom/libs/termtext"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// Check names (the agent's internal/checks).
const (
	GPUDiag       = "gpu_diag"
	AllReduce     = "allreduce"
	AllReducePair = "allreduce_pair"
	Disk          = "disk"
	Speed         = "speed"
)

// Config is the scan policy.
type Config struct {
	// Validity is how long a check's result stands, by check name
	// (-check-validity); others get DefaultValidity.
	Validity        map[string]time.Duration
	DefaultValidity time.Duration
	// Timeouts are each check's timeout sent to the node when the request
	// gives none (gpu_diag's times its level); others get DefaultTimeout.
	Timeouts       map[string]time.Duration
	DefaultTimeout time.Duration
	// Grace is how long past a run's timeout health waits for its result
	// before it counts the run as unanswered (CHECK_ERROR).
	Grace time.Duration
	// StragglerRatio: a node whose speed is under this share of the fleet's
	// median fails the speed check (default 0.8).
	StragglerRatio float64
	// MinBusBW is the all-reduce bus bandwidth threshold in GB/s by machine
	// type ("" for any other type); 0: none.
	MinBusBW map[string]float64
	// AllReduceParams are passed to every all-reduce run (sizes, iters).
	AllReduceParams map[string]string
	// Interval runs a scan of every cluster that often (0: never), with
	// ScheduleChecks at gpu_diag level ScheduleLevel.
	Interval       time.Duration
	ScheduleChecks []string
	ScheduleLevel  int32
	// Retention drops results that ended longer ago; KeepPerCheck keeps at
	// most that many results per node and check (default 10: results are
	// kept in memory, and a gpu_diag's detail is kilobytes). Pruning runs
	// at most once a minute.
	Retention    time.Duration
	KeepPerCheck int
}

// DefaultValidity is each built-in check's validity window.
var DefaultValidity = map[string]time.Duration{
	GPUDiag: 24 * time.Hour, AllReduce: 6 * time.Hour, AllReducePair: 6 * time.Hour, Disk: time.Hour, Speed: time.Hour,
}

// DefaultConfig is the policy with every default.
func DefaultConfig() Config {
	return Config{
		Validity:        DefaultValidity,
		DefaultValidity: time.Hour,
		Timeouts: map[string]time.Duration{GPUDiag: time.Minute, AllReduce: 2 * time.Minute, AllReducePair: time.Minute,
			Disk: 30 * time.Second, Speed: time.Minute},
		DefaultTimeout: 5 * time.Minute,
		Grace:          30 * time.Second,
		StragglerRatio: 0.8,
		ScheduleChecks: []string{GPUDiag, Disk, Speed},
		ScheduleLevel:  1,
		Retention:      7 * 24 * time.Hour,
		KeepPerCheck:   10,
	}
}

func (c *Config) validity(check string) time.Duration {
	if d, ok := c.Validity[check]; ok {
		return d
	}
	if d, ok := DefaultValidity[check]; ok && c.Validity == nil {
		return d
	}
	return c.DefaultValidity
}

func (c *Config) timeout(check string, level int32) time.Duration {
	d, ok := c.Timeouts[check]
	if !ok {
		d = c.DefaultTimeout
	}
	if check == GPUDiag {
		d *= time.Duration(max(level, 1))
	}
	return d
}

// Node is what the scans know of a node: durable.
type Node struct {
	Name        string `json:"name"`
	Cluster     string `json:"cluster"`
	Hostname    string `json:"hostname"`
	MachineType string `json:"machine_type,omitempty"`
	Block       string `json:"block,omitempty"`
	// State is the provisioner's; only READY nodes are scanned unless named.
	State loomv1.Node_State `json:"state"`
	// CheckAddr is the agent's check endpoint (AgentRegistered.check_addr).
	CheckAddr string `json:"check_addr,omitempty"`
}

// Scan is one scan in progress: durable, so that a restarted health
// finishes its rings, bisections and medians.
type Scan struct {
	Key       string            `json:"key"` // cluster|id
	ID        string            `json:"id"`
	Cluster   string            `json:"cluster"`
	Trigger   string            `json:"trigger"`
	Level     int32             `json:"level"`
	AllowBusy bool              `json:"allow_busy,omitempty"`
	Timeout   time.Duration     `json:"timeout,omitempty"`
	Start     time.Time         `json:"start"`
	Runs      map[string]*Run   `json:"runs"`
	Rings     map[string]*Ring  `json:"rings,omitempty"`
	Seq       int               `json:"seq,omitempty"` // names the bisection's pairs
	Done      bool              `json:"done,omitempty"`
	Extra     map[string]string `json:"extra,omitempty"`
	// Params are the request's parameters, sent with every check of the
	// scan (the bisection's pairs too, after a restart).
	Params map[string]string `json:"params,omitempty"`
}

// Run is one check sent to one node.
type Run struct {
	ID       string              `json:"id"`
	Node     string              `json:"node"`
	Hostname string              `json:"hostname"`
	Check    string              `json:"check"`
	Ring     string              `json:"ring,omitempty"`
	Deadline time.Time           `json:"deadline"`
	Done     bool                `json:"done,omitempty"`
	Outcome  loomv1.CheckOutcome `json:"outcome,omitempty"`
}

// Ring is an all-reduce ring (or pair) of a scan.
type Ring struct {
	ID      string            `json:"id"`
	Members []string          `json:"members"` // node names, in rank order
	Runs    []string          `json:"runs"`    // run ids, by rank
	Params  map[string]string `json:"params"`
	Pair    bool              `json:"pair,omitempty"`
	Root    string            `json:"root,omitempty"` // the ring a pair bisects
	Done    bool              `json:"done,omitempty"`
	OK      bool              `json:"ok,omitempty"`
	Bisect  *Bisection        `json:"bisect,omitempty"`
}

// Bisection is a failed ring's pairwise search for the bad node or link:
// round 1 pairs the members in ring order; a pair that passes clears both;
// then each node not cleared is paired with a node known good, and fails
// alone if it fails again. With no node known good, one crosswise round
// re-pairs the suspects; if every pair still fails, nobody is blamed (a
// fabric-wide problem, or a threshold set too high).
type Bisection struct {
	Round   int                 `json:"round"`
	Good    map[string]bool     `json:"good"`
	Bad     map[string]bool     `json:"bad"`
	Failed  map[string][]string `json:"failed"` // node → partners of its failed pairs
	Pending []string            `json:"pending"`
	Skipped map[string]bool     `json:"skipped,omitempty"`
	Crossed bool                `json:"crossed,omitempty"`
	Done    bool                `json:"done,omitempty"`
}

// Emit is an event to publish with its record key.
type Emit struct {
	Key     string
	Payload proto.Message
}

// Change is what one event or tick did: records to write (nil deletes),
// commands to emit, and verdicts (results health itself decided: a
// bisection's culprit, a straggler) for the remediation side.
type Change struct {
	Nodes    map[string]*Node
	Results  map[string]*loomv1.HealthCheckResult
	Scans    map[string]*Scan
	Emits    []Emit
	Verdicts []*loomv1.HealthCheckResult
	// BadCheckAddr, when set, is why an AgentRegistered's check_addr was
	// refused (CheckAddr): the node was taken as advertising none.
	BadCheckAddr string

	running      map[string]int32
	nextSchedule time.Time
	pruned       time.Time
	gone         map[string]bool // nodes removed: their busy count goes too
}

// Durable reports whether the change has anything to write or emit.
func (c *Change) Durable() bool {
	return len(c.Nodes) > 0 || len(c.Results) > 0 || len(c.Scans) > 0 || len(c.Emits) > 0
}

func newChange() *Change {
	return &Change{Nodes: map[string]*Node{}, Results: map[string]*loomv1.HealthCheckResult{}, Scans: map[string]*Scan{},
		running: map[string]int32{}, gone: map[string]bool{}}
}

// State is the scans' state. It changes only through Commit; it is not
// safe for concurrent use.
type State struct {
	cfg     Config
	nodes   map[string]*Node
	results map[string]*loomv1.HealthCheckResult
	// byNode indexes results by node, for MaxCheckGroups' bound.
	byNode map[string]map[string]bool
	scans  map[string]*Scan
	// running is each node's running steps, from its heartbeats (memory
	// only: a node not heard from since start counts as idle; its agent
	// refuses a check while busy anyway).
	running      map[string]int32
	nextSchedule time.Time
	lastPrune    time.Time
}

// pruneEvery bounds how often Tick walks every result to prune them.
const pruneEvery = time.Minute

// NewState returns an empty state with policy cfg.
func NewState(cfg Config) *State {
	if cfg.StragglerRatio <= 0 {
		cfg.StragglerRatio = 0.8
	}
	if cfg.DefaultValidity <= 0 {
		cfg.DefaultValidity = time.Hour
	}
	if cfg.DefaultTimeout <= 0 {
		cfg.DefaultTimeout = 5 * time.Minute
	}
	if cfg.Grace <= 0 {
		cfg.Grace = 30 * time.Second
	}
	if cfg.KeepPerCheck <= 0 {
		cfg.KeepPerCheck = 10
	}
	return &State{cfg: cfg, nodes: map[string]*Node{}, results: map[string]*loomv1.HealthCheckResult{},
		scans: map[string]*Scan{}, running: map[string]int32{}, byNode: map[string]map[string]bool{}}
}

// Load adds what was read from storage at start-up.
func (s *State) Load(nodes []*Node, results []*loomv1.HealthCheckResult, scans []*Scan) {
	for _, n := range nodes {
		s.nodes[n.Name] = n
	}
	for _, r := range results {
		s.putResult(r.GetName(), r)
	}
	for _, sc := range scans {
		s.scans[sc.Key] = sc
	}
}

// Commit makes c part of the state.
func (s *State) Commit(c *Change) {
	for k, n := range c.Nodes {
		if n == nil {
			delete(s.nodes, k)
		} else {
			s.nodes[k] = n
		}
	}
	for k, r := range c.Results {
		s.putResult(k, r)
	}
	for k, sc := range c.Scans {
		if sc == nil {
			delete(s.scans, k)
		} else {
			s.scans[k] = sc
		}
	}
	for k, v := range c.running {
		s.running[k] = v
	}
	for k := range c.gone {
		delete(s.running, k)
	}
	if !c.nextSchedule.IsZero() {
		s.nextSchedule = c.nextSchedule
	}
	if !c.pruned.IsZero() {
		s.lastPrune = c.pruned
	}
}

// putResult stores r under name (nil: deletes it), and indexes it by node.
func (s *State) putResult(name string, r *loomv1.HealthCheckResult) {
	if old := s.results[name]; old != nil {
		if names := s.byNode[old.GetNode()]; names != nil {
			delete(names, name)
			if len(names) == 0 {
				delete(s.byNode, old.GetNode())
			}
		}
		delete(s.results, name)
	}
	if r == nil {
		return
	}
	s.results[name] = r
	names := s.byNode[r.GetNode()]
	if names == nil {
		names = map[string]bool{}
		s.byNode[r.GetNode()] = names
	}
	names[name] = true
}

// MaxCheckGroups bounds how many checks' results one node holds: a node
// holds at most MaxCheckGroups × KeepPerCheck results. Pruning keeps
// KeepPerCheck per check, but the check's name is the node's word, and a
// node (or whoever holds its key) reporting result after result under
// new names and run ids would otherwise fill memory until retention.
const MaxCheckGroups = 64

// makeRoom drops node's oldest stored results while it holds its bound
// (MaxCheckGroups × KeepPerCheck) with the changes in c counted, so that
// one more fits. Only the node's own results go: a flooding node loses
// its own history, no one else's.
func (s *State) makeRoom(c *Change, node string) {
	limit := MaxCheckGroups * s.cfg.KeepPerCheck
	held := map[string]*loomv1.HealthCheckResult{}
	for name := range s.byNode[node] {
		held[name] = s.results[name]
	}
	for name, r := range c.Results {
		switch {
		case r == nil:
			delete(held, name)
		case r.GetNode() == node:
			held[name] = r
		}
	}
	for len(held) >= limit {
		var oldest *loomv1.HealthCheckResult
		for _, r := range held {
			if oldest == nil || resultKey(r) > resultKey(oldest) {
				oldest = r
			}
		}
		delete(held, oldest.GetName())
		c.Results[oldest.GetName()] = nil
	}
}

// Node returns a node's record (not to be modified), or nil.
func (s *State) Node(name string) *Node { return s.nodes[name] }

// Result returns a stored result by name (not to be modified), or nil.
func (s *State) Result(name string) *loomv1.HealthCheckResult { return s.results[name] }

// Scan returns a scan in progress by cluster and id, or nil.
func (s *State) Scan(cluster, id string) *Scan { return s.scans[scanKey(cluster, id)] }

func scanKey(cluster, id string) string { return cluster + "|" + id }

// Progress is the scan of cluster with id as GetHealthScan answers it, or
// nil when there is none (never, or dropped an hour after its start). Its
// counts are its stored results (what `loom health results --scan` lists:
// the nodes skipped and health's own verdicts too) and its checks still
// out.
func (s *State) Progress(cluster, id string) *loomv1.HealthScan {
	sc := s.Scan(cluster, id)
	if sc == nil {
		return nil
	}
	return sc.progress(s.resultsByScan(cluster, id)[id])
}

// ListScans serves ListHealthScans: the cluster's scans still kept, newest
// first, each as Progress gives it, one page at a time.
func (s *State) ListScans(req *loomv1.ListHealthScansRequest) (*loomv1.ListHealthScansResponse, error) {
	size, after, err := checkList(req.GetCluster(), req)
	if err != nil {
		return nil, err
	}
	byScan := s.resultsByScan(req.GetCluster(), "")
	var items []*loomv1.HealthScan
	for _, sc := range s.scans {
		if sc.Cluster == req.GetCluster() {
			items = append(items, sc.progress(byScan[sc.ID]))
		}
	}
	paging.Sort(items, scanListKey)
	page, next := paging.Page(items, scanListKey, after, size)
	out := &loomv1.ListHealthScansResponse{Scans: page}
	if next != "" {
		out.NextPageToken = paging.Token(req, next)
	}
	return out, nil
}

// scanListKey orders scans newest first: by start time, then id.
func scanListKey(sc *loomv1.HealthScan) string {
	return fmt.Sprintf("%020d %s", math.MaxInt64-sc.GetStartTime().AsTime().UnixNano(), sc.GetScanId())
}

// resultsByScan is the cluster's stored results by scan id: only scan
// id's when id is not empty.
func (s *State) resultsByScan(cluster, id string) map[string][]*loomv1.HealthCheckResult {
	out := map[string][]*loomv1.HealthCheckResult{}
	prefix := cluster + "/healthResults/"
	for name, r := range s.results {
		if r.GetScanId() == "" || (id != "" && r.GetScanId() != id) || !strings.HasPrefix(name, prefix) {
			continue
		}
		out[r.GetScanId()] = append(out[r.GetScanId()], r)
	}
	return out
}

// progress is the scan's progress given its stored results.
func (sc *Scan) progress(results []*loomv1.HealthCheckResult) *loomv1.HealthScan {
	out := &loomv1.HealthScan{Cluster: sc.Cluster, ScanId: sc.ID, Trigger: sc.Trigger, Level: sc.Level,
		StartTime: timestamppb.New(sc.Start), Done: sc.Done}
	hosts := map[string]bool{}
	for _, r := range sc.Runs {
		hosts[r.Hostname] = true
		if !r.Done {
			out.Checks++
		}
	}
	for _, r := range results {
		hosts[r.GetHostname()] = true
		out.Answered++
		switch r.GetOutcome() {
		case loomv1.CheckOutcome_CHECK_PASS:
			out.Passed++
		case loomv1.CheckOutcome_CHECK_WARN:
			out.Warned++
		case loomv1.CheckOutcome_CHECK_FAIL:
			out.Failed++
		case loomv1.CheckOutcome_CHECK_SKIPPED:
			out.Skipped++
		default:
			out.Errored++
		}
	}
	out.Checks += out.Answered
	delete(hosts, "")
	out.Hostnames = slices.Sorted(maps.Keys(hosts))
	return out
}

// node is the change's view of a node: its new record if it has one.
func (s *State) node(c *Change, name string) *Node {
	if n, ok := c.Nodes[name]; ok {
		return n
	}
	return s.nodes[name]
}

// scan is the change's copy of a scan, copied from the state on first use.
func (s *State) scan(c *Change, key string) *Scan {
	if sc, ok := c.Scans[key]; ok {
		return sc
	}
	old := s.scans[key]
	if old == nil {
		return nil
	}
	sc := old.clone()
	c.Scans[key] = sc
	return sc
}

func (sc *Scan) clone() *Scan {
	n := *sc
	n.Runs = make(map[string]*Run, len(sc.Runs))
	for k, r := range sc.Runs {
		cp := *r
		n.Runs[k] = &cp
	}
	n.Rings = make(map[string]*Ring, len(sc.Rings))
	for k, r := range sc.Rings {
		cp := *r
		cp.Members, cp.Runs = slices.Clone(r.Members), slices.Clone(r.Runs)
		if r.Bisect != nil {
			b := *r.Bisect
			b.Good, b.Bad, b.Skipped = cloneSet(r.Bisect.Good), cloneSet(r.Bisect.Bad), cloneSet(r.Bisect.Skipped)
			b.Failed = map[string][]string{}
			for k, v := range r.Bisect.Failed {
				b.Failed[k] = slices.Clone(v)
			}
			b.Pending = slices.Clone(r.Bisect.Pending)
			cp.Bisect = &b
		}
		n.Rings[k] = &cp
	}
	return &n
}

func cloneSet(m map[string]bool) map[string]bool {
	out := make(map[string]bool, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// Handle computes what a consumed event does; id is the event's id (it
// names the scan a NodesNeedCheck starts). Events of other types give an
// empty change; an event missing what it needs gives an *errs.InvalidError.
func (s *State) Handle(now time.Time, id string, payload proto.Message) (*Change, error) {
	c := newChange()
	switch ev := payload.(type) {
	case *eventsv1.NodeChanged:
		in := ev.GetNode()
		if in.GetName() == "" {
			return nil, fmt.Errorf("node changed: %w", errs.Invalid("node.name", "required"))
		}
		if in.GetRole() == clusterspec.RoleLogin {
			// A login node is a record only: no agent answers a check
			// there, and a run sent to it would hold its scan (and the
			// speed check's fleet comparison) until the run's timeout.
			if s.nodes[in.GetName()] != nil {
				c.Nodes[in.GetName()] = nil
				c.gone[in.GetName()] = true
			}
			break
		}
		n := &Node{Name: in.GetName(), Cluster: in.GetCluster(), Hostname: in.GetHostname(), MachineType: in.GetMachineType(),
			Block: in.GetBlock(), State: in.GetState()}
		if n.Cluster == "" || n.Hostname == "" {
			if p, err := resname.SplitNode(n.Name); err == nil {
				n.Cluster, n.Hostname = p.Cluster.String(), p.Host
			}
		}
		if old := s.nodes[n.Name]; old != nil {
			n.CheckAddr = old.CheckAddr
			if *old == *n {
				break
			}
		}
		c.Nodes[n.Name] = n
	case *eventsv1.NodeRemoved:
		if s.nodes[ev.GetNode()] != nil {
			c.Nodes[ev.GetNode()] = nil
			c.gone[ev.GetNode()] = true
		}
	case *eventsv1.AgentRegistered:
		if ev.GetNode() == "" {
			return nil, fmt.Errorf("agent registered: %w", errs.Invalid("node", "required"))
		}
		// The node's name is its signer's (envelope.DecodeVerified); its
		// cluster and hostname are taken from that name, never from the
		// payload: a node named one of another's hostnames would shadow
		// that node in targeted scans. The provisioner's NodeChanged
		// fills in the rest.
		n := Node{Name: ev.GetNode()}
		if p, err := resname.SplitNode(ev.GetNode()); err == nil {
			n.Cluster, n.Hostname = p.Cluster.String(), p.Host
		}
		if old := s.nodes[ev.GetNode()]; old != nil {
			n = *old
		}
		addr := ev.GetCheckAddr()
		if err := CheckAddr(addr); addr != "" && err != nil {
			// Handed to the node's ring neighbours, which connect to it:
			// only a host:port is. The node then advertises none.
			c.BadCheckAddr, addr = err.Error(), ""
		}
		if n.CheckAddr != addr {
			n.CheckAddr = addr
			c.Nodes[n.Name] = &n
		}
	case *eventsv1.Heartbeat:
		if ev.GetNode() != "" {
			c.running[ev.GetNode()] = ev.GetRunningSteps()
		}
	case *eventsv1.HealthCheckCompleted:
		if err := s.completed(c, now, ev.GetResult()); err != nil {
			return nil, err
		}
	case *eventsv1.ScanNodes:
		if ev.GetCluster() == "" || ev.GetScanId() == "" {
			return nil, fmt.Errorf("scan nodes: %w", errs.Invalid("cluster", "cluster and scan_id are required"))
		}
		hosts, err := expand(ev.GetHostnames())
		if err != nil {
			return nil, fmt.Errorf("scan nodes: %w", err)
		}
		trigger := "scan"
		s.plan(c, now, Request{Cluster: ev.GetCluster(), ID: ev.GetScanId(), Hostnames: hosts, Checks: ev.GetChecks(),
			Level: ev.GetLevel(), AllowBusy: ev.GetAllowBusy(), Timeout: ev.GetTimeout().AsDuration(), Trigger: trigger,
			Params: ev.GetParams()})
	case *eventsv1.NodesNeedCheck:
		if ev.GetCluster() == "" {
			return nil, fmt.Errorf("nodes need check: %w", errs.Invalid("cluster", "required"))
		}
		var hosts []string
		for _, n := range ev.GetNodes() {
			if p, err := resname.SplitNode(n); err == nil {
				n = p.Host
			}
			hosts = append(hosts, n)
		}
		if len(hosts) == 0 {
			break
		}
		trigger := ev.GetTrigger()
		if trigger == "" {
			trigger = "hang"
		}
		// Busy nodes too, as a confirming check: the nodes are busy more
		// often than not (the requeued run lands back on them, the hung
		// run's steps are still being stopped), and a check skipped as
		// busy would leave the hang unexamined. Level 1 and disk only read
		// the driver's counters and statfs, harmless beside a step.
		s.plan(c, now, Request{Cluster: ev.GetCluster(), ID: trigger + "-" + idPart(id), Hostnames: hosts,
			Checks: []string{GPUDiag, Disk}, Level: 1, Trigger: trigger, AllowBusy: true})
	}
	return c, nil
}

func expand(exprs []string) ([]string, error) {
	var out []string
	for _, e := range exprs {
		names, err := hostlist.Expand(e)
		if err != nil {
			return nil, errs.Invalid("hostnames", "%v", err)
		}
		out = append(out, names...)
	}
	return out, nil
}

// idPart makes s usable in a result's id: lower-case letters, digits and
// dashes.
func idPart(s string) string {
	s = strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-':
			return r
		case r >= 'A' && r <= 'Z':
			return r + ('a' - 'A')
		}
		return '-'
	}, s)
	if len(s) > 40 {
		s = s[:40]
	}
	return s
}

// Request is a scan to plan.
type Request struct {
	Cluster, ID string
	// Hostnames to scan (empty: every READY node of the cluster).
	Hostnames []string
	// Checks (empty: gpu_diag and disk).
	Checks    []string
	Level     int32
	AllowBusy bool
	Timeout   time.Duration
	Trigger   string
	// Params go to every check (the gateway bounded and checked them);
	// each check reads the names it knows.
	Params map[string]string
}

// Busy reports whether jobs hold the node, as its last heartbeat said.
func (s *State) Busy(node string) bool { return s.running[node] > 0 }

// plan starts a scan: per-node checks go to each eligible node, all-reduce
// nodes form one ring in (block, hostname) order; busy nodes get a
// CHECK_SKIPPED result instead unless the request allows busy nodes.
func (s *State) plan(c *Change, now time.Time, req Request) {
	key := scanKey(req.Cluster, req.ID)
	if s.scans[key] != nil || c.Scans[key] != nil {
		return // planned already (a repeated command)
	}
	checks := req.Checks
	if len(checks) == 0 {
		checks = []string{GPUDiag, Disk}
	}
	level := min(max(req.Level, 1), 3)
	sc := &Scan{Key: key, ID: req.ID, Cluster: req.Cluster, Trigger: req.Trigger, Level: level, AllowBusy: req.AllowBusy,
		Timeout: req.Timeout, Start: now, Runs: map[string]*Run{}, Rings: map[string]*Ring{}, Params: maps.Clone(req.Params)}
	c.Scans[key] = sc

	var targets []*Node
	if len(req.Hostnames) == 0 {
		// Every node: the gateway told the caller so, and a caller waiting
		// for a result per node and check must get one for each (a node
		// not READY gets SKIPPED, saying why). A scheduled scan, which no
		// one waits for, leaves out the nodes that are not READY.
		for _, n := range s.sortedNodes(req.Cluster) {
			if n.State == loomv1.Node_READY || req.Trigger == "scan" {
				targets = append(targets, n)
			}
		}
	} else {
		byHost := map[string]*Node{}
		for _, n := range s.sortedNodes(req.Cluster) {
			byHost[n.Hostname] = n
		}
		seen := map[string]bool{}
		for _, h := range req.Hostnames {
			if n := byHost[h]; n != nil && !seen[h] {
				seen[h] = true
				targets = append(targets, n)
			}
		}
	}
	var idle []*Node
	for _, n := range targets {
		switch {
		case n.State != loomv1.Node_READY && n.State != loomv1.Node_DRAINING:
			for _, ch := range checks {
				s.store(c, now, skippedResult(sc, n, ch, level, fmt.Sprintf("node is %s", n.State)))
			}
		case s.Busy(n.Name) && !req.AllowBusy:
			for _, ch := range checks {
				s.store(c, now, skippedResult(sc, n, ch, level,
					fmt.Sprintf("node busy with jobs (%d running steps); allow_busy not set", s.running[n.Name])))
			}
		default:
			idle = append(idle, n)
		}
	}
	seen := map[string]bool{}
	for _, ch := range checks {
		if seen[ch] {
			continue // one run per check, however often it was asked
		}
		seen[ch] = true
		if ch == AllReduce || ch == AllReducePair {
			s.planRing(c, now, sc, idle, level, ch == AllReducePair)
			continue
		}
		for _, n := range idle {
			s.send(c, now, sc, n, ch, sc.ID+"-"+idPart(n.Hostname)+"-"+idPart(ch), nil, 0, "", maps.Clone(sc.Params))
		}
	}
	s.finishIfDone(c, now, sc)
}

func (s *State) sortedNodes(cluster string) []*Node {
	var out []*Node
	for _, n := range s.nodes {
		if n.Cluster == cluster {
			out = append(out, n)
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Hostname < out[b].Hostname })
	return out
}

// RingOrder sorts nodes into ring order: by network block, then hostname,
// so that neighbours in the ring are neighbours in the network.
func RingOrder(nodes []*Node) {
	sort.SliceStable(nodes, func(a, b int) bool {
		if nodes[a].Block != nodes[b].Block {
			return nodes[a].Block < nodes[b].Block
		}
		return nodes[a].Hostname < nodes[b].Hostname
	})
}

// planRing puts the eligible nodes with a check endpoint into one ring,
// or, for allreduce_pair (pairs), into pairs of ring neighbours: the
// first with the second, the third with the fourth, ..., and with an odd
// count the last with the first (which then has two pair results). A
// failed ring is bisected into pairs on its own; pairs asked for directly
// test every node's link to a neighbour at once.
func (s *State) planRing(c *Change, now time.Time, sc *Scan, idle []*Node, level int32, pairs bool) {
	check := AllReduce
	if pairs {
		check = AllReducePair
	}
	var members []*Node
	for _, n := range idle {
		if n.CheckAddr == "" || CheckAddr(n.CheckAddr) != nil {
			s.store(c, now, skippedResult(sc, n, check, level, "the node's agent advertises no check endpoint (-check-addr)"))
			continue
		}
		members = append(members, n)
	}
	if len(members) < 2 {
		for _, n := range members {
			s.store(c, now, skippedResult(sc, n, check, level, "an all-reduce needs at least 2 idle nodes with a check endpoint"))
		}
		return
	}
	RingOrder(members)
	var names []string
	for _, n := range members {
		names = append(names, n.Name)
	}
	if !pairs {
		s.startRing(c, now, sc, sc.ID+"-ring", names, false, "")
		return
	}
	for i := 0; i < len(names); i += 2 {
		j := i + 1
		if j == len(names) {
			j = 0 // an odd count: the last with the first
		}
		s.startRing(c, now, sc, fmt.Sprintf("%s-pair%d", sc.ID, i/2+1), []string{names[i], names[j]}, true, "")
	}
}

// ringParams are the all-reduce parameters for members: the configured
// ones (-allreduce-sizes) and the lowest threshold of their machine types
// (-allreduce-min-busbw), under the scan's own parameters: what the
// request gives for this scan (sizes, iters, min_busbw_gbps; a blank one
// counts as not given) wins over the service's standing policy. The
// ring's id is health's alone: it keeps each ring and bisection pair of
// the scan apart on the agents' endpoints.
func (s *State) ringParams(c *Change, sc *Scan, members []string, id string) map[string]string {
	p := map[string]string{}
	for k, v := range s.cfg.AllReduceParams {
		p[k] = v
	}
	th := math.Inf(1)
	for _, m := range members {
		n := s.node(c, m)
		if n == nil {
			continue
		}
		v, ok := s.cfg.MinBusBW[n.MachineType]
		if !ok {
			v = s.cfg.MinBusBW[""]
		}
		th = min(th, v)
	}
	if th > 0 && !math.IsInf(th, 1) {
		p["min_busbw_gbps"] = strconv.FormatFloat(th, 'g', -1, 64)
	}
	for k, v := range sc.Params {
		if strings.TrimSpace(v) != "" {
			p[k] = v
		}
	}
	p["ring"] = id
	return p
}

func (s *State) startRing(c *Change, now time.Time, sc *Scan, id string, members []string, pair bool, root string) *Ring {
	r := &Ring{ID: id, Members: members, Params: s.ringParams(c, sc, members, id), Pair: pair, Root: root}
	var addrs []string
	for _, m := range members {
		addrs = append(addrs, s.node(c, m).CheckAddr)
	}
	check := AllReduce
	if pair {
		check = AllReducePair
	}
	for rank, m := range members {
		n := s.node(c, m)
		runID := id + "-" + idPart(n.Hostname)
		r.Runs = append(r.Runs, runID)
		s.send(c, now, sc, n, check, runID, addrs, int32(rank), id, r.Params)
	}
	sc.Rings[id] = r
	return r
}

// send emits one RunHealthCheck and records its run.
func (s *State) send(c *Change, now time.Time, sc *Scan, n *Node, check, runID string, peers []string, rank int32, ring string, params map[string]string) {
	timeout := sc.Timeout
	if timeout <= 0 {
		timeout = s.cfg.timeout(check, sc.Level)
	}
	sc.Runs[runID] = &Run{ID: runID, Node: n.Name, Hostname: n.Hostname, Check: check, Ring: ring, Deadline: now.Add(timeout + s.cfg.Grace)}
	cmd := &eventsv1.RunHealthCheck{Node: n.Name, Cluster: sc.Cluster, RunId: runID, ScanId: sc.ID, Check: check, Level: checkLevel(check, sc.Level),
		Peers: peers, Rank: rank, Timeout: durationpb.New(timeout), AllowBusy: sc.AllowBusy, Params: params, Trigger: sc.Trigger}
	c.Emits = append(c.Emits, Emit{Key: n.Name, Payload: cmd})
}

func skippedResult(sc *Scan, n *Node, check string, level int32, why string) *loomv1.HealthCheckResult {
	return &loomv1.HealthCheckResult{Name: sc.Cluster + "/healthResults/" + sc.ID + "-" + idPart(n.Hostname) + "-" + idPart(check),
		Node: n.Name, Hostname: n.Hostname, Check: check, Level: checkLevel(check, level), Outcome: loomv1.CheckOutcome_CHECK_SKIPPED,
		Summary: why, Trigger: sc.Trigger, ScanId: sc.ID, Gpu: -1}
}

// checkLevel is a scan's level as a run of check, its command and its
// result, have it: gpu_diag's depth; none (0) for the other checks, which
// have no levels, so that their results are not labelled with one
// ("disk/3").
func checkLevel(check string, level int32) int32 {
	if check != GPUDiag {
		return 0
	}
	return level
}

// store records a result: its times default to now, and valid_until is
// its end plus the check's validity window for a verdict (PASS, WARN,
// FAIL); a skipped or errored check stands for nothing.
func (s *State) store(c *Change, now time.Time, r *loomv1.HealthCheckResult) {
	r = proto.Clone(r).(*loomv1.HealthCheckResult)
	if r.EndTime == nil {
		r.EndTime = timestamppb.New(now)
	}
	if r.StartTime == nil {
		r.StartTime = r.EndTime
	}
	end := r.GetEndTime().AsTime()
	switch r.GetOutcome() {
	case loomv1.CheckOutcome_CHECK_PASS, loomv1.CheckOutcome_CHECK_WARN, loomv1.CheckOutcome_CHECK_FAIL:
		r.ValidUntil = timestamppb.New(end.Add(s.cfg.validity(r.GetCheck())))
	default:
		r.ValidUntil = timestamppb.New(end)
	}
	c.Results[r.GetName()] = r
}

// Bounds of what a node reports in a result (HealthCheckCompleted).
const (
	// MaxSummaryBytes bounds a result's summary, which becomes a node's
	// reason on a failure.
	MaxSummaryBytes = 1024
	// MaxDetailBytes bounds a result's detail (a check's report, dcgmi's
	// JSON say).
	MaxDetailBytes = 64 << 10
	// MaxMetrics bounds a result's metrics.
	MaxMetrics = 64
)

// NodeResult is a copy of r, as a node reported it, made fit to store and
// show (the scan store keeps it; remediation puts its summary in a node's
// reason): its summary and detail cleaned and cut (termtext), its metrics
// finite and at most MaxMetrics of them (by name), its times valid and no
// later than now. A time in the future kept a forged result valid, and
// out of retention, for as long as it said; a metric of Inf or NaN made
// every honest node a straggler against the fleet's median.
func NodeResult(r *loomv1.HealthCheckResult, now time.Time) *loomv1.HealthCheckResult {
	r = proto.Clone(r).(*loomv1.HealthCheckResult)
	r.Summary = termtext.Clean(r.GetSummary(), MaxSummaryBytes)
	r.Detail = termtext.CleanAllowing(r.GetDetail(), MaxDetailBytes, "\n\t")
	names := slices.Sorted(maps.Keys(r.GetMetrics()))
	for i, k := range names {
		if v := r.Metrics[k]; i >= MaxMetrics || math.IsNaN(v) || math.IsInf(v, 0) || len(k) > healthcheck.MaxNameBytes {
			delete(r.Metrics, k)
		}
	}
	for _, ts := range []**timestamppb.Timestamp{&r.StartTime, &r.EndTime} {
		if *ts != nil && ((*ts).CheckValid() != nil || (*ts).AsTime().After(now)) {
			*ts = timestamppb.New(now)
		}
	}
	return r
}

// result is the change's view of a stored result.
func (s *State) result(c *Change, name string) *loomv1.HealthCheckResult {
	if r, ok := c.Results[name]; ok {
		return r
	}
	return s.results[name]
}

// completed stores a node's result and moves its scan on.
func (s *State) completed(c *Change, now time.Time, r *loomv1.HealthCheckResult) error {
	if r.GetName() == "" || r.GetNode() == "" {
		return fmt.Errorf("health check completed: %w", errs.Invalid("result.name", "the result's name and node are required"))
	}
	cluster, runID, ok := strings.Cut(r.GetName(), "/healthResults/")
	if !ok || runID == "" {
		return fmt.Errorf("health check completed: %w", errs.Invalid("result.name", "want <cluster>/healthResults/<id>, got %q", termtext.Clean(r.GetName(), 256)))
	}
	// The envelope's signature proved the node; the rest is the node's
	// word. Its result is about its own cluster, under a check's name; its
	// text is what sinfo -R and loom health show, and its metrics feed the
	// fleet's median (speedIfDone).
	if !strings.HasPrefix(r.GetNode(), cluster+"/nodes/") {
		return fmt.Errorf("health check completed: %w", errs.Invalid("result.name", "node %s reported a result of another cluster, %s", r.GetNode(), termtext.Clean(cluster, 256)))
	}
	if !healthcheck.ValidName(r.GetCheck()) {
		return fmt.Errorf("health check completed: %w", errs.Invalid("result.check", "%q is not a check name", termtext.Clean(r.GetCheck(), 256)))
	}
	// A result's name is the node's word too: one naming another node's
	// result would replace it (a FAIL hidden under a PASS).
	switch old := s.result(c, r.GetName()); {
	case old == nil:
		s.makeRoom(c, r.GetNode())
	case old.GetNode() != r.GetNode():
		return fmt.Errorf("health check completed: %w", errs.Invalid("result.name", "%s is a result of node %s, not of %s",
			termtext.Clean(r.GetName(), 256), old.GetNode(), r.GetNode()))
	}
	// Its hostname and scan are the node's word as well: a result is
	// listed as its own node's, whatever hostname it gives, and counts in
	// a scan only as the answer to a run that scan sent to that node
	// (else a node could file a FAIL under another host, into an
	// operator's scan of that host).
	stored := NodeResult(r, now)
	if n := s.node(c, r.GetNode()); n != nil {
		stored.Hostname = n.Hostname
	} else if p, err := resname.SplitNode(r.GetNode()); err == nil {
		stored.Hostname = p.Host
	}
	var sc *Scan
	var run *Run
	if r.GetScanId() != "" {
		if sc = s.scan(c, scanKey(cluster, r.GetScanId())); sc != nil {
			run = sc.Runs[runID]
		}
		if run == nil || run.Node != r.GetNode() {
			sc, run, stored.ScanId = nil, nil, ""
		}
	}
	s.store(c, now, stored)
	if run == nil || run.Done {
		return nil
	}
	run.Done, run.Outcome = true, r.GetOutcome()
	s.runDone(c, now, sc, run)
	return nil
}

// runDone moves a scan on after one of its runs ended (with a result or
// unanswered).
func (s *State) runDone(c *Change, now time.Time, sc *Scan, run *Run) {
	if run.Ring != "" {
		if ring := sc.Rings[run.Ring]; ring != nil && !ring.Done {
			done, ok := true, true
			for _, id := range ring.Runs {
				r := sc.Runs[id]
				done = done && r.Done
				ok = ok && r.Outcome == loomv1.CheckOutcome_CHECK_PASS
			}
			if done {
				ring.Done, ring.OK = true, ok
				s.ringDone(c, now, sc, ring)
			}
		}
	}
	if run.Check == Speed {
		s.speedIfDone(c, now, sc)
	}
	s.finishIfDone(c, now, sc)
}

// finishIfDone marks a scan done when nothing of it is pending.
func (s *State) finishIfDone(c *Change, now time.Time, sc *Scan) {
	for _, r := range sc.Runs {
		if !r.Done {
			return
		}
	}
	sc.Done = true
	if _, ok := c.Scans[sc.Key]; !ok {
		c.Scans[sc.Key] = sc
	}
}

// Tick counts the runs past their deadline as unanswered (CHECK_ERROR,
// stored: the node never said, which is not the node's failure), starts
// the scheduled scans that are due, drops finished scans and results past
// their retention.
func (s *State) Tick(now time.Time) *Change {
	c := newChange()
	keys := make([]string, 0, len(s.scans))
	for k := range s.scans {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		old := s.scans[k]
		if old.Done {
			if now.Sub(old.Start) > time.Hour {
				c.Scans[k] = nil
			}
			continue
		}
		var late []string
		for id, r := range old.Runs {
			if !r.Done && !now.Before(r.Deadline) {
				late = append(late, id)
			}
		}
		if len(late) == 0 {
			continue
		}
		sort.Strings(late)
		sc := s.scan(c, k)
		for _, id := range late {
			r := sc.Runs[id]
			if r.Done { // a ring's progress may have ended it meanwhile
				continue
			}
			r.Done, r.Outcome = true, loomv1.CheckOutcome_CHECK_ERROR
			s.store(c, now, &loomv1.HealthCheckResult{Name: sc.Cluster + "/healthResults/" + r.ID, Node: r.Node, Hostname: r.Hostname,
				Check: r.Check, Level: checkLevel(r.Check, sc.Level), Outcome: loomv1.CheckOutcome_CHECK_ERROR, Gpu: -1, Trigger: sc.Trigger, ScanId: sc.ID,
				Summary: "no result from the node by " + r.Deadline.UTC().Format(time.RFC3339) + " (its timeout and grace)"})
			s.runDone(c, now, sc, r)
		}
	}
	s.schedule(c, now)
	s.prune(c, now)
	return c
}

// schedule starts a scan of every cluster each Interval.
func (s *State) schedule(c *Change, now time.Time) {
	if s.cfg.Interval <= 0 {
		return
	}
	if s.nextSchedule.IsZero() {
		c.nextSchedule = now.Add(s.cfg.Interval) // the first one an interval after start
		return
	}
	if now.Before(s.nextSchedule) {
		return
	}
	c.nextSchedule = now.Add(s.cfg.Interval)
	clusters := map[string]bool{}
	for _, n := range s.nodes {
		clusters[n.Cluster] = true
	}
	var names []string
	for k := range clusters {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, cl := range names {
		s.plan(c, now, Request{Cluster: cl, ID: "sched-" + strconv.FormatInt(now.Unix(), 10), Checks: s.cfg.ScheduleChecks,
			Level: s.cfg.ScheduleLevel, Trigger: "schedule"})
	}
}

// prune drops results past the retention, and all but the newest
// KeepPerCheck of each node's check.
func (s *State) prune(c *Change, now time.Time) {
	if now.Sub(s.lastPrune) < pruneEvery {
		return
	}
	c.pruned = now
	groups := map[string][]*loomv1.HealthCheckResult{}
	for name, r := range s.results {
		if _, touched := c.Results[name]; touched {
			continue
		}
		if s.cfg.Retention > 0 && now.Sub(r.GetEndTime().AsTime()) > s.cfg.Retention {
			c.Results[name] = nil
			continue
		}
		k := r.GetNode() + "|" + r.GetCheck()
		groups[k] = append(groups[k], r)
	}
	for _, g := range groups {
		if len(g) <= s.cfg.KeepPerCheck {
			continue
		}
		sort.Slice(g, func(a, b int) bool { return resultKey(g[a]) < resultKey(g[b]) })
		for _, r := range g[s.cfg.KeepPerCheck:] {
			c.Results[r.GetName()] = nil
		}
	}
}

// checkList checks a list request's cluster and page: its size and the
// key it continues after.
func checkList(cluster string, req paging.Request) (size int, after string, err error) {
	var v errs.Validator
	if _, err := resname.ParseCluster(cluster); err != nil {
		v.Add("cluster", "%v", err)
	}
	size, after = paging.Check(&v, req)
	return size, after, v.Err()
}

// resultKey orders results newest first (then by name): the list's key.
func resultKey(r *loomv1.HealthCheckResult) string {
	return fmt.Sprintf("%020d %s", math.MaxInt64-r.GetEndTime().AsTime().UnixNano(), r.GetName())
}

// List serves ListHealthResults: the cluster's stored results, newest
// first, filtered by hostname, check and scan id, paged as every List RPC.
func (s *State) List(req *loomv1.ListHealthResultsRequest) (*loomv1.ListHealthResultsResponse, error) {
	size, after, err := checkList(req.GetCluster(), req)
	if err != nil {
		return nil, err
	}
	var items []*loomv1.HealthCheckResult
	prefix := req.GetCluster() + "/healthResults/"
	for name, r := range s.results {
		if !strings.HasPrefix(name, prefix) ||
			(req.GetHostname() != "" && r.GetHostname() != req.GetHostname()) ||
			(req.GetCheck() != "" && r.GetCheck() != req.GetCheck()) ||
			(req.GetScanId() != "" && r.GetScanId() != req.GetScanId()) {
			continue
		}
		items = append(items, r)
	}
	paging.Sort(items, resultKey)
	page, next := paging.Page(items, resultKey, after, size)
	out := &loomv1.ListHealthResultsResponse{}
	for _, r := range page {
		out.Results = append(out.Results, proto.Clone(r).(*loomv1.HealthCheckResult))
	}
	if next != "" {
		out.NextPageToken = paging.Token(req, next)
	}
	return out, nil
}

// FillPolicy adds the scans' part of GetHealthPolicy to p: how often every
// cluster is scanned, the straggler ratio, and each built-in check's
// validity window and run timeout (gpu_diag's at level 1; each level adds
// as much), with the defaults a site's check gets.
func (s *State) FillPolicy(p *loomv1.HealthPolicy) {
	p.ScanInterval = durationpb.New(s.cfg.Interval)
	p.StragglerRatio = s.cfg.StragglerRatio
	for _, c := range []string{GPUDiag, AllReduce, AllReducePair, Disk, Speed} {
		p.Checks = append(p.Checks, &loomv1.CheckPolicy{Check: c, Validity: durationpb.New(s.cfg.validity(c)),
			Timeout: durationpb.New(s.cfg.timeout(c, 1))})
	}
	p.DefaultCheckValidity = durationpb.New(s.cfg.DefaultValidity)
	p.DefaultCheckTimeout = durationpb.New(s.cfg.DefaultTimeout)
	if s.cfg.Interval > 0 {
		p.ScanChecks, p.ScanLevel = slices.Clone(s.cfg.ScheduleChecks), min(max(s.cfg.ScheduleLevel, 1), 3)
	}
	p.CheckGrace = durationpb.New(s.cfg.Grace)
	for k, v := range s.cfg.MinBusBW {
		if k == "" {
			k = "*"
		}
		if p.AllreduceMinBusbwGbps == nil {
			p.AllreduceMinBusbwGbps = map[string]float64{}
		}
		p.AllreduceMinBusbwGbps[k] = v
	}
	p.AllreduceSizes = s.cfg.AllReduceParams["sizes"]
}
