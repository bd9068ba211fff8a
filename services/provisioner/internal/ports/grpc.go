// Package ports connects the provisioner's app to the outside: the gRPC read
// API and the bus handler.
package ports

import (
	"context"
	"fmt"

	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/paging"
	"github.com/loom-ml/loom/libs/resname"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/provisioner/internal/app"
)

// ClusterServer serves loom.v1.ClusterService reads from memory. Create and
// Delete answer Unimplemented: the gateway owns them.
type ClusterServer struct {
	loomv1.UnimplementedClusterServiceServer
	App *app.App
}

// GetCluster returns one cluster, NotFound when it does not exist.
func (s *ClusterServer) GetCluster(_ context.Context, req *loomv1.GetClusterRequest) (*loomv1.Cluster, error) {
	if _, err := resname.SplitCluster(req.GetName()); err != nil {
		return nil, errs.Invalid("name", "%v", err)
	}
	c, ok := s.App.Cluster(req.GetName())
	if !ok {
		return nil, fmt.Errorf("cluster %s: %w", req.GetName(), errs.NotFound)
	}
	return c, nil
}

// ListClusters returns one page (AIP-158, libs/paging) of the clusters of a
// project ("projects/-": all), by name.
func (s *ClusterServer) ListClusters(_ context.Context, req *loomv1.ListClustersRequest) (*loomv1.ListClustersResponse, error) {
	p, err := resname.SplitProject(req.GetParent())
	if err != nil {
		return nil, errs.Invalid("parent", "%v", err)
	}
	page, next, err := paging.List(req, s.App.Clusters(p.ID), (*loomv1.Cluster).GetName)
	if err != nil {
		return nil, err
	}
	return &loomv1.ListClustersResponse{Clusters: page, NextPageToken: next}, nil
}

// GetSlurmConfig returns the cluster's rendered slurm.conf, gres.conf and
// topology.conf: NotFound for a missing cluster, FailedPrecondition when
// its files could not be rendered (the message says why).
func (s *ClusterServer) GetSlurmConfig(_ context.Context, req *loomv1.GetSlurmConfigRequest) (*loomv1.SlurmConfig, error) {
	if _, err := resname.SplitCluster(req.GetName()); err != nil {
		return nil, errs.Invalid("name", "%v", err)
	}
	cfg, cond, ok := s.App.SlurmConfig(req.GetName())
	if !ok {
		return nil, fmt.Errorf("cluster %s: %w", req.GetName(), errs.NotFound)
	}
	if cfg == nil {
		why := "not rendered yet"
		if cond != nil && cond.GetMessage() != "" {
			why = cond.GetMessage()
		}
		return nil, fmt.Errorf("slurm configuration of %s: %s: %w", req.GetName(), why, errs.FailedPrecondition)
	}
	return cfg, nil
}

// ReservationServer serves loom.v1.ReservationService reads from memory.
// Create and Delete answer Unimplemented: the gateway owns them.
type ReservationServer struct {
	loomv1.UnimplementedReservationServiceServer
	App *app.App
}

// GetReservation returns one reservation with what clusters claim of it.
func (s *ReservationServer) GetReservation(_ context.Context, req *loomv1.GetReservationRequest) (*loomv1.Reservation, error) {
	if _, err := resname.SplitReservation(req.GetName()); err != nil {
		return nil, errs.Invalid("name", "%v", err)
	}
	r, ok := s.App.Reservation(req.GetName())
	if !ok {
		return nil, fmt.Errorf("reservation %s: %w", req.GetName(), errs.NotFound)
	}
	return r, nil
}

// ListReservations returns one page (AIP-158) of the reservations of a
// project ("projects/-": all), by name.
func (s *ReservationServer) ListReservations(_ context.Context, req *loomv1.ListReservationsRequest) (*loomv1.ListReservationsResponse, error) {
	p, err := resname.SplitProject(req.GetParent())
	if err != nil {
		return nil, errs.Invalid("parent", "%v", err)
	}
	page, next, err := paging.List(req, s.App.Reservations(p.ID), (*loomv1.Reservation).GetName)
	if err != nil {
		return nil, err
	}
	return &loomv1.ListReservationsResponse{Reservations: page, NextPageToken: next}, nil
}

// ListCapacity returns one page (AIP-158) of the capacity pools, what is in use and what is free:
// the configured ones (wildcard rules with "*" zone or machine type, and
// each claimed combination they cover) and the project's reservations.
func (s *ReservationServer) ListCapacity(_ context.Context, req *loomv1.ListCapacityRequest) (*loomv1.ListCapacityResponse, error) {
	p, err := resname.SplitProject(req.GetParent())
	if err != nil {
		return nil, errs.Invalid("parent", "%v", err)
	}
	page, next, err := paging.Ordered(req, s.App.Capacity(p.ID))
	if err != nil {
		return nil, err
	}
	return &loomv1.ListCapacityResponse{Pools: page, NextPageToken: next}, nil
}

// NodeServer serves loom.v1.NodeService from memory.
type NodeServer struct {
	loomv1.UnimplementedNodeServiceServer
	App *app.App
}

// ListNodes returns one page (AIP-158) of the nodes of a cluster, by name; "projects/p/clusters/-"
// lists every cluster's nodes in project p ("projects/-/clusters/-": all).
// An unknown cluster has no nodes (an empty list, not NotFound), so that a
// deleted cluster reads consistently.
func (s *NodeServer) ListNodes(_ context.Context, req *loomv1.ListNodesRequest) (*loomv1.ListNodesResponse, error) {
	c, err := resname.SplitCluster(req.GetParent())
	if err != nil {
		return nil, errs.Invalid("parent", "%v (the cluster may be -: every cluster of the project)", err)
	}
	page, next, err := paging.List(req, s.App.Nodes(c.Project, c.ID), (*loomv1.Node).GetName)
	if err != nil {
		return nil, err
	}
	return &loomv1.ListNodesResponse{Nodes: page, NextPageToken: next}, nil
}
