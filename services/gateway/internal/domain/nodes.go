package domain

import (
	"fmt"
	"strings"

	"github.com/loom-ml/loom/libs/clusterspec"
	"github.com/loom-ml/loom/libs/errs"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// MsgInvalidNodeName and MsgNodeConfig are Slurm's words for a node list
// naming a host the cluster does not have, and for a request no set of the
// partition's nodes can meet.
const (
	MsgInvalidNodeName = "Invalid node name specified"
	MsgNodeConfig      = "Requested node configuration is not available"
	// MsgInvalidPartition is Slurm's refusal of a partition the cluster
	// does not have, which scripts grep for.
	MsgInvalidPartition = "Invalid partition name specified"
)

// maxNamedMissing bounds how many unknown hosts one refusal names.
const maxNamedMissing = 10

// CheckNodesExist refuses hostnames that are not nodes of cluster (nodes,
// by hostname, as the provisioner lists them): an InvalidArgument naming
// field and each unknown name (at most ten, then how many in all).
func CheckNodesExist(nodes map[string]*loomv1.Node, cluster, field string, hosts []string) error {
	var v errs.Validator
	checkNodesExist(&v, nodes, cluster, field, hosts, nil, "")
	return v.Err()
}

// CheckHealthNodes is CheckNodesExist for the health commands (scan,
// report faulty, drain, repair): a login node is refused too, naming it,
// since health checks and repairs only a cluster's compute nodes and would
// drop a command naming one (the whole command, the other nodes with it).
func CheckHealthNodes(nodes map[string]*loomv1.Node, cluster, field string, hosts []string) error {
	var v errs.Validator
	checkNodesExist(&v, nodes, cluster, field, hosts, nil, "")
	for i, h := range hosts {
		if n, ok := nodes[h]; ok && n.GetRole() == clusterspec.RoleLogin {
			v.Add(fmt.Sprintf("%s[%d]", field, i), "%s is the login node of %s: health checks and repairs only compute nodes", clip(h), ShortID(cluster))
		}
	}
	return v.Err()
}

// checkNodesExist adds a problem for each of hosts that is not a node of
// nodes, naming it by its index in hosts; a host dropped (dropped[h]) is
// not looked at.
func checkNodesExist(v *errs.Validator, nodes map[string]*loomv1.Node, cluster, field string, hosts []string, dropped map[string]bool, slurm string) {
	missing := 0
	for i, h := range hosts {
		if _, ok := nodes[h]; !ok && !dropped[h] {
			if missing++; missing <= maxNamedMissing {
				v.Add(fmt.Sprintf("%s[%d]", field, i), "%s is not a node of %s (see loom nodes list --cluster %s)%s", clip(h), cluster, ShortID(cluster), slurm)
			}
		}
	}
	if missing > maxNamedMissing {
		v.Add(field, "%d names in all are not nodes of %s", missing, cluster)
	}
}

// CheckJobNodes checks a job's --nodelist (-w) and --exclude (-x) against
// its cluster's nodes, as Slurm does at submission and at scontrol update:
// every host named must be a node of the cluster ("Invalid node name
// specified"), those of the node list in the job's partition, and the
// partition must keep, once the excluded nodes are taken out, as many nodes
// as the job needs ("Requested node configuration is not available") —
// else it would pend forever. Only the hosts the job keeps are judged:
// those Slurm's option check drops (slurmspec.FitNodes: "-n1 -w
// node1,nosuch" keeps node1) never reach its controller, so sbatch and
// srun take such a job (measured on 22.05), and AcceptJob drops them too.
// Problems name a host by its index in the request. nodes are the
// cluster's nodes by hostname; the job's own fields are checked by
// ValidateSubmitJob first. An update's job is judged whole
// (CheckUpdatedJob): scontrol update goes through no option check, and the
// gateway sends its hosts and node count to the scheduler as they are.
func CheckJobNodes(j *loomv1.Job, cluster *loomv1.Cluster, nodes map[string]*loomv1.Node) error {
	return checkJobNodes(j, fitNodes(j), cluster, nodes)
}

// checkJobNodes is CheckJobNodes's judgement of j as fitted leaves it: the
// hosts of j's node list that fitted's leaves out are not looked at, and
// the exclusions must leave room for fitted's node count (j itself: every
// host judged, j's count).
func checkJobNodes(j, fitted *loomv1.Job, cluster *loomv1.Cluster, nodes map[string]*loomv1.Node) error {
	var v errs.Validator
	name := cluster.GetName()
	dropped := droppedHosts(j.GetNodelist(), fitted.GetNodelist())
	checkNodesExist(&v, nodes, name, "job.nodelist", j.GetNodelist(), dropped, " (Slurm: "+MsgInvalidNodeName+")")
	checkNodesExist(&v, nodes, name, "job.exclude", j.GetExclude(), nil, " (Slurm: "+MsgInvalidNodeName+")")
	if err := v.Err(); err != nil {
		return err
	}
	partitions, ps, err := jobPartitions(cluster, j)
	if err != nil {
		return errs.Invalid("job.partition", "%v", err)
	}
	// A host both listed and excluded, whatever the partition: said once.
	excluded := make(map[string]bool, len(j.GetExclude()))
	for _, h := range j.GetExclude() {
		excluded[h] = true
	}
	for i, h := range j.GetNodelist() {
		v.Check(dropped[h] || !excluded[h], fmt.Sprintf("job.nodelist[%d]", i), "%s is also excluded", h)
	}
	// A job that names several partitions is judged in each, as if it
	// named that one alone.
	for i, p := range ps {
		checkJobNodesIn(&v, j, fitted, dropped, nodes, partitions[i], partitionPools(cluster, p))
	}
	return v.Err()
}

// droppedHosts is the set of the hosts of asked that kept (FitNodes's
// hosts, a subset of them) leaves out; nil when it keeps them all.
func droppedHosts(asked, kept []string) map[string]bool {
	if len(kept) == len(asked) {
		return nil
	}
	in := make(map[string]bool, len(kept))
	for _, h := range kept {
		in[h] = true
	}
	dropped := map[string]bool{}
	for _, h := range asked {
		if !in[h] {
			dropped[h] = true
		}
	}
	return dropped
}

// checkJobNodesIn is CheckJobNodes's judgement of j's node list (but the
// hosts dropped) and exclusions in one partition of its (partPools, its
// node pools); fitted is j as FitNodes leaves it, whose node count the
// exclusions must leave room for.
func checkJobNodesIn(v *errs.Validator, j, fitted *loomv1.Job, dropped map[string]bool, nodes map[string]*loomv1.Node, partition string, partPools []*loomv1.NodePool) {
	pools := map[string]bool{}
	for _, pool := range partPools {
		pools[pool.GetId()] = true
	}
	// A set: 4,096 exclusions against as many nodes would be 16 million
	// comparisons as a list.
	excluded := make(map[string]bool, len(j.GetExclude()))
	for _, h := range j.GetExclude() {
		excluded[h] = true
	}
	for i, h := range j.GetNodelist() {
		v.Check(dropped[h] || pools[nodes[h].GetNodePool()], fmt.Sprintf("job.nodelist[%d]", i), "%s is not in partition %s (Slurm: %s)", h, partition, MsgNodeConfig)
	}
	left := 0
	for h, n := range nodes {
		if pools[n.GetNodePool()] && !excluded[h] {
			left++
		}
	}
	if need := int(nodesFor(fitted, partPools)); len(excluded) > 0 && left < need {
		v.Add("job.exclude", "leaves %d of partition %s's nodes, and the job needs %d (Slurm: %s)", left, partition, need, MsgNodeConfig)
	}
}

// ShortID is the last segment of a resource name (all of it when it has no /).
func ShortID(name string) string {
	return name[strings.LastIndex(name, "/")+1:]
}
