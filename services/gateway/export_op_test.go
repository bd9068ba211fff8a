package gateway

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/gateway/internal/adapters"
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
		testkit.PublishAs(t, h.broker, "registry", envelope.New(topics.ModelEvents, project+"/models/tiny", "loom/registry", payload))
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
	// What the registry would refuse (here: outside its export root) is
	// refused now, by the registry's check, before any operation starts.
	wantCode(t, "a destination the registry refuses", func() error { _, err := export(ana, "file:///tmp/elsewhere/m", "r-1"); return err }(),
		codes.InvalidArgument, "output_config.artifact_destination.output_uri_prefix", "outside the export root")
	// validate_only: checked, nothing started.
	checked, err := ana.ExportModel(ctx, &loomv1.ExportModelRequest{Name: version, ValidateOnly: true, RequestId: "r-2",
		OutputConfig: &loomv1.ExportModelOutputConfig{ArtifactDestination: &loomv1.GcsDestination{OutputUriPrefix: "s3://b/x"}}})
	if err != nil || !checked.GetDone() || checked.GetName() != "" || checked.GetMetadata().GetTarget() != version {
		t.Fatalf("ExportModel(validate_only) = %v, %v; want a done operation of no name for %s", checked, err, version)
	}
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
	again, err := export(ana, "s3://b/x", "exp-1")
	if err != nil || again.GetName() != op.GetName() {
		t.Fatalf("retried ExportModel = %v, %v; want operation %s", again, err, op.GetName())
	}
	// The same id to another destination is another export
	// (TestExportModelRequestIDScope).
	elsewhere, err := export(ana, "s3://b/other", "exp-1")
	if err != nil || elsewhere.GetName() == op.GetName() {
		t.Fatalf("ExportModel of the same id elsewhere = %v, %v; want another operation", elsewhere, err)
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

// TestExportModelRequestIDScope: a request_id is remembered for the
// caller, the model name and the destination. A tester's cluster
// administrator exported default's model with request_id "same-1", then
// another project's model with the same id, and was answered default's
// finished operation: the second model was never exported, and a caller
// since removed from default still saw default's operation. Now each is
// its own export, with its own command; and a replay answers only an
// operation the caller may read now.
func TestExportModelRequestIDScope(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := testkit.Context(t, 2*wait)
	export := func(c loomv1.ModelServiceClient, name, rid string) (*loomv1.Operation, error) {
		return c.ExportModel(ctx, &loomv1.ExportModelRequest{Name: name, RequestId: rid,
			OutputConfig: &loomv1.ExportModelOutputConfig{ArtifactDestination: &loomv1.GcsDestination{OutputUriPrefix: "s3://b/out"}}})
	}
	sent := func(op *loomv1.Operation, name string) {
		t.Helper()
		ev := testkit.WaitEvent(t, h.broker, topics.ModelCommands, wait, func(e envelope.Event) bool {
			c, ok := e.Payload.(*eventsv1.ExportModel)
			return ok && c.GetOperation() == op.GetName()
		})
		if got := ev.Payload.(*eventsv1.ExportModel).GetName(); got != name {
			t.Errorf("operation %s exports %s, want %s", op.GetName(), got, name)
		}
	}
	const toy = project + "/locations/global/models/toy-model"
	const bobm = "projects/other/locations/global/models/bobm"

	ops := loomv1.NewModelServiceClient(h.as(t, "ops"))
	first, err := export(ops, toy, "same-1")
	if err != nil {
		t.Fatal(err)
	}
	sent(first, toy)
	second, err := export(ops, bobm, "same-1")
	if err != nil || second.GetName() == first.GetName() || !strings.HasPrefix(second.GetName(), "projects/other/operations/") ||
		second.GetMetadata().GetTarget() != bobm {
		t.Fatalf("ExportModel of %s with the id of %s's export = %v, %v; want its own operation in projects/other", bobm, toy, second, err)
	}
	sent(second, bobm)
	if again, err := export(ops, bobm, "same-1"); err != nil || again.GetName() != second.GetName() {
		t.Errorf("retried export of %s = %v, %v; want %s", bobm, again, err, second.GetName())
	}

	// oz, admin of other, made admin of default, exports there; removed
	// from default, the same id for other's model is other's export, and
	// default's operation is not shown.
	admin := authClient(h, t, h.adminKey)
	if _, err := admin.SetMember(ctx, &loomv1.SetMemberRequest{Parent: project, User: "oz", Role: "admin"}); err != nil {
		t.Fatal(err)
	}
	oz := loomv1.NewModelServiceClient(h.as(t, "oz"))
	inDefault, err := export(oz, toy, "oz-1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.SetMember(ctx, &loomv1.SetMemberRequest{Parent: project, User: "oz"}); err != nil {
		t.Fatal(err)
	}
	inOther, err := export(oz, bobm, "oz-1")
	if err != nil || inOther.GetName() == inDefault.GetName() || inOther.GetMetadata().GetTarget() != bobm {
		t.Fatalf("oz's export of %s after leaving default = %v, %v; want its own operation, not %s", bobm, inOther, err, inDefault.GetName())
	}
	sent(inOther, bobm)

	// A request record that answers an operation the caller may not read
	// (as one kept from before the request_id was scoped so could): the
	// replay refuses it, naming no operation.
	theirs, err := loomv1.NewModelServiceClient(h.as(t, "oz")).UploadModel(ctx, &loomv1.UploadModelRequest{Parent: "projects/other",
		ModelId: "bobm", Model: &loomv1.Model{ArtifactUri: "file:///shared/bobm"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.redis.Set(ctx, "gateway:"+adapters.RequestInboxID(adapters.RequestUploadModel, "users/ana\x00default\x00planted"), theirs.GetName(), 0).Err(); err != nil {
		t.Fatal(err)
	}
	got, err := loomv1.NewModelServiceClient(h.as(t, "ana")).UploadModel(ctx, &loomv1.UploadModelRequest{Parent: project, ModelId: "tiny",
		RequestId: "planted", Model: &loomv1.Model{ArtifactUri: "file:///shared/tiny"}})
	if status.Code(err) != codes.AlreadyExists || strings.Contains(status.Convert(err).Message(), theirs.GetName()) {
		t.Errorf("replay of another project's operation to ana = %v, %v; want AlreadyExists naming no operation", got, err)
	}
}
