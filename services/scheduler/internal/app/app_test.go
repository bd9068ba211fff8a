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
	"github.com/loom-ml/loom/services/scheduler/internal/domain"
)

// Fault injection: a SubmitJob whose Apply (the job, its placement and its
// StartStep) ran in Redis but whose answer was lost. Memory holds what Redis
// holds right after, the redelivered command changes nothing, and the job
// was started once.
func TestApplyWithLostAnswerLeavesMemoryAsRedis(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 30*time.Second)
	_, rdb := testkit.Redis(t)
	lost := storetest.LoseApplyReplies(rdb, "scheduler:")
	st := store.New(rdb, "scheduler:")
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	log := slog.New(slog.DiscardHandler)
	a := New(st, domain.Config{}, clock, log)
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	for _, p := range []proto.Message{
		&eventsv1.ClusterChanged{Cluster: &loomv1.Cluster{Name: cl, Status: &loomv1.ClusterStatus{State: loomv1.Cluster_RUNNING, SharedDir: "/shared"}}},
		&eventsv1.NodeChanged{Node: &loomv1.Node{Name: cl + "/nodes/n1", Cluster: cl, Hostname: "n1", State: loomv1.Node_READY}},
	} {
		if err := a.Handle(ctx, envelope.New(topics.JobCommands, cl, "test", p)); err != nil {
			t.Fatal(err)
		}
	}
	const job = "projects/p/jobs/1"
	submit := envelope.New(topics.JobCommands, cl, "test", &eventsv1.SubmitJob{Job: &loomv1.Job{Name: job, JobId: "1", Cluster: cl,
		Command: []string{"/bin/true"}}})
	before, _ := st.OutboxLen(ctx)
	lost.Arm(1)
	if err := a.Handle(ctx, submit); !store.OutcomeUnknown(err) {
		t.Fatalf("Handle with a lost answer = %v, want the outcome unknown", err)
	}
	fromRedis := New(st, domain.Config{}, clock, log)
	if err := fromRedis.Start(ctx); err != nil {
		t.Fatal(err)
	}
	want, err := fromRedis.GetJob(job)
	if err != nil || want.GetState() != loomv1.JobState_RUNNING {
		t.Fatalf("Redis has the job %v (%v); the script should have run and placed it", want.GetState(), err)
	}
	got, err := a.GetJob(job)
	if err != nil || !proto.Equal(got, want) {
		t.Fatalf("memory has %v (%v), Redis %v", got, err, want)
	}
	if err := a.Handle(ctx, submit); err != nil { // the redelivery
		t.Fatal(err)
	}
	if got, _ := a.GetJob(job); !proto.Equal(got, want) {
		t.Fatalf("the redelivery changed the job: %v", got)
	}
	after, _ := st.OutboxLen(ctx)
	// JobChanged RUNNING and one StartStep, once.
	if after-before != 2 {
		t.Fatalf("the submission emitted %d events, want 2 (once)", after-before)
	}
}
