package app

import (
	"context"
	"flag"
	"log/slog"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/bus"
	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/store"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/health/internal/scan"
)

const scanCluster = "projects/default/clusters/c1"

type verdicts struct {
	mu  sync.Mutex
	got []*loomv1.HealthCheckResult
}

func (v *verdicts) add(_ context.Context, r *loomv1.HealthCheckResult) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.got = append(v.got, r)
}

// TestScanBisectsAcrossRestarts runs a scan on a real Redis: the ring
// fails, the bisection goes on across a restart of the scanner after each
// round (its scans are stored), and the bad node's verdict comes once.
func TestScanBisectsAcrossRestarts(t *testing.T) {
	t.Parallel()
	_, rdb := testkit.Redis(t)
	st := store.New(rdb, "health:")
	ctx := testkit.Context(t, 30*time.Second)
	clk := &clock{t: time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)}
	v := &verdicts{}
	start := func() *Scanner {
		s := NewScanner(st, scan.DefaultConfig(), clk.now, slog.Default(), v.add)
		if err := s.Start(ctx); err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := start()
	ev := func(topic string, p proto.Message) envelope.Event {
		return envelope.New(topic, scanCluster, "loom/test", p)
	}
	hosts := []string{"n1", "n2", "n3", "n4"}
	for i, h := range hosts {
		name := scanCluster + "/nodes/" + h
		for _, e := range []envelope.Event{
			ev(topics.NodeEvents, &eventsv1.NodeChanged{Node: &loomv1.Node{Name: name, Cluster: scanCluster, Hostname: h, State: loomv1.Node_READY}}),
			ev(topics.NodeTelemetry, &eventsv1.AgentRegistered{Node: name, Cluster: scanCluster, Hostname: h, CheckAddr: "127.0.0.1:70" + string(rune('0'+i))}),
		} {
			if err := s.Handle(ctx, e); err != nil {
				t.Fatal(err)
			}
		}
	}
	scanCmd := ev(topics.HealthCommands, &eventsv1.ScanNodes{Cluster: scanCluster, ScanId: "s1", Checks: []string{scan.AllReduce}})
	if err := s.Handle(ctx, scanCmd); err != nil {
		t.Fatal(err)
	}
	if n, _ := st.OutboxLen(ctx); n != 4 {
		t.Fatalf("outbox holds %d commands, want the ring's 4", n)
	}
	// The same command again (redelivered) changes nothing.
	if err := s.Handle(ctx, scanCmd); err != nil {
		t.Fatal(err)
	}
	if n, _ := st.OutboxLen(ctx); n != 4 {
		t.Fatalf("a redelivered command: outbox holds %d", n)
	}
	bad := "n3"
	for round := 0; round < 10; round++ {
		sc := s.state.Scan(scanCluster, "s1")
		if sc.Done {
			break
		}
		var pending []*scan.Run
		for _, r := range sc.Runs {
			if !r.Done {
				pending = append(pending, r)
			}
		}
		sort.Slice(pending, func(a, b int) bool { return pending[a].ID < pending[b].ID })
		for _, r := range pending {
			out := loomv1.CheckOutcome_CHECK_PASS
			if slices.ContainsFunc(sc.Rings[r.Ring].Members, func(m string) bool { return strings.HasSuffix(m, "/"+bad) }) {
				out = loomv1.CheckOutcome_CHECK_WARN
			}
			res := &loomv1.HealthCheckResult{Name: scanCluster + "/healthResults/" + r.ID, Node: r.Node, Hostname: r.Hostname, Check: r.Check,
				Outcome: out, ScanId: "s1", EndTime: timestamppb.New(clk.now())}
			if err := s.Handle(ctx, ev(topics.NodeTelemetry, &eventsv1.HealthCheckCompleted{Result: res})); err != nil {
				t.Fatal(err)
			}
		}
		s = start() // a restart between rounds
	}
	if !s.state.Scan(scanCluster, "s1").Done {
		t.Fatal("the scan did not finish")
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.got) != 1 || v.got[0].GetHostname() != bad || v.got[0].GetOutcome() != loomv1.CheckOutcome_CHECK_FAIL {
		t.Fatalf("verdicts %v", v.got)
	}
	resp, err := s.ListHealthResults(ctx, &loomv1.ListHealthResultsRequest{Cluster: scanCluster, Hostname: bad, Check: scan.AllReduce})
	if err != nil || len(resp.GetResults()) == 0 || resp.GetResults()[0].GetOutcome() != loomv1.CheckOutcome_CHECK_FAIL {
		t.Fatalf("listed after restarts: %v %v", resp.GetResults(), err)
	}
}

