package cli

import (
	"context"
	"encoding/json"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/termtext"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// registryFake serves ModelService from two fixed versions of model "tiny"
// and records each request, so the test checks what each command sends and
// how it prints the answers. The registry's behaviour itself is tested on
// the real service (services/registry).
type registryFake struct {
	loomv1.UnimplementedModelServiceServer
	mu   sync.Mutex
	reqs []proto.Message
}

func (f *registryFake) rec(m proto.Message) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reqs = append(f.reqs, proto.Clone(m))
}

func (f *registryFake) last() proto.Message {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reqs[len(f.reqs)-1]
}

// tinyVersion is version v of tiny; version 1's lineage is Loom's record,
// the others' an uploader's word.
func tinyVersion(v string, aliases ...string) *loomv1.Model {
	ts := timestamppb.New(testNow.Add(-2 * time.Hour))
	by := "users/bob"
	if v == "1" {
		by = "loom"
	}
	return &loomv1.Model{
		Name: "projects/default/locations/global/models/tiny@" + v, DisplayName: "Tiny", LatestVersion: 2,
		VersionId: v, VersionAliases: aliases, VersionDescription: "version " + v, Labels: map[string]string{"team": "vision"},
		ArtifactUri: "file:///data/tiny/" + v, VersionCreateTime: ts, VersionUpdateTime: ts, CreateTime: ts, UpdateTime: ts,
		Lineage: &loomv1.ModelLineage{Job: "projects/default/jobs/7", Trial: "projects/default/locations/global/hyperparameterTuningJobs/3/trials/" + v,
			Hyperparameters: map[string]string{"lr": "0.1"}, Metrics: map[string]float64{"loss": 0.25}, RecordedBy: by},
	}
}

func (f *registryFake) ListModels(_ context.Context, r *loomv1.ListModelsRequest) (*loomv1.ListModelsResponse, error) {
	f.rec(r)
	return &loomv1.ListModelsResponse{Models: []*loomv1.Model{tinyVersion("1", "default")}}, nil
}

func (f *registryFake) ListModelVersions(_ context.Context, r *loomv1.ListModelVersionsRequest) (*loomv1.ListModelVersionsResponse, error) {
	f.rec(r)
	return &loomv1.ListModelVersionsResponse{Models: []*loomv1.Model{tinyVersion("1", "default"), tinyVersion("2", "prod", "canary")}}, nil
}

func (f *registryFake) GetModel(_ context.Context, r *loomv1.GetModelRequest) (*loomv1.Model, error) {
	f.rec(r)
	if strings.HasSuffix(r.GetName(), "@9") {
		return nil, status.Error(codes.NotFound, "model projects/default/models/tiny has no version 9 (loom models versions tiny lists them): not found")
	}
	if strings.HasSuffix(r.GetName(), "@nope") {
		return nil, status.Error(codes.NotFound, `model projects/default/models/tiny has no version with alias "nope": not found`)
	}
	if strings.Contains(r.GetName(), "/ghost") {
		return nil, status.Error(codes.NotFound, "model projects/default/models/ghost: not found")
	}
	if strings.HasSuffix(r.GetName(), "@1") {
		v := tinyVersion("1", "default")
		v.ArtifactChanged = "file:///data/tiny/1 was registered again as projects/default/models/tiny/versions/2"
		return v, nil
	}
	return tinyVersion("2", "prod"), nil
}

// UploadModel answers a running operation named "upload-" and the
// directory's last segment ("upload-bad" fails); GetOperation (opsFake)
// finishes it with version 3 of tiny.
func (f *registryFake) UploadModel(_ context.Context, r *loomv1.UploadModelRequest) (*loomv1.Operation, error) {
	f.rec(r)
	dir := r.GetModel().GetArtifactUri()
	return &loomv1.Operation{Name: "projects/default/operations/upload-" + dir[strings.LastIndex(dir, "/")+1:],
		Metadata: &loomv1.OperationMetadata{Verb: "upload", Target: r.GetParent(), Progress: "requested"}}, nil
}

