package app

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/store"
	"github.com/loom-ml/loom/libs/store/storetest"
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
	setups     map[string]provider.ClusterSetup
	events     chan provider.Event
	// passes counts StartPass; launchesAtPass is how many launches there
	// had been when each pass started.
	passes         int
	launchesAtPass []int
}

func newFake() *fakeProvider {
	return &fakeProvider{launches: map[string]int{}, running: map[string]bool{}, removed: map[string]bool{}, clusters: map[string]bool{},
		setups: map[string]provider.ClusterSetup{}, events: make(chan provider.Event, 10)}
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

func (f *fakeProvider) PrepareCluster(_ context.Context, c provider.ClusterSetup) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.setups[c.Cluster] = c
	return nil
}

func (f *fakeProvider) Events() <-chan provider.Event { return f.events }

func (f *fakeProvider) StartPass(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.passes++
	n := 0
	for _, c := range f.launches {
		n += c
	}
	f.launchesAtPass = append(f.launchesAtPass, n)
	return nil
}

func (f *fakeProvider) count(m map[string]int, k string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return m[k]
}

func (f *fakeProvider) has(m map[string]bool, k string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return m[k]
}

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

const demo = "projects/default/clusters/demo"

func params() domain.Params {
	return domain.Params{
		HomeDir:           func(c *loomv1.Cluster) string { return "/data/clusters/" + domain.ClusterID(c.GetName()) + "/home" },
		ScratchDir:        func(c *loomv1.Cluster) string { return "/data/clusters/" + domain.ClusterID(c.GetName()) + "/scratch" },
		WorkDir:           func(id, h string) string { return "/data/clusters/" + id + "/nodes/" + h },
		MaxNodesPerPool:   64,
		LaunchBackoff:     time.Second,
		MaxLaunchBackoff:  4 * time.Second,
		MaxLaunchAttempts: 3,
		Render: func(c *loomv1.Cluster, nodes []*loomv1.Node) (*loomv1.SlurmConfig, error) {
			var hosts []string
			for _, n := range nodes {
				hosts = append(hosts, n.GetHostname())
			}
			return &loomv1.SlurmConfig{SlurmConf: "Nodes=" + strings.Join(hosts, ","), GresConf: "gres", TopologyConf: "topo"}, nil
		},
	}
}

