package app

import (
	"log/slog"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/loom-ml/loom/libs/store"
	"github.com/loom-ml/loom/libs/store/storetest"
	"github.com/loom-ml/loom/libs/testkit"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/registry/internal/adapters"
)

// TestChangesSurviveRestartAndLostAnswers: uploads, alias moves, updates and
// deletes made through the RPCs are what a registry started afresh on the
// same Redis serves; a change whose Apply answer is lost leaves memory as
// Redis has it (the driver reloads), so a retry is decided on the truth.
func TestChangesSurviveRestartAndLostAnswers(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 30*time.Second)
	_, rdb := testkit.Redis(t)
	lost := storetest.LoseApplyReplies(rdb, "registry:")
	repo := adapters.NewRepo(store.New(rdb, "registry:"))
	r, err := New(ctx, repo, slog.Default(), nil)
	if err != nil {
		t.Fatal(err)
	}
	dir := artifactDir(t)
	const parent = "projects/default/locations/global"
	for range 3 {
		if _, err := r.UploadModel(ctx, &loomv1.UploadModelRequest{Parent: parent, ModelId: "tiny", Model: &loomv1.Model{ArtifactUri: dir, DisplayName: "Tiny"}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.MergeVersionAliases(ctx, &loomv1.MergeVersionAliasesRequest{Name: parent + "/models/tiny@2", VersionAliases: []string{"default", "prod"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.UpdateModel(ctx, &loomv1.UpdateModelRequest{Model: &loomv1.Model{Name: parent + "/models/tiny@3", Labels: map[string]string{"k": "v"}},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"labels"}}}); err != nil {
		t.Fatal(err)
	}
	// The answer of this move is lost: it may or may not have landed.
	lost.Arm(1)
	if _, err := r.MergeVersionAliases(ctx, &loomv1.MergeVersionAliasesRequest{Name: parent + "/models/tiny@3", VersionAliases: []string{"prod"}}); !store.OutcomeUnknown(err) {
		t.Fatalf("merge with a lost answer = %v, want the outcome unknown", err)
	}
	if err := r.DeleteModelVersion(ctx, parent+"/models/tiny@1", false); err != nil {
		t.Fatal(err)
	}
	want, err := r.ListModelVersions(&loomv1.ListModelVersionsRequest{Parent: parent + "/models/tiny"})
	if err != nil {
		t.Fatal(err)
	}
	if len(want.GetModels()) != 2 || want.GetModels()[1].GetVersionAliases()[0] != "prod" {
		t.Fatalf("after the changes: %v (the lost move landed: prod on 3)", want.GetModels())
	}
	r2, err := New(ctx, repo, slog.Default(), nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := r2.ListModelVersions(&loomv1.ListModelVersionsRequest{Parent: parent + "/models/tiny"})
	if err != nil || !proto.Equal(got, want) {
		t.Fatalf("after a restart:\n%v\nbefore:\n%v (%v)", got, want, err)
	}
	// The next id after a restart is still the next one.
	next, err := r2.UploadModel(ctx, &loomv1.UploadModelRequest{Parent: parent, ParentModel: parent + "/models/tiny", Model: &loomv1.Model{ArtifactUri: dir}})
	if err != nil || next.GetModelVersionId() != "4" {
		t.Fatalf("upload after a restart = %v, %v; want version 4", next, err)
	}
	if err := r2.DeleteModel(ctx, parent+"/models/tiny"); err != nil {
		t.Fatal(err)
	}
	r3, err := New(ctx, repo, slog.Default(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r3.GetModel(parent + "/models/tiny"); err == nil {
		t.Fatal("a deleted model came back after a restart")
	}
}
