package domain

import (
	"errors"
	"fmt"
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

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

const (
	demo  = "projects/default/clusters/demo"
	zone  = "us-central1-a"
	h100  = "a3-highgpu-8g"
	cpuMT = "n2-standard-8"
)

// renders counts the renders of the fake renderer, by cluster name.
type renders map[string]int

// params are the test's settings; the renderer lists the hostnames it got,
// so tests see what the Slurm files would hold.
func params(r renders) Params {
	return Params{
		HomeDir:           func(c *loomv1.Cluster) string { return "/data/clusters/" + ClusterID(c.GetName()) + "/home" },
		ScratchDir:        func(c *loomv1.Cluster) string { return "/data/clusters/" + ClusterID(c.GetName()) + "/scratch" },
		WorkDir:           func(c, h string) string { return "/data/clusters/" + c + "/nodes/" + h },
		MaxNodesPerPool:   64,
		Capacity:          capacity.MustParse("*/*/ON_DEMAND=100,*/*/SPOT=100," + zone + "/" + h100 + "/SPOT=4"),
		BootTimeout:       10 * time.Minute,
		OperationTimeout:  30 * time.Minute,
		MaxLaunchAttempts: 3,
		LaunchBackoff:     time.Second,
		MaxLaunchBackoff:  4 * time.Second,
		DrainTimeout:      5 * time.Minute,
		KeepFailed:        2,
		Render: func(c *loomv1.Cluster, nodes []*loomv1.Node) (*loomv1.SlurmConfig, error) {
			if r != nil {
				r[c.GetName()]++
			}
			var hosts []string
			for _, n := range nodes {
				hosts = append(hosts, n.GetHostname())
			}
			slices.Sort(hosts)
			return &loomv1.SlurmConfig{SlurmConf: "ClusterName=" + ClusterID(c.GetName()) + "\nNodes=" + strings.Join(hosts, ",") + "\n"}, nil
		},
	}
}

var p = params(nil)

func gpuPool(id string, n int32) *loomv1.NodePool {
	return &loomv1.NodePool{Id: id, MachineType: h100, NodeCount: n}
}

func clusterSpec(name string, pools ...*loomv1.NodePool) *loomv1.Cluster {
	if len(pools) == 0 {
		pools = []*loomv1.NodePool{gpuPool("gpu", 2)}
	}
	return &loomv1.Cluster{Name: name, Compute: &loomv1.ComputeResources{NodePools: pools}}
}

func createCmd(op string, c *loomv1.Cluster) *eventsv1.CreateCluster {
	return &eventsv1.CreateCluster{Operation: op, Cluster: c}
}

// apply applies a change and returns it, so tests read like the app.
func apply(s *State, ch Change) Change {
	s.Apply(ch)
	return ch
}

// created is a state holding demo: pool gpu (2 × a3-highgpu-8g) CREATING.
func created(t *testing.T, pools ...*loomv1.NodePool) *State {
	t.Helper()
	s := NewState(nil, nil, nil, nil)
	ch := apply(s, s.CreateCluster(p, createCmd("op1", clusterSpec(demo, pools...)), t0))
	if s.Clusters[demo] == nil {
		t.Fatalf("create failed: %v", ch.Events)
	}
	return s
}

// running is created with every compute node registered.
func running(t *testing.T, pools ...*loomv1.NodePool) *State {
	t.Helper()
	s := created(t, pools...)
	for _, n := range s.ClusterNodes(demo) {
		register(s, n.GetHostname(), t0.Add(time.Minute))
	}
	if st := s.Clusters[demo].State(); st != loomv1.Cluster_RUNNING {
		t.Fatalf("cluster is %v after every node registered", st)
	}
	return s
}

func node(s *State, host string) *loomv1.Node { return s.Nodes[demo+"/nodes/"+host] }

func cluster(s *State) *loomv1.Cluster { return s.Clusters[demo].Cluster }

func clusterChanged(t *testing.T, ch Change) *eventsv1.ClusterChanged {
	t.Helper()
	var out *eventsv1.ClusterChanged
	for _, e := range ch.Events {
		if cc, ok := e.(*eventsv1.ClusterChanged); ok {
			if out != nil {
				t.Fatalf("two ClusterChanged in one change: %v", ch.Events)
			}
			out = cc
		}
	}
	return out
}

func eventsOf[T proto.Message](ch Change) []T {
	var out []T
	for _, e := range ch.Events {
		if v, ok := e.(T); ok {
			out = append(out, v)
		}
	}
	return out
}

func onlyFailure(t *testing.T, ch Change) *eventsv1.ClusterOperationFailed {
	t.Helper()
	if len(ch.Events) != 1 || len(ch.PutClusters)+len(ch.PutNodes)+len(ch.DelClusters)+len(ch.DelNodes)+len(ch.PutReservations)+len(ch.DelReservations) != 0 {
		t.Fatalf("want exactly one ClusterOperationFailed and no writes, got %+v", ch)
	}
	f, ok := ch.Events[0].(*eventsv1.ClusterOperationFailed)
	if !ok {
		t.Fatalf("want ClusterOperationFailed, got %T", ch.Events[0])
	}
	return f
}

func register(s *State, host string, at time.Time) Change {
	return apply(s, s.AgentRegistered(p, &eventsv1.AgentRegistered{Node: demo + "/nodes/" + host, Cluster: demo, Hostname: host}, at))
}

func cond(t *testing.T, c *loomv1.Cluster, typ string) *loomv1.Condition {
	t.Helper()
	for _, k := range c.GetStatus().GetConditions() {
		if k.GetType() == typ {
			return k
		}
	}
	t.Fatalf("cluster has no %s condition: %v", typ, c.GetStatus().GetConditions())
	return nil
}

func hostnames(ns []*loomv1.Node) string {
	var out []string
	for _, n := range ns {
		out = append(out, n.GetHostname())
	}
	return strings.Join(out, ",")
}

func poolStatus(t *testing.T, c *loomv1.Cluster, id string) *loomv1.NodePoolStatus {
	t.Helper()
	for _, ps := range c.GetStatus().GetNodePools() {
		if ps.GetId() == id {
			return ps
		}
	}
	t.Fatalf("no status for pool %s: %v", id, c.GetStatus().GetNodePools())
	return nil
}

func TestCreateCluster(t *testing.T) {
	t.Parallel()
	r := renders{}
	s := NewState(nil, nil, nil, nil)
	c := clusterSpec(demo, gpuPool("gpu", 2), &loomv1.NodePool{Id: "cpu", MachineType: cpuMT, NodeCount: 1})
	c.Orchestrator = &loomv1.Orchestrator{Slurm: &loomv1.SlurmOrchestrator{
		LoginNodes: &loomv1.LoginNodes{Count: 1},
		NodeSets:   []*loomv1.SlurmNodeSet{{Id: "h100", NodePoolId: "gpu"}, {Id: "cpu", NodePoolId: "cpu"}},
		Partitions: []*loomv1.SlurmPartition{{Id: "all", NodeSetIds: []string{"h100", "cpu"}}},
	}}
	ch := apply(s, s.CreateCluster(params(r), createCmd("op1", c), t0))

	if _, ok := ch.Events[0].(*eventsv1.ClusterChanged); !ok {
		t.Fatalf("first event is %T, want ClusterChanged", ch.Events[0])
	}
	cc := clusterChanged(t, ch)
	if cc == nil || cc.Operation != "op1" || cc.OperationDone {
		t.Fatalf("ClusterChanged = %v, want operation op1, not done", cc)
	}
	st := cc.Cluster.GetStatus()
	if st.GetState() != loomv1.Cluster_CREATING || st.GetTotalNodes() != 3 || st.GetReadyNodes() != 0 ||
		st.GetMessage() != "0 of 3 nodes ready" || st.GetHomeDir() != "/data/clusters/demo/home" ||
		st.GetSharedDir() != st.GetHomeDir() || st.GetScratchDir() != "/data/clusters/demo/scratch" ||
		st.GetLoginNode() != "demo-login-001" {
		t.Fatalf("status = %v", st)
	}
	if ps := poolStatus(t, cc.Cluster, "gpu"); ps.GetTarget() != 2 || ps.GetProvisioning() != 2 || ps.GetReady() != 0 {
		t.Fatalf("pool gpu status = %v", ps)
	}
	if k := cond(t, cc.Cluster, CondReady); k.GetStatus() != "False" || k.GetReason() != ReasonProvisioning {
		t.Fatalf("Ready = %v", k)
	}
	if k := cond(t, cc.Cluster, CondDegraded); k.GetStatus() != "False" {
		t.Fatalf("Degraded = %v", k)
	}
	// Defaults were filled in: zone, capacity, accelerators from the catalog.
	gp := cc.Cluster.GetCompute().GetNodePools()[0]
	if gp.GetZone() != zone || gp.GetCapacity().GetType() != loomv1.CapacitySource_ON_DEMAND || gp.GetAcceleratorCount() != 8 {
		t.Fatalf("normalized pool = %v", gp)
	}

	// Compute nodes are named by their node set; login nodes by the cluster.
	if got := hostnames(s.ClusterNodes(demo)); got != "cpu-0001,demo-login-001,h100-0001,h100-0002" {
		t.Fatalf("hostnames = %s", got)
	}
	n := node(s, "h100-0002")
	if n.GetState() != loomv1.Node_PROVISIONING || n.GetNodePool() != "gpu" || n.GetGpus() != 8 ||
		n.GetAcceleratorType() != "nvidia-h100-80gb" || n.GetMachineType() != h100 || n.GetZone() != zone ||
		n.GetCapacityType() != loomv1.CapacitySource_ON_DEMAND || n.GetBlock() != "gpu-block-01" || n.GetRole() != "compute" ||
		n.GetWorkDir() != "/data/clusters/demo/nodes/h100-0002" || !strings.Contains(n.GetNextAction(), "register") ||
		n.GetCreateTime() == nil {
		t.Fatalf("gpu node = %v", n)
	}
	if l := node(s, "demo-login-001"); l.GetState() != loomv1.Node_READY || l.GetRole() != "login" || l.GetWorkDir() != "" ||
		l.GetMachineType() != "n2-standard-4" {
		t.Fatalf("login node = %v", l)
	}
	// The Slurm files were rendered once, with every node.
	if r[demo] != 1 || !strings.Contains(s.Slurm[demo].GetSlurmConf(), "Nodes=cpu-0001,demo-login-001,h100-0001,h100-0002") {
		t.Fatalf("renders %v, files %v", r, s.Slurm[demo])
	}
	if k := cond(t, cc.Cluster, CondSlurmConfig); k.GetStatus() != "True" {
		t.Fatalf("SlurmConfigured = %v", k)
	}
	// Registration does not re-render (it changes nothing in the files).
	register(s, "h100-0001", t0)
	if r[demo] != 1 {
		t.Fatalf("a registration re-rendered the Slurm files (%d renders)", r[demo])
	}
}

func TestBlocks(t *testing.T) {
	t.Parallel()
	s := created(t, gpuPool("gpu", 17), &loomv1.NodePool{Id: "cpu", MachineType: cpuMT, NodeCount: 9})
	count := map[string]int{}
	for _, n := range s.ClusterNodes(demo) {
		count[n.GetBlock()]++
	}
	want := map[string]int{"gpu-block-01": 16, "gpu-block-02": 1, "cpu-block-01": 8, "cpu-block-02": 1}
	if fmt.Sprint(count) != fmt.Sprint(want) {
		t.Fatalf("blocks = %v, want %v", count, want)
	}
}

func TestCreateClusterFailures(t *testing.T) {
	t.Parallel()
	reserved := &loomv1.NodePool{Id: "res", MachineType: h100, NodeCount: 2,
		Capacity: &loomv1.CapacitySource{Type: loomv1.CapacitySource_RESERVATION, Reservation: "r1"}}
	wrongRes := proto.Clone(reserved).(*loomv1.NodePool)
	wrongRes.MachineType = "a3-ultragpu-8g"
	missingRes := proto.Clone(reserved).(*loomv1.NodePool)
	missingRes.Capacity.Reservation = "nope"
	spot := func(n int32) *loomv1.NodePool {
		return &loomv1.NodePool{Id: "spot", MachineType: h100, NodeCount: n, Capacity: &loomv1.CapacitySource{Type: loomv1.CapacitySource_SPOT}}
	}
	tests := []struct {
		name      string
		cmd       *eventsv1.CreateCluster
		code      codes.Code
		wantInMsg []string
	}{
		{"duplicate", createCmd("op2", clusterSpec(demo)), codes.AlreadyExists, []string{"already exists"}},
		{"same id in another project", createCmd("op2", clusterSpec("projects/other/clusters/demo")), codes.AlreadyExists, []string{`cluster id "demo" is taken`}},
		{"bad name", createCmd("op2", clusterSpec("projects/default/clusters/Bad_Id")), codes.InvalidArgument, []string{"name"}},
		{"no pools", createCmd("op2", &loomv1.Cluster{Name: "projects/default/clusters/x"}), codes.InvalidArgument, []string{"compute.node_pools"}},
		{"bad pools", createCmd("op2", clusterSpec("projects/default/clusters/x",
			&loomv1.NodePool{Id: "a", MachineType: h100, NodeCount: 0},
			&loomv1.NodePool{Id: "b", MachineType: "a9-nonsense", NodeCount: 1},
			&loomv1.NodePool{Id: "c", MachineType: h100, NodeCount: 65})),
			codes.InvalidArgument, []string{"compute.node_pools[0].node_count", "compute.node_pools[1].machine_type",
				"compute.node_pools[2].node_count: must be at most 64 on this provider"}},
		{"reservation missing", createCmd("op2", clusterSpec("projects/default/clusters/x", missingRes)), codes.FailedPrecondition,
			[]string{"pool res: reservation projects/default/reservations/nope not found"}},
		{"reservation of other machines", createCmd("op2", clusterSpec("projects/default/clusters/x", wrongRes)), codes.FailedPrecondition,
			[]string{"reservation projects/default/reservations/r1 holds a3-highgpu-8g in us-central1-a, not a3-ultragpu-8g"}},
		{"reservation too small", createCmd("op2", clusterSpec("projects/default/clusters/x", func() *loomv1.NodePool {
			r := proto.Clone(reserved).(*loomv1.NodePool)
			r.NodeCount = 4
			return r
		}())), codes.FailedPrecondition, []string{"pool res needs 4 × a3-highgpu-8g in us-central1-a (RESERVATION projects/default/reservations/r1): 3 free"}},
		{"not enough spot", createCmd("op2", clusterSpec("projects/default/clusters/x", spot(5))), codes.FailedPrecondition,
			[]string{"pool spot needs 5 × a3-highgpu-8g in us-central1-a (SPOT): 4 free", "free elsewhere:",
				"a3-highgpu-8g in us-central1-a (ON_DEMAND): 98", "a3-highgpu-8g in any zone (ON_DEMAND): 100"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := created(t)
			apply(s, s.CreateReservation(&eventsv1.CreateReservation{Operation: "rop", Reservation: &loomv1.Reservation{
				Name: "projects/default/reservations/r1", Zone: zone, MachineType: h100, Count: 3}}, t0))
			f := onlyFailure(t, s.CreateCluster(p, tc.cmd, t0))
			if codes.Code(f.Code) != tc.code || f.Operation != "op2" || f.Cluster != tc.cmd.GetCluster().GetName() {
				t.Fatalf("failure = %v, want code %v", f, tc.code)
			}
			for _, w := range tc.wantInMsg {
				if !strings.Contains(f.Message, w) {
					t.Errorf("message %q lacks %q", f.Message, w)
				}
			}
		})
	}
}

func TestCreateClusterRedeliveredIsNoop(t *testing.T) {
	t.Parallel()
	s := created(t)
	if ch := s.CreateCluster(p, createCmd("op1", clusterSpec(demo)), t0); !ch.Empty() {
		t.Fatalf("redelivered create changed something: %+v", ch)
	}
}

func TestRegisteredToRunning(t *testing.T) {
	t.Parallel()
	s := created(t)

	ch := register(s, "gpu-0001", t0.Add(time.Second))
	if n := eventsOf[*eventsv1.NodeChanged](ch)[0].Node; n.GetState() != loomv1.Node_READY || n.GetNextAction() != "" {
		t.Fatalf("NodeChanged = %v, want READY", n)
	}
	cc := clusterChanged(t, ch)
	if cc == nil || cc.Operation != "op1" || cc.OperationDone || cc.Cluster.Status.GetReadyNodes() != 1 ||
		cc.Cluster.Status.GetMessage() != "1 of 2 nodes ready" || cc.Cluster.Status.GetState() != loomv1.Cluster_CREATING {
		t.Fatalf("progress = %v", cc)
	}
	// A second registration of a ready node (agent restart) changes nothing.
	if ch := register(s, "gpu-0001", t0.Add(2*time.Second)); !ch.Empty() {
		t.Fatalf("re-registration changed something: %+v", ch)
	}
	ch = register(s, "gpu-0002", t0.Add(3*time.Second))
	cc = clusterChanged(t, ch)
	if cc == nil || cc.Operation != "op1" || !cc.OperationDone || cc.Cluster.Status.GetState() != loomv1.Cluster_RUNNING ||
		cc.Cluster.Status.GetReadyNodes() != 2 || cc.Cluster.Status.GetMessage() != "2 of 2 nodes ready" {
		t.Fatalf("final = %v", cc)
	}
	if k := cond(t, cc.Cluster, CondReady); k.GetStatus() != "True" || k.GetReason() != ReasonAllReady ||
		!k.GetLastTransitionTime().AsTime().Equal(t0.Add(3*time.Second)) {
		t.Fatalf("Ready = %v", k)
	}
	if got := s.Clusters[demo]; got.Operation != "" || !got.Deadline.IsZero() || !got.Cluster.UpdateTime.AsTime().Equal(t0.Add(3*time.Second)) {
		t.Fatalf("record = %+v", got)
	}
	if ch := register(s, "gpu-0009", t0); !ch.Empty() {
		t.Fatalf("unknown node changed something: %+v", ch)
	}
}

func health(s *State, host string, h eventsv1.NodeHealth, reason string) Change {
	return apply(s, s.NodeHealthChanged(p, &eventsv1.NodeHealthChanged{Node: demo + "/nodes/" + host, Cluster: demo, Health: h, Reason: reason}, t0))
}

func TestHealth(t *testing.T) {
	t.Parallel()
	s := running(t)
	ch := health(s, "gpu-0002", eventsv1.NodeHealth_UNHEALTHY, "no heartbeat for 30s")
	if n := node(s, "gpu-0002"); n.GetState() != loomv1.Node_DOWN || n.GetReason() != "no heartbeat for 30s" || n.GetNextAction() == "" {
		t.Fatalf("node = %v, want DOWN with a reason and a next action", n)
	}
	cc := clusterChanged(t, ch)
	if cc == nil || cc.Operation != "" || cc.Cluster.Status.GetReadyNodes() != 1 || cc.Cluster.Status.GetState() != loomv1.Cluster_RUNNING {
		t.Fatalf("cluster after down = %v", cc)
	}
	if k := cond(t, cc.Cluster, CondDegraded); k.GetStatus() != "True" || k.GetReason() != ReasonDown || !strings.Contains(k.GetMessage(), "gpu-0002") {
		t.Fatalf("Degraded = %v", k)
	}
	if ch := health(s, "gpu-0002", eventsv1.NodeHealth_UNHEALTHY, "no heartbeat for 30s"); !ch.Empty() {
		t.Fatalf("same verdict twice changed something: %+v", ch)
	}
	// Unreachable (many nodes silent at once) and an operator's drain are
	// not down: the node stays as it was.
	for _, ev := range []*eventsv1.NodeHealthChanged{
		{Node: demo + "/nodes/gpu-0001", Cluster: demo, Health: eventsv1.NodeHealth_UNHEALTHY, Reason: "unreachable", Unreachable: true},
		{Node: demo + "/nodes/gpu-0001", Cluster: demo, Health: eventsv1.NodeHealth_UNHEALTHY, Reason: "bad fan",
			Action: loomv1.RemediationAction_ACTION_DRAIN},
	} {
		if ch := apply(s, s.NodeHealthChanged(p, ev, t0)); !ch.Empty() || node(s, "gpu-0001").GetState() != loomv1.Node_READY {
			t.Fatalf("%v changed the node: %v", ev, node(s, "gpu-0001"))
		}
	}
	if ch := register(s, "gpu-0002", t0); !ch.Empty() {
		t.Fatalf("registration of a DOWN node changed something: %+v", ch)
	}
	ch = health(s, "gpu-0002", eventsv1.NodeHealth_HEALTHY, "")
	if n := node(s, "gpu-0002"); n.GetState() != loomv1.Node_READY || n.GetReason() != "" || n.GetNextAction() != "" {
		t.Fatalf("node after healthy = %v", n)
	}
	if k := cond(t, cluster(s), CondDegraded); k.GetStatus() != "False" {
		t.Fatalf("Degraded after recovery = %v", k)
	}
}

func TestHealthyProvisioningNodeFinishesCreate(t *testing.T) {
	t.Parallel()
	s := created(t)
	register(s, "gpu-0001", t0)
	ch := health(s, "gpu-0002", eventsv1.NodeHealth_HEALTHY, "")
	if cc := clusterChanged(t, ch); cc == nil || !cc.OperationDone || cc.Operation != "op1" {
		t.Fatalf("cluster = %v, want create done", cc)
	}
}

func TestDeleteFlow(t *testing.T) {
	t.Parallel()
	s := running(t)
	ch := apply(s, s.DeleteCluster(&eventsv1.DeleteCluster{Operation: "del1", Cluster: demo}, t0))
	cc := clusterChanged(t, ch)
	if cc == nil || cc.Operation != "del1" || cc.OperationDone || cc.Cluster.Status.GetState() != loomv1.Cluster_DELETING {
		t.Fatalf("delete = %v", cc)
	}
	for _, n := range s.ClusterNodes(demo) {
		if n.GetState() != loomv1.Node_DELETING || n.GetReason() == "" || n.GetNextAction() == "" {
			t.Fatalf("node %v, want DELETING with a reason", n)
		}
	}
	if ch := health(s, "gpu-0001", eventsv1.NodeHealth_UNHEALTHY, "x"); !ch.Empty() {
		t.Fatalf("health on deleting cluster changed something: %+v", ch)
	}
	if ch := s.DeleteCluster(&eventsv1.DeleteCluster{Operation: "del1", Cluster: demo}, t0); !ch.Empty() {
		t.Fatalf("redelivered delete changed something: %+v", ch)
	}
	if f := onlyFailure(t, s.DeleteCluster(&eventsv1.DeleteCluster{Operation: "del2", Cluster: demo}, t0)); codes.Code(f.Code) != codes.FailedPrecondition {
		t.Fatalf("second delete = %v", f)
	}

	ch = apply(s, s.FinishDelete(demo))
	var removed []string
	for _, r := range eventsOf[*eventsv1.NodeRemoved](ch) {
		removed = append(removed, r.Node)
	}
	slices.Sort(removed)
	if strings.Join(removed, ",") != demo+"/nodes/gpu-0001,"+demo+"/nodes/gpu-0002" {
		t.Fatalf("removed = %v", removed)
	}
	if d, ok := ch.Events[len(ch.Events)-1].(*eventsv1.ClusterDeleted); !ok || d.Operation != "del1" || d.Cluster != demo {
		t.Fatalf("last event = %v, want ClusterDeleted del1", ch.Events[len(ch.Events)-1])
	}
	if len(s.Clusters) != 0 || len(s.Nodes) != 0 || len(s.Slurm) != 0 {
		t.Fatalf("state not empty: %d clusters, %d nodes, %d slurm", len(s.Clusters), len(s.Nodes), len(s.Slurm))
	}
	if f := onlyFailure(t, s.DeleteCluster(&eventsv1.DeleteCluster{Operation: "del3", Cluster: demo}, t0)); codes.Code(f.Code) != codes.NotFound {
		t.Fatalf("delete of a gone cluster = %v", f)
	}
	if ch := s.FinishDelete(demo); !ch.Empty() {
		t.Fatalf("second finish changed something: %+v", ch)
	}
}

func TestDeleteAbortsOperationInProgress(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		s    func(t *testing.T) *State
		op   string
	}{
		{"create", func(t *testing.T) *State { return created(t) }, "op1"},
		{"update", func(t *testing.T) *State {
			s := running(t)
			apply(s, s.UpdateCluster(p, &eventsv1.UpdateCluster{Operation: "up", Cluster: clusterSpec(demo, gpuPool("gpu", 3))}, t0))
			return s
		}, "up"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := tc.s(t)
			ch := s.DeleteCluster(&eventsv1.DeleteCluster{Operation: "del1", Cluster: demo}, t0)
			f, ok := ch.Events[0].(*eventsv1.ClusterOperationFailed)
			if !ok || f.Operation != tc.op || codes.Code(f.Code) != codes.Aborted {
				t.Fatalf("first event = %v, want %s ABORTED", ch.Events[0], tc.op)
			}
			if cc := clusterChanged(t, ch); cc == nil || cc.Operation != "del1" {
				t.Fatalf("ClusterChanged = %v", cc)
			}
		})
	}
}

