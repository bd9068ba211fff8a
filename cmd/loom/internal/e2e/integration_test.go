package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/loom-ml/loom/cmd/loom/internal/agentcmd"
	"github.com/loom-ml/loom/cmd/loom/stack"
	"github.com/loom-ml/loom/libs/auth"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/testkit/stall"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// TestMain turns this test binary into an agent when the local provider
// starts it as one (the re-exec trick: agents are real processes).
func TestMain(m *testing.M) {
	stall.Main() // the process whose reads block, of TestServicePIDIsNotHeldUpByAStalledProcess
	if os.Getenv("LOOM_TEST_RUN_AGENT") == "1" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err := agentcmd.Run(ctx, nil, os.Stderr)
		stop()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	code := m.Run()
	// The binaries built for the process tests are the test binary's, not
	// any one test's (t.TempDir would go with the first test): removed here.
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// Where a stack's services run: all in this process (as `loom up`), or
// each its own binary, built from the repository.
const (
	inProcess = "in-process"
	processes = "processes"
)

// startStack starts a whole stack for the test, its services as mode says,
// and closes it when the test ends (printing the services' logs of a
// failed test that ran them as processes).
// testSessionTimeout is the services' consumer-group session timeout in
// these tests (-bus-session-timeout).
const testSessionTimeout = 3 * time.Second

func startStack(t *testing.T, mode string) *stack.Stack {
	t.Helper()
	return startStackWith(t, mode, nil)
}

// startStackWith is startStack with the stack's options changed by opt
// (when set) before it starts: shorter timeouts, health flags.
func startStackWith(t *testing.T, mode string, opt func(*stack.Options)) *stack.Stack {
	t.Helper()
	// The nodes' GPUs are the simulated device (which takes injected faults),
	// whether or not this machine has a driver.
	// A service SIGKILLed in a test (processes mode) leaves its member in
	// each consumer group; its restarted instance reads once that member's
	// session has lapsed: 3 s here rather than the default 10 s.
	opts := stack.Options{DataDir: t.TempDir(), LogLevel: "warn", AgentEnv: []string{"LOOM_AGENT_GPU_MODE=simulated"},
		BusSessionTimeout: testSessionTimeout}
	switch mode {
	case inProcess:
		// Agents are this test binary (TestMain), real processes still.
		opts.AgentCommand = []string{os.Args[0]}
		opts.AgentEnv = append(opts.AgentEnv, "LOOM_TEST_RUN_AGENT=1")
	case processes:
		if testing.Short() {
			t.Skip("builds every binary; skipped with -short")
		}
		opts.BinDir = binaries(t) // built first: under a loaded test run the build alone can take a minute
		opts.LogLevel = "debug"
		t.Cleanup(func() { dumpLogs(t, filepath.Join(opts.DataDir, "logs")) })
	default:
		t.Fatalf("unknown stack mode %q", mode)
	}
	if opt != nil {
		opt(&opts)
	}
	ctx := testkit.Context(t, 90*time.Second)
	s, err := stack.Start(ctx, opts)
	if err != nil {
		t.Fatalf("start stack (%s): %v", mode, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if err := s.Close(ctx); err != nil {
			t.Errorf("close stack: %v", err)
		}
	})
	return s
}

// TestClusterJobModel drives the whole stack through the gateway's gRPC API,
// once with every service in this process and once with each its own
// process (one test body, two deployments): a cluster comes up with real
// agent processes, a 2-node job runs on both and writes a model, and the
// registry holds its version.
func TestClusterJobModel(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{inProcess, processes} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			clusterJobModel(t, startStack(t, mode))
		})
	}
}

