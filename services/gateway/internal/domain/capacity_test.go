package domain

import (
	"errors"
	"strings"
	"testing"

	"github.com/loom-ml/loom/libs/errs"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

func capacityPools() []*loomv1.CapacityPool {
	return []*loomv1.CapacityPool{
		{Zone: "us-central1-a", MachineType: "a3-ultragpu-8g", Type: loomv1.CapacitySource_RESERVATION, Reservation: "projects/default/reservations/h200-res", Total: 4, InUse: 2, Free: 2},
		{Zone: "us-central1-a", MachineType: "a3-ultragpu-8g", Type: loomv1.CapacitySource_ON_DEMAND, Total: 16, Free: 16},
		{Zone: "us-central1-b", MachineType: "a3-ultragpu-8g", Type: loomv1.CapacitySource_SPOT, Total: 8, Free: 8},
		{Zone: "us-central1-b", MachineType: "a3-ultragpu-8g", Type: loomv1.CapacitySource_ON_DEMAND, Total: 4, InUse: 4},
		{Zone: "us-central1-a", MachineType: "n2-standard-4", Type: loomv1.CapacitySource_ON_DEMAND, Total: 100, Free: 100},
	}
}

// poolsCluster is a cluster of the given pools, as Normalize leaves it.
func poolsCluster(pools ...*loomv1.NodePool) *loomv1.Cluster {
	return &loomv1.Cluster{Compute: &loomv1.ComputeResources{NodePools: pools}}
}

func resPool(id string, n int32, reservation string) *loomv1.NodePool {
	return &loomv1.NodePool{Id: id, MachineType: "a3-ultragpu-8g", NodeCount: n, Zone: "us-central1-a",
		Capacity: &loomv1.CapacitySource{Type: loomv1.CapacitySource_RESERVATION, Reservation: reservation}}
}

func onDemandPool(id, zone string, n int32) *loomv1.NodePool {
	return &loomv1.NodePool{Id: id, MachineType: "a3-ultragpu-8g", NodeCount: n, Zone: zone,
		Capacity: &loomv1.CapacitySource{Type: loomv1.CapacitySource_ON_DEMAND}}
}

func TestCheckCapacity(t *testing.T) {
	t.Parallel()
	pools := capacityPools()
	err := CheckCapacity(nil, poolsCluster(resPool("gpu", 4, "h200-res")), pools)
	want := "pool gpu needs 4 × a3-ultragpu-8g (RESERVATION h200-res) in us-central1-a: 2 free; " +
		"on-demand a3-ultragpu-8g: 16 free in us-central1-a; spot a3-ultragpu-8g: 8 free in us-central1-b"
	if err == nil || err.Error() != want {
		t.Fatalf("short reservation:\n got %v\nwant %s", err, want)
	}
	if !errors.Is(err, errs.FailedPrecondition) {
		t.Fatalf("%v is not a FailedPrecondition", err)
	}

	for _, tc := range []struct {
		name          string
		current, next *loomv1.Cluster
		want          string // "" when it fits
	}{
		{"fits the reservation (full name)", nil, poolsCluster(resPool("gpu", 2, "projects/default/reservations/h200-res")), ""},
		{"dynamic nodes count", nil, poolsCluster(func() *loomv1.NodePool {
			p := resPool("gpu", 2, "h200-res")
			p.MaxDynamicNodeCount = 1
			return p
		}()), "pool gpu needs 3 × a3-ultragpu-8g (RESERVATION h200-res) in us-central1-a: 2 free"},
		{"pools of one kind add up", nil, poolsCluster(onDemandPool("a", "us-central1-a", 10), onDemandPool("b", "us-central1-a", 7)),
			"pools a, b need 17 × a3-ultragpu-8g (ON_DEMAND) in us-central1-a: 16 free"},
		{"a full pool", nil, poolsCluster(onDemandPool("gpu", "us-central1-b", 1)),
			"pool gpu needs 1 × a3-ultragpu-8g (ON_DEMAND) in us-central1-b: 0 free; reservation h200-res a3-ultragpu-8g: 2 free in us-central1-a"},
		{"unknown reservation", nil, poolsCluster(resPool("gpu", 1, "nope")),
			"pool gpu needs 1 × a3-ultragpu-8g (RESERVATION nope) in us-central1-a: there is no reservation nope"},
		{"reservation elsewhere", nil, poolsCluster(func() *loomv1.NodePool {
			p := resPool("gpu", 1, "h200-res")
			p.Zone = "europe-west4-a"
			return p
		}()), "(RESERVATION h200-res) in europe-west4-a: reservation h200-res holds a3-ultragpu-8g in us-central1-a"},
		{"zone with no capacity", nil, poolsCluster(onDemandPool("gpu", "asia-east1-a", 1)),
			"in asia-east1-a: no on-demand capacity is configured there"},
		{"no machine type is not counted", nil, poolsCluster(&loomv1.NodePool{Id: "gpu", NodeCount: 1000}), ""},
		{"growth within free", poolsCluster(resPool("gpu", 2, "h200-res")), poolsCluster(resPool("gpu", 4, "h200-res")), ""},
		{"growth beyond free", poolsCluster(resPool("gpu", 2, "h200-res")), poolsCluster(resPool("gpu", 5, "h200-res")),
			"pool gpu needs 3 more × a3-ultragpu-8g (RESERVATION h200-res) in us-central1-a: 2 free"},
		{"shrink needs nothing", poolsCluster(resPool("gpu", 9, "h200-res")), poolsCluster(resPool("gpu", 8, "h200-res")), ""},
		{"login nodes count", nil, func() *loomv1.Cluster {
			c := poolsCluster(onDemandPool("gpu", "us-central1-b", 0))
			c.Network = &loomv1.NetworkConfig{Zone: "us-central1-b"}
			c.Orchestrator = &loomv1.Orchestrator{Slurm: &loomv1.SlurmOrchestrator{LoginNodes: &loomv1.LoginNodes{MachineType: "a3-ultragpu-8g", Count: 1}}}
			return c
		}(), "login nodes need 1 × a3-ultragpu-8g (ON_DEMAND) in us-central1-b: 0 free"},
		{"login nodes with a pool of their kind add up", nil, func() *loomv1.Cluster {
			c := poolsCluster(onDemandPool("gpu", "us-central1-a", 15))
			c.Network = &loomv1.NetworkConfig{Zone: "us-central1-a"}
			c.Orchestrator = &loomv1.Orchestrator{Slurm: &loomv1.SlurmOrchestrator{LoginNodes: &loomv1.LoginNodes{MachineType: "a3-ultragpu-8g", Count: 2}}}
			return c
		}(), "pool gpu and login nodes need 17 × a3-ultragpu-8g (ON_DEMAND) in us-central1-a: 16 free"},
		{"login nodes held need nothing more", func() *loomv1.Cluster {
			c := poolsCluster()
			c.Orchestrator = &loomv1.Orchestrator{Slurm: &loomv1.SlurmOrchestrator{LoginNodes: &loomv1.LoginNodes{MachineType: "a3-ultragpu-8g", Count: 1}}}
			c.Network = &loomv1.NetworkConfig{Zone: "us-central1-b"}
			return c
		}(), func() *loomv1.Cluster {
			c := poolsCluster()
			c.Orchestrator = &loomv1.Orchestrator{Slurm: &loomv1.SlurmOrchestrator{LoginNodes: &loomv1.LoginNodes{MachineType: "a3-ultragpu-8g", Count: 1}}}
			c.Network = &loomv1.NetworkConfig{Zone: "us-central1-b"}
			return c
		}(), ""},
		{"a new pool needs all of it", poolsCluster(resPool("gpu", 2, "h200-res")),
			poolsCluster(resPool("gpu", 2, "h200-res"), onDemandPool("more", "us-central1-b", 2)),
			"pool more needs 2 more × a3-ultragpu-8g (ON_DEMAND) in us-central1-b: 0 free"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := CheckCapacity(tc.current, tc.next, pools)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, errs.FailedPrecondition)):
				t.Fatalf("got %v, want a FailedPrecondition containing %q", err, tc.want)
			}
		})
	}
}

