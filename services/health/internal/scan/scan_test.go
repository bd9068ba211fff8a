package scan

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/errs"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

const cluster = "projects/p/clusters/c"

var t0 = time.Date(2026, 12, 2, 4, 0, 0, 0, time.UTC)

func nodeName(h string) string { return cluster + "/nodes/" + h }

// fixture is a state with nodes, fed events the way the app feeds them.
type fixture struct {
	t   *testing.T
	s   *State
	now time.Time
	// emits collects the RunHealthCheck commands not answered yet.
	emits []*eventsv1.RunHealthCheck
	// verdicts collects every verdict.
	verdicts []*loomv1.HealthCheckResult
	n        int
}

func newFixture(t *testing.T, cfg Config, hosts ...string) *fixture {
	f := &fixture{t: t, s: NewState(cfg), now: t0}
	for i, h := range hosts {
		f.handle(&eventsv1.NodeChanged{Node: &loomv1.Node{Name: nodeName(h), Cluster: cluster, Hostname: h, State: loomv1.Node_READY,
			MachineType: "a3-highgpu-8g", Block: fmt.Sprintf("block-%d", i%2)}})
		f.handle(&eventsv1.AgentRegistered{Node: nodeName(h), Cluster: cluster, Hostname: h, CheckAddr: fmt.Sprintf("10.0.0.%d:7000", i+1)})
	}
	return f
}

func (f *fixture) apply(c *Change) {
	f.t.Helper()
	// What the app writes survives a restart: every scan goes through its
	// JSON and back, as adapters store it.
	for k, sc := range c.Scans {
		if sc == nil {
			continue
		}
		b, err := EncodeScan(sc)
		if err != nil {
			f.t.Fatal(err)
		}
		if c.Scans[k], err = DecodeScan(b); err != nil {
			f.t.Fatal(err)
		}
	}
	f.s.Commit(c)
	for _, e := range c.Emits {
		cmd := e.Payload.(*eventsv1.RunHealthCheck)
		if e.Key != cmd.GetNode() {
			f.t.Fatalf("command keyed %q for node %q", e.Key, cmd.GetNode())
		}
		f.emits = append(f.emits, cmd)
	}
	f.verdicts = append(f.verdicts, c.Verdicts...)
}

func (f *fixture) handle(ev proto.Message) {
	f.t.Helper()
	f.n++
	c, err := f.s.Handle(f.now, fmt.Sprintf("ev%d", f.n), ev)
	if err != nil {
		f.t.Fatal(err)
	}
	f.apply(c)
}

func (f *fixture) tick() { f.apply(f.s.Tick(f.now)) }

// take returns and forgets the pending commands.
func (f *fixture) take() []*eventsv1.RunHealthCheck {
	out := f.emits
	f.emits = nil
	return out
}

func result(cmd *eventsv1.RunHealthCheck, outcome loomv1.CheckOutcome, end time.Time, metrics map[string]float64) *eventsv1.HealthCheckCompleted {
	return &eventsv1.HealthCheckCompleted{Result: &loomv1.HealthCheckResult{Name: cmd.GetCluster() + "/healthResults/" + cmd.GetRunId(),
		Node: cmd.GetNode(), Hostname: strings.TrimPrefix(cmd.GetNode(), cluster+"/nodes/"), Check: cmd.GetCheck(), Level: cmd.GetLevel(),
		Outcome: outcome, ScanId: cmd.GetScanId(), Trigger: cmd.GetTrigger(), Metrics: metrics, Gpu: -1,
		StartTime: timestamppb.New(end.Add(-time.Second)), EndTime: timestamppb.New(end)}}
}

func hostOf(node string) string { return strings.TrimPrefix(node, cluster+"/nodes/") }

// TestLoginNodeIsNeverScanned: a login node (a record only: no agent) gets
// no check, so a scan's speed comparison does not wait for a run there to
// time out; a login node an earlier health tracked is let go. Checks
// without levels carry none.
func TestLoginNodeIsNeverScanned(t *testing.T) {
	t.Parallel()
	f := newFixture(t, DefaultConfig(), "n1", "n2", "n3")
	login := &eventsv1.NodeChanged{Node: &loomv1.Node{Name: nodeName("c1-login-001"), Cluster: cluster, Hostname: "c1-login-001",
		State: loomv1.Node_READY}}
	f.handle(login) // as an earlier health had it: a member
	if f.s.Node(login.Node.Name) == nil {
		t.Fatal("the role-less node is not a member")
	}
	login.Node.Role = "login"
	f.handle(login)
	if f.s.Node(login.Node.Name) != nil {
		t.Fatal("a login node is a member")
	}
	f.handle(&eventsv1.ScanNodes{Cluster: cluster, ScanId: "s1", Checks: []string{GPUDiag, Disk, Speed, AllReduce}, Level: 2})
	tp := map[string]float64{"n1": 100, "n2": 100, "n3": 30}
	var speeds []*eventsv1.RunHealthCheck
	for _, c := range f.take() {
		if hostOf(c.GetNode()) == "c1-login-001" {
			t.Fatalf("a check was sent to the login node: %v", c)
		}
		if want := map[string]int32{GPUDiag: 2}[c.GetCheck()]; c.GetLevel() != want {
			t.Errorf("%s sent with level %d, want %d", c.GetCheck(), c.GetLevel(), want)
		}
		if c.GetCheck() == Speed {
			speeds = append(speeds, c)
		}
	}
	if len(speeds) != 3 {
		t.Fatalf("speed runs %v, want one on each of n1-n3", speeds)
	}
	for _, c := range speeds {
		f.handle(result(c, loomv1.CheckOutcome_CHECK_PASS, f.now, map[string]float64{"throughput": tp[hostOf(c.GetNode())]}))
	}
	if got := f.verdictsBy(loomv1.CheckOutcome_CHECK_FAIL); strings.Join(got, ",") != "n3" {
		t.Fatalf("stragglers %v, want n3 as soon as the three speed runs ended", got)
	}
	for name := range f.s.results {
		if strings.Contains(name, "login") {
			t.Fatalf("a result for the login node: %s", name)
		}
	}
}

