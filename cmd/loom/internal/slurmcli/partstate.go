package slurmcli

import (
	"context"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/loom-ml/loom/libs/slurmspec"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// updatePartitionParams is "scontrol update PartitionName=P State=UP|DOWN|
// DRAIN|INACTIVE": the partition's State in the cluster spec, changed by
// UpdateCluster (orchestrator.slurm.partitions, with the spec's etag, so
// that a concurrent change of the spec is not undone), which project and
// cluster administrators may call; it waits for the provisioner to apply
// it. Slurm 22.05's words (scripts/slurm-local.sh) for what it refuses.
func (c *cmd) updatePartitionParams(ctx context.Context, kv map[string]string, order []string) error {
	name := first(kv, "partitionname", "partition")
	state := ""
	for _, key := range order {
		k := strings.ToLower(key)
		switch k {
		case "partitionname", "partition":
		case "state":
			st, ok := slurmspec.ParsePartitionState(kv[k])
			if !ok {
				// Slurm 22.05 prints this, then "slurm_update error: No
				// error", and exits 1.
				return &Error{Code: 1, Text: "scontrol: error: Invalid input: State=" + kv[k] +
					"\nscontrol: error: Acceptable State values are UP, DOWN, DRAIN and INACTIVE\nslurm_update error: No error"}
			}
			state = st
		default:
			return &Error{Code: 1, Text: "Update of this parameter is not supported: " + key + "=" + kv[k] +
				"\nRequest aborted (Loom's scontrol changes a partition's State only; the rest is the cluster spec's: loom clusters update)"}
		}
	}
	if state == "" {
		return &Error{Code: 1, Text: "scontrol: error: No changes specified"}
	}
	cluster, err := c.clusterName(ctx)
	if err != nil {
		return err
	}
	clusters := loomv1.NewClusterServiceClient(c.env.Conn)
	cctx, cancel := c.call(ctx)
	defer cancel()
	cl, err := clusters.GetCluster(cctx, &loomv1.GetClusterRequest{Name: cluster})
	if err != nil {
		return c.rpcError("slurm_update error", err)
	}
	next := proto.Clone(cl).(*loomv1.Cluster)
	next.Status, next.CreateTime, next.UpdateTime = nil, nil, nil
	found := false
	for _, p := range next.GetOrchestrator().GetSlurm().GetPartitions() {
		if p.GetId() == name {
			found = true
			p.State = state
			if state == slurmspec.PartitionUp {
				p.State = ""
			}
		}
	}
	if !found {
		return &Error{Code: 1, Text: "slurm_update error: Invalid partition name specified"}
	}
	op, err := clusters.UpdateCluster(cctx, &loomv1.UpdateClusterRequest{Cluster: next, RequestId: requestID(),
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"orchestrator.slurm.partitions"}}})
	if err != nil {
		if status.Code(err) == codes.PermissionDenied {
			// Slurm's answer to a user who is not an administrator.
			return &Error{Code: 1, Text: "slurm_update error: Invalid user id"}
		}
		return c.rpcError("slurm_update error", err)
	}
	if !op.GetDone() {
		op, err = loomv1.NewOperationServiceClient(c.env.Conn).WaitOperation(cctx, &loomv1.WaitOperationRequest{Name: op.GetName(),
			TimeoutSeconds: int32(max(1, c.env.CallTimeout.Seconds()))})
		if err != nil {
			return c.rpcError("slurm_update error", err)
		}
	}
	if e := op.GetError(); e != nil {
		return &Error{Code: 1, Text: fmt.Sprintf("slurm_update error: %s", e.GetMessage())}
	}
	if !op.GetDone() {
		return &Error{Code: 1, Text: fmt.Sprintf("slurm_update error: partition %s: the update (operation %s) is not applied yet; sinfo shows when it is", name, op.GetName())}
	}
	return nil
}
