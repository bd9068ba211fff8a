package app

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/store"
	"github.com/loom-ml/loom/libs/testkit"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/provisioner/internal/domain"
	"github.com/loom-ml/loom/services/provisioner/internal/provider"
)

// repairCall is one Repair the fake provider was asked for.
type repairCall struct {
	node, bootID string
	kind         provider.RepairKind
}

// repairer is the fake provider with repairs: each boot id boots once
// (Started), as the real providers are idempotent per boot id. expect is
// what it says each kind of boot takes; after, when set, runs after each
// call (a test's crash point).
type repairer struct {
	*fakeProvider
	calls  []repairCall
	booted map[string]string // node → boot id
	expect map[provider.RepairKind]time.Duration
	after  func(repairCall)
	// afterRemove, when set, runs after each Remove.
	afterRemove func(node string)
}

// runningRepairer is where the repair tests start: an app over a real
// Redis whose provider is a repairer, with a 2-node cluster created,
// reconciled and its agents registered.
func runningRepairer(t *testing.T) (*App, *store.Store, *repairer, *clock) {
	t.Helper()
	_, rdb := testkit.Redis(t)
	st := store.New(rdb, "provisioner:")
	p, c := newRepairer(), &clock{t: time.Now()}
	a := newApp(t, st, p, c)
	create(t, a, 2)
	a.ReconcileOnce(context.Background())
	registerAll(t, a)
	return a, st, p, c
}

func newRepairer() *repairer {
	return &repairer{fakeProvider: newFake(), booted: map[string]string{}, expect: map[provider.RepairKind]time.Duration{}}
}

func (r *repairer) Repair(_ context.Context, n provider.Node, kind provider.RepairKind, bootID string) (provider.Launched, error) {
	r.mu.Lock()
	c := repairCall{node: n.Name, bootID: bootID, kind: kind}
	r.calls = append(r.calls, c)
	started := r.booted[n.Name] != bootID
	r.booted[n.Name] = bootID
	r.running[n.Name] = true
	l := provider.Launched{PID: 7, Started: started, Expect: r.expect[kind]}
	after := r.after
	r.mu.Unlock()
	if after != nil {
		after(c)
	}
	return l, nil
}

func (r *repairer) Remove(ctx context.Context, n provider.Node) error {
	err := r.fakeProvider.Remove(ctx, n)
	r.mu.Lock()
	after := r.afterRemove
	r.mu.Unlock()
	if after != nil {
		after(n.Name)
	}
	return err
}

func (r *repairer) repairCalls() []repairCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]repairCall(nil), r.calls...)
}

// remediationsFinished reads the RemediationFinished events in st's outbox.
func remediationsFinished(t *testing.T, st *store.Store) []*eventsv1.RemediationFinished {
	t.Helper()
	return outboxOf(t, st, func() *eventsv1.RemediationFinished { return &eventsv1.RemediationFinished{} })
}