func TestScanSkipsBusyNodes(t *testing.T) {
	t.Parallel()
	f := newFixture(t, DefaultConfig(), "n1", "n2", "n3")
	f.handle(&eventsv1.Heartbeat{Node: nodeName("n2"), Cluster: cluster, RunningSteps: 2})
	f.handle(&eventsv1.ScanNodes{Cluster: cluster, ScanId: "s1", Checks: []string{GPUDiag, Disk}, Level: 2})
	cmds := f.take()
	var got []string
	for _, c := range cmds {
		got = append(got, hostOf(c.GetNode())+"/"+c.GetCheck())
		if c.GetAllowBusy() || c.GetScanId() != "s1" || c.GetTrigger() != "scan" || c.GetTimeout().AsDuration() <= 0 {
			t.Errorf("command %v", c)
		}
		if c.GetCheck() == GPUDiag && (c.GetLevel() != 2 || c.GetTimeout().AsDuration() != 2*time.Minute) {
			t.Errorf("gpu_diag level 2: %v", c)
		}
	}
	sort.Strings(got)
	if strings.Join(got, " ") != "n1/disk n1/gpu_diag n3/disk n3/gpu_diag" {
		t.Fatalf("commands to %v", got)
	}
	for _, ch := range []string{GPUDiag, Disk} {
		r := f.s.Result(cluster + "/healthResults/s1-n2-" + strings.ReplaceAll(ch, "_", "-"))
		if r.GetOutcome() != loomv1.CheckOutcome_CHECK_SKIPPED || !strings.Contains(r.GetSummary(), "busy") ||
			r.GetLevel() != map[string]int32{GPUDiag: 2}[ch] { // only gpu_diag has levels
			t.Errorf("busy n2 %s: %v", ch, r)
		}
	}
	// Asked to, it scans the busy node too.
	f.handle(&eventsv1.ScanNodes{Cluster: cluster, ScanId: "s2", Hostnames: []string{"n[1-2]"}, Checks: []string{Disk}, AllowBusy: true})
	cmds = f.take()
	if len(cmds) != 2 || !cmds[0].GetAllowBusy() {
		t.Fatalf("allow_busy: %v", cmds)
	}
	// A repeated command plans nothing again.
	f.handle(&eventsv1.ScanNodes{Cluster: cluster, ScanId: "s2", Checks: []string{Disk}, AllowBusy: true})
	if cmds := f.take(); len(cmds) != 0 {
		t.Fatalf("a repeated scan sent %d commands", len(cmds))
	}
}

// TestEveryNodeAndCheckIsAnswered: a scan of the whole cluster (what the
// gateway tells the caller: every node) answers each node and each check
// it asked, as the CLI's --wait counts them: a node not READY (being
// repaired) is SKIPPED saying why, allreduce_pair runs pairs of ring
// neighbours (the odd one out with the first) beside the ring, and a
// check named twice runs once. Before, the node in repair was left out
// without a word and allreduce_pair re-ran the ring under the ring's
// names: --wait waited 10 minutes for results that never came.
func TestEveryNodeAndCheckIsAnswered(t *testing.T) {
	t.Parallel()
	f := newFixture(t, DefaultConfig(), "n1", "n2", "n3", "n4")
	f.handle(&eventsv1.NodeChanged{Node: &loomv1.Node{Name: nodeName("n2"), Cluster: cluster, Hostname: "n2", State: loomv1.Node_REBOOTING,
		MachineType: "a3-highgpu-8g", Block: "block-1"}})
	f.handle(&eventsv1.ScanNodes{Cluster: cluster, ScanId: "s1", Checks: []string{AllReduce, AllReducePair, Speed, Speed}})
	answered := map[string]bool{}
	rings := map[string][]string{}
	for _, c := range f.take() {
		answered[hostOf(c.GetNode())+"/"+c.GetCheck()] = true
		rings[c.GetParams()["ring"]] = append(rings[c.GetParams()["ring"]], hostOf(c.GetNode()))
		f.handle(result(c, loomv1.CheckOutcome_CHECK_PASS, f.now, map[string]float64{"throughput": 100}))
	}
	for _, h := range []string{"n1", "n2", "n3", "n4"} {
		for _, ch := range []string{AllReduce, AllReducePair, Speed} {
			r := f.s.Result(cluster + "/healthResults/s1-" + h + "-" + strings.ReplaceAll(ch, "_", "-"))
			switch {
			case h == "n2":
				if r.GetOutcome() != loomv1.CheckOutcome_CHECK_SKIPPED || !strings.Contains(r.GetSummary(), "REBOOTING") {
					t.Errorf("n2 in repair, %s: %v", ch, r)
				}
			case !answered[h+"/"+ch]:
				t.Errorf("%s/%s: no run", h, ch)
			}
		}
	}
	delete(rings, "")
	want := map[string][]string{"s1-ring": {"n1", "n3", "n4"}, "s1-pair1": {"n1", "n3"}, "s1-pair2": {"n4", "n1"}}
	if len(rings) != len(want) {
		t.Fatalf("rings %v, want %v", rings, want)
	}
	for id, m := range want {
		if got := rings[id]; !slices.Equal(got, m) {
			t.Errorf("ring %s: %v, want %v", id, got, m)
		}
	}
	if sc := f.s.Scan(cluster, "s1"); sc == nil || !sc.Done {
		t.Fatalf("scan not done after every run answered: %+v", sc)
	}
}

// TestScanProgress: a scan's progress counts its stored results by
// outcome (a node skipped included) and the checks still out; it is done
// when the last answers, and gone an hour after its start.
func TestScanProgress(t *testing.T) {
	t.Parallel()
	f := newFixture(t, DefaultConfig(), "n1", "n2", "n3")
	f.handle(&eventsv1.NodeChanged{Node: &loomv1.Node{Name: nodeName("n3"), Cluster: cluster, Hostname: "n3", State: loomv1.Node_REBOOTING,
		MachineType: "a3-highgpu-8g", Block: "block-0"}})
	f.handle(&eventsv1.ScanNodes{Cluster: cluster, ScanId: "s1", Checks: []string{Disk}})
	p := f.s.Progress(cluster, "s1")
	if p == nil || p.GetDone() || p.GetChecks() != 3 || p.GetAnswered() != 1 || p.GetSkipped() != 1 ||
		!slices.Equal(p.GetHostnames(), []string{"n1", "n2", "n3"}) || p.GetTrigger() != "scan" || !p.GetStartTime().AsTime().Equal(t0) {
		t.Fatalf("progress at the start: %v", p)
	}
	cmds := f.take()
	if len(cmds) != 2 {
		t.Fatalf("commands %v, want one per READY node", cmds)
	}
	f.handle(result(cmds[0], loomv1.CheckOutcome_CHECK_FAIL, f.now, nil))
	if p = f.s.Progress(cluster, "s1"); p.GetDone() || p.GetAnswered() != 2 || p.GetFailed() != 1 || p.GetChecks() != 3 {
		t.Fatalf("progress with one answer: %v", p)
	}
	f.handle(result(cmds[1], loomv1.CheckOutcome_CHECK_PASS, f.now, nil))
	if p = f.s.Progress(cluster, "s1"); !p.GetDone() || p.GetAnswered() != 3 || p.GetPassed() != 1 || p.GetFailed() != 1 || p.GetSkipped() != 1 {
		t.Fatalf("progress when done: %v", p)
	}
	if f.s.Progress(cluster, "s2") != nil || f.s.Progress("projects/p/clusters/other", "s1") != nil {
		t.Fatal("progress of a scan that does not exist")
	}
	f.now = t0.Add(time.Hour + time.Second)
	f.tick()
	if p = f.s.Progress(cluster, "s1"); p != nil {
		t.Fatalf("progress an hour after the start: %v, want none", p)
	}
}

