package provisioner

import (
	"bytes"
	"context"
	"flag"
	"io/fs"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/loom-ml/loom/libs/config"
	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/proc"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/testkit/stall"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/agent"
	"github.com/loom-ml/loom/services/provisioner/internal/provider/local"
	"github.com/loom-ml/loom/services/provisioner/internal/provider/sim"
)

// TestMain doubles as the agent binary: the local provider re-executes this
// test binary with LOOM_TEST_RUN_AGENT=1, and it then runs a real agent from
// the LOOM_* variables the provider set.
func TestMain(m *testing.M) {
	stall.Main() // the process whose reads block, of TestAgentsLookIsNotHeldUpByAStalledProcess
	if os.Getenv("LOOM_TEST_RUN_AGENT") == "1" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err := agent.RunArgs(ctx, nil)
		stop()
		os.Exit(config.Exit("agent", err, os.Stderr))
	}
	os.Exit(m.Run())
}

const (
	project = "projects/default"
	wait    = 60 * time.Second
)

// fixture is a provisioner's surroundings. grpcAddr is set only by a test
// that dials the provisioner: the others let it bind any free port, since a
// port picked in advance (testkit.FreeAddr) can be taken by another test's
// process before the provisioner binds it.
type fixture struct {
	broker, redis, data, grpcAddr string
}

func (f *fixture) config(t testing.TB, stopAgents bool) Config {
	grpcAddr := f.grpcAddr
	if grpcAddr == "" {
		grpcAddr = "127.0.0.1:0"
	}
	return Config{
		Common: config.Common{Brokers: []string{f.broker}, RedisAddr: f.redis, GRPCAddr: grpcAddr, ServiceKeyFile: testkit.ServiceKeyFile(t),
			HTTPAddr: "127.0.0.1:0", LogLevel: "warn"},
		Provider:      "local",
		AgentIdentity: AgentIdentityDirect, // no gateway here to register with
		DataDir:       f.data,
		AgentCommand:  []string{os.Args[0]},
		AgentEnv: []string{"LOOM_TEST_RUN_AGENT=1", "LOOM_HEARTBEAT_INTERVAL=200ms", "LOOM_LOG_LEVEL=warn",
			"LOOM_CREATE_TOPICS=false"},
		StopAgentsOnExit:  stopAgents,
		ReconcileInterval: 200 * time.Millisecond,
		AgentStopGrace:    10 * time.Second,
	}
}

// startSim starts a provisioner on the sim provider (seed 7, at 1/1000 of
// real time: a 90 s simulated boot takes 90 ms; a heartbeat a second),
// with its own broker and Redis, after configure has changed its Config.
func startSim(t *testing.T, configure ...func(*Config)) *fixture {
	t.Helper()
	f := &fixture{broker: testkit.Broker(t), data: t.TempDir()}
	f.redis, _ = testkit.Redis(t)
	cfg := f.config(t, false)
	cfg.Provider = ProviderSim
	cfg.Sim.Seed, cfg.Sim.TimeScale, cfg.Sim.HeartbeatInterval = 7, 0.001, time.Second
	for _, c := range configure {
		c(&cfg)
	}
	testkit.Start(t, "provisioner", func(ctx context.Context) error { return Run(ctx, cfg) })
	return f
}

// run starts a provisioner; the returned stop ends it and returns Run's error.
func (f *fixture) run(t *testing.T, stopAgents bool) (stop func() error) {
	t.Helper()
	cfg := f.config(t, stopAgents)
	return testkit.Start(t, "provisioner", func(ctx context.Context) error { return Run(ctx, cfg) }).Stop
}

// clusterSpec is a cluster of one pool "gpu" of 2-GPU machines.
func clusterSpec(name string, nodes int32) *loomv1.Cluster {
	return &loomv1.Cluster{Name: name, Compute: &loomv1.ComputeResources{NodePools: []*loomv1.NodePool{
		{Id: "gpu", MachineType: "a2-highgpu-2g", NodeCount: nodes},
	}}}
}

func createCluster(op, id string, nodes int32) envelope.Event {
	name := project + "/clusters/" + id
	return envelope.New(topics.ClusterCommands, name, "loom/gateway", &eventsv1.CreateCluster{
		Operation: project + "/operations/" + op, Cluster: clusterSpec(name, nodes),
	})
}