func launchFailed(s *State, host, why string, at time.Time) Change {
	return apply(s, s.LaunchFailed(p, demo+"/nodes/"+host, why, at))
}

func TestLaunchFailuresRetryThenFailAndReplace(t *testing.T) {
	t.Parallel()
	s := created(t)
	steps := []struct {
		attempts int32
		action   string
	}{
		{1, "retry launch in 1s (attempt 2 of 3)"},
		{2, "retry launch in 2s (attempt 3 of 3)"},
	}
	for _, st := range steps {
		launchFailed(s, "gpu-0002", "ZONE_RESOURCE_POOL_EXHAUSTED", t0)
		n := node(s, "gpu-0002")
		if n.GetState() != loomv1.Node_PROVISIONING || n.GetLaunchAttempts() != st.attempts || n.GetNextAction() != st.action ||
			n.GetReason() != LaunchReasonPrefix+"ZONE_RESOURCE_POOL_EXHAUSTED" {
			t.Fatalf("after %d failures node = %v", st.attempts, n)
		}
	}
	ch := launchFailed(s, "gpu-0002", "ZONE_RESOURCE_POOL_EXHAUSTED", t0)
	n := node(s, "gpu-0002")
	if n.GetState() != loomv1.Node_FAILED || n.GetLaunchAttempts() != 3 ||
		n.GetReason() != "launch failed 3 times, last: ZONE_RESOURCE_POOL_EXHAUSTED" || !strings.HasPrefix(n.GetNextAction(), "replaced by gpu-0003") {
		t.Fatalf("node after the last attempt = %v", n)
	}
	repl := node(s, "gpu-0003")
	if repl.GetState() != loomv1.Node_PROVISIONING || repl.GetBlock() != "gpu-block-01" || repl.GetLaunchAttempts() != 0 {
		t.Fatalf("replacement = %v", repl)
	}
	cc := clusterChanged(t, ch)
	if ps := poolStatus(t, cc.Cluster, "gpu"); ps.GetFailed() != 1 || ps.GetProvisioning() != 2 || ps.GetTarget() != 2 {
		t.Fatalf("pool status = %v", ps)
	}
	if k := cond(t, cc.Cluster, CondDegraded); k.GetStatus() != "True" || k.GetReason() != ReasonFailed ||
		!strings.Contains(k.GetMessage(), "gpu-0002: launch failed 3 times") {
		t.Fatalf("Degraded = %v", k)
	}
	if cc.Cluster.GetStatus().GetTotalNodes() != 2 || cc.Cluster.GetStatus().GetMessage() != "0 of 2 nodes ready; 1 failed" {
		t.Fatalf("status = %v", cc.Cluster.GetStatus())
	}
	if s.Clusters[demo].NextIndex["gpu"] != 3 {
		t.Fatalf("next index = %v", s.Clusters[demo].NextIndex)
	}

	// The failed record stays while the pool is below target, and goes once
	// it is back.
	if ch := s.RemoveNode(p, n.GetName(), t0); !ch.Empty() {
		t.Fatalf("failed node removed while its pool is below target: %+v", ch)
	}
	register(s, "gpu-0001", t0)
	ch = register(s, "gpu-0003", t0)
	if cc := clusterChanged(t, ch); !cc.OperationDone || cc.Cluster.GetStatus().GetState() != loomv1.Cluster_RUNNING {
		t.Fatalf("create not done with the replacement ready: %v", cc)
	}
	ch = apply(s, s.RemoveNode(p, n.GetName(), t0))
	if r := eventsOf[*eventsv1.NodeRemoved](ch); len(r) != 1 || r[0].Node != n.GetName() || node(s, "gpu-0002") != nil {
		t.Fatalf("failed node not removed: %+v", ch)
	}
	if k := cond(t, cluster(s), CondDegraded); k.GetStatus() != "False" {
		t.Fatalf("Degraded after the failed node went = %v", k)
	}
	// A later launch of a new gpu node never reuses the number 2.
	apply(s, s.UpdateCluster(p, &eventsv1.UpdateCluster{Operation: "up", Cluster: clusterSpec(demo, gpuPool("gpu", 3))}, t0))
	if node(s, "gpu-0004") == nil || node(s, "gpu-0002") != nil {
		t.Fatalf("nodes after grow: %s", hostnames(s.ClusterNodes(demo)))
	}
}

