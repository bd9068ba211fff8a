package domain

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/provisioner/internal/capacity"
	"github.com/loom-ml/loom/services/provisioner/internal/provider"
)

// fromScratch is s rebuilt from its records alone, as a restart loads it.
func fromScratch(s *State) *State {
	var cs []*Cluster
	for _, c := range s.Clusters {
		cs = append(cs, c)
	}
	var ns []*loomv1.Node
	for _, n := range s.Nodes {
		ns = append(ns, n)
	}
	return NewState(cs, ns, nil, s.Slurm)
}

// summary writes tallies out in a canonical form.
func summary(ts map[string]*tally) string {
	var b strings.Builder
	for _, c := range slices.Sorted(maps.Keys(ts)) {
		t := ts[c]
		fmt.Fprintf(&b, "%s login=%v\n", c, t.login)
		for _, id := range slices.Sorted(maps.Keys(t.pools)) {
			pc := t.pools[id]
			hosts, last := pc.failedHosts()
			fmt.Fprintf(&b, "  %s ready=%d prov=%d down=%d failed=%d draining=%d deleting=%d failed=%v (%s) down=%v\n", id,
				pc.ready, pc.provisioning, pc.down, pc.failed, pc.draining, pc.deleting, hosts, last, pc.downHosts())
		}
	}
	return b.String()
}

// TestIncrementalStatusMatchesRecount drives a cluster through random
// registrations, health verdicts, launch failures, preemptions, resizes,
// drains and removals. After every step the per-cluster tally that State
// keeps up to date must equal one counted from the records from scratch,
// and the status the step wrote must be the one a recount gives (a refresh
// on the rebuilt state changes nothing).
func TestIncrementalStatusMatchesRecount(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	withLogin := func(c *loomv1.Cluster, n int32) *loomv1.Cluster {
		c.Orchestrator = &loomv1.Orchestrator{Slurm: &loomv1.SlurmOrchestrator{LoginNodes: &loomv1.LoginNodes{Count: n}}}
		return c
	}
	s := NewState(nil, nil, nil, nil)
	s.Apply(s.CreateCluster(p, createCmd("op1", withLogin(clusterSpec(demo, gpuPool("gpu", 12), &loomv1.NodePool{Id: "cpu", MachineType: cpuMT, NodeCount: 5}), 2)), t0))
	if s.Clusters[demo] == nil || len(s.tallies[demo].login) != 2 {
		t.Fatalf("create failed: %v", s.tallies[demo])
	}
	now := t0
	pick := func() *loomv1.Node {
		ns := s.ClusterNodes(demo)
		return ns[rng.IntN(len(ns))]
	}
	steps := map[string]func(){
		"register": func() {
			n := pick()
			s.Apply(s.AgentRegistered(p, &eventsv1.AgentRegistered{Node: n.GetName()}, now))
		},
		"unhealthy": func() {
			s.Apply(s.NodeHealthChanged(p, &eventsv1.NodeHealthChanged{Node: pick().GetName(), Health: eventsv1.NodeHealth_UNHEALTHY, Reason: "gpu fell off the bus"}, now))
		},
		"healthy": func() {
			s.Apply(s.NodeHealthChanged(p, &eventsv1.NodeHealthChanged{Node: pick().GetName(), Health: eventsv1.NodeHealth_HEALTHY}, now))
		},
		"launch failed": func() { s.Apply(s.LaunchFailed(p, pick().GetName(), "exec: no agent", now)) },
		"preempted": func() {
			s.Apply(s.ProviderEvent(p, provider.Event{Node: pick().GetName(), Kind: provider.Preempted, At: now}, now))
		},
		"resize": func() {
			if st := s.Clusters[demo].State(); st == loomv1.Cluster_RUNNING || st == loomv1.Cluster_ERROR {
				spec := clusterSpec(demo, gpuPool("gpu", int32(4+rng.IntN(12))), &loomv1.NodePool{Id: "cpu", MachineType: cpuMT, NodeCount: int32(1 + rng.IntN(6))})
				s.Apply(s.UpdateCluster(p, &eventsv1.UpdateCluster{Operation: fmt.Sprintf("up-%d", now.Unix()), Cluster: withLogin(spec, int32(rng.IntN(3))), DrainGraceSeconds: 60}, now))
			}
		},
		"drained": func() { s.Apply(s.NodeDrained(p, &eventsv1.NodeDrained{Node: pick().GetName()}, now)) },
		"remove":  func() { s.Apply(s.RemoveNode(p, pick().GetName(), now)) },
		"tick":    func() { now = now.Add(3 * time.Minute); s.Apply(s.Tick(p, now)) },
	}
	names := make([]string, 0, len(steps))
	for k := range steps {
		names = append(names, k)
	}
	slices.Sort(names)
	seen := map[loomv1.Node_State]bool{}
	for i := range 3000 {
		step := names[rng.IntN(len(names))]
		steps[step]()
		for _, n := range s.Nodes {
			seen[n.GetState()] = true
		}
		fresh := fromScratch(s)
		if got, want := summary(s.tallies), summary(fresh.tallies); got != want {
			t.Fatalf("step %d (%s): tally\n%s\nrecounted\n%s", i, step, got, want)
		}
		e := fresh.edit(p, now)
		e.touched[demo] = true
		if ch := e.change(); len(ch.PutClusters) != 0 {
			// A deadline's failure message stays until the next change
			// recomputes the status; everything counted must agree.
			got := proto.Clone(s.Clusters[demo].Cluster.GetStatus()).(*loomv1.ClusterStatus)
			want := proto.Clone(ch.PutClusters[0].Cluster.GetStatus()).(*loomv1.ClusterStatus)
			got.Message, want.Message = "", ""
			if !proto.Equal(got, want) {
				t.Fatalf("step %d (%s): status %v, a recount gives %v", i, step, got, want)
			}
		}
	}
	for _, st := range []loomv1.Node_State{loomv1.Node_PROVISIONING, loomv1.Node_READY, loomv1.Node_DOWN, loomv1.Node_FAILED, loomv1.Node_DRAINING, loomv1.Node_DELETING} {
		if !seen[st] {
			t.Errorf("no node was ever %v: the walk did not cover it", st)
		}
	}
}

