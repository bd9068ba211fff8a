// Package fakegw is a fake Loom gateway for tests only: a gRPC server
// implementing, in memory, the loom.v1 services that the CLI (package cli)
// and the Slurm commands (package slurmcli) call — clusters, operations,
// jobs, nodes, models, reservations, Slurm's partitions and nodes,
// accounts and associations (sacctmgr), the audit trail, node health and
// goodput (HealthService, GoodputService), what came in through the
// ingress (IngressService, with Gateway.Ingress), and (with
// Gateway.Auth) authentication: tokens, WhoAmI and API keys, checking the
// bearer credential of each call. Bearers records what every call carried.
//
// A Gateway holds canned data in exported fields that a test fills (and
// may change between calls), answers from it with the gateway's filters,
// paging and owner checks, and records every request it is sent, so that a
// test can check both what a command sends and what it prints. It stands in
// for the gateway's API only: nothing here fakes the scheduler, Kafka or
// Redis, and jobs do not run (WatchJob plays a canned ending; with
// StartJobs a polled job starts, and job steps play canned tasks: the
// test sets their exit codes and when they end).
package fakegw

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
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

	"github.com/loom-ml/loom/libs/clusterspec"
	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/paging"
	"github.com/loom-ml/loom/libs/resname"
	"github.com/loom-ml/loom/libs/slurmspec"
	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// TestNow is the fixed "now" of the tests' fixtures and of the commands
// they run, so that ages and times print the same on every run.
var TestNow = time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC)

// Ago is the timestamp d before TestNow.
func Ago(d time.Duration) *timestamppb.Timestamp { return timestamppb.New(TestNow.Add(-d)) }

// Gateway serves loom.v1 from the data in its fields. The zero value is a
// gateway with nothing in it. Tests set the fields before the calls they
// affect, not while a call is being served; the handlers read and change
// them (SubmitJob adds to Jobs, CancelJob ends jobs) under the Gateway's
// lock.
type Gateway struct {
	loomv1.UnimplementedClusterServiceServer
	loomv1.UnimplementedOperationServiceServer
	loomv1.UnimplementedJobServiceServer
	loomv1.UnimplementedNodeServiceServer
	loomv1.UnimplementedModelServiceServer
	loomv1.UnimplementedReservationServiceServer
	loomv1.UnimplementedSlurmServiceServer
	loomv1.UnimplementedAccountServiceServer
	loomv1.UnimplementedHealthServiceServer
	loomv1.UnimplementedGoodputServiceServer

	// Auth, when set, is served as AuthService (see Auth). Without it
	// AuthService is Unimplemented, as on a gateway that predates it.
	Auth *Auth
	// Training, when set, is served as loom.training.v1.TrainingService
	// (training.go); without it the service is Unimplemented.
	Training *Training
	// Ingress, when set, is served as IngressService (ingress.go);
	// without it the service is Unimplemented, as on a gateway that
	// predates it.
	Ingress *Ingress
	loomv1.UnimplementedAuditServiceServer

	// Clusters are listed by project (the name's prefix) and found by name.
	Clusters []*loomv1.Cluster
	// Nodes are the clusters' nodes (NodeService). A cluster with no
	// SlurmNodes gets its compute nodes among them as idle Slurm nodes, in
	// one default partition "batch" when it has no Partitions either.
	Nodes []*loomv1.Node
	// Jobs are listed in this order (filtered, paged); SubmitJob appends.
	Jobs []*loomv1.Job
	// SlurmNodes and Partitions answer SlurmService for the cluster they
	// name (or for every cluster, where Cluster is empty); a cluster none
	// of Clusters, Nodes, SlurmNodes and Partitions has is NotFound, as
	// the gateway answers (the scheduler does not know it).
	SlurmNodes []*loomv1.SlurmNode
	Partitions []*loomv1.Partition
	// Shares is every cluster's fair-share standing, as ListShares answers
	// it for a cluster named in Clusters or by a partition.
	Shares []*loomv1.Share
	// SlurmConfigs are GetSlurmConfig's answers by cluster name; NotFound
	// for any other cluster.
	SlurmConfigs map[string]*loomv1.SlurmConfig
	// Models and Versions (the versions' names say their model's);
	// ModelVersions are the versions as Vertex names them, each a Model
	// "{model}@{version}".
	Models        []*loomv1.Model
	Versions      []*loomv1.ModelVersion
	ModelVersions []*loomv1.Model
	// Reservations and Capacity: ReservationService's data. A reservation
	// with Consumers cannot be deleted (FailedPrecondition).
	Reservations []*loomv1.Reservation
	Capacity     []*loomv1.CapacityPool
	// Accounts and Associations are AccountService's (accounts.go): the
	// project's accounts besides root, and its users' associations.
	Accounts     []*loomv1.Account
	Associations []*loomv1.Association
	// AbortAccountWrites makes that many account writes (CreateAccount,
	// UpdateAccount, DeleteAccount, SetAssociation, DeleteAssociation)
	// answer Aborted, "changed meanwhile", writing nothing, as the gateway
	// answers a write that lost a race; Meanwhile, when set, runs (under
	// the fake's lock) as each is refused: the write that won.
	AbortAccountWrites int
	Meanwhile          func(*Gateway)
	// AuditRecords are ListAuditRecords' trail, newest first (audit.go).
	AuditRecords []*loomv1.AuditRecord
	// NodeHealth and HealthResults are HealthService's reads (health.go):
	// the nodes' health, and stored check results (newest first; their
	// names say their cluster's). ScanOutcomes is the outcome a scan's
	// checks get on a node (PASS when absent).
	NodeHealth []*loomv1.NodeHealth
	// NodeHealthErr, when set, is ListNodeHealth's answer (a gateway
	// without the health service: Unimplemented; a caller who may not
	// read it: PermissionDenied).
	NodeHealthErr error
	// NodeHealthEvents are served newest first, in the order given.
	NodeHealthEvents []*loomv1.NodeHealthEvent
	HealthResults    []*loomv1.HealthCheckResult
	ScanOutcomes     map[string]loomv1.CheckOutcome
	// HealthPolicies are GetHealthPolicy's answers by cluster name.
	HealthPolicies map[string]*loomv1.HealthPolicy
	// Goodputs are GoodputService's answers by job or cluster name.
	Goodputs map[string]*loomv1.Goodput
	// Operations are ListOperations' answer, by project (the name's
	// prefix), unpaged; GetOperation plays its canned operation whatever
	// is here.
	Operations []*loomv1.Operation
	// Metrics, when set, is served as loom.training.v1.MetricsService:
	// ListMetrics answers the series of the parent named (none for any
	// other); without it the service is Unimplemented.
	Metrics map[string][]*trainingv1.Series
	// Logs are ReadJobLogs' chunks by job name.
	Logs map[string][]string
	// Steps are the jobs' steps (names "{job}/steps/{id}"), listed in
	// this order; CreateJobStep appends.
	Steps []*loomv1.JobStep

	// Watch, when set, is what WatchJob streams for any job. Without it
	// WatchJob streams the job as it is, then as ended FAILED with exit
	// code 3: the fake's jobs fail at once.
	Watch []*loomv1.Job
	// FailOperation makes the operations that GetOperation advances end
	// with ResourceExhausted instead of the cluster.
	FailOperation bool
	// SubmitErr, when set, is SubmitJob's answer.
	SubmitErr error
	// CancelErr, when set, is CancelJob's answer (the gateway's
	// FailedPrecondition, in Slurm's words, for a job that is ending or
	// ended, where the fake answers with the job).
	CancelErr error
	// StepCancelErr, when set, is CancelJobStep's answer (the gateway's
	// PermissionDenied for another user's job: the fake has no caller).
	StepCancelErr error
	// UpdateErr, when set, is UpdateCluster's answer (a cluster that
	// changes under the call: ABORTED).
	UpdateErr error
	// UpdateJobErr, when set, is UpdateJob's answer (the gateway's
	// FailedPrecondition for what the scheduler's Slurm backend does not
	// map, say).
	UpdateJobErr error
	// DenyOthers answers CancelJob and UpdateJob on another user's job
	// with PermissionDenied, as the gateway does for a caller who is not
	// an administrator.
	DenyOthers bool
	// MaxArraySize, when set, refuses job arrays past it with the
	// gateway's InvalidArgument (field job.array, slurmspec's reason).
	MaxArraySize int
	// Now is the clock of submit times (time.Now when nil).
	Now func() time.Time

	// StartJobs makes GetJob start the pending jobs it is asked about, as
	// the scheduler would: a PENDING job is answered PENDING by its first
	// PendingPolls GetJob calls, then RUNNING, on the first node_count (at
	// least one) of its cluster's Slurm nodes (see Nodes). Without it jobs
	// stay as they are.
	StartJobs    bool
	PendingPolls int
	// StartLayout, when set, is called on a job StartJobs just started
	// (the caller holding the gateway's lock) to set what else the
	// scheduler records of a run: its per-node tasks and CPUs
	// (node_tasks, node_cpus). Without it a started job has none, as a
	// record from before they were kept.
	StartLayout func(j *loomv1.Job)
	// StepExitCodes are the exit codes of the tasks of every step
	// CreateJobStep starts, by rank (0 past its end). A step is RUNNING
	// for StepEndAfter GetJobStep calls, and the next one finds it ended:
	// COMPLETED when every task exited 0, else FAILED, with the highest
	// code as its own.
	StepExitCodes []int32
	StepEndAfter  int
	// StepLaunchFailures are the steps' nodes, by index in the step's
	// nodes, whose tasks never start, with the agent's message: when the
	// step ends, such a node is launch_failed, its node_messages entry the
	// message and its tasks' exit codes 1 (as the scheduler reports an
	// agent's FAILED_TO_START), whatever StepExitCodes says.
	StepLaunchFailures map[int]string
	// StepPendingPolls makes every step CreateJobStep creates wait, as
	// one whose resources running steps hold does: PENDING ("Requested
	// nodes are busy") for its first StepPendingPolls GetJobStep calls,
	// RUNNING from the next on (and then as StepEndAfter says).
	StepPendingPolls int
	// StepPendingReason is the reason of such a waiting step; ""
	// "Requested nodes are busy" (slurmspec.ReasonStepBusy).
	StepPendingReason string
	// StepPendingThen, when set, is its reason from its second GetJobStep
	// on (a step that waited for the job's prolog, then for busy nodes).
	StepPendingThen string
	// StepOutputDir, when set, is the steps' output_dir: CreateJobStep
	// writes each task's whole output there at once, as the tasks would
	// on the shared file system: task-R.out "hello from R\nsecond line R"
	// (its last line unterminated) and task-R.err "warn R\n".
	StepOutputDir string

	mu        sync.Mutex
	requests  []proto.Message
	nextID    int            // the last job id given; 0: not counted yet
	opPolls   int            // GetOperation calls, which advance the operation
	jobPolls  map[string]int // GetJob calls that found a pending job, by name (StartJobs)
	stepPolls map[string]int // GetJobStep calls, by step name
	waitPolls map[string]int // GetJobStep calls that found the step PENDING, by step name
	bearers   []string       // each call's credential (Bearers)
	// NoScanProgress makes GetHealthScan Unimplemented, as a gateway from
	// before it answers.
	NoScanProgress bool
	// scans counts ScanNodes calls; pendingResults are scan results not
	// yet released to ListHealthResults (health.go).
	scans          int
	pendingResults []*loomv1.HealthCheckResult
}

