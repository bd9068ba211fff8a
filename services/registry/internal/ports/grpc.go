// Package ports exposes the registry: its gRPC API (loom.v1.ModelService).
package ports

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/loom-ml/loom/libs/blobstore"
	"github.com/loom-ml/loom/libs/errs"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/registry/internal/app"
)

// ModelServer serves loom.v1.ModelService: reads from the registry's memory,
// changes through its store (app.Registry). Every error goes through
// errs.ToStatus.
type ModelServer struct {
	loomv1.UnimplementedModelServiceServer
	reg *app.Registry
}

// NewModelServer returns a ModelService over reg.
func NewModelServer(reg *app.Registry) *ModelServer { return &ModelServer{reg: reg} }

// UploadModel registers a version (app.Registry.UploadModel) and answers
// the operation done (the registry's RPC is synchronous; the gateway's
// UploadModel is the long-running one, run by the UploadModel command). An
// error is answered as the RPC's status, not inside the operation.
func (s *ModelServer) UploadModel(ctx context.Context, req *loomv1.UploadModelRequest) (*loomv1.Operation, error) {
	resp, err := s.reg.UploadModel(ctx, req)
	if err != nil {
		return nil, errs.ToStatus(err)
	}
	return &loomv1.Operation{Done: true, Metadata: &loomv1.OperationMetadata{Target: req.GetParent(), Verb: "upload", Progress: "done"},
		Result: &loomv1.Operation_UploadModel{UploadModel: resp}}, nil
}

// ListModels lists one page (AIP-158, libs/paging) of a project's models.
func (s *ModelServer) ListModels(_ context.Context, req *loomv1.ListModelsRequest) (*loomv1.ListModelsResponse, error) {
	resp, err := s.reg.ListModels(req)
	return resp, errs.ToStatus(err)
}

// GetModel returns one version of a model; NotFound when unknown.
func (s *ModelServer) GetModel(_ context.Context, req *loomv1.GetModelRequest) (*loomv1.Model, error) {
	m, err := s.reg.GetModel(req.GetName())
	return m, errs.ToStatus(err)
}

// ListModelVersions lists one page of a model's versions.
func (s *ModelServer) ListModelVersions(_ context.Context, req *loomv1.ListModelVersionsRequest) (*loomv1.ListModelVersionsResponse, error) {
	resp, err := s.reg.ListModelVersions(req)
	return resp, errs.ToStatus(err)
}

// UpdateModel changes the masked fields.
func (s *ModelServer) UpdateModel(ctx context.Context, req *loomv1.UpdateModelRequest) (*loomv1.Model, error) {
	m, err := s.reg.UpdateModel(ctx, req)
	return m, errs.ToStatus(err)
}

// MergeVersionAliases adds and removes aliases of one version.
func (s *ModelServer) MergeVersionAliases(ctx context.Context, req *loomv1.MergeVersionAliasesRequest) (*loomv1.Model, error) {
	m, err := s.reg.MergeVersionAliases(ctx, req)
	return m, errs.ToStatus(err)
}

// DeleteModel deletes a model and its versions.
func (s *ModelServer) DeleteModel(ctx context.Context, req *loomv1.DeleteModelRequest) (*loomv1.DeleteModelResponse, error) {
	if err := s.reg.DeleteModel(ctx, req.GetName()); err != nil {
		return nil, errs.ToStatus(err)
	}
	return &loomv1.DeleteModelResponse{}, nil
}

// DeleteModelVersion deletes one version.
func (s *ModelServer) DeleteModelVersion(ctx context.Context, req *loomv1.DeleteModelVersionRequest) (*loomv1.DeleteModelResponse, error) {
	if err := s.reg.DeleteModelVersion(ctx, req.GetName(), req.GetForce()); err != nil {
		return nil, errs.ToStatus(err)
	}
	return &loomv1.DeleteModelResponse{}, nil
}

// ExportModel copies a version's artifacts and answers the operation done
// (the registry's RPC is synchronous; the gateway's ExportModel is the
// long-running one, run by the ExportModel command). An error is answered
// as the RPC's status, not inside the operation. With validate_only it runs
// the checks only (app.Registry.CheckExport) and answers a done operation
// of no name and no result.
func (s *ModelServer) ExportModel(ctx context.Context, req *loomv1.ExportModelRequest) (*loomv1.Operation, error) {
	if req.GetValidateOnly() {
		// The checks only: a done operation of no name and no result.
		if err := s.reg.CheckExport(req); err != nil {
			return nil, errs.ToStatus(err)
		}
		return &loomv1.Operation{Done: true, Metadata: &loomv1.OperationMetadata{Target: req.GetName(), Verb: "export", Progress: "validated"}}, nil
	}
	resp, err := s.reg.ExportModel(ctx, req)
	if errors.Is(err, blobstore.ErrUnimplemented) {
		return nil, status.Error(codes.Unimplemented, err.Error())
	}
	if err != nil {
		return nil, errs.ToStatus(err)
	}
	return &loomv1.Operation{Done: true, Metadata: &loomv1.OperationMetadata{Target: req.GetName(), Verb: "export", Progress: "done"},
		Result: &loomv1.Operation_ExportModel{ExportModel: resp}}, nil
}
