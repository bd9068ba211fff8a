package domain

import (
	"sort"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/clusterspec"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/provisioner/internal/capacity"
)

// Params are the provider-dependent settings and policies decisions need.
// Zero values take the documented defaults (WithDefaults).
type Params struct {
	// HomeDir returns where a cluster's shared home is on every node
	// (status.home_dir and status.shared_dir); ScratchDir its scratch.
	HomeDir, ScratchDir func(c *loomv1.Cluster) string
	// WorkDir returns a compute node's own directory ("" for none).
	WorkDir func(clusterID, hostname string) string
	// MaxNodesPerPool bounds a pool's node_count (0: no bound; 64 for local).
	MaxNodesPerPool int32
	// MaxNodesPerCluster bounds the node_count of a cluster's pools together
	// (0: no bound beyond the spec's; 64 for local, where each is a process).
	MaxNodesPerCluster int32
	// Capacity is the non-reserved capacity (default capacity.Default).
	Capacity capacity.Config
	// BootTimeout is how long a compute node may take from its creation to
	// its agent's registration before it is FAILED and replaced (default 10m).
	BootTimeout time.Duration
	// OperationTimeout bounds a create or update: when it passes, the
	// operation completes with the nodes that are ready (RUNNING-degraded),
	// or fails (ERROR) when a pool has none (default 30m).
	OperationTimeout time.Duration
	// MaxLaunchAttempts is how many failed launches make a node FAILED
	// (default 5). LaunchBackoff doubles after each failure up to
	// MaxLaunchBackoff (defaults 1s and 1m).
	MaxLaunchAttempts               int32
	LaunchBackoff, MaxLaunchBackoff time.Duration
	// DrainGrace is the drain grace of an update that names none (default 300s).
	DrainGrace time.Duration
	// DrainTimeout is how long after a node's drain deadline the provisioner
	// waits for NodeDrained before it removes the node anyway (default 5m).
	DrainTimeout time.Duration
	// KeepFailed is how many FAILED nodes a pool keeps on record (for people
	// to see why) while it is below target (default 3).
	KeepFailed int
	// Render renders a cluster's Slurm files (nil: none are rendered).
	Render func(c *loomv1.Cluster, nodes []*loomv1.Node) (*loomv1.SlurmConfig, error)
}

// WithDefaults returns p with zero values replaced by the defaults.
func (p Params) WithDefaults() Params {
	if p.HomeDir == nil {
		p.HomeDir = func(*loomv1.Cluster) string { return "/home" }
	}
	if p.ScratchDir == nil {
		p.ScratchDir = func(*loomv1.Cluster) string { return "/scratch" }
	}
	if p.WorkDir == nil {
		p.WorkDir = func(string, string) string { return "" }
	}
	if p.Capacity == nil {
		p.Capacity = capacity.MustParse(capacity.Default)
	}
	if p.BootTimeout <= 0 {
		p.BootTimeout = 10 * time.Minute
	}
	if p.OperationTimeout <= 0 {
		p.OperationTimeout = 30 * time.Minute
	}
	if p.MaxLaunchAttempts <= 0 {
		p.MaxLaunchAttempts = 5
	}
	if p.LaunchBackoff <= 0 {
		p.LaunchBackoff = time.Second
	}
	if p.MaxLaunchBackoff <= 0 {
		p.MaxLaunchBackoff = time.Minute
	}
	if p.DrainGrace <= 0 {
		p.DrainGrace = 300 * time.Second
	}
	if p.DrainTimeout <= 0 {
		p.DrainTimeout = 5 * time.Minute
	}
	if p.KeepFailed <= 0 {
		p.KeepFailed = 3
	}
	return p
}

// Backoff is the delay before the launch that follows the attempts-th
// failed one: LaunchBackoff doubled per earlier failure, at most
// MaxLaunchBackoff.
func (p Params) Backoff(attempts int32) time.Duration {
	p = p.WithDefaults()
	d := p.LaunchBackoff
	for i := int32(1); i < attempts && d < p.MaxLaunchBackoff; i++ {
		d *= 2
	}
	return min(d, p.MaxLaunchBackoff)
}

