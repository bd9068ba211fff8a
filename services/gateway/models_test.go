package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"

	"github.com/loom-ml/loom/libs/testkit"
)

// The fake registry's changes echo what the gateway handed on, so that the
// REST test can see the camelCase request reach the registry intact.

// UploadModel is never called: the gateway's UploadModel is an operation
// that the registry's UploadModel command runs.
func (fakeRegistry) UploadModel(context.Context, *loomv1.UploadModelRequest) (*loomv1.Operation, error) {
	return nil, status.Error(codes.Unimplemented, "the gateway must send UploadModel as a command")
}

func (fakeRegistry) UpdateModel(_ context.Context, r *loomv1.UpdateModelRequest) (*loomv1.Model, error) {
	return &loomv1.Model{Name: r.GetModel().GetName(), VersionDescription: strings.Join(r.GetUpdateMask().GetPaths(), ","), Labels: r.GetModel().GetLabels()}, nil
}

func (fakeRegistry) MergeVersionAliases(_ context.Context, r *loomv1.MergeVersionAliasesRequest) (*loomv1.Model, error) {
	return &loomv1.Model{Name: r.GetName(), VersionId: "2", VersionAliases: r.GetVersionAliases(),
		Lineage: &loomv1.ModelLineage{TuningJob: "tj", Hyperparameters: map[string]string{"lr": "0.1"}, CheckpointUri: "file:///c"}}, nil
}

func (fakeRegistry) DeleteModel(context.Context, *loomv1.DeleteModelRequest) (*loomv1.DeleteModelResponse, error) {
	return &loomv1.DeleteModelResponse{}, nil
}

// DeleteModelVersion refuses tiny@3 (a version holding "prod") unless
// force is set, as the registry does: the REST test sees force reach it
// from a body and from a query.
func (fakeRegistry) DeleteModelVersion(_ context.Context, r *loomv1.DeleteModelVersionRequest) (*loomv1.DeleteModelResponse, error) {
	if strings.HasSuffix(r.GetName(), "/tiny@3") && !r.GetForce() {
		return nil, status.Error(codes.FailedPrecondition, "version 3 of tiny holds alias prod: move or remove it first")
	}
	return &loomv1.DeleteModelResponse{}, nil
}

// ExportModel is called with validate_only only: the gateway's ExportModel
// asks the registry's checks, then runs the export as an operation that
// the registry's ExportModel command runs. A destination under
// file:///tmp/elsewhere is refused, as a registry whose export root is
// elsewhere refuses it.
func (fakeRegistry) ExportModel(_ context.Context, r *loomv1.ExportModelRequest) (*loomv1.Operation, error) {
	if !r.GetValidateOnly() {
		return nil, status.Error(codes.Unimplemented, "the gateway must send ExportModel as a command")
	}
	if dst := r.GetOutputConfig().GetArtifactDestination().GetOutputUriPrefix(); strings.HasPrefix(dst, "file:///tmp/elsewhere/") {
		return nil, status.Errorf(codes.InvalidArgument, "output_config.artifact_destination.output_uri_prefix: %q is outside the export root", dst)
	}
	return &loomv1.Operation{Done: true}, nil
}

