package app

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/blobstore"
	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/osuser"
	"github.com/loom-ml/loom/libs/paging"
	"github.com/loom-ml/loom/libs/resname"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/registry/internal/artifact"
	"github.com/loom-ml/loom/services/registry/internal/domain"
)

// SetExportRoot confines ExportModel's local destinations (file:// and
// absolute paths) to dir; with "" they are refused and only object stores
// (s3://, gs://, azblob://) are destinations. Call it before serving.
func (r *Registry) SetExportRoot(dir string) { r.exportRoot = dir }

// UploadModel registers req.model's artifact directory as a version: of
// parent_model when set, else of the model model_id names (created when new),
// else of a new model named after model.display_name. It returns once the
// version is stored. A refused upload (bad field, missing or incomplete
// artifact directory, unknown parent) is InvalidArgument with the reason;
// nothing is registered.
func (r *Registry) UploadModel(ctx context.Context, req *loomv1.UploadModelRequest) (*loomv1.UploadModelResponse, error) {
	project, location, err := domain.ParseParent("parent", req.GetParent())
	if err != nil {
		return nil, err
	}
	rid, err := rpcRequestID(project, req.GetRequestId())
	if err != nil {
		return nil, err
	}
	m := req.GetModel()
	cmd := &eventsv1.UploadModel{
		RequestId:   rid,
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
		Lineage: m.GetLineage(),
		// Only Loom's services call this API (a service token), for
		// themselves: no user's rights to confine it to.
		AnyOwner: true,
	}
	if err := r.drv.Ready(ctx); err != nil {
		return nil, err
	}
	r.mu.RLock()
	prev, answered := r.state.Answered(rid)
	var u domain.Upload
	var refusal error
	if !answered {
		u, refusal = domain.ValidateUpload(r.state, cmd)
	}
	r.mu.RUnlock()
	if answered {
		// A retry: the first call's version, whatever this one's fields.
		r.log.Info("model upload sent again; answered its version", "request_id", req.GetRequestId(), "version", prev.GetName())
		return uploadAnswer(prev, location)
	}
	var checked artifactCheck
	if refusal == nil {
		if checked, refusal, err = r.verify(ctx, u); err != nil {
			return nil, err
		}
	}
	var reg *domain.Registration
	if refusal == nil {
		if reg, refusal, err = r.register(ctx, "", cmd, checked); err != nil {
			return nil, err
		}
	}
	if refusal != nil {
		field, reason, _ := strings.Cut(refusal.Error(), ": ")
		if strings.Contains(field, " ") {
			field, reason = "model", refusal.Error()
		}
		switch domain.RefusalCode(refusal) {
		case codes.NotFound:
			return nil, fmt.Errorf("%s: %w", refusal.Error(), errs.NotFound)
		case codes.ResourceExhausted:
			return nil, fmt.Errorf("%s: %w", refusal.Error(), errs.ResourceExhausted)
		}
		return nil, errs.Invalid(field, "%s", reason)
	}
	if reg.Event == nil { // a concurrent call with the same request_id registered it
		r.log.Info("model upload sent again; answered its version", "request_id", req.GetRequestId(), "version", reg.Version.GetName())
	} else {
		r.log.Info("model version uploaded", "version", reg.Version.GetName())
	}
	return uploadAnswer(reg.Version, location)
}

// MaxUploadRequestID bounds UploadModelRequest.request_id, in bytes (as the
// gateway bounds every request_id).
const MaxUploadRequestID = 128

// rpcRequestID is the registry's request id of an UploadModel RPC: with the
// caller's request_id, "rpc:{project}:{request_id}", so that a retry in the
// same project finds the first call's version (State.Answered) and the same
// id in another project does not; without one, a random id (every call
// registers, and is recorded as every upload is). A request_id over
// MaxUploadRequestID bytes or with control characters is InvalidArgument.
func rpcRequestID(project, id string) (string, error) {
	if id == "" {
		return "rpc-" + randomID(), nil
	}
	var v errs.Validator
	v.Check(len(id) <= MaxUploadRequestID, "request_id", "%d bytes, longer than the limit of %d", len(id), MaxUploadRequestID)
	v.Check(utf8.ValidString(id) && !strings.ContainsFunc(id, unicode.IsControl), "request_id", "holds a control character or invalid UTF-8")
	if err := v.Err(); err != nil {
		return "", err
	}
	return "rpc:" + project + ":" + id, nil
}

