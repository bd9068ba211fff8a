package clusterspec

import (
	"fmt"
	"path"
	"regexp"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/resname"
	"github.com/loom-ml/loom/libs/slurmspec"
	"github.com/loom-ml/loom/libs/termtext"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// Limits of the spec that are Loom's own choices (the rest come from Slurm,
// the catalog and the storage tiers).
const (
	// MaxHostPrefixLen bounds node pool and node set ids, which prefix hostnames:
	// "{prefix}-{NNNN}" then stays well inside a 63-character DNS label.
	MaxHostPrefixLen = 40
	// MaxPartitionIDLen is RFC 1034's label length, as Cluster Director uses.
	MaxPartitionIDLen = 63
	// MaxPoolNodes bounds node_count and max_dynamic_node_count of one pool;
	// a safety bound far above any real pool, so that a typo cannot ask the
	// provisioner for millions of node records.
	MaxPoolNodes = 10000
	// MaxNodePools bounds compute.node_pools (and so node_sets, each over one
	// pool): a pool is one machine type, capacity source and zone, and 32
	// covers every GPU type of the catalog in two zones on two kinds of
	// capacity. Each pool is a node set, a partition line and a reconciler
	// batch, so the bound is also what keeps one request's work bounded.
	MaxNodePools = 32
	// MaxClusterNodes bounds the nodes of one cluster: node_count plus
	// max_dynamic_node_count over every pool. One pool at MaxPoolNodes
	// with as many dynamic nodes fits; Slurm and the provisioner are
	// measured at 10,000 nodes (bench/REPORT.md).
	MaxClusterNodes = 20000
	// MaxPartitions bounds orchestrator.slurm.partitions (two per node set
	// and then some: a default, per-pool and per-purpose partitions).
	MaxPartitions = 64
	// MaxLabels bounds the labels of a cluster or a pool (GCP's limit).
	MaxLabels = 64
	// MaxFeatures bounds the features of one node set.
	MaxFeatures = 32
	// MaxScripts bounds prolog_scripts and epilog_scripts (each).
	MaxScripts = 16
	// MinBootDiskGB and MaxBootDiskGB bound boot_disk.size_gb.
	MinBootDiskGB = 10
	MaxBootDiskGB = 65536
	// MaxPriorityTier is Slurm's largest PriorityTier (a uint16 whose top values are reserved).
	MaxPriorityTier = 65533
	// MaxScriptBytes bounds one prolog or epilog script.
	MaxScriptBytes = 64 << 10
)

// BootDiskTypes are the boot disk types Loom knows.
var BootDiskTypes = []string{"pd-standard", "pd-balanced", "pd-ssd", "hyperdisk-balanced"}

var (
	// idRE is a DNS-label-like id: lower-case letters, digits and '-', starting
	// with a letter, not ending with '-'. Slurm accepts more, but these ids
	// become hostnames, hostlist prefixes and slurm.conf tokens, where spaces,
	// ',', '=', '[' and '#' break parsing and upper case breaks DNS.
	idRE = regexp.MustCompile(`^[a-z]([a-z0-9-]*[a-z0-9])?$`)
	// hostSuffixRE matches an id that reads like a hostname ("gpu-0001"): as a
	// node set or pool id it would collide with another prefix's node names,
	// and Slurm refuses a NodeSet that overlaps a NodeName.
	hostSuffixRE = regexp.MustCompile(`-[0-9]{4,}$`)
	// reservationProjectRE is the project of a full reservation name in a
	// pool's capacity.reservation (laxer than a project id, as it always was).
	reservationProjectRE = regexp.MustCompile(`^[a-z][a-z0-9-]*$`)
	zoneRE               = regexp.MustCompile(`^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$`)
	featureRE            = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,63}$`)
	labelKeyRE           = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9_./-]{0,61}[A-Za-z0-9])?$`)
	clusterIDRE          = regexp.MustCompile(`^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$`)
	systemMountDir       = []string{"/bin", "/boot", "/dev", "/etc", "/lib", "/lib64", "/proc", "/run", "/sbin", "/sys", "/usr", "/var"}
)

