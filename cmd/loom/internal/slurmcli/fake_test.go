package slurmcli

import (
	"bytes"
	"context"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/paging"
	"github.com/loom-ml/loom/libs/slurmspec"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// testNow is the fixed clock of the output tests (UTC).
var testNow = time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC)

// ago is a timestamp d before testNow.
func ago(d time.Duration) *timestamppb.Timestamp { return timestamppb.New(testNow.Add(-d)) }

// fakeGateway serves the loom.v1 services the Slurm commands call, with
// canned data, and records what it was asked. It stands in for the
// gateway's API in unit tests only.
type fakeGateway struct {
	loomv1.UnimplementedJobServiceServer
	loomv1.UnimplementedSlurmServiceServer
	loomv1.UnimplementedClusterServiceServer

	mu         sync.Mutex
	jobs       []*loomv1.Job
	partitions []*loomv1.Partition
	nodes      []*loomv1.SlurmNode
	clusters   []*loomv1.Cluster
	nextID     int

	submitted  []*loomv1.SubmitJobRequest
	cancels    []*loomv1.CancelJobRequest
	updates    []*loomv1.UpdateJobRequest
	nodeUpdate []*loomv1.UpdateSlurmNodeRequest
	listReqs   []*loomv1.ListJobsRequest
	// denyOthers answers Cancel and Update on another user's job as the
	// gateway does for a caller who is not an administrator.
	denyOthers bool
	// maxArraySize, when set, refuses --array specs past it with the
	// gateway's InvalidArgument (field job.array, slurmspec's reason).
	maxArraySize int
}

// denied is the gateway's answer to a caller acting on another's job.
func (f *fakeGateway) denied(caller string, j *loomv1.Job) error {
	if f.denyOthers && j != nil && j.GetUser() != caller {
		return status.Error(codes.PermissionDenied, "Access/permission denied")
	}
	return nil
}

func (f *fakeGateway) SubmitJob(_ context.Context, req *loomv1.SubmitJobRequest) (*loomv1.Job, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s := req.GetJob().GetArray(); f.maxArraySize > 0 && s != "" {
		if _, err := slurmspec.ParseArray(s, f.maxArraySize); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "job.array: %q: %v", s, err)
		}
	}
	f.submitted = append(f.submitted, proto.Clone(req).(*loomv1.SubmitJobRequest))
	f.nextID++
	j := proto.Clone(req.GetJob()).(*loomv1.Job)
	j.JobId = strconv.Itoa(f.nextID)
	j.Name = req.GetParent() + "/jobs/" + j.JobId
	j.State = loomv1.JobState_PENDING
	f.jobs = append(f.jobs, j)
	return j, nil
}

func (f *fakeGateway) find(name string) *loomv1.Job {
	for _, j := range f.jobs {
		if j.GetName() == name {
			return j
		}
	}
	// "A_N": a task an array's parent still holds.
	if parent, task, ok := strings.Cut(name, "_"); ok {
		for _, j := range f.jobs {
			if j.GetName() == parent && isParent(j) {
				spec, err := ParseArray(j.GetArray())
				for _, i := range spec.Indexes() {
					if err == nil && strconv.Itoa(i) == task {
						return j
					}
				}
			}
		}
	}
	return nil
}

func (f *fakeGateway) GetJob(_ context.Context, req *loomv1.GetJobRequest) (*loomv1.Job, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if j := f.find(req.GetName()); j != nil {
		return j, nil
	}
	return nil, status.Errorf(codes.NotFound, "job %s not found", req.GetName())
}

func (f *fakeGateway) ListJobs(_ context.Context, req *loomv1.ListJobsRequest) (*loomv1.ListJobsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.listReqs = append(f.listReqs, proto.Clone(req).(*loomv1.ListJobsRequest))
	in := func(v string, set []string) bool {
		if len(set) == 0 {
			return true
		}
		for _, s := range set {
			if s == v {
				return true
			}
		}
		return false
	}
	var out []*loomv1.Job
	for _, j := range f.jobs {
		if req.GetCluster() != "" && j.GetCluster() != req.GetCluster() {
			continue
		}
		if !in(j.GetUser(), req.GetUsers()) || !in(j.GetDisplayName(), req.GetNames()) || !in(j.GetPartition(), req.GetPartitions()) {
			continue
		}
		if len(req.GetStates()) > 0 {
			ok := false
			for _, s := range req.GetStates() {
				ok = ok || effectiveState(j) == s
			}
			if !ok {
				continue
			}
		}
		if req.GetActiveOnly() && effectiveState(j).Terminal() {
			continue
		}
		out = append(out, j)
	}
	// Pages as the gateway does (by bytes too), in the fixture's order.
	page, next, err := paging.Ordered(req, out)
	return &loomv1.ListJobsResponse{Jobs: page, NextPageToken: next}, errs.ToStatus(err)
}

