// Package domain is the provisioner's pure core: clusters, nodes,
// reservations and capacity as state machines. Each decision takes the
// current State, one input, the Params and the time, and returns a Change
// (records to write or delete, events to emit) without doing any I/O. The app
// writes a Change atomically and only then applies it to the in-memory State
// with State.Apply.
//
// Records are immutable once they are in a State or a Change: decisions copy
// before they modify, so readers may hand them out without cloning.
//
// Capacity is never stored: what a cluster claims is derived from its spec
// and its nodes (see Claims), so it is written in the same Apply as the
// change that causes it and cannot drift from the clusters.
package domain

import (
	"maps"
	"slices"
	"sort"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/auth"
	"github.com/loom-ml/loom/libs/clusterspec"
	"github.com/loom-ml/loom/libs/resname"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// Cluster is the provisioner's record of a cluster.
type Cluster struct {
	// Cluster is the resource as served and emitted.
	Cluster *loomv1.Cluster
	// Operation is the operation in progress: the create until the cluster
	// is RUNNING (or ERROR), an update while UPDATING, the delete while
	// DELETING; "" when none.
	Operation string
	// CreateOperation is the operation that created the cluster; a
	// redelivered create for it changes nothing.
	CreateOperation string
	// Deadline is when the operation in progress completes with what it has
	// (RUNNING-degraded, or ERROR when a pool has no ready node); zero when none.
	Deadline time.Time
	// NextIndex is the last number used per hostname prefix: numbers are
	// never reused within a cluster.
	NextIndex map[string]int32
	// Retired holds node pools an update removed whose nodes are still
	// draining; each is dropped when its last node is gone.
	Retired []*loomv1.NodePool
}

// Name returns the cluster's full name.
func (c *Cluster) Name() string { return c.Cluster.GetName() }

// State returns the cluster's lifecycle state.
func (c *Cluster) State() loomv1.Cluster_State { return c.Cluster.GetStatus().GetState() }

// clone returns a copy that may be modified without touching c.
func (c *Cluster) clone() *Cluster {
	out := *c
	out.Cluster = proto.Clone(c.Cluster).(*loomv1.Cluster)
	out.NextIndex = maps.Clone(c.NextIndex)
	if out.NextIndex == nil {
		out.NextIndex = map[string]int32{}
	}
	out.Retired = slices.Clone(c.Retired)
	return &out
}

// State is every cluster, node, reservation and rendered Slurm
// configuration the provisioner knows.
type State struct {
	Clusters     map[string]*Cluster
	Nodes        map[string]*loomv1.Node
	Reservations map[string]*loomv1.Reservation
	// Slurm holds each cluster's rendered Slurm files, by cluster name.
	Slurm map[string]*loomv1.SlurmConfig
	// Repairs holds the repairs in progress, by the name of the node health
	// asked about (see Repair).
	Repairs map[string]*Repair
	// Revoked holds the revocations of removed nodes' identities, by node
	// name (auth.RevokedNodesKey; see WithRevocations).
	Revoked map[string]auth.NodeRevocation
	// repairTargets maps the node each repair brings up (Repair.Target) to
	// the repair's key in Repairs.
	repairTargets map[string]string
	// byCluster indexes node names by cluster name.
	byCluster map[string]map[string]struct{}
	// tallies counts each cluster's nodes for its status (see tally).
	tallies map[string]*tally
}

// NewState returns a State holding the given records.
func NewState(clusters []*Cluster, nodes []*loomv1.Node, reservations []*loomv1.Reservation, slurm map[string]*loomv1.SlurmConfig) *State {
	s := &State{
		Clusters: map[string]*Cluster{}, Nodes: map[string]*loomv1.Node{},
		Reservations: map[string]*loomv1.Reservation{}, Slurm: map[string]*loomv1.SlurmConfig{},
		Repairs: map[string]*Repair{}, repairTargets: map[string]string{}, Revoked: map[string]auth.NodeRevocation{},
		byCluster: map[string]map[string]struct{}{}, tallies: map[string]*tally{},
	}
	for _, c := range clusters {
		// Recomputed on load: a record written before clusters had
		// etags gets one, and one always matches its spec.
		c.Cluster.Etag = clusterspec.Etag(c.Cluster)
		s.Clusters[c.Name()] = c
	}
	for _, n := range nodes {
		s.putNode(n)
	}
	for _, r := range reservations {
		s.Reservations[r.GetName()] = r
	}
	maps.Copy(s.Slurm, slurm)
	return s
}

func (s *State) putNode(n *loomv1.Node) {
	if old := s.Nodes[n.GetName()]; old != nil {
		if old.GetCluster() != n.GetCluster() {
			s.delNode(n.GetName())
		} else {
			s.tallies[old.GetCluster()].count(old, -1)
		}
	}
	s.Nodes[n.GetName()] = n
	t := s.tallies[n.GetCluster()]
	if t == nil {
		t = newTally()
		s.tallies[n.GetCluster()] = t
	}
	t.count(n, 1)
	set := s.byCluster[n.GetCluster()]
	if set == nil {
		set = map[string]struct{}{}
		s.byCluster[n.GetCluster()] = set
	}
	set[n.GetName()] = struct{}{}
}

func (s *State) delNode(name string) {
	n := s.Nodes[name]
	if n == nil {
		return
	}
	delete(s.Nodes, name)
	if set := s.byCluster[n.GetCluster()]; set != nil {
		delete(set, name)
		if len(set) == 0 {
			delete(s.byCluster, n.GetCluster())
		}
	}
	if t := s.tallies[n.GetCluster()]; t != nil {
		t.count(n, -1)
		if len(s.byCluster[n.GetCluster()]) == 0 {
			delete(s.tallies, n.GetCluster())
		}
	}
}

// ClusterNodes returns the nodes of a cluster, sorted by name.
func (s *State) ClusterNodes(cluster string) []*loomv1.Node {
	out := make([]*loomv1.Node, 0, len(s.byCluster[cluster]))
	for name := range s.byCluster[cluster] {
		out = append(out, s.Nodes[name])
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetName() < out[j].GetName() })
	return out
}