// Names Slurm gives a meaning of its own, compared case-insensitively as Slurm
// does. In slurm.conf a "NodeName=DEFAULT" or "PartitionName=DEFAULT" line sets
// defaults for the lines after it instead of defining a node or partition, and
// a partition's "Nodes=ALL" means every node, so a node set named "all" could
// not be referenced. Slurm itself accepts a partition named "all" (Loom's
// default partition is one).
var (
	reservedPartitionIDs = []string{"default"}
	reservedHostPrefixes = []string{"all", "default"}
)

// CheckZone adds a violation of field when zone is not a zone name (lower-case
// letters, digits and '-', as a pool's and the network's zone must be): the
// one rule for every zone a request names, so that a reservation's zone is
// one a pool can claim from.
func CheckZone(v *errs.Validator, field, zone string) {
	v.Check(zoneRE.MatchString(zone), field, "%q is not a zone name (e.g. us-central1-a)", zone)
}

// Validate checks a cluster spec and returns an *errs.InvalidError listing
// every problem at once, each with its field path in snake_case proto names
// with indexes (e.g. `orchestrator.slurm.partitions[1].node_set_ids[0]: no
// node set "gpu-b"`), or nil. It judges c as Normalize would complete it (c
// itself is not changed), so defaults are never reported as missing; node sets
// and the partition that Normalize would generate are not reported on, their
// sources (the pools) are. It calls nothing outside this package: whether the
// capacity exists is the provisioner's question.
func Validate(c *loomv1.Cluster) error {
	var v errs.Validator
	validate(&v, c)
	return v.Err()
}

func validate(v *errs.Validator, c *loomv1.Cluster) {
	if c == nil {
		v.Add("cluster", "required")
		return
	}
	if !checkBounds(v, c) {
		return
	}
	userNodeSets := len(c.GetOrchestrator().GetSlurm().GetNodeSets())
	userPartitions := len(c.GetOrchestrator().GetSlurm().GetPartitions())
	n := proto.Clone(c).(*loomv1.Cluster)
	Normalize(n)

	validateName(v, n.GetName())
	validateLabels(v, "labels", n.GetLabels())
	validateNetwork(v, n.GetNetwork())
	validatePools(v, n.GetCompute().GetNodePools())
	checkReservationProjects(v, n)
	validateSlurm(v, n, userNodeSets, userPartitions)
	validateStorage(v, n.GetStorage())
}

// checkBounds reports every list of c longer than its bound and returns
// whether all are within them. Validate stops there when one is not: the
// per-item rules over a list of thousands would cost as much as the list
// and bury the one problem that matters under thousands of lines.
func checkBounds(v *errs.Validator, c *loomv1.Cluster) bool {
	ok := true
	count := func(field string, n, limit int, what string) {
		if n > limit {
			v.Add(field, "at most %d %s, got %d", limit, what, n)
			ok = false
		}
	}
	count("labels", len(c.GetLabels()), MaxLabels, "labels")
	pools := c.GetCompute().GetNodePools()
	count("compute.node_pools", len(pools), MaxNodePools, "node pools")
	if len(pools) <= MaxNodePools {
		for i, p := range pools {
			count(fmt.Sprintf("compute.node_pools[%d].labels", i), len(p.GetLabels()), MaxLabels, "labels")
		}
	}
	s := c.GetOrchestrator().GetSlurm()
	count("orchestrator.slurm.node_sets", len(s.GetNodeSets()), MaxNodePools, "node sets (one per node pool)")
	if len(s.GetNodeSets()) <= MaxNodePools {
		for i, ns := range s.GetNodeSets() {
			count(fmt.Sprintf("orchestrator.slurm.node_sets[%d].features", i), len(ns.GetFeatures()), MaxFeatures, "features")
		}
	}
	count("orchestrator.slurm.partitions", len(s.GetPartitions()), MaxPartitions, "partitions")
	if len(s.GetPartitions()) <= MaxPartitions {
		for i, p := range s.GetPartitions() {
			count(fmt.Sprintf("orchestrator.slurm.partitions[%d].node_set_ids", i), len(p.GetNodeSetIds()), MaxNodePools, "node sets")
		}
	}
	count("orchestrator.slurm.prolog_scripts", len(s.GetPrologScripts()), MaxScripts, "scripts")
	count("orchestrator.slurm.epilog_scripts", len(s.GetEpilogScripts()), MaxScripts, "scripts")
	return ok
}

