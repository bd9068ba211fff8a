package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"runtime/trace"
	"syscall"
	"time"

	"google.golang.org/grpc"

	"github.com/loom-ml/loom/cmd/loom/stack"
	"github.com/loom-ml/loom/libs/config"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/agent"
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
	cfg, err := config.ParseArgs("agent", nil, (*agent.Config).RegisterFlags)
	if err != nil {
		return fmt.Errorf("agent %w", err)
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

// loomStack is Loom's embedded deployment, started by the stack `loom up`
// runs (cmd/loom/stack): a kfake broker and Redis on loopback, the five
// central services in this process, agents as child processes (this binary
// again, in its agent mode).
type loomStack struct {
	*stack.Stack
	gatewayAddr string
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
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("agent command: %w", err)
	}
	env := []string{envAgent + "=1", fmt.Sprintf("LOOM_JOB_NICE=%d", o.jobNice)}
	if o.agentProfile != "" {
		env = append(env, envAgentProfile+"="+o.agentProfile)
	}
	st, err := stack.Start(ctx, stack.Options{
		DataDir:      o.dir,
		AgentCommand: []string{exe},
		AgentEnv:     env,
		// Capacity for exactly the pool the benchmark creates: the gateway's
		// pre-check matches listed capacity pools exactly, not the wildcard
		// rules of the default.
		Capacity: fmt.Sprintf("%s/%s/ON_DEMAND=256", benchZone, o.machineType),
		LogLevel: "error",
	})
	if err != nil {
		return nil, err
	}
	return &loomStack{Stack: st, gatewayAddr: st.GatewayAddr}, nil
}

// err reports services that exited on their own.
func (s *loomStack) err() error { return s.Err() }

func (s *loomStack) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = s.Close(ctx)
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
