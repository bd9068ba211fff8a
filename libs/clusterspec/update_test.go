package clusterspec

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// stored is base(t) as the provisioner stores it: normalized, with status.
func stored(t *testing.T) *loomv1.Cluster {
	t.Helper()
	c := base(t)
	Normalize(c)
	c.Status = &loomv1.ClusterStatus{State: loomv1.Cluster_RUNNING, TotalNodes: 4}
	return c
}

func TestValidateUpdateAllowed(t *testing.T) {
	t.Parallel()
	type C = *loomv1.Cluster
	cases := []struct {
		name   string
		mask   []string
		change func(C)
	}{
		{"grow a pool", nil, func(c C) { c.Compute.NodePools[0].NodeCount = 16 }},
		{"shrink a pool", []string{"compute.node_pools"}, func(c C) { c.Compute.NodePools[0].NodeCount = 1 }},
		{"dynamic nodes and pool labels", nil, func(c C) {
			c.Compute.NodePools[2].MaxDynamicNodeCount = 8
			c.Compute.NodePools[2].Labels = map[string]string{"tier": "cheap"}
		}},
		{"add a pool, node set and partition", nil, func(c C) {
			c.Compute.NodePools = append(c.Compute.NodePools, &loomv1.NodePool{Id: "l4", MachineType: "g2-standard-48", NodeCount: 2})
			s := c.Orchestrator.Slurm
			s.NodeSets = append(s.NodeSets, &loomv1.SlurmNodeSet{Id: "l4", NodePoolId: "l4"})
			s.Partitions = append(s.Partitions, &loomv1.SlurmPartition{Id: "inference", NodeSetIds: []string{"l4"}})
		}},
		{"remove a pool with its node set and partition", nil, func(c C) {
			c.Compute.NodePools = c.Compute.NodePools[:2]
			c.Orchestrator.Slurm.NodeSets = c.Orchestrator.Slurm.NodeSets[:2]
			c.Orchestrator.Slurm.Partitions = c.Orchestrator.Slurm.Partitions[:2]
		}},
		{"labels, description, scripts", []string{"labels", "description", "orchestrator.slurm.prolog_scripts"}, func(c C) {
			c.Labels = map[string]string{"team": "infra"}
			c.Description = "now with more"
			c.Orchestrator.Slurm.PrologScripts = []string{"#!/bin/sh\necho hi\n"}
		}},
		{"login count", []string{"orchestrator.slurm.login_nodes"}, func(c C) { c.Orchestrator.Slurm.LoginNodes.Count = 2 }},
		{"omitted storage and network", nil, func(c C) { c.Storage, c.Network = nil, nil }},
		{"partial spec under a mask", []string{"compute.node_pools"}, func(c C) { c.Storage, c.Orchestrator, c.Network = nil, nil, nil }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			old := stored(t)
			nw := base(t)
			tc.change(nw)
			oldCopy, nwCopy := proto.Clone(old), proto.Clone(nw)
			got, err := ApplyUpdate(old, nw, tc.mask)
			if err != nil {
				t.Fatalf("ApplyUpdate: %v", err)
			}
			if err := ValidateUpdate(old, nw, tc.mask); err != nil {
				t.Fatalf("ValidateUpdate: %v", err)
			}
			if !proto.Equal(old, oldCopy) || !proto.Equal(nw, nwCopy) {
				t.Fatal("ApplyUpdate changed its arguments")
			}
			if got.GetName() != old.GetName() || !proto.Equal(got.GetStatus(), old.GetStatus()) {
				t.Fatalf("name/status not kept: %s %v", got.GetName(), got.GetStatus())
			}
			if !proto.Equal(got.GetStorage(), old.GetStorage()) || !proto.Equal(got.GetNetwork(), old.GetNetwork()) {
				t.Fatal("storage or network changed")
			}
			want := proto.Clone(nw).(*loomv1.Cluster)
			Normalize(want)
			if !proto.Equal(&loomv1.ComputeResources{NodePools: got.GetCompute().GetNodePools()}, want.GetCompute()) {
				t.Fatalf("pools = %v, want %v", got.GetCompute(), want.GetCompute())
			}
		})
	}
}

