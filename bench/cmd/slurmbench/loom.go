package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"runtime/trace"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/loom-ml/loom/libs/bus"
	"github.com/loom-ml/loom/libs/config"
	"github.com/loom-ml/loom/libs/embedded"
	"github.com/loom-ml/loom/libs/topics"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/agent"
	"github.com/loom-ml/loom/services/gateway"
	"github.com/loom-ml/loom/services/health"
	"github.com/loom-ml/loom/services/provisioner"
	"github.com/loom-ml/loom/services/registry"
	"github.com/loom-ml/loom/services/scheduler"
)

// Environment variables of the agent mode: the local provider starts this
// binary again as each node's agent (real processes, as in `loom up`).
const (
	envAgent        = "LOOM_SLURMBENCH_AGENT"         // "1": run as an agent
	envAgentProfile = "LOOM_SLURMBENCH_AGENT_PROFILE" // a directory: write a CPU profile and an execution trace per agent there
)

// runAgent runs this process as one Loom agent, configured by the LOOM_*
// variables the provider sets, until SIGTERM.
func runAgent() error {
	var cfg agent.Config
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cfg.RegisterFlags(fs)
	if err := fs.Parse(nil); err != nil {
		return fmt.Errorf("agent flags: %w", err)
	}
	if dir := os.Getenv(envAgentProfile); dir != "" {
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("agent-%d.pprof", os.Getpid())))
		if err != nil {
			return fmt.Errorf("agent profile: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("agent profile: %w", err)
		}
		defer pprof.StopCPUProfile()
		tf, err := os.Create(filepath.Join(dir, fmt.Sprintf("agent-%d.trace", os.Getpid())))
		if err != nil {
			return fmt.Errorf("agent trace: %w", err)
		}
		defer tf.Close()
		if err := trace.Start(tf); err != nil {
			return fmt.Errorf("agent trace: %w", err)
		}
		defer trace.Stop()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := agent.Run(ctx, cfg); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("agent: %w", err)
	}
	return nil
}

// loomStack is Loom's embedded deployment, started the way `loom up` does
// (cmd/loom/stack): a kfake broker and Redis on loopback, the five
// central services in this process with their own configurations, agents as
// child processes.
type loomStack struct {
	gatewayAddr string
	broker      *embedded.Broker
	redis       *embedded.Redis
	cancel      context.CancelFunc
	wg          sync.WaitGroup
	mu          sync.Mutex
	exits       []error
}

type loomOptions struct {
	dir          string
	agentProfile string // directory for agents' CPU profiles, or ""
	machineType  string // the one machine type the provisioner offers capacity for
	jobNice      int    // the agents' LOOM_JOB_NICE
}

// benchZone is the zone of the benchmark's node pool and capacity.
const benchZone = "us-central1-a"