// Serve serves g on a loopback port until the test ends and returns the
// address. One Gateway may be served any number of times.
func (g *Gateway) Serve(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("fakegw: listen: %v", err)
	}
	s := grpc.NewServer(grpc.ChainUnaryInterceptor(g.unaryBearer), grpc.ChainStreamInterceptor(g.streamBearer))
	if g.Auth != nil {
		loomv1.RegisterAuthServiceServer(s, g.Auth)
	}
	if g.Training != nil {
		g.Training.g = g
		trainingv1.RegisterTrainingServiceServer(s, g.Training)
	}
	if g.Ingress != nil {
		g.Ingress.g = g
		loomv1.RegisterIngressServiceServer(s, g.Ingress)
	}
	if g.Metrics != nil {
		trainingv1.RegisterMetricsServiceServer(s, metricsServer{g: g})
	}
	loomv1.RegisterClusterServiceServer(s, g)
	loomv1.RegisterOperationServiceServer(s, g)
	loomv1.RegisterJobServiceServer(s, g)
	loomv1.RegisterNodeServiceServer(s, g)
	loomv1.RegisterModelServiceServer(s, g)
	loomv1.RegisterReservationServiceServer(s, g)
	loomv1.RegisterSlurmServiceServer(s, g)
	loomv1.RegisterAccountServiceServer(s, g)
	loomv1.RegisterAuditServiceServer(s, g)
	loomv1.RegisterHealthServiceServer(s, g)
	loomv1.RegisterGoodputServiceServer(s, g)
	go func() { _ = s.Serve(ln) }()
	t.Cleanup(s.Stop)
	return ln.Addr().String()
}

