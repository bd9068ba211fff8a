package domain

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

var (
	t0     = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	params = Params{
		SharedDir:       func(c string) string { return "/data/clusters/" + c + "/shared" },
		WorkDir:         func(c, h string) string { return "/data/clusters/" + c + "/nodes/" + h },
		MaxNodesPerPool: 64,
		MaxAccelerators: 16,
	}
)

const demo = "projects/default/clusters/demo"

func createCmd(op, name string, pools ...*loomv1.NodePool) *eventsv1.CreateCluster {
	if len(pools) == 0 {
		pools = []*loomv1.NodePool{{Id: "gpu", NodeCount: 2, AcceleratorCount: 8, AcceleratorType: "nvidia-h100-80gb"}}
	}
	return &eventsv1.CreateCluster{Operation: op, Cluster: &loomv1.Cluster{
		Name: name, Compute: &loomv1.ComputeResources{NodePools: pools},
	}}
}

// apply applies a change and returns it, so tests read like the app.
func apply(s *State, ch Change) Change {
	s.Apply(ch)
	return ch
}

func created(t *testing.T) *State {
	t.Helper()
	s := NewState(nil, nil)
	apply(s, s.CreateCluster(params, createCmd("op1", demo), t0))
	return s
}

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

func onlyFailure(t *testing.T, ch Change) *eventsv1.ClusterOperationFailed {
	t.Helper()
	if len(ch.Events) != 1 || len(ch.PutClusters)+len(ch.PutNodes)+len(ch.DelClusters)+len(ch.DelNodes) != 0 {
		t.Fatalf("want exactly one ClusterOperationFailed and no writes, got %+v", ch)
	}
	f, ok := ch.Events[0].(*eventsv1.ClusterOperationFailed)
	if !ok {
		t.Fatalf("want ClusterOperationFailed, got %T", ch.Events[0])
	}
	return f
}

func TestCreateCluster(t *testing.T) {
	t.Parallel()
	s := NewState(nil, nil)
	ch := apply(s, s.CreateCluster(params, createCmd("op1", demo,
		&loomv1.NodePool{Id: "gpu", NodeCount: 2, AcceleratorCount: 8, AcceleratorType: "h100"},
		&loomv1.NodePool{Id: "cpu", NodeCount: 1}), t0))

	cc := clusterChanged(t, ch)
	if cc == nil || cc.Operation != "op1" || cc.OperationDone {
		t.Fatalf("ClusterChanged = %v, want operation op1, not done", cc)
	}
	st := cc.Cluster.GetStatus()
	if st.GetState() != loomv1.Cluster_CREATING || st.GetTotalNodes() != 3 || st.GetReadyNodes() != 0 ||
		st.GetSharedDir() != "/data/clusters/demo/shared" || st.GetMessage() != "0 of 3 nodes ready" {
		t.Fatalf("status = %v", st)
	}
	if _, ok := ch.Events[0].(*eventsv1.ClusterChanged); !ok {
		t.Fatalf("first event is %T, want ClusterChanged", ch.Events[0])
	}
	var hosts []string
	for _, e := range ch.Events[1:] {
		n := e.(*eventsv1.NodeChanged).Node
		hosts = append(hosts, n.GetHostname())
		if n.GetState() != loomv1.Node_PROVISIONING || n.GetCluster() != demo || n.GetName() != demo+"/nodes/"+n.GetHostname() ||
			n.GetWorkDir() != "/data/clusters/demo/nodes/"+n.GetHostname() || n.GetCreateTime() == nil {
			t.Fatalf("node = %v", n)
		}
	}
	if got := strings.Join(hosts, ","); got != "gpu-0001,gpu-0002,cpu-0001" {
		t.Fatalf("hostnames = %s", got)
	}
	if n := s.Nodes[demo+"/nodes/gpu-0002"]; n.GetGpus() != 8 || n.GetAcceleratorType() != "h100" || n.GetNodePool() != "gpu" {
		t.Fatalf("gpu node = %v", n)
	}
	if len(s.ClusterNodes(demo)) != 3 {
		t.Fatalf("state has %d nodes", len(s.ClusterNodes(demo)))
	}
}