// TestListScans: a cluster's scans still kept, newest first, each with its
// own results counted, a page at a time; another cluster's are not
// listed, and a scan is gone from the list an hour after its start.
func TestListScans(t *testing.T) {
	t.Parallel()
	f := newFixture(t, DefaultConfig(), "n1", "n2")
	f.handle(&eventsv1.ScanNodes{Cluster: cluster, ScanId: "s1", Checks: []string{Disk}})
	for _, c := range f.take() {
		f.handle(result(c, loomv1.CheckOutcome_CHECK_FAIL, f.now, nil))
	}
	f.now = t0.Add(time.Minute)
	f.handle(&eventsv1.ScanNodes{Cluster: cluster, ScanId: "s2", Checks: []string{Disk}, Hostnames: []string{"n2"}})
	f.take()
	f.handle(&eventsv1.ScanNodes{Cluster: "projects/p/clusters/other", ScanId: "s3", Checks: []string{Disk}})

	l, err := f.s.ListScans(&loomv1.ListHealthScansRequest{Cluster: cluster})
	if err != nil {
		t.Fatal(err)
	}
	if got := l.GetScans(); len(got) != 2 || got[0].GetScanId() != "s2" || got[1].GetScanId() != "s1" {
		t.Fatalf("scans %v, want s2 then s1", got)
	}
	s2, s1 := l.GetScans()[0], l.GetScans()[1]
	if s2.GetDone() || s2.GetChecks() != 1 || s2.GetAnswered() != 0 || !slices.Equal(s2.GetHostnames(), []string{"n2"}) {
		t.Errorf("s2, running on n2: %v", s2)
	}
	if !s1.GetDone() || s1.GetAnswered() != 2 || s1.GetFailed() != 2 || !proto.Equal(s1, f.s.Progress(cluster, "s1")) {
		t.Errorf("s1, done with 2 FAIL, as Progress says: %v", s1)
	}

	p1, err := f.s.ListScans(&loomv1.ListHealthScansRequest{Cluster: cluster, PageSize: 1})
	if err != nil || len(p1.GetScans()) != 1 || p1.GetScans()[0].GetScanId() != "s2" || p1.GetNextPageToken() == "" {
		t.Fatalf("first page of 1: %v %v", p1, err)
	}
	p2, err := f.s.ListScans(&loomv1.ListHealthScansRequest{Cluster: cluster, PageSize: 1, PageToken: p1.GetNextPageToken()})
	if err != nil || len(p2.GetScans()) != 1 || p2.GetScans()[0].GetScanId() != "s1" || p2.GetNextPageToken() != "" {
		t.Fatalf("second page: %v %v", p2, err)
	}
	var inv *errs.InvalidError
	if _, err := f.s.ListScans(&loomv1.ListHealthScansRequest{Cluster: "nope"}); !errors.As(err, &inv) {
		t.Fatalf("a cluster that is no name: %v", err)
	}
	if _, err := f.s.ListScans(&loomv1.ListHealthScansRequest{Cluster: cluster, PageSize: -1}); !errors.As(err, &inv) {
		t.Fatalf("page_size -1: %v", err)
	}

	f.now = t0.Add(time.Hour + time.Second)
	f.tick()
	if l, err = f.s.ListScans(&loomv1.ListHealthScansRequest{Cluster: cluster}); err != nil || len(l.GetScans()) != 1 || l.GetScans()[0].GetScanId() != "s2" {
		t.Fatalf("an hour after s1's start (s2 started a minute later): %v %v", l, err)
	}
}

func TestRingOrderAndThreshold(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.MinBusBW = map[string]float64{"a3-highgpu-8g": 40, "": 5}
	cfg.AllReduceParams = map[string]string{"sizes": "1M"}
	f := newFixture(t, cfg, "n1", "n2", "n3", "n4")
	f.handle(&eventsv1.NodeChanged{Node: &loomv1.Node{Name: nodeName("n4"), Cluster: cluster, Hostname: "n4", State: loomv1.Node_READY,
		MachineType: "other", Block: "block-1"}})
	f.handle(&eventsv1.ScanNodes{Cluster: cluster, ScanId: "s1", Checks: []string{AllReduce}})
	cmds := f.take()
	if len(cmds) != 4 {
		t.Fatalf("%d commands", len(cmds))
	}
	// Blocks: n1, n3 in block-0; n2, n4 in block-1.
	want := []string{"10.0.0.1:7000", "10.0.0.3:7000", "10.0.0.2:7000", "10.0.0.4:7000"}
	for _, c := range cmds {
		if strings.Join(c.GetPeers(), ",") != strings.Join(want, ",") {
			t.Fatalf("peers %v, want %v", c.GetPeers(), want)
		}
		if c.GetPeers()[c.GetRank()] != map[string]string{"n1": want[0], "n3": want[1], "n2": want[2], "n4": want[3]}[hostOf(c.GetNode())] {
			t.Errorf("%s has rank %d", c.GetNode(), c.GetRank())
		}
		if c.GetParams()["ring"] != "s1-ring" || c.GetParams()["sizes"] != "1M" || c.GetParams()["min_busbw_gbps"] != "5" {
			t.Errorf("params %v (the lowest threshold of the ring's machine types)", c.GetParams())
		}
	}
}

