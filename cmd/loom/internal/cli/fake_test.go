package cli

import (
	"bytes"
	"context"
	"fmt"
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

// TestMain lets tests start this binary as `loom train ...`, `loom agent` or
// a Slurm command (the re-exec trick): the in-process stack's agents are this binary with
// LOOM_TEST_RUN_AGENT=1, and the demo job runs `<this binary> train`.
func TestMain(m *testing.M) {
	// Started through a Slurm command's link (`loom clusters login`).
	if args := Args(os.Args[0], os.Args[1:]); len(args) > 0 && args[0] == "slurm" {
		os.Exit(Execute(context.Background(), args, os.Stdout, os.Stderr))
	}
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
	loomv1.UnimplementedReservationServiceServer
	loomv1.UnimplementedSlurmServiceServer

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

	clusters     []*loomv1.Cluster
	jobs         []*loomv1.Job
	nodes        []*loomv1.Node
	models       []*loomv1.Model
	reservations []*loomv1.Reservation
	capacity     []*loomv1.CapacityPool
	slurm        *loomv1.SlurmConfig
	versions     []*loomv1.ModelVersion
	logs         []string
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
		reservations: []*loomv1.Reservation{{Name: "projects/default/reservations/r1", Zone: "us-central1-a",
			MachineType: "a3-ultragpu-8g", Count: 8, InUse: 4, Consumers: []string{"projects/default/clusters/a3u"}, CreateTime: ts(2 * time.Hour)}},
		capacity: []*loomv1.CapacityPool{
			{Zone: "us-central1-a", MachineType: "a3-ultragpu-8g", Type: loomv1.CapacitySource_RESERVATION, Reservation: "projects/default/reservations/r1", Total: 8, InUse: 4, Free: 4},
			{Zone: "us-central1-a", MachineType: "a3-ultragpu-8g", Type: loomv1.CapacitySource_SPOT, Total: 64, InUse: 2, Free: 62},
		},
		slurm: &loomv1.SlurmConfig{SlurmConf: "ClusterName=a3u\nNodeName=a3u-[0001-0004] Gres=gpu:8\n", GresConf: "NodeName=a3u-[0001-0004] Name=gpu Count=8\n", TopologyConf: "BlockName=block-01 Nodes=a3u-[0001-0004]"},
	}
	f.clusters = append(f.clusters, a3uCluster())
	f.nodes = append(f.nodes, a3uNodes()...)
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
	loomv1.RegisterReservationServiceServer(s, f)
	loomv1.RegisterSlurmServiceServer(s, f)
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

func (f *fakeGateway) UpdateCluster(_ context.Context, r *loomv1.UpdateClusterRequest) (*loomv1.Operation, error) {
	f.record(r)
	if _, err := f.GetCluster(context.Background(), &loomv1.GetClusterRequest{Name: r.GetCluster().GetName()}); err != nil {
		return nil, err
	}
	return &loomv1.Operation{Name: "projects/default/operations/op3",
		Metadata: &loomv1.OperationMetadata{Target: r.GetCluster().GetName(), Verb: "update", Progress: "0 of 2 nodes ready"}}, nil
}

// ListPartitions answers for every cluster: one default partition "batch"
// over the cluster's compute nodes.
func (f *fakeGateway) ListPartitions(_ context.Context, r *loomv1.ListPartitionsRequest) (*loomv1.ListPartitionsResponse, error) {
	f.record(r)
	var hosts []string
	for _, n := range f.slurmNodes(r.GetCluster()) {
		hosts = append(hosts, n.GetHostname())
	}
	return &loomv1.ListPartitionsResponse{Partitions: []*loomv1.Partition{{Name: "batch", Cluster: r.GetCluster(),
		Default: true, State: "up", MaxTime: "UNLIMITED", Nodes: hosts}}}, nil
}

// ListSlurmNodes answers the cluster's compute nodes, idle, in "batch".
func (f *fakeGateway) ListSlurmNodes(_ context.Context, r *loomv1.ListSlurmNodesRequest) (*loomv1.ListSlurmNodesResponse, error) {
	f.record(r)
	return &loomv1.ListSlurmNodesResponse{Nodes: f.slurmNodes(r.GetCluster())}, nil
}

func (f *fakeGateway) slurmNodes(cluster string) []*loomv1.SlurmNode {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*loomv1.SlurmNode
	for _, n := range f.nodes {
		if n.GetCluster() == cluster && n.GetRole() != "login" {
			out = append(out, &loomv1.SlurmNode{Hostname: n.GetHostname(), Node: n.GetName(), Cluster: cluster,
				State: loomv1.SlurmNode_IDLE, Partitions: []string{"batch"}, Gpus: n.GetGpus()})
		}
	}
	return out
}

func (f *fakeGateway) GetSlurmConfig(_ context.Context, r *loomv1.GetSlurmConfigRequest) (*loomv1.SlurmConfig, error) {
	f.record(r)
	if shortName(r.GetName()) != "a3u" {
		return nil, status.Errorf(codes.NotFound, "cluster %s not found", r.GetName())
	}
	return f.slurm, nil
}

func (f *fakeGateway) CreateReservation(_ context.Context, r *loomv1.CreateReservationRequest) (*loomv1.Operation, error) {
	f.record(r)
	return &loomv1.Operation{Name: "projects/default/operations/op4", Done: true,
		Metadata: &loomv1.OperationMetadata{Verb: "create"},
		Result:   &loomv1.Operation_Reservation{Reservation: r.GetReservation()}}, nil
}

func (f *fakeGateway) GetReservation(_ context.Context, r *loomv1.GetReservationRequest) (*loomv1.Reservation, error) {
	f.record(r)
	for _, res := range f.reservations {
		if res.GetName() == r.GetName() {
			return res, nil
		}
	}
	return nil, status.Errorf(codes.NotFound, "reservation %s not found", r.GetName())
}

func (f *fakeGateway) ListReservations(_ context.Context, r *loomv1.ListReservationsRequest) (*loomv1.ListReservationsResponse, error) {
	f.record(r)
	return &loomv1.ListReservationsResponse{Reservations: f.reservations}, nil
}

func (f *fakeGateway) DeleteReservation(_ context.Context, r *loomv1.DeleteReservationRequest) (*loomv1.Operation, error) {
	f.record(r)
	if shortName(r.GetName()) == "r1" {
		return nil, status.Error(codes.FailedPrecondition, "reservation r1 is in use by cluster a3u")
	}
	return &loomv1.Operation{Name: "projects/default/operations/op5", Done: true, Metadata: &loomv1.OperationMetadata{Verb: "delete"}}, nil
}

func (f *fakeGateway) ListCapacity(_ context.Context, r *loomv1.ListCapacityRequest) (*loomv1.ListCapacityResponse, error) {
	f.record(r)
	return &loomv1.ListCapacityResponse{Pools: f.capacity}, nil
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
	if shortName(r.GetParent()) == "-" {
		return &loomv1.ListNodesResponse{Nodes: f.nodes}, nil
	}
	var out []*loomv1.Node
	for _, n := range f.nodes {
		if n.GetCluster() == r.GetParent() {
			out = append(out, n)
		}
	}
	return &loomv1.ListNodesResponse{Nodes: out}, nil
}

// a3uCluster is a cluster with everything describe shows: a reservation
// pool and a spot pool, partitions, storage, a login node, conditions.
func a3uCluster() *loomv1.Cluster {
	return &loomv1.Cluster{
		Name:        "projects/default/clusters/a3u",
		Description: "two partitions",
		Compute: &loomv1.ComputeResources{NodePools: []*loomv1.NodePool{
			{Id: "a3u", MachineType: "a3-ultragpu-8g", NodeCount: 4, AcceleratorType: "nvidia-h200-141gb", AcceleratorCount: 8,
				Capacity: &loomv1.CapacitySource{Type: loomv1.CapacitySource_RESERVATION, Reservation: "r1"}},
			{Id: "spot", MachineType: "a3-ultragpu-8g", NodeCount: 2, AcceleratorType: "nvidia-h200-141gb", AcceleratorCount: 8,
				Capacity: &loomv1.CapacitySource{Type: loomv1.CapacitySource_SPOT}, Zone: "us-central1-b"},
		}},
		Orchestrator: &loomv1.Orchestrator{Slurm: &loomv1.SlurmOrchestrator{
			LoginNodes: &loomv1.LoginNodes{MachineType: "n2-standard-8", Count: 1},
			NodeSets:   []*loomv1.SlurmNodeSet{{Id: "a3u", NodePoolId: "a3u"}, {Id: "spot", NodePoolId: "spot"}},
			Partitions: []*loomv1.SlurmPartition{
				{Id: "train", NodeSetIds: []string{"a3u"}, Default: true, PriorityTier: 10},
				{Id: "preempt", NodeSetIds: []string{"spot"}, MaxTime: "4:00:00"},
			},
		}},
		Storage: &loomv1.StorageResources{
			Home:    &loomv1.SharedHome{Tier: "ZONAL", CapacityGib: 1024, MountPath: "/home"},
			Scratch: &loomv1.ScratchFilesystem{ThroughputMbpsPerTib: 1000, CapacityGib: 2048, MountPath: "/scratch"},
		},
		Network: &loomv1.NetworkConfig{Name: "a3u-net", Mtu: 8896, Zone: "us-central1-a"},
		Status: &loomv1.ClusterStatus{
			State: loomv1.Cluster_RUNNING, ReadyNodes: 5, TotalNodes: 6, HomeDir: "/data/a3u/home", ScratchDir: "/data/a3u/scratch",
			LoginNode: "a3u-login-001",
			NodePools: []*loomv1.NodePoolStatus{{Id: "a3u", Target: 4, Ready: 4}, {Id: "spot", Target: 2, Ready: 1, Failed: 1}},
			Conditions: []*loomv1.Condition{
				{Type: "Ready", Status: "False", Reason: "NodesFailing", Message: "5 of 6 nodes ready", LastTransitionTime: ts(time.Minute)},
				{Type: "Degraded", Status: "True", Reason: "NodesFailing", Message: "spot-0002: preempted by provider", LastTransitionTime: ts(time.Minute)},
			},
		},
		CreateTime: ts(2 * time.Hour),
		UpdateTime: ts(time.Minute),
	}
}

func a3uNodes() []*loomv1.Node {
	const c = "projects/default/clusters/a3u"
	var ns []*loomv1.Node
	for i := 1; i <= 4; i++ {
		h := fmt.Sprintf("a3u-%04d", i)
		ns = append(ns, &loomv1.Node{Name: c + "/nodes/" + h, Cluster: c, NodePool: "a3u", Hostname: h, State: loomv1.Node_READY,
			Gpus: 8, Zone: "us-central1-a", CapacityType: loomv1.CapacitySource_RESERVATION, Role: "compute", CreateTime: ts(2 * time.Hour)})
	}
	ns = append(ns,
		&loomv1.Node{Name: c + "/nodes/spot-0001", Cluster: c, NodePool: "spot", Hostname: "spot-0001", State: loomv1.Node_READY,
			Gpus: 8, Zone: "us-central1-b", CapacityType: loomv1.CapacitySource_SPOT, Role: "compute", CreateTime: ts(2 * time.Hour)},
		&loomv1.Node{Name: c + "/nodes/spot-0002", Cluster: c, NodePool: "spot", Hostname: "spot-0002", State: loomv1.Node_FAILED,
			Reason: "preempted by provider", NextAction: "replace when SPOT capacity returns",
			Gpus: 8, Zone: "us-central1-b", CapacityType: loomv1.CapacitySource_SPOT, Role: "compute", CreateTime: ts(time.Hour)},
		&loomv1.Node{Name: c + "/nodes/spot-0003", Cluster: c, NodePool: "spot", Hostname: "spot-0003", State: loomv1.Node_PROVISIONING,
			NextAction: "retry launch in 4s (attempt 2 of 5)", LaunchAttempts: 1,
			Gpus: 8, Zone: "us-central1-b", CapacityType: loomv1.CapacitySource_SPOT, Role: "compute", CreateTime: ts(time.Minute)},
		&loomv1.Node{Name: c + "/nodes/a3u-login-001", Cluster: c, Hostname: "a3u-login-001", State: loomv1.Node_READY,
			Zone: "us-central1-a", Role: "login", CreateTime: ts(2 * time.Hour)},
	)
	return ns
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
	return runWith(t, gw, nil, args...)
}

// runWith is run with the app adjusted by setup (when not nil) first.
func runWith(t *testing.T, gw string, setup func(*app), args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	a := newApp()
	a.now = func() time.Time { return testNow }
	a.pollInterval = time.Millisecond
	a.callTimeout = 10 * time.Second
	if setup != nil {
		setup(a)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code = a.execute(ctx, append([]string{"--gateway", gw}, args...), &out, &errb)
	return out.String(), errb.String(), code
}

func signalContext() context.Context {
	ctx, _ := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	return ctx
}