func (f *registryFake) MergeVersionAliases(_ context.Context, r *loomv1.MergeVersionAliasesRequest) (*loomv1.Model, error) {
	f.rec(r)
	return tinyVersion("2", "default"), nil
}

func (f *registryFake) DeleteModel(_ context.Context, r *loomv1.DeleteModelRequest) (*loomv1.DeleteModelResponse, error) {
	f.rec(r)
	return &loomv1.DeleteModelResponse{}, nil
}

func (f *registryFake) DeleteModelVersion(_ context.Context, r *loomv1.DeleteModelVersionRequest) (*loomv1.DeleteModelResponse, error) {
	f.rec(r)
	if r.GetForce() {
		return &loomv1.DeleteModelResponse{}, nil
	}
	return nil, status.Error(codes.FailedPrecondition, `version 1 of projects/default/models/tiny holds the "default" alias: move it to another version first (loom models alias tiny@N default)`)
}

// ExportModel answers a running operation, named after the destination's
// last segment ("denied" fails); GetOperation (opsFake) shows it copying
// once, then done.
func (f *registryFake) ExportModel(_ context.Context, r *loomv1.ExportModelRequest) (*loomv1.Operation, error) {
	f.rec(r)
	dst := r.GetOutputConfig().GetArtifactDestination().GetOutputUriPrefix()
	return &loomv1.Operation{Name: "projects/default/operations/" + dst[strings.LastIndex(dst, "/")+1:],
		Metadata: &loomv1.OperationMetadata{Verb: "export", Target: r.GetName(), Progress: "requested"}}, nil
}

// opsFake serves OperationService for registryFake's exports and uploads.
type opsFake struct {
	loomv1.UnimplementedOperationServiceServer
	mu    sync.Mutex
	polls map[string]int
}

func (o *opsFake) GetOperation(_ context.Context, r *loomv1.GetOperationRequest) (*loomv1.Operation, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.polls[r.GetName()]++
	op := &loomv1.Operation{Name: r.GetName(), Metadata: &loomv1.OperationMetadata{Verb: "export", Progress: "copying"}}
	if o.polls[r.GetName()] < 2 {
		return op, nil
	}
	op.Done, op.Metadata.Progress = true, "done"
	if strings.HasSuffix(r.GetName(), "/denied") {
		op.Result = &loomv1.Operation_Error{Error: &loomv1.OperationError{Code: int32(codes.PermissionDenied),
			Message: "s3://bucket/denied: the registry's credentials may not write there; grant it s3:PutObject"}}
		return op, nil
	}
	if strings.HasSuffix(r.GetName(), "/upload-bad") {
		op.Result = &loomv1.Operation_Error{Error: &loomv1.OperationError{Code: int32(codes.InvalidArgument),
			Message: "model.artifact_uri: /data/bad has no MANIFEST; write it last, then upload again"}}
		return op, nil
	}
	if strings.Contains(r.GetName(), "/upload-") {
		op.Result = &loomv1.Operation_UploadModel{UploadModel: &loomv1.UploadModelResponse{Model: "projects/default/locations/global/models/tiny", ModelVersionId: "3"}}
		return op, nil
	}
	op.Result = &loomv1.Operation_ExportModel{ExportModel: &loomv1.ExportModelResponse{Destination: "s3://bucket/tiny", Copied: 2, Bytes: 123, Objects: 2}}
	return op, nil
}

func serveRegistryFake(t *testing.T) (*registryFake, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &registryFake{}
	s := grpc.NewServer()
	loomv1.RegisterModelServiceServer(s, f)
	loomv1.RegisterOperationServiceServer(s, &opsFake{polls: map[string]int{}})
	go func() { _ = s.Serve(ln) }()
	t.Cleanup(s.Stop)
	return f, ln.Addr().String()
}