// edit accumulates one decision's changes over working copies of the
// records it touches, then turns them into a Change: one NodeChanged per
// changed node (its final state), cluster statuses recomputed once at the
// end, Slurm files re-rendered where the node set or spec changed.
type edit struct {
	s   *State
	p   Params
	now time.Time

	cl      map[string]*Cluster
	clOrder []string
	delCl   []string
	nd      map[string]*loomv1.Node // nil: removed
	ndOrder []string

	touched map[string]bool   // clusters whose status to recompute
	members map[string]bool   // clusters whose Slurm files to re-render
	done    map[string]string // cluster → the operation this change finished
	// instant maps a cluster to the operation of an update this change
	// applied and finished at once (one that moves no node), which is not
	// the cluster's operation in progress.
	instant map[string]string

	slurm    map[string]*loomv1.SlurmConfig
	delSlurm []string
	resPut   []*loomv1.Reservation
	resDel   []string

	rp      map[string]*Repair // by Repair.Node; nil: ended
	rpOrder []string

	before, after []proto.Message
}

func (s *State) edit(p Params, now time.Time) *edit {
	return &edit{
		s: s, p: p.WithDefaults(), now: now,
		cl: map[string]*Cluster{}, nd: map[string]*loomv1.Node{},
		touched: map[string]bool{}, members: map[string]bool{}, done: map[string]string{}, instant: map[string]string{},
		slurm: map[string]*loomv1.SlurmConfig{}, rp: map[string]*Repair{},
	}
}

// cluster returns the current record of a cluster (working copy or state),
// nil when there is none. It must not be modified.
func (e *edit) cluster(name string) *Cluster {
	if c, ok := e.cl[name]; ok {
		return c
	}
	return e.s.Clusters[name]
}

// mutCluster returns the working copy of a cluster's record, to modify.
func (e *edit) mutCluster(name string) *Cluster {
	if c, ok := e.cl[name]; ok {
		return c
	}
	c := e.s.Clusters[name].clone()
	e.putCluster(c)
	return c
}

// putCluster makes c the cluster's working record.
func (e *edit) putCluster(c *Cluster) {
	if _, ok := e.cl[c.Name()]; !ok {
		e.clOrder = append(e.clOrder, c.Name())
	}
	c.Cluster.UpdateTime = timestamppb.New(e.now)
	e.cl[c.Name()] = c
	e.touched[c.Name()] = true
}

// node returns the current record of a node, nil when there is none. It must
// not be modified.
func (e *edit) node(name string) *loomv1.Node {
	if n, ok := e.nd[name]; ok {
		return n
	}
	return e.s.Nodes[name]
}

// mutNode returns the working copy of an existing node, to modify.
func (e *edit) mutNode(name string) *loomv1.Node {
	if n, ok := e.nd[name]; ok && n != nil {
		return n
	}
	n := proto.Clone(e.s.Nodes[name]).(*loomv1.Node)
	e.putNode(n)
	return n
}

// putNode makes n the node's working record.
func (e *edit) putNode(n *loomv1.Node) {
	if _, ok := e.nd[n.GetName()]; !ok {
		e.ndOrder = append(e.ndOrder, n.GetName())
	}
	if old := e.node(n.GetName()); old == nil || slurmRelevant(old, n) {
		e.members[n.GetCluster()] = true
	}
	e.nd[n.GetName()] = n
	e.touched[n.GetCluster()] = true
}

// delNode removes a node.
func (e *edit) delNode(name string) {
	n := e.node(name)
	if n == nil {
		return
	}
	if _, ok := e.nd[name]; !ok {
		e.ndOrder = append(e.ndOrder, name)
	}
	e.nd[name] = nil
	e.members[n.GetCluster()] = true
	e.touched[n.GetCluster()] = true
}

// slurmRelevant reports whether a node change may change the cluster's
// Slurm files: what the node is, or whether it exists for Slurm at all
// (FAILED and DELETING nodes are left out of the files). Registration,
// health and draining do not change the files: Slurm learns those from the
// nodes themselves.
func slurmRelevant(a, b *loomv1.Node) bool {
	return a.GetHostname() != b.GetHostname() || a.GetNodePool() != b.GetNodePool() || a.GetBlock() != b.GetBlock() ||
		a.GetRole() != b.GetRole() || a.GetGpus() != b.GetGpus() || a.GetMachineType() != b.GetMachineType() ||
		inSlurm(a) != inSlurm(b)
}

