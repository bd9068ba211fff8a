package sim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	"github.com/loom-ml/loom/services/provisioner/internal/provider"
)

// fakePub records what the provider publishes; failNext makes the next
// calls fail.
type fakePub struct {
	mu       sync.Mutex
	batches  [][]envelope.Event
	failNext int
}

func (f *fakePub) Publish(_ context.Context, evs ...envelope.Event) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failNext > 0 {
		f.failNext--
		return errors.New("broker unavailable")
	}
	f.batches = append(f.batches, slices.Clone(evs))
	return nil
}

// registered returns the AgentRegistered payloads by node.
func (f *fakePub) registered() map[string][]*eventsv1.AgentRegistered {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string][]*eventsv1.AgentRegistered{}
	for _, b := range f.batches {
		for _, ev := range b {
			if r, ok := ev.Payload.(*eventsv1.AgentRegistered); ok {
				out[r.GetNode()] = append(out[r.GetNode()], r)
			}
		}
	}
	return out
}

// heartbeats counts Heartbeats by node, and the batches that held any.
func (f *fakePub) heartbeats() (byNode map[string]int, batches int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	byNode = map[string]int{}
	for _, b := range f.batches {
		had := false
		for _, ev := range b {
			if h, ok := ev.Payload.(*eventsv1.Heartbeat); ok {
				byNode[h.GetNode()]++
				had = true
			}
		}
		if had {
			batches++
		}
	}
	return byNode, batches
}

// order returns, per node, the payload type names in publish order.
func (f *fakePub) order() map[string][]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string][]string{}
	for _, b := range f.batches {
		for _, ev := range b {
			out[ev.Key] = append(out[ev.Key], ev.Type)
		}
	}
	return out
}

func simNodeSpec(cluster string, i int, capType string) provider.Node {
	host := fmt.Sprintf("gpu-%04d", i)
	return provider.Node{
		Name: "projects/default/clusters/" + cluster + "/nodes/" + host, Cluster: "projects/default/clusters/" + cluster,
		ClusterID: cluster, Hostname: host, GPUs: 8, Pool: "gpu", Role: "compute",
		MachineType: "a3-highgpu-8g", Zone: "us-central1-a", CapacityType: capType,
	}
}

func newSim(t *testing.T, cfg Config) (*Provider, *fakePub) {
	t.Helper()
	pub := &fakePub{}
	p := New(cfg, pub)
	t.Cleanup(func() { _ = p.Close() })
	return p, pub
}

// fast is a config whose boots take milliseconds.
func fast() Config {
	return Config{Seed: 7, TimeScale: 1e-4, HeartbeatInterval: 20 * time.Millisecond}
}

func waitEvent(t *testing.T, p *Provider, timeout time.Duration) provider.Event {
	t.Helper()
	select {
	case ev := <-p.Events():
		return ev
	case <-time.After(timeout):
		t.Fatalf("no provider event within %v", timeout)
		return provider.Event{}
	}
}

func TestLatencySamplingFollowsTheDistributionAndTheSeed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const n = 2000
	// A scale so small that nothing registers during the test: only the draws matter.
	cfg := Config{Seed: 42, TimeScale: 1e-9}
	a, _ := newSim(t, cfg)
	b, _ := newSim(t, cfg)
	other, _ := newSim(t, Config{Seed: 43, TimeScale: 1e-9})
	var lat []float64
	for i := range n {
		if _, err := a.Launch(ctx, simNodeSpec("c", i, "ON_DEMAND")); err != nil {
			t.Fatal(err)
		}
		s, _ := a.LastSample(simNodeSpec("c", i, "").Name)
		lat = append(lat, float64(s.Simulated))
	}
	// Launched in the opposite order, with the same seed: the same draws.
	for i := n - 1; i >= 0; i-- {
		if _, err := b.Launch(ctx, simNodeSpec("c", i, "ON_DEMAND")); err != nil {
			t.Fatal(err)
		}
	}
	differ := 0
	for i := range n {
		name := simNodeSpec("c", i, "").Name
		sa, _ := a.LastSample(name)
		sb, _ := b.LastSample(name)
		if sa != sb {
			t.Fatalf("same seed, different draw for %s: %+v vs %+v", name, sa, sb)
		}
		if _, err := other.Launch(ctx, simNodeSpec("c", i, "ON_DEMAND")); err != nil {
			t.Fatal(err)
		}
		if so, _ := other.LastSample(name); so.Latency != sa.Latency {
			differ++
		}
	}
	if differ < n*9/10 {
		t.Errorf("another seed changed only %d of %d draws", differ, n)
	}
	// Lognormal: the median is Median, and ln(latency) has standard deviation Sigma.
	slices.Sort(lat)
	want := DefaultLatency["ON_DEMAND"]
	if med := lat[n/2]; math.Abs(med-float64(want.Median))/float64(want.Median) > 0.05 {
		t.Errorf("median latency %v, want about %v", time.Duration(med), want.Median)
	}
	var sum, sum2 float64
	for _, l := range lat {
		x := math.Log(l)
		sum += x
		sum2 += x * x
	}
	sd := math.Sqrt(sum2/n - (sum/n)*(sum/n))
	if math.Abs(sd-want.Sigma) > 0.03 {
		t.Errorf("log-space sd %.3f, want about %.2f", sd, want.Sigma)
	}
}