// TestScanParams: the request's params reach every node's command for
// every check, a site check's included; for the all-reduce they go over
// health's configured sizes and threshold (a blank one does not), never
// over the ring's id, and the bisection's pairs, planned after the scan
// went through storage, get them too.
func TestScanParams(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.MinBusBW = map[string]float64{"": 5}
	cfg.AllReduceParams = map[string]string{"sizes": "1M", "iters": "3"}
	f := newFixture(t, cfg, "n1", "n2", "n3", "n4")
	params := map[string]string{"stress": "10s", "min_free_gb": "20", "ib_ports": "4", "sizes": "64K,8M", "min_busbw_gbps": "40",
		"iters": " ", "ring": "mine"}
	f.handle(&eventsv1.ScanNodes{Cluster: cluster, ScanId: "s1", Checks: []string{GPUDiag, Disk, Speed, "ib_ports", AllReduce},
		Level: 3, Params: params})
	got := map[string]int{}
	var ring []*eventsv1.RunHealthCheck
	for _, c := range f.take() {
		got[c.GetCheck()]++
		if c.GetCheck() == AllReduce {
			ring = append(ring, c)
			continue
		}
		if !maps.Equal(c.GetParams(), params) {
			t.Errorf("%s on %s: params %v, want %v", c.GetCheck(), hostOf(c.GetNode()), c.GetParams(), params)
		}
	}
	if want := map[string]int{GPUDiag: 4, Disk: 4, Speed: 4, "ib_ports": 4, AllReduce: 4}; !maps.Equal(got, want) {
		t.Fatalf("commands by check %v, want %v", got, want)
	}
	wantRing := map[string]string{"stress": "10s", "min_free_gb": "20", "ib_ports": "4", "sizes": "64K,8M", "min_busbw_gbps": "40",
		"iters": "3", "ring": "s1-ring"}
	for _, c := range ring {
		if !maps.Equal(c.GetParams(), wantRing) {
			t.Errorf("allreduce on %s: params %v, want %v", hostOf(c.GetNode()), c.GetParams(), wantRing)
		}
	}
	// The ring warns: the pairs of its bisection carry the scan's
	// params under their own ids.
	for _, c := range ring {
		f.handle(result(c, loomv1.CheckOutcome_CHECK_WARN, f.now, nil))
	}
	pairs := f.take()
	if len(pairs) == 0 {
		t.Fatal("no bisection pairs")
	}
	for _, c := range pairs {
		p := c.GetParams()
		if c.GetCheck() != AllReducePair || p["sizes"] != "64K,8M" || p["min_busbw_gbps"] != "40" || p["iters"] != "3" ||
			p["ib_ports"] != "4" || p["ring"] == "mine" || p["ring"] == "s1-ring" || !strings.HasPrefix(p["ring"], "s1-") {
			t.Errorf("pair run %s: check %s params %v", c.GetRunId(), c.GetCheck(), p)
		}
	}
	// A scan without params sends none to the per-node checks.
	f.handle(&eventsv1.ScanNodes{Cluster: cluster, ScanId: "s2", Hostnames: []string{"n1"}, Checks: []string{Disk}})
	if cmds := f.take(); len(cmds) != 1 || len(cmds[0].GetParams()) != 0 {
		t.Errorf("a scan without params: %v", cmds)
	}
}

// network answers all-reduce commands: a ring passes unless it holds a
// bad node or a bad link.
type network struct {
	bad   map[string]bool
	links map[[2]string]bool
	dead  map[string]bool // never answers
}

func (n network) ringOK(members []string) bool {
	for i, m := range members {
		if n.bad[m] {
			return false
		}
		next := members[(i+1)%len(members)]
		if n.links[[2]string{m, next}] || n.links[[2]string{next, m}] {
			return false
		}
	}
	return true
}

// drive answers every command until the scan settles (a dead node's runs
// are left to time out) and returns how many rounds it took.
func (f *fixture) drive(n network) int {
	f.t.Helper()
	rounds := 0
	for rounds < 50 {
		cmds := f.take()
		if len(cmds) == 0 {
			if f.s.Scan(cluster, "s1") != nil && !f.s.Scan(cluster, "s1").Done {
				f.now = f.now.Add(10 * time.Minute)
				f.tick()
				if len(f.emits) > 0 {
					continue
				}
			}
			return rounds
		}
		rounds++
		rings := map[string][]*eventsv1.RunHealthCheck{}
		for _, c := range cmds {
			rings[c.GetParams()["ring"]] = append(rings[c.GetParams()["ring"]], c)
		}
		var ids []string
		for id := range rings {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		for _, id := range ids {
			cs := rings[id]
			members := make([]string, len(cs))
			for _, c := range cs {
				members[c.GetRank()] = hostOf(c.GetNode())
			}
			dead := false
			for _, m := range members {
				dead = dead || n.dead[m]
			}
			out := loomv1.CheckOutcome_CHECK_PASS
			if !n.ringOK(members) || dead {
				out = loomv1.CheckOutcome_CHECK_WARN
			}
			for _, c := range cs {
				if !n.dead[hostOf(c.GetNode())] {
					f.handle(result(c, out, f.now, map[string]float64{"busbw_gbps": 10}))
				}
			}
		}
	}
	f.t.Fatal("the bisection did not settle")
	return rounds
}

func (f *fixture) verdictsBy(outcome loomv1.CheckOutcome) []string {
	var out []string
	for _, v := range f.verdicts {
		if v.GetOutcome() == outcome {
			out = append(out, v.GetHostname())
		}
	}
	sort.Strings(out)
	return out
}

func TestBisectionFindsBadNode(t *testing.T) {
	t.Parallel()
	hosts := []string{"n1", "n2", "n3", "n4", "n5", "n6", "n7", "n8"}
	for _, bad := range []string{"n1", "n4", "n8"} {
		t.Run(bad, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, DefaultConfig(), hosts...)
			f.handle(&eventsv1.ScanNodes{Cluster: cluster, ScanId: "s1", Checks: []string{AllReduce}})
			f.drive(network{bad: map[string]bool{bad: true}})
			if got := f.verdictsBy(loomv1.CheckOutcome_CHECK_FAIL); strings.Join(got, ",") != bad {
				t.Fatalf("FAIL verdicts %v, want %s (WARN %v)", got, bad, f.verdictsBy(loomv1.CheckOutcome_CHECK_WARN))
			}
			if got := f.verdictsBy(loomv1.CheckOutcome_CHECK_WARN); len(got) != 0 {
				t.Fatalf("WARN verdicts %v", got)
			}
			v := f.verdicts[0]
			if v.GetCheck() != AllReduce || !strings.Contains(v.GetSummary(), "bisection") || v.GetValidUntil().AsTime() != f.now.Add(6*time.Hour) {
				t.Errorf("verdict %v", v)
			}
			if !f.s.Scan(cluster, "s1").Done {
				t.Error("scan not done")
			}
		})
	}
}

