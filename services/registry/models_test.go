package registry

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/loom-ml/loom/libs/osuser"
	"github.com/loom-ml/loom/libs/testkit"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/registry/internal/artifact"
)

const (
	vertexParent = "projects/default/locations/global"
	vertexModel  = vertexParent + "/models/tiny"
)

// allVersions lists every version of model through its pages.
func allVersions(t *testing.T, ctx context.Context, c loomv1.ModelServiceClient, req *loomv1.ListModelVersionsRequest) []*loomv1.Model {
	t.Helper()
	var out []*loomv1.Model
	for {
		resp, err := c.ListModelVersions(ctx, req)
		if err != nil {
			t.Fatalf("ListModelVersions(%v): %v", req, err)
		}
		out = append(out, resp.GetModels()...)
		if resp.GetNextPageToken() == "" {
			return out
		}
		req.PageToken = resp.GetNextPageToken()
	}
}

// holders returns, per alias, the version ids holding it.
func holders(vs []*loomv1.Model) map[string][]string {
	out := map[string][]string{}
	for _, v := range vs {
		for _, a := range v.GetVersionAliases() {
			out[a] = append(out[a], v.GetVersionId())
		}
	}
	return out
}

func wantCode(t *testing.T, what string, err error, code codes.Code, substr string) {
	t.Helper()
	if status.Code(err) != code || !strings.Contains(status.Convert(err).Message(), substr) {
		t.Fatalf("%s: %v, want %s saying %q", what, err, code, substr)
	}
}

