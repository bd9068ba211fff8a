package gateway

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/loom-ml/loom/libs/testkit"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// TestUploadModelRequestIDBound: UploadModel's request_id is bounded as
// every request_id the gateway takes (128 bytes, no control characters):
// past it the call is InvalidArgument naming request_id and never reaches
// the registry; within it the call goes on (an operation).
func TestUploadModelRequestIDBound(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := testkit.Context(t, wait)
	models := loomv1.NewModelServiceClient(h.as(t, "ana"))
	upload := func(rid string) error {
		_, err := models.UploadModel(ctx, &loomv1.UploadModelRequest{Parent: project + "/locations/global", ModelId: "m",
			RequestId: rid, Model: &loomv1.Model{ArtifactUri: "file:///models/m"}})
		return err
	}
	wantCode(t, "a 129-byte request_id", upload(strings.Repeat("r", 129)), codes.InvalidArgument, "request_id", "128")
	wantCode(t, "a control character", upload("a\x07b"), codes.InvalidArgument, "request_id")
	if err := upload(strings.Repeat("r", 128)); err != nil {
		t.Errorf("a 128-byte request_id: %v", err)
	}
}

// TestUploadModelTooLargeForARecord: an upload whose command would not fit
// a Kafka record (a 2 MiB description within gRPC's 4 MiB) is refused,
// naming the limit, instead of an operation that never finishes; names that
// key the record are checked before they do.
func TestUploadModelTooLargeForARecord(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := testkit.Context(t, wait)
	models := loomv1.NewModelServiceClient(h.as(t, "ana"))
	_, err := models.UploadModel(ctx, &loomv1.UploadModelRequest{Parent: project + "/locations/global", ModelId: "m",
		Model: &loomv1.Model{ArtifactUri: "file:///models/m", Description: strings.Repeat("d", 2<<20)}})
	wantCode(t, "a 2 MiB description", err, codes.InvalidArgument, "model", "bytes encoded, more than the limit")
	_, err = models.UploadModel(ctx, &loomv1.UploadModelRequest{Parent: project + "/locations/global",
		ParentModel: strings.Repeat("p", 1<<20), Model: &loomv1.Model{ArtifactUri: "file:///models/m"}})
	wantCode(t, "a parent_model of a megabyte", err, codes.InvalidArgument, "parent_model")
	_, err = models.UploadModel(ctx, &loomv1.UploadModelRequest{Parent: project + "/locations/global", ModelId: "Bad Id",
		Model: &loomv1.Model{ArtifactUri: "file:///models/m"}})
	wantCode(t, "a bad model_id", err, codes.InvalidArgument, "model_id")
}
