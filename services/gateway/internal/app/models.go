package app

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/auth"
	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/resname"
	"github.com/loom-ml/loom/libs/termtext"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/gateway/internal/adapters"
	"github.com/loom-ml/loom/services/gateway/internal/authz"
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

// maxParentModelBytes bounds UploadModel's parent_model
// ("projects/{p}/locations/{l}/models/{m}" or without the location), which
// keys the command's record; the registry parses it.
const maxParentModelBytes = 512

// UploadModel starts an operation that registers a model version, as
// Vertex's UploadModel: the operation (verb "upload", target the parent) is
// stored together with the registry's UploadModel command in one Apply, the
// command's request_id being the operation's name (so the registry's
// request-id dedupe makes a redelivered command register once), and the
// registry's answer finishes it (HandleModelEvent). A retry with the same
// request_id from the same caller in the same project answers the first
// call's operation; another caller's is another upload.
// What the registry checks (the artifact directory, names, parent_model)
// comes back as the operation's error, with its code and reason; a command
// too large for a record, and names that would key it badly, are refused
// at once.
func (g *Gateway) UploadModel(ctx context.Context, req *loomv1.UploadModelRequest) (*loomv1.Operation, error) {
	if err := domain.CheckRequestID(req.GetRequestId()); err != nil {
		return nil, err
	}
	project, location, err := uploadParent(req.GetParent())
	if err != nil {
		return nil, err
	}
	p, _ := auth.FromContext(ctx)
	kind, rid := adapters.RequestUploadModel, req.GetRequestId()
	if rid != "" {
		// The caller's, in the project: two members whose scripts both
		// say "upload-1" each get their own upload (before, the second
		// was answered the first's operation and never uploaded).
		rid = p.Name + "\x00" + project + "\x00" + rid
	}
	fp := domain.RequestFingerprint(req)
	if op, ok, err := g.replayModelOperation(ctx, kind, rid, req.GetRequestId(), fp); err != nil || ok {
		return op, err
	}
	// The names key the command's record: checked here, before they do
	// (the registry checks the rest, and answers through the operation).
	if pm := req.GetParentModel(); len(pm) > maxParentModelBytes {
		return nil, errs.Invalid("parent_model", "%d bytes, longer than the limit of %d", len(pm), maxParentModelBytes)
	} else if r, bad := termtext.FirstSpoofing(pm, ""); bad {
		return nil, errs.Invalid("parent_model", "holds the control character %U", r)
	}
	if id := req.GetModelId(); id != "" && !resname.ValidID(id) {
		return nil, errs.Invalid("model_id", "%q must match %s", termtext.Clean(id, 256), resname.IDPattern)
	}
	target := "projects/" + project + "/locations/" + location
	op := domain.NewOperation(resname.Operation{Project: project, ID: envelope.NewID()}.String(), domain.VerbUpload, target, g.now())
	m := req.GetModel()
	key := "projects/" + project
	switch {
	case req.GetParentModel() != "":
		key = req.GetParentModel()
	case req.GetModelId() != "":
		key = resname.Model{Project: project, ID: req.GetModelId()}.String()
	}
	upload := &eventsv1.UploadModel{
		RequestId:   op.GetName(),
		Project:     project,
		ModelId:     req.GetModelId(),
		ParentModel: req.GetParentModel(),
		Model: &trainingv1.Model{
			DisplayName:        m.GetDisplayName(),
			Description:        m.GetDescription(),
			VersionDescription: m.GetVersionDescription(),
			VersionAliases:     m.GetVersionAliases(),
			ArtifactUri:        m.GetArtifactUri(),
			Labels:             m.GetLabels(),
		},
		Lineage: callerLineage(m.GetLineage(), p.Name),
		User:    p.Name,
		// Whose files a local artifact directory must be: the caller's
		// own, unless a cluster administrator's (the registry reads with
		// its own rights).
		OsUser:   p.User,
		AnyOwner: p.ClusterAdmin,
	}
	// A command the broker cannot take would never reach the registry: the
	// operation would wait for good. Refused here, as every other
	// command too large for a record is.
	if err := domain.CheckCommandSize("model", upload); err != nil {
		return nil, err
	}
	cmd, err := route(ctx, key, upload)
	if err != nil {
		return nil, err
	}
	return g.startModelOperation(ctx, kind, rid, req.GetRequestId(), fp, op, cmd)
}