// uploadAnswer is UploadModel's answer naming version v in location.
func uploadAnswer(v *loomv1.ModelVersion, location string) (*loomv1.UploadModelResponse, error) {
	mv, err := resname.SplitModelVersion(v.GetName())
	if err != nil {
		return nil, fmt.Errorf("answer upload: %w", err)
	}
	return &loomv1.UploadModelResponse{
		Model:          "projects/" + mv.Model.Project + "/locations/" + location + "/models/" + mv.Model.ID,
		ModelVersionId: strconv.FormatInt(mv.Version, 10),
	}, nil
}

// randomID is a request id for an upload that came by RPC (its answer is the
// RPC's, but the registration is recorded as every upload is).
func randomID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// GetModel returns the version name resolves to (domain.Ref), as served.
func (r *Registry) GetModel(name string) (*loomv1.Model, error) {
	ref, err := domain.ParseRef("name", name)
	if err != nil {
		return nil, err
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	m, v, err := r.state.Resolve(ref)
	if err != nil {
		return nil, err
	}
	return domain.View(m, v, locationOf(ref)), nil
}

// locationOf is the location an answer to ref names.
func locationOf(ref domain.Ref) string {
	if ref.Location == "" {
		return domain.DefaultLocation
	}
	return ref.Location
}

// ListModels lists one page of the project's models, each at its default
// version, filtered and ordered as req asks (by name when order_by is empty).
func (r *Registry) ListModels(req *loomv1.ListModelsRequest) (*loomv1.ListModelsResponse, error) {
	project, location, err := domain.ParseParent("parent", req.GetParent())
	if err != nil {
		return nil, err
	}
	order, err := domain.ParseOrderBy(req.GetOrderBy())
	if err != nil {
		return nil, err
	}
	var all []*loomv1.Model
	r.mu.RLock()
	for _, name := range r.state.ModelsOf(project) {
		m := r.state.Models[name]
		mn, err := resname.SplitModel(name)
		if err != nil {
			continue
		}
		_, v, err := r.state.Resolve(domain.Ref{Project: mn.Project, ID: mn.ID})
		if err != nil {
			continue
		}
		all = append(all, domain.View(m, v, location))
	}
	r.mu.RUnlock()
	all, err = domain.Filter(req.GetFilter(), all)
	if err != nil {
		return nil, err
	}
	page, next, err := paging.List(req, all, order.Key)
	if err != nil {
		return nil, err
	}
	return &loomv1.ListModelsResponse{Models: page, NextPageToken: next}, nil
}

// ListModelVersions lists one page of a model's versions (by id when
// order_by is empty), filtered as req asks. Answers to Loom's name form
// also carry the stored versions (versions), as before.
func (r *Registry) ListModelVersions(req *loomv1.ListModelVersionsRequest) (*loomv1.ListModelVersionsResponse, error) {
	ref, err := domain.ParseRef("parent", req.GetParent())
	if err != nil {
		return nil, err
	}
	if ref.Selected() {
		return nil, errs.Invalid("parent", "name the model, without \"@…\"")
	}
	order, err := domain.ParseOrderBy(req.GetOrderBy())
	if err != nil {
		return nil, err
	}
	r.mu.RLock()
	m, ok := r.state.Models[ref.Model()]
	var all []*loomv1.Model
	stored := map[string]*loomv1.ModelVersion{}
	if ok {
		for _, v := range r.state.Versions[ref.Model()] {
			view := domain.View(m, v, locationOf(ref))
			all = append(all, view)
			stored[view.GetName()] = v
		}
	}
	r.mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("model %s: %w", ref.Model(), errs.NotFound)
	}
	all, err = domain.Filter(req.GetFilter(), all)
	if err != nil {
		return nil, err
	}
	page, next, err := paging.List(req, all, order.Key)
	if err != nil {
		return nil, err
	}
	resp := &loomv1.ListModelVersionsResponse{Models: page, NextPageToken: next}
	if !ref.Vertex {
		for _, p := range page {
			resp.Versions = append(resp.Versions, proto.Clone(stored[p.GetName()]).(*loomv1.ModelVersion))
		}
	}
	return resp, nil
}