func TestLatencyPerCapacityTypeAndOverrides(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p, _ := newSim(t, Config{Seed: 1, TimeScale: 1e-9, Latency: map[string]Latency{"SPOT": {Median: time.Second}}})
	median := func(capType string) time.Duration {
		var lat []time.Duration
		for i := range 301 {
			n := simNodeSpec("m-"+strings.ToLower(capType), i, capType)
			if _, err := p.Launch(ctx, n); err != nil {
				t.Fatal(err)
			}
			s, _ := p.LastSample(n.Name)
			lat = append(lat, s.Simulated)
		}
		slices.Sort(lat)
		return lat[150]
	}
	od, flex := median("ON_DEMAND"), median("FLEX_START")
	if flex < 5*od {
		t.Errorf("FLEX_START median %v is not far above ON_DEMAND's %v", flex, od)
	}
	if got := median("SPOT"); got != time.Second {
		t.Errorf("SPOT median with an override {1s, sigma 0} = %v, want exactly 1s", got)
	}
	if got := median(""); got < 80*time.Second || got > 100*time.Second {
		t.Errorf("unset capacity type median %v, want ON_DEMAND's ~90s", got)
	}
}

func TestRegistersThenHeartbeatsInBatches(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var mu sync.Mutex
	launched := map[string]time.Duration{}
	cfg := fast()
	cfg.OnLaunch = func(node string, latency time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		launched[node] = latency
	}
	p, pub := newSim(t, cfg)
	const n = 40
	for i := range n {
		l, err := p.Launch(ctx, simNodeSpec("hb", i, "ON_DEMAND"))
		if err != nil || !l.Started || l.PID != 0 {
			t.Fatalf("launch %d: %+v, %v", i, l, err)
		}
	}
	testkit.WaitFor(t, 10*time.Second, "every node heartbeats twice", func() (bool, error) {
		hb, _ := pub.heartbeats()
		for i := range n {
			if hb[simNodeSpec("hb", i, "").Name] < 2 {
				return false, nil
			}
		}
		return true, nil
	})
	regs := pub.registered()
	for i := range n {
		want := simNodeSpec("hb", i, "ON_DEMAND")
		r := regs[want.Name]
		if len(r) != 1 {
			t.Fatalf("%s registered %d times", want.Name, len(r))
		}
		if r[0].GetCluster() != want.Cluster || r[0].GetHostname() != want.Hostname || r[0].GetGpus() != 8 || !strings.HasPrefix(r[0].GetBootId(), "sim-") {
			t.Errorf("registration %+v does not describe %+v", r[0], want)
		}
		if got := pub.order()[want.Name]; got[0] != "loom.events.v1.AgentRegistered" {
			t.Errorf("%s: first event %s, want the registration", want.Name, got[0])
		}
		mu.Lock()
		if s, _ := p.LastSample(want.Name); launched[want.Name] != s.Latency || s.Latency <= 0 {
			t.Errorf("OnLaunch said %v for %s, the sample %v", launched[want.Name], want.Name, s.Latency)
		}
		mu.Unlock()
		if p.State(want.Name) != Running {
			t.Errorf("%s is %v, want running", want.Name, p.State(want.Name))
		}
	}
	byNode, batches := pub.heartbeats()
	total := 0
	for _, c := range byNode {
		total += c
	}
	// All live nodes share one publish per interval.
	if batches*n/2 > total {
		t.Errorf("%d heartbeats took %d publishes; want them batched", total, batches)
	}
	for _, b := range pub.batches {
		for _, ev := range b {
			if ev.Topic != topics.NodeTelemetry || ev.Source != Source {
				t.Fatalf("event on %q from %q, want %q from %q", ev.Topic, ev.Source, topics.NodeTelemetry, Source)
			}
		}
	}
	if s := p.Stats(); s.Registered != n || s.Running != n || s.Launches != n {
		t.Errorf("stats %+v", s)
	}
}

