// Package ports exposes the registry: its gRPC read API (loom.v1.ModelService).
package ports

import (
	"context"

	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/paging"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/registry/internal/app"
)

// ModelServer serves loom.v1.ModelService from the registry's memory.
type ModelServer struct {
	loomv1.UnimplementedModelServiceServer
	reg *app.Registry
}

// NewModelServer returns a ModelService over reg.
func NewModelServer(reg *app.Registry) *ModelServer { return &ModelServer{reg: reg} }

// ListModels lists one page (AIP-158, libs/paging) of a project's models, by
// name.
func (s *ModelServer) ListModels(_ context.Context, req *loomv1.ListModelsRequest) (*loomv1.ListModelsResponse, error) {
	ms, err := s.reg.ListModels(req.GetParent())
	if err != nil {
		return nil, errs.ToStatus(err)
	}
	page, next, err := paging.List(req, ms, (*loomv1.Model).GetName)
	if err != nil {
		return nil, errs.ToStatus(err)
	}
	return &loomv1.ListModelsResponse{Models: page, NextPageToken: next}, nil
}

// GetModel returns one model; NotFound when unknown.
func (s *ModelServer) GetModel(_ context.Context, req *loomv1.GetModelRequest) (*loomv1.Model, error) {
	m, err := s.reg.GetModel(req.GetName())
	return m, errs.ToStatus(err)
}

// ListModelVersions lists one page (AIP-158) of a model's versions, in
// version order; NotFound when the model is unknown.
func (s *ModelServer) ListModelVersions(_ context.Context, req *loomv1.ListModelVersionsRequest) (*loomv1.ListModelVersionsResponse, error) {
	vs, err := s.reg.ListVersions(req.GetParent())
	if err != nil {
		return nil, errs.ToStatus(err)
	}
	page, next, err := paging.List(req, vs, func(v *loomv1.ModelVersion) string { return paging.IndexKey(int(v.GetVersion())) })
	if err != nil {
		return nil, errs.ToStatus(err)
	}
	return &loomv1.ListModelVersionsResponse{Versions: page, NextPageToken: next}, nil
}
