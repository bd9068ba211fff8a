package app

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/osuser"
	"github.com/loom-ml/loom/libs/store"
	"github.com/loom-ml/loom/libs/store/storetest"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/registry/internal/adapters"
	"github.com/loom-ml/loom/services/registry/internal/artifact"
)

const model = "projects/default/models/tiny"

func completed(id string) envelope.Event {
	return envelope.New(topics.JobEvents, "projects/default/clusters/c1", "loom/scheduler", &eventsv1.JobChanged{
		Job: &loomv1.Job{Name: "projects/default/jobs/" + id, JobId: id, Cluster: "projects/default/clusters/c1",
			State: loomv1.JobState_COMPLETED, ModelOutput: &loomv1.ModelOutput{ModelId: "tiny"}},
		Attempt: 1,
	})
}

// Fault injection: the registration's Apply ran in Redis but its answer was
// lost. Before the driver the registry's memory lacked the version until a
// restart and the redelivered event was dropped as seen; now memory holds
// what Redis holds at once, the redelivery changes nothing, and the next job
// gets the next version number.
func TestApplyWithLostAnswerLeavesMemoryAsRedis(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 30*time.Second)
	_, rdb := testkit.Redis(t)
	lost := storetest.LoseApplyReplies(rdb, "registry:")
	repo := adapters.NewRepo(store.New(rdb, "registry:"))
	r, err := New(ctx, repo, slog.Default(), nil)
	if err != nil {
		t.Fatal(err)
	}
	first := completed("1")
	lost.Arm(1)
	if err := r.Handle(ctx, first); !store.OutcomeUnknown(err) {
		t.Fatalf("Handle with a lost answer = %v, want the outcome unknown", err)
	}
	redis, err := repo.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(redis.Versions[model]) != 1 {
		t.Fatalf("Redis holds %d versions; the script should have run", len(redis.Versions[model]))
	}
	mem, err := r.ListVersions(model)
	if err != nil || len(mem) != 1 || !proto.Equal(mem[0], redis.Versions[model][0]) {
		t.Fatalf("memory has %v (%v), Redis %v", mem, err, redis.Versions[model])
	}
	if err := r.Handle(ctx, first); err != nil { // the redelivery
		t.Fatal(err)
	}
	if err := r.Handle(ctx, completed("2")); err != nil {
		t.Fatal(err)
	}
	vs, _ := r.ListVersions(model)
	if len(vs) != 2 || vs[1].GetVersion() != 2 || vs[1].GetSourceJob() != "projects/default/jobs/2" {
		t.Fatalf("versions %v, want job 1 → v1 and job 2 → v2", vs)
	}
	if n, _ := repo.Store().OutboxLen(ctx); n != 2 {
		t.Fatalf("outbox holds %d events, want 2 registrations", n)
	}
}

