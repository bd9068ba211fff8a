package domain

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/loom-ml/loom/libs/service"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// agentNames returns the agent name of every compute node of cluster.
func agentNames(s *State, cluster string) map[string]bool {
	out := map[string]bool{}
	for _, n := range s.ClusterNodes(cluster) {
		if n.GetRole() != "login" {
			out[service.AgentName(ClusterID(cluster), n.GetHostname())] = true
		}
	}
	return out
}

// TestAgentNamesAreUniqueAcrossClusters: an agent's name (its Redis prefix
// and ACL user, its consumer group, its file_sd file) is
// "agent-<cluster id>-<hostname>", so cluster "a" with pool "b-c"
// (b-c-0001) and cluster "a-b" with pool "c" (c-0001) would both have an
// agent-a-b-c-0001, though their ids differ and they may be different
// projects'. The second is refused (ALREADY_EXISTS, like a taken cluster
// id), in either order, on create and on an update that adds the pool or
// a node set with that id; the other project's cluster is not named.
func TestAgentNamesAreUniqueAcrossClusters(t *testing.T) {
	t.Parallel()
	const (
		a  = "projects/p1/clusters/a"
		ab = "projects/p2/clusters/a-b"
	)
	pool := func(id string) *loomv1.NodePool { return &loomv1.NodePool{Id: id, MachineType: cpuMT, NodeCount: 1} }
	refused := func(t *testing.T, ch Change, cluster string, want ...string) {
		t.Helper()
		f := onlyFailure(t, ch)
		if codes.Code(f.Code) != codes.AlreadyExists || f.Cluster != cluster {
			t.Fatalf("failure = %v, want ALREADY_EXISTS for %s", f, cluster)
		}
		for _, w := range want {
			if !strings.Contains(f.Message, w) {
				t.Errorf("message %q lacks %q", f.Message, w)
			}
		}
		for _, leak := range []string{"p1", "p2"} {
			if strings.Contains(f.Message, "projects/"+leak) {
				t.Errorf("message %q names another project's cluster", f.Message)
			}
		}
	}
	running := func(t *testing.T, s *State, name string) {
		t.Helper()
		for _, n := range s.ClusterNodes(name) {
			apply(s, s.AgentRegistered(p, &eventsv1.AgentRegistered{Node: n.GetName(), Cluster: name, Hostname: n.GetHostname()}, t0.Add(time.Minute)))
		}
		if st := s.Clusters[name].State(); st != loomv1.Cluster_RUNNING {
			t.Fatalf("%s is %v", name, st)
		}
	}

	t.Run("create, pool id", func(t *testing.T) {
		t.Parallel()
		s := NewState(nil, nil, nil, nil)
		apply(s, s.CreateCluster(p, createCmd("op1", clusterSpec(a, pool("b-c"))), t0))
		ch := s.CreateCluster(p, createCmd("op2", clusterSpec(ab, pool("c"))), t0)
		if len(eventsOf[*eventsv1.ClusterOperationFailed](ch)) == 0 {
			apply(s, ch)
			for n := range agentNames(s, ab) {
				if agentNames(s, a)[n] {
					t.Errorf("clusters a (project p1) and a-b (project p2) both have agent %s", n)
				}
			}
			t.FailNow()
		}
		refused(t, ch, ab, "compute.node_pools[0].id", "agent-a-b-c-NNNN", "another cluster's", "choose another")
		t.Log(eventsOf[*eventsv1.ClusterOperationFailed](ch)[0].GetMessage())
		if s.Clusters[ab] != nil {
			t.Fatal("the refused cluster was created")
		}
		// A prefix that makes another name is fine.
		if f := eventsOf[*eventsv1.ClusterOperationFailed](apply(s, s.CreateCluster(p, createCmd("op3", clusterSpec(ab, pool("d"))), t0))); len(f) != 0 {
			t.Fatalf("create of a-b with pool d: %v", f)
		}
	})
	t.Run("create, the other order", func(t *testing.T) {
		t.Parallel()
		s := NewState(nil, nil, nil, nil)
		apply(s, s.CreateCluster(p, createCmd("op1", clusterSpec(ab, pool("c"))), t0))
		refused(t, s.CreateCluster(p, createCmd("op2", clusterSpec(a, pool("b-c"))), t0), a, "compute.node_pools[0].id")
	})
	t.Run("create, node set id", func(t *testing.T) {
		t.Parallel()
		s := NewState(nil, nil, nil, nil)
		apply(s, s.CreateCluster(p, createCmd("op1", clusterSpec(a, pool("b-c"))), t0))
		c := clusterSpec(ab, pool("x"))
		c.Orchestrator = &loomv1.Orchestrator{Slurm: &loomv1.SlurmOrchestrator{
			NodeSets:   []*loomv1.SlurmNodeSet{{Id: "c", NodePoolId: "x"}},
			Partitions: []*loomv1.SlurmPartition{{Id: "all", NodeSetIds: []string{"c"}}},
		}}
		refused(t, s.CreateCluster(p, createCmd("op2", c), t0), ab, "orchestrator.slurm.node_sets[0].id")
	})
	t.Run("same project names the cluster", func(t *testing.T) {
		t.Parallel()
		s := NewState(nil, nil, nil, nil)
		apply(s, s.CreateCluster(p, createCmd("op1", clusterSpec(a, pool("b-c"))), t0))
		refused(t, s.CreateCluster(p, createCmd("op2", clusterSpec("projects/p1/clusters/a-b", pool("c"))), t0),
			"projects/p1/clusters/a-b", "cluster a's")
	})
	t.Run("update adds the pool", func(t *testing.T) {
		t.Parallel()
		s := NewState(nil, nil, nil, nil)
		apply(s, s.CreateCluster(p, createCmd("op1", clusterSpec(a, pool("b-c"))), t0))
		apply(s, s.CreateCluster(p, createCmd("op2", clusterSpec(ab, pool("d"))), t0))
		running(t, s, ab)
		refused(t, s.UpdateCluster(p, &eventsv1.UpdateCluster{Operation: "up", Cluster: clusterSpec(ab, pool("d"), pool("c"))}, t0.Add(time.Hour)),
			ab, "compute.node_pools[1].id")
		for n := range agentNames(s, ab) {
			if agentNames(s, a)[n] {
				t.Fatalf("agent %s in both clusters", n)
			}
		}
	})
	t.Run("a prefix once used stays taken", func(t *testing.T) {
		t.Parallel()
		// Pool b-c of cluster a is removed; while its nodes drain (and
		// after: numbers are never reused, so its prefix is remembered)
		// a-b may not take c.
		s := NewState(nil, nil, nil, nil)
		apply(s, s.CreateCluster(p, createCmd("op1", clusterSpec(a, pool("b-c"), pool("e"))), t0))
		running(t, s, a)
		if f := eventsOf[*eventsv1.ClusterOperationFailed](apply(s, s.UpdateCluster(p, &eventsv1.UpdateCluster{Operation: "up", Cluster: clusterSpec(a, pool("e"))}, t0.Add(time.Hour)))); len(f) != 0 {
			t.Fatalf("removing pool b-c: %v", f)
		}
		refused(t, s.CreateCluster(p, createCmd("op2", clusterSpec(ab, pool("c"))), t0), ab, "compute.node_pools[0].id")
	})
}