func TestBisectionOddRingAndDeadNode(t *testing.T) {
	t.Parallel()
	// The odd one out (n5, last in ring order) is the bad one.
	f := newFixture(t, DefaultConfig(), "n1", "n2", "n3", "n4", "n5")
	f.handle(&eventsv1.ScanNodes{Cluster: cluster, ScanId: "s1", Checks: []string{AllReduce}})
	f.drive(network{bad: map[string]bool{"n5": true}})
	if got := f.verdictsBy(loomv1.CheckOutcome_CHECK_FAIL); strings.Join(got, ",") != "n5" {
		t.Fatalf("odd: FAIL verdicts %v", got)
	}
	// A node that never answers: its runs time out (CHECK_ERROR results),
	// and the bisection blames it.
	g := newFixture(t, DefaultConfig(), "n1", "n2", "n3", "n4")
	g.handle(&eventsv1.ScanNodes{Cluster: cluster, ScanId: "s1", Checks: []string{AllReduce}})
	g.drive(network{dead: map[string]bool{"n3": true}})
	if got := g.verdictsBy(loomv1.CheckOutcome_CHECK_FAIL); strings.Join(got, ",") != "n3" {
		t.Fatalf("dead: FAIL verdicts %v", got)
	}
	if r := g.s.Result(cluster + "/healthResults/s1-ring-n3"); r.GetOutcome() != loomv1.CheckOutcome_CHECK_ERROR ||
		!strings.Contains(r.GetSummary(), "no result") {
		t.Fatalf("the dead node's ring run: %v", r)
	}
}

func TestBisectionFindsBadLink(t *testing.T) {
	t.Parallel()
	f := newFixture(t, DefaultConfig(), "n1", "n2", "n3", "n4")
	// Ring order is n1 n3 n2 n4 (by block): round 1 pairs (n1,n3), (n2,n4).
	f.handle(&eventsv1.ScanNodes{Cluster: cluster, ScanId: "s1", Checks: []string{AllReduce}})
	f.drive(network{links: map[[2]string]bool{{"n2", "n4"}: true}})
	if got := f.verdictsBy(loomv1.CheckOutcome_CHECK_FAIL); len(got) != 0 {
		t.Fatalf("a bad link blamed nodes: %v", got)
	}
	if got := f.verdictsBy(loomv1.CheckOutcome_CHECK_WARN); strings.Join(got, ",") != "n2,n4" {
		t.Fatalf("link WARN verdicts %v", got)
	}
	if !strings.Contains(f.verdicts[0].GetSummary(), "link n2↔n4") {
		t.Errorf("summary %q", f.verdicts[0].GetSummary())
	}
}

func TestBisectionBlamesNobodyWhenEveryPairFails(t *testing.T) {
	t.Parallel()
	f := newFixture(t, DefaultConfig(), "n1", "n2", "n3", "n4")
	f.handle(&eventsv1.ScanNodes{Cluster: cluster, ScanId: "s1", Checks: []string{AllReduce}})
	f.drive(network{bad: map[string]bool{"n1": true, "n2": true, "n3": true, "n4": true}})
	if got := f.verdictsBy(loomv1.CheckOutcome_CHECK_FAIL); len(got) != 0 {
		t.Fatalf("FAIL verdicts %v", got)
	}
	if got := f.verdictsBy(loomv1.CheckOutcome_CHECK_WARN); len(got) != 4 {
		t.Fatalf("WARN verdicts %v", got)
	}
	// A ring of 2 cannot bisect: both warned, neither blamed.
	g := newFixture(t, DefaultConfig(), "n1", "n2")
	g.handle(&eventsv1.ScanNodes{Cluster: cluster, ScanId: "s1", Checks: []string{AllReduce}})
	g.drive(network{bad: map[string]bool{"n2": true}})
	if len(g.verdictsBy(loomv1.CheckOutcome_CHECK_FAIL)) != 0 || len(g.verdictsBy(loomv1.CheckOutcome_CHECK_WARN)) != 2 {
		t.Fatalf("ring of 2: %v", g.verdicts)
	}
}

// A node that turns busy during the bisection refuses its pair (SKIPPED):
// it is left out, and nobody is blamed for its refusal.
func TestBisectionLeavesOutNodeTurnedBusy(t *testing.T) {
	t.Parallel()
	f := newFixture(t, DefaultConfig(), "n1", "n2", "n3", "n4")
	f.handle(&eventsv1.ScanNodes{Cluster: cluster, ScanId: "s1", Checks: []string{AllReduce}})
	for _, c := range f.take() {
		f.handle(result(c, loomv1.CheckOutcome_CHECK_WARN, f.now, nil))
	}
	// Round 1: (n1,n3) (n2,n4); n4 refuses, busy.
	for _, c := range f.take() {
		out := loomv1.CheckOutcome_CHECK_PASS
		switch hostOf(c.GetNode()) {
		case "n4":
			out = loomv1.CheckOutcome_CHECK_SKIPPED
		case "n2":
			out = loomv1.CheckOutcome_CHECK_WARN
		}
		f.handle(result(c, out, f.now, nil))
	}
	f.drive(network{})
	if got := f.verdictsBy(loomv1.CheckOutcome_CHECK_FAIL); len(got) != 0 {
		t.Fatalf("FAIL verdicts %v", got)
	}
	if got := f.verdictsBy(loomv1.CheckOutcome_CHECK_SKIPPED); strings.Join(got, ",") != "n4" {
		t.Fatalf("SKIPPED verdicts %v", got)
	}
}

func TestSpeedFlagsStragglers(t *testing.T) {
	t.Parallel()
	f := newFixture(t, DefaultConfig(), "n1", "n2", "n3", "n4", "n5")
	f.handle(&eventsv1.ScanNodes{Cluster: cluster, ScanId: "s1", Checks: []string{Speed}})
	tp := map[string]float64{"n1": 100, "n2": 98, "n3": 100, "n4": 79, "n5": 50}
	cmds := f.take()
	for i, c := range cmds {
		if i == len(cmds)-1 && len(f.verdicts) != 0 {
			t.Fatal("verdicts before every speed result came")
		}
		f.handle(result(c, loomv1.CheckOutcome_CHECK_PASS, f.now, map[string]float64{"throughput": tp[hostOf(c.GetNode())]}))
	}
	// Median 98: 0.8 × 98 = 78.4; n4 (79) passes, n5 (50) fails.
	if got := f.verdictsBy(loomv1.CheckOutcome_CHECK_FAIL); strings.Join(got, ",") != "n5" {
		t.Fatalf("stragglers %v", got)
	}
	r := f.s.Result(cluster + "/healthResults/s1-n5-speed")
	if r.GetOutcome() != loomv1.CheckOutcome_CHECK_FAIL || r.GetMetrics()["fleet_median"] != 98 || !strings.Contains(r.GetSummary(), "straggler") {
		t.Fatalf("n5's stored result: %v", r)
	}
	if r := f.s.Result(cluster + "/healthResults/s1-n4-speed"); r.GetOutcome() != loomv1.CheckOutcome_CHECK_PASS {
		t.Fatalf("n4: %v", r)
	}
	// A later scan of one node compares with the fleet's still valid results.
	f.now = f.now.Add(10 * time.Minute)
	f.handle(&eventsv1.ScanNodes{Cluster: cluster, ScanId: "s2", Hostnames: []string{"n2"}, Checks: []string{Speed}})
	for _, c := range f.take() {
		f.handle(result(c, loomv1.CheckOutcome_CHECK_PASS, f.now, map[string]float64{"throughput": 60}))
	}
	if r := f.s.Result(cluster + "/healthResults/s2-n2-speed"); r.GetOutcome() != loomv1.CheckOutcome_CHECK_FAIL {
		t.Fatalf("n2 alone against the fleet: %v", r)
	}
}

