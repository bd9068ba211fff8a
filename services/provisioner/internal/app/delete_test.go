package app

import (
	"context"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/loom-ml/loom/libs/proc"
	"github.com/loom-ml/loom/libs/store"
	"github.com/loom-ml/loom/libs/testkit"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/provisioner/internal/domain"
	"github.com/loom-ml/loom/services/provisioner/internal/provider"
	"github.com/loom-ml/loom/services/provisioner/internal/provider/local"
)

// watched is the real local provider with a record of the agents it
// started; what it starts are real processes.
type watched struct {
	*local.Provider
	mu      sync.Mutex
	started []provider.Launched
	byNode  map[string]int
	deleted bool     // set once DeleteCluster returned
	late    []string // agents started after that
}

func (w *watched) Launch(ctx context.Context, n provider.Node) (provider.Launched, error) {
	l, err := w.Provider.Launch(ctx, n)
	if err == nil && l.Started {
		w.mu.Lock()
		w.started = append(w.started, l)
		w.byNode[n.Name]++
		if w.deleted {
			w.late = append(w.late, n.Name)
		}
		w.mu.Unlock()
	}
	return l, err
}

func (w *watched) snapshot() ([]provider.Launched, map[string]int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	by := map[string]int{}
	for k, v := range w.byNode {
		by[k] = v
	}
	return append([]provider.Launched(nil), w.started...), by
}

// TestDeleteDuringCreateIsPrompt is the second defect: a delete
// in the middle of a create of many nodes had no effect for minutes, and
// killed agents were launched again. Here a 40-node create on the local
// provider, paced at 4 agents a second (10 s for all), is deleted once two
// agents run and one of them was killed: no agent starts after the delete
// was accepted, the pending launches never happen, the killed agent is not
// launched again, every started agent is stopped, and the cluster is gone.
func TestDeleteDuringCreateIsPrompt(t *testing.T) {
	t.Parallel()
	_, rdb := testkit.Redis(t)
	data := t.TempDir()
	lp, err := local.New(local.Config{DataDir: data, AgentCommand: []string{"/bin/sh", "-c", "exec sleep 600"},
		StopGrace: 2 * time.Second, LaunchRate: 4, LaunchConcurrency: 2})
	if err != nil {
		t.Fatal(err)
	}
	w := &watched{Provider: lp, byNode: map[string]int{}}
	pp := params()
	pp.HomeDir = func(c *loomv1.Cluster) string { return local.HomeDir(data, domain.ClusterID(c.GetName())) }
	pp.ScratchDir = func(c *loomv1.Cluster) string { return local.ScratchDir(data, domain.ClusterID(c.GetName())) }
	pp.WorkDir = func(id, h string) string { return local.WorkDir(data, id, h) }
	a, err := New(context.Background(), Options{Store: store.New(rdb, "provisioner:"), Provider: w, Params: pp,
		ReconcileInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		started, _ := w.snapshot()
		for _, l := range started {
			_ = proc.KillGroup(l.PID, syscall.SIGKILL)
		}
	})
	create(t, a, 40)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = a.Reconcile(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	testkit.WaitFor(t, 10*time.Second, "two agents started", func() (bool, error) {
		started, _ := w.snapshot()
		return len(started) >= 2, nil
	})
	started, _ := w.snapshot()
	killed := started[0].PID
	if err := proc.KillGroup(killed, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := a.DeleteCluster(context.Background(), "ev-del", &eventsv1.DeleteCluster{Operation: "del", Cluster: demo}); err != nil {
		t.Fatal(err)
	}
	w.mu.Lock()
	w.deleted = true
	w.mu.Unlock()

	testkit.WaitFor(t, 15*time.Second, "cluster deleted", func() (bool, error) {
		_, ok := a.Cluster(demo)
		return !ok, nil
	})
	started, byNode := w.snapshot()
	if len(w.late) > 0 {
		t.Errorf("agents started after the delete was accepted: %v", w.late)
	}
	if len(started) >= 40 {
		t.Errorf("%d agents started: the pending launches were not cancelled", len(started))
	}
	for node, n := range byNode {
		if n != 1 {
			t.Errorf("%s started %d times", node, n)
		}
	}
	for _, l := range started {
		if proc.GroupAlive(l.PID) {
			t.Errorf("agent %d still runs after the delete", l.PID)
		}
	}
	if len(a.Nodes("-", "-")) != 0 {
		t.Errorf("nodes left: %v", a.Nodes("-", "-"))
	}
}