func validateName(v *errs.Validator, name string) {
	if name == "" {
		return // the gateway names the cluster
	}
	id := name
	if strings.Contains(name, "/") {
		cn, err := resname.SplitCluster(name)
		if err != nil {
			v.Add("name", "%q is neither a cluster id nor projects/{project}/clusters/{cluster}", name)
			return
		}
		id = cn.ID
	}
	v.Check(clusterIDRE.MatchString(id), "name", "cluster id %q must be 1 to 63 lower-case letters, digits and '-', starting with a letter and not ending with '-'", id)
}

// CheckReservations refuses, InvalidArgument naming the pool, a node pool
// of c (whose name is projects/{project}/clusters/{id}) that draws from
// another project's reservation: a reservation is its project's capacity,
// and a project's administrator could otherwise take another's. A cluster
// named by id only is not checked (Validate does this too when the name is
// whole).
func CheckReservations(c *loomv1.Cluster) error {
	var v errs.Validator
	checkReservationProjects(&v, c)
	return v.Err()
}

func checkReservationProjects(v *errs.Validator, c *loomv1.Cluster) {
	cn, err := resname.SplitCluster(c.GetName())
	if err != nil {
		return
	}
	for i, p := range c.GetCompute().GetNodePools() {
		res := p.GetCapacity().GetReservation()
		if !strings.Contains(res, "/") {
			continue
		}
		if r, err := resname.SplitReservation(res); err == nil && r.Project != cn.Project {
			v.Add(fmt.Sprintf("compute.node_pools[%d].capacity.reservation", i), "%s is project %s's reservation; a cluster of project %s draws only from its own project's (name it by id: %s)",
				res, r.Project, cn.Project, r.ID)
		}
	}
}

// validReservationRef reports whether res is a reservation id or
// projects/{project}/reservations/{reservation}.
func validReservationRef(res string) bool {
	if !strings.Contains(res, "/") {
		return resname.ValidID(res)
	}
	r, err := resname.SplitReservation(res)
	return err == nil && reservationProjectRE.MatchString(r.Project) && resname.ValidID(r.ID)
}

func validateLabels(v *errs.Validator, field string, labels map[string]string) {
	for k, val := range labels {
		v.Check(labelKeyRE.MatchString(k), field, "label key %q must be 1 to 63 letters, digits, '_', '.', '/' or '-', starting and ending with a letter or digit", k)
		v.Check(len(val) <= 63, field, "label %q: value longer than 63 characters", k)
		if r, bad := termtext.FirstSpoofing(val, ""); bad {
			// loom clusters describe prints it in a row.
			v.Add(field, "label %q: value holds the control character %U", k, r)
		}
	}
}

func validateNetwork(v *errs.Validator, n *loomv1.NetworkConfig) {
	v.Check(n.GetMtu() >= MinMTU && n.GetMtu() <= MaxMTU, "network.mtu", "must be %d to %d (jumbo frames above 1500), not %d", MinMTU, MaxMTU, n.GetMtu())
	v.Check(clusterIDRE.MatchString(n.GetName()), "network.name", "%q must be 1 to 63 lower-case letters, digits and '-', starting with a letter", n.GetName())
	CheckZone(v, "network.zone", n.GetZone())
}

