package gateway

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/auth"
	"github.com/loom-ml/loom/libs/config"
	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/paging"
	"github.com/loom-ml/loom/libs/resname"
	"github.com/loom-ml/loom/libs/store"
	"github.com/loom-ml/loom/libs/testkit"
	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/gateway/internal/adapters"
)

// world is what the fake owning services know; tests change it directly.
type world struct {
	mu           sync.Mutex
	clusters     map[string]*loomv1.Cluster
	jobs         map[string]*loomv1.Job
	reservations map[string]*loomv1.Reservation
	capacity     []*loomv1.CapacityPool
	partitions   []*loomv1.Partition
	slurmNodes   []*loomv1.SlurmNode
	// listRequests are the ListJobs requests the scheduler was asked.
	listRequests []*loomv1.ListJobsRequest
	// nodeHealth and healthResults are the health service's answers;
	// healthRequests the ListHealthResults requests it was asked.
	nodeHealth []*loomv1.NodeHealth
	// nodeHealthHosts are the hostnames of each ListNodeHealth asked.
	nodeHealthHosts [][]string
	healthResults   []*loomv1.HealthCheckResult
	healthRequests  []*loomv1.ListHealthResultsRequest
	// training is the training service's resources by name (CustomJobs,
	// tuning jobs, pipelines: training_test.go).
	training map[string]proto.Message
}

func (w *world) setReservation(r *loomv1.Reservation) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.reservations[r.GetName()] = proto.Clone(r).(*loomv1.Reservation)
}

func (w *world) setCapacity(pools ...*loomv1.CapacityPool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.capacity = pools
}

func (w *world) setCluster(c *loomv1.Cluster) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.clusters[c.GetName()] = proto.Clone(c).(*loomv1.Cluster)
}

func (w *world) setJob(j *loomv1.Job) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.jobs[j.GetName()] = proto.Clone(j).(*loomv1.Job)
}

// fakeProvisioner serves the provisioner's internal read API over world.
type fakeProvisioner struct {
	loomv1.UnimplementedClusterServiceServer
	w *world
}

func (f fakeProvisioner) GetCluster(_ context.Context, r *loomv1.GetClusterRequest) (*loomv1.Cluster, error) {
	f.w.mu.Lock()
	defer f.w.mu.Unlock()
	c, ok := f.w.clusters[r.GetName()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "cluster %s not found", r.GetName())
	}
	return proto.Clone(c).(*loomv1.Cluster), nil
}

func (f fakeProvisioner) ListClusters(context.Context, *loomv1.ListClustersRequest) (*loomv1.ListClustersResponse, error) {
	f.w.mu.Lock()
	defer f.w.mu.Unlock()
	resp := &loomv1.ListClustersResponse{}
	for _, c := range f.w.clusters {
		resp.Clusters = append(resp.Clusters, proto.Clone(c).(*loomv1.Cluster))
	}
	sort.Slice(resp.Clusters, func(i, j int) bool { return resp.Clusters[i].GetName() < resp.Clusters[j].GetName() })
	return resp, nil
}

// GetSlurmConfig renders a one-line slurm.conf naming the cluster; a
// cluster in ERROR has none, FailedPrecondition as the provisioner answers.
func (f fakeProvisioner) GetSlurmConfig(_ context.Context, r *loomv1.GetSlurmConfigRequest) (*loomv1.SlurmConfig, error) {
	f.w.mu.Lock()
	defer f.w.mu.Unlock()
	c, ok := f.w.clusters[r.GetName()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "cluster %s not found", r.GetName())
	}
	if c.GetStatus().GetState() == loomv1.Cluster_ERROR {
		return nil, status.Errorf(codes.FailedPrecondition, "slurm configuration of %s: not rendered yet: failed precondition", r.GetName())
	}
	return &loomv1.SlurmConfig{SlurmConf: "ClusterName=" + r.GetName() + "\n", GresConf: "# gres\n"}, nil
}

// fakeReservations serves the provisioner's reservation and capacity reads over world.
type fakeReservations struct {
	loomv1.UnimplementedReservationServiceServer
	w *world
}