// Dial serves g (Serve) and returns a client connection to it, closed when
// the test ends.
func (g *Gateway) Dial(t testing.TB) *grpc.ClientConn {
	t.Helper()
	// A plain connection, as the CLI's: the calls carry only the
	// credentials the code under test gives them (testkit.Dial would add
	// a service token).
	addr := g.Serve(t)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("fakegw: dial %s: %v", addr, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// Requests returns copies of the requests of T's type that g was sent, in
// the order they came.
func Requests[T proto.Message](g *Gateway) []T {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []T
	for _, r := range g.requests {
		if r, ok := r.(T); ok {
			out = append(out, r)
		}
	}
	return out
}

// LastRequest returns the last request of T's type that g was sent, and
// false if there was none.
func LastRequest[T proto.Message](g *Gateway) (T, bool) {
	rs := Requests[T](g)
	if len(rs) == 0 {
		var zero T
		return zero, false
	}
	return rs[len(rs)-1], true
}

// record keeps a copy of m; the caller holds g.mu.
func (g *Gateway) record(m proto.Message) {
	g.requests = append(g.requests, proto.Clone(m))
}

// lock takes g's lock, records m and returns what releases the lock:
// every handler's first step.
func (g *Gateway) lock(m proto.Message) (unlock func()) {
	g.mu.Lock()
	g.record(m)
	return g.mu.Unlock
}

func shortName(name string) string { return name[strings.LastIndex(name, "/")+1:] }

// under lists the items whose name is in parent's collection (parent +
// "/" + collection + "/..."), as the gateway lists a project's.
func under[T interface{ GetName() string }](items []T, parent, collection string) []T {
	var out []T
	for _, it := range items {
		if strings.HasPrefix(it.GetName(), parent+"/"+collection+"/") {
			out = append(out, it)
		}
	}
	return out
}

// ---- clusters and operations ----

func (g *Gateway) cluster(name string) *loomv1.Cluster {
	for _, c := range g.Clusters {
		if c.GetName() == name {
			return c
		}
	}
	return nil
}

func clusterNotFound(name string) error {
	return status.Errorf(codes.NotFound, "cluster %s not found", name)
}

// GetCluster answers the cluster of that name, or NotFound.
func (g *Gateway) GetCluster(_ context.Context, r *loomv1.GetClusterRequest) (*loomv1.Cluster, error) {
	defer g.lock(r)()
	if c := g.cluster(r.GetName()); c != nil {
		return c, nil
	}
	return nil, clusterNotFound(r.GetName())
}

// ListClusters answers the parent project's clusters, unpaged.
func (g *Gateway) ListClusters(_ context.Context, r *loomv1.ListClustersRequest) (*loomv1.ListClustersResponse, error) {
	defer g.lock(r)()
	return &loomv1.ListClustersResponse{Clusters: under(g.Clusters, r.GetParent(), "clusters")}, nil
}

// CreateCluster answers operation op1, which GetOperation advances, for
// any cluster (one of the same name too: the operations are canned). The
// cluster is not added to Clusters.
func (g *Gateway) CreateCluster(_ context.Context, r *loomv1.CreateClusterRequest) (*loomv1.Operation, error) {
	defer g.lock(r)()
	return &loomv1.Operation{Name: "projects/default/operations/op1",
		Metadata: &loomv1.OperationMetadata{Target: r.GetCluster().GetName(), Verb: "create", Progress: "0 of 2 nodes ready"}}, nil
}

// DeleteCluster answers NotFound for a cluster it does not have, Aborted
// when the request's etag is set and is not the cluster's, else operation
// op2. The cluster stays in Clusters.
func (g *Gateway) DeleteCluster(_ context.Context, r *loomv1.DeleteClusterRequest) (*loomv1.Operation, error) {
	defer g.lock(r)()
	c := g.cluster(r.GetName())
	if c == nil {
		return nil, clusterNotFound(r.GetName())
	}
	if err := clusterspec.CheckEtag("delete", c.GetName(), r.GetEtag(), c.GetEtag()); err != nil {
		return nil, errs.ToStatus(err)
	}
	return &loomv1.Operation{Name: "projects/default/operations/op2",
		Metadata: &loomv1.OperationMetadata{Target: r.GetName(), Verb: "delete", Progress: "stopping 2 nodes"}}, nil
}

// UpdateCluster answers UpdateErr when set, NotFound for a cluster it does
// not have, Aborted when the request's cluster.etag is set and is not the
// cluster's, else operation op3. Clusters do not change.
func (g *Gateway) UpdateCluster(_ context.Context, r *loomv1.UpdateClusterRequest) (*loomv1.Operation, error) {
	defer g.lock(r)()
	if g.UpdateErr != nil {
		return nil, g.UpdateErr
	}
	c := g.cluster(r.GetCluster().GetName())
	if c == nil {
		return nil, clusterNotFound(r.GetCluster().GetName())
	}
	if err := clusterspec.CheckEtag("update", c.GetName(), r.GetCluster().GetEtag(), c.GetEtag()); err != nil {
		return nil, errs.ToStatus(err)
	}
	return &loomv1.Operation{Name: "projects/default/operations/op3",
		Metadata: &loomv1.OperationMetadata{Target: r.GetCluster().GetName(), Verb: "update", Progress: "0 of 2 nodes ready"}}, nil
}

// ListOperations answers the parent project's Operations, unpaged.
func (g *Gateway) ListOperations(_ context.Context, r *loomv1.ListOperationsRequest) (*loomv1.ListOperationsResponse, error) {
	defer g.lock(r)()
	return &loomv1.ListOperationsResponse{Operations: under(g.Operations, r.GetParent(), "operations")}, nil
}

// metricsServer serves Gateway.Metrics as MetricsService.
type metricsServer struct {
	trainingv1.UnimplementedMetricsServiceServer
	g *Gateway
}

// ListMetrics answers the parent's series from Gateway.Metrics.
func (m metricsServer) ListMetrics(_ context.Context, r *trainingv1.ListMetricsRequest) (*trainingv1.ListMetricsResponse, error) {
	defer m.g.lock(r)()
	return &trainingv1.ListMetricsResponse{Series: m.g.Metrics[r.GetParent()]}, nil
}

// GetOperation plays every operation the same way: the first poll finds
// it at "1 of 2 nodes ready", every later one done, with the running
// cluster demo (or, with FailOperation, ResourceExhausted).
func (g *Gateway) GetOperation(_ context.Context, r *loomv1.GetOperationRequest) (*loomv1.Operation, error) {
	defer g.lock(r)()
	g.opPolls++
	op := &loomv1.Operation{Name: r.GetName(), Metadata: &loomv1.OperationMetadata{Verb: "create"}}
	switch {
	case g.opPolls == 1:
		op.Metadata.Progress = "1 of 2 nodes ready"
	case g.FailOperation:
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

// WaitOperation answers the operation done, as GetOperation's later polls
// do (ResourceExhausted with FailOperation).
func (g *Gateway) WaitOperation(_ context.Context, r *loomv1.WaitOperationRequest) (*loomv1.Operation, error) {
	defer g.lock(r)()
	op := &loomv1.Operation{Name: r.GetName(), Done: true, Metadata: &loomv1.OperationMetadata{Verb: "update"}}
	if g.FailOperation {
		op.Result = &loomv1.Operation_Error{Error: &loomv1.OperationError{Code: int32(codes.ResourceExhausted), Message: "no capacity for pool gpu"}}
	}
	return op, nil
}

// GetSlurmConfig answers SlurmConfigs[name], or NotFound.
func (g *Gateway) GetSlurmConfig(_ context.Context, r *loomv1.GetSlurmConfigRequest) (*loomv1.SlurmConfig, error) {
	defer g.lock(r)()
	if sc, ok := g.SlurmConfigs[r.GetName()]; ok {
		return sc, nil
	}
	return nil, clusterNotFound(r.GetName())
}

// ---- nodes ----

// ListNodes answers the parent cluster's nodes, for
// projects/{p}/clusters/- every node of the project's clusters, and for
// projects/-/clusters/- every node (a "-" matches any id, as the
// provisioner matches it).
func (g *Gateway) ListNodes(_ context.Context, r *loomv1.ListNodesRequest) (*loomv1.ListNodesResponse, error) {
	defer g.lock(r)()
	want, err := resname.SplitCluster(r.GetParent())
	if err != nil {
		return nil, errs.Invalid("parent", "%v", err)
	}
	var out []*loomv1.Node
	for _, n := range g.Nodes {
		have, err := resname.SplitCluster(n.GetCluster())
		if err == nil && (want.Project == resname.Wildcard || want.Project == have.Project) && (want.ID == resname.Wildcard || want.ID == have.ID) {
			out = append(out, n)
		}
	}
	return &loomv1.ListNodesResponse{Nodes: out}, nil
}

// ---- Slurm ----

// slurmNodes are the cluster's Slurm nodes: SlurmNodes', else its compute
// Nodes, idle, in partition "batch". The caller holds g.mu.
func (g *Gateway) slurmNodes(cluster string) []*loomv1.SlurmNode {
	var out []*loomv1.SlurmNode
	for _, n := range g.SlurmNodes {
		if n.GetCluster() == "" || n.GetCluster() == cluster {
			out = append(out, n)
		}
	}
	if len(out) > 0 {
		return out
	}
	for _, n := range g.Nodes {
		if n.GetCluster() == cluster && n.GetRole() != "login" {
			out = append(out, &loomv1.SlurmNode{Hostname: n.GetHostname(), Node: n.GetName(), Cluster: cluster,
				State: loomv1.SlurmNode_IDLE, Partitions: []string{"batch"}, Gpus: n.GetGpus()})
		}
	}
	return out
}

// slurmKnows reports whether SlurmService answers for cluster: one of
// Clusters, or one that Nodes, SlurmNodes or Partitions name (or one of
// these naming none: every cluster).
func (g *Gateway) slurmKnows(cluster string) bool {
	if g.cluster(cluster) != nil {
		return true
	}
	for _, n := range g.Nodes {
		if n.GetCluster() == cluster {
			return true
		}
	}
	for _, n := range g.SlurmNodes {
		if n.GetCluster() == "" || n.GetCluster() == cluster {
			return true
		}
	}
	for _, p := range g.Partitions {
		if p.GetCluster() == "" || p.GetCluster() == cluster {
			return true
		}
	}
	return false
}

// ListShares pages Shares for a cluster the fake has (in Clusters, or
// named by a partition); NotFound otherwise.
func (g *Gateway) ListShares(_ context.Context, r *loomv1.ListSharesRequest) (*loomv1.ListSharesResponse, error) {
	defer g.lock(r)()
	known := g.cluster(r.GetCluster()) != nil
	for _, p := range g.Partitions {
		known = known || p.GetCluster() == r.GetCluster()
	}
	if !known {
		return nil, clusterNotFound(r.GetCluster())
	}
	page, next, err := paging.Ordered(r, g.Shares)
	return &loomv1.ListSharesResponse{Shares: page, NextPageToken: next}, errs.ToStatus(err)
}

// ListPartitions answers the cluster's Partitions, else, when it has
// Nodes, one default partition "batch" over its compute nodes; NotFound
// for a cluster it does not have (slurmKnows).
func (g *Gateway) ListPartitions(_ context.Context, r *loomv1.ListPartitionsRequest) (*loomv1.ListPartitionsResponse, error) {
	defer g.lock(r)()
	if !g.slurmKnows(r.GetCluster()) {
		return nil, clusterNotFound(r.GetCluster())
	}
	var out []*loomv1.Partition
	for _, p := range g.Partitions {
		if p.GetCluster() == "" || p.GetCluster() == r.GetCluster() {
			out = append(out, p)
		}
	}
	if len(out) == 0 && len(g.SlurmNodes) == 0 {
		var hosts []string
		for _, n := range g.slurmNodes(r.GetCluster()) {
			hosts = append(hosts, n.GetHostname())
		}
		if len(hosts) > 0 {
			out = append(out, &loomv1.Partition{Name: "batch", Cluster: r.GetCluster(),
				Default: true, State: "up", MaxTime: "UNLIMITED", Nodes: hosts})
		}
	}
	return &loomv1.ListPartitionsResponse{Partitions: out}, nil
}

// ListSlurmNodes answers the cluster's Slurm nodes (see Nodes); NotFound
// for a cluster it does not have (slurmKnows).
func (g *Gateway) ListSlurmNodes(_ context.Context, r *loomv1.ListSlurmNodesRequest) (*loomv1.ListSlurmNodesResponse, error) {
	defer g.lock(r)()
	if !g.slurmKnows(r.GetCluster()) {
		return nil, clusterNotFound(r.GetCluster())
	}
	return &loomv1.ListSlurmNodesResponse{Nodes: g.slurmNodes(r.GetCluster())}, nil
}

// UpdateSlurmNode answers the node of that host name in SlurmNodes,
// unchanged, or NotFound.
func (g *Gateway) UpdateSlurmNode(_ context.Context, r *loomv1.UpdateSlurmNodeRequest) (*loomv1.SlurmNode, error) {
	defer g.lock(r)()
	if i := slices.IndexFunc(g.SlurmNodes, func(n *loomv1.SlurmNode) bool { return n.GetHostname() == r.GetHostname() }); i >= 0 {
		return g.SlurmNodes[i], nil
	}
	return nil, status.Errorf(codes.NotFound, "node %s not found", r.GetHostname())
}

// ---- jobs ----

// state is the job's state as the Slurm commands show it: a job without
// one is pending.
func state(j *loomv1.Job) loomv1.JobState {
	if j.GetState() == loomv1.JobState_JOB_STATE_UNSPECIFIED {
		return loomv1.JobState_PENDING
	}
	return j.GetState()
}

// job finds a job by name, or by "A_N", a task that array A's record
// still holds. The caller holds g.mu.
func (g *Gateway) job(name string) *loomv1.Job {
	for _, j := range g.Jobs {
		if j.GetName() == name {
			return j
		}
	}
	parent, task, ok := strings.Cut(name, "_")
	if !ok {
		return nil
	}
	// A task out of its array's record: the job with its own id, as the
	// gateway resolves "A_i".
	for _, j := range g.Jobs {
		if j.GetArrayJobId() != "" && strings.HasSuffix(parent, "/"+j.GetArrayJobId()) &&
			strings.TrimSuffix(parent, j.GetArrayJobId()) == strings.TrimSuffix(j.GetName(), j.GetJobId()) &&
			int(j.GetArrayTaskId()) == atoi(task) {
			return j
		}
	}
	for _, j := range g.Jobs {
		if j.GetName() != parent || j.GetArray() == "" || j.GetArrayJobId() != "" {
			continue
		}
		if spec, err := slurmspec.ParseArray(j.GetArray(), slurmspec.MaxArraySizeCeiling); err == nil &&
			slices.Contains(spec.Indexes(), atoi(task)) {
			return j
		}
	}
	return nil
}

func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		return -1
	}
	return n
}

func jobNotFound(name string) error { return status.Errorf(codes.NotFound, "job %s not found", name) }

// ownedJob finds the job a caller acts on: PermissionDenied when
// DenyOthers is set and it is not caller's, NotFound when there is none.
// The caller holds g.mu.
func (g *Gateway) ownedJob(name, caller string) (*loomv1.Job, error) {
	j := g.job(name)
	switch {
	case j == nil:
		return nil, jobNotFound(name)
	case g.DenyOthers && j.GetUser() != caller:
		// The gateway's words (domain.Caller.CheckAccess).
		return nil, status.Errorf(codes.PermissionDenied, "Access/permission denied: job %s is %s's; only its owner or an administrator of its project may act on it",
			j.GetJobId(), j.GetUser())
	}
	return j, nil
}

// SubmitJob answers SubmitErr when set; refuses an array past
// MaxArraySize; else adds the job to Jobs, PENDING, with the next job id
// (one more than the largest in Jobs) under the request's parent; with
// validate_only it answers that job and adds nothing.
func (g *Gateway) SubmitJob(_ context.Context, r *loomv1.SubmitJobRequest) (*loomv1.Job, error) {
	defer g.lock(r)()
	if g.SubmitErr != nil {
		return nil, g.SubmitErr
	}
	if s := r.GetJob().GetArray(); g.MaxArraySize > 0 && s != "" {
		if _, err := slurmspec.ParseArray(s, g.MaxArraySize); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "job.array: %q: %v", s, err)
		}
	}
	if g.nextID == 0 {
		for _, j := range g.Jobs {
			g.nextID = max(g.nextID, atoi(j.GetJobId()))
		}
	}
	j := proto.Clone(r.GetJob()).(*loomv1.Job)
	if r.GetValidateOnly() {
		// The job as it would be accepted, with no id (the gateway does not
		// tell its job counter).
		j.State, j.SubmitTime = loomv1.JobState_PENDING, timestamppb.New(g.now())
		return j, nil
	}
	j.JobId = strconv.Itoa(g.nextID + 1)
	g.nextID++
	j.Name = r.GetParent() + "/jobs/" + j.JobId
	j.State, j.SubmitTime = loomv1.JobState_PENDING, timestamppb.New(g.now())
	g.Jobs = append(g.Jobs, j)
	return proto.Clone(j).(*loomv1.Job), nil
}