// checkHostPrefix reports what is wrong with an id that prefixes hostnames
// (a node pool's or a node set's).
func checkHostPrefix(v *errs.Validator, field, id string) {
	switch {
	case id == "":
		v.Add(field, "required")
	case !idRE.MatchString(id):
		v.Add(field, "%q must be lower-case letters, digits and '-', starting with a letter and not ending with '-' (it prefixes hostnames)", id)
	case len(id) > MaxHostPrefixLen:
		v.Add(field, "%q is longer than %d characters (it prefixes hostnames)", id, MaxHostPrefixLen)
	case hostSuffixRE.MatchString(id):
		v.Add(field, "%q ends like a hostname (\"-\" and 4 or more digits) and would collide with node names", id)
	case isReserved(id, reservedHostPrefixes):
		v.Add(field, "%q is reserved in Slurm (NodeName=DEFAULT sets defaults; Nodes=ALL means every node)", id)
	}
}

func isReserved(id string, reserved []string) bool {
	for _, r := range reserved {
		if strings.EqualFold(id, r) {
			return true
		}
	}
	return false
}

func validatePools(v *errs.Validator, pools []*loomv1.NodePool) {
	if len(pools) == 0 {
		v.Add("compute.node_pools", "at least one node pool is required")
		return
	}
	var nodes int64
	for _, p := range pools {
		// Each term is checked on its own below; here only in-range ones
		// count, so that one bad pool is not reported twice.
		if p.GetNodeCount() >= 0 && p.GetNodeCount() <= MaxPoolNodes {
			nodes += int64(p.GetNodeCount())
		}
		if p.GetMaxDynamicNodeCount() >= 0 && p.GetMaxDynamicNodeCount() <= MaxPoolNodes {
			nodes += int64(p.GetMaxDynamicNodeCount())
		}
	}
	v.Check(nodes <= MaxClusterNodes, "compute.node_pools", "at most %d nodes in a cluster (node_count plus max_dynamic_node_count over every pool), got %d", MaxClusterNodes, nodes)
	seen := map[string]int{}
	for i, p := range pools {
		f := fmt.Sprintf("compute.node_pools[%d]", i)
		checkHostPrefix(v, f+".id", p.GetId())
		if j, dup := seen[p.GetId()]; dup && p.GetId() != "" {
			v.Add(f+".id", "duplicate id %q (also compute.node_pools[%d])", p.GetId(), j)
		} else {
			seen[p.GetId()] = i
		}
		m, known := checkMachineType(v, f+".machine_type", p.GetMachineType())
		v.Check(p.GetNodeCount() >= 1, f+".node_count", "must be at least 1, got %d", p.GetNodeCount())
		v.Check(p.GetNodeCount() <= MaxPoolNodes, f+".node_count", "must be at most %d, got %d", MaxPoolNodes, p.GetNodeCount())
		v.Check(p.GetMaxDynamicNodeCount() >= 0, f+".max_dynamic_node_count", "must not be negative, got %d", p.GetMaxDynamicNodeCount())
		v.Check(p.GetMaxDynamicNodeCount() <= MaxPoolNodes, f+".max_dynamic_node_count", "must be at most %d, got %d", MaxPoolNodes, p.GetMaxDynamicNodeCount())
		if known {
			checkAccelerators(v, f, m, p)
		}
		checkCapacity(v, f+".capacity", p.GetCapacity())
		checkBootDisk(v, f+".boot_disk", m, known, p.GetBootDisk())
		CheckZone(v, f+".zone", p.GetZone())
		validateLabels(v, f+".labels", p.GetLabels())
	}
}

// checkMachineType reports an unknown machine type, suggesting close names.
func checkMachineType(v *errs.Validator, field, name string) (MachineType, bool) {
	if name == "" {
		v.Add(field, "required")
		return MachineType{}, false
	}
	m, ok := Machine(name)
	if !ok {
		if s := SuggestMachines(name); len(s) > 0 {
			v.Add(field, "unknown machine type %q (did you mean %s?)", name, strings.Join(s, ", "))
		} else {
			v.Add(field, "unknown machine type %q (see the machine catalog in docs/clusters.md)", name)
		}
	}
	return m, ok
}