func (f fakeReservations) GetReservation(_ context.Context, r *loomv1.GetReservationRequest) (*loomv1.Reservation, error) {
	f.w.mu.Lock()
	defer f.w.mu.Unlock()
	res, ok := f.w.reservations[r.GetName()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "reservation %s not found", r.GetName())
	}
	return proto.Clone(res).(*loomv1.Reservation), nil
}

func (f fakeReservations) ListReservations(context.Context, *loomv1.ListReservationsRequest) (*loomv1.ListReservationsResponse, error) {
	f.w.mu.Lock()
	defer f.w.mu.Unlock()
	resp := &loomv1.ListReservationsResponse{}
	for _, r := range f.w.reservations {
		resp.Reservations = append(resp.Reservations, proto.Clone(r).(*loomv1.Reservation))
	}
	sort.Slice(resp.Reservations, func(i, j int) bool { return resp.Reservations[i].GetName() < resp.Reservations[j].GetName() })
	return resp, nil
}

func (f fakeReservations) ListCapacity(context.Context, *loomv1.ListCapacityRequest) (*loomv1.ListCapacityResponse, error) {
	f.w.mu.Lock()
	defer f.w.mu.Unlock()
	resp := &loomv1.ListCapacityResponse{}
	for _, p := range f.w.capacity {
		resp.Pools = append(resp.Pools, proto.Clone(p).(*loomv1.CapacityPool))
	}
	return resp, nil
}

type fakeNodes struct {
	loomv1.UnimplementedNodeServiceServer
}

func (fakeNodes) ListNodes(_ context.Context, r *loomv1.ListNodesRequest) (*loomv1.ListNodesResponse, error) {
	// cluster1's nodes, under its name or a wildcard ("-") that covers it,
	// as the provisioner matches (app.Nodes).
	want, _ := resname.SplitCluster(r.GetParent())
	have, _ := resname.SplitCluster(cluster1)
	if (want.Project != resname.Wildcard && want.Project != have.Project) || (want.ID != resname.Wildcard && want.ID != have.ID) {
		return &loomv1.ListNodesResponse{}, nil // as the provisioner answers any other name
	}
	return &loomv1.ListNodesResponse{Nodes: []*loomv1.Node{{Name: cluster1 + "/nodes/gpu-0001", Hostname: "gpu-0001", Cluster: cluster1, NodePool: "gpu", Gpus: 8},
		{Name: cluster1 + "/nodes/cpu-0001", Hostname: "cpu-0001", Cluster: cluster1, NodePool: "cpu"}}}, nil
}

// fakeHealth serves the health service's internal HealthService reads over world.
type fakeHealth struct {
	loomv1.UnimplementedHealthServiceServer
	w *world
}

func (f fakeHealth) ListNodeHealth(_ context.Context, r *loomv1.ListNodeHealthRequest) (*loomv1.ListNodeHealthResponse, error) {
	f.w.mu.Lock()
	defer f.w.mu.Unlock()
	resp := &loomv1.ListNodeHealthResponse{}
	f.w.nodeHealthHosts = append(f.w.nodeHealthHosts, r.GetHostnames())
	for _, n := range f.w.nodeHealth {
		if n.GetCluster() == r.GetCluster() {
			resp.Nodes = append(resp.Nodes, proto.Clone(n).(*loomv1.NodeHealth))
		}
	}
	return resp, nil
}

func (f fakeHealth) ListNodeHealthEvents(_ context.Context, r *loomv1.ListNodeHealthEventsRequest) (*loomv1.ListNodeHealthEventsResponse, error) {
	f.w.mu.Lock()
	defer f.w.mu.Unlock()
	f.w.nodeHealthHosts = append(f.w.nodeHealthHosts, r.GetHostnames())
	if r.GetCluster() != cluster1 {
		// Health answers for any name, with nothing.
		return &loomv1.ListNodeHealthEventsResponse{}, nil
	}
	return &loomv1.ListNodeHealthEventsResponse{Events: []*loomv1.NodeHealthEvent{{Node: r.GetCluster() + "/nodes/gpu-0001",
		Hostname: "gpu-0001", State: loomv1.RemediationState_NODE_HEALTHY, Reason: "repaired (reboot)", Repaired: true}}}, nil
}