// GetJob answers the job (or the array holding the task named), or
// NotFound. With StartJobs it starts a pending job once it has been
// polled PendingPolls times.
func (g *Gateway) GetJob(_ context.Context, r *loomv1.GetJobRequest) (*loomv1.Job, error) {
	defer g.lock(r)()
	j := g.job(r.GetName())
	if j == nil {
		return nil, jobNotFound(r.GetName())
	}
	if g.StartJobs && state(j) == loomv1.JobState_PENDING {
		if g.jobPolls == nil {
			g.jobPolls = map[string]int{}
		}
		if g.jobPolls[j.GetName()]++; g.jobPolls[j.GetName()] > g.PendingPolls {
			g.start(j)
		}
	}
	return proto.Clone(j).(*loomv1.Job), nil
}

// start makes j RUNNING on the first node_count (at least one) of its
// cluster's Slurm nodes, or up to max_node_count of them for a range (the
// fake's nodes are all free). The caller holds g.mu.
func (g *Gateway) start(j *loomv1.Job) {
	j.State, j.StartTime, j.Nodes = loomv1.JobState_RUNNING, timestamppb.New(g.now()), nil
	for _, n := range g.slurmNodes(j.GetCluster()) {
		if len(j.Nodes) >= max(1, int(j.GetNodeCount()), int(j.GetMaxNodeCount())) {
			break
		}
		j.Nodes = append(j.Nodes, n.GetHostname())
	}
	if g.StartLayout != nil {
		g.StartLayout(j)
	}
}