func TestLaunchedClearsLaunchReason(t *testing.T) {
	t.Parallel()
	s := created(t)
	name := demo + "/nodes/gpu-0001"
	launchFailed(s, "gpu-0001", "exec: no such file", t0)
	ch := apply(s, s.Launched(p, name, t0))
	if n := node(s, "gpu-0001"); n.GetReason() != "" || !strings.Contains(n.GetNextAction(), "register") || len(ch.Events) != 1 {
		t.Fatalf("after launch node = %v, events %v", n, ch.Events)
	}
	if ch := s.Launched(p, name, t0); !ch.Empty() {
		t.Fatal("launch without a reason changed something")
	}
	register(s, "gpu-0001", t0)
	health(s, "gpu-0001", eventsv1.NodeHealth_UNHEALTHY, "xid 79")
	if ch := s.Launched(p, name, t0); !ch.Empty() {
		t.Fatal("Launched cleared a health reason")
	}
}

func TestKeepFailedBoundsFailedRecords(t *testing.T) {
	t.Parallel()
	s := created(t, gpuPool("gpu", 1))
	// Each node fails its boot; each replacement too.
	for i := 1; i <= 4; i++ {
		apply(s, s.ProviderEvent(p, provider.Event{Node: demo + "/nodes/" + fmt.Sprintf("gpu-%04d", i), Kind: provider.BootFailed}, t0))
	}
	if got := hostnames(s.ClusterNodes(demo)); got != "gpu-0001,gpu-0002,gpu-0003,gpu-0004,gpu-0005" {
		t.Fatalf("nodes = %s", got)
	}
	// KeepFailed is 2: the two oldest failures may go, the newest two stay.
	for i, want := range []bool{true, true, false, false} {
		ch := s.RemoveNode(p, demo+"/nodes/"+fmt.Sprintf("gpu-%04d", i+1), t0)
		if ch.Empty() == want {
			t.Errorf("gpu-%04d removable = %v, want %v", i+1, !ch.Empty(), want)
		}
	}
}

