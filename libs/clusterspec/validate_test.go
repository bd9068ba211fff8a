package clusterspec

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/errs"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// baseJSON is a valid cluster that uses every section; each validation case
// breaks one thing in a copy of it.
const baseJSON = `{
  "name": "projects/p/clusters/base",
  "labels": {"team": "ml"},
  "compute": {"node_pools": [
    {"id": "gpu-a", "machine_type": "a3-ultragpu-8g", "node_count": 2, "boot_disk": {"type": "hyperdisk-balanced", "size_gb": 300}},
    {"id": "gpu-b", "machine_type": "a3-highgpu-8g", "node_count": 1, "capacity": {"type": "SPOT"}},
    {"id": "cpu", "machine_type": "n2-standard-8", "node_count": 1, "max_dynamic_node_count": 2}
  ]},
  "orchestrator": {"slurm": {
    "login_nodes": {"machine_type": "n2-standard-4", "count": 1},
    "node_sets": [
      {"id": "a3u", "node_pool_id": "gpu-a", "features": ["h200"]},
      {"id": "a3h", "node_pool_id": "gpu-b"},
      {"id": "cpu", "node_pool_id": "cpu"}
    ],
    "partitions": [
      {"id": "train", "node_set_ids": ["a3u"], "default": true, "priority_tier": 1},
      {"id": "spot", "node_set_ids": ["a3h"], "max_time": "1-00:00:00"},
      {"id": "cpu", "node_set_ids": ["cpu"], "max_time": "30"}
    ],
    "prolog_scripts": ["#!/bin/sh\ntrue\n"],
    "epilog_scripts": ["#!/bin/sh\ntrue\n"]
  }},
  "storage": {
    "home": {"tier": "ZONAL", "capacity_gib": 2560},
    "scratch": {"throughput_mbps_per_tib": 500, "capacity_gib": 36000}
  },
  "network": {"name": "net", "mtu": 8896, "zone": "us-central1-a"}
}`

func base(t *testing.T) *loomv1.Cluster {
	t.Helper()
	c, err := ParseJSON([]byte(baseJSON))
	if err != nil {
		t.Fatalf("base: %v", err)
	}
	return c
}

func violations(err error) []string {
	var inv *errs.InvalidError
	if !errors.As(err, &inv) {
		return nil
	}
	out := make([]string, len(inv.Violations))
	for i, v := range inv.Violations {
		out[i] = v.Field + ": " + v.Reason
	}
	return out
}

func TestBaseIsValid(t *testing.T) {
	t.Parallel()
	if err := Validate(base(t)); err != nil {
		t.Fatalf("base cluster: %v", err)
	}
}

