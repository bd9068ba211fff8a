package jobstore

import (
	"testing"

	"github.com/loom-ml/loom/libs/clusterspec"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// TestClusterPartitions: a cluster without partitions has the implicit
// default one; "" names the default, else the first; unknown names are -1.
func TestClusterPartitions(t *testing.T) {
	t.Parallel()
	var none *Cluster
	if ps := none.EffectivePartitions(); len(ps) != 1 || ps[0].Name != ImplicitPartition || !ps[0].Default {
		t.Fatalf("implicit partitions %+v", ps)
	}
	if none.Schedulable() {
		t.Fatal("a nil cluster is not schedulable")
	}
	c := &Cluster{SharedDir: "/s", State: loomv1.Cluster_RUNNING, Partitions: []Partition{{Name: "a"}, {Name: "b", Default: true}}}
	if p, i := c.Partition(""); p.Name != "b" || i != 1 {
		t.Fatalf(`Partition("") = %q, %d; want the default b, 1`, p.Name, i)
	}
	if _, i := c.Partition("zz"); i != -1 {
		t.Fatalf("unknown partition at %d", i)
	}
	c.Partitions[1].Default = false
	if p, i := c.Partition(""); p.Name != "a" || i != 0 {
		t.Fatalf(`Partition("") without a default = %q, %d; want a, 0`, p.Name, i)
	}
	if !c.Schedulable() {
		t.Fatal("a running cluster with a shared dir is schedulable")
	}
	c.State = loomv1.Cluster_DELETING
	if c.Schedulable() {
		t.Fatal("a deleting cluster is not schedulable")
	}
}

// TestNodeStates: which nodes take work, which count as lost, and why.
func TestNodeStates(t *testing.T) {
	t.Parallel()
	n := &Node{Hostname: "h", State: loomv1.Node_READY}
	if !n.Usable() || n.Lost() || n.Draining() {
		t.Fatal("a ready node is usable, not lost")
	}
	n.Role = clusterspec.RoleLogin
	if n.Usable() {
		t.Fatal("a login node takes no work")
	}
	n.Role, n.State = "", loomv1.Node_DRAINING
	if n.Usable() || n.Lost() || !n.Draining() {
		t.Fatal("a draining node keeps its work and takes none")
	}
	n.State, n.Reason = loomv1.Node_DOWN, "power"
	if !n.Lost() || n.DownReason() != "node h down: power" {
		t.Fatalf("down node: lost %v, %q", n.Lost(), n.DownReason())
	}
	n.State, n.Unhealthy, n.HealthReason = loomv1.Node_READY, true, "xid 79"
	if !n.Lost() || n.DownReason() != "node h down: xid 79" {
		t.Fatalf("unhealthy node: lost %v, %q", n.Lost(), n.DownReason())
	}
}