func TestScanEventsFilterAndInvalid(t *testing.T) {
	t.Parallel()
	if ScanFilter(bus.Record{Type: envelope.TypeOf(&eventsv1.GpuTelemetry{})}) || !ScanFilter(bus.Record{Type: envelope.TypeOf(&eventsv1.ScanNodes{})}) {
		t.Fatal("filter")
	}
	_, rdb := testkit.Redis(t)
	s := NewScanner(store.New(rdb, "health:"), scan.DefaultConfig(), time.Now, slog.Default(), nil)
	ctx := testkit.Context(t, 10*time.Second)
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	err := s.Handle(ctx, envelope.New(topics.HealthCommands, "x", "loom/test", &eventsv1.ScanNodes{}))
	if !bus.IsPermanent(err) {
		t.Fatalf("a ScanNodes without cluster: %v, want permanent", err)
	}
}

// TestScanNodeRateDropsFlood: the scans' consumer group holds each node to
// the same token bucket as the telemetry path (-node-rate, -node-burst):
// a node flooding HealthCheckCompleted records, each a Redis write of up
// to 64 KiB, gets its burst stored and the rest dropped unhandled, counted
// and logged with its name; past its burst even a malformed result is
// dropped, not dead-lettered (a write to the dead-letter topic each). Its
// bucket refills at the rate.
func TestScanNodeRateDropsFlood(t *testing.T) {
	t.Parallel()
	_, rdb := testkit.Redis(t)
	st := store.New(rdb, "health:")
	ctx := testkit.Context(t, 30*time.Second)
	clk := &clock{t: time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)}
	s := NewScanner(st, scan.DefaultConfig(), clk.now, slog.Default(), nil)
	var mu sync.Mutex
	drops := map[string]int{}
	s.SetDropped(func(reason string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		drops[reason]++
		if !slices.Contains(args, any("nodes/"+scanCluster+"/nodes/n1")) && !slices.Contains(args, any(scanCluster+"/nodes/n1")) {
			t.Errorf("drop %s does not name the node: %v", reason, args)
		}
	})
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	const node = scanCluster + "/nodes/n1"
	signed := func(i int, name string) envelope.Event {
		ev := envelope.New(topics.NodeTelemetry, node, "loom/agent", &eventsv1.HealthCheckCompleted{Result: &loomv1.HealthCheckResult{
			Name: name, Node: node, Check: scan.Disk, Outcome: loomv1.CheckOutcome_CHECK_PASS, Detail: strings.Repeat("x", 1000)}})
		ev.Signer, ev.Offset, ev.HighWaterMark = "nodes/"+node, int64(i), 1<<20
		return ev
	}
	const flood = 250
	for i := range flood {
		if err := s.Handle(ctx, signed(i, scanCluster+"/healthResults/flood-"+strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	stored, err := st.HGetAll(ctx, KeyScanResults)
	if err != nil {
		t.Fatal(err)
	}
	if len(stored) != 200 {
		t.Fatalf("%d of a flood of %d results stored, want the default burst of 200", len(stored), flood)
	}
	if err := s.Handle(ctx, signed(flood, "not-a-result-name")); err != nil {
		t.Fatalf("a malformed result past the rate: %v, want dropped", err)
	}
	mu.Lock()
	if drops["scan-rate"] != flood-200+1 {
		t.Errorf("drops %v, want %d scan-rate", drops, flood-200+1)
	}
	mu.Unlock()
	clk.advance(time.Second) // 20 tokens
	if err := s.Handle(ctx, signed(flood+1, scanCluster+"/healthResults/later")); err != nil {
		t.Fatal(err)
	}
	if s.state.Result(scanCluster+"/healthResults/later") == nil {
		t.Fatal("a result a second later, the bucket refilled: not stored")
	}
}

func TestScanFlags(t *testing.T) {
	t.Parallel()
	var f ScanFlags
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	f.Register(fs)
	if err := fs.Parse([]string{"-check-validity", "gpu_diag=12h,allreduce=2h", "-allreduce-min-busbw", "a3-highgpu-8g=40,*=5",
		"-scan-interval", "6h", "-allreduce-sizes", "1M,8M"}); err != nil {
		t.Fatal(err)
	}
	cfg, err := f.Config()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Validity[scan.GPUDiag] != 12*time.Hour || cfg.Validity[scan.AllReducePair] != 2*time.Hour || cfg.Validity[scan.Disk] != time.Hour ||
		cfg.MinBusBW["a3-highgpu-8g"] != 40 || cfg.MinBusBW[""] != 5 || cfg.Interval != 6*time.Hour || cfg.AllReduceParams["sizes"] != "1M,8M" ||
		cfg.StragglerRatio != 0.8 {
		t.Fatalf("config %+v", cfg)
	}
	for _, bad := range []ScanFlags{{Validity: "gpu_diag"}, {Validity: "disk=-1h"}, {MinBusBW: "x=fast"}, {MinBusBW: "*=NaN"}, {MinBusBW: "*=-1"},
		{Sizes: "2G"}, {Sizes: "lots"}, {StragglerRatio: 1.5}, {Interval: -time.Second}} {
		if _, err := bad.Config(); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}
