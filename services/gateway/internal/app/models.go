package app

import (
	"context"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/gateway/internal/domain"
)

// ---- models ----
//
// The registry owns models and checks every name, field and bound itself
// (its errors name the field); the authorization table (internal/authz)
// has checked the caller's role in the project of the request's name or
// parent before these run, and the audit interceptor records each change.

// ListModels lists a project's models from the registry.
func (g *Gateway) ListModels(ctx context.Context, req *loomv1.ListModelsRequest) (*loomv1.ListModelsResponse, error) {
	return g.own.Models.ListModels(ctx, req)
}

// GetModel reads one version of a model from the registry.
func (g *Gateway) GetModel(ctx context.Context, req *loomv1.GetModelRequest) (*loomv1.Model, error) {
	return g.own.Models.GetModel(ctx, req)
}

// ListModelVersions lists a model's versions from the registry.
func (g *Gateway) ListModelVersions(ctx context.Context, req *loomv1.ListModelVersionsRequest) (*loomv1.ListModelVersionsResponse, error) {
	return g.own.Models.ListModelVersions(ctx, req)
}

// UploadModel registers a version with the registry; it answers once
// stored. The registry decides a retry: the same request_id in the same
// project answers the first call's version. The id is bounded here too, as
// every request_id the gateway takes.
func (g *Gateway) UploadModel(ctx context.Context, req *loomv1.UploadModelRequest) (*loomv1.UploadModelResponse, error) {
	if err := domain.CheckRequestID(req.GetRequestId()); err != nil {
		return nil, err
	}
	return g.own.Models.UploadModel(ctx, req)
}

// UpdateModel changes a model's or a version's masked fields.
func (g *Gateway) UpdateModel(ctx context.Context, req *loomv1.UpdateModelRequest) (*loomv1.Model, error) {
	return g.own.Models.UpdateModel(ctx, req)
}

// MergeVersionAliases adds and removes a version's aliases.
func (g *Gateway) MergeVersionAliases(ctx context.Context, req *loomv1.MergeVersionAliasesRequest) (*loomv1.Model, error) {
	return g.own.Models.MergeVersionAliases(ctx, req)
}

// DeleteModel deletes a model and its versions.
func (g *Gateway) DeleteModel(ctx context.Context, req *loomv1.DeleteModelRequest) (*loomv1.DeleteModelResponse, error) {
	return g.own.Models.DeleteModel(ctx, req)
}

// DeleteModelVersion deletes one version (not the only one, not the default).
func (g *Gateway) DeleteModelVersion(ctx context.Context, req *loomv1.DeleteModelVersionRequest) (*loomv1.DeleteModelResponse, error) {
	return g.own.Models.DeleteModelVersion(ctx, req)
}

// ExportModel copies a version's artifacts to a destination prefix.
func (g *Gateway) ExportModel(ctx context.Context, req *loomv1.ExportModelRequest) (*loomv1.ExportModelResponse, error) {
	return g.own.Models.ExportModel(ctx, req)
}