// TestModelsCommands: each `loom models` command sends its request and
// prints an aligned table, a sentence or --output json.
func TestModelsCommands(t *testing.T) {
	t.Parallel()
	f, gw := serveRegistryFake(t)

	out, errOut, code := run(t, gw, "models", "versions", "tiny", "--filter", "labels.team=vision", "--order-by", "version_id desc")
	want := "" +
		"VERSION  ALIASES      DESCRIPTION  PRODUCED BY                                          ARTIFACT             CREATED\n" +
		"1        default      version 1    hyperparameterTuningJobs/3/trials/1                  file:///data/tiny/1  2h ago\n" +
		"2        prod,canary  version 2    hyperparameterTuningJobs/3/trials/2 (per users/bob)  file:///data/tiny/2  2h ago\n"
	if code != 0 || out != want {
		t.Errorf("versions: code %d, stderr %s, out:\n%s\nwant:\n%s", code, errOut, out, want)
	}
	if r := f.last().(*loomv1.ListModelVersionsRequest); r.GetParent() != "projects/default/models/tiny" || r.GetFilter() != "labels.team=vision" || r.GetOrderBy() != "version_id desc" {
		t.Errorf("versions sent %v", r)
	}

	out, _, code = run(t, gw, "models", "get", "tiny@prod")
	for _, line := range []string{"Name:                 projects/default/locations/global/models/tiny@2", "Aliases:              prod",
		"Hyperparameters:      lr=0.1", "Final metrics:        loss=0.25", "Trial:                projects/default/locations/global/hyperparameterTuningJobs/3/trials/2",
		// An uploader's lineage is shown as theirs (a tester forged one).
		"Lineage from:         users/bob, at upload (their word: not checked against what ran)"} {
		if code != 0 || !strings.Contains(out, line+"\n") {
			t.Errorf("get: missing %q in:\n%s", line, out)
		}
	}
	if r := f.last().(*loomv1.GetModelRequest); r.GetName() != "projects/default/models/tiny@prod" {
		t.Errorf("get sent %v", r)
	}
	if strings.Contains(out, "Artifact changed:") {
		t.Errorf("get of a whole version says it changed:\n%s", out)
	}
	// A version whose files were rewritten says so beside its artifact.
	out, _, code = run(t, gw, "models", "get", "tiny@1")
	if line := "Artifact changed:     file:///data/tiny/1 was registered again as projects/default/models/tiny/versions/2\n"; code != 0 || !strings.Contains(out, line) {
		t.Errorf("get of a changed version: missing %q in:\n%s", line, out)
	}
	out, _, code = run(t, gw, "models", "get", "tiny@2", "-o", "json")
	var js map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &js) != nil || js["versionId"] != "2" {
		t.Errorf("get -o json: %d %s", code, out)
	}
	_, errOut, code = run(t, gw, "models", "get", "tiny@9")
	if code == 0 || !strings.Contains(errOut, "no version 9") || strings.Count(errOut, "loom models versions tiny") != 1 || strings.Contains(errOut, "loom models list") {
		t.Errorf("get of a missing version: %d %s, want it to point at the model's versions, once", code, errOut)
	}
	// A missing alias points at the versions, which show the aliases
	// there are; a missing model at the models.
	_, errOut, code = run(t, gw, "models", "get", "tiny@nope")
	if code == 0 || !strings.Contains(errOut, `no version with alias "nope"`) || !strings.Contains(errOut, "(see `loom models versions tiny`)") {
		t.Errorf("get of a missing alias: %d %s, want it to point at the model's versions", code, errOut)
	}
	_, errOut, code = run(t, gw, "models", "get", "ghost@prod")
	if code == 0 || !strings.Contains(errOut, "(see `loom models list`)") {
		t.Errorf("get of a missing model: %d %s, want it to point at the models", code, errOut)
	}

	out, _, code = run(t, gw, "models", "upload", "/data/tiny/3", "--parent-model", "tiny", "--alias", "prod", "--label", "team=vision", "--version-description", "more data")
	if code != 0 || !strings.HasPrefix(out, "Registering /data/tiny/3 (operation upload-3)\n  requested\n  copying\n  done\n") ||
		!strings.Contains(out, "\nRegistered projects/default/locations/global/models/tiny version 3 (") ||
		!strings.HasSuffix(out, "). See it with: loom models get tiny@3\n") {
		t.Errorf("upload: %d %q", code, out)
	}
	if r := f.last().(*loomv1.UploadModelRequest); r.GetParentModel() != "projects/default/models/tiny" || r.GetModel().GetArtifactUri() != "/data/tiny/3" ||
		r.GetModel().GetVersionAliases()[0] != "prod" || r.GetModel().GetLabels()["team"] != "vision" || r.GetParent() != "projects/default" ||
		r.GetRequestId() == "" {
		t.Errorf("upload sent %v, want a request_id", r)
	}
	// --async prints the operation and does not wait.
	out, _, code = run(t, gw, "models", "upload", "/data/tiny/4", "--model", "tiny", "--async")
	if code != 0 || !strings.Contains(out, "operation projects/default/operations/upload-4\n") {
		t.Errorf("upload --async: %d %q", code, out)
	}
	// A refused upload says why, with the operation's code.
	_, errOut, code = run(t, gw, "models", "upload", "/data/bad", "--model", "tiny")
	if code == 0 || !strings.Contains(errOut, "InvalidArgument") || !strings.Contains(errOut, "has no MANIFEST") {
		t.Errorf("refused upload: %d %s", code, errOut)
	}
	if _, errOut, code = run(t, gw, "models", "upload", "/d", "--model", "x", "--label", "novalue"); code == 0 || !strings.Contains(errOut, "KEY=VALUE") {
		t.Errorf("upload with a bad label: %d %s", code, errOut)
	}

	out, _, code = run(t, gw, "models", "alias", "tiny@2", "default", "--", "-canary")
	if code != 0 || out != "Version 2 of tiny now has aliases: default\n" {
		t.Errorf("alias: %d %q", code, out)
	}
	if r := f.last().(*loomv1.MergeVersionAliasesRequest); strings.Join(r.GetVersionAliases(), " ") != "default -canary" {
		t.Errorf("alias sent %v", r)
	}
	// Without the --, the parser takes -canary for flags: say what to do.
	if _, errOut, code := run(t, gw, "models", "alias", "tiny@2", "-canary"); code != 2 ||
		!strings.Contains(errOut, "unknown shorthand flag: 'c' in -canary: to remove an alias, put -- before it: `loom models alias MODEL@VERSION -- -ALIAS`") {
		t.Errorf("alias -canary without --: %d %q", code, errOut)
	}

	// export waits on its operation, showing its progress.
	out, errOut, code = run(t, gw, "models", "export", "tiny@2", "s3://bucket/tiny")
	if code != 0 || !strings.HasPrefix(out, "Exporting tiny@2 to s3://bucket/tiny (operation tiny)\n  requested\n  copying\n  done\n") ||
		!strings.Contains(out, "\nExported tiny@2 to s3://bucket/tiny: 2 copied, 0 already there, 123 bytes (") {
		t.Errorf("export: %d %q, stderr %q", code, out, errOut)
	}
	if r := f.last().(*loomv1.ExportModelRequest); r.GetName() != "projects/default/models/tiny@2" || r.GetRequestId() == "" {
		t.Errorf("export sent %v, want tiny@2 with a request_id", r)
	}
	// --async prints the operation and does not wait.
	out, _, code = run(t, gw, "models", "export", "tiny@2", "s3://bucket/later", "--async")
	if code != 0 || !strings.Contains(out, "operation projects/default/operations/later\n") {
		t.Errorf("export --async: %d %q", code, out)
	}
	out, _, code = run(t, gw, "models", "export", "tiny@2", "s3://bucket/later-json", "--async", "-o", "json")
	if code != 0 || json.Unmarshal([]byte(out), &js) != nil || js["name"] != "projects/default/operations/later-json" || js["done"] != nil {
		t.Errorf("export --async -o json: %d %s", code, out)
	}
	// A failed export says why, with the operation's code.
	_, errOut, code = run(t, gw, "models", "export", "tiny@2", "s3://bucket/denied")
	if code == 0 || !strings.Contains(errOut, "PermissionDenied") || !strings.Contains(errOut, "grant it s3:PutObject") {
		t.Errorf("failed export: %d %s", code, errOut)
	}

	_, errOut, code = run(t, gw, "models", "delete", "tiny@1")
	if code == 0 || !strings.Contains(errOut, "move it to another version first") {
		t.Errorf("delete of the default version: %d %s", code, errOut)
	}
	if _, ok := f.last().(*loomv1.DeleteModelVersionRequest); !ok {
		t.Errorf("delete tiny@1 sent %T", f.last())
	}
	// --force reaches the registry (a version holding "prod" goes, with
	// its aliases); on a whole model it is a usage error.
	out, _, code = run(t, gw, "models", "delete", "tiny@3", "--force")
	if r, ok := f.last().(*loomv1.DeleteModelVersionRequest); code != 0 || out != "Deleted version tiny@3.\n" || !ok || !r.GetForce() {
		t.Errorf("delete tiny@3 --force: %d %q, sent %v", code, out, f.last())
	}
	_, errOut, code = run(t, gw, "models", "delete", "tiny", "--force")
	if code == 0 || !strings.Contains(errOut, "--force applies to one version") {
		t.Errorf("delete tiny --force: %d %s", code, errOut)
	}
	out, _, code = run(t, gw, "models", "delete", "tiny")
	if code != 0 || out != "Deleted model tiny and all its versions.\n" {
		t.Errorf("delete: %d %q", code, out)
	}

	out, _, code = run(t, gw, "models", "list", "--filter", "labels.team=vision", "-o", "json")
	if code != 0 || !strings.Contains(out, `"versionAliases"`) {
		t.Errorf("list -o json: %d %s", code, out)
	}
	if r := f.last().(*loomv1.ListModelsRequest); r.GetFilter() != "labels.team=vision" {
		t.Errorf("list sent %v", r)
	}
}