func TestMedian(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{5, 1, 3}, 3}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := Median(tc.in); got != tc.want {
			t.Errorf("Median(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestValidityWindows(t *testing.T) {
	t.Parallel()
	f := newFixture(t, DefaultConfig(), "n1")
	f.handle(&eventsv1.ScanNodes{Cluster: cluster, ScanId: "s1", Checks: []string{GPUDiag, Disk, Speed, "ib_check"}})
	want := map[string]time.Duration{GPUDiag: 24 * time.Hour, Disk: time.Hour, Speed: time.Hour, "ib_check": time.Hour}
	for _, c := range f.take() {
		f.handle(result(c, loomv1.CheckOutcome_CHECK_PASS, f.now, nil))
		r := f.s.Result(cluster + "/healthResults/" + c.GetRunId())
		if got := r.GetValidUntil().AsTime().Sub(f.now); got != want[c.GetCheck()] {
			t.Errorf("%s valid for %s, want %s", c.GetCheck(), got, want[c.GetCheck()])
		}
	}
	// An error stands for nothing.
	f.handle(&eventsv1.ScanNodes{Cluster: cluster, ScanId: "s2", Checks: []string{Disk}, Timeout: durationpb.New(time.Second)})
	c := f.take()[0]
	f.handle(result(c, loomv1.CheckOutcome_CHECK_ERROR, f.now, nil))
	if r := f.s.Result(cluster + "/healthResults/" + c.GetRunId()); !r.GetValidUntil().AsTime().Equal(f.now) {
		t.Errorf("error valid until %v", r.GetValidUntil().AsTime())
	}
	// A result of a check health did not send (a confirming check) is stored too.
	f.handle(&eventsv1.HealthCheckCompleted{Result: &loomv1.HealthCheckResult{Name: cluster + "/healthResults/confirm-1", Node: nodeName("n1"),
		Hostname: "n1", Check: GPUDiag, Outcome: loomv1.CheckOutcome_CHECK_FAIL, EndTime: timestamppb.New(f.now)}})
	if r := f.s.Result(cluster + "/healthResults/confirm-1"); r == nil || r.GetValidUntil().AsTime() != f.now.Add(24*time.Hour) {
		t.Errorf("confirming check's result: %v", r)
	}
}

func TestScheduledScansAndNodesNeedCheck(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.Interval = time.Hour
	f := newFixture(t, cfg, "n1", "n2")
	f.tick()
	if len(f.take()) != 0 {
		t.Fatal("a scheduled scan at start")
	}
	f.now = f.now.Add(59 * time.Minute)
	f.tick()
	if len(f.take()) != 0 {
		t.Fatal("a scheduled scan before its interval")
	}
	f.now = f.now.Add(time.Minute)
	f.tick()
	cmds := f.take()
	if len(cmds) != 6 || cmds[0].GetTrigger() != "schedule" {
		t.Fatalf("scheduled scan: %v", cmds)
	}
	// A hung job's node is busy (its requeued run, or the hung run's steps
	// being stopped): it is checked all the same.
	f.handle(&eventsv1.Heartbeat{Node: nodeName("n2"), Cluster: cluster, RunningSteps: 1})
	f.handle(&eventsv1.NodesNeedCheck{Cluster: cluster, Nodes: []string{nodeName("n2")}, Trigger: "hang", Job: "projects/p/jobs/1"})
	cmds = f.take()
	var got []string
	for _, c := range cmds {
		got = append(got, hostOf(c.GetNode())+"/"+c.GetCheck()+"/"+c.GetTrigger())
		if !c.GetAllowBusy() || (c.GetCheck() == GPUDiag && c.GetLevel() != 1) {
			t.Errorf("hang check %v: want level 1, allowed on a busy node", c)
		}
	}
	sort.Strings(got)
	if strings.Join(got, " ") != "n2/disk/hang n2/gpu_diag/hang" {
		t.Fatalf("NodesNeedCheck: %v", got)
	}
}

func TestRetention(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.KeepPerCheck = 3
	f := newFixture(t, cfg, "n1")
	for i := range 5 {
		f.handle(&eventsv1.ScanNodes{Cluster: cluster, ScanId: fmt.Sprintf("s%d", i), Checks: []string{Disk}})
		for _, c := range f.take() {
			f.handle(result(c, loomv1.CheckOutcome_CHECK_PASS, f.now, nil))
		}
		f.now = f.now.Add(time.Minute)
	}
	f.tick()
	resp, err := f.s.List(&loomv1.ListHealthResultsRequest{Cluster: cluster})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range resp.GetResults() {
		ids = append(ids, r.GetScanId())
	}
	if strings.Join(ids, ",") != "s4,s3,s2" {
		t.Fatalf("kept %v", ids)
	}
	f.now = f.now.Add(8 * 24 * time.Hour)
	f.tick()
	if resp, _ := f.s.List(&loomv1.ListHealthResultsRequest{Cluster: cluster}); len(resp.GetResults()) != 0 {
		t.Fatalf("past retention: %v", resp.GetResults())
	}
}

func TestListHealthResults(t *testing.T) {
	t.Parallel()
	f := newFixture(t, DefaultConfig(), "n1", "n2", "n3")
	for i, ch := range []string{GPUDiag, Disk} {
		f.handle(&eventsv1.ScanNodes{Cluster: cluster, ScanId: fmt.Sprintf("s%d", i), Checks: []string{ch}})
		for _, c := range f.take() {
			f.now = f.now.Add(time.Second)
			f.handle(result(c, loomv1.CheckOutcome_CHECK_PASS, f.now, nil))
		}
	}
	// Another cluster's results are not listed.
	f.handle(&eventsv1.HealthCheckCompleted{Result: &loomv1.HealthCheckResult{Name: "projects/p/clusters/other/healthResults/x", Node: "projects/p/clusters/other/nodes/n1",
		Hostname: "n1", Check: Disk, Outcome: loomv1.CheckOutcome_CHECK_PASS, EndTime: timestamppb.New(f.now)}})
	var all []*loomv1.HealthCheckResult
	req := &loomv1.ListHealthResultsRequest{Cluster: cluster, PageSize: 4}
	for {
		resp, err := f.s.List(req)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, resp.GetResults()...)
		if resp.GetNextPageToken() == "" {
			break
		}
		req = proto.Clone(req).(*loomv1.ListHealthResultsRequest)
		req.PageToken = resp.GetNextPageToken()
	}
	if len(all) != 6 {
		t.Fatalf("%d results", len(all))
	}
	for i := 1; i < len(all); i++ {
		if all[i].GetEndTime().AsTime().After(all[i-1].GetEndTime().AsTime()) {
			t.Fatalf("not newest first at %d", i)
		}
	}
	for _, tc := range []struct {
		req  *loomv1.ListHealthResultsRequest
		want int
	}{
		{&loomv1.ListHealthResultsRequest{Cluster: cluster, Hostname: "n2"}, 2},
		{&loomv1.ListHealthResultsRequest{Cluster: cluster, Check: Disk}, 3},
		{&loomv1.ListHealthResultsRequest{Cluster: cluster, ScanId: "s0", Hostname: "n1"}, 1},
	} {
		resp, err := f.s.List(tc.req)
		if err != nil || len(resp.GetResults()) != tc.want {
			t.Errorf("%v: %d results (%v), want %d", tc.req, len(resp.GetResults()), err, tc.want)
		}
	}
	if _, err := f.s.List(&loomv1.ListHealthResultsRequest{}); err == nil {
		t.Error("no cluster: listed")
	}
	if _, err := f.s.List(&loomv1.ListHealthResultsRequest{Cluster: cluster, Check: Disk, PageToken: req.GetPageToken()}); err == nil {
		t.Error("a token sent with other filters: listed")
	}
}

