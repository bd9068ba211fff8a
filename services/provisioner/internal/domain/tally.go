package domain

import (
	"maps"
	"slices"

	"github.com/loom-ml/loom/libs/clusterspec"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// tally is what a cluster's status needs of its nodes: per pool, how many
// nodes are in each state and which are FAILED or DOWN, and the login
// nodes. State keeps one per cluster up to date as nodes are put and
// deleted, so that a decision about one node (a registration, a health
// verdict) recomputes the status from the tally and its own few changes
// instead of walking every node of the cluster: at 10,000 nodes the walk
// made each registration cost as much as the whole create.
type tally struct {
	pools map[string]*poolCounts
	// login maps each login node's name to its hostname.
	login map[string]string
}

func newTally() *tally {
	return &tally{pools: map[string]*poolCounts{}, login: map[string]string{}}
}

// clone returns a copy that may be changed without touching t. It costs
// the pools plus the FAILED, DOWN and login nodes, never the others.
func (t *tally) clone() *tally {
	out := newTally()
	for id, c := range t.pools {
		out.pools[id] = c.clone()
	}
	for k, v := range t.login {
		out.login[k] = v
	}
	return out
}

// count adds node n to the tally (d = 1) or takes it out (d = -1).
func (t *tally) count(n *loomv1.Node, d int32) {
	if n.GetRole() == clusterspec.RoleLogin {
		if d > 0 {
			t.login[n.GetName()] = n.GetHostname()
		} else {
			delete(t.login, n.GetName())
		}
		return
	}
	c := t.pools[n.GetNodePool()]
	if c == nil {
		c = &poolCounts{}
		t.pools[n.GetNodePool()] = c
	}
	c.count(n, d)
	if c.empty() {
		delete(t.pools, n.GetNodePool())
	}
}

// loginHost is the hostname of the first login node by name ("" for none).
func (t *tally) loginHost() string {
	first := ""
	for name := range t.login {
		if first == "" || name < first {
			first = name
		}
	}
	return t.login[first]
}

// poolCounts counts one pool's compute nodes by state.
type poolCounts struct {
	target                                                int32
	ready, provisioning, down, failed, draining, deleting int32
	// repairing counts REBOOTING, REIMAGING and REPLACING nodes: in service
	// again once their repair is done.
	repairing int32
	// failedNodes and downNodes hold the FAILED nodes and the hostnames of
	// the DOWN ones, by node name.
	failedNodes map[string]*loomv1.Node
	downNodes   map[string]string
}

func (c *poolCounts) clone() *poolCounts {
	out := *c
	out.failedNodes = make(map[string]*loomv1.Node, len(c.failedNodes))
	for k, v := range c.failedNodes {
		out.failedNodes[k] = v
	}
	out.downNodes = make(map[string]string, len(c.downNodes))
	for k, v := range c.downNodes {
		out.downNodes[k] = v
	}
	return &out
}

func (c *poolCounts) count(n *loomv1.Node, d int32) {
	name := n.GetName()
	switch n.GetState() {
	case loomv1.Node_READY:
		c.ready += d
	case loomv1.Node_PROVISIONING:
		c.provisioning += d
	case loomv1.Node_DOWN:
		c.down += d
		if c.downNodes == nil {
			c.downNodes = map[string]string{}
		}
		if d > 0 {
			c.downNodes[name] = n.GetHostname()
		} else {
			delete(c.downNodes, name)
		}
	case loomv1.Node_FAILED:
		c.failed += d
		if c.failedNodes == nil {
			c.failedNodes = map[string]*loomv1.Node{}
		}
		if d > 0 {
			c.failedNodes[name] = n
		} else {
			delete(c.failedNodes, name)
		}
	case loomv1.Node_DRAINING:
		c.draining += d
	case loomv1.Node_DELETING:
		c.deleting += d
	case loomv1.Node_REBOOTING, loomv1.Node_REIMAGING, loomv1.Node_REPLACING:
		c.repairing += d
	}
}

// empty reports whether no node is counted.
func (c *poolCounts) empty() bool {
	return c.ready == 0 && c.provisioning == 0 && c.down == 0 && c.failed == 0 && c.draining == 0 && c.deleting == 0 &&
		c.repairing == 0
}

// live is how many of the pool's nodes are, or are becoming, in service.
func (c *poolCounts) live() int32 { return c.ready + c.provisioning + c.down + c.repairing }

// failedHosts returns the FAILED nodes' hostnames in name order and
// "hostname: reason" of the last of them ("" when none).
func (c *poolCounts) failedHosts() (hosts []string, last string) {
	names := slices.Sorted(maps.Keys(c.failedNodes))
	for _, name := range names {
		hosts = append(hosts, c.failedNodes[name].GetHostname())
	}
	if len(names) > 0 {
		n := c.failedNodes[names[len(names)-1]]
		last = n.GetHostname() + ": " + n.GetReason()
	}
	return hosts, last
}

// downHosts returns the DOWN nodes' hostnames in name order.
func (c *poolCounts) downHosts() []string {
	var hosts []string
	for _, name := range slices.Sorted(maps.Keys(c.downNodes)) {
		hosts = append(hosts, c.downNodes[name])
	}
	return hosts
}

// tally returns the cluster's tally as this edit leaves it: the state's,
// with the edit's own node changes counted in.
func (e *edit) tally(cluster string) *tally {
	t := newTally()
	if base := e.s.tallies[cluster]; base != nil {
		t = base.clone()
	}
	for _, name := range e.ndOrder {
		if old := e.s.Nodes[name]; old != nil && old.GetCluster() == cluster {
			t.count(old, -1)
		}
		if n := e.nd[name]; n != nil && n.GetCluster() == cluster {
			t.count(n, 1)
		}
	}
	return t
}

// countPools returns a cluster's pools in order (the spec's, then retired
// ones, then pools only nodes still name, by id) with their counts and
// targets, from the tally.
func countPools(rec *Cluster, t *tally) (order []string, counts map[string]*poolCounts) {
	counts = map[string]*poolCounts{}
	add := func(id string, target int32) {
		if counts[id] != nil {
			return
		}
		c := t.pools[id]
		if c == nil {
			c = &poolCounts{}
		}
		c.target = target
		counts[id] = c
		order = append(order, id)
	}
	for _, np := range rec.Cluster.GetCompute().GetNodePools() {
		add(np.GetId(), np.GetNodeCount())
	}
	for _, np := range rec.Retired {
		add(np.GetId(), 0)
	}
	for _, id := range slices.Sorted(maps.Keys(t.pools)) {
		add(id, 0)
	}
	return order, counts
}