// TestModelRegistryRPCs drives the Vertex registry through the gRPC API on
// real Redis and the embedded broker: 100 uploads at once get ids 2..101,
// one each; "default" and every other alias are held by exactly one version
// throughout; names with @version and @alias resolve; deleting the default
// or the only version is refused with the reason; lists filter, order and
// page stably.
func TestModelRegistryRPCs(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 2*time.Minute)
	broker := testkit.Broker(t)
	redisAddr, _ := testkit.Redis(t)
	c, _ := startRegistry(t, broker, redisAddr)
	dir := modelDir(t)

	first, err := c.UploadModel(ctx, &loomv1.UploadModelRequest{Parent: vertexParent, ModelId: "tiny", Model: &loomv1.Model{
		DisplayName: "Tiny", Description: "a tiny regressor", ArtifactUri: "file://" + dir,
		Labels:  map[string]string{"team": "vision"},
		Lineage: &loomv1.ModelLineage{Job: "projects/default/jobs/7", Trial: "projects/default/locations/global/hyperparameterTuningJobs/3/trials/2", Hyperparameters: map[string]string{"lr": "0.1"}, Metrics: map[string]float64{"loss": 0.25}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	// The registry's own RPC answers the operation already done.
	if r := first.GetUploadModel(); !first.GetDone() || first.GetMetadata().GetVerb() != "upload" ||
		r.GetModel() != vertexModel || r.GetModelVersionId() != "1" {
		t.Fatalf("first upload = %v, want a done operation answering version 1", first)
	}

	// 100 uploads at once, every other one asking for "prod".
	const n = 100
	var wg sync.WaitGroup
	errc := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			m := &loomv1.Model{ArtifactUri: dir, VersionDescription: fmt.Sprint("upload ", i), Labels: map[string]string{"batch": fmt.Sprint(i % 2)}}
			if i%2 == 0 {
				m.VersionAliases = []string{"prod"}
			}
			_, err := c.UploadModel(ctx, &loomv1.UploadModelRequest{Parent: vertexParent, ParentModel: vertexModel, Model: m})
			errc <- err
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		if err != nil {
			t.Fatalf("concurrent upload: %v", err)
		}
	}
	vs := allVersions(t, ctx, c, &loomv1.ListModelVersionsRequest{Parent: vertexModel, PageSize: 17})
	if len(vs) != n+1 {
		t.Fatalf("%d versions, want %d", len(vs), n+1)
	}
	for i, v := range vs {
		if want := fmt.Sprint(i + 1); v.GetVersionId() != want || v.GetName() != vertexModel+"@"+want {
			t.Fatalf("version %d listed as %s (%s), want id %s", i, v.GetVersionId(), v.GetName(), want)
		}
	}
	h := holders(vs)
	if !slices.Equal(h["default"], []string{"1"}) || len(h["prod"]) != 1 {
		t.Fatalf("alias holders after the uploads: %v, want default on 1 and prod on exactly one", h)
	}

	// Names resolve: bare → default, @alias, @version; lineage is served.
	got, err := c.GetModel(ctx, &loomv1.GetModelRequest{Name: vertexModel})
	if err != nil || got.GetVersionId() != "1" || got.GetDisplayName() != "Tiny" || got.GetLineage().GetJobId() != "7" ||
		got.GetLineage().GetHyperparameters()["lr"] != "0.1" || got.GetLabels()["team"] != "vision" {
		t.Fatalf("GetModel(bare) = %v, %v", got, err)
	}
	prod, err := c.GetModel(ctx, &loomv1.GetModelRequest{Name: vertexModel + "@prod"})
	if err != nil || prod.GetVersionId() != h["prod"][0] {
		t.Fatalf("GetModel(@prod) = %v, %v; prod is on %v", prod, err, h["prod"])
	}
	if _, err := c.GetModel(ctx, &loomv1.GetModelRequest{Name: "projects/default/models/tiny@101"}); err != nil {
		t.Fatalf("GetModel(Loom form @101): %v", err)
	}
	_, err = c.GetModel(ctx, &loomv1.GetModelRequest{Name: vertexModel + "@staging"})
	wantCode(t, "GetModel(@staging)", err, codes.NotFound, "alias")

	// Moving default is atomic: one holder before and after.
	moved, err := c.MergeVersionAliases(ctx, &loomv1.MergeVersionAliasesRequest{Name: vertexModel + "@50", VersionAliases: []string{"default", "staging"}})
	if err != nil || !slices.Contains(moved.GetVersionAliases(), "default") {
		t.Fatalf("MergeVersionAliases(@50 default) = %v, %v", moved, err)
	}
	_, err = c.MergeVersionAliases(ctx, &loomv1.MergeVersionAliasesRequest{Name: vertexModel + "@50", VersionAliases: []string{"-default"}})
	wantCode(t, "removing default", err, codes.InvalidArgument, "only moved")
	_, err = c.MergeVersionAliases(ctx, &loomv1.MergeVersionAliasesRequest{Name: vertexModel + "@2", VersionAliases: []string{"latest"}})
	wantCode(t, "reserved alias", err, codes.InvalidArgument, "reserved")
	if _, err := c.MergeVersionAliases(ctx, &loomv1.MergeVersionAliasesRequest{Name: vertexModel + "@staging", VersionAliases: []string{"-staging"}}); err != nil {
		t.Fatalf("removing staging: %v", err)
	}
	h = holders(allVersions(t, ctx, c, &loomv1.ListModelVersionsRequest{Parent: vertexModel}))
	if !slices.Equal(h["default"], []string{"50"}) || len(h["staging"]) != 0 {
		t.Fatalf("holders after the moves: %v", h)
	}

	// Deleting the default version is refused with the reason; another goes.
	_, err = c.DeleteModelVersion(ctx, &loomv1.DeleteModelVersionRequest{Name: vertexModel + "@50"})
	wantCode(t, "deleting the default version", err, codes.FailedPrecondition, "holds the \"default\" alias")
	// A version holding a serving alias is refused, naming it, until the
	// caller says force: then the alias goes with it.
	if _, err := c.MergeVersionAliases(ctx, &loomv1.MergeVersionAliasesRequest{Name: vertexModel + "@101", VersionAliases: []string{"prod"}}); err != nil {
		t.Fatalf("MergeVersionAliases(@101 prod): %v", err)
	}
	_, err = c.DeleteModelVersion(ctx, &loomv1.DeleteModelVersionRequest{Name: vertexModel + "@101"})
	wantCode(t, "deleting the version holding prod", err, codes.FailedPrecondition, "holds alias prod: move or remove it first")
	if _, err := c.GetModel(ctx, &loomv1.GetModelRequest{Name: vertexModel + "@prod"}); err != nil {
		t.Fatalf("prod after a refused delete: %v", err)
	}
	if _, err := c.DeleteModelVersion(ctx, &loomv1.DeleteModelVersionRequest{Name: vertexModel + "@101", Force: true}); err != nil {
		t.Fatalf("DeleteModelVersion(@101, force): %v", err)
	}
	_, err = c.GetModel(ctx, &loomv1.GetModelRequest{Name: vertexModel + "@prod"})
	wantCode(t, "GetModel(@prod) after its version was deleted", err, codes.NotFound, "alias")
	_, err = c.GetModel(ctx, &loomv1.GetModelRequest{Name: vertexModel + "@101"})
	wantCode(t, "GetModel of a deleted version", err, codes.NotFound, "no version 101")
	// Ids are never reused: the next upload is 102.
	next, err := c.UploadModel(ctx, &loomv1.UploadModelRequest{Parent: vertexParent, ParentModel: vertexModel, Model: &loomv1.Model{ArtifactUri: dir}})
	if err != nil || next.GetUploadModel().GetModelVersionId() != "102" {
		t.Fatalf("upload after a delete = %v, %v; want version 102", next, err)
	}

	// UpdateModel: only the masked fields change.
	upd, err := c.UpdateModel(ctx, &loomv1.UpdateModelRequest{
		Model:      &loomv1.Model{Name: vertexModel + "@3", VersionDescription: "retrained", Labels: map[string]string{"stage": "qa"}, DisplayName: "ignored"},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"versionDescription", "labels"}},
	})
	if err != nil || upd.GetVersionDescription() != "retrained" || upd.GetLabels()["stage"] != "qa" || upd.GetDisplayName() != "Tiny" ||
		!upd.GetVersionUpdateTime().AsTime().After(upd.GetVersionCreateTime().AsTime().Add(-time.Nanosecond)) {
		t.Fatalf("UpdateModel = %v, %v", upd, err)
	}
	_, err = c.UpdateModel(ctx, &loomv1.UpdateModelRequest{Model: &loomv1.Model{Name: vertexModel}, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"artifact_uri"}}})
	wantCode(t, "updating artifact_uri", err, codes.InvalidArgument, "cannot be updated")

	// Filter, order and stable pages.
	odd := allVersions(t, ctx, c, &loomv1.ListModelVersionsRequest{Parent: vertexModel, Filter: "labels.batch=1", OrderBy: "version_id desc", PageSize: 7})
	wantOdd := 0
	for _, v := range allVersions(t, ctx, c, &loomv1.ListModelVersionsRequest{Parent: vertexModel}) {
		if v.GetLabels()["batch"] == "1" {
			wantOdd++
		}
	}
	if len(odd) != wantOdd || wantOdd < n/2-2 {
		t.Fatalf("labels.batch=1: %d versions, want %d", len(odd), wantOdd)
	}
	for i := 1; i < len(odd); i++ {
		if versionNum(odd[i-1]) <= versionNum(odd[i]) || odd[i].GetLabels()["batch"] != "1" {
			t.Fatalf("labels.batch=1 by version_id desc: %s then %s", odd[i-1].GetVersionId(), odd[i].GetVersionId())
		}
	}
	_, err = c.ListModelVersions(ctx, &loomv1.ListModelVersionsRequest{Parent: vertexModel, OrderBy: "artifact_uri"})
	wantCode(t, "order_by artifact_uri", err, codes.InvalidArgument, "order_by")
	page, err := c.ListModelVersions(ctx, &loomv1.ListModelVersionsRequest{Parent: vertexModel, PageSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.ListModelVersions(ctx, &loomv1.ListModelVersionsRequest{Parent: vertexModel, PageSize: 2, PageToken: page.GetNextPageToken(), Filter: "labels.batch=0"})
	wantCode(t, "a token with another filter", err, codes.InvalidArgument, "page_token")

	// A second model; ListModels filters and orders.
	if _, err := c.UploadModel(ctx, &loomv1.UploadModelRequest{Parent: vertexParent, Model: &loomv1.Model{DisplayName: "Big One", ArtifactUri: dir, Labels: map[string]string{"team": "nlp"}}}); err != nil {
		t.Fatal(err)
	}
	ms, err := c.ListModels(ctx, &loomv1.ListModelsRequest{Parent: vertexParent, Filter: `labels.team=nlp`})
	if err != nil || len(ms.GetModels()) != 1 || ms.GetModels()[0].GetName() != vertexParent+"/models/big-one@1" {
		t.Fatalf("ListModels(labels.team=nlp) = %v, %v", ms, err)
	}
	// ListModels matches each model at its default version (Vertex's):
	// tiny's version 3 has stage=qa, its default (50) has not; the
	// versions list finds it (docs/registry.md).
	ms, err = c.ListModels(ctx, &loomv1.ListModelsRequest{Parent: vertexParent, Filter: `labels.stage=qa`})
	if err != nil || len(ms.GetModels()) != 0 {
		t.Fatalf("ListModels(labels.stage=qa) = %v, %v; want none (only version 3 has it, not the default)", ms, err)
	}
	if qa := allVersions(t, ctx, c, &loomv1.ListModelVersionsRequest{Parent: vertexModel, Filter: `labels.stage=qa`}); len(qa) != 1 || qa[0].GetVersionId() != "3" {
		t.Fatalf("ListModelVersions(labels.stage=qa) = %v; want version 3", qa)
	}
	ms, err = c.ListModels(ctx, &loomv1.ListModelsRequest{Parent: vertexParent, Filter: `display_name="Tiny" AND create_time>"2000-01-01T00:00:00Z"`, OrderBy: "create_time desc"})
	if err != nil || len(ms.GetModels()) != 1 || ms.GetModels()[0].GetVersionId() != "50" {
		t.Fatalf("ListModels(display_name, create_time) = %v, %v (want tiny at its default, 50)", ms, err)
	}
	ms, err = c.ListModels(ctx, &loomv1.ListModelsRequest{Parent: vertexParent, OrderBy: "display_name desc"})
	if err != nil || len(ms.GetModels()) != 2 || ms.GetModels()[0].GetDisplayName() != "Tiny" {
		t.Fatalf("ListModels(display_name desc) = %v, %v", ms, err)
	}

	// Registration is refused for an incomplete artifact directory.
	empty := t.TempDir()
	_, err = c.UploadModel(ctx, &loomv1.UploadModelRequest{Parent: vertexParent, ParentModel: vertexModel, Model: &loomv1.Model{ArtifactUri: empty}})
	wantCode(t, "upload without MANIFEST", err, codes.InvalidArgument, "MANIFEST")

	// The only version of a model cannot be deleted; the model can.
	_, err = c.DeleteModelVersion(ctx, &loomv1.DeleteModelVersionRequest{Name: vertexParent + "/models/big-one@1"})
	wantCode(t, "deleting the only version", err, codes.FailedPrecondition, "only version")
	if _, err := c.DeleteModel(ctx, &loomv1.DeleteModelRequest{Name: vertexParent + "/models/big-one"}); err != nil {
		t.Fatal(err)
	}
	_, err = c.GetModel(ctx, &loomv1.GetModelRequest{Name: vertexParent + "/models/big-one"})
	wantCode(t, "GetModel of a deleted model", err, codes.NotFound, "big-one")
}

func versionNum(m *loomv1.Model) int {
	var n int
	_, _ = fmt.Sscan(m.GetVersionId(), &n)
	return n
}

// TestExportModel exports a version's artifacts under the export root's
// directory of its project, and again (nothing copied the second time).
// Only MANIFEST and the files it lists are carried (a stray file of the
// directory stays behind); a destination outside the root, or in another
// project's directory of it, is refused.
func TestExportModel(t *testing.T) {
	t.Parallel()
	x := newExportFixture(t, time.Minute, nil)
	ctx, c, root := x.ctx, x.c, x.root
	dir := modelDir(t)
	if err := os.WriteFile(filepath.Join(dir, "stray.txt"), []byte("not in the MANIFEST"), 0o644); err != nil {
		t.Fatal(err)
	}
	x.upload(dir)
	for dst, says := range map[string]string{
		"file://" + root + "/../escape":   "outside project default's directory of the export root: export under " + root + "/default/",
		"file://" + root + "/other/tiny":  "outside project default's directory",
		"file://" + root + "/defaultx/t":  "outside project default's directory",
		"file://" + root + "/tiny-direct": "outside project default's directory",
	} {
		// The same refusal with validate_only: the check the gateway
		// runs before it starts an export operation.
		for _, validate := range []bool{false, true} {
			_, err := c.ExportModel(ctx, &loomv1.ExportModelRequest{Name: vertexModel, ValidateOnly: validate, OutputConfig: &loomv1.ExportModelOutputConfig{
				ArtifactDestination: &loomv1.GcsDestination{OutputUriPrefix: dst}}})
			wantCode(t, fmt.Sprintf("export to %s (validate_only %v)", dst, validate), err, codes.InvalidArgument, says)
		}
	}
	_, err := c.ExportModel(ctx, &loomv1.ExportModelRequest{Name: vertexModel + "@9", ValidateOnly: true, OutputConfig: &loomv1.ExportModelOutputConfig{
		ArtifactDestination: &loomv1.GcsDestination{OutputUriPrefix: "file://" + root + "/default/x"}}})
	wantCode(t, "validate_only export of a version that is not there", err, codes.NotFound, "9")
	out := filepath.Join(root, "default", "tiny-1")
	dst := "file://" + out
	req := &loomv1.ExportModelRequest{Name: vertexModel + "@1", OutputConfig: &loomv1.ExportModelOutputConfig{
		ArtifactDestination: &loomv1.GcsDestination{OutputUriPrefix: dst}}}
	// validate_only of a good export: done, nothing copied.
	checked, err := c.ExportModel(ctx, &loomv1.ExportModelRequest{Name: req.Name, OutputConfig: req.OutputConfig, ValidateOnly: true})
	if err != nil || !checked.GetDone() || checked.GetExportModel() != nil {
		t.Fatalf("ExportModel(validate_only) = %v, %v; want done with no result", checked, err)
	}
	if _, err := os.Stat(out); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("validate_only wrote %s: %v", out, err)
	}
	res, err := c.ExportModel(ctx, req)
	if err != nil || res.GetExportModel().GetCopied() != 2 || res.GetExportModel().GetDestination() != dst {
		t.Fatalf("ExportModel = %v, %v; want 2 objects copied to %s", res, err, dst)
	}
	for _, f := range []string{"model.json", "MANIFEST"} {
		want, _ := os.ReadFile(filepath.Join(dir, f))
		got, err := os.ReadFile(filepath.Join(out, f))
		if err != nil || string(got) != string(want) {
			t.Fatalf("exported %s = %q, %v; want %q", f, got, err, want)
		}
	}
	// The artifacts and nothing else: neither the stray file nor go-cloud
	// attributes files beside them.
	if ents, err := os.ReadDir(out); err != nil || len(ents) != 2 {
		t.Fatalf("the export directory holds %v (%v); want model.json and MANIFEST only", ents, err)
	}
	again, err := c.ExportModel(ctx, req)
	if err != nil || again.GetExportModel().GetCopied() != 0 || again.GetExportModel().GetSkipped() != 2 || !again.GetDone() {
		t.Fatalf("second ExportModel = %v, %v; want nothing copied", again, err)
	}

}

