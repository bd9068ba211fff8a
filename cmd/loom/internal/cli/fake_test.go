package cli

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/cmd/loom/internal/agentcmd"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// TestMain lets tests start this binary as `loom train ...` or `loom agent`
// (the re-exec trick): the in-process stack's agents are this binary with
// LOOM_TEST_RUN_AGENT=1, and the demo job runs `<this binary> train`.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && (os.Args[1] == "train" || os.Args[1] == "agent") {
		os.Exit(Execute(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
	}
	if os.Getenv("LOOM_TEST_RUN_AGENT") == "1" {
		if err := agentcmd.Run(signalContext(), os.Args[1:], os.Stderr); err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// testNow is the fixed clock of rendering tests.
var testNow = time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC)

func ts(d time.Duration) *timestamppb.Timestamp { return timestamppb.New(testNow.Add(-d)) }

// fakeGateway serves loom.v1 with canned answers and records what it was
// asked, so that tests can check both what the CLI sends and what it prints.
// It stands in for the gateway only; nothing here fakes Kafka or Redis.
type fakeGateway struct {
	loomv1.UnimplementedClusterServiceServer
	loomv1.UnimplementedOperationServiceServer
	loomv1.UnimplementedJobServiceServer
	loomv1.UnimplementedNodeServiceServer
	loomv1.UnimplementedModelServiceServer

	mu       sync.Mutex
	requests []proto.Message
	// opPolls counts GetOperation calls, which advance the operation.
	opPolls int
	// failOp makes the operation end with an error.
	failOp bool
	// submitErr is returned by SubmitJob when set.
	submitErr error
	// watch is what WatchJob streams.
	watch []*loomv1.Job

	clusters []*loomv1.Cluster
	jobs     []*loomv1.Job
	nodes    []*loomv1.Node
	models   []*loomv1.Model
	versions []*loomv1.ModelVersion
	logs     []string
}

func newFakeGateway(t *testing.T) (*fakeGateway, string) {
	t.Helper()
	f := &fakeGateway{
		clusters: []*loomv1.Cluster{{
			Name:       "projects/default/clusters/demo",
			Compute:    &loomv1.ComputeResources{NodePools: []*loomv1.NodePool{{Id: "gpu", MachineType: "a3-highgpu-8g", NodeCount: 2, AcceleratorType: "nvidia-h100-80gb", AcceleratorCount: 8}}},
			Status:     &loomv1.ClusterStatus{State: loomv1.Cluster_RUNNING, ReadyNodes: 2, TotalNodes: 2, SharedDir: "/data/demo/shared"},
			CreateTime: ts(5 * time.Minute),
		}, {
			Name:       "projects/default/clusters/big-cluster",
			Compute:    &loomv1.ComputeResources{NodePools: []*loomv1.NodePool{{Id: "cpu", MachineType: "n2-standard-8", NodeCount: 16}}},
			Status:     &loomv1.ClusterStatus{State: loomv1.Cluster_CREATING, ReadyNodes: 3, TotalNodes: 16, Message: "3 of 16 nodes ready"},
			CreateTime: ts(3 * time.Hour),
		}},
		jobs: []*loomv1.Job{{
			Name: "projects/default/jobs/7", JobId: "7", Cluster: "projects/default/clusters/demo", DisplayName: "train",
			Command: []string{"loom", "train", "--epochs", "200"}, NodeCount: 2, State: loomv1.JobState_RUNNING,
			Nodes: []string{"gpu-0001", "gpu-0002"}, OutputPath: "/data/demo/shared/slurm-7.out",
			SubmitTime: ts(90 * time.Second), StartTime: ts(80 * time.Second),
		}, {
			Name: "projects/default/jobs/8", JobId: "8", Cluster: "projects/default/clusters/demo",
			Script: "echo hi\n", NodeCount: 1, State: loomv1.JobState_FAILED, ExitCode: 3,
			SubmitTime: ts(50 * time.Hour), StartTime: ts(50 * time.Hour), EndTime: ts(50*time.Hour - 1500*time.Millisecond),
		}, {
			Name: "projects/default/jobs/9", JobId: "9", Cluster: "projects/default/clusters/demo",
			Command: []string{"sleep", "1"}, NodeCount: 4, State: loomv1.JobState_PENDING, StateReason: "Resources",
			SubmitTime: ts(10 * time.Second),
		}},
		nodes: []*loomv1.Node{
			{Name: "projects/default/clusters/demo/nodes/gpu-0001", Cluster: "projects/default/clusters/demo", NodePool: "gpu", Hostname: "gpu-0001", State: loomv1.Node_READY, Gpus: 8, LastHeartbeat: ts(2 * time.Second)},
			{Name: "projects/default/clusters/demo/nodes/gpu-0002", Cluster: "projects/default/clusters/demo", NodePool: "gpu", Hostname: "gpu-0002", State: loomv1.Node_DOWN, Reason: "no heartbeat for 15s", Gpus: 8, LastHeartbeat: ts(20 * time.Second)},
		},
		models:   []*loomv1.Model{{Name: "projects/default/models/demo-regressor", LatestVersion: 2, UpdateTime: ts(time.Minute)}},
		versions: []*loomv1.ModelVersion{{Name: "projects/default/models/demo-regressor/versions/1", Version: 1, ArtifactUri: "file:///data/m/job-3", SourceJob: "projects/default/jobs/3", CreateTime: ts(time.Hour)}},
		logs:     []string{"epoch 1 loss 6.3\n", "epoch 2 loss 5.1\n"},
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	loomv1.RegisterClusterServiceServer(s, f)
	loomv1.RegisterOperationServiceServer(s, f)
	loomv1.RegisterJobServiceServer(s, f)
	loomv1.RegisterNodeServiceServer(s, f)
	loomv1.RegisterModelServiceServer(s, f)
	go func() { _ = s.Serve(ln) }()
	t.Cleanup(s.Stop)
	return f, ln.Addr().String()
}

func (f *fakeGateway) record(m proto.Message) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests = append(f.requests, proto.Clone(m))
}

// last returns the last recorded request of m's type.
func lastRequest[T proto.Message](f *fakeGateway) (T, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := len(f.requests) - 1; i >= 0; i-- {
		if r, ok := f.requests[i].(T); ok {
			return r, true
		}
	}
	var zero T
	return zero, false
}

func (f *fakeGateway) CreateCluster(_ context.Context, r *loomv1.CreateClusterRequest) (*loomv1.Operation, error) {
	f.record(r)
	if r.GetClusterId() == "demo" && r.GetParent() == "projects/taken" {
		return nil, status.Error(codes.AlreadyExists, "cluster projects/taken/clusters/demo already exists")
	}
	return &loomv1.Operation{Name: "projects/default/operations/op1",
		Metadata: &loomv1.OperationMetadata{Target: r.GetCluster().GetName(), Verb: "create", Progress: "0 of 2 nodes ready"}}, nil
}

func (f *fakeGateway) DeleteCluster(_ context.Context, r *loomv1.DeleteClusterRequest) (*loomv1.Operation, error) {
	f.record(r)
	if shortName(r.GetName()) != "demo" {
		return nil, status.Errorf(codes.NotFound, "cluster %s not found", r.GetName())
	}
	return &loomv1.Operation{Name: "projects/default/operations/op2",
		Metadata: &loomv1.OperationMetadata{Target: r.GetName(), Verb: "delete", Progress: "stopping 2 nodes"}}, nil
}

func (f *fakeGateway) GetOperation(_ context.Context, r *loomv1.GetOperationRequest) (*loomv1.Operation, error) {
	f.record(r)
	f.mu.Lock()
	f.opPolls++
	n := f.opPolls
	fail := f.failOp
	f.mu.Unlock()
	op := &loomv1.Operation{Name: r.GetName(), Metadata: &loomv1.OperationMetadata{Verb: "create"}}
	switch {
	case n == 1:
		op.Metadata.Progress = "1 of 2 nodes ready"
	case fail:
		op.Done = true
		op.Metadata.Progress = "1 of 2 nodes ready"
		op.Result = &loomv1.Operation_Error{Error: &loomv1.OperationError{Code: int32(codes.ResourceExhausted), Message: "no capacity for pool gpu"}}
	default:
		op.Done = true
		op.Metadata.Progress = "2 of 2 nodes ready"
		op.Result = &loomv1.Operation_Cluster{Cluster: &loomv1.Cluster{Name: "projects/default/clusters/demo",
			Status: &loomv1.ClusterStatus{State: loomv1.Cluster_RUNNING, ReadyNodes: 2, TotalNodes: 2}}}
	}
	return op, nil
}

func (f *fakeGateway) GetCluster(_ context.Context, r *loomv1.GetClusterRequest) (*loomv1.Cluster, error) {
	f.record(r)
	for _, c := range f.clusters {
		if c.GetName() == r.GetName() {
			return c, nil
		}
	}
	return nil, status.Errorf(codes.NotFound, "cluster %s not found", r.GetName())
}

func (f *fakeGateway) ListClusters(_ context.Context, r *loomv1.ListClustersRequest) (*loomv1.ListClustersResponse, error) {
	f.record(r)
	if r.GetParent() != "projects/default" {
		return &loomv1.ListClustersResponse{}, nil
	}
	return &loomv1.ListClustersResponse{Clusters: f.clusters}, nil
}

func (f *fakeGateway) SubmitJob(_ context.Context, r *loomv1.SubmitJobRequest) (*loomv1.Job, error) {
	f.record(r)
	if f.submitErr != nil {
		return nil, f.submitErr
	}
	j := proto.Clone(r.GetJob()).(*loomv1.Job)
	j.Name, j.JobId, j.State, j.SubmitTime = "projects/default/jobs/10", "10", loomv1.JobState_PENDING, timestamppb.Now()
	return j, nil
}

func (f *fakeGateway) GetJob(_ context.Context, r *loomv1.GetJobRequest) (*loomv1.Job, error) {
	f.record(r)
	for _, j := range f.jobs {
		if j.GetName() == r.GetName() {
			return j, nil
		}
	}
	return nil, status.Errorf(codes.NotFound, "job %s not found", r.GetName())
}

func (f *fakeGateway) ListJobs(_ context.Context, r *loomv1.ListJobsRequest) (*loomv1.ListJobsResponse, error) {
	f.record(r)
	return &loomv1.ListJobsResponse{Jobs: f.jobs}, nil
}

func (f *fakeGateway) CancelJob(_ context.Context, r *loomv1.CancelJobRequest) (*loomv1.Job, error) {
	f.record(r)
	for _, j := range f.jobs {
		if j.GetName() == r.GetName() {
			return j, nil // as the gateway does: the state before the scheduler acts
		}
	}
	return &loomv1.Job{Name: r.GetName(), JobId: shortName(r.GetName()), State: loomv1.JobState_CANCELLED}, nil
}

func (f *fakeGateway) WatchJob(r *loomv1.WatchJobRequest, s grpc.ServerStreamingServer[loomv1.Job]) error {
	f.record(r)
	for _, j := range f.watch {
		if err := s.Send(j); err != nil {
			return err
		}
	}
	return nil
}

func (f *fakeGateway) ReadJobLogs(r *loomv1.ReadJobLogsRequest, s grpc.ServerStreamingServer[loomv1.LogChunk]) error {
	f.record(r)
	if shortName(r.GetName()) != "7" {
		return status.Errorf(codes.NotFound, "job %s not found", r.GetName())
	}
	for _, l := range f.logs {
		if err := s.Send(&loomv1.LogChunk{Data: []byte(l)}); err != nil {
			return err
		}
	}
	return nil
}

func (f *fakeGateway) ListNodes(_ context.Context, r *loomv1.ListNodesRequest) (*loomv1.ListNodesResponse, error) {
	f.record(r)
	return &loomv1.ListNodesResponse{Nodes: f.nodes}, nil
}

func (f *fakeGateway) ListModels(_ context.Context, r *loomv1.ListModelsRequest) (*loomv1.ListModelsResponse, error) {
	f.record(r)
	return &loomv1.ListModelsResponse{Models: f.models}, nil
}

func (f *fakeGateway) ListModelVersions(_ context.Context, r *loomv1.ListModelVersionsRequest) (*loomv1.ListModelVersionsResponse, error) {
	f.record(r)
	if shortName(r.GetParent()) != "demo-regressor" {
		return nil, status.Errorf(codes.NotFound, "model %s not found", r.GetParent())
	}
	return &loomv1.ListModelVersionsResponse{Versions: f.versions}, nil
}

// run executes the CLI against gw with a fixed clock and fast polling.
func run(t *testing.T, gw string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	a := newApp()
	a.now = func() time.Time { return testNow }
	a.pollInterval = time.Millisecond
	a.callTimeout = 10 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code = a.execute(ctx, append([]string{"--gateway", gw}, args...), &out, &errb)
	return out.String(), errb.String(), code
}

func signalContext() context.Context {
	ctx, _ := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	return ctx
}