// callerLineage is the lineage a caller's UploadModel carries to the
// registry: theirs, stamped with who supplied it (recorded_by: the
// principal, whatever the request said). The registry checks its names'
// form and project, not that they produced the model, and records a
// lineage with no recorded_by as Loom's own (a training pipeline's, a
// job's): so a caller's must never reach it unstamped. nil or empty stays
// as it is.
func callerLineage(l *loomv1.ModelLineage, principal string) *loomv1.ModelLineage {
	if l == nil || proto.Size(l) == 0 {
		return l
	}
	out := proto.Clone(l).(*loomv1.ModelLineage)
	out.RecordedBy = principal
	if principal == "" {
		// Never left empty (authorization lets no anonymous caller upload).
		out.RecordedBy = "anonymous"
	}
	return out
}

// uploadParent is the project and location of UploadModel's parent
// ("projects/{p}/locations/{l}" or "projects/{p}", location "global").
func uploadParent(parent string) (project, location string, err error) {
	rest, _ := strings.CutPrefix(parent, "projects/")
	project, loc, hasLoc := strings.Cut(rest, "/")
	location = "global"
	if hasLoc {
		var ok bool
		if location, ok = strings.CutPrefix(loc, "locations/"); !ok || !resname.ValidID(location) {
			project = ""
		}
	}
	if _, perr := resname.ParseProject("projects/" + project); !strings.HasPrefix(parent, "projects/") || perr != nil || project == "" {
		return "", "", errs.Invalid("parent", "%q is not projects/{p}/locations/{l} or projects/{p}", parent)
	}
	return project, location, nil
}

// UpdateModel changes a model's or a version's masked fields; this
// gateway's watchers of the project's models are told (the registry emits no
// event for it).
func (g *Gateway) UpdateModel(ctx context.Context, req *loomv1.UpdateModelRequest) (*loomv1.Model, error) {
	out, err := g.own.Models.UpdateModel(ctx, req)
	if err == nil {
		g.changedModels(req.GetModel().GetName())
	}
	return out, err
}

// MergeVersionAliases adds and removes a version's aliases; this gateway's
// watchers of the project's models are told.
func (g *Gateway) MergeVersionAliases(ctx context.Context, req *loomv1.MergeVersionAliasesRequest) (*loomv1.Model, error) {
	out, err := g.own.Models.MergeVersionAliases(ctx, req)
	if err == nil {
		g.changedModels(req.GetName())
	}
	return out, err
}

// DeleteModel deletes a model and its versions; this gateway's watchers of
// the project's models are told.
func (g *Gateway) DeleteModel(ctx context.Context, req *loomv1.DeleteModelRequest) (*loomv1.DeleteModelResponse, error) {
	out, err := g.own.Models.DeleteModel(ctx, req)
	if err == nil {
		g.changedModels(req.GetName())
	}
	return out, err
}

// DeleteModelVersion deletes one version (not the only one, not the
// default); this gateway's watchers of the project's models are told.
func (g *Gateway) DeleteModelVersion(ctx context.Context, req *loomv1.DeleteModelVersionRequest) (*loomv1.DeleteModelResponse, error) {
	out, err := g.own.Models.DeleteModelVersion(ctx, req)
	if err == nil {
		g.changedModels(req.GetName())
	}
	return out, err
}

// MaxExportURI bounds ExportModel's destination here (the registry checks
// the same bound and the rest: scheme, export root).
const MaxExportURI = 4096