// outboxOf returns the events of mk's type in st's outbox, in order.
func outboxOf[T proto.Message](t *testing.T, st *store.Store, mk func() T) []T {
	t.Helper()
	entries, err := st.Client().XRange(context.Background(), st.Key("outbox"), "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	typ := envelope.TypeOf(mk())
	var out []T
	for _, e := range entries {
		h, _ := e.Values["h"].(string)
		v, _ := e.Values["v"].(string)
		if !strings.Contains(h, typ) {
			continue
		}
		f := mk()
		if err := proto.Unmarshal([]byte(v), f); err != nil {
			t.Fatal(err)
		}
		out = append(out, f)
	}
	return out
}

func remediate(t *testing.T, a *App, id, host string, action loomv1.RemediationAction) {
	t.Helper()
	if err := a.RemediateNode(context.Background(), id, &eventsv1.RemediateNode{Node: demo + "/nodes/" + host, Cluster: demo,
		Action: action, RemediationId: "rem-" + id, Reason: "Xid 79"}); err != nil {
		t.Fatal(err)
	}
}

func repairOf(a *App, node string) *domain.Repair {
	a.mu.RLock()
	defer a.mu.RUnlock()
	if r := a.st.Repairs[node]; r != nil {
		c := *r
		return &c
	}
	return nil
}

func TestRebootThroughTheReconciler(t *testing.T) {
	t.Parallel()
	a, st, p, _ := runningRepairer(t)
	ctx := context.Background()
	name := demo + "/nodes/gpu-0001"
	launches := p.count(p.launches, name)

	remediate(t, a, "ev-1", "gpu-0001", loomv1.RemediationAction_ACTION_REBOOT)
	before, _ := st.OutboxLen(ctx)
	remediate(t, a, "ev-1", "gpu-0001", loomv1.RemediationAction_ACTION_REBOOT) // redelivered
	if after, _ := st.OutboxLen(ctx); after != before || node(a, "gpu-0001").GetState() != loomv1.Node_REBOOTING {
		t.Fatalf("redelivery: outbox %d → %d, node %v", before, after, node(a, "gpu-0001"))
	}
	r := repairOf(a, name)
	a.ReconcileOnce(ctx)
	calls := p.repairCalls()
	if len(calls) != 1 || calls[0] != (repairCall{node: name, bootID: r.BootID, kind: provider.Reboot}) || len(r.BootID) != 32 {
		t.Fatalf("repair calls %+v, repair %+v", calls, r)
	}
	if p.count(p.launches, name) != launches {
		t.Fatal("a node being rebooted was launched the ordinary way")
	}
	if r := repairOf(a, name); r.Phase != domain.RepairBooting || r.PID != 7 {
		t.Fatalf("repair after the pass = %+v", r)
	}
	// While it waits for the agent, a pass only makes sure it runs.
	a.ReconcileOnce(ctx)
	if n := len(p.repairCalls()); n != 2 {
		t.Fatalf("%d repair calls, want 2", n)
	}
	if err := a.AgentRegistered(ctx, "reg-2", &eventsv1.AgentRegistered{Node: name, HostBootId: r.BootID}); err != nil {
		t.Fatal(err)
	}
	fs := remediationsFinished(t, st)
	if n := node(a, "gpu-0001"); n.GetState() != loomv1.Node_READY || len(fs) != 1 || !fs[0].GetOk() || fs[0].GetRemediationId() != "rem-ev-1" {
		t.Fatalf("node %v, finished %v", n, fs)
	}
	if m, _ := st.HGetAll(ctx, "repairs"); len(m) != 0 {
		t.Fatalf("repair records left: %v", m)
	}
	// Back to the ordinary way.
	a.ReconcileOnce(ctx)
	if n := len(p.repairCalls()); n != 2 {
		t.Fatalf("a finished repair was carried out again (%d calls)", n)
	}
}

// TestAgentRegistersBeforeItsBootIsRecorded: the new boot's agent can
// register while the provider's call is still returning, before the pass
// records the boot. The repair ends there, and the boot recorded after it
// changes nothing (before, the registration was dropped and the node stayed
// REBOOTING until its deadline, heartbeating).
func TestAgentRegistersBeforeItsBootIsRecorded(t *testing.T) {
	t.Parallel()
	a, st, p, _ := runningRepairer(t)
	ctx := context.Background()
	name := demo + "/nodes/gpu-0001"
	p.after = func(rc repairCall) {
		if err := a.AgentRegistered(ctx, "reg-fast", &eventsv1.AgentRegistered{Node: rc.node, HostBootId: rc.bootID}); err != nil {
			t.Error(err)
		}
	}
	remediate(t, a, "ev-1", "gpu-0001", loomv1.RemediationAction_ACTION_REBOOT)
	a.ReconcileOnce(ctx)
	fs := remediationsFinished(t, st)
	if n := node(a, "gpu-0001"); n.GetState() != loomv1.Node_READY || len(fs) != 1 || !fs[0].GetOk() || repairOf(a, name) != nil {
		t.Fatalf("node %v, finished %v, repair %+v", n, fs, repairOf(a, name))
	}
	if m, _ := st.HGetAll(ctx, "repairs"); len(m) != 0 {
		t.Fatalf("repair records left: %v", m)
	}
}

// TestRepairResumesAfterACrash: a provisioner that dies at any point of a
// repair (before the provider acts, after it acted but before that was
// recorded, between retiring a replaced node and swapping the records)
// resumes it after a restart with the same boot id, and it finishes once.
func TestRepairResumesAfterACrash(t *testing.T) {
	t.Parallel()
	a, st, p, c := runningRepairer(t)
	reimaged, replaced := demo+"/nodes/gpu-0001", demo+"/nodes/gpu-0002"

	// Reimage: the provider acts, and the provisioner dies before it records that.
	remediate(t, a, "ev-1", "gpu-0001", loomv1.RemediationAction_ACTION_REIMAGE)
	boot := repairOf(a, reimaged).BootID
	crash, die := context.WithCancel(context.Background())
	p.mu.Lock()
	p.after = func(repairCall) { die() }
	p.mu.Unlock()
	a.ReconcileOnce(crash)
	if r := repairOf(a, reimaged); r.Phase != domain.RepairRequested {
		t.Fatalf("the boot was recorded despite the crash: %+v", r)
	}
	p.mu.Lock()
	p.after = nil
	p.mu.Unlock()
	b := newApp(t, st, p, c) // the restarted provisioner
	b.ReconcileOnce(context.Background())
	calls := p.repairCalls()
	if len(calls) != 2 || calls[0].bootID != boot || calls[1].bootID != boot || calls[1].kind != provider.Reimage {
		t.Fatalf("calls %+v, want twice the boot %s", calls, boot)
	}
	if r := repairOf(b, reimaged); r.Phase != domain.RepairBooting {
		t.Fatalf("repair after the restart = %+v", r)
	}

	// Replace: the old node is retired, and the provisioner dies before the swap.
	remediate(t, b, "ev-2", "gpu-0002", loomv1.RemediationAction_ACTION_REPLACE)
	crash, die = context.WithCancel(context.Background())
	p.mu.Lock()
	p.afterRemove = func(string) { die() }
	p.mu.Unlock()
	b.ReconcileOnce(crash)
	if n := node(b, "gpu-0002"); n.GetState() != loomv1.Node_REPLACING || !p.has(p.removed, replaced) {
		t.Fatalf("old node %v, removed %v", n, p.removed)
	}
	p.mu.Lock()
	p.afterRemove = nil
	p.mu.Unlock()
	d := newApp(t, st, p, c)
	d.ReconcileOnce(context.Background()) // retires it again (idempotent), swaps
	d.ReconcileOnce(context.Background()) // boots the replacement
	r := repairOf(d, replaced)
	if node(d, "gpu-0002") != nil || node(d, "gpu-0003").GetState() != loomv1.Node_PROVISIONING || node(d, "gpu-0004") != nil ||
		r.Phase != domain.RepairBooting || r.Target != demo+"/nodes/gpu-0003" {
		t.Fatalf("nodes %v, repair %+v", d.Nodes("-", "-"), r)
	}
	for _, ev := range []*eventsv1.AgentRegistered{{Node: reimaged, HostBootId: boot}, {Node: r.Target, HostBootId: r.BootID}} {
		if err := d.AgentRegistered(context.Background(), "reboot-reg-"+ev.GetNode(), ev); err != nil {
			t.Fatal(err)
		}
	}
	fs := remediationsFinished(t, st)
	if len(fs) != 2 || !fs[0].GetOk() || !fs[1].GetOk() || fs[1].GetReplacement() != r.Target || fs[1].GetNode() != replaced {
		t.Fatalf("finished = %v", fs)
	}
	cl, _ := d.Cluster(demo)
	if cl.GetStatus().GetReadyNodes() != 2 || cl.GetStatus().GetTotalNodes() != 2 || len(d.Nodes("-", "-")) != 2 {
		t.Fatalf("cluster %v, nodes %v", cl.GetStatus(), d.Nodes("-", "-"))
	}
	for _, cp := range d.Capacity("default") {
		if cp.GetMachineType() == "a3-highgpu-8g" && cp.GetInUse() != 2 {
			t.Fatalf("capacity = %v", cp)
		}
	}
}

// TestRepairDeadlineOnTheFakeClock: a replacement the provider says takes
// an hour (the sim's default) is not failed by the ten-minute boot
// timeout, but is an hour and ten minutes after it booted.
func TestRepairDeadlineOnTheFakeClock(t *testing.T) {
	t.Parallel()
	_, rdb := testkit.Redis(t)
	st := store.New(rdb, "provisioner:")
	p, c := newRepairer(), &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	p.expect[provider.Replace] = time.Hour
	a := newApp(t, st, p, c)
	ctx := context.Background()
	create(t, a, 2)
	a.ReconcileOnce(ctx)
	registerAll(t, a)
	remediate(t, a, "ev-1", "gpu-0002", loomv1.RemediationAction_ACTION_REPLACE)
	a.ReconcileOnce(ctx)
	a.ReconcileOnce(ctx)
	if r := repairOf(a, demo+"/nodes/gpu-0002"); r == nil || r.Phase != domain.RepairBooting || !r.Deadline.Equal(c.now().Add(70*time.Minute)) {
		t.Fatalf("repair = %+v", r)
	}
	// Health is told each phase's deadline, so that it waits for the
	// hour-long replacement: 10m (the boot timeout) when accepted and when
	// swapped, 70m (the provider's hour and the boot timeout) once booted.
	var ins []time.Duration
	for _, p := range outboxOf(t, st, func() *eventsv1.RemediationProgress { return &eventsv1.RemediationProgress{} }) {
		if p.GetRemediationId() != "rem-ev-1" || p.GetNode() != demo+"/nodes/gpu-0002" || p.GetAction() != loomv1.RemediationAction_ACTION_REPLACE {
			t.Fatalf("progress %v", p)
		}
		ins = append(ins, p.GetDeadlineIn().AsDuration())
	}
	if !slices.Equal(ins, []time.Duration{10 * time.Minute, 10 * time.Minute, 70 * time.Minute}) {
		t.Fatalf("RemediationProgress deadlines %v, want 10m, 10m, 70m", ins)
	}
	c.add(69 * time.Minute)
	a.ReconcileOnce(ctx)
	if n := node(a, "gpu-0003"); n.GetState() != loomv1.Node_PROVISIONING || len(remediationsFinished(t, st)) != 0 {
		t.Fatalf("replacement before its deadline = %v", n)
	}
	c.add(time.Minute)
	a.ReconcileOnce(ctx)
	fs := remediationsFinished(t, st)
	if n := node(a, "gpu-0003"); n.GetState() != loomv1.Node_FAILED || len(fs) != 1 || fs[0].GetOk() ||
		!strings.Contains(fs[0].GetMessage(), "replace of gpu-0003 failed: its agent did not register") {
		t.Fatalf("node %v, finished %v", n, fs)
	}
	// The failed replacement is replaced in turn, the ordinary way.
	if !p.has(p.running, demo+"/nodes/gpu-0004") {
		t.Fatalf("running %v", p.running)
	}
}

// batchRepairer is the repairer that removes nodes in batches
// (provider.BatchRemover), as the local provider does: Repair is the
// repairer's, the rest (the recorded batches) batchProvider's, over one
// fakeProvider.
type batchRepairer struct {
	*batchProvider
	r *repairer
}

func (p *batchRepairer) Repair(ctx context.Context, n provider.Node, kind provider.RepairKind, bootID string) (provider.Launched, error) {
	return p.r.Repair(ctx, n, kind, bootID)
}

// TestReplaceRetireAndTeardownOfAPassAreOneBatch: a pass that replaces a
// node (its old node retired), retires drained nodes and tears a cluster
// down removes all their nodes with one RemoveNodes: the local provider
// walks Redis's keyspace once per RemoveNodes, and such a pass walked it
// three times (the replace's old node had a Remove of its own, and the
// retired and the torn-down nodes a batch each). Each node's outcome still
// goes where it belongs: the replace swaps, the drained nodes' records go,
// the deleted cluster goes.
func TestReplaceRetireAndTeardownOfAPassAreOneBatch(t *testing.T) {
	t.Parallel()
	_, rdb := testkit.Redis(t)
	st := store.New(rdb, "provisioner:")
	r := newRepairer()
	p := &batchRepairer{batchProvider: &batchProvider{fakeProvider: r.fakeProvider, fail: map[string]bool{}}, r: r}
	a := newApp(t, st, p, &clock{t: time.Now()})
	ctx := context.Background()
	const other = "projects/default/clusters/other"
	create(t, a, 4)
	if err := a.CreateCluster(ctx, "ev-create-other", &eventsv1.CreateCluster{Operation: "op2", Cluster: clusterSpec(other, 2)}); err != nil {
		t.Fatal(err)
	}
	a.ReconcileOnce(ctx)
	registerAll(t, a)
	if err := a.UpdateCluster(ctx, "ev-up", &eventsv1.UpdateCluster{Operation: "up", Cluster: clusterSpec(demo, 2), DrainGraceSeconds: 30}); err != nil {
		t.Fatal(err)
	}
	a.ReconcileOnce(ctx)
	for _, h := range []string{"gpu-0003", "gpu-0004"} {
		if err := a.NodeDrained(ctx, "drained-"+h, &eventsv1.NodeDrained{Node: demo + "/nodes/" + h, Cluster: demo}); err != nil {
			t.Fatal(err)
		}
	}
	remediate(t, a, "replace", "gpu-0001", loomv1.RemediationAction_ACTION_REPLACE)
	if err := a.DeleteCluster(ctx, "ev-del-other", &eventsv1.DeleteCluster{Operation: "del-other", Cluster: other}); err != nil {
		t.Fatal(err)
	}
	p.takeBatches()
	a.ReconcileOnce(ctx)
	got := p.takeBatches()
	var names []string
	for _, b := range got {
		names = append(names, strings.Join(b, ","))
	}
	if len(got) != 1 || len(got[0]) != 5 {
		t.Fatalf("a pass replacing 1 node, retiring 2 and deleting a 2-node cluster removed %d batches %q; want its 5 nodes in one", len(got), names)
	}
	slices.Sort(got[0])
	if want := "gpu-0001,gpu-0001,gpu-0002,gpu-0003,gpu-0004"; strings.Join(got[0], ",") != want {
		t.Fatalf("the pass removed %v; want %s (demo's gpu-0001, 0003 and 0004, other's gpu-0001 and 0002)", got[0], want)
	}
	if rp := repairOf(a, demo+"/nodes/gpu-0001"); rp == nil || rp.Phase != domain.RepairSwapped {
		t.Fatalf("the replace after the pass: %+v; want it swapped", rp)
	}
	var hosts []string
	for _, n := range a.Nodes("default", "demo") {
		hosts = append(hosts, n.GetHostname())
	}
	if strings.Join(hosts, ",") != "gpu-0002,gpu-0005" {
		t.Fatalf("demo's nodes after the pass = %v; want gpu-0002 and gpu-0005, gpu-0001's replacement", hosts)
	}
	if _, ok := a.Cluster(other); ok {
		t.Fatalf("%s is left after its teardown", other)
	}
}