// hostileFake answers as a registry holding records stored before it
// refused control characters: escape sequences and a bidirectional
// override in every string it serves.
type hostileFake struct{ *registryFake }

func hostileVersion() *loomv1.Model {
	m := tinyVersion("2", "prod\x1b[2J")
	m.Name = "projects/default/locations/global/models/tiny\x1b[2J@2"
	m.DisplayName = "Tiny\x1b]0;pwned\x07"
	m.Description = "line one\n\tline \x1b[2Jtwo\n"
	m.VersionDescription = "v\x1b[31mred"
	m.VersionId = "2\x1b[1A"
	m.Labels = map[string]string{"team": "x\x1b[2J"}
	m.ArtifactUri = "file:///data/\u202eled.exe"
	m.Lineage = &loomv1.ModelLineage{Trial: "\x1b[2J", Job: "x\x1b]0;pwned\x07", CheckpointUri: "file:///c\u009b2J",
		Hyperparameters: map[string]string{"lr": "0.1\x1b[2J"}, Metrics: map[string]float64{"lo\x1bss": 1}}
	return m
}

func (f hostileFake) ListModels(_ context.Context, r *loomv1.ListModelsRequest) (*loomv1.ListModelsResponse, error) {
	return &loomv1.ListModelsResponse{Models: []*loomv1.Model{hostileVersion()}}, nil
}