// artifactDir writes a complete model directory (files and MANIFEST).
func artifactDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "model.json"), []byte(`{"w":[0.5]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := artifact.WriteManifest(dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

func uploadCmd(rid, dir string) envelope.Event {
	return envelope.New(topics.ModelCommands, model, "loom/training", &eventsv1.UploadModel{
		RequestId: rid, Project: "default", ModelId: "tiny", OsUser: osuser.Self().Name,
		Model:   &trainingv1.Model{DisplayName: "Tiny", ArtifactUri: "file://" + dir},
		Lineage: &loomv1.ModelLineage{TrainingPipeline: "projects/default/locations/l/trainingPipelines/1"},
	})
}

// drain publishes the registry's outbox through its relay and returns the n
// events it held, decoded, in order.
func drain(t *testing.T, repo *adapters.Repo, n int) []envelope.Event {
	t.Helper()
	ctx, cancel := context.WithCancel(testkit.Context(t, 30*time.Second))
	got := make(chan kafka.Message, n+16)
	relayDone := make(chan error, 1)
	go func() {
		relayDone <- repo.Store().RunRelay(ctx, store.PublisherFunc(func(_ context.Context, msgs ...kafka.Message) error {
			for _, m := range msgs {
				got <- m
			}
			return nil
		}))
	}()
	defer func() {
		cancel()
		if err := <-relayDone; err != nil {
			t.Error(err)
		}
	}()
	var out []envelope.Event
	for len(out) < n {
		select {
		case m := <-got:
			ev, err := envelope.Default.Decode(m)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, ev)
		case <-ctx.Done():
			t.Fatalf("relay published %d events, want %d", len(out), n)
		}
	}
	return out
}

// Fault injection for uploads: the Apply that registers an upload ran in
// Redis but its answer was lost. Memory reloads; the redelivered command is
// dropped by the inbox; the same request sent again as a new event answers
// the same version; exactly one version exists and each answer is in the
// outbox once.
func TestUploadExactlyOnceAcrossLostAnswer(t *testing.T) {
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
	first := uploadCmd("req-1", dir)
	lost.Arm(1)
	if err := r.Handle(ctx, first); !store.OutcomeUnknown(err) {
		t.Fatalf("Handle with a lost answer = %v, want the outcome unknown", err)
	}
	mem, err := r.ListVersions(model)
	if err != nil || len(mem) != 1 || mem[0].GetLineage().GetTrainingPipeline() == "" {
		t.Fatalf("memory after the lost answer: %v %v, want version 1 with its lineage", mem, err)
	}
	if err := r.Handle(ctx, first); err != nil { // the redelivery
		t.Fatal(err)
	}
	again := uploadCmd("req-1", dir) // sent again: a new event id
	if err := r.Handle(ctx, again); err != nil {
		t.Fatal(err)
	}
	// A restarted registry (state from Redis) answers it the same.
	r2, err := New(ctx, repo, slog.Default(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := r2.Handle(ctx, uploadCmd("req-1", dir)); err != nil {
		t.Fatal(err)
	}
	if err := r2.Handle(ctx, uploadCmd("req-2", dir)); err != nil {
		t.Fatal(err)
	}
	vs, _ := r2.ListVersions(model)
	if len(vs) != 2 || vs[0].GetVersion() != 1 || vs[1].GetVersion() != 2 {
		t.Fatalf("versions %v, want req-1 → v1 and req-2 → v2 only", vs)
	}
	evs := drain(t, repo, 4)
	for i, want := range []struct {
		rid     string
		version int64
	}{{"req-1", 1}, {"req-1", 1}, {"req-1", 1}, {"req-2", 2}} {
		reg, ok := evs[i].Payload.(*eventsv1.ModelVersionRegistered)
		if !ok || reg.GetRequestId() != want.rid || reg.GetVersion().GetVersion() != want.version || evs[i].Key != model {
			t.Fatalf("outbox event %d: %v (key %q), want %s → v%d", i, evs[i].Payload, evs[i].Key, want.rid, want.version)
		}
	}
	if n, _ := repo.Store().OutboxLen(ctx); n != 0 {
		t.Fatalf("%d more events in the outbox, want none", n)
	}
}

// TestRefusedUploadRegistersNothing: a refusal is answered once, through the
// outbox, and changes no state.
func TestRefusedUploadRegistersNothing(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 30*time.Second)
	_, rdb := testkit.Redis(t)
	repo := adapters.NewRepo(store.New(rdb, "registry:"))
	r, err := New(ctx, repo, slog.Default(), nil)
	if err != nil {
		t.Fatal(err)
	}
	dir := artifactDir(t)
	if err := os.Remove(filepath.Join(dir, "model.json")); err != nil {
		t.Fatal(err)
	}
	cmd := uploadCmd("req-bad", dir)
	for range 2 { // and its redelivery
		if err := r.Handle(ctx, cmd); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.GetModel(model); !errors.Is(err, errs.NotFound) {
		t.Fatalf("GetModel after a refused upload: %v, want NotFound", err)
	}
	st, err := repo.Load(ctx)
	if err != nil || len(st.Models) != 0 || len(st.Requests) != 0 {
		t.Fatalf("Redis after a refusal: %+v %v, want nothing", st, err)
	}
	evs := drain(t, repo, 1)
	f, ok := evs[0].Payload.(*eventsv1.ModelUploadFailed)
	if !ok || f.GetRequestId() != "req-bad" || f.GetModel() != model || !strings.Contains(f.GetReason(), "model.json is missing") {
		t.Fatalf("answer %v, want ModelUploadFailed naming model.json", evs[0].Payload)
	}
	if n, _ := repo.Store().OutboxLen(ctx); n != 0 {
		t.Fatalf("%d more events in the outbox, want one answer", n)
	}
}

// TestRecordRefusesRootOwner: a completed job whose owner is root on the
// registry's host (uid 0) is registered without a MANIFEST digest, and
// the registry writes nothing in its model directory: as root it would
// read and write wherever the directory points. Before, it wrote the
// MANIFEST as root (a registry that runs as root acts as root as itself).
func TestRecordRefusesRootOwner(t *testing.T) {
	t.Parallel()
	root, err := osuser.Lookup("root")
	if err != nil || !root.Root() {
		t.Skipf("no account root of uid 0 on this host (%v, %v)", root, err)
	}
	ctx := testkit.Context(t, 30*time.Second)
	_, rdb := testkit.Redis(t)
	logs := &testkit.Buffer{}
	r, err := New(ctx, adapters.NewRepo(store.New(rdb, "registry:")), slog.New(slog.NewTextHandler(logs, nil)), nil)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "model")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "model.json"), []byte(`{"w":1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	ev := completed("7")
	jc := ev.Payload.(*eventsv1.JobChanged)
	jc.ModelDir, jc.Job.User = dir, "root"
	if err := r.Handle(ctx, ev); err != nil {
		t.Fatal(err)
	}
	vs, err := r.ListVersions(model)
	if err != nil || len(vs) != 1 {
		t.Fatalf("versions %v (%v); the job's version is registered all the same", vs, err)
	}
	if got := vs[0].GetManifestSha256(); got != "" {
		t.Errorf("root's job version records MANIFEST digest %q; want none", got)
	}
	if _, err := os.Lstat(filepath.Join(dir, artifact.Manifest)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the registry wrote a MANIFEST as root in %s (%v)", dir, err)
	}
	if l := logs.String(); !strings.Contains(l, errRootOwner.Error()) || !strings.Contains(l, "root (uid 0)") {
		t.Errorf("the log does not say the owner was refused as uid 0:\n%s", l)
	}
}