func checkAccelerators(v *errs.Validator, f string, m MachineType, p *loomv1.NodePool) {
	if !m.HasGPUs() {
		v.Check(p.GetAcceleratorCount() == 0, f+".accelerator_count", "%s has no GPUs, not %d", m.Name, p.GetAcceleratorCount())
		v.Check(p.GetAcceleratorType() == "", f+".accelerator_type", "%s has no GPUs, not %s", m.Name, p.GetAcceleratorType())
		return
	}
	v.Check(p.GetAcceleratorCount() == m.AcceleratorCount, f+".accelerator_count", "%s has %d GPUs, not %d", m.Name, m.AcceleratorCount, p.GetAcceleratorCount())
	v.Check(p.GetAcceleratorType() == m.AcceleratorType, f+".accelerator_type", "%s has %s GPUs, not %s", m.Name, m.AcceleratorType, p.GetAcceleratorType())
}

func checkCapacity(v *errs.Validator, f string, c *loomv1.CapacitySource) {
	t := c.GetType()
	if _, ok := loomv1.CapacitySource_Type_name[int32(t)]; !ok {
		v.Add(f+".type", "unknown capacity type %d (RESERVATION, ON_DEMAND, SPOT or FLEX_START)", int32(t))
		return
	}
	res := c.GetReservation()
	switch {
	case t == loomv1.CapacitySource_RESERVATION && res == "":
		v.Add(f+".reservation", "required for RESERVATION capacity: the reservation to draw from")
	case t != loomv1.CapacitySource_RESERVATION && res != "":
		v.Add(f+".reservation", "only RESERVATION capacity names a reservation; this pool is %s", t)
	case res != "" && !validReservationRef(res):
		v.Add(f+".reservation", "%q is neither a reservation id nor projects/{project}/reservations/{reservation}", res)
	}
}