func TestBootTimeoutFailsAndReplaces(t *testing.T) {
	t.Parallel()
	s := created(t)
	register(s, "gpu-0001", t0)
	if ch := s.Tick(p, t0.Add(10*time.Minute-time.Second)); !ch.Empty() {
		t.Fatalf("tick before the boot timeout changed something: %+v", ch)
	}
	apply(s, s.Tick(p, t0.Add(10*time.Minute)))
	n := node(s, "gpu-0002")
	if n.GetState() != loomv1.Node_FAILED || !strings.Contains(n.GetReason(), "did not register within 10m0s") ||
		!strings.HasPrefix(n.GetNextAction(), "replaced by gpu-0003") {
		t.Fatalf("timed-out node = %v", n)
	}
	if r := node(s, "gpu-0003"); r.GetState() != loomv1.Node_PROVISIONING || !r.GetCreateTime().AsTime().Equal(t0.Add(10*time.Minute)) {
		t.Fatalf("replacement = %v", r)
	}
	// The replacement has its own boot timeout.
	if ch := s.Tick(p, t0.Add(15*time.Minute)); !ch.Empty() {
		t.Fatalf("replacement timed out early: %+v", ch)
	}
}

func TestCreateDeadline(t *testing.T) {
	t.Parallel()
	long := params(nil)
	long.BootTimeout = time.Hour // only the operation deadline matters here
	tests := []struct {
		name      string
		ready     []string
		wantState loomv1.Cluster_State
		wantDone  bool
		wantFail  string
	}{
		{"a ready node per pool: RUNNING degraded", []string{"gpu-0001", "cpu-0001"}, loomv1.Cluster_RUNNING, true, ""},
		{"a pool with none: ERROR", []string{"gpu-0001"}, loomv1.Cluster_ERROR, false, "pool cpu: no node ready"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := NewState(nil, nil, nil, nil)
			apply(s, s.CreateCluster(long, createCmd("op1", clusterSpec(demo, gpuPool("gpu", 2),
				&loomv1.NodePool{Id: "cpu", MachineType: cpuMT, NodeCount: 2})), t0))
			for _, h := range tc.ready {
				apply(s, s.AgentRegistered(long, &eventsv1.AgentRegistered{Node: demo + "/nodes/" + h}, t0))
			}
			if ch := s.Tick(long, t0.Add(29*time.Minute)); !ch.Empty() {
				t.Fatalf("tick before the deadline changed something: %+v", ch)
			}
			ch := apply(s, s.Tick(long, t0.Add(30*time.Minute)))
			cc := clusterChanged(t, ch)
			if cc == nil || cc.Cluster.GetStatus().GetState() != tc.wantState || cc.OperationDone != tc.wantDone {
				t.Fatalf("ClusterChanged = %v", cc)
			}
			fails := eventsOf[*eventsv1.ClusterOperationFailed](ch)
			if tc.wantFail == "" {
				if len(fails) != 0 {
					t.Fatalf("unexpected failure %v", fails)
				}
				if k := cond(t, cc.Cluster, CondDegraded); k.GetStatus() != "True" || k.GetReason() != ReasonNotReady {
					t.Fatalf("Degraded = %v", k)
				}
				if k := cond(t, cc.Cluster, CondReady); k.GetStatus() != "False" {
					t.Fatalf("Ready = %v", k)
				}
				return
			}
			if len(fails) != 1 || fails[0].Operation != "op1" || codes.Code(fails[0].Code) != codes.DeadlineExceeded ||
				!strings.Contains(fails[0].Message, tc.wantFail) {
				t.Fatalf("failures = %v", fails)
			}
			if msg := cc.Cluster.GetStatus().GetMessage(); !strings.Contains(msg, tc.wantFail) {
				t.Fatalf("ERROR message = %q", msg)
			}
			// Nodes keep coming: once every pool has one ready, RUNNING.
			ch = apply(s, s.AgentRegistered(long, &eventsv1.AgentRegistered{Node: demo + "/nodes/cpu-0002"}, t0.Add(31*time.Minute)))
			if cc := clusterChanged(t, ch); cc.GetCluster().GetStatus().GetState() != loomv1.Cluster_RUNNING || cc.Operation != "" {
				t.Fatalf("after a late node: %v", cc)
			}
		})
	}
}

