package app

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/loom-ml/loom/libs/store"
	"github.com/loom-ml/loom/libs/store/storetest"
	"github.com/loom-ml/loom/libs/testkit"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	"github.com/loom-ml/loom/services/agent/internal/adapters"
	"github.com/loom-ml/loom/services/agent/internal/adapters/procruntime"
	"github.com/loom-ml/loom/services/agent/internal/domain"
)

// Fault injection: a StartStep whose Apply (the STARTING record and the
// inbox mark) ran in Redis but whose answer was lost. The agent finds its
// mark and goes on: the step runs, once, and its records in memory are the
// ones Redis holds; the redelivered command starts nothing.
func TestApplyWithLostAnswerLeavesMemoryAsRedis(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 30*time.Second)
	f := faultyAgent(t, ctx, storetest.LoseApplyReplies, nil)
	a, lost, st, dir, self := f.app, f.faults, f.st, f.dir, f.self
	out := filepath.Join(dir, "ran")
	cmd := &eventsv1.StartStep{Job: "projects/p/jobs/1", JobId: "1", Attempt: 1, Node: self.Node,
		Script: "echo ran >> " + out, OutputPath: filepath.Join(dir, "out")}
	key := domain.Key(cmd.GetJob(), cmd.GetAttempt())

	lost.Arm(1)
	if err := a.StartStep(ctx, "ev-start", cmd); err != nil {
		t.Fatalf("StartStep with a lost answer: %v (the mark is in Redis: it should go on)", err)
	}
	if lost.Lost() != 1 {
		t.Fatal("no answer was lost")
	}
	testkit.WaitFor(t, 20*time.Second, "the step ran and its end is recorded", func() (bool, error) {
		steps, err := adapters.LoadSteps(ctx, st)
		return err == nil && steps[key] != nil && steps[key].Phase.Terminal(), err
	})
	if err := a.StartStep(ctx, "ev-start", cmd); err != nil { // the redelivery
		t.Fatal(err)
	}
	a.watchers.Wait()
	steps, err := adapters.LoadSteps(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	mem, _ := a.step(key)
	if mem == nil || mem.Phase != steps[key].Phase || mem.ExitCode != steps[key].ExitCode || !mem.Created.Equal(steps[key].Created) {
		t.Fatalf("memory has %+v, Redis %+v", mem, steps[key])
	}
	b, err := os.ReadFile(out)
	if err != nil || strings.Count(string(b), "ran") != 1 {
		t.Fatalf("the step ran %d times (%v), want once", strings.Count(string(b), "ran"), err)
	}
}

// The agent's reload after a write whose outcome is unknown moves memory to
// Redis, but leaves a record that is being persisted (memory ahead by
// design) as it is.
func TestReloadLeavesRecordsBeingPersisted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, rdb := testkit.Redis(t)
	st := store.New(rdb, "agent-c1-gpu-0001:")
	self := domain.Self{Node: "projects/p/clusters/c1/nodes/gpu-0001", Cluster: "projects/p/clusters/c1"}
	a, err := New(ctx, Options{Store: st, Runtime: procruntime.New(procruntime.Options{AllowRoot: true}), Self: self, WorkDir: t.TempDir(), Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	stored := &domain.Step{Job: "projects/p/jobs/1", Attempt: 1, Phase: domain.Starting, Created: time.Unix(1, 0).UTC()}
	other := &domain.Step{Job: "projects/p/jobs/2", Attempt: 1, Phase: domain.Starting, Created: time.Unix(1, 0).UTC()}
	var tx store.Tx
	for _, s := range []*domain.Step{stored, other} {
		if err := adapters.PutStep(&tx, s, self, false); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.Apply(ctx, "", &tx); err != nil {
		t.Fatal(err)
	}
	ahead := domain.Started(other, 42, 0, "")
	a.mu.Lock()
	a.steps[other.Key()] = ahead
	a.persisting[other.Key()] = 1
	a.mu.Unlock()
	if err := a.reload(ctx); err != nil {
		t.Fatal(err)
	}
	if got, _ := a.step(stored.Key()); got == nil || got.Phase != domain.Starting {
		t.Fatalf("reload did not bring the stored record: %+v", got)
	}
	if got, _ := a.step(other.Key()); got != ahead {
		t.Fatalf("reload replaced a record being persisted: %+v", got)
	}
}

// faulty is an agent app for node gpu-0001 of cluster c1 on a Redis of its
// own, whose store's writes the test can fault (storetest's injectors).
type faulty struct {
	app    *App
	faults *storetest.LostReplies
	st     *store.Store
	dir    string
	self   domain.Self
}

// faultyAgent makes a faulty agent: inject is storetest.LoseApplyReplies
// (a write's answer lost) or DropApplyRequests (the write lost), tune (nil:
// none) adjusts its Options.
func faultyAgent(t *testing.T, ctx context.Context, inject func(*redis.Client, string) *storetest.LostReplies, tune func(*Options)) faulty {
	t.Helper()
	const prefix = "agent-c1-gpu-0001:"
	_, rdb := testkit.Redis(t)
	f := faulty{faults: inject(rdb, prefix), st: store.New(rdb, prefix), dir: t.TempDir(),
		self: domain.Self{Node: "projects/p/clusters/c1/nodes/gpu-0001", Cluster: "projects/p/clusters/c1"}}
	o := Options{Store: f.st, Runtime: procruntime.New(procruntime.Options{AllowRoot: true}), Self: f.self,
		Hostname: "gpu-0001", WorkDir: f.dir, Log: slog.New(slog.DiscardHandler)}
	if tune != nil {
		tune(&o)
	}
	a, err := New(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	f.app = a
	return f
}
