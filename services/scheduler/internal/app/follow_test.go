package app

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/store"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/scheduler/internal/adapters"
	"github.com/loom-ml/loom/services/scheduler/internal/domain"
	"github.com/loom-ml/loom/services/scheduler/internal/domain/views"
)

// followFixture is a real Redis with the scheduler's store and lease, and a
// clock the test moves, for a leader and its followers.
type followFixture struct {
	t     *testing.T
	ctx   context.Context
	st    *store.Store
	lease *adapters.Lease
	now   time.Time
}

func newFollowFixture(t *testing.T) *followFixture {
	_, rdb := testkit.Redis(t)
	st := store.New(rdb, "scheduler:")
	return &followFixture{t: t, ctx: testkit.Context(t, 60*time.Second), st: st, lease: adapters.NewLease(st, "a", time.Minute),
		now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
}

// app returns a new instance, not yet started.
func (x *followFixture) app() *App {
	return New(x.st, domain.Config{}, func() time.Time { return x.now }, slog.New(slog.DiscardHandler))
}

// lead takes the lease and, with a not nil, makes a lead its term; it
// returns the term's token.
func (x *followFixture) lead(a *App) string {
	x.t.Helper()
	token, err := x.lease.TryAcquire(x.ctx)
	if err != nil || token == "" {
		x.t.Fatalf("take the lease: %q, %v", token, err)
	}
	if a != nil {
		if err := a.Lead(x.ctx, token, nil); err != nil {
			x.t.Fatal(err)
		}
	}
	return token
}

// follower starts an instance that follows (its first refresh loads).
func (x *followFixture) follower() *App {
	x.t.Helper()
	f := x.app()
	f.StepDown()
	if err := f.Refresh(x.ctx); err != nil {
		x.t.Fatal(err)
	}
	return f
}

// handle has a apply p, a second after the last.
func (x *followFixture) handle(a *App, p proto.Message) {
	x.t.Helper()
	x.now = x.now.Add(time.Second)
	if err := a.Handle(x.ctx, envelope.New(topics.JobCommands, cl, "test", p)); err != nil {
		x.t.Fatal(err)
	}
}

// TestFollowerKeepsUpFromTheChangeLog runs a leader and a follower on one
// real Redis: the follower's refreshes apply the leader's logged writes
// (no reload after its first), and its memory then answers as one loaded
// afresh does; a write too large for the log makes it reload once; and when
// it takes over it catches up with the writes since its last refresh,
// without a reload, and decides from there.
func TestFollowerKeepsUpFromTheChangeLog(t *testing.T) {
	t.Parallel()
	x := newFollowFixture(t)
	ctx, lead, follower, handle := x.ctx, x.lead, x.follower, x.handle
	// sameAsFresh checks f answers every job and node as a follower that
	// loads everything afresh does (but for a leader's explanations of its
	// pending jobs, which a follower does not have).
	sameAsFresh := func(f *App) {
		t.Helper()
		fresh := follower()
		got, _ := f.ListJobs(views.JobFilter{}, "", 1000)
		want, _ := fresh.ListJobs(views.JobFilter{}, "", 1000)
		if len(got) != len(want) {
			t.Fatalf("the follower lists %d jobs, a fresh load %d", len(got), len(want))
		}
		for i := range got {
			g := got[i]
			if f.leading {
				// Its last pass's explanation, which is memory only.
				g = withoutPlacement(g)
			}
			if !proto.Equal(g, want[i]) {
				t.Fatalf("job %s: the follower has\n%v\na fresh load\n%v", want[i].GetName(), got[i], want[i])
			}
		}
		gn, wn := f.ListSlurmNodes(cl), fresh.ListSlurmNodes(cl)
		if len(gn) != len(wn) {
			t.Fatalf("the follower has %d nodes, a fresh load %d", len(gn), len(wn))
		}
		for i := range gn {
			if !proto.Equal(gn[i], wn[i]) {
				t.Fatalf("node %d: the follower has %v, a fresh load %v", i, gn[i], wn[i])
			}
		}
	}

	a := x.app()
	lead(a)
	f := follower()
	handle(a, &eventsv1.ClusterChanged{Cluster: &loomv1.Cluster{Name: cl, Status: &loomv1.ClusterStatus{State: loomv1.Cluster_RUNNING, SharedDir: "/shared"}}})
	for _, host := range []string{"n1", "n2"} {
		handle(a, &eventsv1.NodeChanged{Node: &loomv1.Node{Name: cl + "/nodes/" + host, Cluster: cl, Hostname: host, State: loomv1.Node_READY,
			Gpus: 8, MachineType: "a3-highgpu-8g"}})
	}
	job := func(id int, gpus int32) *loomv1.Job {
		return &loomv1.Job{Name: "projects/p/jobs/" + strconv.Itoa(id), JobId: strconv.Itoa(id), Cluster: cl,
			Command: []string{"/bin/train"}, NodeCount: 1, GpusPerNode: gpus, Env: map[string]string{"RUN": strconv.Itoa(id)}}
	}
	for id := 1; id <= 4; id++ {
		handle(a, &eventsv1.SubmitJob{Job: job(id, 4)})
	}
	arr := job(10, 2)
	arr.Array = "0-5%2"
	handle(a, &eventsv1.SubmitJob{Job: arr})
	handle(a, &eventsv1.CancelJob{Job: "projects/p/jobs/2", Cluster: cl})

	if err := f.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if f.reloads != 1 || f.follows != 1 {
		t.Fatalf("the follower reloaded %d times and followed the log %d; want its first load, then the log", f.reloads, f.follows)
	}
	sameAsFresh(f)

	// A write larger than the log holds: the follower reloads, once.
	big := job(20, 1)
	big.Hold = true // no later pass changes it: each change of it overflows the log
	big.Env["BIG"] = strings.Repeat("x", adapters.ChangesMaxBytes)
	handle(a, &eventsv1.SubmitJob{Job: big})
	reloadsBy(t, f, 2) // no sooner than ten times its last reload took
	handle(a, &eventsv1.CancelJob{Job: "projects/p/jobs/4", Cluster: cl})
	if err := f.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if f.reloads != 2 || f.follows != 2 {
		t.Fatalf("the follower reloaded %d times and followed %d, want 2 and 2", f.reloads, f.follows)
	}
	sameAsFresh(f)

	// Retention prunes the jobs that ended: the follower drops them and
	// keeps their compact records, as the leader does.
	for _, id := range []int{2, 3, 4} { // their steps end (2 and 4 were cancelled)
		name := "projects/p/jobs/" + strconv.Itoa(id)
		j, err := a.GetJob(name)
		if err != nil || len(j.GetNodes()) != 1 {
			t.Fatalf("job %d on %v (%v), want one node", id, j.GetNodes(), err)
		}
		handle(a, &eventsv1.StepChanged{Job: name, Attempt: 1, Node: cl + "/nodes/" + j.GetNodes()[0], State: eventsv1.StepState_STEP_EXITED, Cluster: cl})
	}
	x.now = x.now.Add(10 * time.Minute)
	pruned, err := a.Prune(ctx, domain.Retention{MinJobAge: 5 * time.Minute})
	if err != nil || pruned == 0 {
		t.Fatalf("prune: %d, %v; want the cancelled jobs", pruned, err)
	}
	if err := f.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := f.GetJob("projects/p/jobs/3"); err == nil {
		t.Fatal("the follower still serves pruned job 3")
	}
	if f.reloads != 2 || f.follows != 3 {
		t.Fatalf("after the prune the follower reloaded %d times and followed %d, want 2 and 3", f.reloads, f.follows)
	}
	for _, id := range []int{2, 3, 4} {
		name := "projects/p/jobs/" + strconv.Itoa(id)
		_, errA := a.GetJob(name)
		_, errF := f.GetJob(name)
		gA, _ := a.JobGoodput(name)
		gF, _ := f.JobGoodput(name)
		if (errA == nil) != (errF == nil) || !proto.Equal(gA, gF) {
			t.Fatalf("job %s: the leader answers %v (goodput %v), the follower %v (goodput %v)", name, errA, gA, errF, gF)
		}
	}
	sameAsFresh(f)

	// Writes after the follower's last refresh, then the leader goes away:
	// the follower takes over from the log, and decides from there.
	handle(a, &eventsv1.SubmitJob{Job: job(30, 8)})
	j30, err := a.GetJob("projects/p/jobs/30")
	if err != nil {
		t.Fatal(err)
	}
	j30 = proto.Clone(j30).(*loomv1.Job)
	j30.Placement = "" // the leader's explanation, memory only
	j1, err := a.GetJob("projects/p/jobs/1")
	if err != nil || len(j1.GetNodes()) != 1 {
		t.Fatalf("job 1 on %v (%v), want one node", j1.GetNodes(), err)
	}
	if err := x.lease.Release(ctx, a.token); err != nil {
		t.Fatal(err)
	}
	lead(f)
	if f.reloads != 2 || f.follows != 4 {
		t.Fatalf("taking over: %d reloads and %d follows in all, want 2 and 4 (the log's last writes, no reload)", f.reloads, f.follows)
	}
	if j, err := f.GetJob("projects/p/jobs/30"); err != nil || !proto.Equal(withoutPlacement(j), j30) {
		t.Fatalf("job 30 after the takeover: %v (%v), want it as the old leader left it: %v", j, err, j30)
	}
	// Job 1 ends: the new leader decides from the memory it followed, and
	// what it writes is what it holds.
	for _, state := range []eventsv1.StepState{eventsv1.StepState_STEP_RUNNING, eventsv1.StepState_STEP_EXITED} {
		handle(f, &eventsv1.StepChanged{Job: "projects/p/jobs/1", Attempt: 1, Node: cl + "/nodes/" + j1.GetNodes()[0], State: state, Cluster: cl})
	}
	if j, err := f.GetJob("projects/p/jobs/1"); err != nil || j.GetState() != loomv1.JobState_COMPLETED {
		t.Fatalf("job 1 after its step exited: %v (%v), want COMPLETED", j.GetState(), err)
	}
	sameAsFresh(f)
}

// withoutPlacement returns a copy of j without its placement explanation
// (a leader's, memory only).
func withoutPlacement(j *loomv1.Job) *loomv1.Job {
	if j == nil {
		return nil
	}
	c := proto.Clone(j).(*loomv1.Job)
	c.Placement = ""
	return c
}

// reloadsBy refreshes f until it has reloaded want times in all (a
// follower defers a reload until ten times the last one's duration has
// passed), and fails if it reloads more.
func reloadsBy(t *testing.T, f *App, want uint64) {
	t.Helper()
	testkit.WaitFor(t, 10*time.Second, fmt.Sprintf("the follower's reload %d", want), func() (bool, error) {
		return f.reloads >= want, f.Refresh(context.Background())
	})
	if f.reloads != want {
		t.Fatalf("the follower reloaded %d times in all, want %d", f.reloads, want)
	}
}

// TestFollowersReloadAfterWritesNotLogged: a scheduler of an earlier
// release writes without the change log. A follower notices (the store's
// version is not the log's last) and reloads; one that takes over reloads,
// and its term's first entry makes the other followers reload too, though
// every later write is logged again: what they applied lacks that write.
func TestFollowersReloadAfterWritesNotLogged(t *testing.T) {
	t.Parallel()
	x := newFollowFixture(t)
	ctx, st, lease, lead, follower := x.ctx, x.st, x.lease, x.lead, x.follower
	a := x.app()
	lead(a)
	f, g := follower(), follower()
	if err := a.Handle(ctx, envelope.New(topics.JobCommands, cl, "test", &eventsv1.ClusterChanged{Cluster: &loomv1.Cluster{Name: cl,
		Status: &loomv1.ClusterStatus{State: loomv1.Cluster_RUNNING, SharedDir: "/shared"}}})); err != nil {
		t.Fatal(err)
	}
	for _, x := range []*App{f, g} {
		if err := x.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		if x.reloads != 1 || x.follows != 1 || len(x.state.Clusters()) != 1 {
			t.Fatalf("a follower reloaded %d times, followed %d, holds clusters %v; want 1, 1, [%s]", x.reloads, x.follows, x.state.Clusters(), cl)
		}
	}

	// The earlier release leads, and writes a second cluster as it wrote:
	// fenced and versioned, not logged.
	if err := lease.Release(ctx, a.token); err != nil {
		t.Fatal(err)
	}
	old := lead(nil)
	rec, err := st.HGet(ctx, adapters.KeyClusters, cl)
	if err != nil {
		t.Fatal(err)
	}
	const c2 = "projects/p/clusters/c2"
	var tx store.Tx
	adapters.Fence(&tx, old, 1)
	tx.HSet(adapters.KeyClusters, c2, []byte(strings.Replace(string(rec), cl, c2, 1)))
	if _, err := st.Apply(ctx, "", &tx); err != nil {
		t.Fatal(err)
	}
	reloadsBy(t, f, 2)
	if got := f.state.Clusters(); len(got) != 2 {
		t.Fatalf("after the write not logged the follower holds clusters %v, want 2", got)
	}

	// f takes over; g, which refreshed before that write, reloads at the
	// new term's first entry.
	if err := lease.Release(ctx, old); err != nil {
		t.Fatal(err)
	}
	lead(f)
	if err := f.Handle(ctx, envelope.New(topics.JobCommands, cl, "test", &eventsv1.NodeChanged{Node: &loomv1.Node{Name: cl + "/nodes/n1",
		Cluster: cl, Hostname: "n1", State: loomv1.Node_READY}})); err != nil {
		t.Fatal(err)
	}
	reloadsBy(t, g, 2)
	if got := g.state.Clusters(); len(got) != 2 {
		t.Fatalf("after the takeover the other follower holds clusters %v, want 2", got)
	}
	if err := g.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if g.reloads != 2 || len(g.ListSlurmNodes(cl)) != 1 {
		t.Fatalf("the follower reloaded %d times and holds nodes %v; want 2 (the log is whole again) and n1", g.reloads, g.ListSlurmNodes(cl))
	}
}

// TestFollowerDefersReloads: a follower that needs a reload does not
// reload sooner than ten times its last reload took after it (its reads
// lag meanwhile), so that reading every record cannot take most of its
// time and of Redis's; a leader's start never waits.
func TestFollowerDefersReloads(t *testing.T) {
	t.Parallel()
	x := newFollowFixture(t)
	ctx, st := x.ctx, x.st
	f := x.app()
	f.StepDown()
	if err := f.Refresh(ctx); err != nil || f.reloads != 1 {
		t.Fatalf("the first refresh: %d reloads, %v; want 1", f.reloads, err)
	}
	// As after a reload of a large state that just ended.
	f.lastReload, f.reloadTook = time.Now(), time.Hour
	f.logPos = "" // a reload is needed
	if err := f.Refresh(ctx); err != nil || f.reloads != 1 {
		t.Fatalf("a refresh within ten times the last reload: %d reloads, %v; want it deferred", f.reloads, err)
	}
	f.lastReload = time.Now().Add(-10 * time.Hour)
	if err := f.Refresh(ctx); err != nil || f.reloads != 2 {
		t.Fatalf("a refresh ten times the last reload later: %d reloads, %v; want 2", f.reloads, err)
	}
	f.lastReload, f.logPos = time.Now(), ""
	token, err := adapters.NewLease(st, "f", time.Minute).TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Lead(ctx, token, nil); err != nil || f.reloads != 3 {
		t.Fatalf("taking the lease: %d reloads, %v; want 3 (a leader's start does not wait)", f.reloads, err)
	}
}