func updateCluster(op, id string, nodes, grace int32) envelope.Event {
	name := project + "/clusters/" + id
	return envelope.New(topics.ClusterCommands, name, "loom/gateway", &eventsv1.UpdateCluster{
		Operation: project + "/operations/" + op, Cluster: clusterSpec(name, nodes), DrainGraceSeconds: grace,
	})
}

func nodeEvent(t *testing.T, broker, node string, match func(*loomv1.Node) bool) *loomv1.Node {
	t.Helper()
	return testkit.WaitEvent(t, broker, topics.NodeEvents, wait, func(ev envelope.Event) bool {
		nc, ok := ev.Payload.(*eventsv1.NodeChanged)
		return ok && nc.Node.GetName() == node && match(nc.Node)
	}).Payload.(*eventsv1.NodeChanged).Node
}

func clusterEvent[T any](t *testing.T, broker string, match func(T) bool) T {
	t.Helper()
	return testkit.WaitEvent(t, broker, topics.ClusterEvents, wait, func(ev envelope.Event) bool {
		p, ok := ev.Payload.(T)
		return ok && match(p)
	}).Payload.(T)
}

func waitRunning(t *testing.T, broker, op string) *loomv1.Cluster {
	t.Helper()
	return clusterEvent(t, broker, func(c *eventsv1.ClusterChanged) bool {
		return c.Operation == project+"/operations/"+op && c.OperationDone
	}).Cluster
}

// agents returns the pids of running processes whose environment names node
// (the agents the provider started for it, whoever started them).
//
// Each environment is read through proc.FindByEnv, whose reads are given up
// past a bound: a read of /proc/<pid>/environ waits on the process's memory
// map lock, which a process can hold for as long as it likes, and in `make
// test` another package's test holds one so on purpose (libs/testkit/stall)
// while this one runs (TestAgentsLookIsNotHeldUpByAStalledProcess).
func agents(t *testing.T, node string) []int {
	t.Helper()
	var out []int
	for _, pid := range proc.FindByEnv("LOOM_NODE=" + node) {
		if proc.HasEnv(pid, "LOOM_TEST_RUN_AGENT=1") {
			out = append(out, pid)
		}
	}
	return out
}

func pidOf(t *testing.T, workDir string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(workDir, local.PIDFile))
	if err != nil {
		t.Fatalf("pidfile: %v", err)
	}
	pid, err := strconv.Atoi(strings.Fields(string(b))[0])
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

func gone(pid int) bool {
	st, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	return err != nil || bytes.Contains(st, []byte(") Z "))
}

// killAgents kills every agent whose pidfile is under data (test cleanup).
func killAgents(data string) {
	_ = filepath.WalkDir(data, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Name() == local.PIDFile {
			if b, err := os.ReadFile(p); err == nil {
				if pid, err := strconv.Atoi(strings.Fields(string(b))[0]); err == nil && pid > 1 {
					_ = syscall.Kill(-pid, syscall.SIGKILL)
				}
			}
		}
		return nil
	})
}

