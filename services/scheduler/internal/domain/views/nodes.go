package views

import (
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/clusterspec"
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
	// State is the spec's: "" (UP), DOWN, DRAIN or INACTIVE.
	State string
}

// NodeRow is a node as sinfo -N shows it: placement's view of it (its
// partitions, what is free, how many runs) and the states placement does
// not read.
type NodeRow struct {
	View place.NodeView
	// Features are its node set's.
	Features []string
	// Down: the node can no longer run work; DownReason says why.
	// AdminDown: scontrol set it DOWN (its reason is AdminReason).
	Down       bool
	DownReason string
	AdminDown  bool
	// Reason is the provisioner's reason for the node's state.
	Reason string
	// AdminReason, AdminReasonUser and AdminReasonTime are scontrol's drain
	// or down Reason= (sinfo -R).
	AdminReason     string
	AdminReasonUser string
	AdminReasonTime time.Time
	// Health is what health (and the repairs it asked for) make of the
	// node's Slurm state.
	Health NodeHealth
}

// NodeHealth is health's part in a node's Slurm state: whether health took
// the node out (Out) and, if so, whether Slurm shows it drained (Drain: a
// checkpoint-first fault, or health draining it before a repair) or
// rebooting (RebootRequested: health asked for a reboot or reimage the
// provisioner has not begun; RebootIssued: the provisioner is rebooting or
// reimaging it); Reason, SetBy and Time are health's (sinfo -R).
type NodeHealth struct {
	Out, Drain, RebootRequested, RebootIssued bool
	// NotResponding: health lost touch with the node (unreachable), which
	// is not a verdict on it: the state stays what runs there says, with
	// Slurm's NOT_RESPONDING flag.
	NotResponding bool
	Reason, SetBy string
	Time          time.Time
}

// Partitions returns the cluster's partitions as sinfo shows them: nodes,
// GPU totals and allocations, state: the partition's ("up", "down",
// "drain", "inactive"), down when the cluster cannot take work; nil for an
// unknown cluster.
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
		if pt.State != "" {
			lp.State = strings.ToLower(pt.State)
		}
		if !t.Schedulable {
			lp.State = "down"
		}
		for k := range t.Nodes {
			v := &t.Nodes[k].View
			if v.Node.Role == clusterspec.RoleLogin || !v.InPartition(i) {
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
// drained (by scontrol, by the provisioner for removal, or by health) with
// or without jobs; REBOOT_REQUESTED and REBOOT_ISSUED while health has a
// reboot (or reimage) asked or under way; DOWN when it cannot run work.
// Health's states carry its reason, who set it (set_by) and when; a node
// health cannot reach keeps its state with not_responding set. nil for an
// unknown cluster.
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
		if n.Role == clusterspec.RoleLogin {
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
		hr := row.Health
		sn.NotResponding = hr.NotResponding
		healthReason := func(state loomv1.SlurmNode_State) {
			sn.State, sn.Reason, sn.ReasonUser = state, hr.Reason, hr.SetBy
			if sn.Reason == "" {
				sn.Reason = row.Reason
			}
			if !hr.Time.IsZero() {
				sn.ReasonTime = timestamppb.New(hr.Time)
			}
		}
		switch {
		case hr.RebootIssued:
			healthReason(loomv1.SlurmNode_REBOOT_ISSUED)
		case hr.RebootRequested:
			healthReason(loomv1.SlurmNode_REBOOT_REQUESTED)
		case hr.Drain && busy:
			healthReason(loomv1.SlurmNode_DRAINING)
		case hr.Drain:
			healthReason(loomv1.SlurmNode_DRAINED)
		case row.Down && hr.Out:
			healthReason(loomv1.SlurmNode_DOWN)
		case row.Down && row.AdminDown && !hr.Out:
			sn.State, sn.Reason, sn.ReasonUser = loomv1.SlurmNode_DOWN, row.AdminReason, row.AdminReasonUser
			if !row.AdminReasonTime.IsZero() {
				sn.ReasonTime = timestamppb.New(row.AdminReasonTime)
			}
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
		if hr.NotResponding && sn.Reason == "" {
			// Why health lost touch, for scontrol show node (sinfo -R lists
			// only nodes taken out).
			sn.Reason, sn.ReasonUser = hr.Reason, hr.SetBy
			if !hr.Time.IsZero() {
				sn.ReasonTime = timestamppb.New(hr.Time)
			}
		}
		out = append(out, sn)
	}
	return out
}