func (g *Gateway) now() time.Time {
	if g.Now != nil {
		return g.Now()
	}
	return time.Now()
}

// ListJobs answers the parent project's jobs (of the cluster, when named)
// that pass the request's users, names, partitions, states, job ids (a job
// or its array's tasks) and active_only filters, in Jobs' order, paged as
// the gateway pages (libs/paging: by count and by bytes).
func (g *Gateway) ListJobs(_ context.Context, r *loomv1.ListJobsRequest) (*loomv1.ListJobsResponse, error) {
	defer g.lock(r)()
	in := func(set []string, v string) bool { return len(set) == 0 || slices.Contains(set, v) }
	var out []*loomv1.Job
	for _, j := range under(g.Jobs, r.GetParent(), "jobs") {
		switch {
		case r.GetCluster() != "" && j.GetCluster() != r.GetCluster(),
			// A job id names the job, or every task of the array.
			len(r.GetJobIds()) > 0 && !slices.Contains(r.GetJobIds(), j.GetJobId()) && !slices.Contains(r.GetJobIds(), j.GetArrayJobId()),
			!in(r.GetUsers(), j.GetUser()) || !in(r.GetNames(), j.GetDisplayName()) || len(r.GetPartitions()) > 0 && !slurmspec.AnyPartitionOf(j.GetPartition(), r.GetPartitions()),
			len(r.GetStates()) > 0 && !slices.Contains(r.GetStates(), state(j)),
			r.GetActiveOnly() && state(j).Terminal():
			continue
		}
		out = append(out, j)
	}
	if c := r.GetCluster(); c != "" && len(out) == 0 && r.GetPageToken() == "" && g.cluster(c) == nil {
		// As the gateway: a cluster that does not exist, not an empty queue.
		return nil, clusterNotFound(c)
	}
	var v errs.Validator
	if paging.JobOrder(&v, r.GetOrderBy()) {
		// As the gateway: "submit_time desc" lists the newest first.
		slices.Reverse(out)
	}
	if err := v.Err(); err != nil {
		return nil, errs.ToStatus(err)
	}
	page, next, err := paging.Ordered(r, out)
	return &loomv1.ListJobsResponse{Jobs: page, NextPageToken: next}, errs.ToStatus(err)
}