// ListVersions returns the stored versions of model (a Loom model name) in
// version order, or NotFound.
func (r *Registry) ListVersions(model string) ([]*loomv1.ModelVersion, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if _, ok := r.state.Models[model]; !ok {
		return nil, fmt.Errorf("model %s: %w", model, errs.NotFound)
	}
	vs := r.state.Versions[model]
	out := make([]*loomv1.ModelVersion, len(vs))
	for i, v := range vs {
		out[i] = proto.Clone(v).(*loomv1.ModelVersion)
	}
	return out, nil
}

// change decides one change under wmu and writes it; the change is in
// memory once it returns nil.
func (r *Registry) change(ctx context.Context, decide func(*domain.State) (*domain.Change, error)) (*domain.Change, error) {
	r.wmu.Lock()
	defer r.wmu.Unlock()
	if err := r.drv.Ready(ctx); err != nil {
		return nil, err
	}
	r.mu.RLock()
	c, err := decide(r.state)
	r.mu.RUnlock()
	if err != nil {
		return nil, err
	}
	tx, err := r.repo.ChangeTx(c)
	if err != nil {
		return nil, err
	}
	if _, err := r.drv.Apply(ctx, "", tx, func() {
		r.mu.Lock()
		r.state.ApplyChange(c)
		r.mu.Unlock()
	}); err != nil {
		return nil, err
	}
	return c, nil
}

// UpdateModel is domain.Update of the version req.model.name names; it
// answers that version as served.
func (r *Registry) UpdateModel(ctx context.Context, req *loomv1.UpdateModelRequest) (*loomv1.Model, error) {
	ref, err := domain.ParseRef("model.name", req.GetModel().GetName())
	if err != nil {
		return nil, err
	}
	c, err := r.change(ctx, func(s *domain.State) (*domain.Change, error) {
		return domain.Update(s, ref, req.GetModel(), req.GetUpdateMask().GetPaths(), r.now().UTC())
	})
	if err != nil {
		return nil, err
	}
	return domain.View(c.Model, c.Served, locationOf(ref)), nil
}

// MergeVersionAliases is domain.MergeAliases; it answers the version as served.
func (r *Registry) MergeVersionAliases(ctx context.Context, req *loomv1.MergeVersionAliasesRequest) (*loomv1.Model, error) {
	ref, err := domain.ParseRef("name", req.GetName())
	if err != nil {
		return nil, err
	}
	c, err := r.change(ctx, func(s *domain.State) (*domain.Change, error) {
		return domain.MergeAliases(s, ref, req.GetVersionAliases(), r.now().UTC())
	})
	if err != nil {
		return nil, err
	}
	return domain.View(c.Model, c.Served, locationOf(ref)), nil
}

// DeleteModel deletes a model and its versions.
func (r *Registry) DeleteModel(ctx context.Context, name string) error {
	ref, err := domain.ParseRef("name", name)
	if err != nil {
		return err
	}
	c, err := r.change(ctx, func(s *domain.State) (*domain.Change, error) { return domain.DeleteModel(s, ref) })
	if err == nil {
		r.log.Info("model deleted", "model", c.DeletedModel, "versions", len(c.Deleted))
	}
	return err
}

// DeleteModelVersion deletes one version; see domain.DeleteVersion for what
// is refused, and what force allows.
func (r *Registry) DeleteModelVersion(ctx context.Context, name string, force bool) error {
	ref, err := domain.ParseRef("name", name)
	if err != nil {
		return err
	}
	c, err := r.change(ctx, func(s *domain.State) (*domain.Change, error) {
		return domain.DeleteVersion(s, ref, force, r.now().UTC())
	})
	if err == nil {
		r.log.Info("model version deleted", "version", c.Deleted)
	}
	return err
}

// MaxExportURI bounds an export destination.
const MaxExportURI = 4096

// ExportModel copies the artifacts of the version req.name resolves to, to
// req.output_config.artifact_destination.output_uri_prefix, through
// libs/blobstore.Export (checksums compared, objects already there skipped).
// It answers when the copy is done (the registry's own RPC; the gateway's
// ExportModel is an operation that the ExportModel command runs). A local
// destination must lie under the export root (SetExportRoot); a destination
// with a query must name an allowed endpoint (SetExportEndpoints).
func (r *Registry) ExportModel(ctx context.Context, req *loomv1.ExportModelRequest) (*loomv1.ExportModelResponse, error) {
	resp, _, err := r.export(ctx, req, writer{anyOwner: true})
	return resp, err
}