func TestClusterLifecycleWithRealAgents(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/proc/self/environ"); err != nil {
		t.Skip("needs /proc")
	}
	f := &fixture{broker: testkit.Broker(t), data: t.TempDir(), grpcAddr: testkit.FreeAddr()}
	f.redis, _ = testkit.Redis(t)
	t.Cleanup(func() { killAgents(f.data) })
	demo := project + "/clusters/demo"
	nodes := []string{demo + "/nodes/gpu-0001", demo + "/nodes/gpu-0002"}

	// 1. Create a 2-node cluster: it reaches RUNNING with real agents.
	stop1 := f.run(t, false)
	testkit.PublishAs(t, f.broker, "gateway", createCluster("op1", "demo", 2))
	cl := waitRunning(t, f.broker, "op1")
	st := cl.GetStatus()
	shared := filepath.Join(f.data, "clusters", "demo", "home")
	if st.GetState() != loomv1.Cluster_RUNNING || st.GetReadyNodes() != 2 || st.GetTotalNodes() != 2 ||
		st.GetSharedDir() != shared || st.GetHomeDir() != shared || st.GetScratchDir() != filepath.Join(f.data, "clusters", "demo", "scratch") ||
		st.GetMessage() != "2 of 2 nodes ready" {
		t.Fatalf("final cluster = %v", cl)
	}
	clusterEvent(t, f.broker, func(c *eventsv1.ClusterChanged) bool {
		return c.Operation == project+"/operations/op1" && !c.OperationDone && c.Cluster.GetStatus().GetMessage() == "1 of 2 nodes ready"
	})
	pids := map[string]int{}
	for _, n := range nodes {
		host := filepath.Base(n)
		work := filepath.Join(f.data, "clusters", "demo", "nodes", host)
		testkit.WaitEvent(t, f.broker, topics.NodeEvents, wait, func(ev envelope.Event) bool {
			nc, ok := ev.Payload.(*eventsv1.NodeChanged)
			return ok && nc.Node.GetName() == n && nc.Node.GetState() == loomv1.Node_READY && nc.Node.GetWorkDir() == work
		})
		if fi, err := os.Stat(work); err != nil || !fi.IsDir() {
			t.Fatalf("work dir %s: %v", work, err)
		}
		pids[n] = pidOf(t, work)
		if a := agents(t, n); len(a) != 1 || a[0] != pids[n] {
			t.Fatalf("agents of %s = %v, want just %d", n, a, pids[n])
		}
	}
	for _, d := range []string{shared, st.GetScratchDir()} {
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
			t.Fatalf("shared dir %s: %v", d, err)
		}
	}

	// Reads come from the provisioner's memory over gRPC.
	conn, err := grpc.NewClient(f.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()), testkit.ServiceCredentials())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	clusters, nodeSvc := loomv1.NewClusterServiceClient(conn), loomv1.NewNodeServiceClient(conn)
	ctx := testkit.Context(t, wait)
	if got, err := clusters.GetCluster(ctx, &loomv1.GetClusterRequest{Name: demo}); err != nil || got.GetStatus().GetState() != loomv1.Cluster_RUNNING {
		t.Fatalf("GetCluster = %v, %v", got, err)
	}
	if _, err := clusters.GetCluster(ctx, &loomv1.GetClusterRequest{Name: project + "/clusters/nope"}); status.Code(err) != codes.NotFound {
		t.Fatalf("GetCluster of a missing cluster: %v", err)
	}
	if _, err := clusters.GetCluster(ctx, &loomv1.GetClusterRequest{Name: "demo"}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("GetCluster with a bad name: %v", err)
	}
	if _, err := clusters.CreateCluster(ctx, &loomv1.CreateClusterRequest{}); status.Code(err) != codes.Unimplemented {
		t.Fatalf("CreateCluster on the provisioner: %v", err)
	}
	if l, err := clusters.ListClusters(ctx, &loomv1.ListClustersRequest{Parent: project}); err != nil || len(l.GetClusters()) != 1 {
		t.Fatalf("ListClusters = %v, %v", l, err)
	}
	if l, err := nodeSvc.ListNodes(ctx, &loomv1.ListNodesRequest{Parent: project + "/clusters/-"}); err != nil ||
		len(l.GetNodes()) != 2 || l.GetNodes()[0].GetName() != nodes[0] || l.GetNodes()[1].GetState() != loomv1.Node_READY {
		t.Fatalf("ListNodes = %v, %v", l, err)
	}

	// The Slurm files are served and written to the shared home.
	slurmConf := func() string {
		t.Helper()
		cfg, err := clusters.GetSlurmConfig(ctx, &loomv1.GetSlurmConfigRequest{Name: demo})
		if err != nil {
			t.Fatalf("GetSlurmConfig: %v", err)
		}
		testkit.WaitFor(t, wait, "slurm.conf on disk", func() (bool, error) {
			b, err := os.ReadFile(filepath.Join(shared, ".loom", "slurm", "slurm.conf"))
			return err == nil && string(b) == cfg.GetSlurmConf(), nil
		})
		for _, f := range []string{"gres.conf", "topology.conf"} {
			if _, err := os.Stat(filepath.Join(shared, ".loom", "slurm", f)); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
		}
		return cfg.GetSlurmConf()
	}
	if conf := slurmConf(); !strings.Contains(conf, "gpu-[0001-0002]") {
		t.Fatalf("slurm.conf does not name the nodes:\n%s", conf)
	}
	if _, err := clusters.GetSlurmConfig(ctx, &loomv1.GetSlurmConfigRequest{Name: project + "/clusters/nope"}); status.Code(err) != codes.NotFound {
		t.Fatalf("GetSlurmConfig of a missing cluster: %v", err)
	}
	resSvc := loomv1.NewReservationServiceClient(conn)
	if l, err := resSvc.ListCapacity(ctx, &loomv1.ListCapacityRequest{Parent: project}); err != nil || len(l.GetPools()) == 0 {
		t.Fatalf("ListCapacity = %v, %v", l, err)
	} else {
		found := false
		for _, p := range l.GetPools() {
			found = found || (p.GetMachineType() == "a2-highgpu-2g" && p.GetInUse() == 2)
		}
		if !found {
			t.Fatalf("ListCapacity does not show the cluster's claim: %v", l)
		}
	}
	if _, err := resSvc.CreateReservation(ctx, &loomv1.CreateReservationRequest{}); status.Code(err) != codes.Unimplemented {
		t.Fatalf("CreateReservation on the provisioner: %v", err)
	}
	// Reservations come as commands and are read over gRPC.
	res := project + "/reservations/r1"
	testkit.PublishAs(t, f.broker, "gateway", envelope.New(topics.ClusterCommands, res, "loom/gateway", &eventsv1.CreateReservation{
		Operation: project + "/operations/res", Reservation: &loomv1.Reservation{Name: res, Zone: "us-central1-a", MachineType: "a3-ultragpu-8g", Count: 4}}))
	clusterEvent(t, f.broker, func(c *eventsv1.ReservationChanged) bool {
		return c.Operation == project+"/operations/res" && c.OperationDone
	})
	if r, err := resSvc.GetReservation(ctx, &loomv1.GetReservationRequest{Name: res}); err != nil || r.GetCount() != 4 || r.GetInUse() != 0 {
		t.Fatalf("GetReservation = %v, %v", r, err)
	}
	if l, err := resSvc.ListReservations(ctx, &loomv1.ListReservationsRequest{Parent: project}); err != nil || len(l.GetReservations()) != 1 {
		t.Fatalf("ListReservations = %v, %v", l, err)
	}
	testkit.PublishAs(t, f.broker, "gateway", envelope.New(topics.ClusterCommands, res, "loom/gateway",
		&eventsv1.DeleteReservation{Operation: project + "/operations/unres", Reservation: res}))
	clusterEvent(t, f.broker, func(c *eventsv1.ReservationDeleted) bool { return c.Operation == project+"/operations/unres" })
	if _, err := resSvc.GetReservation(ctx, &loomv1.GetReservationRequest{Name: res}); status.Code(err) != codes.NotFound {
		t.Fatalf("GetReservation after delete: %v", err)
	}

	// Resize up: a third node with its own agent.
	third := demo + "/nodes/gpu-0003"
	testkit.PublishAs(t, f.broker, "gateway", updateCluster("grow", "demo", 3, 0))
	grown := waitRunning(t, f.broker, "grow")
	if grown.GetStatus().GetTotalNodes() != 3 || grown.GetStatus().GetReadyNodes() != 3 {
		t.Fatalf("after grow: %v", grown.GetStatus())
	}
	thirdWork := filepath.Join(f.data, "clusters", "demo", "nodes", "gpu-0003")
	thirdPid := pidOf(t, thirdWork)
	if conf := slurmConf(); !strings.Contains(conf, "gpu-[0001-0003]") {
		t.Fatalf("slurm.conf after grow:\n%s", conf)
	}

	// Resize down: the highest-numbered node drains; the scheduler's
	// NodeDrained (published here as the scheduler would) lets it go.
	testkit.PublishAs(t, f.broker, "gateway", updateCluster("shrink", "demo", 2, 60))
	dn := nodeEvent(t, f.broker, third, func(n *loomv1.Node) bool { return n.GetState() == loomv1.Node_DRAINING })
	if dn.GetDrainDeadline() == nil || dn.GetNextAction() == "" {
		t.Fatalf("draining node = %v", dn)
	}
	if gone(thirdPid) {
		t.Fatal("a draining node's agent was stopped before NodeDrained")
	}
	testkit.PublishAs(t, f.broker, "scheduler", envelope.New(topics.JobEvents, demo, "loom/scheduler", &eventsv1.NodeDrained{Node: third, Cluster: demo}))
	testkit.WaitEvent(t, f.broker, topics.NodeEvents, wait, func(ev envelope.Event) bool {
		r, ok := ev.Payload.(*eventsv1.NodeRemoved)
		return ok && r.Node == third
	})
	shrunk := waitRunning(t, f.broker, "shrink")
	if shrunk.GetStatus().GetTotalNodes() != 2 || shrunk.GetStatus().GetReadyNodes() != 2 {
		t.Fatalf("after shrink: %v", shrunk.GetStatus())
	}
	if !gone(thirdPid) {
		t.Fatal("the removed node's agent still runs")
	}
	if _, err := os.Stat(thirdWork); !os.IsNotExist(err) {
		t.Fatalf("the removed node's directory is still there: %v", err)
	}
	if conf := slurmConf(); !strings.Contains(conf, "gpu-[0001-0002]") || strings.Contains(conf, "0003") {
		t.Fatalf("slurm.conf after shrink:\n%s", conf)
	}

	// A second create of the same cluster fails its operation.
	testkit.PublishAs(t, f.broker, "gateway", createCluster("op2", "demo", 1))
	failed := clusterEvent(t, f.broker, func(c *eventsv1.ClusterOperationFailed) bool { return c.Operation == project+"/operations/op2" })
	if codes.Code(failed.Code) != codes.AlreadyExists || failed.Cluster != demo {
		t.Fatalf("duplicate create = %v", failed)
	}

	// 2. Restart: the running agents are found, not launched again.
	if err := stop1(); err != nil {
		t.Fatalf("provisioner stop: %v", err)
	}
	for n, pid := range pids {
		if gone(pid) {
			t.Fatalf("agent of %s died with the provisioner (StopAgentsOnExit is off)", n)
		}
	}
	stop2 := f.run(t, true)
	testkit.PublishAs(t, f.broker, "gateway", createCluster("op3", "two", 1))
	waitRunning(t, f.broker, "op3")
	// The pass that launched "two" went over "demo" first (clusters in name order).
	for n, pid := range pids {
		if a := agents(t, n); len(a) != 1 || a[0] != pid {
			t.Fatalf("after restart, agents of %s = %v, want just %d", n, a, pid)
		}
	}
	for _, ev := range testkit.Events(t, f.broker, topics.NodeTelemetry) {
		if r, ok := ev.Payload.(*eventsv1.AgentRegistered); ok && pids[r.Node] != 0 && r.Pid != int32(pids[r.Node]) {
			t.Fatalf("a second agent registered for %s: %v", r.Node, r)
		}
	}

	// 3. Delete: agents stopped, directories removed, records gone.
	testkit.PublishAs(t, f.broker, "gateway", envelope.New(topics.ClusterCommands, demo, "loom/gateway",
		&eventsv1.DeleteCluster{Operation: project + "/operations/op4", Cluster: demo}))
	clusterEvent(t, f.broker, func(c *eventsv1.ClusterChanged) bool {
		return c.Operation == project+"/operations/op4" && c.Cluster.GetStatus().GetState() == loomv1.Cluster_DELETING
	})
	deleted := clusterEvent(t, f.broker, func(c *eventsv1.ClusterDeleted) bool { return c.Cluster == demo })
	if deleted.Operation != project+"/operations/op4" {
		t.Fatalf("ClusterDeleted = %v", deleted)
	}
	for _, n := range nodes {
		testkit.WaitEvent(t, f.broker, topics.NodeEvents, wait, func(ev envelope.Event) bool {
			r, ok := ev.Payload.(*eventsv1.NodeRemoved)
			return ok && r.Node == n && r.Cluster == demo
		})
		if !gone(pids[n]) {
			t.Fatalf("agent %d of deleted node %s still runs", pids[n], n)
		}
	}
	if _, err := os.Stat(filepath.Join(f.data, "clusters", "demo")); !os.IsNotExist(err) {
		t.Fatalf("cluster directory still there: %v", err)
	}
	if l, err := nodeSvc.ListNodes(ctx, &loomv1.ListNodesRequest{Parent: project + "/clusters/-"}); err != nil ||
		len(l.GetNodes()) != 1 || l.GetNodes()[0].GetName() != project+"/clusters/two/nodes/gpu-0001" {
		t.Fatalf("ListNodes after delete = %v, %v", l, err)
	}
	if _, err := clusters.GetCluster(ctx, &loomv1.GetClusterRequest{Name: demo}); status.Code(err) != codes.NotFound {
		t.Fatalf("GetCluster after delete: %v", err)
	}

	// 4. With StopAgentsOnExit, stopping the provisioner stops its agents.
	twoPid := pidOf(t, filepath.Join(f.data, "clusters", "two", "nodes", "gpu-0001"))
	if err := stop2(); err != nil {
		t.Fatalf("provisioner stop: %v", err)
	}
	if !gone(twoPid) {
		t.Fatal("agent still runs after the provisioner stopped with StopAgentsOnExit")
	}
}