// CancelJob checks the owner (DenyOthers) and answers NotFound for an
// unknown job; an array's own name cancels every task. A signal changes
// nothing; to an array, or to any of its tasks, while two or more of its tasks wait
// (in its record or as pending task records), it is refused as the
// gateway refuses it (domain.PendingArraySignal). Cancelling a job that has not
// ended ends it CANCELLED; the answer is the job as the scheduler has it
// when the gateway asks: already CANCELLED if it was pending (the
// scheduler drops it from the queue at once), as it was if it had
// started (its processes are stopped later). An ended job is answered as
// it is; CancelErr, when set, is the answer instead.
func (g *Gateway) CancelJob(_ context.Context, r *loomv1.CancelJobRequest) (*loomv1.Job, error) {
	defer g.lock(r)()
	if g.CancelErr != nil {
		return nil, g.CancelErr
	}
	j, err := g.ownedJob(r.GetName(), r.GetUser())
	if err != nil {
		return nil, err
	}
	before := proto.Clone(j).(*loomv1.Job)
	if r.GetSignal() != "" && !state(j).Terminal() {
		if err := g.pendingArraySignal(j); err != nil {
			return nil, err
		}
	}
	wholeArray := j.GetArray() != "" && j.GetArrayJobId() == "" && r.GetName() == j.GetName()
	if r.GetSignal() != "" && state(j) == loomv1.JobState_PENDING && !wholeArray {
		// As the gateway (domain.CheckCancel): no signal before it
		// starts. The array's own name is not judged so: the scheduler
		// signals its running tasks, the pending ones not.
		return nil, status.Error(codes.FailedPrecondition, "Job is pending execution")
	}
	switch {
	case r.GetSignal() != "" || j.GetState().Terminal():
	case r.ExitCode != nil && state(j) == loomv1.JobState_RUNNING:
		// An allocation ended as its command did (srun, salloc).
		j.State, j.ExitCode = loomv1.JobState_COMPLETED, r.GetExitCode()
		if r.GetExitCode() != 0 {
			j.State = loomv1.JobState_FAILED
		}
	default:
		j.State = loomv1.JobState_CANCELLED
		if j.GetArray() != "" && r.GetName() == j.GetName() {
			// The array's own name: every task of it, as the scheduler
			// cancels an array in one step.
			for _, t := range g.Jobs {
				if t.GetArrayJobId() == j.GetJobId() && !state(t).Terminal() {
					t.State = loomv1.JobState_CANCELLED
				}
			}
		}
	}
	if state(before) == loomv1.JobState_PENDING {
		return proto.Clone(j).(*loomv1.Job), nil
	}
	return before, nil
}

// pendingArraySignal is the gateway's refusal of a signal to j when j is
// an array or one of its tasks and two or more tasks of the array still wait
// (domain.PendingArraySignal: Slurm's words, then the waiting tasks as
// squeue names their record, in parentheses); nil otherwise. The caller
// holds g.mu.
func (g *Gateway) pendingArraySignal(j *loomv1.Job) error {
	a := j.GetArrayJobId()
	if a == "" {
		if j.GetArray() == "" {
			return nil
		}
		a = j.GetJobId()
	}
	project := strings.TrimSuffix(j.GetName(), j.GetJobId())
	limit := 0
	have := map[int]bool{}
	var idx []int
	for _, t := range g.Jobs {
		if t.GetArrayJobId() == a && strings.TrimSuffix(t.GetName(), t.GetJobId()) == project {
			have[int(t.GetArrayTaskId())] = true
			if state(t) == loomv1.JobState_PENDING {
				idx = append(idx, int(t.GetArrayTaskId()))
			}
			if spec, err := slurmspec.ParseArray(t.GetArray(), slurmspec.MaxArraySizeCeiling); err == nil {
				limit = spec.Limit
			}
		}
	}
	for _, t := range g.Jobs {
		if t.GetJobId() != a || t.GetArray() == "" || t.GetArrayJobId() != "" || t.GetName() != project+a || state(t) != loomv1.JobState_PENDING {
			continue
		}
		if spec, err := slurmspec.ParseArray(t.GetArray(), slurmspec.MaxArraySizeCeiling); err == nil {
			limit = spec.Limit
			for _, i := range spec.Indexes() {
				if !have[i] {
					idx = append(idx, i)
				}
			}
		}
	}
	if len(idx) < 2 {
		return nil
	}
	slices.Sort(idx)
	rec := a + "_[" + slurmspec.FormatIndexes(idx)
	if limit > 0 {
		rec += "%" + strconv.Itoa(limit)
	}
	rec += "]"
	return status.Errorf(codes.FailedPrecondition,
		"Job can not be altered now, try again later: array %s has tasks still pending (%s); none of its tasks takes a signal until they have started", a, rec)
}

// UpdateJob answers UpdateJobErr when set; else checks the owner
// (DenyOthers) and answers the job unchanged, or NotFound.
func (g *Gateway) UpdateJob(_ context.Context, r *loomv1.UpdateJobRequest) (*loomv1.Job, error) {
	defer g.lock(r)()
	if g.UpdateJobErr != nil {
		return nil, g.UpdateJobErr
	}
	j, err := g.ownedJob(r.GetName(), r.GetUser())
	if err != nil {
		return nil, err
	}
	return proto.Clone(j).(*loomv1.Job), nil
}

// WatchJob streams Watch when set; else the job as it is, then as ended
// FAILED with exit code 3 (NotFound for an unknown job).
func (g *Gateway) WatchJob(r *loomv1.WatchJobRequest, s grpc.ServerStreamingServer[loomv1.Job]) error {
	unlock := g.lock(r)
	watch := slices.Clone(g.Watch)
	if len(watch) == 0 {
		if j := g.job(r.GetName()); j != nil {
			ended := proto.Clone(j).(*loomv1.Job)
			ended.State, ended.ExitCode = loomv1.JobState_FAILED, 3
			watch = []*loomv1.Job{proto.Clone(j).(*loomv1.Job), ended}
		}
	}
	unlock()
	if len(watch) == 0 {
		return jobNotFound(r.GetName())
	}
	for _, j := range watch {
		if err := s.Send(j); err != nil {
			return err
		}
	}
	return nil
}

// ReadJobLogs streams Logs[name] (NotFound for an unknown job).
func (g *Gateway) ReadJobLogs(r *loomv1.ReadJobLogsRequest, s grpc.ServerStreamingServer[loomv1.LogChunk]) error {
	unlock := g.lock(r)
	found := g.job(r.GetName()) != nil
	logs := slices.Clone(g.Logs[r.GetName()])
	unlock()
	if !found {
		return jobNotFound(r.GetName())
	}
	for _, l := range logs {
		if err := s.Send(&loomv1.LogChunk{Data: []byte(l)}); err != nil {
			return err
		}
	}
	return nil
}

// ---- job steps ----

// The gateway's words for a step refused by the state of its job or step
// (Slurm's).
const (
	msgPending     = "Job is pending execution"
	msgAlreadyDone = "Job/step already completing or completed"
)