// TestExportChecksTheManifest: an export copies the artifact set only as
// it was registered. A tester registered a directory, appended to its
// model.json, and exported it: "2 copied", and `sha256sum -c MANIFEST`
// failed at the destination. Now the version records its MANIFEST's
// digest; each file is copied only with the SHA-256 the MANIFEST lists,
// the MANIFEST last, so a changed file fails the export naming it and the
// destination holds no MANIFEST of it; a MANIFEST rewritten to match fails
// the export before anything is copied; an earlier good export is left as
// it was.
func TestExportChecksTheManifest(t *testing.T) {
	t.Parallel()
	x := newExportFixture(t, time.Minute, nil)
	ctx, c, root := x.ctx, x.c, x.root
	dir := modelDir(t)
	x.upload(dir)
	registered, err := artifact.Verify(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	vs, err := c.ListModelVersions(ctx, &loomv1.ListModelVersionsRequest{Parent: testModel})
	if err != nil || len(vs.GetVersions()) != 1 || vs.GetVersions()[0].GetManifestSha256() != registered {
		t.Fatalf("stored versions %v, %v; want one recording the MANIFEST's SHA-256 %s", vs.GetVersions(), err, registered)
	}
	export := func(to string) (*loomv1.Operation, error) {
		return c.ExportModel(ctx, &loomv1.ExportModelRequest{Name: vertexModel + "@1", OutputConfig: &loomv1.ExportModelOutputConfig{
			ArtifactDestination: &loomv1.GcsDestination{OutputUriPrefix: "file://" + to}}})
	}
	good := filepath.Join(root, "default", "good")
	if res, err := export(good); err != nil || res.GetExportModel().GetCopied() != 2 {
		t.Fatalf("ExportModel of the set as registered = %v, %v; want 2 copied", res, err)
	}
	if got, err := artifact.Verify(ctx, good); err != nil || got != registered {
		t.Fatalf("the export does not check against its MANIFEST (sha256sum -c): %s, %v", got, err)
	}

	// echo TAMPERED >> model.json
	f, err := os.OpenFile(filepath.Join(dir, "model.json"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = f.WriteString("TAMPERED\n")
	_ = f.Close()
	tampered := filepath.Join(root, "default", "tampered")
	_, err = export(tampered)
	wantCode(t, "export of a changed file", err, codes.FailedPrecondition, `"model.json"`)
	if !strings.Contains(status.Convert(err).Message(), "differs from the MANIFEST it was registered with") {
		t.Errorf("export of a changed file: %v; want it to say the file differs from the registered MANIFEST", err)
	}
	// Over the good export: refused the same, and the good copy stays.
	_, err = export(good)
	wantCode(t, "export of a changed file over a good export", err, codes.FailedPrecondition, `"model.json"`)
	for _, d := range []string{tampered, good} {
		ents, _ := os.ReadDir(d)
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		switch {
		case d == tampered && len(names) != 0:
			t.Errorf("a refused export left %v in %s; want nothing (no MANIFEST, no changed file)", names, d)
		case d == good:
			if got, err := artifact.Verify(ctx, d); err != nil || got != registered {
				t.Errorf("the earlier export was changed: %v, %v", names, err)
			}
		}
	}

	// What the export found is kept on the version: a read says it, and
	// the next export is refused up front quoting it.
	changed := func(ref, file string) {
		t.Helper()
		m, err := c.GetModel(ctx, &loomv1.GetModelRequest{Name: vertexModel + ref})
		if err != nil || !strings.Contains(m.GetArtifactChanged(), file) {
			t.Fatalf("GetModel(%s) = artifact_changed %q, %v; want it to name %s", ref, m.GetArtifactChanged(), err, file)
		}
	}
	changed("@1", `"model.json"`)

	// The MANIFEST rewritten to match a change (another version, v2):
	// not the one registered, refused before anything is copied, naming
	// the MANIFEST.
	dir2 := modelDir(t)
	x.upload(dir2)
	if err := os.WriteFile(filepath.Join(dir2, "model.json"), []byte(`{"weights":[9]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := artifact.WriteManifest(dir2); err != nil {
		t.Fatal(err)
	}
	rewritten := filepath.Join(root, "default", "rewritten")
	_, err = c.ExportModel(ctx, &loomv1.ExportModelRequest{Name: vertexModel + "@2", OutputConfig: &loomv1.ExportModelOutputConfig{
		ArtifactDestination: &loomv1.GcsDestination{OutputUriPrefix: "file://" + rewritten}}})
	wantCode(t, "export of a rewritten MANIFEST", err, codes.FailedPrecondition, "MANIFEST at file://"+dir2+" is not the one registered")
	if ents, _ := os.ReadDir(rewritten); len(ents) != 0 {
		t.Errorf("a refused export left %d files in %s", len(ents), rewritten)
	}
	changed("@2", "MANIFEST at file://"+dir2)
	_, err = export(filepath.Join(root, "default", "again"))
	wantCode(t, "export of a version marked changed", err, codes.FailedPrecondition, `its artifacts changed after registration, and nothing was copied: a file differs from the MANIFEST it was registered with`)
}

// TestSecondRunOverwritesAVersion: a user ran two TrainingPipelines with
// one outputUriPrefix; both registered file:///data/p/model, the second
// run rewrote the first's files, and v1 (and its alias prod) silently
// served v2's weights. Registering v2 now marks v1 changed in the same
// write: reads say so, through the alias too, and an export of v1 is
// refused naming the MANIFEST. A second registration of the very same set
// (the same MANIFEST) is no change and marks nothing.
func TestSecondRunOverwritesAVersion(t *testing.T) {
	t.Parallel()
	x := newExportFixture(t, time.Minute, nil)
	ctx, c, root := x.ctx, x.c, x.root
	dir := modelDir(t)
	upload := func() {
		t.Helper()
		x.upload("file://" + dir)
	}
	get := func(ref string) *loomv1.Model {
		t.Helper()
		m, err := c.GetModel(ctx, &loomv1.GetModelRequest{Name: vertexModel + ref})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	upload()
	if _, err := c.MergeVersionAliases(ctx, &loomv1.MergeVersionAliasesRequest{Name: vertexModel + "@1", VersionAliases: []string{"prod"}}); err != nil {
		t.Fatal(err)
	}
	// The second run writes the same directory.
	if err := os.WriteFile(filepath.Join(dir, "model.json"), []byte(`{"weights":[0.75,1.5]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := artifact.WriteManifest(dir); err != nil {
		t.Fatal(err)
	}
	upload()
	prod := get("@prod")
	if prod.GetVersionId() != "1" || !strings.Contains(prod.GetArtifactChanged(), "registered again as projects/default/models/tiny/versions/2") ||
		!strings.Contains(prod.GetArtifactChanged(), "file://"+dir) || !strings.Contains(prod.GetArtifactChanged(), "MANIFEST") {
		t.Fatalf("GetModel(@prod) = version %s, artifact_changed %q; want version 1 said changed by version 2's registration of file://%s",
			prod.GetVersionId(), prod.GetArtifactChanged(), dir)
	}
	if v2 := get("@2"); v2.GetArtifactChanged() != "" {
		t.Errorf("version 2 is said changed: %q", v2.GetArtifactChanged())
	}
	out := filepath.Join(root, "default", "prod")
	_, err := c.ExportModel(ctx, &loomv1.ExportModelRequest{Name: vertexModel + "@prod", OutputConfig: &loomv1.ExportModelOutputConfig{
		ArtifactDestination: &loomv1.GcsDestination{OutputUriPrefix: "file://" + out}}})
	wantCode(t, "export of the overwritten version", err, codes.FailedPrecondition, "MANIFEST")
	if !strings.Contains(status.Convert(err).Message(), "registered again as projects/default/models/tiny/versions/2") {
		t.Errorf("export of the overwritten version: %v; want it to say version 2 was registered from its directory", err)
	}
	if ents, _ := os.ReadDir(out); len(ents) != 0 {
		t.Errorf("a refused export left %d files in %s", len(ents), out)
	}
	// The same set registered again: v2's files are still v2's.
	upload()
	if v2 := get("@2"); v2.GetArtifactChanged() != "" {
		t.Errorf("a registration of the same set marked version 2 changed: %q", v2.GetArtifactChanged())
	}
	if got := get("@1").GetArtifactChanged(); got != prod.GetArtifactChanged() {
		t.Errorf("version 1's mark changed from %q to %q; the first mark stays", prod.GetArtifactChanged(), got)
	}
}

// TestJobOutputRecordsItsManifest: a job's model output, registered when
// the job completes, gets a MANIFEST of every file's SHA-256 at that first
// registration (written in the directory as the job's owner, none being
// there) and the version keeps its digest, so that a file changed in place
// afterwards, with no later registration, is found by the version's export
// (refused, naming the file, the version then marked) rather than copied
// as if it were the job's. Before, a job's version recorded no digest, and
// its directory had no MANIFEST to export from.
func TestJobOutputRecordsItsManifest(t *testing.T) {
	t.Parallel()
	x := newExportFixture(t, time.Minute, nil)
	ctx, c, root := x.ctx, x.c, x.root
	// The job's owner: this test's own account, or, as root (whom the
	// registry writes no MANIFEST as), an account made for it.
	owner, parent := osuser.Self(), t.TempDir()
	if owner.Root() {
		owner, parent = testkit.OSUsers(t, 1)[0].Account, testkit.ReachableDir(t)
	}
	dir := filepath.Join(parent, "model")
	if err := os.MkdirAll(filepath.Join(dir, "shards"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{"model.json": `{"weights":[0.25,0.5]}`, "shards/0.bin": "shard zero"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if !osuser.IsSelf(owner) {
		// The owner wrote the directory: the registry writes the MANIFEST as them.
		for _, p := range []string{dir, filepath.Join(dir, "shards"), filepath.Join(dir, "model.json"), filepath.Join(dir, "shards/0.bin")} {
			if err := os.Lchown(p, int(owner.UID), int(owner.GID)); err != nil {
				t.Fatal(err)
			}
		}
	}
	ev := completedJob("41")
	jc := ev.Payload.(*eventsv1.JobChanged)
	jc.ModelDir, jc.Job.User = dir, owner.Name
	testkit.PublishAs(t, x.broker, "scheduler", ev)
	vs := waitVersions(t, c, 1)
	recorded, err := artifact.Verify(ctx, dir)
	if err != nil {
		t.Fatalf("the job's directory after its registration: %v; want a MANIFEST listing its files", err)
	}
	if got := vs[0].GetManifestSha256(); got != recorded {
		t.Fatalf("the job's version records MANIFEST digest %q; want %s, the MANIFEST now in its directory", got, recorded)
	}
	export := func(to string) (*loomv1.Operation, error) {
		return c.ExportModel(ctx, &loomv1.ExportModelRequest{Name: vertexModel + "@1", OutputConfig: &loomv1.ExportModelOutputConfig{
			ArtifactDestination: &loomv1.GcsDestination{OutputUriPrefix: "file://" + to}}})
	}
	if res, err := export(filepath.Join(root, "default", "good")); err != nil || res.GetExportModel().GetCopied() != 3 {
		t.Fatalf("ExportModel of the job's output as registered = %v, %v; want its 2 files and the MANIFEST copied", res, err)
	}
	// The shard is rewritten in place; nothing registers the directory again.
	if err := os.WriteFile(filepath.Join(dir, "shards/0.bin"), []byte("shard zero, retrained"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = export(filepath.Join(root, "default", "changed"))
	wantCode(t, "export of a job's output changed in place", err, codes.FailedPrecondition, "shards/0.bin")
	m, err := c.GetModel(ctx, &loomv1.GetModelRequest{Name: vertexModel + "@1"})
	if err != nil || !strings.Contains(m.GetArtifactChanged(), "shards/0.bin") {
		t.Fatalf("GetModel(@1) after the export found the change: %q, %v; want it marked naming shards/0.bin", m.GetArtifactChanged(), err)
	}
}