func update(s *State, op string, c *loomv1.Cluster, grace int32) Change {
	return apply(s, s.UpdateCluster(p, &eventsv1.UpdateCluster{Operation: op, Cluster: c, DrainGraceSeconds: grace}, t0.Add(time.Hour)))
}

func TestUpdateGrow(t *testing.T) {
	t.Parallel()
	r := renders{}
	s := running(t)
	before := r[demo]
	pr := params(r)
	ch := apply(s, s.UpdateCluster(pr, &eventsv1.UpdateCluster{Operation: "up", Cluster: clusterSpec(demo, gpuPool("gpu", 4),
		&loomv1.NodePool{Id: "cpu", MachineType: cpuMT, NodeCount: 1})}, t0.Add(time.Hour)))
	cc := clusterChanged(t, ch)
	if cc == nil || cc.Operation != "up" || cc.OperationDone || cc.Cluster.GetStatus().GetState() != loomv1.Cluster_UPDATING ||
		cc.Cluster.GetStatus().GetTotalNodes() != 5 {
		t.Fatalf("update = %v", cc)
	}
	if got := hostnames(s.ClusterNodes(demo)); got != "cpu-0001,gpu-0001,gpu-0002,gpu-0003,gpu-0004" {
		t.Fatalf("nodes = %s", got)
	}
	if r[demo] != before+1 {
		t.Fatalf("update rendered %d times, want once", r[demo]-before)
	}
	if !cluster(s).GetCreateTime().AsTime().Equal(t0) {
		t.Fatalf("create time changed: %v", cluster(s).GetCreateTime())
	}
	for _, h := range []string{"gpu-0003", "gpu-0004"} {
		ch = register(s, h, t0.Add(time.Hour))
	}
	if cc := clusterChanged(t, ch); cc.OperationDone {
		t.Fatal("update done with the new pool not ready")
	}
	ch = register(s, "cpu-0001", t0.Add(time.Hour))
	if cc := clusterChanged(t, ch); !cc.OperationDone || cc.Operation != "up" || cc.Cluster.GetStatus().GetState() != loomv1.Cluster_RUNNING {
		t.Fatalf("final = %v", cc)
	}
}

func TestUpdateShrinkDrainsHighestNodes(t *testing.T) {
	t.Parallel()
	s := running(t, gpuPool("gpu", 4))
	ch := update(s, "up", clusterSpec(demo, gpuPool("gpu", 2)), 60)
	cc := clusterChanged(t, ch)
	if cc.Cluster.GetStatus().GetState() != loomv1.Cluster_UPDATING || cc.OperationDone {
		t.Fatalf("update = %v", cc)
	}
	deadline := t0.Add(time.Hour + time.Minute)
	// What the update waits for, and until when at most.
	if msg, want := cc.Cluster.GetStatus().GetMessage(), "2 of 2 nodes ready; 2 draining (until "+deadline.Format(time.RFC3339)+" at the latest)"; msg != want {
		t.Errorf("message %q, want %q", msg, want)
	}
	for _, h := range []string{"gpu-0003", "gpu-0004"} {
		n := node(s, h)
		if n.GetState() != loomv1.Node_DRAINING || !n.GetDrainDeadline().AsTime().Equal(deadline) ||
			!strings.Contains(n.GetNextAction(), "requeued at "+deadline.Format(time.RFC3339)) || n.GetReason() != "pool gpu shrinks to 2 nodes" {
			t.Fatalf("%s = %v, want DRAINING until %v", h, n, deadline)
		}
	}
	// To one node: "1 node".
	s1 := running(t, gpuPool("gpu", 2))
	update(s1, "to-1", clusterSpec(demo, gpuPool("gpu", 1)), 60)
	if n := node(s1, "gpu-0002"); n.GetReason() != "pool gpu shrinks to 1 node" {
		t.Fatalf("gpu-0002 = %v, want its reason to say 1 node", n)
	}
	for _, h := range []string{"gpu-0001", "gpu-0002"} {
		if node(s, h).GetState() != loomv1.Node_READY {
			t.Fatalf("%s = %v", h, node(s, h))
		}
	}
	if ps := poolStatus(t, cluster(s), "gpu"); ps.GetTarget() != 2 || ps.GetDraining() != 2 || ps.GetReady() != 2 {
		t.Fatalf("pool status = %v", ps)
	}
	// Draining nodes hold their capacity until they are removed.
	key := capacity.Key{Zone: zone, MachineType: h100, Type: loomv1.CapacitySource_ON_DEMAND}
	if c := Claims(s.Clusters[demo], s.ClusterNodes(demo)); c[key] != 4 {
		t.Fatalf("claims while draining = %v", c)
	}
	// NodeDrained (from the scheduler) → DELETING; the reconciler removes it.
	apply(s, s.NodeDrained(p, &eventsv1.NodeDrained{Node: demo + "/nodes/gpu-0004", Cluster: demo}, t0))
	if n := node(s, "gpu-0004"); n.GetState() != loomv1.Node_DELETING || n.GetNextAction() != "stop and remove" {
		t.Fatalf("drained node = %v", n)
	}
	if ch := s.NodeDrained(p, &eventsv1.NodeDrained{Node: demo + "/nodes/gpu-0001"}, t0); !ch.Empty() {
		t.Fatalf("NodeDrained of a READY node changed something: %+v", ch)
	}
	ch = apply(s, s.RemoveNode(p, demo+"/nodes/gpu-0004", t0))
	if r := eventsOf[*eventsv1.NodeRemoved](ch); len(r) != 1 || clusterChanged(t, ch).OperationDone {
		t.Fatalf("remove = %+v", ch)
	}
	if c := Claims(s.Clusters[demo], s.ClusterNodes(demo)); c[key] != 3 {
		t.Fatalf("claims after one removal = %v", c)
	}
	apply(s, s.NodeDrained(p, &eventsv1.NodeDrained{Node: demo + "/nodes/gpu-0003"}, t0))
	ch = apply(s, s.RemoveNode(p, demo+"/nodes/gpu-0003", t0))
	cc = clusterChanged(t, ch)
	if !cc.OperationDone || cc.Operation != "up" || cc.Cluster.GetStatus().GetState() != loomv1.Cluster_RUNNING ||
		cc.Cluster.GetStatus().GetMessage() != "2 of 2 nodes ready" {
		t.Fatalf("final = %v", cc)
	}
	if c := Claims(s.Clusters[demo], s.ClusterNodes(demo)); c[key] != 2 {
		t.Fatalf("claims after the shrink = %v", c)
	}
	if !strings.Contains(s.Slurm[demo].GetSlurmConf(), "Nodes=gpu-0001,gpu-0002\n") {
		t.Fatalf("slurm files after the shrink = %q", s.Slurm[demo].GetSlurmConf())
	}
}