func (f fakeHealth) GetHealthPolicy(_ context.Context, r *loomv1.GetHealthPolicyRequest) (*loomv1.HealthPolicy, error) {
	return &loomv1.HealthPolicy{Cluster: r.GetCluster(), Remediation: "dry-run", MaxRemediatingNodes: 1}, nil
}

// GetHealthScan answers scan s1 of any cluster, done; any other is
// NotFound, as health's.
func (f fakeHealth) GetHealthScan(_ context.Context, r *loomv1.GetHealthScanRequest) (*loomv1.HealthScan, error) {
	if r.GetScanId() != "s1" {
		return nil, status.Errorf(codes.NotFound, "scan %s of %s: not found", r.GetScanId(), r.GetCluster())
	}
	return &loomv1.HealthScan{Cluster: r.GetCluster(), ScanId: "s1", Done: true, Checks: 2, Answered: 2, Passed: 2}, nil
}

// ListHealthScans lists scan s1 of cluster1, done; nothing for any other
// name, as health answers.
func (f fakeHealth) ListHealthScans(_ context.Context, r *loomv1.ListHealthScansRequest) (*loomv1.ListHealthScansResponse, error) {
	if r.GetCluster() != cluster1 {
		return &loomv1.ListHealthScansResponse{}, nil
	}
	return &loomv1.ListHealthScansResponse{Scans: []*loomv1.HealthScan{{Cluster: r.GetCluster(), ScanId: "s1", Done: true, Checks: 2, Answered: 2, Passed: 2}}}, nil
}

func (f fakeHealth) ListHealthResults(_ context.Context, r *loomv1.ListHealthResultsRequest) (*loomv1.ListHealthResultsResponse, error) {
	f.w.mu.Lock()
	defer f.w.mu.Unlock()
	f.w.healthRequests = append(f.w.healthRequests, proto.Clone(r).(*loomv1.ListHealthResultsRequest))
	resp := &loomv1.ListHealthResultsResponse{}
	for _, res := range f.w.healthResults {
		if strings.HasPrefix(res.GetName(), r.GetCluster()+"/") && (r.GetHostname() == "" || res.GetHostname() == r.GetHostname()) && (r.GetCheck() == "" || res.GetCheck() == r.GetCheck()) &&
			(r.GetScanId() == "" || res.GetScanId() == r.GetScanId()) {
			resp.Results = append(resp.Results, proto.Clone(res).(*loomv1.HealthCheckResult))
		}
	}
	return resp, nil
}

// fakeGoodput serves the scheduler's GoodputService: every known job and
// cluster at 90%.
type fakeGoodput struct {
	loomv1.UnimplementedGoodputServiceServer
	w *world
}

func (f fakeGoodput) GetJobGoodput(_ context.Context, r *loomv1.GetJobGoodputRequest) (*loomv1.Goodput, error) {
	f.w.mu.Lock()
	defer f.w.mu.Unlock()
	if _, ok := f.w.jobs[r.GetName()]; !ok {
		return nil, status.Errorf(codes.NotFound, "job %s not found", r.GetName())
	}
	return &loomv1.Goodput{Name: r.GetName(), Goodput: 0.9, Jobs: 1}, nil
}

func (f fakeGoodput) GetClusterGoodput(_ context.Context, r *loomv1.GetClusterGoodputRequest) (*loomv1.Goodput, error) {
	f.w.mu.Lock()
	defer f.w.mu.Unlock()
	if _, ok := f.w.clusters[r.GetName()]; !ok {
		return nil, status.Errorf(codes.NotFound, "cluster %s not found", r.GetName())
	}
	return &loomv1.Goodput{Name: r.GetName(), Goodput: 0.9, Jobs: int32(len(f.w.jobs))}, nil
}

// fakeScheduler serves the scheduler's internal read API over world.
type fakeScheduler struct {
	loomv1.UnimplementedJobServiceServer
	w *world
}

