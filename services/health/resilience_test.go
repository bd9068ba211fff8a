package health_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/bus"
	"github.com/loom-ml/loom/libs/config"
	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/health"
)

// TestXidRemediatesThroughTheBus: an Xid 79 from a node's agent takes the
// node out and asks the provisioner to reboot it; ListNodeHealth (service
// token required) shows it rebooting; an operator's InjectFault reaches the
// node's agent as InjectNodeFault.
func TestXidRemediatesThroughTheBus(t *testing.T) {
	t.Parallel()
	broker := testkit.Broker(t)
	redisAddr, _ := testkit.Redis(t)
	addr := freeAddr(t)
	cfg := health.Config{Common: config.Common{Brokers: []string{broker}, RedisAddr: redisAddr, ServiceKeyFile: testkit.ServiceKeyFile(t),
		GRPCAddr: addr, HTTPAddr: "127.0.0.1:0", LogLevel: "warn"}, HeartbeatTimeout: time.Minute}
	testkit.Start(t, "health", func(ctx context.Context) error { return health.Run(ctx, cfg) })
	addNode(t, broker)
	client := loomv1.NewHealthServiceClient(testkit.Dial(t, addr))
	waitKnown(t, client)
	testkit.PublishAsNodes(t, broker, cluster,
		envelope.New(topics.NodeTelemetry, node, "loom/agent", &eventsv1.AgentRegistered{Node: node, Cluster: cluster, Hostname: "gpu-0001", BootId: "b1", SimulatedGpus: true}),
		envelope.New(topics.NodeTelemetry, node, "loom/agent", &eventsv1.XidObserved{Node: node, Cluster: cluster, Gpu: 3, Xid: 79, Time: timestamppb.Now()}))

	ev := testkit.WaitEvent(t, broker, topics.HealthEvents, wait, verdict(eventsv1.NodeHealth_UNHEALTHY))
	v := ev.Payload.(*eventsv1.NodeHealthChanged)
	if v.GetReason() != "Xid 79: GPU has fallen off the bus" || v.GetXid() != 79 || v.GetSetBy() != "loom-health" || v.GetCheckpointFirst() {
		t.Fatalf("verdict: %v", v)
	}
	rev := testkit.WaitEvent(t, broker, topics.RemediationCommand, wait, func(e envelope.Event) bool {
		r, ok := e.Payload.(*eventsv1.RemediateNode)
		return ok && r.GetNode() == node
	})
	if r := rev.Payload.(*eventsv1.RemediateNode); r.GetAction() != loomv1.RemediationAction_ACTION_REBOOT || rev.Key != node {
		t.Fatalf("remediation: %v key %q", r, rev.Key)
	}

	var nodes []*loomv1.NodeHealth
	testkit.WaitFor(t, wait, "ListNodeHealth shows the node rebooting", func() (bool, error) {
		resp, err := client.ListNodeHealth(testkit.Context(t, 5*time.Second), &loomv1.ListNodeHealthRequest{Cluster: cluster})
		if err != nil {
			return false, nil
		}
		nodes = resp.GetNodes()
		return len(nodes) == 1 && nodes[0].GetState() == loomv1.RemediationState_NODE_REBOOTING, nil
	})
	if n := nodes[0]; n.GetHostname() != "gpu-0001" || n.GetNextAction() != loomv1.RemediationAction_ACTION_REBOOT || !n.GetSimulated() || n.GetFailures() != 1 {
		t.Fatalf("node health: %v", n)
	}
	// The scans' store answers: no check has run, so no result.
	if res, err := client.ListHealthResults(testkit.Context(t, 5*time.Second), &loomv1.ListHealthResultsRequest{Cluster: cluster}); err != nil || len(res.GetResults()) != 0 {
		t.Fatalf("ListHealthResults before any check: %v, %v", res, err)
	}
	anon, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer anon.Close()
	if _, err := loomv1.NewHealthServiceClient(anon).ListNodeHealth(testkit.Context(t, 5*time.Second), &loomv1.ListNodeHealthRequest{Cluster: cluster}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("ListNodeHealth without a service token: %v", err)
	}

	testkit.PublishAs(t, broker, "gateway", envelope.New(topics.HealthCommands, cluster, "loom/gateway", &eventsv1.InjectFault{Cluster: cluster, Hostname: "gpu-0001",
		Fault: &loomv1.Fault{Kind: loomv1.FaultKind_FAULT_ECC_DBE, Gpu: 1, Value: 1}, User: "alice"}))
	iev := testkit.WaitEvent(t, broker, topics.NodeCommands, wait, func(e envelope.Event) bool {
		_, ok := e.Payload.(*eventsv1.InjectNodeFault)
		return ok
	})
	if in := iev.Payload.(*eventsv1.InjectNodeFault); iev.Key != node || in.GetNode() != node || in.GetFault().GetKind() != loomv1.FaultKind_FAULT_ECC_DBE || in.GetUser() != "alice" {
		t.Fatalf("inject: key %q %v", iev.Key, in)
	}
}

// TestMain removes the health binary healthBinary built, if any.
func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" {
		_ = os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

