package clusterspec

import (
	"fmt"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/errs"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// Update mask paths (snake_case proto names) that an update may name. A
// parent path covers its children ("orchestrator.slurm" covers the partitions).
var updatablePaths = []string{
	"display_name",
	"description",
	"labels",
	"compute",
	"compute.node_pools",
	"orchestrator",
	"orchestrator.slurm",
	"orchestrator.slurm.login_nodes",
	"orchestrator.slurm.node_sets",
	"orchestrator.slurm.partitions",
	"orchestrator.slurm.prolog_scripts",
	"orchestrator.slurm.epilog_scripts",
}

// Paths fixed at creation, and output-only ones.
var (
	immutablePaths  = []string{"name", "storage", "network"}
	outputOnlyPaths = []string{"status", "create_time", "update_time", "etag"}
)

// ValidateUpdate checks an update of cluster old to new under an update mask
// (UpdateClusterRequest.update_mask paths; empty means every updatable field)
// and returns an *errs.InvalidError with every problem, or nil.
//
// An update may change: display_name, description, labels; the node_count,
// max_dynamic_node_count and labels of existing pools; add and remove pools
// (a removed pool's node sets and partitions must go with it); the node
// sets, partitions, login node count and prolog/epilog scripts. It may not
// change: name, network, storage; an existing pool's machine type,
// accelerators, capacity source, zone or boot disk; the hostname prefix of an
// existing pool (its node set's id); the login machine type. With an empty
// mask, new is the whole new spec, and a nil storage, network or
// orchestrator in it means "unchanged". The result must also pass Validate.
// old is taken as stored (normalized or not); neither is changed.
func ValidateUpdate(old, new *loomv1.Cluster, mask []string) error {
	_, err := ApplyUpdate(old, new, mask)
	return err
}

// ApplyUpdate returns the normalized spec that results from updating old with
// new under mask, or ValidateUpdate's error. Output-only fields (status,
// create_time, update_time, etag) and the name come from old. When old's node sets
// and partitions are the layout Normalize generates (a node set per pool and
// partition "all") and the update does not set them, the layout is generated
// again for the new pools, so that added pools join partition "all".
func ApplyUpdate(old, new *loomv1.Cluster, mask []string) (*loomv1.Cluster, error) {
	var v errs.Validator
	if old == nil || new == nil {
		v.Add("cluster", "required")
		return nil, v.Err()
	}
	for i, p := range mask {
		checkMaskPath(&v, fmt.Sprintf("update_mask[%d]", i), p)
	}
	// Before any merging: the merge and the pool comparisons walk the
	// lists, which must be within their bounds first.
	checkBounds(&v, new)
	if err := v.Err(); err != nil {
		return nil, err
	}

	o := proto.Clone(old).(*loomv1.Cluster)
	Normalize(o)
	merged := merge(o, new, mask)
	// Validate judges the spec as given, so that the node sets Normalize will
	// generate are not reported on twice.
	asGiven := proto.Clone(merged).(*loomv1.Cluster)
	Normalize(merged)
	keepPartitionStates(o, merged, new, mask)

	if new.GetName() != "" && ClusterID(new) != ClusterID(o) {
		v.Add("name", "cannot be changed after creation (is %q)", o.GetName())
	}
	if !proto.Equal(merged.GetNetwork(), o.GetNetwork()) {
		v.Add("network", "cannot be changed after creation")
	}
	if !proto.Equal(merged.GetStorage(), o.GetStorage()) {
		v.Add("storage", "cannot be changed after creation")
	}
	checkPoolChanges(&v, o, merged)
	if ol, nl := o.GetOrchestrator().GetSlurm().GetLoginNodes(), merged.GetOrchestrator().GetSlurm().GetLoginNodes(); ol != nil && nl != nil && ol.GetMachineType() != nl.GetMachineType() {
		v.Add("orchestrator.slurm.login_nodes.machine_type", "cannot be changed after creation (was %s)", ol.GetMachineType())
	}
	validate(&v, asGiven)
	if err := v.Err(); err != nil {
		return nil, err
	}
	return merged, nil
}

func checkMaskPath(v *errs.Validator, f, p string) {
	switch {
	case contains(updatablePaths, p):
	case contains(immutablePaths, p) || hasParentIn(p, immutablePaths):
		v.Add(f, "%s cannot be changed after creation", p)
	case contains(outputOnlyPaths, p) || hasParentIn(p, outputOnlyPaths):
		v.Add(f, "%s is output only", p)
	case hasParentIn(p, []string{"compute.node_pools", "orchestrator.slurm.node_sets", "orchestrator.slurm.partitions", "orchestrator.slurm.login_nodes"}):
		parent := p[:strings.LastIndexByte(p, '.')]
		v.Add(f, "%q: name the whole list or message %q; the new value replaces it", p, parent)
	default:
		v.Add(f, "unknown or non-updatable field %q (updatable: %s)", p, strings.Join(updatablePaths, ", "))
	}
}

func hasParentIn(p string, parents []string) bool {
	for _, q := range parents {
		if strings.HasPrefix(p, q+".") {
			return true
		}
	}
	return false
}

// covers reports whether mask (non-empty) names path or a parent of it.
func covers(mask []string, path string) bool {
	for _, m := range mask {
		if m == path || strings.HasPrefix(path, m+".") {
			return true
		}
	}
	return false
}

// merge builds the updated spec from normalized old o and new (not changed).
func merge(o, new *loomv1.Cluster, mask []string) *loomv1.Cluster {
	generated := isGeneratedLayout(o)
	var m *loomv1.Cluster
	if len(mask) == 0 {
		m = proto.Clone(new).(*loomv1.Cluster)
		if new.GetStorage() == nil {
			m.Storage = proto.Clone(o.GetStorage()).(*loomv1.StorageResources)
		}
		if new.GetNetwork() == nil {
			m.Network = proto.Clone(o.GetNetwork()).(*loomv1.NetworkConfig)
		}
		if new.GetOrchestrator().GetSlurm() == nil {
			m.Orchestrator = proto.Clone(o.GetOrchestrator()).(*loomv1.Orchestrator)
			if generated {
				m.Orchestrator.Slurm.NodeSets, m.Orchestrator.Slurm.Partitions = nil, nil
			}
		}
	} else {
		m = proto.Clone(o).(*loomv1.Cluster)
		if covers(mask, "display_name") {
			m.DisplayName = new.GetDisplayName()
		}
		if covers(mask, "description") {
			m.Description = new.GetDescription()
		}
		if covers(mask, "labels") {
			m.Labels = cloneMap(new.GetLabels())
		}
		if covers(mask, "compute.node_pools") {
			m.Compute = &loomv1.ComputeResources{}
			for _, p := range new.GetCompute().GetNodePools() {
				m.Compute.NodePools = append(m.Compute.NodePools, proto.Clone(p).(*loomv1.NodePool))
			}
		}
		s := m.Orchestrator.Slurm // normalized: never nil
		ns := new.GetOrchestrator().GetSlurm()
		if covers(mask, "orchestrator.slurm.login_nodes") {
			s.LoginNodes = nil
			if ns.GetLoginNodes() != nil {
				s.LoginNodes = proto.Clone(ns.GetLoginNodes()).(*loomv1.LoginNodes)
			}
		}
		setsGiven := covers(mask, "orchestrator.slurm.node_sets")
		partsGiven := covers(mask, "orchestrator.slurm.partitions")
		if setsGiven {
			s.NodeSets = nil
			for _, x := range ns.GetNodeSets() {
				s.NodeSets = append(s.NodeSets, proto.Clone(x).(*loomv1.SlurmNodeSet))
			}
		}
		if partsGiven {
			s.Partitions = nil
			for _, x := range ns.GetPartitions() {
				s.Partitions = append(s.Partitions, proto.Clone(x).(*loomv1.SlurmPartition))
			}
		}
		if generated && !setsGiven && !partsGiven {
			s.NodeSets, s.Partitions = nil, nil
		}
		if covers(mask, "orchestrator.slurm.prolog_scripts") {
			s.PrologScripts = append([]string(nil), ns.GetPrologScripts()...)
		}
		if covers(mask, "orchestrator.slurm.epilog_scripts") {
			s.EpilogScripts = append([]string(nil), ns.GetEpilogScripts()...)
		}
	}
	m.Name = o.GetName()
	m.Status = proto.Clone(o.GetStatus()).(*loomv1.ClusterStatus)
	m.CreateTime, m.UpdateTime, m.Etag = o.GetCreateTime(), o.GetUpdateTime(), o.GetEtag()
	if o.GetStatus() == nil {
		m.Status = nil
	}
	return m
}

func cloneMap(in map[string]string) map[string]string {
	if in == nil {
		return nil
	}
	out := make(map[string]string, len(in))
	for k, v := range in {
		out[k] = v
	}
	return out
}

// isGeneratedLayout reports whether normalized c's node sets and partitions
// are exactly what Normalize generates from its pools alone.
func isGeneratedLayout(c *loomv1.Cluster) bool {
	s := c.GetOrchestrator().GetSlurm()
	bare := &loomv1.SlurmOrchestrator{}
	normalizeSlurm(bare, c.GetCompute().GetNodePools())
	if len(bare.NodeSets) != len(s.GetNodeSets()) || len(bare.Partitions) != len(s.GetPartitions()) {
		return false
	}
	for i := range bare.NodeSets {
		if !proto.Equal(bare.NodeSets[i], s.GetNodeSets()[i]) {
			return false
		}
	}
	for i := range bare.Partitions {
		// A generated partition an administrator set DOWN (scontrol update
		// PartitionName=all State=DOWN) is still the generated layout.
		p := proto.Clone(s.GetPartitions()[i]).(*loomv1.SlurmPartition)
		p.State = ""
		if !proto.Equal(bare.Partitions[i], p) {
			return false
		}
	}
	return true
}

// keepPartitionStates gives the partitions of merged, when the update did
// not name them (mask, new), the states they had in o (by id): a generated
// layout is generated again, without them.
func keepPartitionStates(o, merged, new *loomv1.Cluster, mask []string) {
	if len(mask) == 0 && new.GetOrchestrator().GetSlurm() != nil || len(mask) > 0 && covers(mask, "orchestrator.slurm.partitions") {
		return
	}
	was := map[string]string{}
	for _, p := range o.GetOrchestrator().GetSlurm().GetPartitions() {
		was[p.GetId()] = p.GetState()
	}
	for _, p := range merged.GetOrchestrator().GetSlurm().GetPartitions() {
		if st, ok := was[p.GetId()]; ok && p.GetState() == "" {
			p.State = st
		}
	}
}

// MovesNoNode reports whether updating old to next (both normalized specs;
// status, times, etag and name are not compared) moves no node and claims
// no more or less capacity: every pool is still there under the same id and
// host prefix (its node set's id) with the same fields but its labels, no
// pool is added, and the login nodes and the fixed sections (storage,
// network) are the same. What such an update may change is what no node
// record or capacity claim holds: display_name, description, labels, pool
// labels, node sets' features (not their ids over an existing pool),
// partitions (states, node sets, max times, default, priority tiers, their
// order) and prolog/epilog scripts; the order of the pools. A change of
// node_count or max_dynamic_node_count (which the capacity check must see)
// moves nodes. Such an update (or none at all) applies at once, whatever
// the cluster is doing but being deleted (docs/clusters.md): it only stores
// and re-renders the spec.
func MovesNoNode(old, next *loomv1.Cluster) bool {
	a, b := nodeShape(old), nodeShape(next)
	if !proto.Equal(a, b) {
		return false
	}
	for _, np := range old.GetCompute().GetNodePools() {
		if HostPrefix(old, np.GetId()) != HostPrefix(next, np.GetId()) {
			return false
		}
	}
	return true
}

// nodeShape returns what of cluster c decides its nodes and capacity
// claims: c without the fields MovesNoNode lets change, pools in id order.
func nodeShape(c *loomv1.Cluster) *loomv1.Cluster {
	s := proto.Clone(c).(*loomv1.Cluster)
	s.Name, s.Status, s.CreateTime, s.UpdateTime, s.Etag = "", nil, nil, nil, ""
	s.DisplayName, s.Description, s.Labels = "", "", nil
	for _, np := range s.GetCompute().GetNodePools() {
		np.Labels = nil
	}
	if s.GetCompute() != nil {
		slices.SortStableFunc(s.Compute.NodePools, func(x, y *loomv1.NodePool) int { return strings.Compare(x.GetId(), y.GetId()) })
	}
	if sl := s.GetOrchestrator().GetSlurm(); sl != nil {
		// The host prefixes the node sets give are compared apart.
		sl.NodeSets, sl.Partitions, sl.PrologScripts, sl.EpilogScripts = nil, nil, nil, nil
	}
	return s
}

// checkPoolChanges reports changes to existing pools that only a new cluster
// could make.
func checkPoolChanges(v *errs.Validator, o, m *loomv1.Cluster) {
	newPools := map[string]int{}
	for i, p := range m.GetCompute().GetNodePools() {
		if _, dup := newPools[p.GetId()]; !dup {
			newPools[p.GetId()] = i
		}
	}
	for _, op := range o.GetCompute().GetNodePools() {
		i, ok := newPools[op.GetId()]
		if !ok {
			// A removed pool shrinks to nothing (its nodes drain first);
			// the node sets and partitions over it must go with it, which
			// validate checks.
			continue
		}
		np := m.GetCompute().GetNodePools()[i]
		f := fmt.Sprintf("compute.node_pools[%d]", i)
		fixed := func(field string, same bool, was any) {
			if !same {
				v.Add(f+"."+field, "cannot be changed after creation (was %v); add a new pool instead", was)
			}
		}
		fixed("machine_type", np.GetMachineType() == op.GetMachineType(), op.GetMachineType())
		fixed("accelerator_type", np.GetAcceleratorType() == op.GetAcceleratorType(), op.GetAcceleratorType())
		fixed("accelerator_count", np.GetAcceleratorCount() == op.GetAcceleratorCount(), op.GetAcceleratorCount())
		fixed("capacity", proto.Equal(np.GetCapacity(), op.GetCapacity()), capacityString(op.GetCapacity()))
		fixed("zone", np.GetZone() == op.GetZone(), op.GetZone())
		fixed("boot_disk", proto.Equal(np.GetBootDisk(), op.GetBootDisk()), fmt.Sprintf("%s %d GB", op.GetBootDisk().GetType(), op.GetBootDisk().GetSizeGb()))
		if was, now := HostPrefix(o, op.GetId()), HostPrefix(m, op.GetId()); was != now {
			field := "orchestrator.slurm.node_sets"
			if ns, ok := NodeSetForPool(m, op.GetId()); ok {
				for k, x := range m.GetOrchestrator().GetSlurm().GetNodeSets() {
					if x == ns {
						field = fmt.Sprintf("orchestrator.slurm.node_sets[%d]", k)
					}
				}
			}
			v.Add(field, "would rename the nodes of pool %q from %s-NNNN to %s-NNNN; node names cannot be changed after creation", op.GetId(), was, now)
		}
	}
}

func capacityString(c *loomv1.CapacitySource) string {
	if c.GetReservation() != "" {
		return fmt.Sprintf("%s %s", c.GetType(), c.GetReservation())
	}
	return c.GetType().String()
}