func TestLaunchIsIdempotent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p, pub := newSim(t, fast())
	n := simNodeSpec("idem", 1, "ON_DEMAND")
	first, err := p.Launch(ctx, n)
	if err != nil || !first.Started {
		t.Fatalf("first launch: %+v, %v", first, err)
	}
	again, err := p.Launch(ctx, n)
	if err != nil || again.Started {
		t.Fatalf("second launch while booting: %+v, %v; want not started", again, err)
	}
	testkit.WaitFor(t, 5*time.Second, "registration", func() (bool, error) { return len(pub.registered()[n.Name]) == 1, nil })
	if l, err := p.Launch(ctx, n); err != nil || l.Started {
		t.Fatalf("launch while running: %+v, %v; want not started", l, err)
	}
	if s := p.Stats(); s.Launches != 1 {
		t.Errorf("%d boots for one node launched three times", s.Launches)
	}
	if len(pub.registered()[n.Name]) != 1 {
		t.Errorf("registered %d times", len(pub.registered()[n.Name]))
	}
	// Stop and Remove are idempotent too, and a node never launched is fine.
	for range 2 {
		if err := p.Stop(ctx, n); err != nil {
			t.Fatal(err)
		}
		if err := p.Remove(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Stop(ctx, simNodeSpec("idem", 99, "")); err != nil {
		t.Fatal(err)
	}
	if p.State(n.Name) != Absent {
		t.Errorf("removed node is %v", p.State(n.Name))
	}
}

func TestStopEndsHeartbeatsAndRelaunchBootsAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p, pub := newSim(t, fast())
	a, b := simNodeSpec("stop", 1, "ON_DEMAND"), simNodeSpec("stop", 2, "ON_DEMAND")
	for _, n := range []provider.Node{a, b} {
		if _, err := p.Launch(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	testkit.WaitFor(t, 5*time.Second, "heartbeats from a", func() (bool, error) {
		hb, _ := pub.heartbeats()
		return hb[a.Name] > 0, nil
	})
	if err := p.Stop(ctx, a); err != nil {
		t.Fatal(err)
	}
	hb, _ := pub.heartbeats()
	stoppedAt, bAt := hb[a.Name], hb[b.Name]
	testkit.WaitFor(t, 5*time.Second, "three more heartbeat rounds", func() (bool, error) {
		hb, _ := pub.heartbeats()
		return hb[b.Name] >= bAt+3, nil
	})
	// A round in flight when Stop came may still carry a; later ones must not.
	if hb, _ := pub.heartbeats(); hb[a.Name] > stoppedAt+1 {
		t.Errorf("stopped node sent %d more heartbeats", hb[a.Name]-stoppedAt)
	}
	if p.State(a.Name) != Stopped {
		t.Errorf("state %v, want stopped", p.State(a.Name))
	}
	l, err := p.Launch(ctx, a)
	if err != nil || !l.Started || l.PrevExit != "stopped" {
		t.Fatalf("relaunch: %+v, %v", l, err)
	}
	testkit.WaitFor(t, 5*time.Second, "second registration", func() (bool, error) { return len(pub.registered()[a.Name]) == 2, nil })
	regs := pub.registered()[a.Name]
	if regs[0].GetBootId() == regs[1].GetBootId() {
		t.Errorf("relaunch kept boot id %s", regs[0].GetBootId())
	}
	// RemoveCluster forgets every node of the cluster, and only those.
	other := simNodeSpec("other", 1, "ON_DEMAND")
	if _, err := p.Launch(ctx, other); err != nil {
		t.Fatal(err)
	}
	if err := p.RemoveCluster(ctx, "stop"); err != nil {
		t.Fatal(err)
	}
	if p.State(a.Name) != Absent || p.State(b.Name) != Absent || p.State(other.Name) == Absent {
		t.Errorf("after RemoveCluster: a %v, b %v, other %v", p.State(a.Name), p.State(b.Name), p.State(other.Name))
	}
}

func TestStockout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p, _ := newSim(t, fast())
	n := simNodeSpec("so", 1, "ON_DEMAND")
	p.SetStockout("us-central1-a", "a3-highgpu-8g", true)
	_, err := p.Launch(ctx, n)
	if !errors.Is(err, ErrStockout) || !strings.Contains(err.Error(), "ZONE_RESOURCE_POOL_EXHAUSTED") || !strings.Contains(err.Error(), "us-central1-a") {
		t.Fatalf("launch in a stocked-out zone: %v", err)
	}
	if p.State(n.Name) != Absent {
		t.Errorf("stocked-out node is %v", p.State(n.Name))
	}
	// Other machine types in the zone are unaffected.
	cpu := simNodeSpec("so", 2, "ON_DEMAND")
	cpu.MachineType = "n2-standard-8"
	if _, err := p.Launch(ctx, cpu); err != nil {
		t.Errorf("other machine type: %v", err)
	}
	p.SetStockout("us-central1-a", "a3-highgpu-8g", false)
	if l, err := p.Launch(ctx, n); err != nil || !l.Started {
		t.Fatalf("launch after capacity returned: %+v, %v", l, err)
	}
	if s := p.Stats(); s.Stockouts != 1 {
		t.Errorf("stockouts %d, want 1", s.Stockouts)
	}

	always, _ := newSim(t, Config{Seed: 3, StockoutRate: 1})
	if _, err := always.Launch(ctx, n); !errors.Is(err, ErrStockout) {
		t.Errorf("StockoutRate 1: %v", err)
	}
	some, _ := newSim(t, Config{Seed: 3, StockoutRate: 0.3, TimeScale: 1e-9})
	failed := 0
	for i := range 1000 {
		if _, err := some.Launch(ctx, simNodeSpec("some", i, "")); err != nil {
			failed++
		}
	}
	if failed < 250 || failed > 350 {
		t.Errorf("StockoutRate 0.3: %d of 1000 launches failed", failed)
	}
}

func TestBootFailure(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg := fast()
	cfg.BootFailureAfter = 5 * time.Minute // 30 ms at this scale
	p, pub := newSim(t, cfg)
	bad, good := simNodeSpec("bf", 1, "ON_DEMAND"), simNodeSpec("bf", 2, "ON_DEMAND")
	p.FailBoot(bad.Name)
	for _, n := range []provider.Node{bad, good} {
		if _, err := p.Launch(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	ev := waitEvent(t, p, 5*time.Second)
	if ev.Node != bad.Name || ev.Kind != provider.BootFailed || ev.Reason == "" || ev.At.IsZero() {
		t.Fatalf("event %+v, want BootFailed for %s", ev, bad.Name)
	}
	testkit.WaitFor(t, 5*time.Second, "the good node registers", func() (bool, error) { return len(pub.registered()[good.Name]) == 1, nil })
	if len(pub.registered()[bad.Name]) != 0 || p.State(bad.Name) != Failed {
		t.Errorf("failed node registered or is %v", p.State(bad.Name))
	}
	if s, _ := p.LastSample(bad.Name); !s.BootFails {
		t.Errorf("sample %+v does not say the boot fails", s)
	}
	// The forced failure was for one boot: the next one registers.
	l, err := p.Launch(ctx, bad)
	if err != nil || !l.Started || l.PrevExit != "boot failed" {
		t.Fatalf("relaunch: %+v, %v", l, err)
	}
	testkit.WaitFor(t, 5*time.Second, "the relaunched node registers", func() (bool, error) { return len(pub.registered()[bad.Name]) == 1, nil })

	// FailBoot on a node already booting turns that boot into a failure.
	slow := Config{Seed: 1, TimeScale: 1, BootFailureAfter: time.Millisecond, HeartbeatInterval: time.Hour}
	q, qpub := newSim(t, slow)
	if _, err := q.Launch(ctx, bad); err != nil {
		t.Fatal(err)
	}
	q.FailBoot(bad.Name)
	if ev := waitEvent(t, q, 5*time.Second); ev.Kind != provider.BootFailed {
		t.Fatalf("event %+v, want BootFailed", ev)
	}
	if len(qpub.registered()) != 0 {
		t.Errorf("a failed boot registered")
	}

	// By probability: every boot fails, and each gets its event.
	all, allPub := newSim(t, Config{Seed: 9, TimeScale: 1e-4, BootFailureRate: 1, BootFailureAfter: time.Minute})
	for i := range 5 {
		if _, err := all.Launch(ctx, simNodeSpec("all", i, "")); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]bool{}
	for range 5 {
		ev := waitEvent(t, all, 5*time.Second)
		got[ev.Node] = ev.Kind == provider.BootFailed
	}
	for i := range 5 {
		if !got[simNodeSpec("all", i, "").Name] {
			t.Errorf("no BootFailed for node %d: %v", i, got)
		}
	}
	if len(allPub.registered()) != 0 || all.Stats().BootFailures != 5 {
		t.Errorf("registered %d, stats %+v", len(allPub.registered()), all.Stats())
	}
}

func TestSlowBootIsTheTail(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg := Config{Seed: 5, TimeScale: 1e-9, SlowBootFactor: 6}
	normal, _ := newSim(t, cfg)
	slowed, _ := newSim(t, cfg)
	n := simNodeSpec("slow", 1, "ON_DEMAND")
	slowed.SlowBoot(n.Name)
	for _, p := range []*Provider{normal, slowed} {
		if _, err := p.Launch(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	a, _ := normal.LastSample(n.Name)
	b, _ := slowed.LastSample(n.Name)
	if a.Slow || !b.Slow || math.Abs(float64(b.Simulated)/float64(a.Simulated)-6) > 1e-6 {
		t.Errorf("normal %+v, slowed %+v: want the same draw, 6× longer", a, b)
	}
	// By probability: about SlowBootRate of boots are slow.
	rate, _ := newSim(t, Config{Seed: 5, TimeScale: 1e-9, SlowBootRate: 0.1})
	slow := 0
	for i := range 1000 {
		n := simNodeSpec("rate", i, "")
		if _, err := rate.Launch(ctx, n); err != nil {
			t.Fatal(err)
		}
		if s, _ := rate.LastSample(n.Name); s.Slow {
			slow++
		}
	}
	if slow < 70 || slow > 130 {
		t.Errorf("SlowBootRate 0.1: %d of 1000 slow", slow)
	}
}

func TestPreemption(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p, pub := newSim(t, fast())
	spot, keep := simNodeSpec("pre", 1, "SPOT"), simNodeSpec("pre", 2, "SPOT")
	for _, n := range []provider.Node{spot, keep} {
		if _, err := p.Launch(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	testkit.WaitFor(t, 5*time.Second, "heartbeats", func() (bool, error) {
		hb, _ := pub.heartbeats()
		return hb[spot.Name] > 0, nil
	})
	if err := p.Preempt(spot.Name); err != nil {
		t.Fatal(err)
	}
	ev := waitEvent(t, p, 5*time.Second)
	if ev.Node != spot.Name || ev.Kind != provider.Preempted || !strings.Contains(ev.Reason, "preempted") {
		t.Fatalf("event %+v, want Preempted for %s", ev, spot.Name)
	}
	hb, _ := pub.heartbeats()
	at, keepAt := hb[spot.Name], hb[keep.Name]
	testkit.WaitFor(t, 5*time.Second, "three more heartbeat rounds", func() (bool, error) {
		hb, _ := pub.heartbeats()
		return hb[keep.Name] >= keepAt+3, nil
	})
	if hb, _ := pub.heartbeats(); hb[spot.Name] > at+1 {
		t.Errorf("preempted node sent %d more heartbeats", hb[spot.Name]-at)
	}
	if err := p.Preempt(spot.Name); err == nil {
		t.Error("preempting a preempted node succeeded")
	}
	if err := p.Preempt("projects/default/clusters/pre/nodes/nope"); err == nil {
		t.Error("preempting an unknown node succeeded")
	}
	if l, err := p.Launch(ctx, spot); err != nil || !l.Started || l.PrevExit != "preempted by provider" {
		t.Errorf("relaunch after preemption: %+v, %v", l, err)
	}

	// By rate: SPOT nodes are reclaimed, ON_DEMAND ones never.
	rate, _ := newSim(t, Config{Seed: 2, TimeScale: 1e-4, PreemptionRate: 60, HeartbeatInterval: time.Hour})
	for i := range 5 {
		for _, capType := range []string{"SPOT", "ON_DEMAND"} {
			if _, err := rate.Launch(ctx, simNodeSpec("r-"+strings.ToLower(capType), i, capType)); err != nil {
				t.Fatal(err)
			}
		}
	}
	for range 5 {
		ev := waitEvent(t, rate, 5*time.Second)
		if ev.Kind != provider.Preempted || !strings.Contains(ev.Node, "/r-spot/") {
			t.Errorf("event %+v, want a SPOT node preempted", ev)
		}
	}
	for i := range 5 {
		if st := rate.State(simNodeSpec("r-on_demand", i, "").Name); st == Preempted {
			t.Errorf("ON_DEMAND node %d preempted", i)
		}
	}
}

func TestRegistrationRetriesAfterPublishFailure(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p, pub := newSim(t, Config{Seed: 1, TimeScale: 1e-6, HeartbeatInterval: time.Hour})
	pub.mu.Lock()
	pub.failNext = 1
	pub.mu.Unlock()
	n := simNodeSpec("retry", 1, "")
	if _, err := p.Launch(ctx, n); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 5*time.Second, "registration after a failed publish", func() (bool, error) {
		return len(pub.registered()[n.Name]) == 1, nil
	})
	if s := p.Stats(); s.Registered != 1 {
		t.Errorf("stats %+v", s)
	}
}

func TestLaunchRejectsBadInputAndClosed(t *testing.T) {
	t.Parallel()
	p := New(Config{TimeScale: -1, StockoutRate: math.NaN(), SlowBootFactor: 0.5}, &fakePub{})
	if _, err := p.Launch(context.Background(), provider.Node{}); err == nil {
		t.Error("launch of a node without a name succeeded")
	}
	if p.cfg.TimeScale != 1 || p.cfg.StockoutRate != 0 || p.cfg.SlowBootFactor != 5 {
		t.Errorf("settings not clamped: %+v", p.cfg)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Launch(context.Background(), simNodeSpec("closed", 1, "")); err == nil {
		t.Error("launch after Close succeeded")
	}
}

// TestRepairsTakeTheirSimulatedTime: a reboot, reimage and replacement
// take their configured (default 3m, 15m, 1h) simulated time, scaled; the
// node registers again with the repair's boot id, and a repeated call for
// the same boot changes nothing.
func TestRepairsTakeTheirSimulatedTime(t *testing.T) {
	t.Parallel()
	p, pub := newSim(t, fast())
	n := simNodeSpec("rep", 1, "ON_DEMAND")
	if _, err := p.Launch(context.Background(), n); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, "first registration", func() (bool, error) { return len(pub.registered()[n.Name]) == 1, nil })
	for i, c := range []struct {
		kind provider.RepairKind
		sim  time.Duration
	}{{provider.Reboot, DefaultRebootTime}, {provider.Reimage, DefaultReimageTime}, {provider.Replace, DefaultReplaceTime}} {
		boot := fmt.Sprintf("boot-%d", i)
		l, err := p.Repair(context.Background(), n, c.kind, boot)
		want := time.Duration(float64(c.sim) * 1e-4)
		if err != nil || !l.Started || l.Expect != want {
			t.Fatalf("%s = %+v, %v; want Expect %v", c.kind, l, err, want)
		}
		if s, _ := p.LastSample(n.Name); s.Simulated != c.sim || s.Latency != want || s.Repair != c.kind {
			t.Fatalf("%s sample = %+v", c.kind, s)
		}
		if again, err := p.Repair(context.Background(), n, c.kind, boot); err != nil || again.Started || again.Expect > want {
			t.Fatalf("repeated %s = %+v, %v", c.kind, again, err)
		}
		testkit.WaitFor(t, 10*time.Second, c.kind.String()+" registration", func() (bool, error) {
			regs := pub.registered()[n.Name]
			return len(regs) == i+2 && regs[i+1].GetHostBootId() == boot && regs[i+1].GetBootId() == boot, nil
		})
	}
	// Unset, the defaults: 3m, 15m, 1h.
	q := New(Config{}, &fakePub{})
	defer q.Close()
	if q.cfg.RebootTime != 3*time.Minute || q.cfg.ReimageTime != 15*time.Minute || q.cfg.ReplaceTime != time.Hour {
		t.Fatalf("defaults = %v %v %v", q.cfg.RebootTime, q.cfg.ReimageTime, q.cfg.ReplaceTime)
	}
}