// inSlurm reports whether a node belongs in the cluster's Slurm files.
func inSlurm(n *loomv1.Node) bool {
	return n.GetState() != loomv1.Node_FAILED && n.GetState() != loomv1.Node_DELETING
}

// clusterNodes returns the current nodes of a cluster (working copies
// included, removed ones not), sorted by name.
func (e *edit) clusterNodes(cluster string) []*loomv1.Node {
	out := make([]*loomv1.Node, 0, len(e.s.byCluster[cluster]))
	for name := range e.s.byCluster[cluster] {
		if n := e.node(name); n != nil {
			out = append(out, n)
		}
	}
	for _, name := range e.ndOrder {
		if n := e.nd[name]; n != nil && n.GetCluster() == cluster && e.s.Nodes[name] == nil {
			out = append(out, n)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetName() < out[j].GetName() })
	return out
}

// live returns the node and its cluster when both exist and the cluster is
// not being deleted (events about such nodes change nothing).
func (e *edit) live(node string) (*loomv1.Node, *Cluster) {
	n := e.node(node)
	if n == nil {
		return nil, nil
	}
	c := e.cluster(n.GetCluster())
	if c == nil || c.State() == loomv1.Cluster_DELETING {
		return nil, nil
	}
	return n, c
}

// change recomputes the touched clusters and returns the Change: explicit
// "before" events, then ClusterChanged per changed cluster, then NodeChanged
// or NodeRemoved per changed node, then "after" events.
func (e *edit) change() Change {
	e.checkRepairs()
	names := make([]string, 0, len(e.touched))
	for name := range e.touched {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		e.refresh(name)
	}

	var ch Change
	ch.Events = append(ch.Events, e.before...)
	for _, name := range e.clOrder {
		c := e.cl[name]
		// Of the spec alone (status and times left out): set here, where
		// every written cluster passes, so that what is stored, emitted and
		// read back always carries the etag its spec has.
		c.Cluster.Etag = clusterspec.Etag(c.Cluster)
		ch.PutClusters = append(ch.PutClusters, c)
		ev := &eventsv1.ClusterChanged{Operation: c.Operation, Cluster: c.Cluster}
		if op := e.done[name]; op != "" {
			ev.Operation, ev.OperationDone = op, true
		}
		if op := e.instant[name]; op != "" && ev.Operation == "" {
			ev.Operation, ev.OperationDone = op, true
		} else if op != "" {
			// The event already names the cluster's own operation: the
			// instant one is finished by one of its own, with the same
			// cluster.
			ch.Events = append(ch.Events, ev)
			ev = &eventsv1.ClusterChanged{Operation: op, Cluster: c.Cluster, OperationDone: true}
		}
		ch.Events = append(ch.Events, ev)
	}
	for _, name := range e.ndOrder {
		n := e.nd[name]
		switch {
		case n != nil:
			ch.PutNodes = append(ch.PutNodes, n)
			ch.Events = append(ch.Events, &eventsv1.NodeChanged{Node: n})
		case e.s.Nodes[name] != nil:
			ch.DelNodes = append(ch.DelNodes, name)
			ch.Events = append(ch.Events, &eventsv1.NodeRemoved{Node: name, Cluster: e.s.Nodes[name].GetCluster()})
		}
	}
	ch.Events = append(ch.Events, e.after...)
	ch.DelClusters = e.delCl
	if len(e.slurm) > 0 {
		ch.PutSlurm = e.slurm
	}
	ch.DelSlurm = e.delSlurm
	ch.PutReservations, ch.DelReservations = e.resPut, e.resDel
	for _, name := range e.rpOrder {
		switch r := e.rp[name]; {
		case r != nil:
			ch.PutRepairs = append(ch.PutRepairs, r)
		case e.s.Repairs[name] != nil:
			ch.DelRepairs = append(ch.DelRepairs, name)
		}
	}
	return ch
}