// CheckExport runs the checks of ExportModel that need no copy (see
// checkExport): what ExportModel with validate_only answers, and what the
// gateway asks before it starts an export operation, so that a
// destination the export would refuse is refused at submission, by the
// same code.
func (r *Registry) CheckExport(req *loomv1.ExportModelRequest) error {
	_, _, _, err := r.checkExport(req)
	return err
}

// checkExport is the part of an export decided before anything is read or
// written: the name parses and resolves to a version whose artifacts are
// not known to have changed, and the destination passes checkDestination
// (its URL as opened is openURL).
func (r *Registry) checkExport(req *loomv1.ExportModelRequest) (ref domain.Ref, openURL string, v *loomv1.ModelVersion, err error) {
	const field = "output_config.artifact_destination.output_uri_prefix"
	ref, err = domain.ParseRef("name", req.GetName())
	if err != nil {
		return ref, "", nil, err
	}
	dst := req.GetOutputConfig().GetArtifactDestination().GetOutputUriPrefix()
	openURL, err = r.checkDestination(field, ref.Project, dst)
	if err != nil {
		return ref, "", nil, err
	}
	r.mu.RLock()
	_, v, err = r.state.Resolve(ref)
	r.mu.RUnlock()
	if err != nil {
		return ref, "", nil, err
	}
	if why := v.GetArtifactChanged(); why != "" {
		return ref, "", nil, fmt.Errorf("%w: %s: its artifacts changed after registration, and nothing was copied: %s; register the set again (loom models upload) and export the new version",
			errs.FailedPrecondition, v.GetName(), why)
	}
	return ref, openURL, v, nil
}

// writer is whose rights an export into a local directory writes with:
// the OS account osUser's, or with anyOwner the registry's own (a cluster
// administrator's export, the registry's own RPC).
type writer struct {
	osUser   string
	anyOwner bool
}

