package app

import (
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/store"
	"github.com/loom-ml/loom/libs/testkit"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/registry/internal/adapters"
)

// TestUploadModelRequestID: an UploadModel sent again with the same
// request_id in the same project answers the first call's version and
// registers no other (also when the retries race); the same id in another
// project is another upload; an id past the bound or with a control
// character is InvalidArgument naming request_id, and registers nothing.
func TestUploadModelRequestID(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 30*time.Second)
	_, rdb := testkit.Redis(t)
	r, err := New(ctx, adapters.NewRepo(store.New(rdb, "registry:")), slog.Default(), nil)
	if err != nil {
		t.Fatal(err)
	}
	dir := artifactDir(t)
	upload := func(project, rid string) (*loomv1.UploadModelResponse, error) {
		return r.UploadModel(ctx, &loomv1.UploadModelRequest{Parent: "projects/" + project + "/locations/global", ModelId: "tiny",
			RequestId: rid, Model: &loomv1.Model{ArtifactUri: dir, DisplayName: "Tiny"}})
	}
	first, err := upload("default", "ing-0123456789abcdef")
	if err != nil {
		t.Fatal(err)
	}
	again, err := upload("default", "ing-0123456789abcdef")
	if err != nil || again.GetModelVersionId() != first.GetModelVersionId() || again.GetModel() != first.GetModel() {
		t.Fatalf("the retry answered %v, %v; want the first call's %v", again, err, first)
	}
	// Racing retries of a new id still make one version.
	var wg sync.WaitGroup
	answers := make([]string, 4)
	for i := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if resp, err := upload("default", "race"); err == nil {
				answers[i] = resp.GetModelVersionId()
			} else {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	for _, a := range answers {
		if a != answers[0] {
			t.Errorf("racing retries answered versions %v, want one", answers)
		}
	}
	other, err := upload("other", "ing-0123456789abcdef")
	if err != nil || other.GetModel() != "projects/other/locations/global/models/tiny" || other.GetModelVersionId() != "1" {
		t.Fatalf("the same id in another project answered %v, %v; want its own version 1", other, err)
	}
	for _, bad := range []struct{ id, want string }{
		{strings.Repeat("x", MaxUploadRequestID+1), "limit of 128"},
		{"a\nb", "control character"},
	} {
		_, err := upload("default", bad.id)
		var inv *errs.InvalidError
		if !errors.As(err, &inv) || !strings.Contains(err.Error(), "request_id") || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("request_id %q: %v, want InvalidArgument naming request_id and %q", bad.id, err, bad.want)
		}
	}
	vs, err := r.ListModelVersions(&loomv1.ListModelVersionsRequest{Parent: "projects/default/locations/global/models/tiny"})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(vs.GetModels()); n != 2 {
		t.Errorf("%d versions of default's tiny, want 2 (one per request id)", n)
	}
}

// TestUploadRetryAfterModelDeleted: an UploadModel retried after its model
// was deleted and made again under the same id (whose versions count from 1
// again) is not answered with the new model's version of the same number,
// another upload's: DeleteModel forgets the deleted model's request
// records, in memory and in Redis (a restarted registry does not answer
// the retry either), and the retry registers a version of its own.
func TestUploadRetryAfterModelDeleted(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 30*time.Second)
	_, rdb := testkit.Redis(t)
	repo := adapters.NewRepo(store.New(rdb, "registry:"))
	r, err := New(ctx, repo, slog.Default(), nil)
	if err != nil {
		t.Fatal(err)
	}
	dir := artifactDir(t)
	const parent = "projects/default/locations/global"
	upload := func(r *Registry, model, rid string) *loomv1.UploadModelResponse {
		t.Helper()
		resp, err := r.UploadModel(ctx, &loomv1.UploadModelRequest{Parent: parent, ModelId: model,
			RequestId: rid, Model: &loomv1.Model{ArtifactUri: dir, DisplayName: model}})
		if err != nil {
			t.Fatalf("upload %s of %s: %v", rid, model, err)
		}
		return resp
	}
	for _, restart := range []bool{false, true} {
		model := "tiny"
		if restart {
			model = "small"
		}
		if v := upload(r, model, model+"-r1"); v.GetModelVersionId() != "1" {
			t.Fatalf("the first upload of %s registered version %s", model, v.GetModelVersionId())
		}
		if err := r.DeleteModel(ctx, parent+"/models/"+model); err != nil {
			t.Fatal(err)
		}
		if restart {
			if r, err = New(ctx, repo, slog.Default(), nil); err != nil {
				t.Fatal(err)
			}
		}
		if v := upload(r, model, model+"-r2"); v.GetModelVersionId() != "1" {
			t.Fatalf("the model %s made again registered version %s, want 1", model, v.GetModelVersionId())
		}
		if v := upload(r, model, model+"-r1"); v.GetModelVersionId() != "2" {
			t.Fatalf("restart %v: the retry of %s-r1 answered version %s of %s, want a new version 2 (version 1 is %s-r2's)",
				restart, model, v.GetModelVersionId(), model, model)
		}
	}
}
