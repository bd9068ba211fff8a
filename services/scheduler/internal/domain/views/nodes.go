package views

import (
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/scheduler/internal/domain/place"
)

// NodeSource is what sinfo's views read of the state.
type NodeSource interface {
	// NodeTable returns the cluster's partitions and nodes as a pass sees
	// them now; ok is false for a cluster the state does not know.
	NodeTable(cluster string) (t ClusterTable, ok bool)
}

// ClusterTable is a cluster's partitions and nodes, in hostname order.
type ClusterTable struct {
	// Schedulable: the cluster can take work (else its partitions are down).
	Schedulable bool
	Partitions  []Partition
	Nodes       []NodeRow
}

// Partition is a partition as sinfo shows it.
type Partition struct {
	Name    string
	Default bool
	// MaxTime is as written ("" UNLIMITED); Tier its PriorityTier.
	MaxTime string
	Tier    int32
}

// NodeRow is a node as sinfo -N shows it: placement's view of it (its
// partitions, what is free, how many runs) and the states placement does
// not read.
type NodeRow struct {
	View place.NodeView
	// Features are its node set's.
	Features []string
	// Down: the node can no longer run work; DownReason says why.
	Down       bool
	DownReason string
	// Reason is the provisioner's reason for the node's state.
	Reason string
	// AdminReason, AdminReasonUser and AdminReasonTime are scontrol's drain
	// Reason= (sinfo -R).
	AdminReason     string
	AdminReasonUser string
	AdminReasonTime time.Time
}

// Partitions returns the cluster's partitions as sinfo shows them: nodes,
// GPU totals and allocations, state up (down when the cluster cannot take
// work); nil for an unknown cluster.
func Partitions(src NodeSource, cluster string) []*loomv1.Partition {
	t, ok := src.NodeTable(cluster)
	if !ok {
		return nil
	}
	var out []*loomv1.Partition
	for i, pt := range t.Partitions {
		lp := &loomv1.Partition{Name: pt.Name, Cluster: cluster, Default: pt.Default, State: "up",
			MaxTime: pt.MaxTime, PriorityTier: pt.Tier}
		if lp.MaxTime == "" {
			lp.MaxTime = "UNLIMITED"
		}
		if !t.Schedulable {
			lp.State = "down"
		}
		for k := range t.Nodes {
			v := &t.Nodes[k].View
			if v.Node.Role == place.RoleLogin || !v.InPartition(i) {
				continue
			}
			lp.Nodes = append(lp.Nodes, v.Node.Hostname)
			lp.TotalGpus += v.Node.GPUs
			lp.AllocGpus += v.Node.GPUs - v.FreeGPUs
		}
		out = append(out, lp)
	}
	return out
}

// SlurmNodes returns the cluster's compute nodes as sinfo -N shows them:
// IDLE, MIXED or ALLOCATED by what runs there; DRAINING or DRAINED when
// drained (by scontrol, or by the provisioner for removal) with or without
// jobs; DOWN when it cannot run work. nil for an unknown cluster.
func SlurmNodes(src NodeSource, cluster string) []*loomv1.SlurmNode {
	t, ok := src.NodeTable(cluster)
	if !ok {
		return nil
	}
	var out []*loomv1.SlurmNode
	for k := range t.Nodes {
		row := &t.Nodes[k]
		v := &row.View
		n := v.Node
		if n.Role == place.RoleLogin {
			continue
		}
		sn := &loomv1.SlurmNode{Hostname: n.Hostname, Node: n.Name, Cluster: cluster, Gpus: n.GPUs,
			AllocGpus: n.GPUs - v.FreeGPUs, GpuType: n.GresType, Cpus: n.CPUs, MemoryMb: n.MemoryMB,
			Block: n.Block, Features: row.Features}
		if n.CPUs > 0 {
			sn.AllocCpus = n.CPUs - v.FreeCPUs
		}
		for i, pt := range t.Partitions {
			if v.InPartition(i) {
				sn.Partitions = append(sn.Partitions, pt.Name)
			}
		}
		busy := v.Runs > 0
		full := v.Exclusive || (n.GPUs > 0 && v.FreeGPUs == 0) || (n.CPUs > 0 && v.FreeCPUs <= 0)
		switch {
		case row.Down:
			sn.State, sn.Reason = loomv1.SlurmNode_DOWN, strings.TrimPrefix(row.DownReason, "node "+n.Hostname+" down: ")
		case n.AdminDrain || n.Draining():
			sn.State = loomv1.SlurmNode_DRAINED
			if busy {
				sn.State = loomv1.SlurmNode_DRAINING
			}
			sn.Reason = row.AdminReason
			if n.AdminDrain {
				sn.ReasonUser = row.AdminReasonUser
				if !row.AdminReasonTime.IsZero() {
					sn.ReasonTime = timestamppb.New(row.AdminReasonTime)
				}
			} else {
				sn.Reason = row.Reason
				if sn.Reason == "" {
					sn.Reason = "node is being removed"
				}
			}
		case !busy:
			sn.State = loomv1.SlurmNode_IDLE
		case full:
			sn.State = loomv1.SlurmNode_ALLOCATED
		default:
			sn.State = loomv1.SlurmNode_MIXED
		}
		out = append(out, sn)
	}
	return out
}
