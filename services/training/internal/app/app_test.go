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
	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/training/internal/adapters"
)

const cj = "projects/p/locations/l/customJobs/7"

func create() envelope.Event {
	ev := envelope.New(topics.TrainingCommands, "projects/p", "loom/gateway", &eventsv1.CreateCustomJob{CustomJob: &trainingv1.CustomJob{
		Name: cj, User: "alice", JobSpec: &trainingv1.CustomJobSpec{WorkerPoolSpecs: []*trainingv1.WorkerPoolSpec{{
			MachineSpec: &trainingv1.MachineSpec{MachineType: "n2-standard-4"}, ReplicaCount: 1,
			Task: &trainingv1.WorkerPoolSpec_ContainerSpec{ContainerSpec: &trainingv1.ContainerSpec{Command: []string{"true"}}}}}}}})
	ev.Principal = "users/alice"
	return ev
}

// Fault injection: the Apply of a change ran in Redis but its answer was
// lost. Memory must then hold what Redis holds at once, the redelivered
// event must change nothing, and the next event must act on the stored
// state (the job is submitted once, from the stored record).
func TestApplyWithLostAnswerLeavesMemoryAsRedis(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 30*time.Second)
	_, rdb := testkit.Redis(t)
	lost := storetest.LoseApplyReplies(rdb, "training:")
	repo := adapters.NewRepo(store.New(rdb, "training:"))
	a, err := New(ctx, repo, slog.Default(), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	first := create()
	lost.Arm(1)
	if err := a.Handle(ctx, first); !store.OutcomeUnknown(err) {
		t.Fatalf("Handle with a lost answer = %v, want the outcome unknown", err)
	}
	redis, err := repo.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mem, err := a.GetCustomJob(cj)
	if err != nil || redis.Lookup(cj) == nil || !proto.Equal(mem, redis.Lookup(cj).CJs[0].Job) {
		t.Fatalf("memory has %v (%v), Redis %v", mem, err, redis.Lookup(cj))
	}
	if err := a.Handle(ctx, first); err != nil { // the redelivery
		t.Fatal(err)
	}
	n, _ := repo.Store().OutboxLen(ctx)
	if err := a.Handle(ctx, envelope.New(topics.ClusterEvents, "projects/p/clusters/cj-7", "loom/provisioner", &eventsv1.ClusterChanged{
		Cluster: &loomv1.Cluster{Name: "projects/p/clusters/cj-7", Status: &loomv1.ClusterStatus{State: loomv1.Cluster_RUNNING}}})); err != nil {
		t.Fatal(err)
	}
	after, _ := repo.Store().OutboxLen(ctx)
	got, _ := a.GetCustomJob(cj)
	// CreateCluster + CustomJobChanged from the create; SubmitJob +
	// CustomJobChanged from the cluster.
	if n != 2 || after != 4 || got.GetJob() != "projects/p/jobs/7" || got.GetState() != trainingv1.JobState_JOB_STATE_PENDING {
		t.Fatalf("outbox %d then %d, job %v", n, after, got)
	}
}

// A root survives its encoding: what Load rebuilds equals what was stored.
func TestEncodeDecodeRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 30*time.Second)
	_, rdb := testkit.Redis(t)
	repo := adapters.NewRepo(store.New(rdb, "training:"))
	a, err := New(ctx, repo, slog.Default(), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Handle(ctx, create()); err != nil {
		t.Fatal(err)
	}
	st, err := repo.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	a.mu.RLock()
	defer a.mu.RUnlock()
	want, got := a.state.Lookup(cj), st.Lookup(cj)
	if got == nil || len(got.CJs) != 1 || !proto.Equal(want.CJs[0].Job, got.CJs[0].Job) || !got.CJs[0].Ephemeral {
		t.Fatalf("loaded %+v, want %+v", got, want)
	}
	b1, _ := adapters.Encode(want)
	b2, _ := adapters.Encode(got)
	if string(b1) != string(b2) {
		t.Fatalf("re-encoded differs:\n%s\n%s", b1, b2)
	}
}
