package clusterspec

import (
	"fmt"
	"strconv"
	"strings"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// Role values of loomv1.Node.role: a compute node runs an agent and jobs; a
// login node is a record only (users log in on the cluster's shared storage),
// with nothing on it that heartbeats, runs jobs or can be repaired.
const (
	RoleCompute = "compute"
	RoleLogin   = "login"
)

// sharedDirEntries are the entries Loom itself keeps in a cluster's shared
// dir: the agents' .loom (step outputs, progress), the models jobs write and
// the jobs' checkpoints.
var sharedDirEntries = map[string]bool{".loom": true, "models": true, "checkpoints": true}

// HomeName reports whether <shared dir>/<user> may be user's home (what a
// job of theirs submitted without a directory works in, its HOME): not one
// of the shared dir's own entries, which a user named "models" or
// "checkpoints" would otherwise be given, to plant links in under what
// every job uses.
func HomeName(user string) bool { return user != "" && !sharedDirEntries[user] }

// ClusterID returns the cluster id of c: the last segment of its name
// ("projects/p/clusters/c" → "c"; a bare "c" stays "c").
func ClusterID(c *loomv1.Cluster) string {
	name := c.GetName()
	return name[strings.LastIndexByte(name, '/')+1:]
}

// HostPrefix returns the prefix of the hostnames of a node pool's compute
// nodes: the id of the node set over the pool, or the pool id when no node set
// covers it (CONTRACTS: "{nodeset}-{NNNN}"). It does not check that the pool exists.
func HostPrefix(c *loomv1.Cluster, poolID string) string {
	for _, ns := range c.GetOrchestrator().GetSlurm().GetNodeSets() {
		if ns.GetNodePoolId() == poolID && ns.GetId() != "" {
			return ns.GetId()
		}
	}
	return poolID
}

// NodeSetForPool returns the node set over a node pool, if any.
func NodeSetForPool(c *loomv1.Cluster, poolID string) (*loomv1.SlurmNodeSet, bool) {
	for _, ns := range c.GetOrchestrator().GetSlurm().GetNodeSets() {
		if ns.GetNodePoolId() == poolID {
			return ns, true
		}
	}
	return nil, false
}

// Pool returns the node pool with id poolID.
func Pool(c *loomv1.Cluster, poolID string) (*loomv1.NodePool, bool) {
	for _, p := range c.GetCompute().GetNodePools() {
		if p.GetId() == poolID {
			return p, true
		}
	}
	return nil, false
}

// Hostname returns compute node number n (from 1) of a host prefix:
// "{prefix}-{NNNN}", at least four digits ("a3u-0001"; "a3u-10000" past 9999).
func Hostname(prefix string, n int) string {
	return fmt.Sprintf("%s-%04d", prefix, n)
}

// LoginHostname returns login node number n (from 1) of a cluster:
// "{cluster-id}-login-{NNN}".
func LoginHostname(clusterID string, n int) string {
	return fmt.Sprintf("%s-login-%03d", clusterID, n)
}

// ParseHostname splits a compute hostname made by Hostname into its prefix and
// number; ok is false when h does not end in "-" and at least four digits.
func ParseHostname(h string) (prefix string, n int, ok bool) {
	i := strings.LastIndexByte(h, '-')
	if i <= 0 || len(h)-i-1 < 4 {
		return "", 0, false
	}
	digits := h[i+1:]
	for k := 0; k < len(digits); k++ {
		if digits[k] < '0' || digits[k] > '9' {
			return "", 0, false
		}
	}
	v, err := strconv.Atoi(digits)
	if err != nil {
		return "", 0, false
	}
	return h[:i], v, true
}
