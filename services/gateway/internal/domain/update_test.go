package domain

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/errs"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// running is a RUNNING cluster as the provisioner reports it: a normalized
// spec with its status.
func running() *loomv1.Cluster {
	c := &loomv1.Cluster{
		DisplayName: "train",
		Labels:      map[string]string{"team": "ml"},
		Compute: &loomv1.ComputeResources{NodePools: []*loomv1.NodePool{
			{Id: "gpu", MachineType: "a3-ultragpu-8g", NodeCount: 2},
			{Id: "cpu", MachineType: "n2-standard-8", NodeCount: 1},
		}},
		Network: &loomv1.NetworkConfig{Zone: "us-central1-a", Mtu: 8896},
	}
	c = NormalizeSpec(c)
	c.Name = "projects/default/clusters/c1"
	c.Status = &loomv1.ClusterStatus{State: loomv1.Cluster_RUNNING, ReadyNodes: 3, TotalNodes: 3}
	c.CreateTime = timestamppb.Now()
	return c
}

// updateReq is an update of c1 whose cluster is c (named c1) and mask paths.
func updateReq(c *loomv1.Cluster, paths ...string) *loomv1.UpdateClusterRequest {
	c = proto.Clone(c).(*loomv1.Cluster)
	c.Name = "projects/default/clusters/c1"
	r := &loomv1.UpdateClusterRequest{Cluster: c}
	if len(paths) > 0 {
		r.UpdateMask = &fieldmaskpb.FieldMask{Paths: paths}
	}
	return r
}

func TestMergeUpdateResize(t *testing.T) {
	t.Parallel()
	cur := running()
	// The request holds only what it changes: the whole pool list.
	want := proto.Clone(cur).(*loomv1.Cluster)
	want.Compute.NodePools[0].NodeCount = 4
	req := updateReq(&loomv1.Cluster{Compute: want.Compute}, "compute.node_pools")
	if err := CheckUpdateRequest(req); err != nil {
		t.Fatalf("CheckUpdateRequest: %v", err)
	}
	up, err := MergeUpdate(req, cur)
	if err != nil {
		t.Fatalf("MergeUpdate: %v", err)
	}
	want = SpecOf(want)
	want.Name = cur.GetName()
	if !proto.Equal(up.Cluster, want) {
		t.Fatalf("merged:\n got %v\nwant %v", up.Cluster, want)
	}
	if !up.Changed || !slices.Equal(up.Mask, []string{"compute.node_pools"}) || up.DrainGraceSeconds != DefaultDrainGraceSeconds {
		t.Fatalf("update: changed %v mask %v grace %d", up.Changed, up.Mask, up.DrainGraceSeconds)
	}
	if cur.GetCompute().GetNodePools()[0].GetNodeCount() != 2 {
		t.Fatal("MergeUpdate modified the current cluster")
	}
}

// TestMergeUpdateRESTBody is a PATCH whose body was read back from GET: the
// mask names every leaf, output-only and unchanged frozen fields included.
func TestMergeUpdateRESTBody(t *testing.T) {
	t.Parallel()
	cur := running()
	body := proto.Clone(cur).(*loomv1.Cluster)
	body.Compute.NodePools[1].NodeCount = 3
	body.Description = "more cpu"
	req := updateReq(body, "compute.node_pools", "create_time", "description", "display_name", "labels",
		"network.mtu", "network.zone", "status.state", "status.ready_nodes")
	req.DrainGraceSeconds = 60
	up, err := MergeUpdate(req, cur)
	if err != nil {
		t.Fatalf("MergeUpdate: %v", err)
	}
	if up.Cluster.GetCompute().GetNodePools()[1].GetNodeCount() != 3 || up.Cluster.GetDescription() != "more cpu" ||
		up.Cluster.GetStatus() != nil || up.Cluster.GetCreateTime() != nil || up.DrainGraceSeconds != 60 {
		t.Fatalf("merged: %v (grace %d)", up.Cluster, up.DrainGraceSeconds)
	}
	if !slices.Equal(up.Mask, []string{"compute.node_pools", "labels", "display_name", "description"}) {
		t.Fatalf("mask %v", up.Mask)
	}
}