// healthBinary builds the health binary once per test binary.
var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

func healthBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "loom-health-bin")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "health")
		cmd := exec.Command("go", "build", "-o", binPath, "./cmd/health")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// TestHealthStallDeclaresNoNode runs health as its own process, with three
// nodes heartbeating, and stops it (SIGSTOP) for three heartbeat timeouts
// while the nodes go on beating, as in a stall of the machine. After SIGCONT
// no node may be declared UNHEALTHY (nothing for the scheduler to requeue)
// nor even unreachable. A canary node that falls silent when health resumes
// is declared a timeout later: the check loop ran after the stall, and knew
// silence from life.
func TestHealthStallDeclaresNoNode(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the health binary")
	}
	t.Parallel()
	bin := healthBinary(t)
	broker := testkit.Broker(t)
	redisAddr, _ := testkit.Redis(t)
	// Long enough that a loaded test machine does not delay the beats past
	// it; the stall is three of it.
	const timeout = 3 * time.Second
	addr := freeAddr(t)
	logs, err := os.Create(filepath.Join(t.TempDir(), "health.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-brokers", broker, "-redis", redisAddr, "-service-key-file", testkit.ServiceKeyFile(t),
		"-grpc-addr", addr, "-http-addr", "127.0.0.1:0", "-log-level", "info", "-heartbeat-timeout", timeout.String())
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(logs.Name())
			t.Logf("health log:\n%s", b)
		}
	})

	names := make([]string, 4)
	var evs []envelope.Event
	for i := range names {
		names[i] = fmt.Sprintf("%s/nodes/gpu-%04d", cluster, i)
		evs = append(evs, envelope.New(topics.NodeEvents, names[i], "loom/test", &eventsv1.NodeChanged{Node: &loomv1.Node{Name: names[i], Cluster: cluster,
			Hostname: fmt.Sprintf("gpu-%04d", i), State: loomv1.Node_READY}}))
	}
	testkit.PublishAs(t, broker, "provisioner", evs...)
	canary := names[3]

	// The agents: every node beats every timeout/8 until the test ends; the
	// canary stops when told.
	ps := map[string]*bus.Producer{}
	for _, n := range names {
		ps[n] = testkit.NodeProducer(t, broker, n, cluster, "gpu")
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopCanary := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(timeout / 8)
		defer tick.Stop()
		canaryOn := true
		for {
			select {
			case <-ctx.Done():
				return
			case <-stopCanary:
				canaryOn, stopCanary = false, nil
			case <-tick.C:
				for _, n := range names {
					if n == canary && !canaryOn {
						continue
					}
					pctx, pcancel := context.WithTimeout(ctx, timeout)
					_ = ps[n].Publish(pctx, envelope.New(topics.NodeTelemetry, n, "loom/agent", &eventsv1.Heartbeat{Node: n, Cluster: cluster, BootId: "b", Time: timestamppb.Now()}))
					pcancel()
				}
			}
		}
	}()
	t.Cleanup(func() { cancel(); wg.Wait() })

	client := loomv1.NewHealthServiceClient(testkit.Dial(t, addr))
	testkit.WaitFor(t, wait, "health watches the four nodes", func() (bool, error) {
		resp, err := client.ListNodeHealth(testkit.Context(t, 5*time.Second), &loomv1.ListNodeHealthRequest{Cluster: cluster})
		if err != nil {
			return false, nil
		}
		beating := 0
		for _, n := range resp.GetNodes() {
			if n.GetLastHeartbeat() != nil {
				beating++
			}
		}
		return beating == len(names), nil
	})

	// The stall: health is stopped for three timeouts while the nodes beat
	// on. The length of the stall is the fault injected, not a wait for
	// something to happen.
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stall := time.NewTimer(3 * timeout)
	<-stall.C
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	close(stopCanary)

	ev := testkit.WaitEvent(t, broker, topics.HealthEvents, wait, func(e envelope.Event) bool {
		v, ok := e.Payload.(*eventsv1.NodeHealthChanged)
		return ok && v.GetNode() == canary && v.GetHealth() == eventsv1.NodeHealth_UNHEALTHY
	})
	for _, e := range testkit.Events(t, broker, topics.HealthEvents) {
		v, ok := e.Payload.(*eventsv1.NodeHealthChanged)
		if !ok || v.GetNode() == canary {
			continue
		}
		t.Errorf("node %s got a verdict after health's own stall (offset %d, canary's at %d): %v", v.GetNode(), e.Offset, ev.Offset, v)
	}
	if err := cmd.Process.Signal(syscall.Signal(0)); errors.Is(err, os.ErrProcessDone) {
		t.Fatal("health exited")
	}
}