// TestUpdateRemovesAPool: a pool left out of the new spec drains its nodes
// and goes once the last is removed; until then its capacity is held, the
// update is not done, and adding it back is refused. Afterwards it can be
// added again, its nodes numbered on.
func TestUpdateRemovesAPool(t *testing.T) {
	t.Parallel()
	cpu := func(n int32) *loomv1.NodePool { return &loomv1.NodePool{Id: "cpu", MachineType: cpuMT, NodeCount: n} }
	s := running(t, gpuPool("gpu", 2), cpu(2))
	cc := clusterChanged(t, update(s, "rm", clusterSpec(demo, gpuPool("gpu", 2)), 60))
	if cc.Cluster.GetStatus().GetState() != loomv1.Cluster_UPDATING || cc.OperationDone {
		t.Fatalf("update = %v", cc)
	}
	for _, h := range []string{"cpu-0001", "cpu-0002"} {
		if n := node(s, h); n.GetState() != loomv1.Node_DRAINING || n.GetReason() != "pool cpu is removed from the cluster" {
			t.Fatalf("%s = %v, want DRAINING", h, n)
		}
	}
	if ps := poolStatus(t, cluster(s), "cpu"); ps.GetTarget() != 0 || ps.GetDraining() != 2 {
		t.Fatalf("retiring pool status = %v", ps)
	}
	key := capacity.Key{Zone: zone, MachineType: cpuMT, Type: loomv1.CapacitySource_ON_DEMAND}
	if c := Claims(s.Clusters[demo], s.ClusterNodes(demo)); c[key] != 2 {
		t.Fatalf("claims while the pool drains = %v, want its 2 nodes held", c)
	}
	// Until its nodes are gone the update goes on: another is refused.
	if f := onlyFailure(t, s.UpdateCluster(p, &eventsv1.UpdateCluster{Operation: "early", Cluster: clusterSpec(demo, gpuPool("gpu", 2), cpu(1))}, t0.Add(time.Hour))); codes.Code(f.Code) != codes.FailedPrecondition || !strings.Contains(f.Message, "is UPDATING") {
		t.Fatalf("an update while the pool drains: %v", f)
	}
	apply(s, s.NodeDrained(p, &eventsv1.NodeDrained{Node: demo + "/nodes/cpu-0002", Cluster: demo}, t0))
	apply(s, s.RemoveNode(p, demo+"/nodes/cpu-0002", t0))
	apply(s, s.Tick(p, t0.Add(2*time.Hour))) // the drain of cpu-0001 times out
	for _, n := range s.ClusterNodes(demo) {
		if n.GetState() == loomv1.Node_DELETING {
			apply(s, s.RemoveNode(p, n.GetName(), t0.Add(2*time.Hour)))
		}
	}
	cc = clusterChanged(t, apply(s, s.Tick(p, t0.Add(2*time.Hour))))
	if st := cluster(s).GetStatus(); st.GetState() != loomv1.Cluster_RUNNING || len(s.Clusters[demo].Retired) != 0 || len(st.GetNodePools()) != 1 {
		t.Fatalf("after its last node went: %v, retired %v (last change %v)", st, s.Clusters[demo].Retired, cc)
	}
	if c := Claims(s.Clusters[demo], s.ClusterNodes(demo)); c[key] != 0 {
		t.Fatalf("claims after the pool went = %v", c)
	}
	if got := hostnames(s.ClusterNodes(demo)); got != "gpu-0001,gpu-0002" {
		t.Fatalf("nodes = %s", got)
	}
	if !strings.Contains(s.Slurm[demo].GetSlurmConf(), "Nodes=gpu-0001,gpu-0002\n") {
		t.Fatalf("slurm files after the pool went = %q", s.Slurm[demo].GetSlurmConf())
	}
	update(s, "back", clusterSpec(demo, gpuPool("gpu", 2), cpu(1)), 0)
	if got := hostnames(s.ClusterNodes(demo)); got != "cpu-0003,gpu-0001,gpu-0002" {
		t.Fatalf("nodes after adding the pool back = %s, want a new number", got)
	}
}

// TestReaddingARetiringPoolIsRefused: a pool whose nodes are still
// there after its removal cannot come back under the same id. Through
// UpdateCluster the cluster is UPDATING until they are gone (above), so the
// state is set up by hand: this is the domain's own guard.
func TestReaddingARetiringPoolIsRefused(t *testing.T) {
	t.Parallel()
	cpu := &loomv1.NodePool{Id: "cpu", MachineType: cpuMT, NodeCount: 1}
	s := created(t, gpuPool("gpu", 1), cpu)
	register(s, "gpu-0001", t0)
	// cpu-0001 never registers: the create ends degraded, RUNNING.
	long := params(nil)
	long.BootTimeout = time.Hour
	apply(s, s.Tick(long, t0.Add(30*time.Minute)))
	// The drain of a READY node would finish the update at once; a
	// failed one holds the retiring pool until it is removed.
	s.Clusters[demo].Retired = append(s.Clusters[demo].Retired, proto.Clone(cpu).(*loomv1.NodePool))
	s.Clusters[demo].Cluster.Compute.NodePools = s.Clusters[demo].Cluster.Compute.NodePools[:1]
	f := onlyFailure(t, s.UpdateCluster(p, &eventsv1.UpdateCluster{Operation: "back", Cluster: clusterSpec(demo, gpuPool("gpu", 1), cpu)}, t0.Add(time.Hour)))
	if codes.Code(f.Code) != codes.FailedPrecondition || !strings.Contains(f.Message, `node pool "cpu" of cluster `+demo+" is still being removed") {
		t.Fatalf("re-adding a retiring pool: %v", f)
	}
}

// TestShrinkGivesUpBrokenNodesFirst: a pool shrinks by its nodes out of
// service before its healthy ones, whatever their numbers: 4 → 3 with
// gpu-0001 DOWN drains gpu-0001 and keeps gpu-0004.
func TestShrinkGivesUpBrokenNodesFirst(t *testing.T) {
	t.Parallel()
	s := running(t, gpuPool("gpu", 4))
	health(s, "gpu-0001", eventsv1.NodeHealth_UNHEALTHY, "Xid 79")
	update(s, "up", clusterSpec(demo, gpuPool("gpu", 3)), 60)
	if n := node(s, "gpu-0001"); n.GetState() != loomv1.Node_DRAINING {
		t.Fatalf("the DOWN node = %v, want it DRAINING", n)
	}
	for _, h := range []string{"gpu-0002", "gpu-0003", "gpu-0004"} {
		if n := node(s, h); n.GetState() != loomv1.Node_READY {
			t.Fatalf("%s = %v, want it kept READY", h, n)
		}
	}
}

func TestShrinkRemovesNodesThatNeverCameUp(t *testing.T) {
	t.Parallel()
	s := created(t, gpuPool("gpu", 3))
	register(s, "gpu-0001", t0)
	register(s, "gpu-0002", t0)
	// Finish the create degraded so that an update is allowed.
	long := params(nil)
	long.BootTimeout = time.Hour
	apply(s, s.Tick(long, t0.Add(30*time.Minute)))
	if cluster(s).GetStatus().GetState() != loomv1.Cluster_RUNNING {
		t.Fatalf("state = %v", cluster(s).GetStatus())
	}
	update(s, "up", clusterSpec(demo, gpuPool("gpu", 2)), 0)
	if n := node(s, "gpu-0003"); n.GetState() != loomv1.Node_DELETING || n.GetDrainDeadline() != nil {
		t.Fatalf("provisioning victim = %v, want DELETING at once", n)
	}
	ch := apply(s, s.RemoveNode(p, demo+"/nodes/gpu-0003", t0))
	if cc := clusterChanged(t, ch); !cc.OperationDone {
		t.Fatalf("update not done: %v", cc)
	}
}

func TestDrainTimeoutRemovesAnyway(t *testing.T) {
	t.Parallel()
	s := running(t)
	update(s, "up", clusterSpec(demo, gpuPool("gpu", 1)), 60)
	deadline := t0.Add(time.Hour + time.Minute)
	if ch := s.Tick(p, deadline.Add(5*time.Minute-time.Second)); len(ch.PutNodes) != 0 {
		t.Fatalf("drain gave up early: %+v", ch)
	}
	apply(s, s.Tick(p, deadline.Add(5*time.Minute)))
	if n := node(s, "gpu-0002"); n.GetState() != loomv1.Node_DELETING || !strings.Contains(n.GetReason(), "no NodeDrained") {
		t.Fatalf("node = %v", n)
	}
}

func TestUpdateOfPartitionsIsDoneAtOnce(t *testing.T) {
	t.Parallel()
	r := renders{}
	s := running(t)
	c := clusterSpec(demo)
	c.Orchestrator = &loomv1.Orchestrator{Slurm: &loomv1.SlurmOrchestrator{
		NodeSets:   []*loomv1.SlurmNodeSet{{Id: "gpu", NodePoolId: "gpu"}},
		Partitions: []*loomv1.SlurmPartition{{Id: "all", NodeSetIds: []string{"gpu"}}, {Id: "short", NodeSetIds: []string{"gpu"}, MaxTime: "1:00:00"}},
	}}
	ch := apply(s, s.UpdateCluster(params(r), &eventsv1.UpdateCluster{Operation: "up", Cluster: c}, t0.Add(time.Hour)))
	cc := clusterChanged(t, ch)
	if cc == nil || !cc.OperationDone || cc.Operation != "up" || cc.Cluster.GetStatus().GetState() != loomv1.Cluster_RUNNING ||
		len(cc.Cluster.GetOrchestrator().GetSlurm().GetPartitions()) != 2 {
		t.Fatalf("update = %v", cc)
	}
	if r[demo] != 1 {
		t.Fatalf("renders = %v, want one for the new partitions", r)
	}
}