func TestMergeUpdateEmptyMask(t *testing.T) {
	t.Parallel()
	cur := running()
	// An empty mask takes every updatable field from the request; a
	// fixed one it sets as it is (a spec read with Get) is no change.
	req := updateReq(SpecOf(cur))
	req.Cluster.DisplayName = "renamed"
	up, err := MergeUpdate(req, cur)
	if err != nil {
		t.Fatalf("MergeUpdate: %v", err)
	}
	if up.Cluster.GetDisplayName() != "renamed" || up.Cluster.GetNetwork().GetMtu() != 8896 || !slices.Equal(up.Mask, UpdatablePaths) {
		t.Fatalf("merged: %v mask %v", up.Cluster, up.Mask)
	}
	// One it sets otherwise is refused by name (AIP-134: no mask is the
	// populated fields), not dropped while the caller believes it applied.
	req.Cluster.Network.Mtu = 1500
	if _, err := MergeUpdate(req, cur); !slices.Contains(fields(t, err), "cluster.network.mtu") {
		t.Fatalf("a changed network under an empty mask: %v, want a violation at cluster.network.mtu", err)
	}

	same, err := MergeUpdate(updateReq(SpecOf(cur)), cur)
	if err != nil || same.Changed {
		t.Fatalf("an update to the same spec: changed %v, %v", same.Changed, err)
	}
}

func TestMergeUpdateRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		req   func() *loomv1.UpdateClusterRequest
		field string // "" when the refusal is not an InvalidArgument
		kind  error
	}{
		{"a frozen field in the mask", func() *loomv1.UpdateClusterRequest {
			c := SpecOf(running())
			c.Network.Mtu = 1500
			return updateReq(c, "network.mtu")
		}, "cluster.network.mtu", nil},
		{"a frozen section in the mask", func() *loomv1.UpdateClusterRequest {
			return updateReq(&loomv1.Cluster{Storage: &loomv1.StorageResources{Home: &loomv1.SharedHome{Tier: "ZONAL"}}}, "storage")
		}, "cluster.storage.home.", nil},
		{"a pool's machine type", func() *loomv1.UpdateClusterRequest {
			c := SpecOf(running())
			c.Compute.NodePools[0].MachineType = "a3-megagpu-8g"
			return updateReq(c, "compute.node_pools")
		}, "cluster.compute.node_pools[0].machine_type", nil},
		{"an invalid merged spec", func() *loomv1.UpdateClusterRequest {
			c := SpecOf(running())
			c.Compute.NodePools[1].NodeCount = 0
			return updateReq(c, "compute.node_pools")
		}, "cluster.compute.node_pools[1].node_count", nil},
		{"a cluster being created", func() *loomv1.UpdateClusterRequest {
			c := SpecOf(running())
			c.Compute.NodePools[0].NodeCount++
			return updateReq(c, "compute.node_pools")
		}, "", errs.FailedPrecondition},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cur := running()
			if tc.kind != nil {
				cur.Status.State = loomv1.Cluster_CREATING
			}
			_, err := MergeUpdate(tc.req(), cur)
			if tc.kind != nil {
				if !errors.Is(err, tc.kind) {
					t.Fatalf("got %v, want %v", err, tc.kind)
				}
				return
			}
			got := fields(t, err)
			if !slices.ContainsFunc(got, func(f string) bool { return strings.HasPrefix(f, tc.field) }) {
				t.Fatalf("violations %v (%v), want one at %s", got, err, tc.field)
			}
		})
	}
}