// TestNodeResultsAreCapped: a node reporting result after result under new
// check names and run ids keeps at most MaxCheckGroups × KeepPerCheck of
// them, its newest, and costs no other node a result; a result under
// another node's result's name is refused instead of replacing it.
func TestNodeResultsAreCapped(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.KeepPerCheck = 1
	f := newFixture(t, cfg, "n1", "n2")
	other := cluster + "/healthResults/n2-disk"
	f.handle(&eventsv1.HealthCheckCompleted{Result: &loomv1.HealthCheckResult{Name: other, Node: nodeName("n2"), Hostname: "n2",
		Check: Disk, Outcome: loomv1.CheckOutcome_CHECK_FAIL, EndTime: timestamppb.New(f.now)}})
	const sent = MaxCheckGroups + 40
	for i := range sent {
		f.now = f.now.Add(time.Second)
		f.handle(&eventsv1.HealthCheckCompleted{Result: &loomv1.HealthCheckResult{Name: fmt.Sprintf("%s/healthResults/flood-%d", cluster, i),
			Node: nodeName("n1"), Hostname: "n1", Check: fmt.Sprintf("site_%d", i), Outcome: loomv1.CheckOutcome_CHECK_PASS,
			EndTime: timestamppb.New(f.now)}})
	}
	resp, err := f.s.List(&loomv1.ListHealthResultsRequest{Cluster: cluster, Hostname: "n1", PageSize: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if got := len(resp.GetResults()); got != MaxCheckGroups {
		t.Fatalf("n1 holds %d results after sending %d; want the bound, %d", got, sent, MaxCheckGroups)
	}
	if newest := resp.GetResults()[0].GetName(); newest != fmt.Sprintf("%s/healthResults/flood-%d", cluster, sent-1) {
		t.Errorf("newest kept %s; want the last sent", newest)
	}
	if f.s.Result(cluster+"/healthResults/flood-0") != nil {
		t.Error("the oldest flood result kept past the bound")
	}
	var inv *errs.InvalidError
	_, err = f.s.Handle(f.now, "steal", &eventsv1.HealthCheckCompleted{Result: &loomv1.HealthCheckResult{Name: other, Node: nodeName("n1"),
		Hostname: "n1", Check: Disk, Outcome: loomv1.CheckOutcome_CHECK_PASS, EndTime: timestamppb.New(f.now)}})
	if !errors.As(err, &inv) || !strings.Contains(err.Error(), "result.name") {
		t.Errorf("n1 reporting n2's result: %v, want InvalidArgument naming result.name", err)
	}
	if r := f.s.Result(other); r.GetNode() != nodeName("n2") || r.GetOutcome() != loomv1.CheckOutcome_CHECK_FAIL {
		t.Errorf("n2's result after the flood and the forgery: %v; want its FAIL, kept", r)
	}
}

// TestNodeResultsAreBounded: what a node reports is kept only as far as
// health can trust it. A result of another cluster's, or under a name that
// is no check's, is refused; a summary with terminal escapes is cleaned; a
// metric of Inf, which would make every honest node a straggler against
// the fleet's median, is dropped; an end time in the year 9999, which
// would keep a forged result valid and out of retention, is now.
func TestNodeResultsAreBounded(t *testing.T) {
	t.Parallel()
	f := newFixture(t, DefaultConfig(), "n1", "n2") // two: the median is a mean
	for name, r := range map[string]*loomv1.HealthCheckResult{
		"another cluster": {Name: "projects/p/clusters/other/healthResults/x", Node: nodeName("n1"), Check: Disk},
		"a bad check":     {Name: cluster + "/healthResults/x", Node: nodeName("n1"), Check: "../../etc"},
	} {
		var inv *errs.InvalidError
		if _, err := f.s.Handle(f.now, "bad-"+name, &eventsv1.HealthCheckCompleted{Result: r}); !errors.As(err, &inv) {
			t.Errorf("%s: %v, want InvalidArgument", name, err)
		}
	}

	f.handle(&eventsv1.ScanNodes{Cluster: cluster, ScanId: "s1", Checks: []string{Speed}})
	for _, c := range f.take() {
		tp := map[string]float64{"throughput": 100}
		if hostOf(c.GetNode()) == "n2" {
			tp = map[string]float64{"throughput": math.Inf(1), "bogus": math.NaN()}
		}
		ev := result(c, loomv1.CheckOutcome_CHECK_PASS, time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC), tp)
		ev.Result.Summary = "\x1b[2Jall good"
		f.handle(ev)
	}
	if got := f.verdictsBy(loomv1.CheckOutcome_CHECK_FAIL); len(got) != 0 {
		t.Fatalf("honest nodes failed as stragglers against an Inf: %v", got)
	}
	r := f.s.Result(cluster + "/healthResults/s1-n2-speed")
	if _, ok := r.GetMetrics()["throughput"]; ok || len(r.GetMetrics()) > 1 {
		t.Fatalf("n2's metrics kept: %v", r.GetMetrics())
	}
	if !r.GetEndTime().AsTime().Equal(f.now) || r.GetValidUntil().AsTime().After(f.now.Add(time.Hour)) {
		t.Fatalf("n2's result ends %v, valid until %v; want now and an hour on", r.GetEndTime().AsTime(), r.GetValidUntil().AsTime())
	}
	if !strings.HasPrefix(r.GetSummary(), "\uFFFD[2J") {
		t.Fatalf("summary kept as %q", r.GetSummary())
	}
}

// TestFillPolicy: the scans' part of the policy: the schedule and what it
// runs, the straggler ratio, the grace, the all-reduce's sizes and
// thresholds by machine type ("" shown as "*"), each built-in check's
// validity and timeout as configured (gpu_diag's at level 1), and what a
// site's check gets; with no schedule, no scheduled checks.
func TestFillPolicy(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.Interval = 6 * time.Hour
	cfg.Validity = map[string]time.Duration{GPUDiag: 12 * time.Hour}
	cfg.MinBusBW = map[string]float64{"a3-highgpu-8g": 40, "": 5}
	cfg.AllReduceParams = map[string]string{"sizes": "1M,8M"}
	p := &loomv1.HealthPolicy{}
	NewState(cfg).FillPolicy(p)
	if !slices.Equal(p.GetScanChecks(), []string{GPUDiag, Disk, Speed}) || p.GetScanLevel() != 1 || p.GetCheckGrace().AsDuration() != 30*time.Second ||
		p.GetAllreduceSizes() != "1M,8M" || len(p.GetAllreduceMinBusbwGbps()) != 2 ||
		p.GetAllreduceMinBusbwGbps()["a3-highgpu-8g"] != 40 || p.GetAllreduceMinBusbwGbps()["*"] != 5 {
		t.Fatalf("policy's schedule and all-reduce: %v", p)
	}
	unscheduled := &loomv1.HealthPolicy{}
	NewState(DefaultConfig()).FillPolicy(unscheduled)
	if len(unscheduled.GetScanChecks()) != 0 || unscheduled.GetAllreduceSizes() != "" || len(unscheduled.GetAllreduceMinBusbwGbps()) != 0 {
		t.Fatalf("default policy: %v", unscheduled)
	}
	checks := map[string]*loomv1.CheckPolicy{}
	for _, c := range p.GetChecks() {
		checks[c.GetCheck()] = c
	}
	if p.GetScanInterval().AsDuration() != 6*time.Hour || p.GetStragglerRatio() != 0.8 || len(checks) != 5 ||
		checks[GPUDiag].GetValidity().AsDuration() != 12*time.Hour || checks[GPUDiag].GetTimeout().AsDuration() != time.Minute ||
		checks[Disk].GetValidity().AsDuration() != time.Hour || checks[Disk].GetTimeout().AsDuration() != 30*time.Second ||
		p.GetDefaultCheckValidity().AsDuration() != time.Hour || p.GetDefaultCheckTimeout().AsDuration() != 5*time.Minute {
		t.Fatalf("policy: %v", p)
	}
}

// TestAgentNamesOnlyItself: an agent's registration names its node (its
// signer's), and the node's cluster and hostname come from that name, not
// from the payload: a node no longer a member that registers claiming a
// member's hostname does not shadow it in a scan of that hostname.
func TestAgentNamesOnlyItself(t *testing.T) {
	t.Parallel()
	f := newFixture(t, DefaultConfig(), "n1")
	f.handle(&eventsv1.AgentRegistered{Node: nodeName("zz-7"), Cluster: cluster, Hostname: "n1", CheckAddr: "10.0.0.99:7000"})
	if n := f.s.Node(nodeName("zz-7")); n == nil || n.Hostname != "zz-7" {
		t.Fatalf("the registered stranger: %+v; want hostname zz-7 (from its name)", n)
	}
	for range 5 {
		f.handle(&eventsv1.ScanNodes{Cluster: cluster, ScanId: fmt.Sprintf("s%d", f.n), Hostnames: []string{"n1"}, Checks: []string{Disk}})
		for _, c := range f.take() {
			if c.GetNode() != nodeName("n1") {
				t.Fatalf("a scan of n1 sent its check to %s", c.GetNode())
			}
			f.handle(result(c, loomv1.CheckOutcome_CHECK_PASS, f.now, nil))
		}
	}
}

// TestNodeResultIsItsOwn: a node (its name proved by the envelope's
// signature) that reports a FAIL under another node's hostname, into an
// operator's scan of that other node only, has its result listed as its
// own, outside the scan; the scan's own run still waits for its node.
func TestNodeResultIsItsOwn(t *testing.T) {
	t.Parallel()
	f := newFixture(t, DefaultConfig(), "n1", "n2")
	f.handle(&eventsv1.ScanNodes{Cluster: cluster, ScanId: "op-scan", Hostnames: []string{"n2"}, Checks: []string{Disk}})
	f.take()
	f.handle(&eventsv1.HealthCheckCompleted{Result: &loomv1.HealthCheckResult{
		Name: cluster + "/healthResults/forged-1", Node: nodeName("n1"), Hostname: "n2", Check: Disk,
		Outcome: loomv1.CheckOutcome_CHECK_FAIL, Summary: "disk failed (forged by n1)", ScanId: "op-scan", Trigger: "scan", Gpu: -1,
		StartTime: timestamppb.New(f.now), EndTime: timestamppb.New(f.now)}})
	n2s, err := f.s.List(&loomv1.ListHealthResultsRequest{Cluster: cluster, Hostname: "n2"})
	if err != nil {
		t.Fatal(err)
	}
	if len(n2s.GetResults()) != 0 {
		t.Errorf("n2's results hold what n1 sent: %v", n2s.GetResults())
	}
	n1s, err := f.s.List(&loomv1.ListHealthResultsRequest{Cluster: cluster, Hostname: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	if len(n1s.GetResults()) != 1 || n1s.GetResults()[0].GetScanId() != "" {
		t.Errorf("n1's results: %v, want its one result, in no scan", n1s.GetResults())
	}
	if p := f.s.Progress(cluster, "op-scan"); p.GetFailed() != 0 || p.GetAnswered() != 0 || p.GetDone() {
		t.Errorf("the operator's scan of n2 counts n1's result: %v", p)
	}
}
