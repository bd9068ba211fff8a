package app

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/paging"
	"github.com/loom-ml/loom/libs/resname"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/gateway/internal/domain"
)

// checkClusterName checks the cluster field of the Slurm reads and updates.
func checkClusterName(name string) error {
	if _, err := resname.ParseCluster(name); err != nil {
		return errs.Invalid("cluster", "%v", err)
	}
	return nil
}

// ListPartitions lists a cluster's Slurm partitions from the scheduler (sinfo).
func (g *Gateway) ListPartitions(ctx context.Context, req *loomv1.ListPartitionsRequest) (*loomv1.ListPartitionsResponse, error) {
	if err := checkClusterName(req.GetCluster()); err != nil {
		return nil, err
	}
	resp, err := g.own.Slurm.ListPartitions(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("ask the scheduler for the partitions of %s: %w", req.GetCluster(), err)
	}
	return resp, nil
}

// ListShares lists a cluster's fair-share standing from the scheduler
// (sshare).
func (g *Gateway) ListShares(ctx context.Context, req *loomv1.ListSharesRequest) (*loomv1.ListSharesResponse, error) {
	if err := checkClusterName(req.GetCluster()); err != nil {
		return nil, err
	}
	resp, err := g.own.Slurm.ListShares(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("ask the scheduler for the shares of %s: %w", req.GetCluster(), err)
	}
	return resp, nil
}

// ListSlurmNodes lists a cluster's nodes as Slurm sees them, from the
// scheduler (sinfo -N, scontrol show node).
func (g *Gateway) ListSlurmNodes(ctx context.Context, req *loomv1.ListSlurmNodesRequest) (*loomv1.ListSlurmNodesResponse, error) {
	if err := checkClusterName(req.GetCluster()); err != nil {
		return nil, err
	}
	resp, err := g.own.Slurm.ListSlurmNodes(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("ask the scheduler for the nodes of %s: %w", req.GetCluster(), err)
	}
	return resp, nil
}

// UpdateSlurmNode drains or resumes a node (scontrol update NodeName=...
// State=DRAIN Reason=... | State=RESUME): it checks the request (a DRAIN
// needs a reason, as in Slurm), that the scheduler knows the node
// (NotFound otherwise), emits UpdateSlurmNode on loom.job.commands.v1 and
// returns the node as the scheduler has it. A DRAIN also has health hold
// the node (ACTION_DRAIN, as `loom nodes drain`). A RESUME puts the node back
// in service whoever took it out: when health holds it (drained by an
// operator or a fault, quarantined, down), health's ACTION_RESUME goes in
// the same Apply, as `loom nodes resume` does; without it the node would
// stay drained and scontrol would say nothing.
func (g *Gateway) UpdateSlurmNode(ctx context.Context, req *loomv1.UpdateSlurmNodeRequest) (*loomv1.SlurmNode, error) {
	state, err := domain.ValidateUpdateSlurmNode(req)
	if err != nil {
		return nil, err
	}
	var node *loomv1.SlurmNode
	err = paging.Each(func(token string) (string, error) {
		nodes, err := g.own.Slurm.ListSlurmNodes(ctx, &loomv1.ListSlurmNodesRequest{Cluster: req.GetCluster(),
			PageSize: paging.MaxSize, PageToken: token})
		for _, n := range nodes.GetNodes() {
			if n.GetHostname() == req.GetHostname() {
				node = n
			}
		}
		return nodes.GetNextPageToken(), err
	})
	if err != nil {
		if isNotFound(err) {
			return nil, fmt.Errorf("cluster %s: %w", req.GetCluster(), errs.NotFound)
		}
		return nil, fmt.Errorf("ask the scheduler for the nodes of %s: %w", req.GetCluster(), err)
	}
	if node == nil {
		return nil, fmt.Errorf("node %s in %s: %w", req.GetHostname(), req.GetCluster(), errs.NotFound)
	}
	// Who drained it (sinfo -R's USER) is the principal, never req.user.
	cl, _ := resname.ParseCluster(req.GetCluster())
	by := callerIn(ctx, cl.Project)
	user := by.User
	if user == "" {
		user = by.Name
	}
	cmds := []proto.Message{&eventsv1.UpdateSlurmNode{Cluster: req.GetCluster(), Hostname: req.GetHostname(), State: state, Reason: req.GetReason(),
		User: user, Time: timestamppb.New(g.now())}}
	switch _, withHealth := g.health(); {
	case state == "RESUME" && healthHolds(g.nodeHealth(ctx, req.GetCluster(), req.GetHostname())):
		cmds = append(cmds, &eventsv1.UpdateNodeRemediation{Cluster: req.GetCluster(), Hostname: req.GetHostname(),
			Action: loomv1.RemediationAction_ACTION_RESUME, Reason: "resumed with scontrol", User: user})
	case state == "DRAIN" && withHealth == nil:
		// A drain is one thing however it is asked: health holds the node
		// as after `loom nodes drain` (loom health nodes and its history
		// show it; no repair's end puts it back), in the same Apply.
		hr := &loomv1.UpdateNodeRemediationRequest{Cluster: req.GetCluster(), Hostname: req.GetHostname(),
			Action: loomv1.RemediationAction_ACTION_DRAIN, Reason: req.GetReason()}
		if err := domain.ValidateUpdateNodeRemediation(hr); err != nil {
			return nil, err
		}
		cmds = append(cmds, &eventsv1.UpdateNodeRemediation{Cluster: hr.GetCluster(), Hostname: hr.GetHostname(),
			Action: hr.GetAction(), Reason: hr.GetReason(), User: user})
	}
	if err := g.emitCommands(ctx, req.GetCluster(), cmds...); err != nil {
		return nil, fmt.Errorf("update node %s: %w", req.GetHostname(), err)
	}
	g.opt.Log.InfoContext(ctx, "node update requested", "cluster", req.GetCluster(), "node", req.GetHostname(), "state", state, "reason", req.GetReason(), "by", by.Name)
	return node, nil
}

// healthHolds reports whether health keeps the node out of service (or is
// about to: a suspect node awaits its confirming check), as far as its
// view nh says; nil (health did not answer) is no.
func healthHolds(nh *loomv1.NodeHealth) bool {
	switch nh.GetState() {
	case loomv1.RemediationState_REMEDIATION_STATE_UNSPECIFIED, loomv1.RemediationState_NODE_HEALTHY:
		return false
	}
	return true
}
