package clusterspec

import (
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

func TestNormalizeDefaults(t *testing.T) {
	t.Parallel()
	c, err := ParseJSON([]byte(`{
	  "compute": {"node_pools": [
	    {"id": "gpu", "machine_type": "a3-ultragpu-8g", "node_count": 2},
	    {"id": "res", "machine_type": "a2-highgpu-1g", "node_count": 1, "capacity": {"reservation": "r1"}},
	    {"id": "cpu", "machine_type": "n2-standard-8", "node_count": 1, "zone": "europe-west4-b"}
	  ]},
	  "orchestrator": {"slurm": {"login_nodes": {}}},
	  "storage": {"home": {}, "scratch": {"throughput_mbps_per_tib": 250}}
	}`))
	if err != nil {
		t.Fatal(err)
	}
	Normalize(c)
	want, err := ParseJSON([]byte(`{
	  "compute": {"node_pools": [
	    {"id": "gpu", "machine_type": "a3-ultragpu-8g", "node_count": 2,
	     "accelerator_type": "nvidia-h200-141gb", "accelerator_count": 8,
	     "capacity": {"type": "ON_DEMAND"}, "zone": "us-central1-a",
	     "boot_disk": {"type": "hyperdisk-balanced", "size_gb": 200}},
	    {"id": "res", "machine_type": "a2-highgpu-1g", "node_count": 1,
	     "accelerator_type": "nvidia-tesla-a100", "accelerator_count": 1,
	     "capacity": {"type": "RESERVATION", "reservation": "r1"}, "zone": "us-central1-a",
	     "boot_disk": {"type": "pd-balanced", "size_gb": 200}},
	    {"id": "cpu", "machine_type": "n2-standard-8", "node_count": 1,
	     "capacity": {"type": "ON_DEMAND"}, "zone": "europe-west4-b",
	     "boot_disk": {"type": "pd-balanced", "size_gb": 200}}
	  ]},
	  "orchestrator": {"slurm": {
	    "login_nodes": {"machine_type": "n2-standard-4", "count": 1},
	    "node_sets": [
	      {"id": "gpu", "node_pool_id": "gpu"},
	      {"id": "res", "node_pool_id": "res"},
	      {"id": "cpu", "node_pool_id": "cpu"}
	    ],
	    "partitions": [{"id": "all", "node_set_ids": ["gpu", "res", "cpu"], "max_time": "UNLIMITED", "default": true}]
	  }},
	  "storage": {
	    "home": {"tier": "ZONAL", "capacity_gib": 1024, "mount_path": "/home"},
	    "scratch": {"throughput_mbps_per_tib": 250, "capacity_gib": 36000, "mount_path": "/scratch"}
	  },
	  "network": {"name": "default", "mtu": 8896, "zone": "us-central1-a"}
	}`))
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(c, want) {
		t.Fatalf("Normalize gave\n%s\nwant\n%s", protojson.Format(c), protojson.Format(want))
	}
	if err := Validate(c); err != nil {
		t.Fatalf("normalized cluster does not validate: %v", err)
	}
}

// TestNormalizePartialSlurm: node sets given without partitions get partition
// "all"; partitions given without a default get the first one as default.
func TestNormalizePartialSlurm(t *testing.T) {
	t.Parallel()
	c := &loomv1.Cluster{
		Compute: &loomv1.ComputeResources{NodePools: []*loomv1.NodePool{
			{Id: "a", MachineType: "n2-standard-2", NodeCount: 1},
			{Id: "b", MachineType: "n2-standard-2", NodeCount: 1},
		}},
		Orchestrator: &loomv1.Orchestrator{Slurm: &loomv1.SlurmOrchestrator{
			NodeSets: []*loomv1.SlurmNodeSet{{Id: "x", NodePoolId: "b"}},
		}},
	}
	Normalize(c)
	s := c.Orchestrator.Slurm
	if len(s.NodeSets) != 2 || s.NodeSets[1].Id != "a" || s.NodeSets[1].NodePoolId != "a" {
		t.Fatalf("node sets = %v, want x then a generated one for pool a", s.NodeSets)
	}
	if len(s.Partitions) != 1 || s.Partitions[0].Id != "all" || !s.Partitions[0].Default ||
		len(s.Partitions[0].NodeSetIds) != 2 {
		t.Fatalf("partitions = %v, want one default \"all\" over both node sets", s.Partitions)
	}
	if HostPrefix(c, "b") != "x" || HostPrefix(c, "a") != "a" {
		t.Fatalf("host prefixes = %s, %s", HostPrefix(c, "b"), HostPrefix(c, "a"))
	}

	c.Orchestrator.Slurm.Partitions = []*loomv1.SlurmPartition{
		{Id: "p1", NodeSetIds: []string{"x"}, MaxTime: "10"},
		{Id: "p2", NodeSetIds: []string{"a"}},
	}
	Normalize(c)
	p := c.Orchestrator.Slurm.Partitions
	if !p[0].Default || p[1].Default || p[0].MaxTime != "10" || p[1].MaxTime != Unlimited {
		t.Fatalf("partitions = %v, want p1 default, p2 UNLIMITED", p)
	}
}

// TestNormalizeIdempotent: a second Normalize changes nothing, for every
// example and for degenerate inputs.
func TestNormalizeIdempotent(t *testing.T) {
	t.Parallel()
	inputs := map[string]*loomv1.Cluster{
		"empty":    {},
		"nil pool": {Compute: &loomv1.ComputeResources{NodePools: []*loomv1.NodePool{nil}}},
		"unknown machine": {Compute: &loomv1.ComputeResources{NodePools: []*loomv1.NodePool{
			{Id: "x", MachineType: "nope"}}}},
		"nil node set and partition": {Orchestrator: &loomv1.Orchestrator{Slurm: &loomv1.SlurmOrchestrator{
			NodeSets: []*loomv1.SlurmNodeSet{nil}, Partitions: []*loomv1.SlurmPartition{nil}}}},
	}
	for name, data := range examples(t) {
		c, err := ParseJSON(data)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		inputs[name] = c
	}
	for name, c := range inputs {
		Normalize(c)
		once := proto.Clone(c)
		Normalize(c)
		if !proto.Equal(once, c) {
			t.Errorf("%s: second Normalize changed\n%s\nto\n%s", name, protojson.Format(once), protojson.Format(c))
		}
	}
	Normalize(nil) // must not panic
}

func TestLoginZone(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		c    *loomv1.Cluster
		want string
	}{
		{"the network's", &loomv1.Cluster{Network: &loomv1.NetworkConfig{Zone: "europe-west4-a"},
			Compute: &loomv1.ComputeResources{NodePools: []*loomv1.NodePool{{Zone: "us-east5-b"}}}}, "europe-west4-a"},
		{"else the first pool's that names one", &loomv1.Cluster{
			Compute: &loomv1.ComputeResources{NodePools: []*loomv1.NodePool{{}, {Zone: "us-east5-b"}}}}, "us-east5-b"},
		{"else the default", &loomv1.Cluster{}, DefaultZone},
	} {
		if got := LoginZone(tc.c); got != tc.want {
			t.Errorf("%s: LoginZone = %q, want %q", tc.name, got, tc.want)
		}
	}
}