// TestValidateRules has one case per rule: the change, and the one violation
// it must cause (field path and reason, exactly).
func TestValidateRules(t *testing.T) {
	t.Parallel()
	type C = *loomv1.Cluster
	pool := func(c C, i int) *loomv1.NodePool { return c.Compute.NodePools[i] }
	slurm := func(c C) *loomv1.SlurmOrchestrator { return c.Orchestrator.Slurm }
	// dropCPU removes the node set and partition over the third pool.
	dropCPU := func(c C) {
		slurm(c).NodeSets = slurm(c).NodeSets[:2]
		slurm(c).Partitions = slurm(c).Partitions[:2]
	}
	cases := []struct {
		rule   string
		change func(C)
		want   string
	}{
		{"cluster name", func(c C) { c.Name = "projects/p/clusters/Bad_Name" },
			`name: cluster id "Bad_Name" must be 1 to 63 lower-case letters, digits and '-', starting with a letter and not ending with '-'`},
		{"cluster full name shape", func(c C) { c.Name = "projects/p/things/x" },
			`name: "projects/p/things/x" is neither a cluster id nor projects/{project}/clusters/{cluster}`},
		{"label key", func(c C) { c.Labels["bad key"] = "x" },
			`labels: label key "bad key" must be 1 to 63 letters, digits, '_', '.', '/' or '-', starting and ending with a letter or digit`},
		{"label value", func(c C) { c.Labels["team"] = strings.Repeat("x", 64) },
			`labels: label "team": value longer than 63 characters`},
		{"label value escape", func(c C) { c.Labels["team"] = "ml\x1b[2J" },
			`labels: label "team": value holds the control character U+001B`},
		{"no pools", func(c C) { c.Compute.NodePools = nil; slurm(c).NodeSets = nil; slurm(c).Partitions = nil },
			`compute.node_pools: at least one node pool is required`},
		{"pool id required", func(c C) { pool(c, 2).Id = ""; dropCPU(c) },
			`compute.node_pools[2].id: required`},
		{"pool id syntax", func(c C) { pool(c, 2).Id = "CPU_1"; slurm(c).NodeSets[2].NodePoolId = "CPU_1" },
			`compute.node_pools[2].id: "CPU_1" must be lower-case letters, digits and '-', starting with a letter and not ending with '-' (it prefixes hostnames)`},
		{"pool id length", func(c C) { id := strings.Repeat("a", 41); pool(c, 2).Id = id; slurm(c).NodeSets[2].NodePoolId = id },
			`compute.node_pools[2].id: "` + strings.Repeat("a", 41) + `" is longer than 40 characters (it prefixes hostnames)`},
		{"pool id like a hostname", func(c C) { pool(c, 2).Id = "cpu-0001"; slurm(c).NodeSets[2].NodePoolId = "cpu-0001" },
			`compute.node_pools[2].id: "cpu-0001" ends like a hostname ("-" and 4 or more digits) and would collide with node names`},
		{"pool id reserved", func(c C) { pool(c, 2).Id = "all"; slurm(c).NodeSets[2].NodePoolId = "all" },
			`compute.node_pools[2].id: "all" is reserved in Slurm (NodeName=DEFAULT sets defaults; Nodes=ALL means every node)`},
		{"duplicate pool id", func(c C) { pool(c, 2).Id = "gpu-b"; dropCPU(c) },
			`compute.node_pools[2].id: duplicate id "gpu-b" (also compute.node_pools[1])`},
		{"unknown machine type", func(c C) { pool(c, 0).MachineType = "a3-ultragpu-4g" },
			`compute.node_pools[0].machine_type: unknown machine type "a3-ultragpu-4g" (did you mean a2-ultragpu-4g, a3-ultragpu-8g, a2-ultragpu-1g?)`},
		{"unknown machine type, nothing close", func(c C) { pool(c, 0).MachineType = "quantum-9000" },
			`compute.node_pools[0].machine_type: unknown machine type "quantum-9000" (see the machine catalog in docs/clusters.md)`},
		{"machine type required", func(c C) { pool(c, 2).MachineType = "" },
			`compute.node_pools[2].machine_type: required`},
		{"accelerator count", func(c C) { pool(c, 0).AcceleratorCount = 4 },
			`compute.node_pools[0].accelerator_count: a3-ultragpu-8g has 8 GPUs, not 4`},
		{"accelerator type", func(c C) { pool(c, 0).AcceleratorType = "nvidia-h100-80gb" },
			`compute.node_pools[0].accelerator_type: a3-ultragpu-8g has nvidia-h200-141gb GPUs, not nvidia-h100-80gb`},
		{"GPUs on a CPU machine", func(c C) { pool(c, 2).AcceleratorCount = 2 },
			`compute.node_pools[2].accelerator_count: n2-standard-8 has no GPUs, not 2`},
		{"GPU type on a CPU machine", func(c C) { pool(c, 2).AcceleratorType = "nvidia-l4" },
			`compute.node_pools[2].accelerator_type: n2-standard-8 has no GPUs, not nvidia-l4`},
		{"zero nodes", func(c C) { pool(c, 1).NodeCount = 0 },
			`compute.node_pools[1].node_count: must be at least 1, got 0`},
		{"negative nodes", func(c C) { pool(c, 1).NodeCount = -3 },
			`compute.node_pools[1].node_count: must be at least 1, got -3`},
		{"too many nodes", func(c C) { pool(c, 1).NodeCount = 10001 },
			`compute.node_pools[1].node_count: must be at most 10000, got 10001`},
		{"too many pools", func(c C) {
			for i := len(c.Compute.NodePools); i <= MaxNodePools; i++ {
				c.Compute.NodePools = append(c.Compute.NodePools, &loomv1.NodePool{Id: fmt.Sprintf("extra-%c%c", 'a'+i/26, 'a'+i%26), MachineType: "n2-standard-8", NodeCount: 1})
			}
		}, `compute.node_pools: at most 32 node pools, got 33`},
		{"too many nodes in the cluster", func(c C) { pool(c, 0).NodeCount = 10000; pool(c, 1).NodeCount = 9999 },
			`compute.node_pools: at most 20000 nodes in a cluster (node_count plus max_dynamic_node_count over every pool), got 20002`},
		{"too many node sets", func(c C) {
			for i := len(slurm(c).NodeSets); i <= MaxNodePools; i++ {
				slurm(c).NodeSets = append(slurm(c).NodeSets, &loomv1.SlurmNodeSet{Id: fmt.Sprintf("ns%d", i), NodePoolId: "cpu"})
			}
		}, `orchestrator.slurm.node_sets: at most 32 node sets (one per node pool), got 33`},
		{"too many features", func(c C) { slurm(c).NodeSets[0].Features = slices.Repeat([]string{"h200"}, MaxFeatures+1) },
			`orchestrator.slurm.node_sets[0].features: at most 32 features, got 33`},
		{"too many partitions", func(c C) {
			for i := len(slurm(c).Partitions); i <= MaxPartitions; i++ {
				slurm(c).Partitions = append(slurm(c).Partitions, &loomv1.SlurmPartition{Id: fmt.Sprintf("p%d", i), NodeSetIds: []string{"cpu"}})
			}
		}, `orchestrator.slurm.partitions: at most 64 partitions, got 65`},
		{"too many node sets in a partition", func(c C) { slurm(c).Partitions[0].NodeSetIds = slices.Repeat([]string{"a3u"}, MaxNodePools+1) },
			`orchestrator.slurm.partitions[0].node_set_ids: at most 32 node sets, got 33`},
		{"too many labels", func(c C) {
			for i := len(c.Labels); i <= MaxLabels; i++ {
				c.Labels[fmt.Sprintf("k%d", i)] = "v"
			}
		}, `labels: at most 64 labels, got 65`},
		{"too many pool labels", func(c C) {
			pool(c, 1).Labels = map[string]string{}
			for i := 0; i <= MaxLabels; i++ {
				pool(c, 1).Labels[fmt.Sprintf("k%d", i)] = "v"
			}
		}, `compute.node_pools[1].labels: at most 64 labels, got 65`},
		{"too many prologs", func(c C) { slurm(c).PrologScripts = slices.Repeat([]string{"true"}, MaxScripts+1) },
			`orchestrator.slurm.prolog_scripts: at most 16 scripts, got 17`},
		{"too many epilogs", func(c C) { slurm(c).EpilogScripts = slices.Repeat([]string{"true"}, MaxScripts+1) },
			`orchestrator.slurm.epilog_scripts: at most 16 scripts, got 17`},
		{"negative dynamic nodes", func(c C) { pool(c, 2).MaxDynamicNodeCount = -1 },
			`compute.node_pools[2].max_dynamic_node_count: must not be negative, got -1`},
		{"too many dynamic nodes", func(c C) { pool(c, 2).MaxDynamicNodeCount = 20000 },
			`compute.node_pools[2].max_dynamic_node_count: must be at most 10000, got 20000`},
		{"reservation without a name", func(c C) { pool(c, 0).Capacity = &loomv1.CapacitySource{Type: loomv1.CapacitySource_RESERVATION} },
			`compute.node_pools[0].capacity.reservation: required for RESERVATION capacity: the reservation to draw from`},
		{"reservation name on spot", func(c C) { pool(c, 1).Capacity.Reservation = "r1" },
			`compute.node_pools[1].capacity.reservation: only RESERVATION capacity names a reservation; this pool is SPOT`},
		{"reservation name syntax", func(c C) {
			pool(c, 0).Capacity = &loomv1.CapacitySource{Type: loomv1.CapacitySource_RESERVATION, Reservation: "R 1"}
		}, `compute.node_pools[0].capacity.reservation: "R 1" is neither a reservation id nor projects/{project}/reservations/{reservation}`},
		{"another project's reservation", func(c C) {
			c.Name = "projects/p/clusters/demo"
			pool(c, 0).Capacity = &loomv1.CapacitySource{Type: loomv1.CapacitySource_RESERVATION, Reservation: "projects/victim/reservations/r1"}
		}, `compute.node_pools[0].capacity.reservation: projects/victim/reservations/r1 is project victim's reservation; a cluster of project p draws only from its own project's (name it by id: r1)`},
		{"unknown capacity type", func(c C) { pool(c, 1).Capacity.Type = 42 },
			`compute.node_pools[1].capacity.type: unknown capacity type 42 (RESERVATION, ON_DEMAND, SPOT or FLEX_START)`},
		{"unknown boot disk type", func(c C) { pool(c, 2).BootDisk = &loomv1.BootDisk{Type: "floppy"} },
			`compute.node_pools[2].boot_disk.type: unknown boot disk type "floppy" (pd-standard, pd-balanced, pd-ssd, hyperdisk-balanced)`},
		{"boot disk the machine cannot use", func(c C) { pool(c, 0).BootDisk.Type = "pd-balanced" },
			`compute.node_pools[0].boot_disk.type: a3-ultragpu-8g cannot boot from pd-balanced (it supports hyperdisk-balanced)`},
		{"boot disk too small", func(c C) { pool(c, 0).BootDisk.SizeGb = 9 },
			`compute.node_pools[0].boot_disk.size_gb: must be 10 to 65536 GB, not 9`},
		{"boot disk too large", func(c C) { pool(c, 0).BootDisk.SizeGb = 65537 },
			`compute.node_pools[0].boot_disk.size_gb: must be 10 to 65536 GB, not 65537`},
		{"pool zone", func(c C) { pool(c, 0).Zone = "Zone A" },
			`compute.node_pools[0].zone: "Zone A" is not a zone name (e.g. us-central1-a)`},
		{"pool label", func(c C) { pool(c, 0).Labels = map[string]string{"-x": "y"} },
			`compute.node_pools[0].labels: label key "-x" must be 1 to 63 letters, digits, '_', '.', '/' or '-', starting and ending with a letter or digit`},
		{"login machine type", func(c C) { slurm(c).LoginNodes.MachineType = "n2-standard-3" },
			`orchestrator.slurm.login_nodes.machine_type: unknown machine type "n2-standard-3" (did you mean n2-standard-2, n2-standard-4, n2-standard-8?)`},
		{"negative login count", func(c C) { slurm(c).LoginNodes.Count = -1 },
			`orchestrator.slurm.login_nodes.count: must not be negative, got -1`},
		{"too many login nodes", func(c C) { slurm(c).LoginNodes.Count = 101 },
			`orchestrator.slurm.login_nodes.count: must be at most 100, got 101`},
		{"node set id required", func(c C) { slurm(c).NodeSets[1].Id = ""; slurm(c).Partitions[1].NodeSetIds = []string{"a3u"} },
			`orchestrator.slurm.node_sets[1].id: required`},
		{"node set id syntax", func(c C) { slurm(c).NodeSets[1].Id = "A3H"; slurm(c).Partitions[1].NodeSetIds = []string{"A3H"} },
			`orchestrator.slurm.node_sets[1].id: "A3H" must be lower-case letters, digits and '-', starting with a letter and not ending with '-' (it prefixes hostnames)`},
		{"node set id reserved", func(c C) {
			slurm(c).NodeSets[1].Id = "default"
			slurm(c).Partitions[1].NodeSetIds = []string{"default"}
		},
			`orchestrator.slurm.node_sets[1].id: "default" is reserved in Slurm (NodeName=DEFAULT sets defaults; Nodes=ALL means every node)`},
		{"duplicate node set id", func(c C) { slurm(c).NodeSets[1].Id = "a3u"; slurm(c).Partitions[1].NodeSetIds = []string{"a3u"} },
			`orchestrator.slurm.node_sets[1].id: duplicate id "a3u" (also orchestrator.slurm.node_sets[0])`},
		{"node set pool required", func(c C) { slurm(c).NodeSets[1].NodePoolId = "" },
			`orchestrator.slurm.node_sets[1].node_pool_id: required`},
		{"node set over a missing pool", func(c C) { slurm(c).NodeSets[1].NodePoolId = "gpu-c" },
			`orchestrator.slurm.node_sets[1].node_pool_id: no node pool "gpu-c"`},
		{"two node sets over one pool", func(c C) { slurm(c).NodeSets[1].NodePoolId = "gpu-a" },
			`orchestrator.slurm.node_sets[1].node_pool_id: node pool "gpu-a" is already in node set "a3u" (orchestrator.slurm.node_sets[0]); a pool belongs to at most one node set`},
		{"node set feature", func(c C) { slurm(c).NodeSets[0].Features = []string{"h200", "a&b"} },
			`orchestrator.slurm.node_sets[0].features[1]: "a&b" must be 1 to 63 letters, digits, '_', '.' or '-' (Slurm constraint syntax uses the rest)`},
		{"uncovered pool named like a node set", func(c C) {
			slurm(c).NodeSets = slurm(c).NodeSets[:2]
			slurm(c).NodeSets[1].Id = "cpu"
			slurm(c).Partitions = slurm(c).Partitions[:1]
		}, `compute.node_pools[2].id: "cpu" is also the id of node set "cpu" over another pool; their nodes would share hostnames`},
		{"partition id required", func(c C) { slurm(c).Partitions[2].Id = "" },
			`orchestrator.slurm.partitions[2].id: required`},
		{"partition id with a space", func(c C) { slurm(c).Partitions[2].Id = "cpu only" },
			`orchestrator.slurm.partitions[2].id: "cpu only" must be 1 to 63 lower-case letters, digits and '-', starting with a letter and not ending with '-' (no spaces, ',' or '=', which break slurm.conf and -p lists)`},
		{"partition id too long", func(c C) { slurm(c).Partitions[2].Id = strings.Repeat("p", 64) },
			`orchestrator.slurm.partitions[2].id: "` + strings.Repeat("p", 64) + `" must be 1 to 63 lower-case letters, digits and '-', starting with a letter and not ending with '-' (no spaces, ',' or '=', which break slurm.conf and -p lists)`},
		{"partition id reserved", func(c C) { slurm(c).Partitions[2].Id = "default" },
			`orchestrator.slurm.partitions[2].id: "default" is reserved in Slurm (PartitionName=DEFAULT sets defaults for other partitions)`},
		{"duplicate partition id", func(c C) { slurm(c).Partitions[2].Id = "spot" },
			`orchestrator.slurm.partitions[2].id: duplicate id "spot" (also orchestrator.slurm.partitions[1])`},
		{"partition without node sets", func(c C) { slurm(c).Partitions[2].NodeSetIds = nil },
			`orchestrator.slurm.partitions[2].node_set_ids: at least one node set is required`},
		{"partition over a missing node set", func(c C) { slurm(c).Partitions[1].NodeSetIds = []string{"gpu-b"} },
			`orchestrator.slurm.partitions[1].node_set_ids[0]: no node set "gpu-b"`},
		{"node set listed twice", func(c C) { slurm(c).Partitions[1].NodeSetIds = []string{"a3h", "a3h"} },
			`orchestrator.slurm.partitions[1].node_set_ids[1]: node set "a3h" is listed twice`},
		{"max_time syntax", func(c C) { slurm(c).Partitions[1].MaxTime = "1 day" },
			`orchestrator.slurm.partitions[1].max_time: "1 day" is not a Slurm time limit (UNLIMITED, MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS): minutes "1 day" is not a number`},
		{"max_time range", func(c C) { slurm(c).Partitions[1].MaxTime = "1:90:00" },
			`orchestrator.slurm.partitions[1].max_time: "1:90:00" is not a Slurm time limit (UNLIMITED, MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS): minutes 90 must be below 60`},
		{"two default partitions", func(c C) { slurm(c).Partitions[2].Default = true },
			`orchestrator.slurm.partitions[2].default: only one partition may be the default; partitions[0] ("train") already is`},
		{"priority tier", func(c C) { slurm(c).Partitions[0].PriorityTier = 70000 },
			`orchestrator.slurm.partitions[0].priority_tier: must be 0 to 65533 (Slurm's PriorityTier), not 70000`},
		{"empty prolog", func(c C) { slurm(c).PrologScripts = append(slurm(c).PrologScripts, "  \n") },
			`orchestrator.slurm.prolog_scripts[1]: empty script`},
		{"empty epilog", func(c C) { slurm(c).EpilogScripts = []string{""} },
			`orchestrator.slurm.epilog_scripts[0]: empty script`},
		{"huge epilog", func(c C) { slurm(c).EpilogScripts = []string{strings.Repeat("#", 65537)} },
			`orchestrator.slurm.epilog_scripts[0]: script is 65537 bytes; at most 65536`},
		{"MTU too small", func(c C) { c.Network.Mtu = 1299 },
			`network.mtu: must be 1300 to 8896 (jumbo frames above 1500), not 1299`},
		{"MTU too large", func(c C) { c.Network.Mtu = 9000 },
			`network.mtu: must be 1300 to 8896 (jumbo frames above 1500), not 9000`},
		{"network name", func(c C) { c.Network.Name = "My Net" },
			`network.name: "My Net" must be 1 to 63 lower-case letters, digits and '-', starting with a letter`},
		{"network zone", func(c C) {
			c.Network.Zone = "us_central1"
			for _, p := range c.Compute.NodePools {
				p.Zone = "us-central1-a"
			}
		},
			`network.zone: "us_central1" is not a zone name (e.g. us-central1-a)`},
		{"home tier", func(c C) { c.Storage.Home.Tier = "PREMIUM" },
			`storage.home.tier: unknown tier "PREMIUM" (BASIC_HDD, BASIC_SSD, ZONAL or REGIONAL)`},
		{"home size off the step", func(c C) { c.Storage.Home.CapacityGib = 2000 },
			`storage.home.capacity_gib: ZONAL takes 1024 to 102400 GiB in steps of 256, not 2000`},
		{"home size below the tier", func(c C) { c.Storage.Home = &loomv1.SharedHome{Tier: "BASIC_SSD", CapacityGib: 2048} },
			`storage.home.capacity_gib: BASIC_SSD takes 2560 to 65434 GiB, not 2048`},
		{"home mount path", func(c C) { c.Storage.Home.MountPath = "home" },
			`storage.home.mount_path: "home" must be a clean absolute path`},
		{"home mount over a system directory", func(c C) { c.Storage.Home.MountPath = "/usr/home" },
			`storage.home.mount_path: "/usr/home" is a system directory`},
		{"scratch mount over /", func(c C) { c.Storage.Scratch.MountPath = "/" },
			`storage.scratch.mount_path: cannot mount over /`},
		{"scratch mount with a space", func(c C) { c.Storage.Scratch.MountPath = "/my scratch" },
			`storage.scratch.mount_path: "/my scratch" holds a space, ',', ':' or '\', which mount tables cannot carry`},
		{"scratch inside home", func(c C) { c.Storage.Scratch.MountPath = "/home/scratch" },
			`storage.scratch.mount_path: "/home/scratch" overlaps the home mount path "/home"`},
		{"scratch tier", func(c C) { c.Storage.Scratch.ThroughputMbpsPerTib = 300 },
			`storage.scratch.throughput_mbps_per_tib: must be 125, 250, 500 or 1000 (MB/s per TiB), not 300`},
		{"scratch size off the step", func(c C) { c.Storage.Scratch.CapacityGib = 20000 },
			`storage.scratch.capacity_gib: the 500 MB/s/TiB tier takes 18000 to 7632000 GiB in steps of 18000, not 20000`},
		{"scratch size above the maximum", func(c C) { c.Storage.Scratch.CapacityGib = 7632000 + 18000 },
			`storage.scratch.capacity_gib: the 500 MB/s/TiB tier takes 18000 to 7632000 GiB in steps of 18000, not 7650000`},
	}
	for _, tc := range cases {
		t.Run(tc.rule, func(t *testing.T) {
			t.Parallel()
			c := base(t)
			tc.change(c)
			before := proto.Clone(c)
			got := violations(Validate(c))
			if !slices.Equal(got, []string{tc.want}) {
				t.Errorf("violations:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), tc.want)
			}
			if !proto.Equal(c, before) {
				t.Error("Validate changed its argument")
			}
		})
	}
}

// TestValidateReportsEverything checks that all problems come back in one error.
func TestValidateReportsEverything(t *testing.T) {
	t.Parallel()
	c := base(t)
	c.Compute.NodePools[0].NodeCount = 0
	c.Compute.NodePools[1].MachineType = "nope"
	c.Network.Mtu = 100
	c.Orchestrator.Slurm.Partitions[1].NodeSetIds = []string{"gpu-b"}
	err := Validate(c)
	var inv *errs.InvalidError
	if !errors.As(err, &inv) {
		t.Fatalf("Validate = %v, want *errs.InvalidError", err)
	}
	want := []string{
		"network.mtu",
		"compute.node_pools[0].node_count",
		"compute.node_pools[1].machine_type",
		"orchestrator.slurm.partitions[1].node_set_ids[0]",
	}
	var fields []string
	for _, v := range inv.Violations {
		fields = append(fields, v.Field)
	}
	if !slices.Equal(fields, want) {
		t.Fatalf("fields = %q, want %q", fields, want)
	}
	if Validate(nil) == nil {
		t.Fatal("Validate(nil) = nil")
	}
}

// TestValidateThousandsOfPools is the request: 2,000 pools of one
// node each (which once started 2,000 agent processes on one machine). It is
// refused with one violation naming the field and the limit, not 2,000 lines
// of per-pool findings.
func TestValidateThousandsOfPools(t *testing.T) {
	t.Parallel()
	c := &loomv1.Cluster{Name: "projects/p/clusters/many", Compute: &loomv1.ComputeResources{}}
	for i := range 2000 {
		c.Compute.NodePools = append(c.Compute.NodePools, &loomv1.NodePool{Id: fmt.Sprintf("p%d", i), MachineType: "n2-standard-2", NodeCount: 1})
	}
	got := violations(Validate(c))
	want := []string{"compute.node_pools: at most 32 node pools, got 2000"}
	if !slices.Equal(got, want) {
		t.Fatalf("violations = %q, want %q", got, want)
	}
	// At the limit the same shape is valid.
	c.Compute.NodePools = c.Compute.NodePools[:MaxNodePools]
	if err := Validate(c); err != nil {
		t.Fatalf("%d pools: %v", MaxNodePools, err)
	}
}

// TestValidateGeneratedLayout: a pool with a bad id is reported once, on the
// pool, not again on the node set Normalize would derive from it.
func TestValidateGeneratedLayout(t *testing.T) {
	t.Parallel()
	c := &loomv1.Cluster{Compute: &loomv1.ComputeResources{NodePools: []*loomv1.NodePool{
		{Id: "GPU", MachineType: "a3-highgpu-8g", NodeCount: 1},
	}}}
	got := violations(Validate(c))
	want := []string{`compute.node_pools[0].id: "GPU" must be lower-case letters, digits and '-', starting with a letter and not ending with '-' (it prefixes hostnames)`}
	if !slices.Equal(got, want) {
		t.Fatalf("violations = %q, want %q", got, want)
	}
}

func examples(t testing.TB) map[string][]byte {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "..", "examples", "clusters", "*.json"))
	if err != nil || len(files) < 4 {
		t.Fatalf("examples: %v (%d files)", err, len(files))
	}
	out := map[string][]byte{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out[filepath.Base(f)] = b
	}
	return out
}

func TestExamplesValidate(t *testing.T) {
	t.Parallel()
	for name, data := range examples(t) {
		c, err := ParseJSON(data)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		Normalize(c)
		if err := Validate(c); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if ClusterID(c) == "" {
			t.Errorf("%s: no name", name)
		}
	}
}
