// Package clusterspec is the one place that knows what a cluster spec
// (loom.v1.Cluster) may say: the machine catalog, the storage tiers, the
// defaults (Normalize), the rules (Validate, ValidateUpdate), the node naming
// scheme and the JSON file format (ParseJSON). It is pure: nothing here does
// I/O or asks another service (capacity is the provisioner's to check).
package clusterspec

import (
	"github.com/loom-ml/loom/libs/slurmspec"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// Defaults filled by Normalize.
const (
	// DefaultZone is network.zone when none is given; node pools inherit the network's zone.
	DefaultZone = "us-central1-a"
	// DefaultNetworkName is network.name when none is given.
	DefaultNetworkName = "default"
	// DefaultMTU is network.mtu when 0: jumbo frames, as GPU clusters use.
	DefaultMTU = 8896
	// MinMTU and MaxMTU bound network.mtu.
	MinMTU = 1300
	MaxMTU = 8896
	// DefaultBootDiskType is a pool's boot disk type when none is given and the
	// machine type supports it; otherwise the machine type's first supported type.
	DefaultBootDiskType = "pd-balanced"
	// DefaultBootDiskSizeGB is a pool's boot disk size when 0.
	DefaultBootDiskSizeGB = 200
	// DefaultLoginMachineType is orchestrator.slurm.login_nodes.machine_type when empty.
	DefaultLoginMachineType = "n2-standard-4"
	// DefaultPartition is the id of the partition Normalize creates when the
	// spec names none: every node set, the default partition, no time limit.
	DefaultPartition = "all"
)

// Normalize fills the defaults of c in place, so that what is stored and shown
// is the whole effective spec. It is idempotent, never fails, and leaves
// anything already set alone (Validate judges it):
//   - network: created when absent; mtu 8896, zone DefaultZone, name "default" when empty;
//   - each node pool: accelerator_type and accelerator_count from the catalog
//     when empty/0 (known machine types only); capacity ON_DEMAND when
//     unspecified (RESERVATION when a reservation is named); zone = network.zone;
//     boot disk pd-balanced (or the machine type's own first type) of 200 GB;
//   - orchestrator.slurm: created when absent. With no partitions, each pool no
//     node set covers gets a node set of the same id, and one partition "all"
//     over every node set is made the default. With partitions but no default
//     one, the first becomes the default (Slurm would otherwise refuse jobs
//     that name no partition). Empty max_time → "UNLIMITED". Present login
//     nodes get machine type n2-standard-4 and count 1 when unset;
//   - storage sections that are present: home tier ZONAL, scratch 1000 MB/s/TiB,
//     capacity the tier's minimum, mount paths /home and /scratch.
func Normalize(c *loomv1.Cluster) {
	if c == nil {
		return
	}
	if c.Network == nil {
		c.Network = &loomv1.NetworkConfig{}
	}
	n := c.Network
	if n.Mtu == 0 {
		n.Mtu = DefaultMTU
	}
	if n.Zone == "" {
		n.Zone = DefaultZone
	}
	if n.Name == "" {
		n.Name = DefaultNetworkName
	}

	if c.Compute == nil {
		c.Compute = &loomv1.ComputeResources{}
	}
	for i, p := range c.Compute.NodePools {
		if p == nil {
			p = &loomv1.NodePool{}
			c.Compute.NodePools[i] = p
		}
		normalizePool(p, n.Zone)
	}

	if c.Orchestrator == nil {
		c.Orchestrator = &loomv1.Orchestrator{}
	}
	if c.Orchestrator.Slurm == nil {
		c.Orchestrator.Slurm = &loomv1.SlurmOrchestrator{}
	}
	normalizeSlurm(c.Orchestrator.Slurm, c.Compute.NodePools)

	if s := c.Storage; s != nil {
		if h := s.Home; h != nil {
			if h.Tier == "" {
				h.Tier = DefaultHomeTier
			}
			if t, ok := Home(h.Tier); ok && h.CapacityGib == 0 {
				h.CapacityGib = t.MinGiB
			}
			if h.MountPath == "" {
				h.MountPath = DefaultHomeMountPath
			}
		}
		if sc := s.Scratch; sc != nil {
			if sc.ThroughputMbpsPerTib == 0 {
				sc.ThroughputMbpsPerTib = DefaultScratchThroughput
			}
			if t, ok := Scratch(sc.ThroughputMbpsPerTib); ok && sc.CapacityGib == 0 {
				sc.CapacityGib = t.MinGiB
			}
			if sc.MountPath == "" {
				sc.MountPath = DefaultScratchMountPath
			}
		}
	}
}

func normalizePool(p *loomv1.NodePool, zone string) {
	m, known := Machine(p.MachineType)
	if known {
		if p.AcceleratorType == "" {
			p.AcceleratorType = m.AcceleratorType
		}
		if p.AcceleratorCount == 0 {
			p.AcceleratorCount = m.AcceleratorCount
		}
	}
	if p.Capacity == nil {
		p.Capacity = &loomv1.CapacitySource{}
	}
	if p.Capacity.Type == loomv1.CapacitySource_TYPE_UNSPECIFIED {
		if p.Capacity.Reservation != "" {
			p.Capacity.Type = loomv1.CapacitySource_RESERVATION
		} else {
			p.Capacity.Type = loomv1.CapacitySource_ON_DEMAND
		}
	}
	if p.Zone == "" {
		p.Zone = zone
	}
	if p.BootDisk == nil {
		p.BootDisk = &loomv1.BootDisk{}
	}
	if p.BootDisk.Type == "" {
		p.BootDisk.Type = DefaultBootDiskType
		if known && !m.SupportsBootDisk(DefaultBootDiskType) && len(m.BootDiskTypes) > 0 {
			p.BootDisk.Type = m.BootDiskTypes[0]
		}
	}
	if p.BootDisk.SizeGb == 0 {
		p.BootDisk.SizeGb = DefaultBootDiskSizeGB
	}
}

func normalizeSlurm(s *loomv1.SlurmOrchestrator, pools []*loomv1.NodePool) {
	if l := s.LoginNodes; l != nil {
		if l.MachineType == "" {
			l.MachineType = DefaultLoginMachineType
		}
		if l.Count == 0 {
			l.Count = 1
		}
	}
	for i, ns := range s.NodeSets {
		if ns == nil {
			s.NodeSets[i] = &loomv1.SlurmNodeSet{}
		}
	}
	for i, p := range s.Partitions {
		if p == nil {
			s.Partitions[i] = &loomv1.SlurmPartition{}
		}
	}
	if len(s.Partitions) == 0 {
		s.NodeSets = append(s.NodeSets, defaultNodeSets(s.NodeSets, pools)...)
		if len(s.NodeSets) > 0 {
			ids := make([]string, len(s.NodeSets))
			for i, ns := range s.NodeSets {
				ids[i] = ns.Id
			}
			s.Partitions = []*loomv1.SlurmPartition{{Id: DefaultPartition, NodeSetIds: ids, Default: true}}
		}
	}
	hasDefault := false
	for _, p := range s.Partitions {
		if p.MaxTime == "" {
			p.MaxTime = Unlimited
		}
		if p.State == slurmspec.PartitionUp {
			p.State = "" // one spelling of UP, for etags and layout comparisons
		}
		hasDefault = hasDefault || p.Default
	}
	if !hasDefault && len(s.Partitions) > 0 {
		s.Partitions[0].Default = true
	}
}

// defaultNodeSets returns a node set, named after the pool, for each pool that
// none of have covers.
func defaultNodeSets(have []*loomv1.SlurmNodeSet, pools []*loomv1.NodePool) []*loomv1.SlurmNodeSet {
	covered := map[string]bool{}
	for _, ns := range have {
		covered[ns.NodePoolId] = true
	}
	var out []*loomv1.SlurmNodeSet
	for _, p := range pools {
		if !covered[p.Id] {
			covered[p.Id] = true
			out = append(out, &loomv1.SlurmNodeSet{Id: p.Id, NodePoolId: p.Id})
		}
	}
	return out
}

// LoginZone is the zone a cluster's login nodes run in, and so the zone whose
// on-demand capacity they draw from: the network's zone, else the first node
// pool's that names one, else DefaultZone. The provisioner places login nodes
// there and the gateway's capacity pre-check counts them there: one rule, so
// the two cannot disagree.
func LoginZone(c *loomv1.Cluster) string {
	if z := c.GetNetwork().GetZone(); z != "" {
		return z
	}
	for _, np := range c.GetCompute().GetNodePools() {
		if np.GetZone() != "" {
			return np.GetZone()
		}
	}
	return DefaultZone
}