func (f fakeScheduler) GetJob(_ context.Context, r *loomv1.GetJobRequest) (*loomv1.Job, error) {
	f.w.mu.Lock()
	defer f.w.mu.Unlock()
	j, ok := f.w.jobs[r.GetName()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "job %s not found", r.GetName())
	}
	return proto.Clone(j).(*loomv1.Job), nil
}

// ListJobs applies the cluster, user, state, job id and active-only filters, as
// the scheduler does, pages as it does (libs/paging in job key order), and
// records the request.
func (f fakeScheduler) ListJobs(_ context.Context, r *loomv1.ListJobsRequest) (*loomv1.ListJobsResponse, error) {
	f.w.mu.Lock()
	defer f.w.mu.Unlock()
	f.w.listRequests = append(f.w.listRequests, proto.Clone(r).(*loomv1.ListJobsRequest))
	resp := &loomv1.ListJobsResponse{}
	for _, j := range f.w.jobs {
		if r.GetCluster() != "" && j.GetCluster() != r.GetCluster() {
			continue
		}
		// As the scheduler's views match ids: the job, or the tasks of
		// array A for "A", or task i for "A_i".
		if len(r.GetJobIds()) > 0 && !slices.ContainsFunc(r.GetJobIds(), func(id string) bool {
			a := j.GetArrayJobId()
			return id == j.GetJobId() || (a != "" && (id == a || id == a+"_"+strconv.Itoa(int(j.GetArrayTaskId()))))
		}) {
			continue
		}
		if len(r.GetUsers()) > 0 && !slices.Contains(r.GetUsers(), j.GetUser()) {
			continue
		}
		if len(r.GetStates()) > 0 && !slices.Contains(r.GetStates(), j.GetState()) {
			continue
		}
		if r.GetActiveOnly() && j.GetState() != loomv1.JobState_PENDING && j.GetState() != loomv1.JobState_RUNNING {
			continue
		}
		resp.Jobs = append(resp.Jobs, proto.Clone(j).(*loomv1.Job))
	}
	var err error
	resp.Jobs, resp.NextPageToken, err = paging.List(r, resp.Jobs, paging.JobKey)
	return resp, errs.ToStatus(err)
}

// fakeSlurm serves the scheduler's SlurmService reads over world.
type fakeSlurm struct {
	loomv1.UnimplementedSlurmServiceServer
	w *world
}

func (f fakeSlurm) ListPartitions(_ context.Context, r *loomv1.ListPartitionsRequest) (*loomv1.ListPartitionsResponse, error) {
	f.w.mu.Lock()
	defer f.w.mu.Unlock()
	if _, ok := f.w.clusters[r.GetCluster()]; !ok {
		return nil, status.Errorf(codes.NotFound, "cluster %s not found", r.GetCluster())
	}
	resp := &loomv1.ListPartitionsResponse{}
	for _, p := range f.w.partitions {
		resp.Partitions = append(resp.Partitions, proto.Clone(p).(*loomv1.Partition))
	}
	return resp, nil
}

// ListShares answers one account and its user for a cluster it has.
func (f fakeSlurm) ListShares(_ context.Context, r *loomv1.ListSharesRequest) (*loomv1.ListSharesResponse, error) {
	f.w.mu.Lock()
	defer f.w.mu.Unlock()
	if _, ok := f.w.clusters[r.GetCluster()]; !ok {
		return nil, status.Errorf(codes.NotFound, "cluster %s not found", r.GetCluster())
	}
	return &loomv1.ListSharesResponse{Shares: []*loomv1.Share{{Account: "a", NormShares: 1}, {Account: "a", User: "ana", NormShares: 1, FairShare: 1}}}, nil
}

func (f fakeSlurm) ListSlurmNodes(_ context.Context, r *loomv1.ListSlurmNodesRequest) (*loomv1.ListSlurmNodesResponse, error) {
	f.w.mu.Lock()
	defer f.w.mu.Unlock()
	if _, ok := f.w.clusters[r.GetCluster()]; !ok {
		return nil, status.Errorf(codes.NotFound, "cluster %s not found", r.GetCluster())
	}
	resp := &loomv1.ListSlurmNodesResponse{}
	for _, n := range f.w.slurmNodes {
		resp.Nodes = append(resp.Nodes, proto.Clone(n).(*loomv1.SlurmNode))
	}
	return resp, nil
}