// export is ExportModel, also answering the name of the version exported.
// It copies only the version's MANIFEST and the files it lists, and reads a
// local directory as the version's artifact_owner (libs/osuser.As): the
// registry reads with its own rights, and the directory is its owner's to
// change after registration. So what it copies is checked against what was
// registered: the MANIFEST must still be the one registered (the version's
// manifest_sha256, when it has one), and each file is copied only with the
// SHA-256 the MANIFEST lists (exportListed); otherwise FailedPrecondition,
// naming the file.
func (r *Registry) export(ctx context.Context, req *loomv1.ExportModelRequest, as writer) (*loomv1.ExportModelResponse, string, error) {
	ref, openURL, v, err := r.checkExport(req)
	if err != nil {
		return nil, "", err
	}
	dst := req.GetOutputConfig().GetArtifactDestination().GetOutputUriPrefix()
	srcField := "artifact_uri of " + v.GetName()
	srcURL, err := r.artifactURL(srcField, v.GetArtifactUri())
	if err != nil {
		return nil, "", err
	}
	local := strings.HasPrefix(srcURL, "/") || strings.HasPrefix(srcURL, "file:")
	if !local {
		if err := r.checkBucket(srcField, ref.Project, v.GetArtifactUri(), srcURL); err != nil {
			return nil, "", err
		}
	}
	src, err := blobstore.Open(ctx, srcURL)
	if err != nil {
		return nil, "", fmt.Errorf("open artifacts %s: %w", v.GetArtifactUri(), err)
	}
	defer src.Close()
	if owner := v.GetArtifactOwner(); local {
		if owner == "" {
			return nil, "", fmt.Errorf("%w: %s is a local directory of no recorded owner (registered before the registry recorded one, or by a job of no owner): the registry reads exports as their owner; register the directory again (loom models upload)",
				errs.FailedPrecondition, v.GetName())
		}
		a, err := osuser.Lookup(owner)
		if err != nil {
			return nil, "", fmt.Errorf("%w: %s: its owner's OS account is not known on the registry's host: %v", errs.FailedPrecondition, srcField, err)
		}
		if err := src.ReadAs(a); err != nil {
			return nil, "", err
		}
	}
	listing, err := artifact.ReadListing(ctx, src)
	if err != nil {
		return nil, "", err
	}
	if rec := v.GetManifestSha256(); rec != "" && listing.Manifest != rec {
		why := fmt.Sprintf("the MANIFEST at %s is not the one registered (SHA-256 %s, registered %s), found by an export at %s",
			v.GetArtifactUri(), listing.Manifest, rec, r.now().UTC().Format(time.RFC3339))
		r.markChanged(ctx, v.GetName(), why)
		return nil, "", fmt.Errorf("%w: %s: %s: the artifact set changed after registration, and nothing was copied; register it again (loom models upload) and export the new version",
			errs.FailedPrecondition, v.GetName(), why)
	}
	out, err := r.openDestination(ctx, ref.Project, openURL, localPath(openURL), as)
	if err != nil {
		return nil, "", fmt.Errorf("open destination %s: %w", dst, err)
	}
	defer out.Close()
	res, err := exportListed(ctx, src, out, listing)
	if errors.Is(err, blobstore.ErrNotWanted) {
		r.markChanged(ctx, v.GetName(), fmt.Sprintf("a file differs from the MANIFEST it was registered with, found by an export at %s: %v",
			r.now().UTC().Format(time.RFC3339), err))
		return nil, "", fmt.Errorf("export %s to %s: %w: a file differs from the MANIFEST it was registered with (changed after registration); the destination has no MANIFEST of this export: register the set again (loom models upload) and export the new version",
			v.GetName(), dst, err)
	}
	if err != nil {
		return nil, "", fmt.Errorf("export %s to %s: %w", v.GetName(), dst, err)
	}
	r.log.Info("model version exported", "version", v.GetName(), "destination", dst, "copied", res.Copied, "skipped", res.Skipped)
	answered := out.URL()
	switch local, ok := strings.CutSuffix(answered, "?"+noAttrs); {
	case ok:
		answered = local // the directory: how it is written is ours
	case openURL != dst:
		// The caller's own form: the credentials added are the
		// operator's business.
		answered = dst
	}
	return &loomv1.ExportModelResponse{
		Destination: answered, Copied: int32(res.Copied), Skipped: int32(res.Skipped),
		Bytes: res.Bytes, Objects: int32(len(res.Objects)),
	}, v.GetName(), nil
}

// markChanged marks version artifact_changed with why (domain.MarkChanged),
// so that reads say what an export found and no later export copies it.
// The export's own answer says it already: a mark that cannot be written
// now (the store down, the version deleted) is logged, not returned.
func (r *Registry) markChanged(ctx context.Context, version, why string) {
	_, err := r.change(ctx, func(s *domain.State) (*domain.Change, error) {
		return domain.MarkChanged(s, version, why, r.now().UTC())
	})
	switch {
	case err == nil:
		r.log.Warn("model version's artifacts changed after registration", "version", version, "why", why)
	case !errors.Is(err, domain.ErrMarked):
		r.log.Warn("model version's artifacts changed after registration; the mark was not written", "version", version, "why", why, "err", err)
	}
}

// exportListed copies an artifact set's files, then its MANIFEST, from src
// to out, each only with the SHA-256 the listing wants (the MANIFEST's
// line; the MANIFEST's own digest): a file changed since it was listed is
// never published (blobstore.ExportOptions.Want, ErrNotWanted). The
// MANIFEST goes last, as a producer writes it: a destination holding it
// holds every file it lists, so an export stopped midway (a changed file,
// a kill) never looks complete.
func exportListed(ctx context.Context, src, out *blobstore.Bucket, l artifact.Listing) (blobstore.ExportResult, error) {
	files, err := blobstore.Export(ctx, src, out, blobstore.ExportOptions{Keys: l.Files, Want: l.Want})
	if err != nil {
		return files, err
	}
	manifest, err := blobstore.Export(ctx, src, out, blobstore.ExportOptions{Keys: []string{artifact.Manifest}, Want: l.Want})
	res := blobstore.ExportResult{
		Copied: files.Copied + manifest.Copied, Skipped: files.Skipped + manifest.Skipped, Bytes: files.Bytes + manifest.Bytes,
		Objects: append(files.Objects, manifest.Objects...),
	}
	return res, err
}

