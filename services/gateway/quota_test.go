package gateway

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/loom-ml/loom/libs/testkit"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// The callers here are testPrincipals (harness_test.go): pat admin of
// default, bob a user of default, oz admin of another project, root a
// cluster administrator.

// counts are the gateway's records a refused command must leave as they were.
type counts struct{ operations, jobs int64 }

func (h *harness) counts(t *testing.T, ctx context.Context) counts {
	t.Helper()
	ops, err := h.redis.HLen(ctx, "gateway:operations").Result()
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := h.redis.HLen(ctx, "gateway:jobs").Result()
	if err != nil {
		t.Fatal(err)
	}
	return counts{ops, jobs}
}

func (h *harness) jobSeq(t *testing.T, ctx context.Context) int64 {
	t.Helper()
	v, err := h.redis.Get(ctx, "gateway:jobseq").Int64()
	if err != nil && err.Error() != "redis: nil" {
		t.Fatal(err)
	}
	return v
}

// pool is a GPU pool of n a2-highgpu-1g nodes (1 GPU each).
func pool(id string, n int32) *loomv1.NodePool {
	return &loomv1.NodePool{Id: id, MachineType: "a2-highgpu-1g", NodeCount: n, AcceleratorCount: 1}
}

func TestClusterQuotas(t *testing.T) {
	t.Parallel()
	// default holds c1: 3 nodes, 16 GPUs.
	h := newHarness(t, func(c *Config) { c.Limits.ProjectQuotas = "default=nodes:8,gpus:24,clusters:3" })
	ctx := testkit.Context(t, wait)

	create := func(id string, pools ...*loomv1.NodePool) (*loomv1.Operation, error) {
		return h.clusters().CreateCluster(ctx, &loomv1.CreateClusterRequest{Parent: project, ClusterId: id,
			Cluster: &loomv1.Cluster{Compute: &loomv1.ComputeResources{NodePools: pools}}})
	}
	before := h.counts(t, ctx)
	_, err := create("c2", pool("gpu", 6))
	wantCode(t, "9 nodes", err, codes.ResourceExhausted,
		"project default: 9 nodes would exceed the quota of 8 nodes (LOOM_GATEWAY_PROJECT_QUOTAS): 3 in its other clusters, 6 in c2")
	_, err = create("c2", pool("gpu", 2), &loomv1.NodePool{Id: "big", MachineType: "a2-highgpu-4g", NodeCount: 2, AcceleratorCount: 4})
	wantCode(t, "26 GPUs", err, codes.ResourceExhausted, "26 GPUs would exceed the quota of 24 GPUs (LOOM_GATEWAY_PROJECT_QUOTAS): 16 in its other clusters, 10 in c2")
	if after := h.counts(t, ctx); after != before {
		t.Errorf("refused creates left records: %+v → %+v", before, after)
	}
	// Within the quota: accepted; the provisioner then has it.
	if _, err := create("c2", pool("gpu", 2)); err != nil {
		t.Fatalf("c2 within the quota: %v", err)
	}
	c2 := &loomv1.Cluster{Name: project + "/clusters/c2", Compute: &loomv1.ComputeResources{NodePools: []*loomv1.NodePool{pool("gpu", 2)}},
		Status: &loomv1.ClusterStatus{State: loomv1.Cluster_RUNNING}}
	h.w.setCluster(c2)
	h.w.setCluster(&loomv1.Cluster{Name: project + "/clusters/gone", Compute: &loomv1.ComputeResources{NodePools: []*loomv1.NodePool{pool("gpu", 50)}},
		Status: &loomv1.ClusterStatus{State: loomv1.Cluster_DELETED}}) // not counted
	h.w.setCluster(&loomv1.Cluster{Name: "projects/other/clusters/o1", Compute: &loomv1.ComputeResources{NodePools: []*loomv1.NodePool{pool("gpu", 50)}},
		Status: &loomv1.ClusterStatus{State: loomv1.Cluster_RUNNING}}) // another project's
	if _, err := create("c3", pool("gpu", 1)); err != nil {
		t.Fatalf("c3, the third cluster: %v", err)
	}
	h.w.setCluster(&loomv1.Cluster{Name: project + "/clusters/c3", Compute: &loomv1.ComputeResources{NodePools: []*loomv1.NodePool{pool("gpu", 1)}},
		Status: &loomv1.ClusterStatus{State: loomv1.Cluster_RUNNING}})
	before = h.counts(t, ctx)
	_, err = create("c4", pool("gpu", 1))
	wantCode(t, "a fourth cluster", err, codes.ResourceExhausted, "project default: 4 clusters would exceed the quota of 3 clusters")

	// An update counts the cluster as it would be, with the others.
	up := proto.Clone(c2).(*loomv1.Cluster)
	up.Status = nil
	up.Compute.NodePools[0].NodeCount = 5
	_, err = h.clusters().UpdateCluster(ctx, &loomv1.UpdateClusterRequest{Cluster: up, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"compute.node_pools"}}})
	wantCode(t, "growing c2", err, codes.ResourceExhausted, "project default: 9 nodes would exceed the quota of 8 nodes (LOOM_GATEWAY_PROJECT_QUOTAS): 4 in its other clusters, 5 in c2")
	if after := h.counts(t, ctx); after != before {
		t.Errorf("refused create and update left records: %+v → %+v", before, after)
	}
	up.Compute.NodePools[0].NodeCount = 4
	if _, err := h.clusters().UpdateCluster(ctx, &loomv1.UpdateClusterRequest{Cluster: up, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"compute.node_pools"}}}); err != nil {
		t.Errorf("growing c2 to the quota: %v", err)
	}
}