// ExportModel starts an operation that copies a version's artifacts to a
// destination prefix, as Vertex's ExportModel: the version is resolved now
// (an unknown one is NotFound at once, and an alias moved later does not
// change what is copied), the operation (verb "export", target the version)
// is stored together with the registry's ExportModel command in one Apply,
// and the registry's answer finishes it (HandleModelEvent). A retry (the
// same request_id from the same caller, for the same name and destination)
// answers the first call's operation; the same request_id for another name
// or destination is another export (exportRequestKey). Before the
// operation is stored, the registry checks the version and destination
// (ExportModel with validate_only): a refusal there is the call's answer.
// With validate_only set here, that check is all: the answer is a done
// operation of no name, and nothing is stored or sent.
func (g *Gateway) ExportModel(ctx context.Context, req *loomv1.ExportModelRequest) (*loomv1.Operation, error) {
	const field = "output_config.artifact_destination.output_uri_prefix"
	p, _ := auth.FromContext(ctx)
	kind, rid := adapters.RequestExportModel, req.GetRequestId()
	if err := domain.CheckRequestID(rid); err != nil {
		return nil, err
	}
	dst := req.GetOutputConfig().GetArtifactDestination().GetOutputUriPrefix()
	if rid != "" {
		rid = exportRequestKey(p.Name, req.GetName(), dst, rid)
	}
	fp := domain.RequestFingerprint(req)
	if req.GetValidateOnly() {
		rid = "" // checked, not looked up: nothing is started
	}
	if op, ok, err := g.replayModelOperation(ctx, kind, rid, req.GetRequestId(), fp); err != nil || ok {
		return op, err
	}
	switch {
	case dst == "":
		return nil, errs.Invalid(field, "required: where to copy the artifacts (file:///dir, s3://bucket/prefix, gs://…, azblob://…)")
	case len(dst) > MaxExportURI:
		return nil, errs.Invalid(field, "%d bytes, more than the limit of %d", len(dst), MaxExportURI)
	}
	m, err := g.own.Models.GetModel(ctx, &loomv1.GetModelRequest{Name: req.GetName()})
	if err != nil {
		return nil, err
	}
	project, err := modelProject(req.GetName())
	if err != nil {
		return nil, err
	}
	target := m.GetName()
	if base, _, _ := strings.Cut(target, "@"); m.GetVersionId() != "" {
		target = base + "@" + m.GetVersionId()
	}
	// The registry's own checks of the destination (scheme, export root,
	// buckets, endpoints: its configuration) and of the version, run
	// now by the registry itself: a destination the export would refuse is
	// refused here, not by an operation that fails later.
	if _, err := g.own.Models.ExportModel(ctx, &loomv1.ExportModelRequest{Name: target, OutputConfig: req.GetOutputConfig(), ValidateOnly: true}); err != nil {
		return nil, err
	}
	if req.GetValidateOnly() {
		return &loomv1.Operation{Done: true, Metadata: &loomv1.OperationMetadata{Target: target, Verb: domain.VerbExport, Progress: "validated"}}, nil
	}
	key, _, _ := strings.Cut(target, "@")
	op := domain.NewOperation(resname.Operation{Project: project, ID: envelope.NewID()}.String(), domain.VerbExport, target, g.now())
	cmd, err := route(ctx, key, &eventsv1.ExportModel{Operation: op.GetName(), Name: target, Destination: dst, User: p.Name,
		// A local destination is written as the caller's OS account (a
		// cluster administrator's with the registry's own rights).
		OsUser: p.User, AnyOwner: p.ClusterAdmin})
	if err != nil {
		return nil, err
	}
	return g.startModelOperation(ctx, kind, rid, req.GetRequestId(), fp, op, cmd)
}

