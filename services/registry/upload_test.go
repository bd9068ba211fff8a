package registry

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/bus"
	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/registry/internal/artifact"
	"github.com/loom-ml/loom/services/registry/internal/domain"
)

// modelDir writes a complete artifact directory: model.json and a MANIFEST.
func modelDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "model")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "model.json"), []byte(`{"weights":[0.25,0.5]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := artifact.WriteManifest(dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

func uploadEvent(cmd *eventsv1.UploadModel) envelope.Event {
	return envelope.New(topics.ModelCommands, testModel, "loom/training", cmd)
}

func uploadOf(rid, dir string) *eventsv1.UploadModel {
	return &eventsv1.UploadModel{
		RequestId: rid, Project: "default", ModelId: "tiny", User: "alice", OsUser: testOwner,
		Model: &trainingv1.Model{DisplayName: "Tiny " + rid, Description: "trained by a pipeline",
			ArtifactUri: "file://" + dir, Labels: map[string]string{"pipeline": "p1"}},
		Lineage: &loomv1.ModelLineage{
			Job: "projects/default/jobs/13", Attempt: 2,
			CustomJob:        "projects/default/locations/here/customJobs/13",
			TrainingPipeline: "projects/default/locations/here/trainingPipelines/10",
			TuningJob:        "projects/default/locations/here/hyperparameterTuningJobs/11",
			Trial:            "projects/default/locations/here/hyperparameterTuningJobs/11/trials/2",
			Hyperparameters:  map[string]string{"learning_rate": "0.01", "batch_size": "32"},
			Metrics:          map[string]float64{"val_loss": 0.125, "accuracy": 0.9},
			CheckpointUri:    "file://" + dir + "/../checkpoints/epoch-3",
		},
	}
}

// answer waits for the registry's answer to request rid.
func answer(t *testing.T, broker, rid string) proto.Message {
	t.Helper()
	ev := testkit.WaitEvent(t, broker, topics.ModelEvents, 30*time.Second, func(e envelope.Event) bool {
		switch p := e.Payload.(type) {
		case *eventsv1.ModelVersionRegistered:
			return p.GetRequestId() == rid
		case *eventsv1.ModelUploadFailed:
			return p.GetRequestId() == rid
		}
		return false
	})
	return ev.Payload
}

// registered waits for rid's answer and fails unless it registered version
// n of the test model.
func registered(t *testing.T, broker, rid string, n int64) *loomv1.ModelVersion {
	t.Helper()
	reg, ok := answer(t, broker, rid).(*eventsv1.ModelVersionRegistered)
	if !ok || reg.GetModel() != testModel || reg.GetVersion().GetVersion() != n {
		t.Fatalf("%s answered %v, want version %d of %s", rid, reg, n, testModel)
	}
	return reg.GetVersion()
}

func TestUploadModel(t *testing.T) {
	t.Parallel()
	broker := testkit.Broker(t)
	redisAddr, _ := testkit.Redis(t)
	client, stop := startRegistry(t, broker, redisAddr)
	ctx := context.Background()
	prod := bus.NewProducer([]string{broker})
	prod.SetSigner(testkit.SignerAs("training"))
	t.Cleanup(func() { _ = prod.Close() })
	publish := func(evs ...envelope.Event) {
		t.Helper()
		if err := prod.Publish(ctx, evs...); err != nil {
			t.Fatalf("publish: %v", err)
		}
	}

	// A new model from model_id; its lineage, display name, description,
	// labels and artifact come back through ListModelVersions.
	dir := modelDir(t)
	first := uploadEvent(uploadOf("r1", dir))
	publish(first)
	v1 := registered(t, broker, "r1", 1)
	vs := waitVersions(t, client, 1)
	want := uploadOf("r1", dir)
	want.Lineage.RecordedBy = domain.RecordedByLoom // a service's: what ran
	if len(vs) != 1 || !proto.Equal(vs[0], v1) || !proto.Equal(vs[0].GetLineage(), want.GetLineage()) ||
		vs[0].GetDisplayName() != "Tiny r1" || vs[0].GetDescription() != "trained by a pipeline" ||
		vs[0].GetLabels()["pipeline"] != "p1" || vs[0].GetArtifactUri() != "file://"+dir ||
		vs[0].GetSourceJob() != "projects/default/jobs/13" || vs[0].GetArtifactOwner() != testOwner {
		t.Fatalf("listed %v\nwant the upload's fields and lineage %v", vs, want.GetLineage())
	}

	// parent_model: its next version.
	child := uploadOf("r2", modelDir(t))
	child.ModelId, child.ParentModel = "", testModel
	publish(uploadEvent(child))
	registered(t, broker, "r2", 2)

	// Refusals: each answered with its reason, nothing registered.
	missingManifest := modelDir(t)
	_ = os.Remove(filepath.Join(missingManifest, artifact.Manifest))
	badSum := modelDir(t)
	_ = os.WriteFile(filepath.Join(badSum, "model.json"), []byte("{}"), 0o644)
	escaping := modelDir(t)
	outside := filepath.Join(filepath.Dir(escaping), "outside.bin")
	_ = os.WriteFile(outside, []byte("x"), 0o644)
	_ = os.WriteFile(filepath.Join(escaping, artifact.Manifest),
		[]byte("2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881  ../outside.bin\n"), 0o644)
	unknownParent := uploadOf("r-parent", modelDir(t))
	unknownParent.ModelId, unknownParent.ParentModel = "", "projects/default/models/nope"
	// A bucket URL is read through libs/blobstore: an empty one (mem://
	// is a fresh bucket each time it is opened) is refused as missing.
	emptyBucket := uploadOf("r-bucket", modelDir(t))
	emptyBucket.Model.ArtifactUri = "mem://models/tiny"
	type refusal struct {
		cmd    *eventsv1.UploadModel
		reason string
		code   codes.Code
	}
	refusals := map[string]refusal{
		"r-missing":  {uploadOf("r-missing", filepath.Join(t.TempDir(), "gone")), "does not exist", codes.InvalidArgument},
		"r-manifest": {uploadOf("r-manifest", missingManifest), "has no MANIFEST", codes.InvalidArgument},
		"r-sum":      {uploadOf("r-sum", badSum), "model.json: sha256", codes.InvalidArgument},
		"r-escape":   {uploadOf("r-escape", escaping), "leaves the artifact directory", codes.InvalidArgument},
		"r-parent":   {unknownParent, "parent_model: projects/default/models/nope does not exist", codes.NotFound},
		"r-bucket":   {emptyBucket, "model.artifact_uri: artifact location mem://models/tiny holds no objects", codes.InvalidArgument},
	}
	// The registry reads a directory as the uploader's OS account: one
	// the host knows (TestUploadReadsAsTheUploader reads as one).
	noAccount := uploadOf("r-no-account", modelDir(t))
	noAccount.OsUser = ""
	refusals["r-no-account"] = refusal{noAccount, "model.artifact_uri: the upload names no OS account to read the directory as", codes.InvalidArgument}
	unknown := uploadOf("r-unknown", modelDir(t))
	unknown.OsUser = "no-such-loom-account"
	refusals["r-unknown"] = refusal{unknown, "the uploader's OS account is not known on the registry's host: user no-such-loom-account: no account", codes.InvalidArgument}
	// A tester's report: escape sequences in the lineage and the
	// description were stored, and printed raw by loom models versions and
	// get.
	escapes := uploadOf("r-escapes", modelDir(t))
	escapes.Lineage.Trial, escapes.Lineage.Job = "\x1b[2J", "x\x1b]0;pwned\x07"
	refusals["r-escapes"] = refusal{escapes, "lineage.job: must not hold control characters (it holds U+001B)", codes.InvalidArgument}
	described := uploadOf("r-described", modelDir(t))
	described.Model.VersionDescription = "v\x1b[31m"
	refusals["r-described"] = refusal{described, "model.version_description: must not hold control characters other than newlines and tabs", codes.InvalidArgument}
	// A tester's report: a lineage naming another project's CustomJob
	// (and job) was registered as the version's producer.
	forged := uploadOf("r-forged", modelDir(t))
	forged.Lineage.CustomJob = "projects/other/locations/us-central1/customJobs/1"
	refusals["r-forged"] = refusal{forged, `lineage.custom_job: "projects/other/locations/us-central1/customJobs/1" is not a CustomJob of project default`, codes.InvalidArgument}
	for _, r := range refusals {
		publish(uploadEvent(r.cmd))
	}
	for rid, r := range refusals {
		failed, ok := answer(t, broker, rid).(*eventsv1.ModelUploadFailed)
		if !ok || !strings.Contains(failed.GetReason(), r.reason) || codes.Code(failed.GetCode()) != r.code {
			t.Errorf("%s answered %v, want ModelUploadFailed %v with %q", rid, failed, r.code, r.reason)
		}
	}

	// A command signed by a node is dead-lettered, never handled.
	node := testkit.NodeProducer(t, broker, "projects/default/clusters/c1/nodes/n1", testCluster, "p")
	if err := node.Publish(ctx, uploadEvent(uploadOf("r-node", modelDir(t)))); err != nil {
		t.Fatal(err)
	}
	testkit.WaitEvent(t, broker, topics.ModelCommands+topics.DLQSuffix, 30*time.Second, func(e envelope.Event) bool {
		u, ok := e.Payload.(*eventsv1.UploadModel)
		return ok && u.GetRequestId() == "r-node"
	})

	// Duplicates: the same event again (the inbox drops it) and the same
	// request as a new event (answered version 1 again), then r3 as a
	// barrier: same key, so handled after them.
	publish(first, uploadEvent(uploadOf("r1", dir)), uploadEvent(uploadOf("r3", dir)))
	registered(t, broker, "r3", 3)

	// Across a restart the request records hold: r2 sent again registers
	// nothing; r4 is version 4.
	stop()
	client, _ = startRegistry(t, broker, redisAddr)
	publish(uploadEvent(child), uploadEvent(uploadOf("r4", dir)))
	registered(t, broker, "r4", 4)

	vs = waitVersions(t, client, 4)
	if len(vs) != 4 {
		t.Fatalf("%d versions, want 4 (r1, r2, r3, r4)", len(vs))
	}
	answers := map[string][]int64{}
	for _, e := range testkit.Events(t, broker, topics.ModelEvents) {
		if reg, ok := e.Payload.(*eventsv1.ModelVersionRegistered); ok {
			answers[reg.GetRequestId()] = append(answers[reg.GetRequestId()], reg.GetVersion().GetVersion())
		}
	}
	if fmt.Sprint(answers["r1"]) != "[1 1]" || fmt.Sprint(answers["r2"]) != "[2 2]" || len(answers["r-node"]) != 0 {
		t.Fatalf("answers %v, want r1 → [1 1] and r2 → [2 2] (each sent twice), r-node none", answers)
	}
	for rid := range refusals {
		if len(answers[rid]) != 0 {
			t.Fatalf("refused %s registered %v", rid, answers[rid])
		}
	}
}

// TestConcurrentUploads: uploads to one model sent at once get distinct,
// consecutive versions, one each.
func TestConcurrentUploads(t *testing.T) {
	t.Parallel()
	broker := testkit.Broker(t)
	redisAddr, _ := testkit.Redis(t)
	client, _ := startRegistry(t, broker, redisAddr)
	prod := bus.NewProducer([]string{broker})
	prod.SetSigner(testkit.SignerAs("training"))
	t.Cleanup(func() { _ = prod.Close() })
	dir := modelDir(t)
	const n = 20
	var wg sync.WaitGroup
	errc := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			cmd := uploadOf(fmt.Sprint("c", i), dir)
			// Keyed as they come: spread over the partitions, not ordered.
			ev := envelope.New(topics.ModelCommands, fmt.Sprint("k", i), "loom/training", cmd)
			errc <- prod.Publish(context.Background(), ev)
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		if err != nil {
			t.Fatalf("publish: %v", err)
		}
	}
	vs := waitVersions(t, client, n)
	if len(vs) != n {
		t.Fatalf("%d versions, want %d", len(vs), n)
	}
	byRequest := map[string]int64{}
	for i, v := range vs {
		if v.GetVersion() != int64(i+1) {
			t.Fatalf("version %d listed at %d", v.GetVersion(), i)
		}
		rid := strings.TrimPrefix(v.GetDisplayName(), "Tiny ")
		if prev, dup := byRequest[rid]; dup {
			t.Fatalf("request %s registered versions %d and %d", rid, prev, v.GetVersion())
		}
		byRequest[rid] = v.GetVersion()
	}
	for i := range n {
		rid := fmt.Sprint("c", i)
		if reg := registered(t, broker, rid, byRequest[rid]); reg == nil {
			t.Fatalf("no answer for %s", rid)
		}
	}
}

// openTo makes dir and the test's temporary directories above it (the
// test's own is 0700, root's) mode 0755, so that another account may reach
// and read it.
func openTo(t *testing.T, dir string) {
	t.Helper()
	for d := dir; d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

// TestUploadReadsAsTheUploader: the registry reads a local artifact
// directory as the uploader's OS account (the command's os_user), not with
// its own rights. A directory the uploader may read is registered, its
// artifact_owner the account; one of root's the uploader may not enter is
// refused, naming the account; and an export reads as the account again, so
// a file made unreadable to it after registration (the directory is its
// owner's to change) is PermissionDenied, never copied.
func TestUploadReadsAsTheUploader(t *testing.T) {
	t.Parallel()
	ana := testkit.OSUsers(t, 1)[0]
	x := newExportFixture(t, time.Minute, nil)
	ctx, c, broker, root := x.ctx, x.c, x.broker, x.root
	prod := bus.NewProducer([]string{broker})
	prod.SetSigner(testkit.SignerAs("training"))
	t.Cleanup(func() { _ = prod.Close() })
	publish := func(cmd *eventsv1.UploadModel) {
		t.Helper()
		cmd.OsUser = ana.Name
		if err := prod.Publish(ctx, uploadEvent(cmd)); err != nil {
			t.Fatal(err)
		}
	}

	readable := modelDir(t)
	openTo(t, readable)
	publish(uploadOf("as-ana", readable))
	if v := registered(t, broker, "as-ana", 1); v.GetArtifactOwner() != ana.Name {
		t.Fatalf("registered %v; want artifact_owner %s", v, ana.Name)
	}
	private := modelDir(t)
	if err := os.Chmod(private, 0o700); err != nil {
		t.Fatal(err)
	}
	publish(uploadOf("roots", private))
	got := answer(t, broker, "roots")
	failed, ok := got.(*eventsv1.ModelUploadFailed)
	if !ok || !strings.Contains(failed.GetReason(), "permission denied") || !strings.Contains(failed.GetReason(), "read as "+ana.Name) {
		t.Fatalf("an upload of root's private directory as %s answered %v; want ModelUploadFailed saying it was read as them", ana.Name, got)
	}

	export := func(name string) (*loomv1.Operation, error) {
		return c.ExportModel(ctx, &loomv1.ExportModelRequest{Name: vertexModel + "@1", OutputConfig: &loomv1.ExportModelOutputConfig{
			ArtifactDestination: &loomv1.GcsDestination{OutputUriPrefix: "file://" + filepath.Join(root, "default", name)}}})
	}
	if op, err := export("first"); err != nil || op.GetExportModel().GetCopied() != 2 {
		t.Fatalf("ExportModel = %v, %v; want 2 objects copied", op, err)
	}
	if err := os.Chmod(filepath.Join(readable, "model.json"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := export("second")
	wantCode(t, "an export of a file its owner may no longer read", err, codes.PermissionDenied, `"model.json"`)
	wantCode(t, "an export of a file its owner may no longer read", err, codes.PermissionDenied, ana.Name+" (uid")
	if _, err := os.Stat(filepath.Join(root, "default", "second", "model.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the refused file was exported: %v", err)
	}

	// A cluster administrator's upload (here the internal RPC's) is read
	// with the registry's rights but recorded as the directory's owner's,
	// and exported as theirs: what they may not read is not copied.
	adminDir := modelDir(t)
	openTo(t, adminDir)
	if err := os.Chown(adminDir, int(ana.UID), int(ana.GID)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.UploadModel(ctx, &loomv1.UploadModelRequest{Parent: vertexParent, ModelId: "by-admin", Model: &loomv1.Model{ArtifactUri: adminDir}}); err != nil {
		t.Fatal(err)
	}
	vs, err := c.ListModelVersions(ctx, &loomv1.ListModelVersionsRequest{Parent: "projects/default/models/by-admin"})
	if err != nil || len(vs.GetVersions()) != 1 || vs.GetVersions()[0].GetArtifactOwner() != ana.Name {
		t.Fatalf("the administrator's upload of %s's directory: %v, %v; want artifact_owner %s", ana.Name, vs, err, ana.Name)
	}
	if err := os.Chmod(filepath.Join(adminDir, "model.json"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = c.ExportModel(ctx, &loomv1.ExportModelRequest{Name: vertexParent + "/models/by-admin@1", OutputConfig: &loomv1.ExportModelOutputConfig{
		ArtifactDestination: &loomv1.GcsDestination{OutputUriPrefix: "file://" + filepath.Join(root, "default", "by-admin")}}})
	wantCode(t, "an export of the administrator's upload, a file its owner may not read", err, codes.PermissionDenied, ana.Name+" (uid")
}

// TestExportNeedsAnOwner: a local version with no recorded owner (a job of
// no owner's, or one registered before owners were recorded) is not
// exported with the registry's own rights: FailedPrecondition, saying to
// register the directory again.
func TestExportNeedsAnOwner(t *testing.T) {
	t.Parallel()
	x := newExportFixture(t, time.Minute, nil)
	ctx, c, root := x.ctx, x.c, x.root
	testkit.PublishAs(t, x.broker, "scheduler", completedJob("5"))
	waitVersions(t, c, 1)
	_, err := c.ExportModel(ctx, &loomv1.ExportModelRequest{Name: vertexModel + "@1", OutputConfig: &loomv1.ExportModelOutputConfig{
		ArtifactDestination: &loomv1.GcsDestination{OutputUriPrefix: "file://" + filepath.Join(root, "default", "x")}}})
	wantCode(t, "an export of a version of no owner", err, codes.FailedPrecondition, "a local directory of no recorded owner")
}
