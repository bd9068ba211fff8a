package app

import (
	"log/slog"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/store"
	"github.com/loom-ml/loom/libs/store/storetest"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/registry/internal/adapters"
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