func TestLaunchFailureIsReportedOnTheNode(t *testing.T) {
	t.Parallel()
	f := &fixture{broker: testkit.Broker(t), data: t.TempDir()}
	f.redis, _ = testkit.Redis(t)
	cfg := f.config(t, true)
	cfg.AgentCommand = []string{filepath.Join(f.data, "no-such-agent")}
	testkit.Start(t, "provisioner", func(ctx context.Context) error { return Run(ctx, cfg) })

	testkit.PublishAs(t, f.broker, "gateway", createCluster("op1", "broken", 1))
	ev := testkit.WaitEvent(t, f.broker, topics.NodeEvents, wait, func(ev envelope.Event) bool {
		nc, ok := ev.Payload.(*eventsv1.NodeChanged)
		return ok && strings.Contains(nc.Node.GetReason(), "no-such-agent")
	})
	n := ev.Payload.(*eventsv1.NodeChanged).Node
	if n.GetState() != loomv1.Node_PROVISIONING || !strings.HasPrefix(n.GetReason(), "launch: ") || n.GetLaunchAttempts() != 1 ||
		!strings.HasPrefix(n.GetNextAction(), "retry launch in ") || !strings.Contains(n.GetNextAction(), "(attempt 2 of 5)") {
		t.Fatalf("node = %v", n)
	}
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	c := Config{Provider: "gcp", DataDir: "", AgentEnv: []string{"NOEQUALS"}, Capacity: "x/y", LaunchRate: -1, LaunchConcurrency: 1000,
		AgentRedisUsers: "yes"}
	err := c.validate()
	for _, want := range []string{"provider", "data_dir", "agent_env[0]", "capacity", "launch_rate", "launch_concurrency: must be 1 to 256, got 1000",
		`agent_redis_users: must be auto, on or off, got "yes"`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("validate() = %v, want it to name %s", err, want)
		}
	}
	// The sim provider's settings are checked, not clamped: a stockout
	// rate of 5 (meant as 5%) would otherwise fail every launch.
	c = Config{Provider: ProviderSim, DataDir: "d", Sim: sim.Config{StockoutRate: 5, BootFailureRate: -0.1, TimeScale: -1,
		SlowBootFactor: 0.5, PreemptionRate: math.Inf(1), Latency: map[string]sim.Latency{"ONDEMAND": {Median: time.Second}}}}
	err = c.validate()
	for _, want := range []string{"sim-stockout-rate: is a probability, 0 to 1 (0.05 for 5%), got 5", "sim-boot-failure-rate",
		"sim-time-scale", "sim-slow-boot-factor", "sim-preemption-rate", `sim-latency: "ONDEMAND" is not a capacity type`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("validate() = %v, want it to name %s", err, want)
		}
	}
	c = Config{Provider: ProviderSim, DataDir: "d", Sim: sim.Config{TimeScale: 0.01, StockoutRate: 1, SlowBootRate: 0.05,
		Latency: map[string]sim.Latency{"SPOT": {Median: time.Second}}}}
	if err := c.validate(); err != nil {
		t.Errorf("validate() of good sim settings = %v", err)
	}
	c = Config{DataDir: "rel"}
	if err := c.validate(); err != nil || !filepath.IsAbs(c.DataDir) || c.Provider != "local" || len(c.AgentCommand) != 1 ||
		filepath.Base(c.AgentCommand[0]) != "agent" {
		t.Fatalf("validate() = %v, config %+v", err, c)
	}
}

