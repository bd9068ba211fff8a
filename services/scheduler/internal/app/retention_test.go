package app

import (
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/store"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/scheduler/internal/domain"
)

const cl = "projects/p/clusters/c1"

// TestPruneIsStoredAndSurvivesRestart: retention's prune is written to
// Redis in one Apply; a new instance loading Redis (a restart, a takeover)
// neither brings the pruned job back nor loses its final state: a
// dependency on it still resolves (afterok satisfied, afternotok never).
func TestPruneIsStoredAndSurvivesRestart(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 30*time.Second)
	_, rdb := testkit.Redis(t)
	st := store.New(rdb, "scheduler:")
	var mu sync.Mutex
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	log := slog.New(slog.DiscardHandler)
	a := New(st, domain.Config{}, clock, log)
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	handle := func(a *App, p proto.Message) {
		t.Helper()
		advance(time.Second)
		if err := a.Handle(ctx, envelope.New(topics.JobCommands, cl, "test", p)); err != nil {
			t.Fatalf("handle %T: %v", p, err)
		}
	}
	handle(a, &eventsv1.ClusterChanged{Cluster: &loomv1.Cluster{Name: cl, Status: &loomv1.ClusterStatus{
		State: loomv1.Cluster_RUNNING, SharedDir: "/shared"}}})
	handle(a, &eventsv1.NodeChanged{Node: &loomv1.Node{Name: cl + "/nodes/n1", Cluster: cl, Hostname: "n1", State: loomv1.Node_READY}})
	name := func(id int) string { return "projects/p/jobs/" + strconv.Itoa(id) }
	submit := func(a *App, id int, dep string) {
		handle(a, &eventsv1.SubmitJob{Job: &loomv1.Job{Name: name(id), JobId: strconv.Itoa(id), Cluster: cl,
			Command: []string{"/bin/true"}, Dependency: dep}})
	}
	submit(a, 1, "")
	handle(a, &eventsv1.StepChanged{Job: name(1), Attempt: 1, Node: cl + "/nodes/n1", State: eventsv1.StepState_STEP_EXITED})
	if j, _ := a.GetJob(name(1)); j.GetState() != loomv1.JobState_COMPLETED {
		t.Fatalf("job 1: %v", j.GetState())
	}
	live, err := a.JobGoodput(name(1))
	if err != nil || live.GetJobs() != 1 || live.GetWall().AsDuration() <= 0 {
		t.Fatalf("goodput of job 1: %v %v", live, err)
	}
	ret := domain.Retention{MinJobAge: 5 * time.Minute}
	if n, err := a.Prune(ctx, ret); err != nil || n != 0 {
		t.Fatalf("prune before MinJobAge: %d %v", n, err)
	}
	advance(6 * time.Minute)
	if n, err := a.Prune(ctx, ret); err != nil || n != 1 {
		t.Fatalf("prune: %d %v, want job 1", n, err)
	}
	if _, err := a.GetJob(name(1)); err == nil {
		t.Fatal("a pruned job is still served")
	}
	for _, key := range []string{"scheduler:jobs", "scheduler:runs"} {
		if rdb.HExists(ctx, key, name(1)).Val() || rdb.HExists(ctx, key, name(1)+"#1").Val() {
			t.Fatalf("%s still holds job 1", key)
		}
	}
	if !rdb.HExists(ctx, "scheduler:ended", name(1)).Val() {
		t.Fatal("no compact record of job 1 stored")
	}

	if g, err := a.JobGoodput(name(1)); err != nil || !proto.Equal(g, live) {
		t.Fatalf("goodput of pruned job 1: %v %v, want %v", g, err, live)
	}
	// A record stored before goodput was kept with it.
	rdb.HSet(ctx, "scheduler:ended", name(9), `{"name":"`+name(9)+`","state":5,"end":"2025-12-31T00:00:00Z"}`)

	// A restart: a new instance loads what Redis holds.
	b := New(st, domain.Config{}, clock, log)
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := b.GetJob(name(1)); err == nil {
		t.Fatal("the restart brought a pruned job back")
	}
	if g, err := b.JobGoodput(name(1)); err != nil || !proto.Equal(g, live) {
		t.Fatalf("goodput of pruned job 1 after a restart: %v %v, want %v", g, err, live)
	}
	if g, err := b.ClusterGoodput(cl, clock().Add(-time.Hour)); err != nil || g.GetJobs() != 1 ||
		g.GetWall().AsDuration() != live.GetWall().AsDuration() {
		t.Fatalf("cluster goodput after a restart: %v %v, want job 1's", g, err)
	}
	if _, err := b.JobGoodput(name(9)); !errors.Is(err, errs.NotFound) || !strings.Contains(err.Error(), "before the scheduler kept goodput") {
		t.Fatalf("goodput of a record without it: %v, want NotFound saying why", err)
	}
	submit(b, 2, "afterok:1")
	submit(b, 3, "afternotok:1")
	if j, _ := b.GetJob(name(2)); j.GetState() != loomv1.JobState_RUNNING {
		t.Errorf("afterok on pruned COMPLETED job 1: %v %q, want it started", j.GetState(), j.GetStateReason())
	}
	if j, _ := b.GetJob(name(3)); j.GetState() != loomv1.JobState_PENDING || j.GetStateReason() != domain.ReasonDependencyNeverSatisfied {
		t.Errorf("afternotok on pruned COMPLETED job 1: %v %q, want PENDING DependencyNeverSatisfied", j.GetState(), j.GetStateReason())
	}
}