type fakeRegistry struct {
	loomv1.UnimplementedModelServiceServer
}

// GetModel answers any model but one named "missing" (NotFound).
func (fakeRegistry) GetModel(_ context.Context, r *loomv1.GetModelRequest) (*loomv1.Model, error) {
	if strings.HasSuffix(r.GetName(), "/models/missing") {
		return nil, status.Errorf(codes.NotFound, "model %s not found", r.GetName())
	}
	return &loomv1.Model{Name: r.GetName(), LatestVersion: 3}, nil
}

func (fakeRegistry) ListModels(_ context.Context, r *loomv1.ListModelsRequest) (*loomv1.ListModelsResponse, error) {
	return &loomv1.ListModelsResponse{Models: []*loomv1.Model{{Name: r.GetParent() + "/models/m1", LatestVersion: 3}}}, nil
}

func (fakeRegistry) ListModelVersions(_ context.Context, r *loomv1.ListModelVersionsRequest) (*loomv1.ListModelVersionsResponse, error) {
	return &loomv1.ListModelVersionsResponse{Versions: []*loomv1.ModelVersion{{Name: r.GetParent() + "/versions/1", Version: 1}}}, nil
}

// harness is a running gateway with a real broker and Redis, and fake owning
// services (the internal gRPC read APIs) behind it.
type harness struct {
	broker   string
	redis    *redis.Client
	w        *world
	conn     *grpc.ClientConn
	restBase string
	// grpcAddr is the gateway's gRPC address. Authentication is on, as by
	// default: adminKey is the key the gateway wrote for its bootstrap
	// administrator, and creds the real access tokens of the tests' named
	// principals (testPrincipals), signed with the gateway's token key.
	grpcAddr string
	adminKey string
	creds    map[string]string
	// cfg is the configuration the gateway runs with (its key files).
	cfg Config
	// anon is a connection without a credential, for calls that name their
	// caller with h.call.
	anon *grpc.ClientConn
	// http calls the REST API as defaultCaller.
	http *http.Client
	// served is every service and method the gateway's gRPC server has.
	served map[string]grpc.ServiceInfo
	// svc is the running gateway (tests that restart it use it).
	svc *testkit.Service
}

const (
	project  = "projects/default"
	cluster1 = "projects/default/clusters/c1"
)

// c1 is a running cluster with 2 nodes of 8 GPUs and 1 CPU node.
func c1() *loomv1.Cluster {
	return &loomv1.Cluster{
		Name: cluster1,
		Compute: &loomv1.ComputeResources{NodePools: []*loomv1.NodePool{
			{Id: "gpu", NodeCount: 2, AcceleratorCount: 8}, {Id: "cpu", NodeCount: 1},
		}},
		Status: &loomv1.ClusterStatus{State: loomv1.Cluster_RUNNING, ReadyNodes: 3, TotalNodes: 3, SharedDir: "/shared"},
	}
}