// Change is the outcome of a decision: what to write and what to emit.
type Change struct {
	PutClusters     []*Cluster
	PutNodes        []*loomv1.Node
	PutReservations []*loomv1.Reservation
	// PutSlurm holds newly rendered Slurm files by cluster name.
	PutSlurm        map[string]*loomv1.SlurmConfig
	DelClusters     []string
	DelNodes        []string
	DelReservations []string
	DelSlurm        []string
	// PutRepairs and DelRepairs are repairs started or moved on, and ended
	// (by Repair.Node).
	PutRepairs []*Repair
	DelRepairs []string
	// PutRevocations revokes the identities of removed nodes, by node name;
	// DelRevocations forgets expired revocations (WithRevocations).
	PutRevocations map[string]auth.NodeRevocation
	DelRevocations []string
	// Events are the payloads to emit (cluster, node and reservation
	// events), in order.
	Events []proto.Message
}

// Empty reports whether the change writes and emits nothing.
func (c Change) Empty() bool {
	return len(c.PutClusters) == 0 && len(c.PutNodes) == 0 && len(c.PutReservations) == 0 && len(c.PutSlurm) == 0 &&
		len(c.DelClusters) == 0 && len(c.DelNodes) == 0 && len(c.DelReservations) == 0 && len(c.DelSlurm) == 0 &&
		len(c.PutRepairs) == 0 && len(c.DelRepairs) == 0 && len(c.Events) == 0 &&
		len(c.PutRevocations) == 0 && len(c.DelRevocations) == 0
}

// WithRevocations returns c revoking the identities of the nodes it
// removes, in the same write as their removal (and their NodeRemoved): for
// each, every registration made up to now, or up to the one the node last
// registered with if that names a later time (auth.RevocationFor), for
// identities lasting at most lifetime. A node removed again keeps the
// later of its revocations. The revocations past their expiry go with the
// same write, so that the list holds those of about one identity lifetime
// of removals.
func (s *State) WithRevocations(c Change, now time.Time, lifetime time.Duration) Change {
	if len(c.DelNodes) == 0 {
		return c
	}
	c.PutRevocations = make(map[string]auth.NodeRevocation, len(c.DelNodes))
	for _, name := range c.DelNodes {
		rev := auth.RevocationFor(now, s.Nodes[name].GetRegistration(), lifetime)
		if old, ok := s.Revoked[name]; ok && old.Live(now) {
			if !auth.SupersedesRegistration(rev.Before, old.Before) {
				rev.Before = old.Before
			}
			rev.Until = maxTime(rev.Until, old.Until)
		}
		c.PutRevocations[name] = rev
	}
	for _, name := range slices.Sorted(maps.Keys(s.Revoked)) {
		if _, put := c.PutRevocations[name]; !put && !s.Revoked[name].Live(now) {
			c.DelRevocations = append(c.DelRevocations, name)
		}
	}
	return c
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// Apply makes the in-memory state reflect a written change.
func (s *State) Apply(c Change) {
	for _, cl := range c.PutClusters {
		s.Clusters[cl.Name()] = cl
	}
	for _, n := range c.PutNodes {
		s.putNode(n)
	}
	for _, r := range c.PutReservations {
		s.Reservations[r.GetName()] = r
	}
	maps.Copy(s.Slurm, c.PutSlurm)
	for _, name := range c.DelNodes {
		s.delNode(name)
	}
	for _, name := range c.DelClusters {
		delete(s.Clusters, name)
	}
	for _, name := range c.DelReservations {
		delete(s.Reservations, name)
	}
	for _, name := range c.DelSlurm {
		delete(s.Slurm, name)
	}
	maps.Copy(s.Revoked, c.PutRevocations)
	for _, name := range c.DelRevocations {
		delete(s.Revoked, name)
	}
	for _, name := range c.DelRepairs {
		if r := s.Repairs[name]; r != nil {
			delete(s.repairTargets, r.Target)
			delete(s.Repairs, name)
		}
	}
	for _, r := range c.PutRepairs {
		if old := s.Repairs[r.Node]; old != nil {
			delete(s.repairTargets, old.Target)
		}
		s.Repairs[r.Node] = r
		s.repairTargets[r.Target] = r.Node
	}
}

// clusterOf splits projects/{p}/clusters/{c}: the project by shape only
// (the gateway checked it), the cluster id a valid id, since the local
// provider names directories by it.
func clusterOf(name string) (resname.Cluster, bool) {
	c, err := resname.SplitCluster(name)
	if err != nil || !resname.ValidID(c.ID) {
		return resname.Cluster{}, false
	}
	return c, true
}

// ClusterID returns the cluster id of a cluster's full name ("" when malformed).
func ClusterID(name string) string {
	c, _ := clusterOf(name)
	return c.ID
}

// reservationOf splits projects/{p}/reservations/{r}: the project by shape
// only, the reservation id a valid id.
func reservationOf(name string) (resname.Reservation, bool) {
	r, err := resname.SplitReservation(name)
	if err != nil || !resname.ValidID(r.ID) {
		return resname.Reservation{}, false
	}
	return r, true
}