func TestJobQuotas(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *Config) {
		c.Limits.ProjectQuotas = "default=pending_jobs:6"
		c.Limits.MaxSubmitJobs = 3
	})
	ctx := testkit.Context(t, wait)
	// The scheduler has one pending job of carol's and one running of pat's.
	h.w.setJob(&loomv1.Job{Name: project + "/jobs/900", JobId: "900", Cluster: cluster1, User: "carol", State: loomv1.JobState_PENDING})
	h.w.setJob(&loomv1.Job{Name: project + "/jobs/901", JobId: "901", Cluster: cluster1, User: "pat", State: loomv1.JobState_RUNNING})
	// submit submits as who; the scheduler then lists the job (each task
	// of an array) as PENDING, as it does once it consumed the command.
	submit := func(who string, array string) (*loomv1.Job, error) {
		req := validJob()
		req.Job.Array, req.Job.User = array, who
		j, err := h.jobs().SubmitJob(ctx, req, h.call(who))
		if err == nil {
			first, _ := strconv.ParseInt(j.GetJobId(), 10, 64)
			for k := range map[string]int64{"": 1, "0-2": 3, "0-3": 4}[array] {
				id := strconv.FormatInt(first+k, 10)
				h.w.setJob(&loomv1.Job{Name: project + "/jobs/" + id, JobId: id, Cluster: cluster1, User: who, State: loomv1.JobState_PENDING})
			}
		}
		return j, err
	}
	for i := range 2 {
		if _, err := submit("pat", ""); err != nil {
			t.Fatalf("pat's job %d: %v", i, err)
		}
	}
	seq, before := h.jobSeq(t, ctx), h.counts(t, ctx)
	_, err := submit("pat", "")
	wantCode(t, "pat's 4th job", err, codes.ResourceExhausted,
		"user pat in project default: 4 jobs would exceed MaxSubmitJobs of 3 (LOOM_GATEWAY_MAX_SUBMIT_JOBS): 3 pending or running, 1 submitted")
	// bob is not held back by pat's jobs; an array counts its tasks.
	_, err = submit("bob", "0-3")
	wantCode(t, "bob's array of 4", err, codes.ResourceExhausted,
		"project default: 7 pending jobs would exceed the quota of 6 pending jobs (LOOM_GATEWAY_PROJECT_QUOTAS): 3 pending, 4 submitted")
	if s, after := h.jobSeq(t, ctx), h.counts(t, ctx); s != seq || after != before {
		t.Errorf("refused submissions took job ids or left records: seq %d → %d, %+v → %+v", seq, s, before, after)
	}
	if _, err := submit("bob", "0-2"); err != nil {
		t.Errorf("bob's array of 3, to the quota: %v", err)
	}
	_, err = submit("bob", "")
	wantCode(t, "past the quota", err, codes.ResourceExhausted, "7 pending jobs would exceed the quota of 6")
	// An ended job requeued is pending again: it counts as a submission
	// would, or "submit, cancel, requeue" would pass the quota.
	h.w.setJob(&loomv1.Job{Name: project + "/jobs/950", JobId: "950", Cluster: cluster1, User: "pat", State: loomv1.JobState_CANCELLED})
	_, err = h.jobs().UpdateJob(ctx, &loomv1.UpdateJobRequest{Name: project + "/jobs/950", Action: "requeue"}, h.call("pat"))
	wantCode(t, "pat requeues an ended job past the quota", err, codes.ResourceExhausted, "would exceed")
}

