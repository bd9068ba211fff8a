// Package spec holds what the provisioner adds to the cluster spec rules of
// libs/clusterspec (which the domain calls directly): node roles, a
// normalizing copy, and the placement choices that are its own (network
// blocks).
package spec

import (
	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/clusterspec"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// Normalize returns a copy of c with every default filled in; c itself is
// not modified.
func Normalize(c *loomv1.Cluster) *loomv1.Cluster {
	out := proto.Clone(c).(*loomv1.Cluster)
	clusterspec.Normalize(out)
	return out
}

// BlockSize is how many nodes of a machine type share a network block
// (topology.conf): 16 for machines with 8 or more GPUs (an A3/A4
// sub-block), 8 for the rest.
func BlockSize(machineType string) int {
	if m, ok := clusterspec.Machine(machineType); ok && m.AcceleratorCount >= 8 {
		return 16
	}
	return 8
}