// newHarness starts the gateway; configure changes its configuration first.
func newHarness(t testing.TB, configure ...func(*Config)) *harness {
	t.Helper()
	h := &harness{broker: testkit.Broker(t), w: &world{
		clusters: map[string]*loomv1.Cluster{}, jobs: map[string]*loomv1.Job{}, reservations: map[string]*loomv1.Reservation{},
		training: map[string]proto.Message{},
	}}
	h.w.setCluster(c1())
	h.w.setCapacity(&loomv1.CapacityPool{Zone: "us-central1-a", MachineType: "a2-highgpu-1g", Type: loomv1.CapacitySource_ON_DEMAND, Total: 100, Free: 100})
	redisAddr, rdb := testkit.Redis(t)
	h.redis = rdb

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	owners := grpc.NewServer()
	loomv1.RegisterClusterServiceServer(owners, fakeProvisioner{w: h.w})
	loomv1.RegisterNodeServiceServer(owners, fakeNodes{})
	loomv1.RegisterReservationServiceServer(owners, fakeReservations{w: h.w})
	loomv1.RegisterJobServiceServer(owners, fakeScheduler{w: h.w})
	loomv1.RegisterSlurmServiceServer(owners, fakeSlurm{w: h.w})
	loomv1.RegisterModelServiceServer(owners, fakeRegistry{})
	loomv1.RegisterHealthServiceServer(owners, fakeHealth{w: h.w})
	loomv1.RegisterGoodputServiceServer(owners, fakeGoodput{w: h.w})
	trainingv1.RegisterTrainingServiceServer(owners, fakeTraining{w: h.w})
	trainingv1.RegisterMetricsServiceServer(owners, fakeMetrics{})
	loomv1.RegisterIngressServiceServer(owners, &fakeBridge{})
	go func() { _ = owners.Serve(ln) }()
	t.Cleanup(owners.Stop)

	ownersAddr := ln.Addr().String()
	cfg := Config{
		Common: config.Common{
			Brokers: []string{h.broker}, RedisAddr: redisAddr, ServiceKeyFile: testkit.ServiceKeyFile(t),
			GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", LogLevel: "warn", CreateTopics: true,
		},
		RESTAddr:        "127.0.0.1:0",
		ProvisionerAddr: ownersAddr, SchedulerAddr: ownersAddr, RegistryAddr: ownersAddr, HealthAddr: ownersAddr,
		TrainingAddr: ownersAddr, BridgeAddr: ownersAddr,
	}
	keys := t.TempDir()
	cfg.Auth = AuthConfig{Mode: "on", TokenKeyFile: filepath.Join(keys, "token.key"),
		BootstrapAdmin: adminUser, BootstrapKeyFile: filepath.Join(keys, "admin.key"), LoginKeyFile: filepath.Join(keys, "login.key")}
	for _, c := range configure {
		c(&cfg)
	}
	type addrs struct{ grpc, rest string }
	started := make(chan addrs, 1)
	svc := testkit.Start(t, "gateway", func(ctx context.Context) error {
		return run(ctx, cfg, hooks{started: func(g, r string) { started <- addrs{g, r} },
			served: func(s *grpc.Server) { h.served = s.GetServiceInfo() }})
	})
	var a addrs
	select {
	case a = <-started:
	case <-svc.Done():
		t.Fatalf("gateway stopped at start: %v", svc.Err())
	case <-time.After(30 * time.Second):
		t.Fatal("gateway did not start")
	}
	h.restBase = "http://" + a.rest
	h.grpcAddr, h.cfg = a.grpc, cfg
	h.enrol(t)
	h.conn = h.as(t, defaultCaller)
	h.anon = h.dial(t, "")
	h.http = h.restAs(defaultCaller)
	h.svc = svc
	return h
}

// adminUser is the harness's bootstrap cluster administrator.
const adminUser = "admin"

// testPrincipal is one of the tests' callers: a user with a role in
// projects (or a cluster administrator), a node or a workload.
type testPrincipal struct {
	kind         auth.Kind
	roles        map[string]string // project id → role
	clusterAdmin bool
	claims       auth.Claims // node and workload tokens' claims
}

