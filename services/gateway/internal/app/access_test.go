package app

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/loom-ml/loom/libs/auth"
	"github.com/loom-ml/loom/libs/store"
	"github.com/loom-ml/loom/libs/testkit"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/gateway/internal/adapters"
)

type oneCluster struct {
	loomv1.UnimplementedClusterServiceServer
}

func (oneCluster) GetCluster(_ context.Context, r *loomv1.GetClusterRequest) (*loomv1.Cluster, error) {
	return &loomv1.Cluster{Name: r.GetName(),
		Compute: &loomv1.ComputeResources{NodePools: []*loomv1.NodePool{{Id: "gpu", NodeCount: 2, AcceleratorCount: 8}}},
		Status:  &loomv1.ClusterStatus{State: loomv1.Cluster_RUNNING, ReadyNodes: 2, TotalNodes: 2}}, nil
}

type noJobs struct {
	loomv1.UnimplementedJobServiceServer
}

// ListJobs lists none: the quotas count the project's jobs before a submit.
func (noJobs) ListJobs(context.Context, *loomv1.ListJobsRequest) (*loomv1.ListJobsResponse, error) {
	return &loomv1.ListJobsResponse{}, nil
}

func (noJobs) GetJob(_ context.Context, r *loomv1.GetJobRequest) (*loomv1.Job, error) {
	return nil, status.Errorf(codes.NotFound, "job %s not found", r.GetName())
}

// TestNoEnvironmentInLogs: a job's environment never reaches the gateway's
// log, at any level, through submit, get and cancel (the log says which
// job, not what it carries).
func TestNoEnvironmentInLogs(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 30*time.Second)
	_, rdb := testkit.Redis(t)
	owners := serveOwners(t, func(srv *grpc.Server) {
		loomv1.RegisterClusterServiceServer(srv, oneCluster{})
		loomv1.RegisterJobServiceServer(srv, noJobs{})
	})
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	g := New(adapters.NewRepo(store.New(rdb, "gateway:")), owners, Options{Log: log})

	ctx = auth.NewContext(ctx, &auth.Principal{Name: "users/ana", Kind: auth.KindUser, User: "ana",
		Roles: map[string]auth.Role{"p": auth.RoleUser}})
	const secret = "hf_s3cretvalue"
	j, err := g.SubmitJob(ctx, &loomv1.SubmitJobRequest{Parent: "projects/p", Job: &loomv1.Job{
		Cluster: "projects/p/clusters/c1", Script: "echo hi", NodeCount: 1,
		Env: map[string]string{"HF_TOKEN": secret, "PLAIN": "also-" + secret}, Export: "ALL,HF_TOKEN=" + secret}})
	if err != nil {
		t.Fatal(err)
	}
	if j.GetUser() != "ana" || j.GetEnv()["HF_TOKEN"] != secret {
		t.Fatalf("submitted %v: the owner gets the job with its environment", j)
	}
	if _, err := g.GetJob(ctx, &loomv1.GetJobRequest{Name: j.GetName()}); err != nil {
		t.Fatal(err)
	}
	if _, err := g.CancelJob(ctx, &loomv1.CancelJobRequest{Name: j.GetName()}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), j.GetName()) {
		t.Fatalf("the log does not name the job; is it written? %s", logs.String())
	}
	if strings.Contains(logs.String(), secret) {
		t.Errorf("the log holds the environment:\n%s", logs.String())
	}
}
