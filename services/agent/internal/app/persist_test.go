package app

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/loom-ml/loom/libs/store"
	"github.com/loom-ml/loom/libs/store/storetest"
	"github.com/loom-ml/loom/libs/testkit"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	"github.com/loom-ml/loom/services/agent/internal/adapters"
	"github.com/loom-ml/loom/services/agent/internal/adapters/procruntime"
	"github.com/loom-ml/loom/services/agent/internal/domain"
)

// A step that ends while Redis takes no writes has its end written once
// Redis is back, however long that took: nothing redelivers an end, and an
// end given up on left the job running on the scheduler (holding its
// nodes; a stop for it found it ended in memory and did nothing) until the
// agent restarted. PersistTimeout, the bound once the agent stops, is far
// shorter here than the outage.
func TestStepEndOutlastsARedisOutage(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 60*time.Second)
	_, rdb := testkit.Redis(t)
	dropped := storetest.DropApplyRequests(rdb, "agent-c1-gpu-0001:")
	st := store.New(rdb, "agent-c1-gpu-0001:")
	dir := t.TempDir()
	self := domain.Self{Node: "projects/p/clusters/c1/nodes/gpu-0001", Cluster: "projects/p/clusters/c1"}
	a, err := New(ctx, Options{Store: st, Runtime: procruntime.New(procruntime.Options{AllowRoot: true}), Self: self,
		Hostname: "gpu-0001", WorkDir: dir, Log: slog.New(slog.DiscardHandler), PersistTimeout: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	gate := filepath.Join(dir, "go")
	cmd := &eventsv1.StartStep{Job: "projects/p/jobs/1", JobId: "1", Attempt: 1, Node: self.Node,
		Script: "while [ ! -e " + gate + " ]; do sleep 0.01; done; exit 3", OutputPath: filepath.Join(dir, "out")}
	key := domain.Key(cmd.GetJob(), cmd.GetAttempt())
	if err := a.StartStep(ctx, "ev-start", cmd); err != nil {
		t.Fatal(err)
	}
	stored := func(phase domain.Phase) func() (bool, error) {
		return func() (bool, error) {
			steps, err := adapters.LoadSteps(ctx, st)
			return err == nil && steps[key] != nil && steps[key].Phase == phase, err
		}
	}
	testkit.WaitFor(t, 20*time.Second, "the step recorded running", stored(domain.Running))
	const lost = 6 // over a second of retries, a hundred times PersistTimeout
	dropped.Arm(lost)
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 20*time.Second, "the step's end recorded after the outage", stored(domain.Exited))
	if dropped.Lost() != lost {
		t.Fatalf("%d writes lost, want %d", dropped.Lost(), lost)
	}
	a.watchers.Wait()
}
