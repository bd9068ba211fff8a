package gateway

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// TestExportModelOperation: ExportModel answers a running operation at once
// and sends the registry its ExportModel command; the registry's
// ModelExported finishes it with the ExportModelResponse and
// ModelExportFailed with the code and reason; a retried request_id answers
// the same operation (another caller's is another export); bad input is
// refused before anything is sent.
func TestExportModelOperation(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := testkit.Context(t, 2*wait)
	ana := loomv1.NewModelServiceClient(h.as(t, "ana"))
	ops := loomv1.NewOperationServiceClient(h.as(t, "ana"))
	const version = project + "/locations/global/models/tiny@2"
	export := func(c loomv1.ModelServiceClient, dst, rid string) (*loomv1.Operation, error) {
		return c.ExportModel(ctx, &loomv1.ExportModelRequest{Name: version, RequestId: rid,
			OutputConfig: &loomv1.ExportModelOutputConfig{ArtifactDestination: &loomv1.GcsDestination{OutputUriPrefix: dst}}})
	}
	command := func(op string) *eventsv1.ExportModel {
		t.Helper()
		ev := testkit.WaitEvent(t, h.broker, topics.ModelCommands, wait, func(e envelope.Event) bool {
			c, ok := e.Payload.(*eventsv1.ExportModel)
			return ok && c.GetOperation() == op
		})
		return ev.Payload.(*eventsv1.ExportModel)
	}
	finish := func(payload proto.Message) {
		testkit.Publish(t, h.broker, envelope.New(topics.ModelEvents, project+"/models/tiny", "loom/registry", payload))
	}
	waitDone := func(op string) *loomv1.Operation {
		t.Helper()
		var got *loomv1.Operation
		testkit.WaitFor(t, wait, "operation "+op+" done", func() (bool, error) {
			var err error
			got, err = ops.WaitOperation(ctx, &loomv1.WaitOperationRequest{Name: op, TimeoutSeconds: 1})
			return got.GetDone(), err
		})
		return got
	}

	wantCode(t, "no destination", func() error { _, err := export(ana, "", ""); return err }(),
		codes.InvalidArgument, "output_config.artifact_destination.output_uri_prefix", "required")
	wantCode(t, "a 4097-byte destination", func() error { _, err := export(ana, "s3://b/"+strings.Repeat("x", 4090), ""); return err }(),
		codes.InvalidArgument, "output_config.artifact_destination.output_uri_prefix", "4096")
	wantCode(t, "a 129-byte request_id", func() error { _, err := export(ana, "s3://b/x", strings.Repeat("r", 129)); return err }(),
		codes.InvalidArgument, "request_id")
	if evs := testkit.Events(t, h.broker, topics.ModelCommands); len(evs) != 0 {
		t.Fatalf("refused exports sent %d commands, want none", len(evs))
	}

	// Accepted: a running operation, its command sent.
	op, err := export(ana, "s3://b/x", "exp-1")
	if err != nil {
		t.Fatal(err)
	}
	if op.GetDone() || !strings.HasPrefix(op.GetName(), project+"/operations/") ||
		op.GetMetadata().GetVerb() != "export" || op.GetMetadata().GetTarget() != version {
		t.Fatalf("ExportModel = %v, want a running export of %s", op, version)
	}
	// A local destination would be written as ana's OS account: not a
	// cluster administrator's, with the registry's own rights.
	if cmd := command(op.GetName()); cmd.GetName() != version || cmd.GetDestination() != "s3://b/x" || cmd.GetUser() != "users/ana" ||
		cmd.GetOsUser() != "ana" || cmd.GetAnyOwner() {
		t.Errorf("command %v, want %s to s3://b/x for users/ana, written as OS user ana", cmd, version)
	}
	// The same request_id again: the same operation, no second command.
	again, err := export(ana, "s3://b/other", "exp-1")
	if err != nil || again.GetName() != op.GetName() {
		t.Fatalf("retried ExportModel = %v, %v; want operation %s", again, err, op.GetName())
	}
	// The same id from another caller is another export.
	other, err := export(loomv1.NewModelServiceClient(h.as(t, "pat")), "s3://b/x", "exp-1")
	if err != nil || other.GetName() == op.GetName() {
		t.Fatalf("pat's ExportModel with ana's request_id = %v, %v; want another operation", other, err)
	}

	// The registry's answer finishes it.
	resp := &loomv1.ExportModelResponse{Destination: "s3://b/x", Copied: 2, Bytes: 99, Objects: 2}
	finish(&eventsv1.ModelExported{Operation: op.GetName(), Response: resp, Version: project + "/models/tiny/versions/2"})
	done := waitDone(op.GetName())
	if !proto.Equal(done.GetExportModel(), resp) || done.GetMetadata().GetEndTime() == nil ||
		!strings.Contains(done.GetMetadata().GetProgress(), "2 copied") {
		t.Errorf("done operation %v, want the response %v", done, resp)
	}

	// A refusal finishes the next with the code and the reason.
	failed, err := export(ana, "file:///etc", "")
	if err != nil {
		t.Fatal(err)
	}
	command(failed.GetName())
	const reason = "local destinations are turned off on this registry"
	finish(&eventsv1.ModelExportFailed{Operation: failed.GetName(), Code: int32(codes.InvalidArgument), Message: reason})
	got := waitDone(failed.GetName())
	if codes.Code(got.GetError().GetCode()) != codes.InvalidArgument || got.GetError().GetMessage() != reason ||
		got.GetMetadata().GetProgress() != "failed" {
		t.Errorf("failed operation %v, want InvalidArgument %q", got, reason)
	}
	// A late second answer changes nothing.
	finish(&eventsv1.ModelExported{Operation: failed.GetName(), Response: resp})
	finish(&eventsv1.ModelExportFailed{Operation: other.GetName(), Code: int32(codes.NotFound), Message: "gone"})
	waitDone(other.GetName())
	if now, err := ops.GetOperation(ctx, &loomv1.GetOperationRequest{Name: failed.GetName()}); err != nil || !proto.Equal(now, got) {
		t.Errorf("after a second answer: %v, %v; want it unchanged %v", now, err, got)
	}
}
