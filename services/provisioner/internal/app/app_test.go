package app

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/loom-ml/loom/libs/store"
	"github.com/loom-ml/loom/libs/testkit"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/provisioner/internal/adapters"
	"github.com/loom-ml/loom/services/provisioner/internal/domain"
	"github.com/loom-ml/loom/services/provisioner/internal/provider"
)

// fakeProvider records calls and fails them on demand; it stands in for
// processes, not for Redis or Kafka.
type fakeProvider struct {
	mu         sync.Mutex
	launches   map[string]int
	running    map[string]bool
	removed    map[string]bool
	clusters   map[string]bool
	launchErr  error
	stopErr    error
	prevExit   string
	startedNew bool
}

func newFake() *fakeProvider {
	return &fakeProvider{launches: map[string]int{}, running: map[string]bool{}, removed: map[string]bool{}, clusters: map[string]bool{}}
}

func (f *fakeProvider) Launch(_ context.Context, n provider.Node) (provider.Launched, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.launches[n.Name]++
	if f.launchErr != nil {
		return provider.Launched{}, f.launchErr
	}
	if f.running[n.Name] && !f.startedNew {
		return provider.Launched{PID: 1}, nil
	}
	f.running[n.Name] = true
	return provider.Launched{PID: 1, Started: true, PrevExit: f.prevExit}, nil
}

func (f *fakeProvider) Stop(_ context.Context, n provider.Node) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopErr != nil {
		return f.stopErr
	}
	delete(f.running, n.Name)
	return nil
}

func (f *fakeProvider) Remove(_ context.Context, n provider.Node) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.removed[n.Name] = true
	return nil
}

func (f *fakeProvider) RemoveCluster(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.clusters[id] = true
	return nil
}

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

const demo = "projects/default/clusters/demo"