func TestRegisterFlags(t *testing.T) {
	t.Parallel()
	var c Config
	fs := flag.NewFlagSet("p", flag.ContinueOnError)
	c.RegisterFlags(fs)
	if err := fs.Parse([]string{"-agent-command", "/bin/agent --x", "-agent-env", "A=1 B=2", "-agent-env", "C=3",
		"-stop-agents-on-exit", "-reconcile-interval", "1s", "-provider", "sim", "-capacity", "*/*/SPOT=3",
		"-boot-timeout", "2m", "-operation-timeout", "5m", "-max-launch-attempts", "7", "-sim-time-scale", "0.01",
		"-launch-rate", "2.5", "-launch-concurrency", "3", "-agent-redis-users", "on"}); err != nil {
		t.Fatal(err)
	}
	if strings.Join(c.AgentCommand, "|") != "/bin/agent|--x" || strings.Join(c.AgentEnv, "|") != "A=1|B=2|C=3" ||
		!c.StopAgentsOnExit || c.ReconcileInterval != time.Second || c.AgentStopGrace != 15*time.Second || c.Provider != "sim" ||
		c.Capacity != "*/*/SPOT=3" || c.BootTimeout != 2*time.Minute || c.OperationTimeout != 5*time.Minute ||
		c.MaxLaunchAttempts != 7 || c.Sim.TimeScale != 0.01 || c.DrainTimeout != 5*time.Minute ||
		c.LaunchRate != 2.5 || c.LaunchConcurrency != 3 || c.AgentRedisUsers != AgentRedisUsersOn {
		t.Fatalf("config = %+v", c)
	}
	if err := c.validate(); err != nil {
		t.Fatalf("validate() = %v", err)
	}
}