// BenchmarkRegister10k creates a 10,000-node cluster and registers every
// node, as clusterbench -nodes 10000 makes the provisioner do: one event at
// a time, and 256 at a time (State.Batch), as the provisioner's consumer
// hands them over when they wait together.
func BenchmarkRegister10k(b *testing.B) {
	pp := params(nil)
	pp.MaxNodesPerPool = 0
	pp.Capacity = capacity.MustParse("*/*/ON_DEMAND=20000")
	for _, batch := range []int{1, 256} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			for b.Loop() {
				s := NewState(nil, nil, nil, nil)
				s.Apply(s.CreateCluster(pp, createCmd("op1", clusterSpec(demo, gpuPool("gpu", 10000))), t0))
				for nodes := s.ClusterNodes(demo); len(nodes) > 0; {
					k := min(batch, len(nodes))
					if k == 1 {
						n := nodes[0]
						s.Apply(s.AgentRegistered(pp, &eventsv1.AgentRegistered{Node: n.GetName(), Cluster: demo, Hostname: n.GetHostname()}, t0.Add(time.Minute)))
					} else {
						evs := make([]proto.Message, k)
						for i, n := range nodes[:k] {
							evs[i] = &eventsv1.AgentRegistered{Node: n.GetName(), Cluster: demo, Hostname: n.GetHostname()}
						}
						ch, err := s.Batch(pp, evs, t0.Add(time.Minute))
						if err != nil {
							b.Fatal(err)
						}
						s.Apply(ch)
					}
					nodes = nodes[k:]
				}
				if st := s.Clusters[demo].State(); st != loomv1.Cluster_RUNNING {
					b.Fatalf("cluster is %v", st)
				}
			}
		})
	}
}

// TestProviderBoundsNodesPerCluster: on a provider where every node is a
// process here (local), a cluster is bounded as a whole, not only per pool.
func TestProviderBoundsNodesPerCluster(t *testing.T) {
	t.Parallel()
	pp := params(nil)
	pp.MaxNodesPerCluster = 64
	s := NewState(nil, nil, nil, nil)
	ch := s.CreateCluster(pp, createCmd("op1", clusterSpec(demo, gpuPool("a", 40), gpuPool("b", 40))), t0)
	f := onlyFailure(t, ch)
	if f.GetCode() != int32(codes.InvalidArgument) ||
		!strings.Contains(f.GetMessage(), "compute.node_pools: at most 64 nodes in a cluster on this provider (node_count over every pool), got 80") {
		t.Fatalf("failure = %v", f)
	}
	if ch := s.CreateCluster(pp, createCmd("op2", clusterSpec(demo, gpuPool("a", 32), gpuPool("b", 32))), t0); len(ch.PutClusters) != 1 {
		t.Fatalf("64 nodes refused: %v", ch.Events)
	}
}
