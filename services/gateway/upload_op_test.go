package gateway

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// TestUploadModelOperation: UploadModel answers a running operation at once
// and sends the registry its UploadModel command, the operation's name as
// the command's request_id; the registry's ModelVersionRegistered finishes
// it with the UploadModelResponse and ModelUploadFailed with the code and
// reason; a retried request_id from the same caller in the same project
// answers the same operation (another caller's is another upload); events that name no
// operation (a pipeline's upload) change nothing; a bad parent is refused
// before anything is sent.
func TestUploadModelOperation(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := testkit.Context(t, 2*wait)
	ana := loomv1.NewModelServiceClient(h.as(t, "ana"))
	ops := loomv1.NewOperationServiceClient(h.as(t, "ana"))
	const parent = project + "/locations/europe-west4"
	upload := func(c loomv1.ModelServiceClient, parent, dir, rid string) (*loomv1.Operation, error) {
		return c.UploadModel(ctx, &loomv1.UploadModelRequest{Parent: parent, ModelId: "tiny", RequestId: rid,
			Model: &loomv1.Model{ArtifactUri: dir, VersionAliases: []string{"prod"}}})
	}
	command := func(op string) *eventsv1.UploadModel {
		t.Helper()
		ev := testkit.WaitEvent(t, h.broker, topics.ModelCommands, wait, func(e envelope.Event) bool {
			c, ok := e.Payload.(*eventsv1.UploadModel)
			return ok && c.GetRequestId() == op
		})
		return ev.Payload.(*eventsv1.UploadModel)
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

	wantCode(t, "a parent that is no project", func() error { _, err := upload(ana, "models/x", "/m", ""); return err }(),
		codes.InvalidArgument, "parent")
	wantCode(t, "a 129-byte request_id", func() error { _, err := upload(ana, parent, "/m", strings.Repeat("r", 129)); return err }(),
		codes.InvalidArgument, "request_id", "128")
	if evs := testkit.Events(t, h.broker, topics.ModelCommands); len(evs) != 0 {
		t.Fatalf("refused uploads sent %d commands, want none", len(evs))
	}

	// Accepted: a running operation, its command sent.
	op, err := upload(ana, parent, "file:///shared/tiny", "up-1")
	if err != nil {
		t.Fatal(err)
	}
	if op.GetDone() || !strings.HasPrefix(op.GetName(), project+"/operations/") ||
		op.GetMetadata().GetVerb() != "upload" || op.GetMetadata().GetTarget() != parent {
		t.Fatalf("UploadModel = %v, want a running upload in %s", op, parent)
	}
	if cmd := command(op.GetName()); cmd.GetModelId() != "tiny" || cmd.GetProject() != "default" ||
		cmd.GetModel().GetArtifactUri() != "file:///shared/tiny" || cmd.GetUser() != "users/ana" ||
		cmd.GetOsUser() != "ana" || cmd.GetAnyOwner() {
		t.Errorf("command %v, want tiny from file:///shared/tiny for users/ana, a directory of OS account ana's only", cmd)
	}
	// The same request_id again from the same caller: the same operation,
	// no second command. From another caller of the project it is another
	// upload (their scripts may both say "up-1"), with its own command.
	again, err := upload(ana, parent, "file:///shared/tiny", "up-1")
	if err != nil || again.GetName() != op.GetName() {
		t.Fatalf("retried UploadModel = %v, %v; want operation %s", again, err, op.GetName())
	}
	// The same request_id with another request (another directory) is
	// refused: it would have answered an upload of something else.
	_, err = upload(ana, parent, "file:///elsewhere", "up-1")
	wantCode(t, "up-1 for another directory", err, codes.InvalidArgument, "request_id", "different request")
	pat, err := upload(loomv1.NewModelServiceClient(h.as(t, "pat")), project, "file:///shared/pats", "up-1")
	if err != nil || pat.GetName() == op.GetName() {
		t.Fatalf("pat's UploadModel with ana's request_id = %v, %v; want an operation of its own", pat, err)
	}
	if cmd := command(pat.GetName()); cmd.GetUser() != "users/pat" || cmd.GetModel().GetArtifactUri() != "file:///shared/pats" {
		t.Errorf("pat's command %v, want pat's upload of file:///shared/pats", cmd)
	}
	n := 0
	for _, e := range testkit.Events(t, h.broker, topics.ModelCommands) {
		if c, ok := e.Payload.(*eventsv1.UploadModel); ok && c.GetRequestId() == op.GetName() {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d commands for %s, want 1", n, op.GetName())
	}
	// A cluster administrator's upload may name anyone's directory.
	byOps, err := upload(loomv1.NewModelServiceClient(h.as(t, "ops")), parent, "file:///shared/tiny", "up-ops")
	if err != nil {
		t.Fatal(err)
	}
	if cmd := command(byOps.GetName()); cmd.GetOsUser() != "ops" || !cmd.GetAnyOwner() {
		t.Errorf("a cluster administrator's command %v; want any_owner", cmd)
	}

	// A pipeline's upload answered is not an operation's: nothing changes.
	finish(&eventsv1.ModelVersionRegistered{RequestId: project + "/trainingPipelines/p1:upload",
		Version: &loomv1.ModelVersion{Name: project + "/models/tiny/versions/1"}})
	// The registry's answer finishes it, in the parent's location.
	finish(&eventsv1.ModelVersionRegistered{RequestId: op.GetName(), Model: project + "/models/tiny",
		Version: &loomv1.ModelVersion{Name: project + "/models/tiny/versions/4"}})
	done := waitDone(op.GetName())
	want := &loomv1.UploadModelResponse{Model: parent + "/models/tiny", ModelVersionId: "4"}
	if !proto.Equal(done.GetUploadModel(), want) || done.GetMetadata().GetEndTime() == nil ||
		done.GetMetadata().GetProgress() != "done: "+parent+"/models/tiny@4" {
		t.Errorf("done operation %v, want the response %v", done, want)
	}

	// A refusal finishes the next with the code and the reason; a registry
	// older than the code (0) reads as InvalidArgument.
	for _, c := range []struct {
		code, want codes.Code
		reason     string
	}{
		{codes.NotFound, codes.NotFound, "parent_model: projects/default/models/nope does not exist"},
		{0, codes.InvalidArgument, "model.artifact_uri: /m has no MANIFEST"},
	} {
		failed, err := upload(ana, parent, "/m", "")
		if err != nil {
			t.Fatal(err)
		}
		command(failed.GetName())
		finish(&eventsv1.ModelUploadFailed{RequestId: failed.GetName(), Code: int32(c.code), Reason: c.reason})
		got := waitDone(failed.GetName())
		if codes.Code(got.GetError().GetCode()) != c.want || got.GetError().GetMessage() != c.reason ||
			got.GetMetadata().GetProgress() != "failed" {
			t.Errorf("failed operation %v, want %v %q", got, c.want, c.reason)
		}
		// A late second answer changes nothing.
		finish(&eventsv1.ModelVersionRegistered{RequestId: failed.GetName(), Version: &loomv1.ModelVersion{Name: project + "/models/tiny/versions/5"}})
		finish(&eventsv1.ModelUploadFailed{RequestId: op.GetName(), Code: int32(codes.Internal), Reason: "late"})
		waitDone(op.GetName())
		if now, err := ops.GetOperation(ctx, &loomv1.GetOperationRequest{Name: failed.GetName()}); err != nil || !proto.Equal(now, got) {
			t.Errorf("after a second answer: %v, %v; want it unchanged %v", now, err, got)
		}
	}
	if now, err := ops.GetOperation(ctx, &loomv1.GetOperationRequest{Name: op.GetName()}); err != nil || !proto.Equal(now, done) {
		t.Errorf("done operation after a late refusal: %v, %v; want it unchanged %v", now, err, done)
	}
}

// TestUploadModelLineageIsTheCallers: a lineage a caller uploads reaches
// the registry stamped with the caller (recorded_by), whatever the request
// claimed, so that it is shown as their word and never as Loom's record of
// what ran (a tester uploaded another project's jobs as a version's
// producer; the registry now checks the names, and says whose they are).
// An upload without a lineage carries none.
func TestUploadModelLineageIsTheCallers(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := testkit.Context(t, 2*wait)
	ana := loomv1.NewModelServiceClient(h.as(t, "ana"))
	command := func(op string) *eventsv1.UploadModel {
		t.Helper()
		ev := testkit.WaitEvent(t, h.broker, topics.ModelCommands, wait, func(e envelope.Event) bool {
			c, ok := e.Payload.(*eventsv1.UploadModel)
			return ok && c.GetRequestId() == op
		})
		return ev.Payload.(*eventsv1.UploadModel)
	}
	claimed := &loomv1.ModelLineage{Job: project + "/jobs/7", Trial: project + "/locations/l/hyperparameterTuningJobs/3/trials/1",
		Metrics: map[string]float64{"accuracy": 0.99}, RecordedBy: "loom"}
	op, err := ana.UploadModel(ctx, &loomv1.UploadModelRequest{Parent: project, ModelId: "tiny",
		Model: &loomv1.Model{ArtifactUri: "file:///shared/tiny", Lineage: claimed}})
	if err != nil {
		t.Fatal(err)
	}
	want := proto.Clone(claimed).(*loomv1.ModelLineage)
	want.RecordedBy = "users/ana"
	if got := command(op.GetName()).GetLineage(); !proto.Equal(got, want) {
		t.Errorf("command's lineage %v, want %v (the caller's word)", got, want)
	}
	plain, err := ana.UploadModel(ctx, &loomv1.UploadModelRequest{Parent: project, ModelId: "tiny",
		Model: &loomv1.Model{ArtifactUri: "file:///shared/tiny"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := command(plain.GetName()).GetLineage(); got != nil {
		t.Errorf("an upload without a lineage sent %v", got)
	}
}

// TestUploadModelConcurrentRetries: retries of one upload sent at once (a
// client that timed out and retried while the first was still in flight)
// all answer the one operation. The racer that lost the Apply used to
// replay through the cluster operations' replay, which took the
// caller-scoped key for a bad request id and answered "applied but not
// recorded".
func TestUploadModelConcurrentRetries(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := testkit.Context(t, 2*wait)
	ana := loomv1.NewModelServiceClient(h.as(t, "ana"))
	const racers = 6
	for round := range 8 {
		rid := fmt.Sprintf("race-%d", round)
		names := make([]string, racers)
		errs := make([]error, racers)
		var wg sync.WaitGroup
		for i := range racers {
			wg.Go(func() {
				op, err := ana.UploadModel(ctx, &loomv1.UploadModelRequest{Parent: project, ModelId: "tiny", RequestId: rid,
					Model: &loomv1.Model{ArtifactUri: "file:///shared/tiny"}})
				names[i], errs[i] = op.GetName(), err
			})
		}
		wg.Wait()
		for i := range racers {
			if errs[i] != nil || names[i] != names[0] {
				t.Fatalf("round %d: racer %d answered %q, %v; want racer 0's %q", round, i, names[i], errs[i], names[0])
			}
		}
	}
}