// TestLastXidJudgedAcrossHealthRestart: health's record of each GPU's
// last_xid is in Redis, so a health that restarts judges a sample against
// what it judged before it stopped. Two nodes report; health stops; while it
// is down node A's GPU raises Xid 79 (seen only in its next sample) and node
// B's sample still carries the Xid 79 health had seen before. The restarted
// health drains A and leaves B alone.
func TestLastXidJudgedAcrossHealthRestart(t *testing.T) {
	t.Parallel()
	broker := testkit.Broker(t)
	redisAddr, _ := testkit.Redis(t)
	nodeA, nodeB := cluster+"/nodes/gpu-000a", cluster+"/nodes/gpu-000b"
	start := func() (*testkit.Service, loomv1.HealthServiceClient) {
		addr := freeAddr(t)
		cfg := health.Config{Common: config.Common{Brokers: []string{broker}, RedisAddr: redisAddr, ServiceKeyFile: testkit.ServiceKeyFile(t),
			GRPCAddr: addr, HTTPAddr: "127.0.0.1:0", LogLevel: "warn"}, HeartbeatTimeout: time.Minute}
		svc := testkit.Start(t, "health", func(ctx context.Context) error { return health.Run(ctx, cfg) })
		return svc, loomv1.NewHealthServiceClient(testkit.Dial(t, addr))
	}
	sample := func(n string, xid int32) envelope.Event {
		return envelope.New(topics.NodeTelemetry, n, "loom/agent", &eventsv1.GpuTelemetry{Node: n, Cluster: cluster, Time: timestamppb.Now(), Simulated: true,
			Gpus: []*loomv1.GpuSample{{Index: 0, TemperatureC: 50}, {Index: 1, TemperatureC: 50, LastXid: xid}}})
	}
	// sampled waits until health holds a sample of every node with GPU 1's
	// last_xid as given (memory takes a sample only once Redis has it).
	sampled := func(client loomv1.HealthServiceClient, want map[string]int32) {
		t.Helper()
		testkit.WaitFor(t, wait, fmt.Sprintf("health holds the samples %v", want), func() (bool, error) {
			resp, err := client.ListNodeHealth(testkit.Context(t, 5*time.Second), &loomv1.ListNodeHealthRequest{Cluster: cluster})
			if err != nil {
				return false, nil
			}
			got := 0
			for _, n := range resp.GetNodes() {
				if x, ok := want[n.GetNode()]; ok && len(n.GetGpus()) == 2 && n.GetGpus()[1].GetLastXid() == x {
					got++
				}
			}
			return got == len(want), nil
		})
	}

	svc, client := start()
	testkit.PublishAs(t, broker, "provisioner",
		envelope.New(topics.NodeEvents, nodeA, "loom/test", &eventsv1.NodeChanged{Node: &loomv1.Node{Name: nodeA, Cluster: cluster, Hostname: "gpu-000a", State: loomv1.Node_READY}}),
		envelope.New(topics.NodeEvents, nodeB, "loom/test", &eventsv1.NodeChanged{Node: &loomv1.Node{Name: nodeB, Cluster: cluster, Hostname: "gpu-000b", State: loomv1.Node_READY}}))
	testkit.WaitFor(t, wait, "health knows the nodes", func() (bool, error) {
		resp, err := client.ListNodeHealth(testkit.Context(t, 5*time.Second), &loomv1.ListNodeHealthRequest{Cluster: cluster})
		return err == nil && len(resp.GetNodes()) == 2, nil
	})
	// B's first sample already carries an Xid: nothing to compare with,
	// not judged (the prolog is the net there); it is the value health saw.
	testkit.PublishAsNodes(t, broker, cluster, sample(nodeA, 0), sample(nodeB, 79))
	sampled(client, map[string]int32{nodeA: 0, nodeB: 79})
	if err := svc.Stop(); err != nil {
		t.Fatal(err)
	}

	testkit.PublishAsNodes(t, broker, cluster, sample(nodeA, 79), sample(nodeB, 79))
	_, client = start()
	ev := testkit.WaitEvent(t, broker, topics.HealthEvents, wait, func(e envelope.Event) bool {
		v, ok := e.Payload.(*eventsv1.NodeHealthChanged)
		return ok && v.GetNode() == nodeA && v.GetHealth() == eventsv1.NodeHealth_UNHEALTHY
	})
	if v := ev.Payload.(*eventsv1.NodeHealthChanged); v.GetReason() != "Xid 79: GPU has fallen off the bus" || v.GetXid() != 79 {
		t.Fatalf("A's verdict after health's restart: %v", v)
	}
	// Both samples were taken (one partition per key: B's may come after
	// A's verdict); B was not judged again.
	sampled(client, map[string]int32{nodeA: 79, nodeB: 79})
	for _, e := range testkit.Events(t, broker, topics.HealthEvents) {
		if v, ok := e.Payload.(*eventsv1.NodeHealthChanged); ok && v.GetNode() == nodeB {
			t.Fatalf("B was judged for the Xid health had already seen: %v", v)
		}
	}
	resp, err := client.ListNodeHealth(testkit.Context(t, 5*time.Second), &loomv1.ListNodeHealthRequest{Cluster: cluster})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range resp.GetNodes() {
		if n.GetNode() == nodeB && (n.GetState() != loomv1.RemediationState_NODE_HEALTHY || n.GetFailures() != 0) {
			t.Fatalf("B after health's restart: %v", n)
		}
	}
}