func TestValidateUpdateRefused(t *testing.T) {
	t.Parallel()
	type C = *loomv1.Cluster
	cases := []struct {
		name   string
		mask   []string
		change func(C)
		want   []string
	}{
		{"machine type", nil, func(c C) {
			c.Compute.NodePools[1].MachineType = "a3-megagpu-8g"
			c.Compute.NodePools[1].AcceleratorType = ""
		},
			[]string{"compute.node_pools[1].machine_type: cannot be changed after creation (was a3-highgpu-8g); add a new pool instead",
				"compute.node_pools[1].accelerator_type: cannot be changed after creation (was nvidia-h100-80gb); add a new pool instead"}},
		{"capacity source", nil, func(c C) { c.Compute.NodePools[1].Capacity.Type = loomv1.CapacitySource_ON_DEMAND },
			[]string{"compute.node_pools[1].capacity: cannot be changed after creation (was SPOT); add a new pool instead"}},
		{"pool zone", nil, func(c C) { c.Compute.NodePools[0].Zone = "us-east5-a" },
			[]string{"compute.node_pools[0].zone: cannot be changed after creation (was us-central1-a); add a new pool instead"}},
		{"boot disk", nil, func(c C) { c.Compute.NodePools[0].BootDisk.SizeGb = 400 },
			[]string{"compute.node_pools[0].boot_disk: cannot be changed after creation (was hyperdisk-balanced 300 GB); add a new pool instead"}},
		{"network", nil, func(c C) { c.Network.Mtu = 1500 },
			[]string{"network: cannot be changed after creation"}},
		{"storage", nil, func(c C) { c.Storage.Home.CapacityGib = 4096 },
			[]string{"storage: cannot be changed after creation"}},
		{"storage in the mask", []string{"storage", "status", "compute.node_pools.node_count", "bogus"}, func(C) {},
			[]string{"update_mask[0]: storage cannot be changed after creation",
				"update_mask[1]: status is output only",
				`update_mask[2]: "compute.node_pools.node_count": name the whole list or message "compute.node_pools"; the new value replaces it`,
				`update_mask[3]: unknown or non-updatable field "bogus" (updatable: ` + strings.Join(updatablePaths, ", ") + ")"}},
		{"name", nil, func(c C) { c.Name = "projects/p/clusters/other" },
			[]string{`name: cannot be changed after creation (is "projects/p/clusters/base")`}},
		// A pool may go, but not from under its node set.
		{"remove a pool and keep its node set", []string{"compute.node_pools"}, func(c C) { c.Compute.NodePools = c.Compute.NodePools[:2] },
			[]string{`orchestrator.slurm.node_sets[2].node_pool_id: no node pool "cpu"`}},
		{"rename a pool's nodes", nil, func(c C) {
			c.Orchestrator.Slurm.NodeSets[0].Id = "h200"
			c.Orchestrator.Slurm.Partitions[0].NodeSetIds = []string{"h200"}
		}, []string{`orchestrator.slurm.node_sets[0]: would rename the nodes of pool "gpu-a" from a3u-NNNN to h200-NNNN; node names cannot be changed after creation`}},
		{"login machine type", nil, func(c C) { c.Orchestrator.Slurm.LoginNodes.MachineType = "n2-standard-16" },
			[]string{"orchestrator.slurm.login_nodes.machine_type: cannot be changed after creation (was n2-standard-4)"}},
		{"grow past the pool bound", nil, func(c C) {
			for i := len(c.Compute.NodePools); i <= MaxNodePools; i++ {
				c.Compute.NodePools = append(c.Compute.NodePools, &loomv1.NodePool{Id: fmt.Sprintf("x%d", i), MachineType: "n2-standard-8", NodeCount: 1})
			}
		}, []string{"compute.node_pools: at most 32 node pools, got 33"}},
		{"grow past the cluster's node bound", nil, func(c C) { c.Compute.NodePools[0].NodeCount = 10000; c.Compute.NodePools[1].NodeCount = 10000 },
			[]string{"compute.node_pools: at most 20000 nodes in a cluster (node_count plus max_dynamic_node_count over every pool), got 20003"}},
		{"the result must validate", []string{"compute.node_pools"}, func(c C) { c.Compute.NodePools[0].NodeCount = 0 },
			[]string{"compute.node_pools[0].node_count: must be at least 1, got 0"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			old := stored(t)
			nw := base(t)
			tc.change(nw)
			got := violations(ValidateUpdate(old, nw, tc.mask))
			if !slices.Equal(got, tc.want) {
				t.Fatalf("violations:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(tc.want, "\n  "))
			}
		})
	}
	if ValidateUpdate(nil, base(t), nil) == nil {
		t.Fatal("ValidateUpdate(nil, ...) = nil")
	}
}

// TestApplyUpdateGeneratedLayout: a cluster created without a Slurm section
// keeps the generated layout when a pool is added, so the new pool joins "all".
func TestApplyUpdateGeneratedLayout(t *testing.T) {
	t.Parallel()
	old := &loomv1.Cluster{Name: "projects/p/clusters/c", Compute: &loomv1.ComputeResources{NodePools: []*loomv1.NodePool{
		{Id: "gpu", MachineType: "a3-highgpu-8g", NodeCount: 1},
	}}}
	Normalize(old)
	for _, mask := range [][]string{nil, {"compute.node_pools"}} {
		nw := &loomv1.Cluster{Compute: &loomv1.ComputeResources{NodePools: []*loomv1.NodePool{
			{Id: "gpu", MachineType: "a3-highgpu-8g", NodeCount: 2},
			{Id: "spot", MachineType: "a3-highgpu-8g", NodeCount: 2, Capacity: &loomv1.CapacitySource{Type: loomv1.CapacitySource_SPOT}},
		}}}
		got, err := ApplyUpdate(old, nw, mask)
		if err != nil {
			t.Fatalf("mask %q: %v", mask, err)
		}
		s := got.GetOrchestrator().GetSlurm()
		if len(s.GetNodeSets()) != 2 || len(s.GetPartitions()) != 1 ||
			!slices.Equal(s.GetPartitions()[0].GetNodeSetIds(), []string{"gpu", "spot"}) {
			t.Fatalf("mask %q: slurm = %v, want partition all over gpu and spot", mask, s)
		}
	}
}

// A partition's State (scontrol update PartitionName=P State=...) is set by
// an update of the partitions, checked, stored with UP as "", and kept by
// an update that does not name the partitions, the generated partition
// "all" included (which still takes added pools).
func TestApplyUpdatePartitionState(t *testing.T) {
	t.Parallel()
	old := &loomv1.Cluster{Name: "projects/p/clusters/c", Compute: &loomv1.ComputeResources{NodePools: []*loomv1.NodePool{
		{Id: "gpu", MachineType: "a3-highgpu-8g", NodeCount: 1},
	}}}
	Normalize(old)
	mask := []string{"orchestrator.slurm.partitions"}
	withState := func(c *loomv1.Cluster, state string) *loomv1.Cluster {
		n := proto.Clone(c).(*loomv1.Cluster)
		n.Orchestrator.Slurm.Partitions[0].State = state
		return n
	}
	down, err := ApplyUpdate(old, withState(old, "DOWN"), mask)
	if err != nil {
		t.Fatal(err)
	}
	if st := down.GetOrchestrator().GetSlurm().GetPartitions()[0].GetState(); st != "DOWN" {
		t.Fatalf("state %q, want DOWN", st)
	}
	_, err = ApplyUpdate(old, withState(old, "down"), mask)
	if err == nil || !strings.Contains(err.Error(), "orchestrator.slurm.partitions[0].state") || !strings.Contains(err.Error(), "UP, DOWN, DRAIN or INACTIVE") {
		t.Fatalf("state down: %v, want a refusal naming the field and the states", err)
	}
	up, err := ApplyUpdate(down, withState(down, "UP"), mask)
	if err != nil || up.GetOrchestrator().GetSlurm().GetPartitions()[0].GetState() != "" {
		t.Fatalf("UP: %v %v, want stored as empty", err, up)
	}
	grown, err := ApplyUpdate(down, &loomv1.Cluster{Compute: &loomv1.ComputeResources{NodePools: []*loomv1.NodePool{
		{Id: "gpu", MachineType: "a3-highgpu-8g", NodeCount: 1},
		{Id: "more", MachineType: "a3-highgpu-8g", NodeCount: 1},
	}}}, []string{"compute.node_pools"})
	if err != nil {
		t.Fatal(err)
	}
	p := grown.GetOrchestrator().GetSlurm().GetPartitions()
	if len(p) != 1 || p[0].GetState() != "DOWN" || !slices.Equal(p[0].GetNodeSetIds(), []string{"gpu", "more"}) {
		t.Fatalf("after adding a pool: %v, want partition all over gpu and more, still DOWN", p)
	}
}

// MovesNoNode is decided field by field: one row per field of the cluster
// spec (every one: a field added to the proto must get a row), plus the
// list-level changes (pools added, removed, reordered).
func TestMovesNoNode(t *testing.T) {
	t.Parallel()
	type C = *loomv1.Cluster
	pool := func(c C, i int) *loomv1.NodePool { return c.Compute.NodePools[i] }
	slurm := func(c C) *loomv1.SlurmOrchestrator { return c.Orchestrator.Slurm }
	cases := []struct {
		field  string // the spec field it changes, or a list-level change
		change func(C)
		want   bool
	}{
		{"display_name", func(c C) { c.DisplayName = "Base" }, true},
		{"description", func(c C) { c.Description = "now with more" }, true},
		{"labels", func(c C) { c.Labels = map[string]string{"team": "vision"} }, true},
		{"compute.node_pools.id", func(c C) { pool(c, 2).Id = "cpu2"; slurm(c).NodeSets[2].NodePoolId = "cpu2" }, false},
		{"compute.node_pools.machine_type", func(c C) { pool(c, 0).MachineType = "a3-megagpu-8g" }, false},
		{"compute.node_pools.node_count", func(c C) { pool(c, 0).NodeCount++ }, false},
		{"compute.node_pools.accelerator_type", func(c C) { pool(c, 0).AcceleratorType = "nvidia-h100-80gb" }, false},
		{"compute.node_pools.accelerator_count", func(c C) { pool(c, 0).AcceleratorCount = 4 }, false},
		{"compute.node_pools.labels", func(c C) { pool(c, 1).Labels = map[string]string{"tier": "cheap"} }, true},
		{"compute.node_pools.max_dynamic_node_count", func(c C) { pool(c, 2).MaxDynamicNodeCount++ }, false},
		{"compute.node_pools.capacity", func(c C) { pool(c, 1).Capacity = &loomv1.CapacitySource{Type: loomv1.CapacitySource_ON_DEMAND} }, false},
		{"compute.node_pools.boot_disk", func(c C) { pool(c, 0).BootDisk.SizeGb++ }, false},
		{"compute.node_pools.zone", func(c C) { pool(c, 0).Zone = "us-central1-b" }, false},
		{"orchestrator.slurm.login_nodes.machine_type", func(c C) { slurm(c).LoginNodes.MachineType = "n2-standard-8" }, false},
		{"orchestrator.slurm.login_nodes.count", func(c C) { slurm(c).LoginNodes.Count++ }, false},
		{"orchestrator.slurm.node_sets.id", func(c C) {
			slurm(c).NodeSets[1].Id = "spot"
			slurm(c).Partitions[1].NodeSetIds = []string{"spot"}
		}, false},
		{"orchestrator.slurm.node_sets.node_pool_id", func(c C) {
			slurm(c).NodeSets[0].NodePoolId, slurm(c).NodeSets[1].NodePoolId = "gpu-b", "gpu-a"
		}, false},
		{"orchestrator.slurm.node_sets.features", func(c C) { slurm(c).NodeSets[0].Features = []string{"h200", "ib"} }, true},
		{"orchestrator.slurm.partitions.id", func(c C) { slurm(c).Partitions[1].Id = "preempt" }, true},
		{"orchestrator.slurm.partitions.node_set_ids", func(c C) { slurm(c).Partitions[0].NodeSetIds = []string{"a3h", "a3u"} }, true},
		{"orchestrator.slurm.partitions.max_time", func(c C) { slurm(c).Partitions[1].MaxTime = "2-00:00:00" }, true},
		{"orchestrator.slurm.partitions.default", func(c C) {
			slurm(c).Partitions[0].Default, slurm(c).Partitions[2].Default = false, true
		}, true},
		{"orchestrator.slurm.partitions.priority_tier", func(c C) { slurm(c).Partitions[1].PriorityTier = 5 }, true},
		{"orchestrator.slurm.partitions.state", func(c C) { slurm(c).Partitions[0].State = "DOWN" }, true},
		{"orchestrator.slurm.prolog_scripts", func(c C) { slurm(c).PrologScripts = nil }, true},
		{"orchestrator.slurm.epilog_scripts", func(c C) { slurm(c).EpilogScripts = []string{"#!/bin/sh\necho bye\n"} }, true},
		{"storage", func(c C) { c.Storage.Home.CapacityGib *= 2 }, false},
		{"network", func(c C) { c.Network.Mtu = 1460 }, false},

		{"no change at all", func(C) {}, true},
		{"pools reordered", func(c C) {
			c.Compute.NodePools[0], c.Compute.NodePools[2] = c.Compute.NodePools[2], c.Compute.NodePools[0]
		}, true},
		{"a partition added", func(c C) {
			slurm(c).Partitions = append(slurm(c).Partitions, &loomv1.SlurmPartition{Id: "all", NodeSetIds: []string{"a3u", "a3h", "cpu"}})
		}, true},
		{"a partition removed", func(c C) { slurm(c).Partitions = slurm(c).Partitions[:2] }, true},
		{"a pool added", func(c C) {
			c.Compute.NodePools = append(c.Compute.NodePools, &loomv1.NodePool{Id: "l4", MachineType: "g2-standard-48", NodeCount: 2})
		}, false},
		{"a pool removed", func(c C) {
			c.Compute.NodePools = c.Compute.NodePools[:2]
			slurm(c).NodeSets, slurm(c).Partitions = slurm(c).NodeSets[:2], slurm(c).Partitions[:2]
		}, false},
		{"a pool's node set removed (its hosts renamed)", func(c C) {
			slurm(c).NodeSets = slices.Delete(slurm(c).NodeSets, 1, 2)
			slurm(c).Partitions[1].NodeSetIds = []string{"cpu"}
		}, false},
		{"a node count and a partition state together", func(c C) {
			pool(c, 0).NodeCount++
			slurm(c).Partitions[0].State = "DOWN"
		}, false},
	}

	covered := map[string]bool{}
	for _, tc := range cases {
		covered[tc.field] = true
	}
	for _, f := range specFields((&loomv1.Cluster{}).ProtoReflect().Descriptor(), "") {
		if !covered[f] {
			t.Errorf("no case for spec field %s: decide whether changing it moves a node", f)
		}
	}

	for _, tc := range cases {
		t.Run(tc.field, func(t *testing.T) {
			t.Parallel()
			old := stored(t)
			old.Etag = Etag(old)
			next := proto.Clone(old).(*loomv1.Cluster)
			next.Status, next.Etag = nil, ""
			tc.change(next)
			Normalize(next)
			if got := MovesNoNode(old, next); got != tc.want {
				t.Errorf("MovesNoNode = %v, want %v", got, tc.want)
			}
			if got := MovesNoNode(next, old); got != tc.want {
				t.Errorf("MovesNoNode of the change undone = %v, want %v", got, tc.want)
			}
		})
	}
}

// specFields returns the dotted paths of the spec fields of md: output-only
// ones and the name left out, the messages an update compares whole
// (storage, network, a pool's capacity and boot disk) as one field, the
// others' fields (lists of messages included) walked into.
func specFields(md protoreflect.MessageDescriptor, prefix string) []string {
	walk := map[protoreflect.FullName]bool{}
	for _, m := range []proto.Message{&loomv1.ComputeResources{}, &loomv1.NodePool{}, &loomv1.Orchestrator{},
		&loomv1.SlurmOrchestrator{}, &loomv1.LoginNodes{}, &loomv1.SlurmNodeSet{}, &loomv1.SlurmPartition{}} {
		walk[m.ProtoReflect().Descriptor().FullName()] = true
	}
	var out []string
	fields := md.Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		path := prefix + string(fd.Name())
		if prefix == "" && (path == "name" || contains(outputOnlyPaths, path)) {
			continue
		}
		if fd.Message() != nil && !fd.IsMap() && walk[fd.Message().FullName()] {
			out = append(out, specFields(fd.Message(), path+".")...)
			continue
		}
		out = append(out, path)
	}
	return out
}