// testPrincipals are the tests' callers by name: cluster administrators
// root, slurm and ops; in project default the users ana, bob and alice,
// the viewer vic and the admin pat; oz, admin of project other; nora, a
// member of no project; a node of
// c1; a workload of job 40 (ana's, in the tests that make it).
var testPrincipals = map[string]testPrincipal{
	"root":  {kind: auth.KindUser, clusterAdmin: true},
	"slurm": {kind: auth.KindUser, clusterAdmin: true},
	"ops":   {kind: auth.KindUser, clusterAdmin: true},
	"ana":   {kind: auth.KindUser, roles: map[string]string{"default": "user"}},
	"bob":   {kind: auth.KindUser, roles: map[string]string{"default": "user"}},
	"alice": {kind: auth.KindUser, roles: map[string]string{"default": "user"}},
	"vic":   {kind: auth.KindUser, roles: map[string]string{"default": "viewer"}},
	"pat":   {kind: auth.KindUser, roles: map[string]string{"default": "admin"}},
	"oz":    {kind: auth.KindUser, roles: map[string]string{"other": "admin"}},
	"nora":  {kind: auth.KindUser}, // a member of no project
	"node": {kind: auth.KindNode, claims: auth.Claims{RegisteredClaims: auth.ForSubject(auth.NodeName("gpu-0001")),
		Node: "gpu-0001", Cluster: cluster1, Pool: "gpu"}},
	"work40": {kind: auth.KindWorkload, claims: auth.Claims{RegisteredClaims: auth.ForSubject(auth.WorkloadName("default", "40")),
		User: "ana", Project: "default", Job: "projects/default/jobs/40"}},
}

// enrol makes testPrincipals real: the users get their roles in the
// gateway's member store, and each principal gets
// an access token signed with the gateway's token key, as CreateToken
// issues them.
func (h *harness) enrol(t testing.TB) {
	t.Helper()
	if h.cfg.Auth.Mode == "off" || h.cfg.Auth.BootstrapKeyFile == "" {
		return // every caller is the development administrator
	}
	raw, err := os.ReadFile(h.cfg.Auth.BootstrapKeyFile)
	if err != nil {
		t.Fatalf("bootstrap admin key: %v", err)
	}
	h.adminKey = strings.TrimSpace(string(raw))
	key, err := auth.LoadSecret(h.cfg.Auth.TokenKeyFile)
	if err != nil {
		t.Fatalf("token key: %v", err)
	}
	// The test principals' tokens are issued on the gateway's clock: a
	// gateway on a fake clock (set to a whole second) verifies their iat
	// against it, and a token issued on the real clock a second later was
	// "used before issued" (TestAuthOIDC, now and then).
	var now func() time.Time
	if c := h.cfg.Common.Clock; c != nil {
		now = c.Now
	}
	iss, err := auth.NewIssuer(key, "loom", now)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testkit.Context(t, 30*time.Second)
	// The roles go straight into the gateway's member store (what
	// SetMember writes), so that enrolment spends none of the bootstrap
	// administrator's rate limit.
	members := adapters.NewAuthStore(store.New(h.redis, "gateway:"))
	h.creds = map[string]string{}
	for name, p := range testPrincipals {
		c := p.claims
		c.Use, c.Kind = auth.UseAccess, p.kind.String()
		if p.kind == auth.KindUser {
			c.RegisteredClaims, c.User = auth.ForSubject(auth.UserName(name)), name
			if p.clusterAdmin {
				if err := members.SetMember(ctx, adapters.GlobalParent, name, adapters.RoleClusterAdmin); err != nil {
					t.Fatalf("make %s a cluster admin: %v", name, err)
				}
			}
			for project, role := range p.roles {
				if err := members.SetMember(ctx, "projects/"+project, name, role); err != nil {
					t.Fatalf("give %s role %s in %s: %v", name, role, project, err)
				}
			}
		}
		tok, _, err := iss.Issue(c, time.Hour)
		if err != nil {
			t.Fatalf("token of %s: %v", name, err)
		}
		h.creds[name] = tok
	}
}

// cred is the credential of the named test principal; a name that is not
// one is sent as it is (an unknown credential), "" as none.
func (h *harness) cred(name string) string {
	if c, ok := h.creds[name]; ok {
		return c
	}
	return name
}

// callAs is the call option that makes one call carry cred instead of its
// connection's credential.
type callAs struct {
	grpc.EmptyCallOption
	cred string
}

// call is the call option presenting the named principal's credential
// (h.cred) on one call, whatever the connection's own.
func (h *harness) call(name string) grpc.CallOption { return callAs{cred: h.cred(name)} }

// credOf is the credential a call carries: a callAs option's, else def.
func credOf(def string, opts []grpc.CallOption) string {
	for _, o := range opts {
		if c, ok := o.(callAs); ok {
			return c.cred
		}
	}
	return def
}