func TestCreateClusterFailures(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		cmd       *eventsv1.CreateCluster
		code      codes.Code
		wantInMsg []string
	}{
		{"duplicate", createCmd("op2", demo), codes.AlreadyExists, []string{"already exists"}},
		{"same id in another project", createCmd("op2", "projects/other/clusters/demo"), codes.AlreadyExists, []string{"in use by " + demo}},
		{"bad name", createCmd("op2", "projects/default/clusters/Bad_Id"), codes.InvalidArgument, []string{"cluster.name"}},
		{"no pools", &eventsv1.CreateCluster{Operation: "op2", Cluster: &loomv1.Cluster{Name: "projects/default/clusters/x"}},
			codes.InvalidArgument, []string{"cluster.compute.node_pools"}},
		{"bad pools", createCmd("op2", "projects/default/clusters/x",
			&loomv1.NodePool{Id: "a", NodeCount: 0},
			&loomv1.NodePool{Id: "a", NodeCount: 65, AcceleratorCount: 17},
			&loomv1.NodePool{Id: "-x", NodeCount: 1}),
			codes.InvalidArgument, []string{"node_pools[0].node_count", "node_pools[1].id", "node_pools[1].node_count",
				"node_pools[1].accelerator_count", "node_pools[2].id"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := created(t)
			f := onlyFailure(t, s.CreateCluster(params, tc.cmd, t0))
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
	if ch := s.CreateCluster(params, createCmd("op1", demo), t0); !ch.Empty() {
		t.Fatalf("redelivered create changed something: %+v", ch)
	}
}

func register(s *State, host string, at time.Time) Change {
	return apply(s, s.AgentRegistered(&eventsv1.AgentRegistered{Node: demo + "/nodes/" + host, Cluster: demo, Hostname: host, BootId: "b"}, at))
}

func TestRegisteredToRunning(t *testing.T) {
	t.Parallel()
	s := created(t)

	ch := register(s, "gpu-0001", t0.Add(time.Second))
	if n := ch.Events[0].(*eventsv1.NodeChanged).Node; n.GetState() != loomv1.Node_READY || n.GetHostname() != "gpu-0001" {
		t.Fatalf("first event = %v, want NodeChanged READY", ch.Events[0])
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
	if got := s.Clusters[demo]; got.Operation != "" || got.State() != loomv1.Cluster_RUNNING || !got.Cluster.UpdateTime.AsTime().Equal(t0.Add(3*time.Second)) {
		t.Fatalf("record = %+v", got)
	}
	// Unknown nodes are ignored.
	if ch := register(s, "gpu-0009", t0); !ch.Empty() {
		t.Fatalf("unknown node changed something: %+v", ch)
	}
}

func health(s *State, host string, h eventsv1.NodeHealth, reason string) Change {
	return apply(s, s.NodeHealthChanged(&eventsv1.NodeHealthChanged{Node: demo + "/nodes/" + host, Cluster: demo, Health: h, Reason: reason}, t0))
}

func TestHealth(t *testing.T) {
	t.Parallel()
	s := created(t)
	register(s, "gpu-0001", t0)
	register(s, "gpu-0002", t0)

	ch := health(s, "gpu-0002", eventsv1.NodeHealth_UNHEALTHY, "no heartbeat for 30s")
	n := ch.Events[0].(*eventsv1.NodeChanged).Node
	if n.GetState() != loomv1.Node_DOWN || n.GetReason() != "no heartbeat for 30s" {
		t.Fatalf("node = %v", n)
	}
	cc := clusterChanged(t, ch)
	if cc == nil || cc.Operation != "" || cc.OperationDone || cc.Cluster.Status.GetReadyNodes() != 1 || cc.Cluster.Status.GetState() != loomv1.Cluster_RUNNING {
		t.Fatalf("cluster after down = %v", cc)
	}
	if ch := health(s, "gpu-0002", eventsv1.NodeHealth_UNHEALTHY, "no heartbeat for 30s"); !ch.Empty() {
		t.Fatalf("same verdict twice changed something: %+v", ch)
	}
	// A DOWN node stays DOWN when its agent registers again: health decides.
	if ch := register(s, "gpu-0002", t0); !ch.Empty() {
		t.Fatalf("registration of a DOWN node changed something: %+v", ch)
	}
	ch = health(s, "gpu-0002", eventsv1.NodeHealth_HEALTHY, "")
	if n := s.Nodes[demo+"/nodes/gpu-0002"]; n.GetState() != loomv1.Node_READY || n.GetReason() != "" {
		t.Fatalf("node after healthy = %v", n)
	}
	if cc := clusterChanged(t, ch); cc == nil || cc.Cluster.Status.GetReadyNodes() != 2 || cc.OperationDone {
		t.Fatalf("cluster after healthy = %v", cc)
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
	s := created(t)
	register(s, "gpu-0001", t0)
	register(s, "gpu-0002", t0)

	ch := apply(s, s.DeleteCluster(&eventsv1.DeleteCluster{Operation: "del1", Cluster: demo}, t0))
	cc := clusterChanged(t, ch)
	if cc == nil || cc.Operation != "del1" || cc.OperationDone || cc.Cluster.Status.GetState() != loomv1.Cluster_DELETING {
		t.Fatalf("delete = %v", cc)
	}
	for _, n := range s.ClusterNodes(demo) {
		if n.GetState() != loomv1.Node_DELETING {
			t.Fatalf("node %s is %v, want DELETING", n.GetName(), n.GetState())
		}
	}
	// Events about nodes of a deleting cluster change nothing.
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
	for _, e := range ch.Events[:len(ch.Events)-1] {
		removed = append(removed, e.(*eventsv1.NodeRemoved).Node)
	}
	if strings.Join(removed, ",") != demo+"/nodes/gpu-0001,"+demo+"/nodes/gpu-0002" {
		t.Fatalf("removed = %v", removed)
	}
	if d, ok := ch.Events[len(ch.Events)-1].(*eventsv1.ClusterDeleted); !ok || d.Operation != "del1" || d.Cluster != demo {
		t.Fatalf("last event = %v, want ClusterDeleted del1", ch.Events[len(ch.Events)-1])
	}
	if len(s.Clusters) != 0 || len(s.Nodes) != 0 || len(s.ClusterNodes(demo)) != 0 {
		t.Fatalf("state not empty: %d clusters, %d nodes", len(s.Clusters), len(s.Nodes))
	}
	if f := onlyFailure(t, s.DeleteCluster(&eventsv1.DeleteCluster{Operation: "del3", Cluster: demo}, t0)); codes.Code(f.Code) != codes.NotFound {
		t.Fatalf("delete of a gone cluster = %v", f)
	}
	if ch := s.FinishDelete(demo); !ch.Empty() {
		t.Fatalf("second finish changed something: %+v", ch)
	}
}

func TestDeleteWhileCreatingAbortsCreate(t *testing.T) {
	t.Parallel()
	s := created(t)
	ch := s.DeleteCluster(&eventsv1.DeleteCluster{Operation: "del1", Cluster: demo}, t0)
	f, ok := ch.Events[0].(*eventsv1.ClusterOperationFailed)
	if !ok || f.Operation != "op1" || codes.Code(f.Code) != codes.Aborted {
		t.Fatalf("first event = %v, want create op1 ABORTED", ch.Events[0])
	}
	if cc := clusterChanged(t, ch); cc == nil || cc.Operation != "del1" {
		t.Fatalf("ClusterChanged = %v", cc)
	}
}

func TestLaunchReasons(t *testing.T) {
	t.Parallel()
	s := created(t)
	node := demo + "/nodes/gpu-0001"
	ch := apply(s, s.LaunchFailed(node, "exec: no such file"))
	if n := ch.Events[0].(*eventsv1.NodeChanged).Node; n.GetState() != loomv1.Node_PROVISIONING || n.GetReason() != LaunchReasonPrefix+"exec: no such file" {
		t.Fatalf("node = %v", n)
	}
	if ch := s.LaunchFailed(node, "exec: no such file"); !ch.Empty() {
		t.Fatalf("same reason twice changed something")
	}
	ch = apply(s, s.Launched(node))
	if n := s.Nodes[node]; n.GetReason() != "" || len(ch.Events) != 1 {
		t.Fatalf("after launch node = %v, events %d", n, len(ch.Events))
	}
	if ch := s.Launched(node); !ch.Empty() {
		t.Fatalf("launch without a reason changed something")
	}
	// Health's reasons are not the provider's to clear.
	register(s, "gpu-0001", t0)
	health(s, "gpu-0001", eventsv1.NodeHealth_UNHEALTHY, "xid 79")
	if ch := s.Launched(node); !ch.Empty() {
		t.Fatalf("Launched cleared a health reason")
	}
}

func TestDecisionsDoNotMutateState(t *testing.T) {
	t.Parallel()
	s := created(t)
	before := proto.Clone(s.Clusters[demo].Cluster)
	nodeBefore := proto.Clone(s.Nodes[demo+"/nodes/gpu-0001"])
	_ = s.AgentRegistered(&eventsv1.AgentRegistered{Node: demo + "/nodes/gpu-0001"}, t0)
	_ = s.DeleteCluster(&eventsv1.DeleteCluster{Operation: "d", Cluster: demo}, t0)
	if !proto.Equal(before, s.Clusters[demo].Cluster) || !proto.Equal(nodeBefore, s.Nodes[demo+"/nodes/gpu-0001"]) {
		t.Fatal("a decision modified the state it read")
	}
}