func TestCheckUpdateRequest(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		req  *loomv1.UpdateClusterRequest
		want []string
	}{
		{"no cluster", &loomv1.UpdateClusterRequest{}, []string{"cluster"}},
		{"no name", &loomv1.UpdateClusterRequest{Cluster: &loomv1.Cluster{}}, []string{"cluster.name"}},
		{"bad name", &loomv1.UpdateClusterRequest{Cluster: &loomv1.Cluster{Name: "c1"}}, []string{"cluster.name"}},
		{"bad paths", updateReq(&loomv1.Cluster{}, "compute.node_pools", "nope", "compute.node_pools.node_count", "labels.team"),
			[]string{"update_mask.paths[1]", "update_mask.paths[2]", "update_mask.paths[3]"}},
		{"negative grace", func() *loomv1.UpdateClusterRequest {
			r := updateReq(&loomv1.Cluster{})
			r.DrainGraceSeconds = -1
			return r
		}(), []string{"drain_grace_seconds"}},
		// A grace of 68 years would hold the shrink's operation open as long.
		{"grace past a week", func() *loomv1.UpdateClusterRequest {
			r := updateReq(&loomv1.Cluster{})
			r.DrainGraceSeconds = MaxDrainGraceSeconds + 1
			return r
		}(), []string{"drain_grace_seconds"}},
	} {
		got := fields(t, CheckUpdateRequest(tc.req))
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: violations %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestMergeUpdateLoginNodesAndScripts: the login node count and the prolog
// and epilog scripts are updatable (docs/clusters.md, and the provisioner
// carries them out), under their own mask paths, a parent's, or an empty
// mask; they were refused as frozen, and an empty mask dropped them while
// answering the update as done.
func TestMergeUpdateLoginNodesAndScripts(t *testing.T) {
	t.Parallel()
	cur := running()
	cur.Orchestrator.Slurm.LoginNodes = &loomv1.LoginNodes{MachineType: "n2-standard-4", Count: 1}
	next := SpecOf(cur)
	next.Orchestrator.Slurm.LoginNodes.Count = 2
	next.Orchestrator.Slurm.PrologScripts = []string{"echo prolog"}
	next.Orchestrator.Slurm.EpilogScripts = []string{"echo epilog"}
	for _, mask := range [][]string{
		{"orchestrator.slurm.login_nodes", "orchestrator.slurm.prolog_scripts", "orchestrator.slurm.epilog_scripts"},
		{"orchestrator"},
		{"orchestrator.slurm"},
		nil,
	} {
		up, err := MergeUpdate(updateReq(next, mask...), cur)
		if err != nil {
			t.Errorf("mask %v: %v", mask, err)
			continue
		}
		s := up.Cluster.GetOrchestrator().GetSlurm()
		if !up.Changed || s.GetLoginNodes().GetCount() != 2 || !slices.Equal(s.GetPrologScripts(), []string{"echo prolog"}) ||
			!slices.Equal(s.GetEpilogScripts(), []string{"echo epilog"}) {
			t.Errorf("mask %v: changed %v, slurm %v", mask, up.Changed, s)
		}
		for _, p := range []string{"orchestrator.slurm.login_nodes", "orchestrator.slurm.prolog_scripts", "orchestrator.slurm.epilog_scripts"} {
			if !slices.Contains(up.Mask, p) {
				t.Errorf("mask %v: the command's mask %v lacks %s", mask, up.Mask, p)
			}
		}
	}
	// The login machine type stays fixed.
	mt := SpecOf(cur)
	mt.Orchestrator.Slurm.LoginNodes.MachineType = "n2-standard-8"
	_, err := MergeUpdate(updateReq(mt, "orchestrator.slurm.login_nodes"), cur)
	if got := fields(t, err); !slices.Contains(got, "cluster.orchestrator.slurm.login_nodes.machine_type") {
		t.Errorf("login machine type change: %v", err)
	}
}

// TestMergeUpdateEmptyMaskKeepsOrchestrator: with an empty mask, a request
// without an orchestrator leaves the cluster's partitions, node sets and
// login nodes as they are (docs/clusters.md); it used to replace the
// cluster's own partitions with the generated "all", which removes them
// and ends their jobs, and to drop the login nodes.
func TestMergeUpdateEmptyMaskKeepsOrchestrator(t *testing.T) {
	t.Parallel()
	cur := running()
	s := cur.Orchestrator.Slurm
	s.LoginNodes = &loomv1.LoginNodes{MachineType: "n2-standard-4", Count: 1}
	s.Partitions = []*loomv1.SlurmPartition{
		{Id: "train", NodeSetIds: []string{"gpu"}, MaxTime: "UNLIMITED", Default: true},
		{Id: "debug", NodeSetIds: []string{"cpu"}, MaxTime: "1:00:00"},
	}
	req := SpecOf(cur)
	req.Orchestrator = nil
	req.Compute.NodePools[1].NodeCount = 3
	up, err := MergeUpdate(updateReq(req), cur)
	if err != nil {
		t.Fatalf("MergeUpdate: %v", err)
	}
	if got := up.Cluster.GetOrchestrator().GetSlurm(); !proto.Equal(got, s) {
		t.Errorf("orchestrator:\n got %v\nwant it unchanged %v", got, s)
	}
	if up.Cluster.GetCompute().GetNodePools()[1].GetNodeCount() != 3 || !up.Changed {
		t.Errorf("the resize was lost: %v", up.Cluster.GetCompute())
	}
	// A request that has an orchestrator still sets it whole.
	whole := SpecOf(cur)
	whole.Orchestrator.Slurm.Partitions = whole.Orchestrator.Slurm.Partitions[:1]
	up, err = MergeUpdate(updateReq(whole), cur)
	if err != nil || len(up.Cluster.GetOrchestrator().GetSlurm().GetPartitions()) != 1 {
		t.Errorf("an orchestrator given whole: %v %v", up.Cluster.GetOrchestrator(), err)
	}
}

// While a cluster is created or updated, a change that moves no node (a
// partition's state, labels) is let through (the provisioner applies it at
// once); one that moves nodes, alone or mixed with it, is refused as
// before, and every update of a cluster being deleted.
func TestMergeUpdateWhileBusy(t *testing.T) {
	t.Parallel()
	for _, st := range []loomv1.Cluster_State{loomv1.Cluster_CREATING, loomv1.Cluster_UPDATING, loomv1.Cluster_DELETING} {
		cur := running()
		cur.Status.State = st
		down := proto.Clone(cur).(*loomv1.Cluster)
		down.Orchestrator.Slurm.Partitions[0].State = "DOWN"
		req := updateReq(&loomv1.Cluster{Orchestrator: down.Orchestrator}, "orchestrator.slurm.partitions")
		up, err := MergeUpdate(req, cur)
		if st == loomv1.Cluster_DELETING {
			if !errors.Is(err, errs.FailedPrecondition) {
				t.Errorf("%s: %v, want FAILED_PRECONDITION", st, err)
			}
			continue
		}
		if err != nil || !up.Changed || up.Cluster.GetOrchestrator().GetSlurm().GetPartitions()[0].GetState() != "DOWN" {
			t.Errorf("%s: State=DOWN: %v %v, want the change", st, up.Cluster, err)
		}
		labels := proto.Clone(down).(*loomv1.Cluster)
		labels.Labels = map[string]string{"team": "vision"}
		up, err = MergeUpdate(updateReq(labels, "labels", "orchestrator.slurm.partitions"), cur)
		if err != nil || up.Cluster.GetLabels()["team"] != "vision" || up.Cluster.GetOrchestrator().GetSlurm().GetPartitions()[0].GetState() != "DOWN" {
			t.Errorf("%s: State=DOWN and labels: %v %v, want the change", st, up.Cluster, err)
		}
		grown := proto.Clone(down).(*loomv1.Cluster)
		grown.Compute.NodePools[0].NodeCount++
		_, err = MergeUpdate(updateReq(grown, "compute.node_pools", "orchestrator.slurm.partitions"), cur)
		if !errors.Is(err, errs.FailedPrecondition) || !strings.Contains(err.Error(), st.String()) {
			t.Errorf("%s: State=DOWN and a grown pool: %v, want FAILED_PRECONDITION naming the state", st, err)
		}
	}
}