func TestUpdateFailures(t *testing.T) {
	t.Parallel()
	changedMT := clusterSpec(demo, &loomv1.NodePool{Id: "gpu", MachineType: "a3-ultragpu-8g", NodeCount: 2})
	spot := func(n int32) *loomv1.Cluster {
		return clusterSpec(demo, gpuPool("gpu", 2), &loomv1.NodePool{Id: "spot", MachineType: h100, NodeCount: n,
			Capacity: &loomv1.CapacitySource{Type: loomv1.CapacitySource_SPOT}})
	}
	run := func(t *testing.T) *State { return running(t) }
	tests := []struct {
		name  string
		state func(t *testing.T) *State
		cmd   *eventsv1.UpdateCluster
		code  codes.Code
		want  string
	}{
		{"missing", run, &eventsv1.UpdateCluster{Operation: "up", Cluster: clusterSpec("projects/default/clusters/nope")}, codes.NotFound, "not found"},
		{"while creating", func(t *testing.T) *State { return created(t) }, &eventsv1.UpdateCluster{Operation: "up", Cluster: clusterSpec(demo, gpuPool("gpu", 3))},
			codes.FailedPrecondition, "is CREATING"},
		{"immutable field", run, &eventsv1.UpdateCluster{Operation: "up", Cluster: changedMT}, codes.InvalidArgument, "machine_type"},
		{"over the local limit", run, &eventsv1.UpdateCluster{Operation: "up", Cluster: clusterSpec(demo, gpuPool("gpu", 65))},
			codes.InvalidArgument, "at most 64 on this provider"},
		{"not enough capacity", run, &eventsv1.UpdateCluster{Operation: "up", Cluster: spot(5)}, codes.FailedPrecondition,
			"pool spot needs 5 × a3-highgpu-8g in us-central1-a (SPOT): 4 free"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := tc.state(t)
			before := proto.Clone(s.Clusters[demo].Cluster)
			f := onlyFailure(t, s.UpdateCluster(p, tc.cmd, t0.Add(time.Hour)))
			if codes.Code(f.Code) != tc.code || f.Operation != "up" || !strings.Contains(f.Message, tc.want) {
				t.Fatalf("failure = %v, want %v with %q", f, tc.code, tc.want)
			}
			if !proto.Equal(before, s.Clusters[demo].Cluster) {
				t.Fatal("a refused update changed the cluster")
			}
		})
	}
}

func TestUpdateRedeliveredIsNoop(t *testing.T) {
	t.Parallel()
	s := running(t)
	cmd := &eventsv1.UpdateCluster{Operation: "up", Cluster: clusterSpec(demo, gpuPool("gpu", 3))}
	apply(s, s.UpdateCluster(p, cmd, t0))
	if ch := s.UpdateCluster(p, cmd, t0); !ch.Empty() {
		t.Fatalf("redelivered update changed something: %+v", ch)
	}
}

func TestUpdateLoginNodes(t *testing.T) {
	t.Parallel()
	s := running(t)
	withLogin := func(n int32) *loomv1.Cluster {
		c := clusterSpec(demo)
		c.Orchestrator = &loomv1.Orchestrator{Slurm: &loomv1.SlurmOrchestrator{LoginNodes: &loomv1.LoginNodes{Count: n}}}
		return c
	}
	ch := update(s, "up1", withLogin(2), 0)
	if cc := clusterChanged(t, ch); !cc.OperationDone || cc.Cluster.GetStatus().GetLoginNode() != "demo-login-001" {
		t.Fatalf("update = %v", cc)
	}
	if got := hostnames(s.ClusterNodes(demo)); got != "demo-login-001,demo-login-002,gpu-0001,gpu-0002" {
		t.Fatalf("nodes = %s", got)
	}
	ch = update(s, "up2", withLogin(1), 0)
	if r := eventsOf[*eventsv1.NodeRemoved](ch); len(r) != 1 || r[0].Node != demo+"/nodes/demo-login-002" {
		t.Fatalf("removed = %v", r)
	}
}

func TestTwoClustersRaceForTheLastNodes(t *testing.T) {
	t.Parallel()
	s := NewState(nil, nil, nil, nil)
	spotSpec := func(name string, n int32) *loomv1.Cluster {
		return clusterSpec(name, &loomv1.NodePool{Id: "spot", MachineType: h100, NodeCount: n,
			Capacity: &loomv1.CapacitySource{Type: loomv1.CapacitySource_SPOT}})
	}
	// 4 spot a3-highgpu-8g in the zone: a takes 3; b wants 2, only 1 is left.
	apply(s, s.CreateCluster(p, createCmd("a", spotSpec("projects/default/clusters/a", 3)), t0))
	f := onlyFailure(t, s.CreateCluster(p, createCmd("b", spotSpec("projects/default/clusters/b", 2)), t0))
	if codes.Code(f.Code) != codes.FailedPrecondition || !strings.Contains(f.Message, "needs 2 × a3-highgpu-8g in us-central1-a (SPOT): 1 free") {
		t.Fatalf("second cluster = %v", f)
	}
	pools := s.Capacity(p, "default")
	var spot *loomv1.CapacityPool
	for _, cp := range pools {
		if cp.GetType() == loomv1.CapacitySource_SPOT && cp.GetMachineType() == h100 {
			spot = cp
		}
	}
	if spot == nil || spot.GetTotal() != 4 || spot.GetInUse() != 3 || spot.GetFree() != 1 {
		t.Fatalf("spot pool = %v (all %v)", spot, pools)
	}
	// Deleting a releases its nodes once it is gone: then b fits.
	apply(s, s.DeleteCluster(&eventsv1.DeleteCluster{Operation: "da", Cluster: "projects/default/clusters/a"}, t0))
	onlyFailure(t, s.CreateCluster(p, createCmd("b", spotSpec("projects/default/clusters/b", 2)), t0))
	apply(s, s.FinishDelete("projects/default/clusters/a"))
	ch := apply(s, s.CreateCluster(p, createCmd("b", spotSpec("projects/default/clusters/b", 2)), t0))
	if cc := clusterChanged(t, ch); cc == nil || cc.Cluster.GetStatus().GetState() != loomv1.Cluster_CREATING {
		t.Fatalf("b after a is gone: %v", ch.Events)
	}
}

func TestMaxDynamicNodesAreClaimed(t *testing.T) {
	t.Parallel()
	s := NewState(nil, nil, nil, nil)
	pool := &loomv1.NodePool{Id: "spot", MachineType: h100, NodeCount: 2, MaxDynamicNodeCount: 3,
		Capacity: &loomv1.CapacitySource{Type: loomv1.CapacitySource_SPOT}}
	f := onlyFailure(t, s.CreateCluster(p, createCmd("a", clusterSpec(demo, pool)), t0))
	if !strings.Contains(f.Message, "needs 5 ×") {
		t.Fatalf("failure = %v", f)
	}
}

func reservation(name string, count int32) *eventsv1.CreateReservation {
	return &eventsv1.CreateReservation{Operation: "rop-" + name, Reservation: &loomv1.Reservation{
		Name: "projects/default/reservations/" + name, Zone: zone, MachineType: h100, Count: count}}
}