// TestSimProviderPreemptionsAreReplaced runs the provisioner on the sim
// provider: simulated nodes register over the bus like agents, the cluster
// reaches RUNNING, and spot preemptions (reported by the provider's
// Watcher) make nodes FAILED and replaced until the pool is back.
func TestSimProviderPreemptionsAreReplaced(t *testing.T) {
	t.Parallel()
	// A spot node is reclaimed every simulated half hour on average (1.8 s
	// real).
	f := startSim(t, func(cfg *Config) { cfg.Sim.PreemptionRate = 2 })

	name := project + "/clusters/sim"
	c := clusterSpec(name, 3)
	c.Compute.NodePools = append(c.Compute.NodePools, &loomv1.NodePool{Id: "spot", MachineType: "a3-highgpu-8g", NodeCount: 2,
		Capacity: &loomv1.CapacitySource{Type: loomv1.CapacitySource_SPOT}})
	testkit.PublishAs(t, f.broker, "gateway", envelope.New(topics.ClusterCommands, name, "loom/gateway",
		&eventsv1.CreateCluster{Operation: project + "/operations/sim", Cluster: c}))
	cl := waitRunning(t, f.broker, "sim")
	if cl.GetStatus().GetReadyNodes() != 5 || cl.GetStatus().GetHomeDir() != "/home" {
		t.Fatalf("cluster = %v", cl.GetStatus())
	}
	failed := testkit.WaitEvent(t, f.broker, topics.NodeEvents, wait, func(ev envelope.Event) bool {
		nc, ok := ev.Payload.(*eventsv1.NodeChanged)
		return ok && nc.Node.GetState() == loomv1.Node_FAILED && strings.HasPrefix(nc.Node.GetReason(), "preempted by provider")
	}).Payload.(*eventsv1.NodeChanged).Node
	if failed.GetNodePool() != "spot" || !strings.HasPrefix(failed.GetNextAction(), "replaced by spot-") {
		t.Fatalf("preempted node = %v", failed)
	}
	// A replacement (a new number: spot-0003 or later) comes up.
	testkit.WaitEvent(t, f.broker, topics.NodeEvents, wait, func(ev envelope.Event) bool {
		nc, ok := ev.Payload.(*eventsv1.NodeChanged)
		h := nc.GetNode().GetHostname()
		return ok && nc.Node.GetState() == loomv1.Node_READY && strings.HasPrefix(h, "spot-") && h > "spot-0002"
	})
}