func newApp(t *testing.T, st *store.Store, p provider.Provider, c *clock) *App {
	t.Helper()
	a, err := New(context.Background(), Options{
		Store: st, Provider: p, Now: c.now, LaunchBackoff: time.Second, MaxLaunchBackoff: 4 * time.Second,
		Params: domain.Params{
			SharedDir:       func(id string) string { return "/data/clusters/" + id + "/shared" },
			WorkDir:         func(id, h string) string { return "/data/clusters/" + id + "/nodes/" + h },
			MaxNodesPerPool: 64, MaxAccelerators: 16,
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func create(t *testing.T, a *App, nodes int32) {
	t.Helper()
	err := a.CreateCluster(context.Background(), "ev-create", &eventsv1.CreateCluster{Operation: "op1", Cluster: &loomv1.Cluster{
		Name: demo, Compute: &loomv1.ComputeResources{NodePools: []*loomv1.NodePool{{Id: "gpu", NodeCount: nodes}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
}

func node(a *App, host string) *loomv1.Node {
	for _, n := range a.Nodes("default", "demo") {
		if n.GetHostname() == host {
			return n
		}
	}
	return nil
}

func TestLaunchFailureBacksOffAndIsReported(t *testing.T) {
	t.Parallel()
	_, rdb := testkit.Redis(t)
	st := store.New(rdb, "provisioner:")
	p, c := newFake(), &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	a := newApp(t, st, p, c)
	create(t, a, 1)
	name := demo + "/nodes/gpu-0001"

	p.launchErr = errors.New("exec: agent: not found")
	a.ReconcileOnce(context.Background())
	n := node(a, "gpu-0001")
	if n.GetState() != loomv1.Node_PROVISIONING || n.GetReason() != domain.LaunchReasonPrefix+"exec: agent: not found (attempt 1, next in 1s)" {
		t.Fatalf("node after a failed launch = %v", n)
	}
	a.ReconcileOnce(context.Background())
	if p.launches[name] != 1 {
		t.Fatalf("launched %d times within the backoff, want 1", p.launches[name])
	}
	c.t = c.t.Add(time.Second)
	a.ReconcileOnce(context.Background())
	if p.launches[name] != 2 || !strings.Contains(node(a, "gpu-0001").GetReason(), "attempt 2, next in 2s") {
		t.Fatalf("second try: %d launches, node %v", p.launches[name], node(a, "gpu-0001"))
	}

	p.launchErr = nil
	c.t = c.t.Add(2 * time.Second)
	a.ReconcileOnce(context.Background())
	if n := node(a, "gpu-0001"); n.GetReason() != "" {
		t.Fatalf("reason not cleared after a launch: %v", n)
	}

	// The memory state is what Redis holds: a restarted App sees the same.
	b := newApp(t, st, p, c)
	if got, want := node(b, "gpu-0001"), node(a, "gpu-0001"); got.String() != want.String() {
		t.Fatalf("reloaded node = %v, want %v", got, want)
	}
}

func TestAgentThatDiesBeforeRegisteringIsReported(t *testing.T) {
	t.Parallel()
	_, rdb := testkit.Redis(t)
	p, c := newFake(), &clock{t: time.Now()}
	a := newApp(t, store.New(rdb, "provisioner:"), p, c)
	create(t, a, 1)
	a.ReconcileOnce(context.Background())
	p.startedNew, p.prevExit = true, "exit status 1; log /x/agent.log"
	a.ReconcileOnce(context.Background())
	if n := node(a, "gpu-0001"); !strings.Contains(n.GetReason(), "agent exited (exit status 1; log /x/agent.log) before it registered") {
		t.Fatalf("node = %v", n)
	}
}

func TestTeardownRetriesUntilAgentsStop(t *testing.T) {
	t.Parallel()
	_, rdb := testkit.Redis(t)
	st := store.New(rdb, "provisioner:")
	p, c := newFake(), &clock{t: time.Now()}
	a := newApp(t, st, p, c)
	create(t, a, 2)
	a.ReconcileOnce(context.Background())
	if len(p.running) != 2 {
		t.Fatalf("running = %v", p.running)
	}
	if err := a.DeleteCluster(context.Background(), "ev-del", &eventsv1.DeleteCluster{Operation: "del", Cluster: demo}); err != nil {
		t.Fatal(err)
	}
	// Nodes of a deleting cluster are not launched again.
	before := p.launches[demo+"/nodes/gpu-0001"]

	p.stopErr = errors.New("stuck")
	a.ReconcileOnce(context.Background())
	if cl, ok := a.Cluster(demo); !ok || cl.GetStatus().GetState() != loomv1.Cluster_DELETING || len(p.clusters) != 0 {
		t.Fatalf("cluster after a failed teardown = %v (exists %v), removed clusters %v", cl, ok, p.clusters)
	}
	p.stopErr = nil
	a.ReconcileOnce(context.Background())
	if _, ok := a.Cluster(demo); ok || len(a.Nodes("-", "-")) != 0 || !p.clusters["demo"] || len(p.removed) != 2 || len(p.running) != 0 {
		t.Fatalf("after teardown: nodes %v, removed %v, clusters %v, running %v", a.Nodes("-", "-"), p.removed, p.clusters, p.running)
	}
	if p.launches[demo+"/nodes/gpu-0001"] != before {
		t.Fatal("a node of a deleting cluster was launched")
	}
	if m, err := st.HGetAll(context.Background(), adapters.KeyClusters); err != nil || len(m) != 0 {
		t.Fatalf("cluster records left: %v, %v", m, err)
	}
	if m, err := st.HGetAll(context.Background(), adapters.KeyNodes); err != nil || len(m) != 0 {
		t.Fatalf("node records left: %v, %v", m, err)
	}
}

func TestRedeliveredEventIsAppliedOnce(t *testing.T) {
	t.Parallel()
	_, rdb := testkit.Redis(t)
	st := store.New(rdb, "provisioner:")
	a := newApp(t, st, newFake(), &clock{t: time.Now()})
	create(t, a, 2)
	reg := &eventsv1.AgentRegistered{Node: demo + "/nodes/gpu-0001"}
	for range 2 {
		if err := a.AgentRegistered(context.Background(), "ev-reg", reg); err != nil {
			t.Fatal(err)
		}
	}
	n, err := st.OutboxLen(context.Background())
	// create: ClusterChanged + 2 NodeChanged; registration: NodeChanged + ClusterChanged.
	if err != nil || n != 5 {
		t.Fatalf("outbox = %d, %v; want 5", n, err)
	}
}
