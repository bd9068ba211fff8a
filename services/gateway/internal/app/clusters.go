package app

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/loom-ml/loom/libs/clusterspec"
	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/paging"
	"github.com/loom-ml/loom/libs/resname"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/gateway/internal/adapters"
	"github.com/loom-ml/loom/services/gateway/internal/domain"
)

// UpdateCluster merges the request's update_mask paths into the cluster's
// current spec (read from the provisioner), checks the result
// (domain.MergeUpdate) and the capacity a growth needs, and stores a new
// operation together with the UpdateCluster command (the whole merged spec,
// the updatable paths it sets, the drain grace). An update that changes
// nothing is answered with an operation that is already done, and emits
// nothing. A retry with the same request_id returns the first call's
// operation. A cluster.etag that is set and is not the cluster's is
// refused with ABORTED, here and again by the provisioner when it decides.
func (g *Gateway) UpdateCluster(ctx context.Context, req *loomv1.UpdateClusterRequest) (*loomv1.Operation, error) {
	kind, rid, fp := adapters.RequestUpdateCluster, req.GetRequestId(), domain.RequestFingerprint(req)
	if op, ok, err := g.replayOperation(ctx, kind, rid, fp); err != nil || ok {
		return op, err
	}
	if err := domain.CheckUpdateRequest(req); err != nil {
		return nil, err
	}
	name := req.GetCluster().GetName()
	current, err := g.own.Clusters.GetCluster(ctx, &loomv1.GetClusterRequest{Name: name})
	if err != nil {
		if isNotFound(err) {
			return nil, fmt.Errorf("cluster %s: %w", name, errs.NotFound)
		}
		return nil, fmt.Errorf("ask the provisioner for %s: %w", name, err)
	}
	// The fast answer to a stale etag; the provisioner checks it again
	// when it decides, against the spec it then has (another update may
	// land between this read and that decision).
	if err := clusterspec.CheckEtag("update", name, req.GetCluster().GetEtag(), current.GetEtag()); err != nil {
		return nil, err
	}
	up, err := domain.MergeUpdate(req, current)
	if err != nil {
		return nil, err
	}
	cluster, _ := resname.ParseCluster(name)
	op := domain.NewOperation(resname.Operation{Project: cluster.Project, ID: envelope.NewID()}.String(), domain.VerbUpdate, name, g.now())
	if !up.Changed {
		return g.startOperation(ctx, kind, rid, fp, domain.Unchanged(op, current, g.now()))
	}
	if err := g.checkClusterQuota(ctx, up.Cluster); err != nil {
		return nil, err
	}
	if err := g.checkCapacity(ctx, cluster.Parent().String(), up.Current, up.Cluster); err != nil {
		return nil, err
	}
	cmd, err := route(ctx, name, &eventsv1.UpdateCluster{
		Operation: op.GetName(), Cluster: up.Cluster, UpdateMask: up.Mask, DrainGraceSeconds: up.DrainGraceSeconds,
		Etag: req.GetCluster().GetEtag(),
	})
	if err != nil {
		return nil, err
	}
	return g.startOperation(ctx, kind, rid, fp, op, cmd)
}

// checkCapacity is the fast capacity answer for a cluster that goes from
// current (nil: a new one) to next, from the provisioner's ListCapacity of
// parent. A provisioner that does not serve ListCapacity is left to decide
// alone.
func (g *Gateway) checkCapacity(ctx context.Context, parent string, current, next *loomv1.Cluster) error {
	var pools []*loomv1.CapacityPool
	err := paging.Each(func(token string) (string, error) {
		resp, err := g.own.Reservations.ListCapacity(ctx, &loomv1.ListCapacityRequest{Parent: parent,
			PageSize: paging.MaxSize, PageToken: token})
		pools = append(pools, resp.GetPools()...)
		return resp.GetNextPageToken(), err
	})
	if status.Code(err) == codes.Unimplemented {
		g.opt.Log.DebugContext(ctx, "the provisioner does not serve ListCapacity; capacity not pre-checked")
		return nil
	}
	if err != nil {
		return fmt.Errorf("ask the provisioner for capacity: %w", err)
	}
	return domain.CheckCapacity(current, next, pools)
}

// GetSlurmConfig reads a cluster's rendered Slurm files from the provisioner.
func (g *Gateway) GetSlurmConfig(ctx context.Context, req *loomv1.GetSlurmConfigRequest) (*loomv1.SlurmConfig, error) {
	if _, err := resname.ParseCluster(req.GetName()); err != nil {
		return nil, errs.Invalid("name", "%v", err)
	}
	return g.own.Clusters.GetSlurmConfig(ctx, req)
}
