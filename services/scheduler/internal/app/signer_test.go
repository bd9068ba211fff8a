package app

import (
	"log/slog"
	"testing"
	"time"

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