// withCred puts cred ("": none) in the call's authorization metadata, as
// auth.Bearer does.
func withCred(ctx context.Context, cred string) context.Context {
	if cred == "" {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, auth.MetadataKey, "Bearer "+cred)
}

// dial returns a connection to the gateway whose calls carry cred ("":
// none, anonymous) unless a call says otherwise (h.call), closed when the
// test ends.
func (h *harness) dial(t testing.TB, cred string) *grpc.ClientConn {
	t.Helper()
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, o ...grpc.CallOption) error {
			return invoke(withCred(ctx, credOf(cred, o)), method, req, reply, cc, o...)
		}),
		grpc.WithStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, stream grpc.Streamer, o ...grpc.CallOption) (grpc.ClientStream, error) {
			return stream(withCred(ctx, credOf(cred, o)), desc, cc, method, o...)
		})}
	conn, err := grpc.NewClient(h.grpcAddr, opts...)
	if err != nil {
		t.Fatalf("dial %s: %v", h.grpcAddr, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// authorize adds the bootstrap administrator's credential to a REST request.
func (h *harness) authorize(req *http.Request) {
	if h.adminKey != "" {
		req.Header.Set("Authorization", "Bearer "+h.adminKey)
	}
}

// defaultCaller is who the harness's conn and http client call as: a
// cluster administrator, so that tests of behaviour other than
// authorization run as Slurm's root always could.
const defaultCaller = "root"

// as dials the gateway as the named test principal (h.cred; "" dials
// anonymous).
func (h *harness) as(t testing.TB, name string) *grpc.ClientConn {
	t.Helper()
	return h.dial(t, h.cred(name))
}

// bearerTransport sends "Authorization: Bearer <cred>" on requests that
// carry none ("" sends none).
type bearerTransport struct{ cred string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if b.cred != "" && r.Header.Get("Authorization") == "" {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+b.cred)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// restAs is an HTTP client calling as the named test principal (h.cred;
// "": anonymous).
func (h *harness) restAs(name string) *http.Client {
	return &http.Client{Transport: bearerTransport{cred: h.cred(name)}}
}

func (h *harness) clusters() loomv1.ClusterServiceClient {
	return loomv1.NewClusterServiceClient(h.conn)
}

func (h *harness) reservations() loomv1.ReservationServiceClient {
	return loomv1.NewReservationServiceClient(h.conn)
}

func (h *harness) jobs() loomv1.JobServiceClient {
	return loomv1.NewJobServiceClient(h.conn)
}

func (h *harness) slurm() loomv1.SlurmServiceClient {
	return loomv1.NewSlurmServiceClient(h.conn)
}

func (h *harness) ops() loomv1.OperationServiceClient {
	return loomv1.NewOperationServiceClient(h.conn)
}

// validCluster is a create request for a new cluster id.
func validCluster(id string) *loomv1.CreateClusterRequest {
	return &loomv1.CreateClusterRequest{Parent: project, ClusterId: id, Cluster: &loomv1.Cluster{
		Compute: &loomv1.ComputeResources{NodePools: []*loomv1.NodePool{{Id: "gpu", MachineType: "a2-highgpu-1g", NodeCount: 2, AcceleratorCount: 1}}},
	}}
}

// validJob is a submit request for c1.
func validJob() *loomv1.SubmitJobRequest {
	return &loomv1.SubmitJobRequest{Parent: project, Job: &loomv1.Job{
		Cluster: cluster1, Script: "echo hello", NodeCount: 2, GpusPerNode: 8,
	}}
}

// accept stores jobs as the gateway accepted them (their accepted records
// and index entries), as a SubmitJob would before the scheduler takes
// them: what an array's whole-array commands read.
func (h *harness) accept(ctx context.Context, t testing.TB, jobs ...*loomv1.Job) {
	t.Helper()
	tx := &store.Tx{}
	for _, j := range jobs {
		if err := adapters.PutJob(tx, j); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := adapters.NewRepo(store.New(h.redis, "gateway:")).Apply(ctx, "", tx); err != nil {
		t.Fatal(err)
	}
}