// exportRequestKey is the key ExportModel's request_id rid is remembered
// by: the caller's, for the name and destination exported. A tester's
// cluster administrator exported default's model with request_id "same-1",
// then another project's model with the same id, and got default's
// finished operation back: the second model was never exported. The name
// and destination are hashed (with their lengths, so no two pairs read
// alike): a destination may be 4 KiB, and the key names a Redis key.
func exportRequestKey(principal, name, dst, rid string) string {
	h := sha256.New()
	fmt.Fprintf(h, "%d:%s%d:%s", len(name), name, len(dst), dst)
	return principal + "\x00" + rid + "\x00" + hex.EncodeToString(h.Sum(nil)[:16])
}

// replayModelOperation returns the operation of an earlier ExportModel
// (request id scoped to the caller, the name and the destination:
// exportRequestKey) or UploadModel (scoped to the caller and the project) remembered by
// key; ok=false when there was none. Unlike replayOperation it asks for no
// admin role (the user role starts these), but it answers only an
// operation the caller may read now (mayReadOperation): a replay never
// shows what GetOperation would refuse (a caller since removed from the
// operation's project), and is then AlreadyExists, naming rid (the
// caller's request_id).
func (g *Gateway) replayModelOperation(ctx context.Context, kind, key, rid, fp string) (*loomv1.Operation, bool, error) {
	if key == "" {
		return nil, false, nil
	}
	rec, err := g.repo.Request(ctx, kind, key)
	if errors.Is(err, errs.NotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	name, stored := adapters.SplitRequest(rec)
	if !mayReadOperation(ctx, name) {
		return nil, false, fmt.Errorf("request_id %q answered an operation this caller may not read; send a new request_id: %w", rid, errs.AlreadyExists)
	}
	if err := domain.RequestIDReused(rid, stored, fp); err != nil {
		return nil, false, err
	}
	op, err := g.repo.Operation(ctx, name)
	return op, err == nil, err
}

// mayReadOperation reports whether the caller may read the operation named
// name now: as GetOperation's rule says (the viewer role in its project),
// or, for a workload (which reads no operation, yet is answered its own
// upload's), when the operation is of the workload's project.
func mayReadOperation(ctx context.Context, name string) bool {
	if p, ok := auth.FromContext(ctx); ok && p.Kind == auth.KindWorkload {
		project, _ := authz.ProjectOf(name)
		return project != "" && project == p.Project
	}
	return authz.Authorize(ctx, getOperationMethod, &loomv1.GetOperationRequest{Name: name}) == nil
}

// getOperationMethod is the RPC whose authorization rule says who may read
// an operation.
const getOperationMethod = "/loom.v1.OperationService/GetOperation"

// modelProject is the project id of a model name ("projects/{p}/…").
func modelProject(name string) (string, error) {
	rest, ok := strings.CutPrefix(name, "projects/")
	id, _, _ := strings.Cut(rest, "/")
	if _, err := resname.ParseProject("projects/" + id); !ok || err != nil {
		return "", errs.Invalid("name", "%q does not name a project's model (projects/{p}/locations/{l}/models/{id})", name)
	}
	return id, nil
}

// HandleModelEvent finishes the operation a model event names: an export's
// (ModelExported, ModelExportFailed) or an upload's (ModelVersionRegistered,
// ModelUploadFailed whose request_id is an operation's name; other uploads'
// and jobs' versions are not the gateway's). The operation is written with
// the event's inbox mark, then its waiters are woken.
func (g *Gateway) HandleModelEvent(ctx context.Context, ev envelope.Event) error {
	var opName string
	switch p := ev.Payload.(type) {
	case *eventsv1.ModelExported:
		opName = p.GetOperation()
	case *eventsv1.ModelExportFailed:
		opName = p.GetOperation()
	case *eventsv1.ModelVersionRegistered:
		opName = p.GetRequestId()
	case *eventsv1.ModelUploadFailed:
		opName = p.GetRequestId()
	}
	if _, err := resname.ParseOperation(opName); err != nil {
		// Not an operation's: a job's version, or the training service's
		// upload (its request ids name pipelines).
		return nil
	}
	return g.applyOperationEvent(ctx, opName, "model", ev, domain.OnModelEvent)
}