func startLoom(ctx context.Context, o loomOptions) (*loomStack, error) {
	s := &loomStack{}
	if err := s.start(ctx, o); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

func (s *loomStack) start(ctx context.Context, o loomOptions) error {
	var err error
	s.broker, err = embedded.StartBroker(ctx, "", filepath.Join(o.dir, "broker"))
	if err != nil {
		return err
	}
	s.redis, err = embedded.StartRedis(ctx, "", filepath.Join(o.dir, "redis"))
	if err != nil {
		return err
	}
	if err := bus.EnsureTopics(ctx, []string{s.broker.Addr}, topics.All()); err != nil {
		return fmt.Errorf("create topics: %w", err)
	}
	addr := func() string {
		p, perr := embedded.FreePort()
		if perr != nil && err == nil {
			err = perr
		}
		return fmt.Sprintf("127.0.0.1:%d", p)
	}
	common := func() config.Common {
		return config.Common{Brokers: []string{s.broker.Addr}, RedisAddr: s.redis.Addr,
			GRPCAddr: addr(), HTTPAddr: addr(), LogLevel: "error"}
	}
	exe, eerr := os.Executable()
	if eerr != nil {
		return fmt.Errorf("agent command: %w", eerr)
	}

	var prov provisioner.Config
	defaults(prov.RegisterFlags)
	prov.Common = common()
	prov.Provider = "local"
	prov.DataDir = filepath.Join(o.dir, "provisioner")
	prov.AgentCommand = []string{exe}
	prov.AgentEnv = []string{envAgent + "=1", fmt.Sprintf("LOOM_JOB_NICE=%d", o.jobNice)}
	if o.agentProfile != "" {
		prov.AgentEnv = append(prov.AgentEnv, envAgentProfile+"="+o.agentProfile)
	}
	prov.StopAgentsOnExit = true
	// Capacity for exactly the pool the benchmark creates: the gateway's
	// pre-check matches listed capacity pools exactly, not the wildcard rules
	// of the default.
	prov.Capacity = fmt.Sprintf("%s/%s/ON_DEMAND=256", benchZone, o.machineType)

	var sched scheduler.Config
	defaults(sched.RegisterFlags)
	sched.Common = common()
	var hl health.Config
	defaults(hl.RegisterFlags)
	hl.Common = common()
	var reg registry.Config
	defaults(reg.RegisterFlags)
	reg.Common = common()
	var gw gateway.Config
	defaults(gw.RegisterFlags)
	gw.Common = common()
	gw.RESTAddr = addr()
	gw.ProvisionerAddr, gw.SchedulerAddr, gw.RegistryAddr = prov.GRPCAddr, sched.GRPCAddr, reg.GRPCAddr
	if err != nil {
		return err
	}
	s.gatewayAddr = gw.GRPCAddr

	svcCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.cancel = cancel
	s.run(svcCtx, "provisioner", func(ctx context.Context) error { return provisioner.Run(ctx, prov) })
	s.run(svcCtx, "scheduler", func(ctx context.Context) error { return scheduler.Run(ctx, sched) })
	s.run(svcCtx, "health", func(ctx context.Context) error { return health.Run(ctx, hl) })
	s.run(svcCtx, "registry", func(ctx context.Context) error { return registry.Run(ctx, reg) })
	s.run(svcCtx, "gateway", func(ctx context.Context) error { return gateway.Run(ctx, gw) })

	wctx, wcancel := context.WithTimeout(ctx, 60*time.Second)
	defer wcancel()
	for _, a := range []string{prov.GRPCAddr, sched.GRPCAddr, hl.GRPCAddr, reg.GRPCAddr, gw.GRPCAddr} {
		if err := s.waitServing(wctx, a); err != nil {
			return err
		}
	}
	return nil
}

// defaults fills a service's Config with its documented defaults.
func defaults(register func(*flag.FlagSet)) {
	fs := flag.NewFlagSet("defaults", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	register(fs)
}

func (s *loomStack) run(ctx context.Context, name string, fn func(context.Context) error) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		err := fn(ctx)
		if ctx.Err() == nil {
			s.mu.Lock()
			s.exits = append(s.exits, fmt.Errorf("%s exited: %v", name, err))
			s.mu.Unlock()
		}
	}()
}

// err reports services that exited on their own.
func (s *loomStack) err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return errors.Join(s.exits...)
}

func (s *loomStack) waitServing(ctx context.Context, addr string) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	for {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		resp, err := healthpb.NewHealthClient(conn).Check(cctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
		cancel()
		if err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return nil
		}
		if serr := s.err(); serr != nil {
			return serr
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("service on %s not serving: %v (%w)", addr, err, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (s *loomStack) close() {
	if s.cancel != nil {
		s.cancel()
		done := make(chan struct{})
		go func() { s.wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
		}
	}
	if s.redis != nil {
		_ = s.redis.Close()
	}
	if s.broker != nil {
		_ = s.broker.Close()
	}
}

// createCluster creates a cluster of nodes × (gpus GPUs) through the public
// API and waits until it is RUNNING.
func createCluster(ctx context.Context, conn *grpc.ClientConn, id, machineType string, nodes, gpus int) (*loomv1.Cluster, error) {
	clusters := loomv1.NewClusterServiceClient(conn)
	ops := loomv1.NewOperationServiceClient(conn)
	op, err := clusters.CreateCluster(ctx, &loomv1.CreateClusterRequest{
		Parent: "projects/default", ClusterId: id, RequestId: "create-" + id,
		Cluster: &loomv1.Cluster{Compute: &loomv1.ComputeResources{NodePools: []*loomv1.NodePool{{
			Id: "cpu", MachineType: machineType, Zone: benchZone, NodeCount: int32(nodes),
			AcceleratorCount: int32(gpus), AcceleratorType: acceleratorType(gpus)}}}}})
	if err != nil {
		return nil, fmt.Errorf("create cluster: %w", err)
	}
	for !op.GetDone() {
		op, err = ops.WaitOperation(ctx, &loomv1.WaitOperationRequest{Name: op.GetName(), TimeoutSeconds: 10})
		if err != nil {
			return nil, fmt.Errorf("wait for cluster: %w", err)
		}
	}
	if e := op.GetError(); e != nil {
		return nil, fmt.Errorf("create cluster: %v", e)
	}
	cl := op.GetCluster()
	if cl.GetStatus().GetState() != loomv1.Cluster_RUNNING {
		return nil, fmt.Errorf("cluster is %v, not RUNNING", cl.GetStatus().GetState())
	}
	return cl, nil
}

func acceleratorType(gpus int) string {
	if gpus == 0 {
		return ""
	}
	return "nvidia-h100-80gb"
}