func TestFreeForWildcardRules(t *testing.T) {
	t.Parallel()
	od := loomv1.CapacitySource_ON_DEMAND
	pools := []*loomv1.CapacityPool{
		{Zone: "*", MachineType: "*", Type: od, Total: 4096, Free: 4096},
		{Zone: "*", MachineType: "a3-ultragpu-8g", Type: od, Total: 8, Free: 8},
		{Zone: "us-central1-a", MachineType: "a3-highgpu-8g", Type: od, Total: 4096, InUse: 4000, Free: 96},
	}
	cases := []struct {
		zone, mt string
		want     int32
	}{
		{"us-central1-a", "a3-highgpu-8g", 96},    // claimed combination: its own numbers
		{"europe-west4-b", "a3-ultragpu-8g", 8},   // any zone with that machine type
		{"europe-west4-b", "n2-standard-8", 4096}, // */*
	}
	for _, c := range cases {
		got, _ := freeFor(CapacityKey{Zone: c.zone, MachineType: c.mt, Type: od}, pools)
		if got != c.want {
			t.Errorf("freeFor(%s, %s) = %d, want %d", c.zone, c.mt, got, c.want)
		}
	}
	if got, msg := freeFor(CapacityKey{Zone: "z", MachineType: "m", Type: loomv1.CapacitySource_SPOT}, pools); got != 0 || msg == "" {
		t.Errorf("spot with no spot rule: %d %q, want 0 and a reason", got, msg)
	}
}
