package app

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/loom-ml/loom/libs/bus"
	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/store"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/scheduler/internal/domain"
)

// TestStepProgressFromAnotherNodeRefused: a node's StepProgress about a run
// not placed on it is refused (not-assigned) as its StepChanged would be;
// the run's own node's report, and a service's, pass.
func TestStepProgressFromAnotherNodeRefused(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 30*time.Second)
	_, rdb := testkit.Redis(t)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	a := New(store.New(rdb, "scheduler:"), domain.Config{}, func() time.Time { return now }, slog.New(slog.DiscardHandler))
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	n1, n2 := cl+"/nodes/n1", cl+"/nodes/n2"
	for _, ev := range []envelope.Event{
		envelope.New(topics.ClusterEvents, cl, "test", &eventsv1.ClusterChanged{Cluster: &loomv1.Cluster{Name: cl,
			Status: &loomv1.ClusterStatus{State: loomv1.Cluster_RUNNING, SharedDir: "/shared"}}}),
		envelope.New(topics.NodeEvents, n1, "test", &eventsv1.NodeChanged{Node: &loomv1.Node{Name: n1, Cluster: cl, Hostname: "n1", State: loomv1.Node_READY}}),
		envelope.New(topics.JobCommands, cl, "test", &eventsv1.SubmitJob{Job: &loomv1.Job{Name: "projects/p/jobs/1", JobId: "1",
			Cluster: cl, Command: []string{"/bin/true"}}}),
	} {
		if err := a.Handle(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	progress := func(signer string) envelope.Event {
		ev := envelope.New(topics.StepEvents, "projects/p/jobs/1", "loom/agent", &eventsv1.StepProgress{Job: "projects/p/jobs/1",
			Attempt: 1, Node: n1, Step: 5})
		ev.Signer = signer
		return ev
	}
	err := a.checkSigner(progress("nodes/" + n2))
	if envelope.ReasonOf(err) != envelope.ReasonNotAssigned {
		t.Fatalf("another node's progress report: %v, want not-assigned", err)
	}
	for _, signer := range []string{"nodes/" + n1, "services/health"} {
		if err := a.checkSigner(progress(signer)); err != nil {
			t.Fatalf("progress signed by %s: %v", signer, err)
		}
	}
}

// TestCancelWithoutPrincipalRefused: a CancelJob naming no one it acts as
// (no user, no on_behalf_of) is refused (no-principal) and cancels nothing
// when training signed it: it would otherwise cancel anyone's job. Training's
// own cancel (a FLEX_START expiry), naming the owner it acts for, cancels
// that owner's job and records no cancelled_by, but not another user's
// job; the gateway's (it authorized its caller) passes as before.
func TestCancelWithoutPrincipalRefused(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 30*time.Second)
	_, rdb := testkit.Redis(t)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	a := New(store.New(rdb, "scheduler:"), domain.Config{}, func() time.Time { return now }, slog.New(slog.DiscardHandler))
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	// No node: the jobs stay PENDING until cancelled.
	for _, ev := range []envelope.Event{
		envelope.New(topics.ClusterEvents, cl, "test", &eventsv1.ClusterChanged{Cluster: &loomv1.Cluster{Name: cl,
			Status: &loomv1.ClusterStatus{State: loomv1.Cluster_RUNNING, SharedDir: "/shared"}}}),
		envelope.New(topics.JobCommands, cl, "test", &eventsv1.SubmitJob{Job: &loomv1.Job{Name: "projects/p/jobs/1", JobId: "1",
			Cluster: cl, User: "alice", Command: []string{"/bin/true"}}}),
		envelope.New(topics.JobCommands, cl, "test", &eventsv1.SubmitJob{Job: &loomv1.Job{Name: "projects/p/jobs/2", JobId: "2",
			Cluster: cl, User: "bob", Command: []string{"/bin/true"}}}),
	} {
		if err := a.Handle(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	cancel := func(signer string, c *eventsv1.CancelJob) error {
		c.Cluster = cl
		ev := envelope.New(topics.JobCommands, cl, "loom/"+strings.TrimPrefix(signer, "services/"), c)
		ev.Signer = signer
		return a.Handle(ctx, ev)
	}
	state := func(name string) *loomv1.Job {
		t.Helper()
		j, err := a.GetJob(name)
		if err != nil {
			t.Fatal(err)
		}
		return j
	}

	err := cancel("services/training", &eventsv1.CancelJob{Job: "projects/p/jobs/1"})
	if envelope.ReasonOf(err) != envelope.ReasonNoPrincipal || !bus.IsPermanent(err) {
		t.Fatalf("training's CancelJob naming no one: %v, want a permanent no-principal refusal", err)
	}
	if j := state("projects/p/jobs/1"); j.GetState() != loomv1.JobState_PENDING {
		t.Fatalf("refused cancel left job 1 %v, want PENDING", j.GetState())
	}

	// Training's own cancel for alice does not reach bob's job.
	if err := cancel("services/training", &eventsv1.CancelJob{Job: "projects/p/jobs/2", OnBehalfOf: "alice"}); err != nil {
		t.Fatal(err)
	}
	if j := state("projects/p/jobs/2"); j.GetState() != loomv1.JobState_PENDING {
		t.Fatalf("a cancel on behalf of alice left bob's job %v, want PENDING", j.GetState())
	}
	// Its expiry cancel of alice's own job cancels it, by no caller.
	if err := cancel("services/training", &eventsv1.CancelJob{Job: "projects/p/jobs/1", OnBehalfOf: "alice"}); err != nil {
		t.Fatal(err)
	}
	if j := state("projects/p/jobs/1"); j.GetState() != loomv1.JobState_CANCELLED || j.GetCancelledBy() != "" {
		t.Fatalf("training's expiry cancel left job 1 %v cancelled by %q, want CANCELLED by no one", j.GetState(), j.GetCancelledBy())
	}
	// The gateway authorized its caller (an administrator without an OS
	// account): its cancel naming no one passes.
	if err := cancel("services/gateway", &eventsv1.CancelJob{Job: "projects/p/jobs/2", Admin: true}); err != nil {
		t.Fatal(err)
	}
	if j := state("projects/p/jobs/2"); j.GetState() != loomv1.JobState_CANCELLED {
		t.Fatalf("the gateway's cancel left job 2 %v, want CANCELLED", j.GetState())
	}
}