// TestModelsREST: the registry at Vertex's paths takes and answers
// camelCase JSON (lineage under the console's names), the Loom paths keep
// proto names, viewers read but do not change, and changes are audited.
func TestModelsREST(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := testkit.Context(t, wait)
	ana, vic := h.restAs("ana"), h.restAs("vic")
	const models = "/v1/projects/default/locations/global/models"

	call := func(c *http.Client, verb, path, body string, want int) map[string]any {
		t.Helper()
		code, resp := restCall(ctx, t, c, h.restBase, verb, path, body)
		if code != want {
			t.Fatalf("%s %s: %d %s, want %d", verb, path, code, resp, want)
		}
		var out map[string]any
		if err := json.Unmarshal([]byte(resp), &out); err != nil {
			t.Fatalf("%s %s: not JSON: %s", verb, path, resp)
		}
		return out
	}

	got := call(vic, "GET", models+"?pageSize=5&orderBy=createTime%20desc&filter=labels.team%3Dx", "", http.StatusOK)
	if ms, ok := got["models"].([]any); !ok || len(ms) != 1 || ms[0].(map[string]any)["latestVersion"] != "3" {
		t.Errorf("list: %v, want models in camelCase", got)
	}
	got = call(vic, "GET", models+"/tiny@prod", "", http.StatusOK)
	if got["name"] != "projects/default/locations/global/models/tiny@prod" {
		t.Errorf("get @prod: %v", got)
	}
	call(vic, "GET", models+"/tiny:listVersions", "", http.StatusOK)

	got = call(ana, "POST", models+":upload", `{"parentModel":"projects/default/locations/global/models/tiny","model":{"artifactUri":"file:///m","versionAliases":["prod"]}}`, http.StatusOK)
	if md, _ := got["metadata"].(map[string]any); !strings.HasPrefix(fmt.Sprint(got["name"]), "projects/default/operations/") ||
		md["verb"] != "upload" || md["target"] != "projects/default/locations/global" || got["done"] != nil {
		t.Errorf("upload: %v, want a running operation", got)
	} else {
		// The camelCase request reaches the registry's command intact.
		ev := testkit.WaitEvent(t, h.broker, topics.ModelCommands, wait, func(e envelope.Event) bool {
			c, ok := e.Payload.(*eventsv1.UploadModel)
			return ok && c.GetRequestId() == got["name"]
		})
		if c := ev.Payload.(*eventsv1.UploadModel); c.GetParentModel() != "projects/default/locations/global/models/tiny" ||
			c.GetModel().GetArtifactUri() != "file:///m" || strings.Join(c.GetModel().GetVersionAliases(), ",") != "prod" ||
			c.GetProject() != "default" || c.GetUser() != "users/ana" {
			t.Errorf("upload command %v, want the request's fields for users/ana", c)
		}
	}
	got = call(ana, "PATCH", models+"/tiny@2?updateMask=labels,versionDescription", `{"labels":{"stage":"qa"}}`, http.StatusOK)
	if got["versionDescription"] != "labels,versionDescription" || got["name"] != "projects/default/locations/global/models/tiny@2" {
		t.Errorf("patch: %v", got)
	}
	got = call(ana, "POST", models+"/tiny@2:mergeVersionAliases", `{"versionAliases":["prod","-canary"]}`, http.StatusOK)
	lin, _ := got["lineage"].(map[string]any)
	if got["versionId"] != "2" || lin["hyperparameterTuningJob"] != "tj" || lin["checkpointUri"] != "file:///c" || lin["parameters"] == nil {
		t.Errorf("merge: %v, want camelCase with the lineage's console names", got)
	}
	got = call(ana, "POST", models+"/tiny@2:export", `{"outputConfig":{"artifactDestination":{"outputUriPrefix":"s3://b/x"}}}`, http.StatusOK)
	if md, _ := got["metadata"].(map[string]any); !strings.HasPrefix(fmt.Sprint(got["name"]), "projects/default/operations/") ||
		md["verb"] != "export" || md["target"] != models[len("/v1/"):]+"/tiny@2" || got["done"] != nil {
		t.Errorf("export: %v, want a running operation", got)
	}
	call(ana, "POST", models+"/tiny@3:deleteVersion", `{}`, http.StatusBadRequest)
	call(ana, "POST", models+"/tiny@3:deleteVersion", `{"force":true}`, http.StatusOK)
	call(ana, "DELETE", models+"/tiny@3:deleteVersion", "", http.StatusBadRequest)
	call(ana, "DELETE", models+"/tiny@3:deleteVersion?force=true", "", http.StatusOK)
	call(ana, "DELETE", models+"/tiny", "", http.StatusOK)

	// A viewer reads but does not change; another project is NotFound.
	call(vic, "POST", models+":upload", `{"model":{"artifactUri":"/m"}}`, http.StatusForbidden)
	call(vic, "DELETE", models+"/tiny", "", http.StatusForbidden)
	call(ana, "GET", "/v1/projects/other/locations/global/models/tiny", "", http.StatusNotFound)

	// The Loom paths keep the proto names.
	got = call(ana, "GET", "/v1/projects/default/models/m1", "", http.StatusOK)
	if got["latest_version"] != "3" {
		t.Errorf("Loom path: %v, want proto names", got)
	}

	// Changes are audited as every mutating call.
	waitAudit(t, ctx, h, "pat", "projects/default", record("users/ana", "/loom.v1.ModelService/DeleteModel", "allowed", "OK"))
	waitAudit(t, ctx, h, "pat", "projects/default", record("users/vic", "/loom.v1.ModelService/UploadModel", "denied", "PermissionDenied"))
}