// step finds a step by name. The caller holds g.mu.
func (g *Gateway) step(name string) *loomv1.JobStep {
	if i := slices.IndexFunc(g.Steps, func(s *loomv1.JobStep) bool { return s.GetName() == name }); i >= 0 {
		return g.Steps[i]
	}
	// A step of an array task named "A_i": the task's own job's, as the
	// gateway resolves it.
	if job, id, ok := strings.Cut(name, "/steps/"); ok && strings.Contains(job, "_") {
		if j := g.job(job); j != nil && j.GetName() != job {
			return g.step(j.GetName() + "/steps/" + id)
		}
	}
	return nil
}

func stepNotFound(name string) error {
	return status.Errorf(codes.NotFound, "job step %s not found", name)
}

// CreateJobStep starts a step of the parent job, as the gateway and the
// scheduler do: NotFound for an unknown job; FailedPrecondition, in
// Slurm's words, for a job that does not run; InvalidArgument (field
// node_count) for more nodes than the job has, or a job without nodes.
// The step runs on the job's first node_count nodes (all when 0) with
// ntasks tasks (else ntasks_per_node on each node, else one per node;
// fewer tasks than nodes use fewer nodes), spread evenly with the first
// nodes taking the remainder. Its id is one more than the job's last
// step's in Steps (0 for its first), and a request_id that created a step
// of the job before answers that step. The tasks' exit codes and their
// end are StepExitCodes and StepEndAfter; their output is written to
// StepOutputDir when set.
func (g *Gateway) CreateJobStep(_ context.Context, r *loomv1.CreateJobStepRequest) (*loomv1.JobStep, error) {
	defer g.lock(r)()
	j := g.job(r.GetParent())
	switch {
	case j == nil:
		return nil, jobNotFound(r.GetParent())
	case state(j) == loomv1.JobState_PENDING:
		return nil, status.Error(codes.FailedPrecondition, msgPending)
	case j.GetState() != loomv1.JobState_RUNNING && j.GetState() != loomv1.JobState_CONFIGURING:
		return nil, status.Error(codes.FailedPrecondition, msgAlreadyDone)
	}
	id := int32(0)
	for _, s := range g.Steps {
		if s.GetJob() != j.GetName() {
			continue
		}
		if r.GetRequestId() != "" && s.GetRequestId() == r.GetRequestId() {
			return proto.Clone(s).(*loomv1.JobStep), nil
		}
		id = max(id, s.GetStepId()+1)
	}
	nodes := j.GetNodes()
	if n := int(r.GetNodeCount()); n > len(nodes) || len(nodes) == 0 {
		return nil, errs.ToStatus(errs.Invalid("node_count",
			"Requested node configuration is not available: the job has %d node(s), %d requested", len(nodes), max(n, 1)))
	} else if n > 0 {
		nodes = nodes[:n]
	}
	ntasks := int(r.GetNtasks())
	if ntasks == 0 {
		ntasks = max(1, int(r.GetNtasksPerNode())) * len(nodes)
	}
	nodes = nodes[:min(len(nodes), ntasks)]
	perNode := make([]int32, len(nodes))
	for i := range perNode {
		perNode[i] = int32(ntasks / len(nodes))
		if i < ntasks%len(nodes) {
			perNode[i]++
		}
	}
	s := &loomv1.JobStep{Name: fmt.Sprintf("%s/steps/%d", j.GetName(), id), Job: j.GetName(), StepId: id,
		State: loomv1.JobState_RUNNING, Command: r.GetCommand(), Nodes: slices.Clone(nodes), TasksPerNode: perNode,
		NumTasks: int32(ntasks), TaskExitCodes: make([]int32, ntasks), OutputDir: g.StepOutputDir,
		RequestId: r.GetRequestId(), StartTime: timestamppb.New(g.now())}
	if g.StepOutputDir != "" {
		for rank := range ntasks {
			out := fmt.Sprintf("hello from %d\nsecond line %d", rank, rank)
			if err := os.WriteFile(filepath.Join(g.StepOutputDir, fmt.Sprintf("task-%d.out", rank)), []byte(out), 0o644); err != nil {
				return nil, status.Error(codes.Internal, err.Error())
			}
			if err := os.WriteFile(filepath.Join(g.StepOutputDir, fmt.Sprintf("task-%d.err", rank)), []byte(fmt.Sprintf("warn %d\n", rank)), 0o644); err != nil {
				return nil, status.Error(codes.Internal, err.Error())
			}
		}
	}
	if g.StepPendingPolls > 0 {
		s.State, s.Reason, s.StartTime = loomv1.JobState_PENDING, cmp.Or(g.StepPendingReason, slurmspec.ReasonStepBusy), nil
	}
	g.Steps = append(g.Steps, s)
	return proto.Clone(s).(*loomv1.JobStep), nil
}

// GetJobStep answers the step, or NotFound. A RUNNING step ends on the
// call after its StepEndAfter-th, with StepExitCodes.
func (g *Gateway) GetJobStep(_ context.Context, r *loomv1.GetJobStepRequest) (*loomv1.JobStep, error) {
	defer g.lock(r)()
	s := g.step(r.GetName())
	if s == nil {
		return nil, stepNotFound(r.GetName())
	}
	if g.stepPolls == nil {
		g.stepPolls, g.waitPolls = map[string]int{}, map[string]int{}
	}
	if s.GetState() == loomv1.JobState_PENDING {
		if g.waitPolls[s.GetName()]++; g.waitPolls[s.GetName()] <= g.StepPendingPolls {
			if g.StepPendingThen != "" && g.waitPolls[s.GetName()] > 1 {
				s.Reason = g.StepPendingThen
			}
			return proto.Clone(s).(*loomv1.JobStep), nil
		}
		s.State, s.Reason, s.StartTime = loomv1.JobState_RUNNING, "", timestamppb.New(g.now())
	}
	if g.stepPolls[s.GetName()]++; g.stepPolls[s.GetName()] > g.StepEndAfter && s.GetState() == loomv1.JobState_RUNNING {
		s.State, s.EndTime = loomv1.JobState_COMPLETED, timestamppb.New(g.now())
		for rank := range s.TaskExitCodes {
			if rank < len(g.StepExitCodes) {
				s.TaskExitCodes[rank] = g.StepExitCodes[rank]
			}
		}
		if len(g.StepLaunchFailures) > 0 {
			s.LaunchFailed, s.NodeMessages = make([]bool, len(s.Nodes)), make([]string, len(s.Nodes))
			first := int32(0)
			for k, n := range s.TasksPerNode {
				if msg, ok := g.StepLaunchFailures[k]; ok {
					s.LaunchFailed[k], s.NodeMessages[k] = true, msg
					for l := first; l < first+n; l++ {
						s.TaskExitCodes[l] = 1
					}
				}
				first += n
			}
		}
		for _, code := range s.TaskExitCodes {
			s.ExitCode = max(s.ExitCode, code)
		}
		if s.ExitCode != 0 {
			s.State = loomv1.JobState_FAILED
		}
	}
	return proto.Clone(s).(*loomv1.JobStep), nil
}