func checkBootDisk(v *errs.Validator, f string, m MachineType, known bool, d *loomv1.BootDisk) {
	switch t := d.GetType(); {
	case !contains(BootDiskTypes, t):
		v.Add(f+".type", "unknown boot disk type %q (%s)", t, strings.Join(BootDiskTypes, ", "))
	case known && !m.SupportsBootDisk(t):
		v.Add(f+".type", "%s cannot boot from %s (it supports %s)", m.Name, t, strings.Join(m.BootDiskTypes, ", "))
	}
	v.Check(d.GetSizeGb() >= MinBootDiskGB && d.GetSizeGb() <= MaxBootDiskGB, f+".size_gb", "must be %d to %d GB, not %d", MinBootDiskGB, MaxBootDiskGB, d.GetSizeGb())
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// validateSlurm checks the Slurm section of a normalized cluster. Node sets
// from index userNodeSets on, and the partitions when the user gave none, were
// generated by Normalize and are not reported on.
func validateSlurm(v *errs.Validator, c *loomv1.Cluster, userNodeSets, userPartitions int) {
	s := c.GetOrchestrator().GetSlurm()
	if l := s.GetLoginNodes(); l != nil {
		checkMachineType(v, "orchestrator.slurm.login_nodes.machine_type", l.GetMachineType())
		v.Check(l.GetCount() >= 0, "orchestrator.slurm.login_nodes.count", "must not be negative, got %d", l.GetCount())
		v.Check(l.GetCount() <= 100, "orchestrator.slurm.login_nodes.count", "must be at most 100, got %d", l.GetCount())
	}

	pools := map[string]bool{}
	for _, p := range c.GetCompute().GetNodePools() {
		pools[p.GetId()] = true
	}
	// prefixOwner records which node set or pool uses each hostname prefix.
	prefixOwner := map[string]string{}
	nodeSets := map[string]int{}
	poolCover := map[string]int{}
	for i, ns := range s.GetNodeSets() {
		nodeSets[ns.GetId()] = i
		if i >= userNodeSets {
			continue
		}
		f := fmt.Sprintf("orchestrator.slurm.node_sets[%d]", i)
		checkHostPrefix(v, f+".id", ns.GetId())
		for j := 0; j < i; j++ {
			if s.GetNodeSets()[j].GetId() == ns.GetId() && ns.GetId() != "" {
				v.Add(f+".id", "duplicate id %q (also orchestrator.slurm.node_sets[%d])", ns.GetId(), j)
				break
			}
		}
		switch pid := ns.GetNodePoolId(); {
		case pid == "":
			v.Add(f+".node_pool_id", "required")
		case !pools[pid]:
			v.Add(f+".node_pool_id", "no node pool %q", pid)
		default:
			if j, dup := poolCover[pid]; dup {
				v.Add(f+".node_pool_id", "node pool %q is already in node set %q (orchestrator.slurm.node_sets[%d]); a pool belongs to at most one node set", pid, s.GetNodeSets()[j].GetId(), j)
			} else {
				poolCover[pid] = i
				prefixOwner[ns.GetId()] = fmt.Sprintf("node set %q", ns.GetId())
			}
		}
		for k, feat := range ns.GetFeatures() {
			v.Check(featureRE.MatchString(feat), fmt.Sprintf("%s.features[%d]", f, k), "%q must be 1 to 63 letters, digits, '_', '.' or '-' (Slurm constraint syntax uses the rest)", feat)
		}
	}
	// A pool no user node set covers is named by its own id: that prefix must
	// not be a node set's too, or two pools would share hostnames.
	for i, p := range c.GetCompute().GetNodePools() {
		if _, covered := poolCover[p.GetId()]; covered || p.GetId() == "" {
			continue
		}
		if owner, taken := prefixOwner[p.GetId()]; taken {
			v.Add(fmt.Sprintf("compute.node_pools[%d].id", i), "%q is also the id of %s over another pool; their nodes would share hostnames", p.GetId(), owner)
		}
	}

	if userPartitions > 0 {
		validatePartitions(v, s, nodeSets)
	}
	for i, sc := range s.GetPrologScripts() {
		checkScript(v, fmt.Sprintf("orchestrator.slurm.prolog_scripts[%d]", i), sc)
	}
	for i, sc := range s.GetEpilogScripts() {
		checkScript(v, fmt.Sprintf("orchestrator.slurm.epilog_scripts[%d]", i), sc)
	}
}

// validatePartitions checks the user's partitions against the node sets (id → index).
func validatePartitions(v *errs.Validator, s *loomv1.SlurmOrchestrator, nodeSets map[string]int) {
	defaultAt := -1
	for i, p := range s.GetPartitions() {
		f := fmt.Sprintf("orchestrator.slurm.partitions[%d]", i)
		switch id := p.GetId(); {
		case id == "":
			v.Add(f+".id", "required")
		case !idRE.MatchString(id) || len(id) > MaxPartitionIDLen:
			v.Add(f+".id", "%q must be 1 to %d lower-case letters, digits and '-', starting with a letter and not ending with '-' (no spaces, ',' or '=', which break slurm.conf and -p lists)", id, MaxPartitionIDLen)
		case isReserved(id, reservedPartitionIDs):
			v.Add(f+".id", "%q is reserved in Slurm (PartitionName=DEFAULT sets defaults for other partitions)", id)
		}
		for j := 0; j < i; j++ {
			if s.GetPartitions()[j].GetId() == p.GetId() && p.GetId() != "" {
				v.Add(f+".id", "duplicate id %q (also orchestrator.slurm.partitions[%d])", p.GetId(), j)
				break
			}
		}
		if len(p.GetNodeSetIds()) == 0 {
			v.Add(f+".node_set_ids", "at least one node set is required")
		}
		listed := map[string]bool{}
		for k, id := range p.GetNodeSetIds() {
			ff := fmt.Sprintf("%s.node_set_ids[%d]", f, k)
			if _, ok := nodeSets[id]; !ok {
				v.Add(ff, "no node set %q", id)
			} else if listed[id] {
				v.Add(ff, "node set %q is listed twice", id)
			}
			listed[id] = true
		}
		if _, _, err := ParseMaxTime(p.GetMaxTime()); err != nil {
			v.Add(f+".max_time", "%q is not a Slurm time limit (UNLIMITED, MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS): %v", p.GetMaxTime(), err)
		}
		if p.GetDefault() {
			if defaultAt >= 0 {
				v.Add(f+".default", "only one partition may be the default; partitions[%d] (%q) already is", defaultAt, s.GetPartitions()[defaultAt].GetId())
			} else {
				defaultAt = i
			}
		}
		v.Check(p.GetPriorityTier() >= 0 && p.GetPriorityTier() <= MaxPriorityTier, f+".priority_tier", "must be 0 to %d (Slurm's PriorityTier), not %d", MaxPriorityTier, p.GetPriorityTier())
		if err := slurmspec.CheckPartitionState(p.GetState()); err != nil {
			v.Add(f+".state", "%v", err)
		}
	}

}

func checkScript(v *errs.Validator, f, script string) {
	switch {
	case strings.TrimSpace(script) == "":
		v.Add(f, "empty script")
	case len(script) > MaxScriptBytes:
		v.Add(f, "script is %d bytes; at most %d", len(script), MaxScriptBytes)
	case strings.IndexByte(script, 0) >= 0:
		v.Add(f, "script holds a NUL byte")
	}
}

func validateStorage(v *errs.Validator, s *loomv1.StorageResources) {
	if s == nil {
		return
	}
	if h := s.GetHome(); h != nil {
		if t, ok := Home(h.GetTier()); !ok {
			v.Add("storage.home.tier", "unknown tier %q (BASIC_HDD, BASIC_SSD, ZONAL or REGIONAL)", h.GetTier())
		} else {
			checkSize(v, "storage.home.capacity_gib", h.GetCapacityGib(), t.MinGiB, t.MaxGiB, t.StepGiB, t.Name)
		}
		checkMountPath(v, "storage.home.mount_path", h.GetMountPath())
	}
	if sc := s.GetScratch(); sc != nil {
		if t, ok := Scratch(sc.GetThroughputMbpsPerTib()); !ok {
			v.Add("storage.scratch.throughput_mbps_per_tib", "must be 125, 250, 500 or 1000 (MB/s per TiB), not %d", sc.GetThroughputMbpsPerTib())
		} else {
			checkSize(v, "storage.scratch.capacity_gib", sc.GetCapacityGib(), t.MinGiB, t.MaxGiB, t.StepGiB, fmt.Sprintf("the %d MB/s/TiB tier", t.ThroughputMBpsPerTiB))
		}
		checkMountPath(v, "storage.scratch.mount_path", sc.GetMountPath())
	}
	if h, sc := s.GetHome().GetMountPath(), s.GetScratch().GetMountPath(); s.GetHome() != nil && s.GetScratch() != nil &&
		(h == sc || strings.HasPrefix(sc, h+"/") || strings.HasPrefix(h, sc+"/")) {
		v.Add("storage.scratch.mount_path", "%q overlaps the home mount path %q", sc, h)
	}
}

func checkSize(v *errs.Validator, f string, got, lo, hi, step int32, tier string) {
	if got < lo || got > hi || (got-lo)%step != 0 {
		if step == 1 {
			v.Add(f, "%s takes %d to %d GiB, not %d", tier, lo, hi, got)
		} else {
			v.Add(f, "%s takes %d to %d GiB in steps of %d, not %d", tier, lo, hi, step, got)
		}
	}
}

func checkMountPath(v *errs.Validator, f, p string) {
	switch {
	case !strings.HasPrefix(p, "/") || path.Clean(p) != p:
		v.Add(f, "%q must be a clean absolute path", p)
	case p == "/":
		v.Add(f, "cannot mount over /")
	case strings.ContainsAny(p, " \t\n,:\\"):
		v.Add(f, "%q holds a space, ',', ':' or '\\', which mount tables cannot carry", p)
	default:
		for _, d := range systemMountDir {
			if p == d || strings.HasPrefix(p, d+"/") {
				v.Add(f, "%q is a system directory", p)
				break
			}
		}
	}
}