// TestJobQuotaRetry: a retried request is answered with its job, even once
// the project reached its quota.
func TestJobQuotaRetry(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *Config) { c.Limits.QuotaPendingJobs = 1 })
	ctx := testkit.Context(t, wait)
	req := validJob()
	req.RequestId = "once"
	first, err := h.jobs().SubmitJob(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	again, err := h.jobs().SubmitJob(ctx, req)
	if err != nil || again.GetName() != first.GetName() {
		t.Errorf("retry at the quota: %v %v, want %s", again.GetName(), err, first.GetName())
	}
	_, err = h.jobs().SubmitJob(ctx, validJob())
	wantCode(t, "a new job past the quota", err, codes.ResourceExhausted,
		"project default: 2 pending jobs would exceed the quota of 1 pending jobs (LOOM_GATEWAY_QUOTA_PENDING_JOBS)")
}

// The attacks of issue 13: 2,000 node pools in one request, a reservation
// of two billion machines. Both are refused before anything is stored.
func TestOversizedRequests(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := testkit.Context(t, wait)
	before := h.counts(t, ctx)
	pools := make([]*loomv1.NodePool, 2000)
	for i := range pools {
		pools[i] = pool("p"+strconv.Itoa(i), 1)
	}
	_, err := h.clusters().CreateCluster(ctx, &loomv1.CreateClusterRequest{Parent: project, ClusterId: "huge",
		Cluster: &loomv1.Cluster{Compute: &loomv1.ComputeResources{NodePools: pools}}})
	wantCode(t, "2,000 pools", err, codes.InvalidArgument, "cluster.compute.node_pools: at most 32 node pools, got 2000")
	_, err = h.clusters().CreateCluster(ctx, &loomv1.CreateClusterRequest{Parent: project, ClusterId: "wide",
		Cluster: &loomv1.Cluster{Compute: &loomv1.ComputeResources{NodePools: []*loomv1.NodePool{pool("gpu", 10001)}}}})
	wantCode(t, "10,001 nodes in a pool", err, codes.InvalidArgument, "cluster.compute.node_pools[0].node_count")
	_, err = h.reservations().CreateReservation(ctx, &loomv1.CreateReservationRequest{Parent: project, ReservationId: "r1",
		Reservation: &loomv1.Reservation{Zone: "us-central1-a", MachineType: "a3-ultragpu-8g", Count: 2_000_000_000}})
	wantCode(t, "two billion machines", err, codes.InvalidArgument,
		"reservation.count: 2000000000 machines, more than the limit of 100000 for one reservation")
	if after := h.counts(t, ctx); after != before {
		t.Errorf("refused requests left records: %+v → %+v", before, after)
	}
}

func TestRateLimitAndWatchCap(t *testing.T) {
	t.Parallel()
	// Buckets of 6 that refill once in 1000 s, and one watch each.
	h := newHarness(t, func(c *Config) { c.Limits.Rate, c.Limits.Burst, c.Limits.MaxWatches = 0.001, 6, 1 })
	ctx := testkit.Context(t, wait)
	get := func(who string) error {
		_, err := h.clusters().GetCluster(ctx, &loomv1.GetClusterRequest{Name: cluster1}, h.call(who))
		return err
	}
	for i := range 6 {
		if err := get("pat"); err != nil {
			t.Fatalf("pat's call %d: %v", i, err)
		}
	}
	wantCode(t, "pat's 7th call", get("pat"), codes.ResourceExhausted,
		"users/pat: more than 0.001 requests a second (LOOM_GATEWAY_RATE), in bursts of at most 6 (LOOM_GATEWAY_BURST)")
	if err := get("bob"); err != nil {
		t.Errorf("bob while ana is limited: %v", err)
	}
	if code, body := restAs(t, ctx, h, "pat", "/v1/"+cluster1); code != 429 || !strings.Contains(body, "LOOM_GATEWAY_RATE") {
		t.Errorf("ana through REST: %d %s, want 429 naming the limit", code, body)
	}

	h.w.setJob(&loomv1.Job{Name: project + "/jobs/7", JobId: "7", Cluster: cluster1, State: loomv1.JobState_RUNNING})
	w1, err := h.jobs().WatchJob(ctx, &loomv1.WatchJobRequest{Name: project + "/jobs/7"}, h.call("bob"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w1.Recv(); err != nil {
		t.Fatalf("bob's first watch: %v", err)
	}
	w2, err := h.jobs().WatchJob(ctx, &loomv1.WatchJobRequest{Name: project + "/jobs/7"}, h.call("bob"))
	if err == nil {
		_, err = w2.Recv()
	}
	wantCode(t, "bob's second watch", err, codes.ResourceExhausted,
		"users/bob: 1 watch streams open (WatchJob, ReadJobLogs, WaitOperation, WatchChanges), the limit of 1 (LOOM_GATEWAY_MAX_WATCHES)")
	w3, err := h.jobs().WatchJob(ctx, &loomv1.WatchJobRequest{Name: project + "/jobs/7"}, h.call("root"))
	if err == nil {
		_, err = w3.Recv()
	}
	if err != nil {
		t.Errorf("root's watch beside bob's: %v", err)
	}
}