func (f *fakeGateway) CancelJob(_ context.Context, req *loomv1.CancelJobRequest) (*loomv1.Job, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cancels = append(f.cancels, proto.Clone(req).(*loomv1.CancelJobRequest))
	j := f.find(req.GetName())
	if err := f.denied(req.GetUser(), j); err != nil {
		return nil, err
	}
	if j == nil {
		return nil, status.Errorf(codes.NotFound, "job not found")
	}
	if req.GetSignal() == "" && !j.GetState().Terminal() {
		j.State = loomv1.JobState_CANCELLED
	}
	return j, nil
}

func (f *fakeGateway) UpdateJob(_ context.Context, req *loomv1.UpdateJobRequest) (*loomv1.Job, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.updates = append(f.updates, proto.Clone(req).(*loomv1.UpdateJobRequest))
	j := f.find(req.GetName())
	if err := f.denied(req.GetUser(), j); err != nil {
		return nil, err
	}
	if j == nil {
		return nil, status.Errorf(codes.NotFound, "job not found")
	}
	return j, nil
}

func (f *fakeGateway) WatchJob(req *loomv1.WatchJobRequest, stream loomv1.JobService_WatchJobServer) error {
	f.mu.Lock()
	j := f.find(req.GetName())
	var snapshot *loomv1.Job
	if j != nil {
		snapshot = proto.Clone(j).(*loomv1.Job)
	}
	f.mu.Unlock()
	if snapshot == nil {
		return status.Errorf(codes.NotFound, "job not found")
	}
	// The fake job runs to its end at once.
	if err := stream.Send(snapshot); err != nil {
		return err
	}
	snapshot.State = loomv1.JobState_FAILED
	snapshot.ExitCode = 3
	return stream.Send(snapshot)
}

func (f *fakeGateway) ListPartitions(_ context.Context, req *loomv1.ListPartitionsRequest) (*loomv1.ListPartitionsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return &loomv1.ListPartitionsResponse{Partitions: f.partitions}, nil
}

func (f *fakeGateway) ListSlurmNodes(_ context.Context, req *loomv1.ListSlurmNodesRequest) (*loomv1.ListSlurmNodesResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return &loomv1.ListSlurmNodesResponse{Nodes: f.nodes}, nil
}

func (f *fakeGateway) UpdateSlurmNode(_ context.Context, req *loomv1.UpdateSlurmNodeRequest) (*loomv1.SlurmNode, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nodeUpdate = append(f.nodeUpdate, proto.Clone(req).(*loomv1.UpdateSlurmNodeRequest))
	for _, n := range f.nodes {
		if n.GetHostname() == req.GetHostname() {
			return n, nil
		}
	}
	return nil, status.Errorf(codes.NotFound, "node not found")
}

func (f *fakeGateway) ListClusters(context.Context, *loomv1.ListClustersRequest) (*loomv1.ListClustersResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return &loomv1.ListClustersResponse{Clusters: f.clusters}, nil
}

// startFake serves f on a loopback port and returns a connection to it.
func startFake(t *testing.T, f *fakeGateway) *grpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	loomv1.RegisterJobServiceServer(srv, f)
	loomv1.RegisterSlurmServiceServer(srv, f)
	loomv1.RegisterClusterServiceServer(srv, f)
	go func() { _ = srv.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = conn.Close()
		srv.Stop()
	})
	return conn
}

// run runs one command against f and returns its exit status and output.
func run(t *testing.T, f *fakeGateway, name string, env Env, args ...string) (int, string, string) {
	t.Helper()
	env.Conn = startFake(t, f)
	if env.Project == "" {
		env.Project = "default"
	}
	if env.Cluster == "" {
		env.Cluster = "demo"
	}
	if env.User == "" {
		env.User = "alice"
	}
	if env.Now == nil {
		env.Now = func() time.Time { return testNow }
	}
	if env.Location == nil {
		env.Location = time.UTC
	}
	if env.CallTimeout == 0 {
		env.CallTimeout = 10 * time.Second
	}
	var out, errb bytes.Buffer
	code := Main(context.Background(), name, args, env, &out, &errb)
	return code, out.String(), errb.String()
}

const demoCluster = "projects/default/clusters/demo"