// dialGateway connects to the stack's gateway as its administrator (the
// key the gateway made at its first start; none when it makes none).
func dialGateway(t *testing.T, s *stack.Stack) *grpc.ClientConn {
	t.Helper()
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if key, err := s.AdminKey(); err == nil {
		opts = append(opts, grpc.WithPerRPCCredentials(auth.Bearer(key)))
	}
	conn, err := grpc.NewClient(s.GatewayAddr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func clusterJobModel(t *testing.T, s *stack.Stack) {
	conn := dialGateway(t, s)

	cl := createCluster(t, conn, "itest", &loomv1.NodePool{Id: "gpu", MachineType: "a2-highgpu-2g",
		NodeCount: 2, AcceleratorType: "nvidia-tesla-a100", AcceleratorCount: 2})
	if cl.Status.ReadyNodes != 2 || cl.Status.TotalNodes != 2 {
		t.Fatalf("cluster status %v, want 2 of 2 ready", cl.Status)
	}
	nodes, err := loomv1.NewNodeServiceClient(conn).ListNodes(waitCtx(t, 5*time.Second),
		&loomv1.ListNodesRequest{Parent: cl.Name})
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes.Nodes) != 2 {
		t.Fatalf("%d nodes listed, want 2", len(nodes.Nodes))
	}
	for _, n := range nodes.Nodes {
		if n.State != loomv1.Node_READY || n.Gpus != 2 {
			t.Errorf("node %s: %v with %d GPUs, want READY with 2", n.Name, n.State, n.Gpus)
		}
	}

	jobs := loomv1.NewJobServiceClient(conn)
	// Bad input is refused with the field named, and nothing is queued.
	_, err = jobs.SubmitJob(waitCtx(t, 5*time.Second), &loomv1.SubmitJobRequest{Parent: "projects/default",
		Job: &loomv1.Job{Cluster: cl.Name, NodeCount: 3, Command: []string{"true"}}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "node_count") {
		t.Fatalf("3-node job on a 2-node cluster: got %v, want InvalidArgument naming node_count", err)
	}

	// A command (unlike an sbatch script) runs once per node, as an implicit srun.
	script := `echo "rank $SLURM_PROCID of $SLURM_NNODES on $SLURM_JOB_NODELIST gpus=$CUDA_VISIBLE_DEVICES"
if [ "$SLURM_PROCID" = 0 ]; then mkdir -p "$LOOM_MODEL_DIR" && echo weights > "$LOOM_MODEL_DIR/model.bin"; fi`
	job, err := jobs.SubmitJob(waitCtx(t, 5*time.Second), &loomv1.SubmitJobRequest{Parent: "projects/default",
		Job: &loomv1.Job{Cluster: cl.Name, DisplayName: "train", Command: []string{"/bin/sh", "-c", script}, NodeCount: 2, GpusPerNode: 2,
			ModelOutput: &loomv1.ModelOutput{ModelId: "itest-model"}}})
	if err != nil {
		t.Fatal(err)
	}
	if job.JobId == "" || job.State != loomv1.JobState_PENDING {
		t.Fatalf("submitted job %v, want an id and PENDING", job)
	}

	// Watch the job to its end: the stream must end by itself on a terminal state.
	stream, err := jobs.WatchJob(waitCtx(t, 60*time.Second), &loomv1.WatchJobRequest{Name: job.Name})
	if err != nil {
		t.Fatal(err)
	}
	var last *loomv1.Job
	seen := map[loomv1.JobState]bool{}
	for {
		j, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("watch: %v (last state %v)", err, last.GetState())
		}
		last = j
		seen[j.State] = true
	}
	if last.GetState() != loomv1.JobState_COMPLETED || last.ExitCode != 0 {
		t.Fatalf("job ended %v exit %d (%s)", last.GetState(), last.GetExitCode(), last.GetStateReason())
	}
	if len(last.Nodes) != 2 {
		t.Fatalf("job ran on %v, want 2 nodes", last.Nodes)
	}

	out, err := os.ReadFile(last.OutputPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"rank 0 of 2", "rank 1 of 2", "gpus=0,1"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("job output lacks %q:\n%s", want, out)
		}
	}

	reg := loomv1.NewModelServiceClient(conn)
	var versions *loomv1.ListModelVersionsResponse
	testkit.WaitFor(t, 30*time.Second, "model version registered", func() (bool, error) {
		versions, err = reg.ListModelVersions(waitCtx(t, 5*time.Second), &loomv1.ListModelVersionsRequest{
			Parent: "projects/default/models/itest-model"})
		return err == nil && len(versions.Versions) == 1, nil
	})
	v := versions.Versions[0]
	if v.Version != 1 || v.SourceJob != job.Name || !strings.HasPrefix(v.ArtifactUri, "file://") {
		t.Fatalf("model version %v", v)
	}
	if _, err := os.Stat(filepath.Join(strings.TrimPrefix(v.ArtifactUri, "file://"), "model.bin")); err != nil {
		t.Fatalf("the artifact the registry points at is missing: %v", err)
	}

	// UploadModel through the gateway is an operation the registry's answer
	// finishes: a complete artifact directory (a MANIFEST of its files'
	// SHA-256) as the model's next version.
	ops := loomv1.NewOperationServiceClient(conn)
	art, weights := t.TempDir(), []byte("itest upload weights")
	sum := sha256.Sum256(weights)
	if err := os.WriteFile(filepath.Join(art, "model.bin"), weights, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(art, "MANIFEST"), fmt.Appendf(nil, "%x  model.bin\n", sum), 0o644); err != nil {
		t.Fatal(err)
	}
	up, err := reg.UploadModel(waitCtx(t, 5*time.Second), &loomv1.UploadModelRequest{Parent: "projects/default/locations/global",
		ParentModel: "projects/default/models/itest-model", RequestId: "itest-upload", Model: &loomv1.Model{ArtifactUri: art}})
	if err != nil || up.GetDone() || up.GetMetadata().GetVerb() != "upload" {
		t.Fatalf("UploadModel = %v, %v; want a running upload operation", up, err)
	}
	var uploaded *loomv1.Operation
	testkit.WaitFor(t, 30*time.Second, "upload operation done", func() (bool, error) {
		uploaded, err = ops.WaitOperation(waitCtx(t, 10*time.Second), &loomv1.WaitOperationRequest{Name: up.GetName(), TimeoutSeconds: 5})
		return err == nil && uploaded.GetDone(), nil
	})
	if r := uploaded.GetUploadModel(); r.GetModel() != "projects/default/locations/global/models/itest-model" || r.GetModelVersionId() != "2" {
		t.Fatalf("upload operation done as %v, want version 2 of itest-model", uploaded)
	}

	// The same resources over REST.
	req, err := http.NewRequest(http.MethodGet, "http://"+s.RESTAddr+"/v1/"+job.Name, nil)
	if err != nil {
		t.Fatal(err)
	}
	if key, err := s.AdminKey(); err == nil {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var restJob struct {
		State string `json:"state"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&restJob); err != nil || resp.StatusCode != 200 || restJob.State != "COMPLETED" {
		t.Fatalf("REST GET job: %d %v %+v", resp.StatusCode, err, restJob)
	}

	// Delete removes the cluster and stops its agents.
	op, err := loomv1.NewClusterServiceClient(conn).DeleteCluster(waitCtx(t, 5*time.Second),
		&loomv1.DeleteClusterRequest{Name: cl.Name})
	if err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 60*time.Second, "cluster deleted", func() (bool, error) {
		got, err := ops.WaitOperation(waitCtx(t, 15*time.Second), &loomv1.WaitOperationRequest{Name: op.Name, TimeoutSeconds: 5})
		return err == nil && got.Done && got.GetError() == nil, nil
	})
	_, err = loomv1.NewClusterServiceClient(conn).GetCluster(waitCtx(t, 5*time.Second), &loomv1.GetClusterRequest{Name: cl.Name})
	if status.Code(err) != codes.NotFound {
		t.Fatalf("deleted cluster: got %v, want NotFound", err)
	}
}
