package app

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/loom-ml/loom/libs/store/storetest"
	"github.com/loom-ml/loom/libs/testkit"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	"github.com/loom-ml/loom/services/agent/internal/adapters"
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
	f := faultyAgent(t, ctx, storetest.DropApplyRequests, func(o *Options) { o.PersistTimeout = 10 * time.Millisecond })
	a, dropped, st, dir, self := f.app, f.faults, f.st, f.dir, f.self
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