func (f hostileFake) ListModelVersions(_ context.Context, r *loomv1.ListModelVersionsRequest) (*loomv1.ListModelVersionsResponse, error) {
	// Loom's name form carries the stored versions too (loom models list
	// --versions prints them).
	stored := &loomv1.ModelVersion{Name: "projects/default/models/tiny/versions/2", Version: 2,
		ArtifactUri: "file:///data/\x1b[2J", SourceJob: "projects/default/jobs/\x1b]0;pwned\x07"}
	return &loomv1.ListModelVersionsResponse{Models: []*loomv1.Model{hostileVersion()}, Versions: []*loomv1.ModelVersion{stored}}, nil
}

func (f hostileFake) GetModel(_ context.Context, r *loomv1.GetModelRequest) (*loomv1.Model, error) {
	return hostileVersion(), nil
}

func (f hostileFake) MergeVersionAliases(_ context.Context, r *loomv1.MergeVersionAliasesRequest) (*loomv1.Model, error) {
	return hostileVersion(), nil
}

// TestModelsCommandsCleanServerText: what the registry answers is printed
// with no character a terminal would act on (a tester found `loom models
// versions` and `get` printing a version's lineage and description raw: an
// upload could clear or retitle the terminal of whoever listed it). A
// description's lines stay lines, in the field's column.
func TestModelsCommandsCleanServerText(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	loomv1.RegisterModelServiceServer(s, hostileFake{&registryFake{}})
	go func() { _ = s.Serve(ln) }()
	t.Cleanup(s.Stop)
	gw := ln.Addr().String()

	acts := func(r rune) bool { return r != '\n' && termtext.Spoofing(r) }
	for _, args := range [][]string{
		{"models", "get", "tiny"}, {"models", "versions", "tiny"}, {"models", "list"}, {"models", "list", "--versions", "tiny"},
		{"models", "alias", "tiny@2", "prod"},
	} {
		out, errOut, code := run(t, gw, args...)
		if code != 0 {
			t.Errorf("%v: code %d, stderr %s", args, code, errOut)
			continue
		}
		if i := strings.IndexFunc(out, acts); i >= 0 {
			t.Errorf("%v printed a character a terminal acts on at byte %d: %q", args, i, out)
		}
		if !strings.Contains(out, "\uFFFD") {
			t.Errorf("%v: no U+FFFD in place of the escapes: %q", args, out)
		}
	}
	out, _, _ := run(t, gw, "models", "get", "tiny")
	for _, line := range []string{
		"Description:          line one\n                          line \uFFFD[2Jtwo\n",
		"Trial:                \uFFFD[2J\n", "Job:                  x\uFFFD]0;pwned\uFFFD\n",
		"Artifact:             file:///data/\uFFFDled.exe\n",
	} {
		if !strings.Contains(out, line) {
			t.Errorf("get: missing %q in:\n%s", line, out)
		}
	}
	out, _, _ = run(t, gw, "models", "versions", "tiny")
	if !strings.Contains(out, "  \uFFFD[2J  ") {
		t.Errorf("versions: PRODUCED BY not cleaned:\n%s", out)
	}
}

// TestModelsListFilterIsTheDefaultVersions: `loom models list --filter
// labels.team=vision` matches each model at its default version (Vertex's
// ListModels), so a model whose label is on another version is not listed.
// A tester read "No models match" as "no such label anywhere"; the answer
// now says which version was matched and where the others are.
func TestModelsListFilterIsTheDefaultVersions(t *testing.T) {
	t.Parallel()
	_, _, gw := newTrainingGateway(t) // no models
	out, _, code := run(t, gw, "models", "list", "--filter", "labels.team=vision")
	if code != 0 || !strings.Contains(out, "match labels.team=vision at their default version") ||
		!strings.Contains(out, "--filter on `loom models versions MODEL` matches every version") {
		t.Errorf("list --filter with no match: %d %q", code, out)
	}
}