// ListJobSteps answers the parent job's steps of the attempt asked for, in
// Steps' order, paged as the gateway pages: attempt 0 is the job's current
// one, its last run's (a step without an attempt counts as of the current
// one). NotFound for an unknown job or an attempt past the job's.
func (g *Gateway) ListJobSteps(_ context.Context, r *loomv1.ListJobStepsRequest) (*loomv1.ListJobStepsResponse, error) {
	defer g.lock(r)()
	j := g.job(r.GetParent())
	if j == nil {
		return nil, jobNotFound(r.GetParent())
	}
	want, current := r.GetAttempt(), int32(0)
	if runs := j.GetRuns(); len(runs) > 0 {
		current = runs[len(runs)-1].GetAttempt()
	}
	switch {
	case want < 0:
		return nil, status.Errorf(codes.InvalidArgument, "attempt: must not be negative, got %d", want)
	case want > current:
		return nil, status.Errorf(codes.NotFound, "job %s has had no attempt %d", j.GetName(), want)
	case want == 0:
		want = current
	}
	var out []*loomv1.JobStep
	for _, s := range g.Steps {
		if a := s.GetAttempt(); s.GetJob() == j.GetName() && (a == want || a == 0 && want == current) {
			out = append(out, s)
		}
	}
	page, next, err := paging.Ordered(r, out)
	return &loomv1.ListJobStepsResponse{Steps: page, NextPageToken: next}, errs.ToStatus(err)
}

// CancelJobStep answers StepCancelErr when set, NotFound for an unknown
// step and FailedPrecondition for an ended one, as the gateway does. A signal
// changes nothing; else the step's tasks are killed (SIGTERM: each exits
// 143) and the step ends CANCELLED. The answer is the step as the
// scheduler had it when the gateway asked: as it was before.
func (g *Gateway) CancelJobStep(_ context.Context, r *loomv1.CancelJobStepRequest) (*loomv1.JobStep, error) {
	defer g.lock(r)()
	s := g.step(r.GetName())
	switch {
	case g.StepCancelErr != nil:
		return nil, g.StepCancelErr
	case s == nil:
		return nil, stepNotFound(r.GetName())
	case s.GetState().Terminal():
		return nil, status.Error(codes.FailedPrecondition, msgAlreadyDone)
	}
	before := proto.Clone(s).(*loomv1.JobStep)
	if r.GetSignal() == "" {
		s.State, s.Reason, s.ExitCode, s.EndTime = loomv1.JobState_CANCELLED, "cancelled", 128+15, timestamppb.New(g.now())
		for rank := range s.TaskExitCodes {
			s.TaskExitCodes[rank] = 128 + 15
		}
	}
	return before, nil
}

// ---- models ----

// ListModels answers the parent project's models, unpaged.
func (g *Gateway) ListModels(_ context.Context, r *loomv1.ListModelsRequest) (*loomv1.ListModelsResponse, error) {
	defer g.lock(r)()
	return &loomv1.ListModelsResponse{Models: under(g.Models, r.GetParent(), "models")}, nil
}

// ListModelVersions answers the parent model's versions, unpaged, both
// ways (Versions, as `loom models list --versions` reads them, and
// ModelVersions, as `loom models versions` does), or NotFound for a model
// it does not have.
func (g *Gateway) ListModelVersions(_ context.Context, r *loomv1.ListModelVersionsRequest) (*loomv1.ListModelVersionsResponse, error) {
	defer g.lock(r)()
	if !slices.ContainsFunc(g.Models, func(m *loomv1.Model) bool { return m.GetName() == r.GetParent() }) {
		return nil, status.Errorf(codes.NotFound, "model %s not found", r.GetParent())
	}
	var vs []*loomv1.Model
	for _, m := range g.ModelVersions {
		if name, _, _ := strings.Cut(m.GetName(), "@"); name == r.GetParent() {
			vs = append(vs, m)
		}
	}
	return &loomv1.ListModelVersionsResponse{Versions: under(g.Versions, r.GetParent(), "versions"), Models: vs}, nil
}

// GetModel answers the model of that name (a "@VERSION" suffix ignored),
// or NotFound.
func (g *Gateway) GetModel(_ context.Context, r *loomv1.GetModelRequest) (*loomv1.Model, error) {
	defer g.lock(r)()
	name, _, _ := strings.Cut(r.GetName(), "@")
	for _, m := range g.Models {
		if m.GetName() == name {
			return m, nil
		}
	}
	return nil, status.Errorf(codes.NotFound, "model %s not found", name)
}

// ---- reservations and capacity ----

// CreateReservation answers a done operation with the reservation asked
// for. It is not added to Reservations.
func (g *Gateway) CreateReservation(_ context.Context, r *loomv1.CreateReservationRequest) (*loomv1.Operation, error) {
	defer g.lock(r)()
	return &loomv1.Operation{Name: "projects/default/operations/op4", Done: true,
		Metadata: &loomv1.OperationMetadata{Verb: "create"},
		Result:   &loomv1.Operation_Reservation{Reservation: r.GetReservation()}}, nil
}

// GetReservation answers the reservation of that name, or NotFound.
func (g *Gateway) GetReservation(_ context.Context, r *loomv1.GetReservationRequest) (*loomv1.Reservation, error) {
	defer g.lock(r)()
	if i := slices.IndexFunc(g.Reservations, func(res *loomv1.Reservation) bool { return res.GetName() == r.GetName() }); i >= 0 {
		return g.Reservations[i], nil
	}
	return nil, status.Errorf(codes.NotFound, "reservation %s not found", r.GetName())
}

// ListReservations answers the parent project's reservations, unpaged.
func (g *Gateway) ListReservations(_ context.Context, r *loomv1.ListReservationsRequest) (*loomv1.ListReservationsResponse, error) {
	defer g.lock(r)()
	return &loomv1.ListReservationsResponse{Reservations: under(g.Reservations, r.GetParent(), "reservations")}, nil
}

// DeleteReservation answers FailedPrecondition for a reservation with
// consumers, else a done operation; Reservations do not change, and a
// name it does not have is not an error.
func (g *Gateway) DeleteReservation(_ context.Context, r *loomv1.DeleteReservationRequest) (*loomv1.Operation, error) {
	defer g.lock(r)()
	for _, res := range g.Reservations {
		if res.GetName() == r.GetName() && len(res.GetConsumers()) > 0 {
			// As the gateway's kinds read (libs/errs: the kind's text last).
			return nil, status.Errorf(codes.FailedPrecondition, "reservation %s is in use by cluster %s: failed precondition",
				shortName(res.GetName()), shortName(res.GetConsumers()[0]))
		}
	}
	return &loomv1.Operation{Name: "projects/default/operations/op5", Done: true, Metadata: &loomv1.OperationMetadata{Verb: "delete"}}, nil
}

// ListCapacity answers Capacity.
func (g *Gateway) ListCapacity(_ context.Context, r *loomv1.ListCapacityRequest) (*loomv1.ListCapacityResponse, error) {
	defer g.lock(r)()
	return &loomv1.ListCapacityResponse{Pools: g.Capacity}, nil
}