func newApp(t *testing.T, st *store.Store, p provider.Provider, c *clock) *App {
	t.Helper()
	a, err := New(context.Background(), Options{Store: st, Provider: p, Now: c.now, Params: params()})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func clusterSpec(name string, nodes int32) *loomv1.Cluster {
	return &loomv1.Cluster{Name: name, Compute: &loomv1.ComputeResources{NodePools: []*loomv1.NodePool{
		{Id: "gpu", MachineType: "a3-highgpu-8g", NodeCount: nodes}}}}
}

func create(t *testing.T, a *App, nodes int32) {
	t.Helper()
	if err := a.CreateCluster(context.Background(), "ev-create", &eventsv1.CreateCluster{Operation: "op1", Cluster: clusterSpec(demo, nodes)}); err != nil {
		t.Fatal(err)
	}
	if _, ok := a.Cluster(demo); !ok {
		t.Fatal("create failed")
	}
}

// createdOnRedis is an app on a real Redis store and a fake clock, with
// demo created (two nodes) and its first reconcile pass run: the nodes
// launched, none registered yet.
func createdOnRedis(t *testing.T) (*App, *store.Store, *clock) {
	t.Helper()
	_, rdb := testkit.Redis(t)
	st := store.New(rdb, "provisioner:")
	c := &clock{t: time.Now()}
	a := newApp(t, st, newFake(), c)
	create(t, a, 2)
	a.ReconcileOnce(context.Background())
	return a, st, c
}

func registerAll(t *testing.T, a *App) {
	t.Helper()
	for _, n := range a.Nodes("default", "demo") {
		if err := a.AgentRegistered(context.Background(), "reg-"+n.GetName(), &eventsv1.AgentRegistered{Node: n.GetName()}); err != nil {
			t.Fatal(err)
		}
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

func TestLaunchFailureBacksOffThenFailsAndReplaces(t *testing.T) {
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
	if n.GetState() != loomv1.Node_PROVISIONING || n.GetReason() != domain.LaunchReasonPrefix+"exec: agent: not found" ||
		n.GetNextAction() != "retry launch in 1s (attempt 2 of 3)" || n.GetLaunchAttempts() != 1 {
		t.Fatalf("node after a failed launch = %v", n)
	}
	a.ReconcileOnce(context.Background())
	if p.count(p.launches, name) != 1 {
		t.Fatalf("launched %d times within the backoff, want 1", p.count(p.launches, name))
	}
	c.add(time.Second)
	a.ReconcileOnce(context.Background())
	if p.count(p.launches, name) != 2 || node(a, "gpu-0001").GetNextAction() != "retry launch in 2s (attempt 3 of 3)" {
		t.Fatalf("second try: %d launches, node %v", p.count(p.launches, name), node(a, "gpu-0001"))
	}

	// The memory state is what Redis holds: a restarted App sees the same.
	b := newApp(t, st, p, c)
	if got, want := node(b, "gpu-0001"), node(a, "gpu-0001"); got.String() != want.String() {
		t.Fatalf("reloaded node = %v, want %v", got, want)
	}

	// The third failure: FAILED, replaced; the failed node is stopped and
	// cleaned up but stays on record while its pool is below target.
	c.add(2 * time.Second)
	a.ReconcileOnce(context.Background())
	if n := node(a, "gpu-0001"); n.GetState() != loomv1.Node_FAILED || !strings.HasPrefix(n.GetNextAction(), "replaced by gpu-0002") {
		t.Fatalf("node after the last attempt = %v", n)
	}
	p.launchErr = nil
	a.ReconcileOnce(context.Background())
	if !p.has(p.removed, name) || !p.has(p.running, demo+"/nodes/gpu-0002") || node(a, "gpu-0001") == nil {
		t.Fatalf("removed %v running %v nodes %v", p.removed, p.running, a.Nodes("-", "-"))
	}
	if p.count(p.launches, name) != 3 {
		t.Fatalf("a FAILED node was launched again (%d launches)", p.count(p.launches, name))
	}
	// Once the replacement is READY, the failed record goes.
	if err := a.AgentRegistered(context.Background(), "r2", &eventsv1.AgentRegistered{Node: demo + "/nodes/gpu-0002"}); err != nil {
		t.Fatal(err)
	}
	a.ReconcileOnce(context.Background())
	if node(a, "gpu-0001") != nil {
		t.Fatal("failed node still on record with its pool at target")
	}
	if cl, _ := a.Cluster(demo); cl.GetStatus().GetState() != loomv1.Cluster_RUNNING {
		t.Fatalf("cluster = %v", cl.GetStatus())
	}
}

// TestStartPassOncePerPass: the provider's once-a-pass work (the local
// provider loads the scripts its agents' Redis users run) is done once per
// pass, before the pass's launches, however many nodes the pass launches.
func TestStartPassOncePerPass(t *testing.T) {
	t.Parallel()
	_, rdb := testkit.Redis(t)
	st := store.New(rdb, "provisioner:")
	p, c := newFake(), &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	a := newApp(t, st, p, c)
	create(t, a, 3)
	a.ReconcileOnce(context.Background())
	a.ReconcileOnce(context.Background())
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.passes != 2 || len(p.launchesAtPass) != 2 || p.launchesAtPass[0] != 0 || p.launchesAtPass[1] != 3 {
		t.Fatalf("StartPass ran %d times, with %v launches before each; want 2, before each pass's 3 launches ([0 3])", p.passes, p.launchesAtPass)
	}
}

func TestLaunchedClearsTheReason(t *testing.T) {
	t.Parallel()
	_, rdb := testkit.Redis(t)
	p, c := newFake(), &clock{t: time.Now()}
	a := newApp(t, store.New(rdb, "provisioner:"), p, c)
	create(t, a, 1)
	p.launchErr = errors.New("boom")
	a.ReconcileOnce(context.Background())
	p.launchErr = nil
	c.add(time.Second)
	a.ReconcileOnce(context.Background())
	if n := node(a, "gpu-0001"); n.GetReason() != "" || !strings.Contains(n.GetNextAction(), "register") {
		t.Fatalf("reason not cleared after a launch: %v", n)
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
	if n := node(a, "gpu-0001"); !strings.Contains(n.GetReason(), "agent exited (exit status 1; log /x/agent.log) before it registered") ||
		n.GetLaunchAttempts() != 1 {
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
	before := p.count(p.launches, demo+"/nodes/gpu-0001")

	p.stopErr = errors.New("stuck")
	a.ReconcileOnce(context.Background())
	if cl, ok := a.Cluster(demo); !ok || cl.GetStatus().GetState() != loomv1.Cluster_DELETING || len(p.clusters) != 0 {
		t.Fatalf("cluster after a failed teardown = %v (exists %v), removed clusters %v", cl, ok, p.clusters)
	}
	// The delete says why it is not done yet (its operation's progress),
	// rather than "deleting" for as long as the provider fails.
	cl, _ := a.Cluster(demo)
	if msg := cl.GetStatus().GetMessage(); !strings.Contains(msg, "teardown attempt failed") ||
		!strings.Contains(msg, "could not stop gpu-0001: stuck") || !strings.Contains(msg, "and 1 more of its 2 nodes") {
		t.Fatalf("message after a failed teardown = %q, want what failed", msg)
	}
	p.stopErr = nil
	a.ReconcileOnce(context.Background())
	if _, ok := a.Cluster(demo); ok || len(a.Nodes("-", "-")) != 0 || !p.clusters["demo"] || len(p.removed) != 2 || len(p.running) != 0 {
		t.Fatalf("after teardown: nodes %v, removed %v, clusters %v, running %v", a.Nodes("-", "-"), p.removed, p.clusters, p.running)
	}
	if p.count(p.launches, demo+"/nodes/gpu-0001") != before {
		t.Fatal("a node of a deleting cluster was launched")
	}
	for _, key := range []string{adapters.KeyClusters, adapters.KeyNodes, adapters.KeySlurm} {
		if m, err := st.HGetAll(context.Background(), key); err != nil || len(m) != 0 {
			t.Fatalf("%s records left: %v, %v", key, m, err)
		}
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
	// create: ClusterChanged + 2 NodeChanged; registration: ClusterChanged + NodeChanged.
	if err != nil || n != 5 {
		t.Fatalf("outbox = %d, %v; want 5", n, err)
	}
}

func TestShrinkStopsAndRemovesDrainedNodes(t *testing.T) {
	t.Parallel()
	_, rdb := testkit.Redis(t)
	st := store.New(rdb, "provisioner:")
	p, c := newFake(), &clock{t: time.Now()}
	a := newApp(t, st, p, c)
	ctx := context.Background()
	create(t, a, 3)
	a.ReconcileOnce(ctx)
	registerAll(t, a)
	if err := a.UpdateCluster(ctx, "ev-up", &eventsv1.UpdateCluster{Operation: "up", Cluster: clusterSpec(demo, 1), DrainGraceSeconds: 30}); err != nil {
		t.Fatal(err)
	}
	a.ReconcileOnce(ctx)
	// Draining nodes keep running until the scheduler says they are drained.
	for _, h := range []string{"gpu-0002", "gpu-0003"} {
		if n := node(a, h); n.GetState() != loomv1.Node_DRAINING || !p.has(p.running, n.GetName()) {
			t.Fatalf("%s = %v, running %v", h, n, p.running)
		}
	}
	for _, h := range []string{"gpu-0002", "gpu-0003"} {
		if err := a.NodeDrained(ctx, "drained-"+h, &eventsv1.NodeDrained{Node: demo + "/nodes/" + h, Cluster: demo}); err != nil {
			t.Fatal(err)
		}
	}
	// A provider that fails to stop a drained node: the update waits for
	// it (no deadline applies) and says why, rather than "2 draining".
	p.stopErr = errors.New("stuck")
	a.ReconcileOnce(ctx)
	if cl, _ := a.Cluster(demo); cl.GetStatus().GetState() != loomv1.Cluster_UPDATING ||
		!strings.Contains(cl.GetStatus().GetMessage(), "removing gpu-0002 failed, retrying: could not stop gpu-0002: stuck (and 1 more)") {
		t.Fatalf("update while removals fail = %v, want its message to say why", cl.GetStatus())
	}
	if n := node(a, "gpu-0003"); !strings.Contains(n.GetNextAction(), "the last attempt failed, retrying: could not stop gpu-0003: stuck") {
		t.Fatalf("gpu-0003's next action = %q", n.GetNextAction())
	}
	p.stopErr = nil
	a.ReconcileOnce(ctx)
	if got := a.Nodes("default", "demo"); len(got) != 1 || got[0].GetHostname() != "gpu-0001" {
		t.Fatalf("nodes after the shrink = %v", got)
	}
	if p.has(p.running, demo+"/nodes/gpu-0003") || !p.has(p.removed, demo+"/nodes/gpu-0003") {
		t.Fatalf("drained node not stopped and removed: running %v removed %v", p.running, p.removed)
	}
	cl, _ := a.Cluster(demo)
	if cl.GetStatus().GetState() != loomv1.Cluster_RUNNING || cl.GetStatus().GetTotalNodes() != 1 {
		t.Fatalf("cluster = %v", cl.GetStatus())
	}
	// The capacity is released: the pool claims one node.
	for _, cp := range a.Capacity("default") {
		if cp.GetMachineType() == "a3-highgpu-8g" && cp.GetInUse() != 1 {
			t.Fatalf("capacity = %v", cp)
		}
	}
}

func TestProviderEventsAreAppliedOnce(t *testing.T) {
	t.Parallel()
	_, rdb := testkit.Redis(t)
	st := store.New(rdb, "provisioner:")
	p, c := newFake(), &clock{t: time.Now()}
	a := newApp(t, st, p, c)
	ctx := context.Background()
	create(t, a, 1)
	registerAll(t, a)

	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.WatchProvider(wctx) }()
	ev := provider.Event{Node: demo + "/nodes/gpu-0001", Kind: provider.Preempted, Reason: "preempted by provider", At: c.now()}
	p.events <- ev
	testkit.WaitFor(t, 10*time.Second, "the preemption applied", func() (bool, error) {
		n := node(a, "gpu-0001")
		return n.GetState() == loomv1.Node_FAILED && node(a, "gpu-0002") != nil, nil
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	before, _ := st.OutboxLen(ctx)
	if err := a.ProviderEvent(ctx, ev); err != nil {
		t.Fatal(err)
	}
	if after, _ := st.OutboxLen(ctx); after != before {
		t.Fatalf("the same provider event applied twice: outbox %d → %d", before, after)
	}
	// The replacement is launched by the next pass; the preempted node is cleaned up.
	a.ReconcileOnce(ctx)
	if !p.has(p.running, demo+"/nodes/gpu-0002") || !p.has(p.removed, demo+"/nodes/gpu-0001") {
		t.Fatalf("running %v removed %v", p.running, p.removed)
	}
}

func TestBootTimeoutThroughTheReconciler(t *testing.T) {
	t.Parallel()
	_, rdb := testkit.Redis(t)
	p, c := newFake(), &clock{t: time.Now()}
	a := newApp(t, store.New(rdb, "provisioner:"), p, c)
	create(t, a, 1)
	a.ReconcileOnce(context.Background())
	c.add(10 * time.Minute)
	a.ReconcileOnce(context.Background())
	if n := node(a, "gpu-0001"); n.GetState() != loomv1.Node_FAILED || !strings.Contains(n.GetReason(), "boot timeout") {
		t.Fatalf("node = %v", n)
	}
	if !p.has(p.running, demo+"/nodes/gpu-0002") {
		t.Fatalf("replacement not launched: %v", p.running)
	}
}

func TestPrepareGetsTheSlurmFiles(t *testing.T) {
	t.Parallel()
	_, rdb := testkit.Redis(t)
	p, c := newFake(), &clock{t: time.Now()}
	a := newApp(t, store.New(rdb, "provisioner:"), p, c)
	create(t, a, 2)
	a.ReconcileOnce(context.Background())
	p.mu.Lock()
	setup := p.setups[demo]
	p.mu.Unlock()
	if setup.HomeDir != "/data/clusters/demo/home" || setup.ScratchDir != "/data/clusters/demo/scratch" ||
		string(setup.Files[SlurmConfFile]) != "Nodes=gpu-0001,gpu-0002" || string(setup.Files[TopologyConfFile]) != "topo" {
		t.Fatalf("setup = %+v", setup)
	}
	cfg, cond, ok := a.SlurmConfig(demo)
	if !ok || cfg.GetSlurmConf() != "Nodes=gpu-0001,gpu-0002" || cond.GetStatus() != "True" {
		t.Fatalf("SlurmConfig = %v, %v, %v", cfg, cond, ok)
	}
	if _, _, ok := a.SlurmConfig("projects/default/clusters/nope"); ok {
		t.Fatal("SlurmConfig of a missing cluster")
	}
}

func TestReservationReads(t *testing.T) {
	t.Parallel()
	_, rdb := testkit.Redis(t)
	st := store.New(rdb, "provisioner:")
	a := newApp(t, st, newFake(), &clock{t: time.Now()})
	ctx := context.Background()
	for _, r := range []string{"projects/default/reservations/r1", "projects/other/reservations/r2"} {
		if err := a.CreateReservation(ctx, "ev-"+r, &eventsv1.CreateReservation{Operation: "op", Reservation: &loomv1.Reservation{
			Name: r, Zone: "us-central1-a", MachineType: "a3-highgpu-8g", Count: 4}}); err != nil {
			t.Fatal(err)
		}
	}
	c := clusterSpec(demo, 3)
	c.Compute.NodePools[0].Capacity = &loomv1.CapacitySource{Type: loomv1.CapacitySource_RESERVATION, Reservation: "r1"}
	if err := a.CreateCluster(ctx, "ev-c", &eventsv1.CreateCluster{Operation: "op1", Cluster: c}); err != nil {
		t.Fatal(err)
	}
	if r, ok := a.Reservation("projects/default/reservations/r1"); !ok || r.GetInUse() != 3 || len(r.GetConsumers()) != 1 {
		t.Fatalf("reservation = %v", r)
	}
	if l := a.Reservations("default"); len(l) != 1 {
		t.Fatalf("reservations of default = %v", l)
	}
	if l := a.Reservations("-"); len(l) != 2 {
		t.Fatalf("all reservations = %v", l)
	}
	var res *loomv1.CapacityPool
	for _, cp := range a.Capacity("default") {
		if cp.GetType() == loomv1.CapacitySource_RESERVATION {
			if res != nil {
				t.Fatalf("another project's reservation listed: %v", cp)
			}
			res = cp
		}
	}
	if res.GetTotal() != 4 || res.GetInUse() != 3 || res.GetFree() != 1 {
		t.Fatalf("reservation pool = %v", res)
	}
	// Reservations survive a restart.
	b := newApp(t, st, newFake(), &clock{t: time.Now()})
	if r, ok := b.Reservation("projects/default/reservations/r1"); !ok || r.GetInUse() != 3 {
		t.Fatalf("reloaded reservation = %v", r)
	}
}

// Fault injection: a CreateCluster whose Apply ran in Redis but whose answer
// was lost. Before the driver the provisioner's memory lacked the cluster
// until a restart and the redelivered command was dropped as seen; now memory
// holds what Redis holds at once, and the redelivery changes nothing.
func TestApplyWithLostAnswerLeavesMemoryAsRedis(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, rdb := testkit.Redis(t)
	lost := storetest.LoseApplyReplies(rdb, "provisioner:")
	st := store.New(rdb, "provisioner:")
	c := &clock{t: time.Now()}
	a := newApp(t, st, newFake(), c)
	cmd := &eventsv1.CreateCluster{Operation: "op1", Cluster: clusterSpec(demo, 2)}
	lost.Arm(1)
	if err := a.CreateCluster(ctx, "ev-create", cmd); !store.OutcomeUnknown(err) {
		t.Fatalf("CreateCluster with a lost answer = %v, want the outcome unknown", err)
	}
	fromRedis := newApp(t, st, newFake(), c)
	want, ok := fromRedis.Cluster(demo)
	if !ok {
		t.Fatal("the script did not run: Redis lacks the cluster")
	}
	got, ok := a.Cluster(demo)
	if !ok || !proto.Equal(got, want) {
		t.Fatalf("memory has %v, Redis %v", got, want)
	}
	if g, w := a.Nodes("default", "demo"), fromRedis.Nodes("default", "demo"); len(g) != 2 || len(g) != len(w) ||
		!proto.Equal(g[0], w[0]) || !proto.Equal(g[1], w[1]) {
		t.Fatalf("memory has nodes %v, Redis %v", g, w)
	}
	if err := a.CreateCluster(ctx, "ev-create", cmd); err != nil { // the redelivery
		t.Fatal(err)
	}
	if n, err := st.OutboxLen(ctx); err != nil || n != 3 {
		t.Fatalf("outbox = %d, %v; want 3 (ClusterChanged + 2 NodeChanged, once)", n, err)
	}
	registerAll(t, a)
	if n := node(a, "gpu-0001"); n.GetState() != loomv1.Node_READY {
		t.Fatalf("node after registration: %v, want READY", n.GetState())
	}
}

// batchProvider is fakeProvider that removes nodes in batches
// (provider.BatchRemover), as the local provider does, recording each
// batch and failing the nodes in fail.
type batchProvider struct {
	*fakeProvider
	batches [][]string
	fail    map[string]bool
}

func (b *batchProvider) RemoveNodes(_ context.Context, nodes []provider.Node) []error {
	b.mu.Lock()
	defer b.mu.Unlock()
	var names []string
	errs := make([]error, len(nodes))
	for i, n := range nodes {
		names = append(names, n.Hostname)
		if b.fail[n.Hostname] || b.fail[n.Name] {
			errs[i] = errors.New("redis: connection refused")
			continue
		}
		b.removed[n.Name] = true
	}
	b.batches = append(b.batches, names)
	return errs
}

// Remove is a batch of one.
func (b *batchProvider) Remove(ctx context.Context, n provider.Node) error {
	return b.RemoveNodes(ctx, []provider.Node{n})[0]
}

// takeBatches returns the batches removed since the last call.
func (b *batchProvider) takeBatches() [][]string {
	b.mu.Lock()
	defer b.mu.Unlock()
	got := b.batches
	b.batches = nil
	return got
}

// TestRemovalsOfAPassAreOneBatch: the nodes a pass retires (a shrink's
// drained nodes), and a deleted cluster's nodes, are removed with one
// RemoveNodes (the local provider walks Redis's keyspace once for their
// agents' keys, where a Remove each walked it once per node: minutes for a
// 1,000-node cluster among 200,000 keys). A node whose removal failed
// keeps its record, says why, and is removed at the next pass, alone;
// the others are gone at once.
func TestRemovalsOfAPassAreOneBatch(t *testing.T) {
	t.Parallel()
	_, rdb := testkit.Redis(t)
	st := store.New(rdb, "provisioner:")
	p := &batchProvider{fakeProvider: newFake(), fail: map[string]bool{"gpu-0005": true}}
	a := newApp(t, st, p, &clock{t: time.Now()})
	ctx := context.Background()
	create(t, a, 6)
	a.ReconcileOnce(ctx)
	registerAll(t, a)
	if err := a.UpdateCluster(ctx, "ev-up", &eventsv1.UpdateCluster{Operation: "up", Cluster: clusterSpec(demo, 2), DrainGraceSeconds: 30}); err != nil {
		t.Fatal(err)
	}
	a.ReconcileOnce(ctx)
	for _, h := range []string{"gpu-0003", "gpu-0004", "gpu-0005", "gpu-0006"} {
		if err := a.NodeDrained(ctx, "drained-"+h, &eventsv1.NodeDrained{Node: demo + "/nodes/" + h, Cluster: demo}); err != nil {
			t.Fatal(err)
		}
	}
	p.takeBatches()
	a.ReconcileOnce(ctx)
	if got := p.takeBatches(); len(got) != 1 || strings.Join(got[0], ",") != "gpu-0003,gpu-0004,gpu-0005,gpu-0006" {
		t.Fatalf("a pass retiring 4 drained nodes removed %v; want them in one batch", got)
	}
	var hosts []string
	for _, n := range a.Nodes("default", "demo") {
		hosts = append(hosts, n.GetHostname())
	}
	if strings.Join(hosts, ",") != "gpu-0001,gpu-0002,gpu-0005" {
		t.Fatalf("nodes after the pass = %v; want the 2 kept and gpu-0005, whose removal failed", hosts)
	}
	if n := node(a, "gpu-0005"); !strings.Contains(n.GetNextAction(), "could not remove gpu-0005: redis: connection refused") {
		t.Fatalf("gpu-0005's next action = %q; want why its removal failed", n.GetNextAction())
	}
	p.mu.Lock()
	p.fail = nil
	p.mu.Unlock()
	a.ReconcileOnce(ctx)
	if got := p.takeBatches(); len(got) != 1 || strings.Join(got[0], ",") != "gpu-0005" {
		t.Fatalf("the next pass removed %v; want gpu-0005 again", got)
	}
	if cl, _ := a.Cluster(demo); cl.GetStatus().GetState() != loomv1.Cluster_RUNNING || len(a.Nodes("default", "demo")) != 2 {
		t.Fatalf("after the shrink: %v, nodes %v", cl.GetStatus(), a.Nodes("default", "demo"))
	}

	if err := a.DeleteCluster(ctx, "ev-del", &eventsv1.DeleteCluster{Operation: "del", Cluster: demo}); err != nil {
		t.Fatal(err)
	}
	a.ReconcileOnce(ctx)
	if got := p.takeBatches(); len(got) != 1 || strings.Join(got[0], ",") != "gpu-0001,gpu-0002" {
		t.Fatalf("the delete removed %v; want the cluster's nodes in one batch", got)
	}
	if _, ok := a.Cluster(demo); ok || !p.clusters["demo"] {
		t.Fatalf("the cluster is left after its teardown (removed clusters %v)", p.clusters)
	}
}

// TestTeardownsOfAPassAreOneBatch: clusters deleted together are torn down
// with one removal of all their nodes (one keyspace walk with the local
// provider, not one per cluster), and each node's outcome goes back to its
// own cluster: a node that could not be removed keeps its cluster (retried
// at the next pass), and the other cluster is deleted.
func TestTeardownsOfAPassAreOneBatch(t *testing.T) {
	t.Parallel()
	_, rdb := testkit.Redis(t)
	st := store.New(rdb, "provisioner:")
	p := &batchProvider{fakeProvider: newFake(), fail: map[string]bool{}}
	a := newApp(t, st, p, &clock{t: time.Now()})
	ctx := context.Background()
	const other = "projects/default/clusters/other"
	create(t, a, 2)
	if err := a.CreateCluster(ctx, "ev-create-other", &eventsv1.CreateCluster{Operation: "op2", Cluster: clusterSpec(other, 2)}); err != nil {
		t.Fatal(err)
	}
	a.ReconcileOnce(ctx)
	for _, c := range []string{demo, other} {
		if err := a.DeleteCluster(ctx, "ev-del-"+c, &eventsv1.DeleteCluster{Operation: "del-" + c, Cluster: c}); err != nil {
			t.Fatal(err)
		}
	}
	failing := a.Nodes("default", "other")[1]
	p.mu.Lock()
	p.fail = map[string]bool{failing.GetName(): true} // by name: both clusters have a gpu-0002
	p.mu.Unlock()
	p.takeBatches()
	a.ReconcileOnce(ctx)
	got := p.takeBatches()
	if len(got) != 1 || len(got[0]) != 4 {
		t.Fatalf("a pass deleting 2 clusters of 2 nodes removed %v; want the 4 nodes in one batch", got)
	}
	if _, ok := a.Cluster(demo); ok {
		t.Fatalf("%s is left though all its nodes were removed", demo)
	}
	if cl, ok := a.Cluster(other); !ok || !strings.Contains(cl.GetStatus().GetMessage(), "could not remove "+failing.GetHostname()) {
		t.Fatalf("%s after its node %s failed removal: %v (present %v)", other, failing.GetName(), cl.GetStatus(), ok)
	}
	p.mu.Lock()
	p.fail = nil
	p.mu.Unlock()
	a.ReconcileOnce(ctx)
	if _, ok := a.Cluster(other); ok {
		t.Fatalf("%s is left after the retry", other)
	}
}
