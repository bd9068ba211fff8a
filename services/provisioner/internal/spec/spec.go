// Package spec is the provisioner's one seam to the cluster spec rules in
// libs/clusterspec (defaults, validation, the machine catalog, node naming)
// plus the few placement choices that are the provisioner's own (network
// blocks). The domain calls only this package.
package spec

import (
	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/clusterspec"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// Role values of loomv1.Node.role.
const (
	RoleCompute = "compute"
	RoleLogin   = "login"
)

// DefaultZone is the zone of a cluster whose spec names none.
const DefaultZone = clusterspec.DefaultZone

// Validate checks a cluster spec as given (before Normalize), reporting every
// problem with its field path as an *errs.InvalidError.
func Validate(c *loomv1.Cluster) error { return clusterspec.Validate(c) }

// Normalize returns a copy of c with every default filled in; c itself is
// not modified.
func Normalize(c *loomv1.Cluster) *loomv1.Cluster {
	out := proto.Clone(c).(*loomv1.Cluster)
	clusterspec.Normalize(out)
	return out
}

// ApplyUpdate returns the normalized spec that results from updating old
// with new under mask (empty: new is the whole new spec), or an
// *errs.InvalidError naming every field that may not change or is invalid.
func ApplyUpdate(old, new *loomv1.Cluster, mask []string) (*loomv1.Cluster, error) {
	return clusterspec.ApplyUpdate(old, new, mask)
}

// LookupMachine returns the catalog's entry for a machine type.
func LookupMachine(machineType string) (clusterspec.MachineType, bool) {
	return clusterspec.Machine(machineType)
}

// NodePrefix is the prefix of a pool's compute hostnames: the id of the
// node set over the pool, else the pool id.
func NodePrefix(c *loomv1.Cluster, pool string) string { return clusterspec.HostPrefix(c, pool) }

// ComputeHostname is the hostname of the n-th node (from 1) with a prefix.
func ComputeHostname(prefix string, n int) string { return clusterspec.Hostname(prefix, n) }

// LoginHostname is the hostname of a cluster's n-th login node (from 1).
func LoginHostname(clusterID string, n int) string { return clusterspec.LoginHostname(clusterID, n) }

// BlockSize is how many nodes of a machine type share a network block
// (topology.conf): 16 for machines with 8 or more GPUs (an A3/A4
// sub-block), 8 for the rest.
func BlockSize(machineType string) int {
	if m, ok := clusterspec.Machine(machineType); ok && m.AcceleratorCount >= 8 {
		return 16
	}
	return 8
}