// checkDestination checks an export destination of a version of project:
// bounded, a local one (file:// or an absolute path) under the export
// root's directory of the project, one with a query only as
// checkDestinationQuery allows, and a bucket the registry writes with
// credentials under the project's part of the stores (checkBucket). It
// returns the URL to open, which
// for a destination with a query carries the endpoint's credentials
// (checkDestinationQuery), for a local one says to write no attributes
// file beside each file (go-cloud's NAME.attrs: clutter in a directory a
// person reads, and nothing reads them back); otherwise dst itself.
func (r *Registry) checkDestination(field, project, dst string) (string, error) {
	switch {
	case dst == "":
		return "", errs.Invalid(field, "required: where to copy the artifacts (file:///dir, s3://bucket/prefix, gs://…, azblob://…)")
	case len(dst) > MaxExportURI:
		return "", errs.Invalid(field, "%d bytes, more than the limit of %d", len(dst), MaxExportURI)
	case strings.ContainsAny(dst, "\x00#"):
		return "", errs.Invalid(field, "must not hold NUL or '#'")
	case strings.Contains(dst, "?"):
		open, err := r.checkDestinationQuery(field, dst)
		if err != nil {
			return "", err
		}
		return open, r.checkBucket(field, project, dst, open)
	}
	// The scheme as blobstore.Open reads it: any case ("FILE://" is a
	// local directory too, not a bucket).
	scheme, rest, hasScheme := strings.Cut(dst, "://")
	isFile := hasScheme && strings.EqualFold(scheme, "file")
	if hasScheme && !isFile {
		return dst, r.checkBucket(field, project, dst, dst)
	}
	p := dst
	if isFile {
		p = rest
	}
	if strings.Contains(p, "%") {
		// Open would decode it: the path checked must be the one written.
		return "", errs.Invalid(field, "a local destination must not hold '%%': write the path as it is")
	}
	if !filepath.IsAbs(p) {
		return "", errs.Invalid(field, "%q is neither a URL nor an absolute path", dst)
	}
	if r.exportRoot == "" {
		return "", errs.Invalid(field, "local destinations are turned off on this registry (-export-root / LOOM_REGISTRY_EXPORT_ROOT); export to an object store")
	}
	// Each project has its own directory: an export of one project's
	// version cannot overwrite or mix into another's.
	projectRoot := filepath.Join(r.exportRoot, project)
	rel, err := filepath.Rel(projectRoot, filepath.Clean(p))
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") || strings.Contains(p, "/../") || strings.HasSuffix(p, "/..") {
		return "", errs.Invalid(field, "%q is outside project %s's directory of the export root: export under %s/", dst, project, projectRoot)
	}
	// A link planted on the way would carry the files anywhere: one a
	// cluster administrator's export (written with the registry's own
	// rights) follows, or one into a place its caller may write. This
	// refuses the link that is there already.
	at := r.exportRoot
	for _, seg := range strings.Split(filepath.ToSlash(filepath.Join(project, rel)), "/") {
		at = filepath.Join(at, seg)
		fi, err := os.Lstat(at)
		if errors.Is(err, fs.ErrNotExist) {
			break
		}
		if err != nil || !fi.IsDir() {
			return "", errs.Invalid(field, "%s is not a directory of the export root (a link or a file): an export writes only into real directories", at)
		}
	}
	return "file://" + p + "?" + noAttrs, nil
}