func TestReservations(t *testing.T) {
	t.Parallel()
	s := NewState(nil, nil, nil, nil)
	ch := apply(s, s.CreateReservation(reservation("r1", 4), t0))
	rc := eventsOf[*eventsv1.ReservationChanged](ch)
	if len(rc) != 1 || !rc[0].OperationDone || rc[0].Operation != "rop-r1" || rc[0].Reservation.GetCount() != 4 ||
		!rc[0].Reservation.GetCreateTime().AsTime().Equal(t0) {
		t.Fatalf("create = %v", ch.Events)
	}
	if f := onlyFailure(t, s.CreateReservation(reservation("r1", 2), t0)); codes.Code(f.Code) != codes.AlreadyExists {
		t.Fatalf("duplicate = %v", f)
	}
	bad := &eventsv1.CreateReservation{Operation: "x", Reservation: &loomv1.Reservation{Name: "r", MachineType: "nope"}}
	f := onlyFailure(t, s.CreateReservation(bad, t0))
	for _, w := range []string{"reservation.name", "reservation.zone", "reservation.machine_type: unknown", "reservation.count"} {
		if codes.Code(f.Code) != codes.InvalidArgument || !strings.Contains(f.Message, w) {
			t.Errorf("invalid reservation = %v, want %q", f, w)
		}
	}
	// A zone no pool may name (clusterspec's zone rule) would be
	// capacity nobody can claim.
	odd := reservation("r-odd-zone", 1)
	odd.Reservation.Zone = "US central"
	if f := onlyFailure(t, s.CreateReservation(odd, t0)); codes.Code(f.Code) != codes.InvalidArgument ||
		!strings.Contains(f.Message, `reservation.zone: "US central" is not a zone name`) {
		t.Errorf("reservation in zone %q = %v, want InvalidArgument on reservation.zone", odd.Reservation.Zone, f)
	}

	// A cluster claims from it; the claim shows as in_use and consumer.
	pool := &loomv1.NodePool{Id: "res", MachineType: h100, NodeCount: 3,
		Capacity: &loomv1.CapacitySource{Type: loomv1.CapacitySource_RESERVATION, Reservation: "r1"}}
	apply(s, s.CreateCluster(p, createCmd("op1", clusterSpec(demo, pool)), t0))
	r := s.Reservation("projects/default/reservations/r1")
	if r.GetInUse() != 3 || strings.Join(r.GetConsumers(), ",") != demo {
		t.Fatalf("reservation = %v", r)
	}
	if s.Reservations["projects/default/reservations/r1"].GetInUse() != 0 {
		t.Fatal("in_use was stored instead of derived")
	}
	f = onlyFailure(t, s.DeleteReservation(&eventsv1.DeleteReservation{Operation: "d1", Reservation: "projects/default/reservations/r1"}))
	if codes.Code(f.Code) != codes.FailedPrecondition || !strings.Contains(f.Message, "in use by "+demo) || f.Cluster != "projects/default/reservations/r1" {
		t.Fatalf("delete in use = %v", f)
	}
	// Still in use while the cluster is being deleted.
	apply(s, s.DeleteCluster(&eventsv1.DeleteCluster{Operation: "dc", Cluster: demo}, t0))
	onlyFailure(t, s.DeleteReservation(&eventsv1.DeleteReservation{Operation: "d2", Reservation: "projects/default/reservations/r1"}))
	apply(s, s.FinishDelete(demo))
	ch = apply(s, s.DeleteReservation(&eventsv1.DeleteReservation{Operation: "d3", Reservation: "projects/default/reservations/r1"}))
	if rd := eventsOf[*eventsv1.ReservationDeleted](ch); len(rd) != 1 || rd[0].Operation != "d3" || len(s.Reservations) != 0 {
		t.Fatalf("delete = %v", ch.Events)
	}
	if f := onlyFailure(t, s.DeleteReservation(&eventsv1.DeleteReservation{Operation: "d4", Reservation: "projects/default/reservations/r1"})); codes.Code(f.Code) != codes.NotFound {
		t.Fatalf("delete of a gone reservation = %v", f)
	}
}

func TestPreemptionReplacesTheNode(t *testing.T) {
	t.Parallel()
	spot := &loomv1.NodePool{Id: "spot", MachineType: h100, NodeCount: 2, Capacity: &loomv1.CapacitySource{Type: loomv1.CapacitySource_SPOT}}
	s := running(t, spot)
	ev := provider.Event{Node: demo + "/nodes/spot-0001", Kind: provider.Preempted, Reason: "preempted by provider: spot capacity reclaimed", At: t0}
	ch := apply(s, s.ProviderEvent(p, ev, t0))
	n := node(s, "spot-0001")
	if n.GetState() != loomv1.Node_FAILED || n.GetReason() != "preempted by provider: spot capacity reclaimed" ||
		!strings.HasPrefix(n.GetNextAction(), "replaced by spot-0003") {
		t.Fatalf("preempted node = %v", n)
	}
	if r := node(s, "spot-0003"); r.GetState() != loomv1.Node_PROVISIONING || r.GetCapacityType() != loomv1.CapacitySource_SPOT {
		t.Fatalf("replacement = %v", r)
	}
	cc := clusterChanged(t, ch)
	if cc.Cluster.GetStatus().GetState() != loomv1.Cluster_RUNNING || cc.Operation != "" {
		t.Fatalf("cluster = %v, want RUNNING without an operation", cc)
	}
	if k := cond(t, cc.Cluster, CondDegraded); k.GetStatus() != "True" || !strings.Contains(k.GetMessage(), "preempted by provider") {
		t.Fatalf("Degraded = %v", k)
	}
	// The preempted node's machine is gone: it claims nothing.
	if c := Claims(s.Clusters[demo], s.ClusterNodes(demo)); c[capacity.Key{Zone: zone, MachineType: h100, Type: loomv1.CapacitySource_SPOT}] != 2 {
		t.Fatalf("claims = %v", c)
	}
	// The same event again, and events for failed nodes, change nothing.
	if ch := s.ProviderEvent(p, ev, t0); !ch.Empty() {
		t.Fatalf("second preemption changed something: %+v", ch)
	}
	// A boot failure of the replacement replaces it in turn.
	apply(s, s.ProviderEvent(p, provider.Event{Node: demo + "/nodes/spot-0003", Kind: provider.BootFailed, Reason: "no boot disk"}, t0))
	if n := node(s, "spot-0003"); n.GetState() != loomv1.Node_FAILED || n.GetReason() != "boot failed: no boot disk" || node(s, "spot-0004") == nil {
		t.Fatalf("after a boot failure: %v; nodes %s", n, hostnames(s.ClusterNodes(demo)))
	}
	ch = register(s, "spot-0004", t0)
	if k := cond(t, clusterChanged(t, ch).Cluster, CondReady); k.GetStatus() != "True" {
		t.Fatalf("Ready after the replacement = %v", k)
	}
}

func TestPreemptedDrainingNodeIsNotReplaced(t *testing.T) {
	t.Parallel()
	s := running(t)
	update(s, "up", clusterSpec(demo, gpuPool("gpu", 1)), 60)
	ch := apply(s, s.ProviderEvent(p, provider.Event{Node: demo + "/nodes/gpu-0002", Kind: provider.Preempted}, t0))
	if n := node(s, "gpu-0002"); n.GetState() != loomv1.Node_FAILED || strings.HasPrefix(n.GetNextAction(), "replaced") || n.GetDrainDeadline() != nil {
		t.Fatalf("node = %v", n)
	}
	if len(s.ClusterNodes(demo)) != 2 {
		t.Fatalf("nodes = %s", hostnames(s.ClusterNodes(demo)))
	}
	// Nothing drains any more and the pool is at target: the update is done.
	if cc := clusterChanged(t, ch); !cc.OperationDone || cc.Operation != "up" {
		t.Fatalf("update not done once the draining node was gone: %v", cc)
	}
	if ch := apply(s, s.RemoveNode(p, demo+"/nodes/gpu-0002", t0)); len(eventsOf[*eventsv1.NodeRemoved](ch)) != 1 {
		t.Fatalf("failed node not removable with its pool at target: %+v", ch)
	}
}

func TestRenderFailureIsACondition(t *testing.T) {
	t.Parallel()
	pr := params(nil)
	pr.Render = func(*loomv1.Cluster, []*loomv1.Node) (*loomv1.SlurmConfig, error) {
		return nil, errors.New("bad MaxTime")
	}
	s := NewState(nil, nil, nil, nil)
	apply(s, s.CreateCluster(pr, createCmd("op1", clusterSpec(demo)), t0))
	if k := cond(t, cluster(s), CondSlurmConfig); k.GetStatus() != "False" || k.GetReason() != ReasonRenderFailed || k.GetMessage() != "bad MaxTime" {
		t.Fatalf("SlurmConfigured = %v", k)
	}
	if s.Slurm[demo] != nil {
		t.Fatal("files stored after a failed render")
	}
}

func TestDecisionsDoNotMutateState(t *testing.T) {
	t.Parallel()
	s := running(t)
	before := proto.Clone(s.Clusters[demo].Cluster)
	idx := s.Clusters[demo].NextIndex["gpu"]
	nodeBefore := proto.Clone(node(s, "gpu-0001"))
	_ = s.NodeHealthChanged(p, &eventsv1.NodeHealthChanged{Node: demo + "/nodes/gpu-0001", Health: eventsv1.NodeHealth_UNHEALTHY}, t0)
	_ = s.UpdateCluster(p, &eventsv1.UpdateCluster{Operation: "u", Cluster: clusterSpec(demo, gpuPool("gpu", 1))}, t0)
	_ = s.UpdateCluster(p, &eventsv1.UpdateCluster{Operation: "u", Cluster: clusterSpec(demo, gpuPool("gpu", 5))}, t0)
	_ = s.ProviderEvent(p, provider.Event{Node: demo + "/nodes/gpu-0001", Kind: provider.Preempted}, t0)
	_ = s.RemediateNode(p, &eventsv1.RemediateNode{Node: demo + "/nodes/gpu-0001", Action: loomv1.RemediationAction_ACTION_REPLACE, RemediationId: "r"}, "b", t0)
	_ = s.DeleteCluster(&eventsv1.DeleteCluster{Operation: "d", Cluster: demo}, t0)
	_ = s.Tick(p, t0.Add(48*time.Hour))
	if !proto.Equal(before, s.Clusters[demo].Cluster) || !proto.Equal(nodeBefore, node(s, "gpu-0001")) ||
		s.Clusters[demo].NextIndex["gpu"] != idx || len(s.ClusterNodes(demo)) != 2 {
		t.Fatal("a decision modified the state it read")
	}
}