// openDestination opens an export's destination. A local directory
// (checkDestination's file:// URL, path p) is written with no more than
// someone's own rights, never root's through a directory another account
// owns (which could swap a link in under it): a caller's export as the
// caller's OS account, so that it creates and replaces only what they
// could and what it creates is theirs — the registry makes them their own
// directory of the project's, <export root>/<project>/<account>/, when
// missing; a cluster administrator's export (and the registry's own RPC)
// as the owner of the first directory on the way that the registry's
// account does not own, else with the registry's rights. A caller with no
// OS account on the registry's host cannot export locally
// (FailedPrecondition), nor can one the registry cannot act as (it does
// not run as root). A store is opened as it is.
func (r *Registry) openDestination(ctx context.Context, project, openURL, p string, as writer) (*blobstore.Bucket, error) {
	if !strings.HasPrefix(openURL, "file://") {
		return blobstore.Open(ctx, openURL)
	}
	projectRoot := filepath.Join(r.exportRoot, project)
	if err := realDir(projectRoot, 0o755); err != nil {
		return nil, err
	}
	if as.anyOwner {
		owner, err := firstOtherOwner(projectRoot, p)
		if err != nil {
			return nil, err
		}
		if owner == nil {
			return blobstore.Open(ctx, openURL)
		}
		return openAs(ctx, openURL, *owner)
	}
	if as.osUser == "" {
		return nil, fmt.Errorf("%w: a local export is written as its caller's OS account, and this caller has none: export to an object store, or ask a cluster administrator",
			errs.FailedPrecondition)
	}
	a, err := osuser.Lookup(as.osUser)
	if err != nil {
		return nil, fmt.Errorf("%w: a local export is written as its caller's OS account, and %s is not known on the registry's host: %v",
			errs.FailedPrecondition, as.osUser, err)
	}
	own := filepath.Join(projectRoot, a.Name)
	if _, err := os.Lstat(own); errors.Is(err, fs.ErrNotExist) && (osuser.IsSelf(a) || os.Geteuid() == 0) {
		// Made by the registry in its own directory (no one else may
		// write there, so nothing can be swapped in), then given away.
		if err := os.Mkdir(own, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("%s's directory of the export root: %w", a.Name, err)
		}
		if err := os.Lchown(own, int(a.UID), int(a.GID)); err != nil && !osuser.IsSelf(a) {
			return nil, fmt.Errorf("%s's directory of the export root: %w", a.Name, err)
		}
	}
	b, err := openAs(ctx, openURL, a)
	if errs.Code(err) == codes.PermissionDenied {
		return nil, fmt.Errorf("%w (a caller's exports go under their own directory, %s/)", err, own)
	}
	return b, err
}

// openAs is blobstore.OpenAs, refused up front when the registry cannot
// act as a (it does not run as root, and a is not its own account).
func openAs(ctx context.Context, openURL string, a osuser.Account) (*blobstore.Bucket, error) {
	if !osuser.IsSelf(a) && os.Geteuid() != 0 {
		return nil, fmt.Errorf("%w: the registry does not run as root, so it writes local exports only as its own account (uid %d), not as %s: export to an object store, or run the registry as root",
			errs.FailedPrecondition, os.Geteuid(), a)
	}
	return blobstore.OpenAs(ctx, openURL, a)
}

// realDir makes dir (mode perm) when missing; a link or a file there is
// FailedPrecondition.
func realDir(dir string, perm os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return fmt.Errorf("export root: %w", err)
	}
	if err := os.Mkdir(dir, perm); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("export root: %w", err)
	}
	if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() {
		return fmt.Errorf("%w: %s is not a directory", errs.FailedPrecondition, dir)
	}
	return nil
}

// firstOtherOwner walks p's directories that exist from below root down,
// and returns the account of the first one the registry's account does not
// own (nil: it owns every one).
func firstOtherOwner(root, p string) (*osuser.Account, error) {
	rel, err := filepath.Rel(root, filepath.Clean(p))
	if err != nil {
		return nil, err
	}
	at := root
	for _, seg := range strings.Split(filepath.ToSlash(rel), "/") {
		if seg == "." || seg == "" {
			continue
		}
		at = filepath.Join(at, seg)
		fi, err := os.Lstat(at)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok || st.Uid == uint32(os.Geteuid()) {
			continue
		}
		a := osuser.Account{UID: st.Uid, GID: st.Gid, Groups: []uint32{st.Gid}}
		if u, err := user.LookupId(strconv.FormatUint(uint64(st.Uid), 10)); err == nil {
			if full, err := osuser.Lookup(u.Username); err == nil {
				a = full
			}
		}
		return &a, nil
	}
	return nil, nil
}

// localPath is the directory of checkDestination's file:// URL ("" for
// another).
func localPath(openURL string) string {
	rest, ok := strings.CutPrefix(openURL, "file://")
	if !ok {
		return ""
	}
	p, _, _ := strings.Cut(rest, "?")
	return p
}

// noAttrs tells go-cloud's fileblob to write no NAME.attrs beside a file.
const noAttrs = "metadata=skip"
