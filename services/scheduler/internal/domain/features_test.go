package domain

import (
	"errors"
	"fmt"
	"github.com/loom-ml/loom/libs/clusterspec"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/slurmspec"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"

	"github.com/loom-ml/loom/services/scheduler/internal/domain/views"
)

// newSpecHarness starts a harness whose cluster has a Slurm layout: pools
// "a3" (a3-highgpu-8g: 8 H100, 208 CPUs) and "cpu" (n2-standard-8), node sets
// named after them, and partitions: "gpu" (default, over a3, MaxTime 1 day),
// "cpu" (over cpu) and any extra ones given.
func newSpecHarness(t *testing.T, cfg Config, extra ...*loomv1.SlurmPartition) *harness {
	h := harnessWith(t, cfg)
	parts := append([]*loomv1.SlurmPartition{
		{Id: "gpu", NodeSetIds: []string{"a3"}, MaxTime: "1-00:00:00", Default: true},
		{Id: "cpu", NodeSetIds: []string{"cpu"}, MaxTime: "UNLIMITED"},
	}, extra...)
	h.do(&eventsv1.ClusterChanged{Cluster: &loomv1.Cluster{Name: cl,
		Compute: &loomv1.ComputeResources{NodePools: []*loomv1.NodePool{{Id: "a3", MachineType: "a3-highgpu-8g"}, {Id: "cpu", MachineType: "n2-standard-8"}}},
		Orchestrator: &loomv1.Orchestrator{Slurm: &loomv1.SlurmOrchestrator{
			NodeSets:   []*loomv1.SlurmNodeSet{{Id: "a3", NodePoolId: "a3", Features: []string{"h100"}}, {Id: "cpu", NodePoolId: "cpu"}},
			Partitions: parts}},
		Status: &loomv1.ClusterStatus{State: loomv1.Cluster_RUNNING, SharedDir: "/shared/c1"}}})
	return h
}

// gpuNode adds a READY a3-highgpu-8g node of pool a3 in block.
func (h *harness) gpuNode(host, block string) *Change {
	return h.do(&eventsv1.NodeChanged{Node: &loomv1.Node{Name: nodeName(host), Cluster: cl, Hostname: host, Gpus: 8,
		State: loomv1.Node_READY, NodePool: "a3", MachineType: "a3-highgpu-8g", Block: block, Role: "compute"}})
}

// cpuNode adds a READY n2-standard-8 node of pool cpu.
func (h *harness) cpuNode(host string) *Change {
	return h.do(&eventsv1.NodeChanged{Node: &loomv1.Node{Name: nodeName(host), Cluster: cl, Hostname: host,
		State: loomv1.Node_READY, NodePool: "cpu", MachineType: "n2-standard-8", Role: "compute"}})
}

// job is a command job of n nodes with g GPUs each, to be adjusted by opts.
func job(id int, n, g int32, opts ...func(*loomv1.Job)) *loomv1.Job {
	j := &loomv1.Job{Name: jobName(id), JobId: strconv.Itoa(id), Cluster: cl, NodeCount: n, GpusPerNode: g,
		Command: []string{"/bin/train"}}
	for _, o := range opts {
		o(j)
	}
	return j
}

func limit(d time.Duration) func(*loomv1.Job) {
	return func(j *loomv1.Job) { j.TimeLimitSeconds = int64(d / time.Second) }
}

func signalOpt(s string) func(*loomv1.Job) { return func(j *loomv1.Job) { j.Signal = s } }

func qos(q string) func(*loomv1.Job) { return func(j *loomv1.Job) { j.Qos = q } }

func user(u, account string) func(*loomv1.Job) {
	return func(j *loomv1.Job) { j.User, j.Account = u, account }
}

func signals(c *Change) []*eventsv1.SignalStep {
	var out []*eventsv1.SignalStep
	for _, e := range c.Emits {
		if s, ok := e.Payload.(*eventsv1.SignalStep); ok {
			out = append(out, s)
		}
	}
	return out
}

// statesOf returns the states job id passed through in c, in order.
func statesOf(c *Change, id int) []loomv1.JobState {
	var out []loomv1.JobState
	for _, jc := range jobChanges(c) {
		if jc.GetJob().GetName() == jobName(id) {
			out = append(out, jc.GetJob().GetState())
		}
	}
	return out
}

func TestPartitionsFromSpec(t *testing.T) {
	t.Parallel()
	h := newSpecHarness(t, Config{})
	h.gpuNode("a3-0001", "b1")
	h.cpuNode("cpu-0001")

	// No partition: the default (gpu), on the GPU node.
	h.submitJob(job(1, 1, 1))
	if j := h.job(1); j.GetPartition() != "gpu" || !reflect.DeepEqual(j.GetNodes(), []string{"a3-0001"}) {
		t.Fatalf("job 1: partition %q on %v", j.GetPartition(), j.GetNodes())
	}
	// The cpu partition: only its node.
	h.submitJob(job(2, 1, 0, func(j *loomv1.Job) { j.Partition = "cpu" }))
	if j := h.job(2); !reflect.DeepEqual(j.GetNodes(), []string{"cpu-0001"}) {
		t.Fatalf("job 2 on %v", j.GetNodes())
	}
	// Over MaxTime: PartitionTimeLimit until the limit is lowered.
	h.submitJob(job(3, 1, 1, limit(48*time.Hour)))
	h.wantState(3, loomv1.JobState_PENDING, ReasonPartitionTimeLimit)
	h.do(&eventsv1.UpdateJob{Job: jobName(3), Cluster: cl, Action: ActionUpdate, TimeLimitSeconds: 3600})
	h.wantState(3, loomv1.JobState_RUNNING, "")
	// An unknown partition, and one too small.
	h.submitJob(job(4, 1, 1, func(j *loomv1.Job) { j.Partition = "nope" }))
	h.wantState(4, loomv1.JobState_PENDING, ReasonPartitionConfig)
	c := h.submitJob(job(5, 2, 1))
	h.wantState(5, loomv1.JobState_PENDING, ReasonPartitionNodeLimit)
	if d := decision(c, 5); d == nil || d.Filtered["NotInPartition"] != 1 {
		t.Fatalf("job 5: want cpu-0001 filtered as NotInPartition, got %+v", d)
	}
	// The partition views.
	parts := views.Partitions(h.s, cl)
	if len(parts) != 2 || parts[0].GetName() != "gpu" || !parts[0].GetDefault() || parts[0].GetMaxTime() != "1-00:00:00" ||
		parts[0].GetTotalGpus() != 8 || parts[0].GetAllocGpus() != 2 || !reflect.DeepEqual(parts[0].GetNodes(), []string{"a3-0001"}) {
		t.Fatalf("partitions: %v", parts)
	}
}

func TestMultifactorPriority(t *testing.T) {
	t.Parallel()
	h := newSpecHarness(t, Config{})
	h.gpuNode("a3-0001", "b1")
	h.submitJob(job(1, 1, 8, limit(time.Hour), user("busy", "acct-a")))
	// Queued behind job 1: normal, then high QOS, then low.
	h.submitJob(job(2, 1, 8, user("u2", "acct-b")))
	h.submitJob(job(3, 1, 8, qos("high"), user("u3", "acct-b")))
	h.submitJob(job(4, 1, 8, qos("low"), user("u4", "acct-b")))
	h.wantState(3, loomv1.JobState_PENDING, ReasonResources) // highest priority: the blocked head
	h.wantState(2, loomv1.JobState_PENDING, ReasonPriority)

	v3, v2, v4 := views.Job(h.s, jobName(3), h.now), views.Job(h.s, jobName(2), h.now), views.Job(h.s, jobName(4), h.now)
	if !(v3.GetPriority() > v2.GetPriority() && v2.GetPriority() > v4.GetPriority()) {
		t.Fatalf("priorities high %d, normal %d, low %d", v3.GetPriority(), v2.GetPriority(), v4.GetPriority())
	}
	f := v3.GetPriorityFactors()
	if f.GetQos() != DefaultWeightQOS || f.GetFairshare() <= 0 || f.GetJobSize() != DefaultWeightJobSize ||
		f.GetAge()+f.GetFairshare()+f.GetJobSize()+f.GetPartition()+f.GetQos() != v3.GetPriority() {
		t.Fatalf("factors of job 3: %v (priority %d)", f, v3.GetPriority())
	}
	// Age counts up to MaxAge.
	later := views.Job(h.s, jobName(2), h.now.Add(DefaultMaxAge))
	if later.GetPriorityFactors().GetAge() != DefaultWeightAge {
		t.Fatalf("age factor after MaxAge: %d", later.GetPriorityFactors().GetAge())
	}

	// Fair share: the account that used the cluster comes after the one that did not.
	h.tick(time.Hour)
	atStart := views.Job(h.s, jobName(3), h.now).GetPriority()
	h.finish(1, 0)
	// Job 3 starts in the place job 1 left: as in Slurm, it keeps showing
	// the priority it started with, however long it runs.
	h.wantState(3, loomv1.JobState_RUNNING, "")
	if got := views.Job(h.s, jobName(3), h.now.Add(DefaultMaxAge)).GetPriority(); got != atStart || got == 0 {
		t.Fatalf("running job 3 shows priority %d, want the %d it had when it started", got, atStart)
	}
	if len(jobChanges(h.tick(0))) > 0 {
		t.Fatal("a tick with nothing due changed jobs")
	}
	busy := h.s.usage[UsageKey(cl, "acct-a", "busy")]
	if busy == nil || busy.Value < 8*3600*0.99 {
		t.Fatalf("usage of busy after 1 h on 8 GPUs: %+v", busy)
	}
	h.submitJob(job(10, 1, 8, user("busy", "acct-a")))
	h.submitJob(job(11, 1, 8, user("fresh", "acct-c")))
	a, b := views.Job(h.s, jobName(10), h.now), views.Job(h.s, jobName(11), h.now)
	if a.GetPriorityFactors().GetFairshare() >= b.GetPriorityFactors().GetFairshare() {
		t.Fatalf("fair share of the busy account %d, of a fresh one %d", a.GetPriorityFactors().GetFairshare(), b.GetPriorityFactors().GetFairshare())
	}
}

func TestPartitionTierOrders(t *testing.T) {
	t.Parallel()
	h := newSpecHarness(t, Config{}, &loomv1.SlurmPartition{Id: "urgent", NodeSetIds: []string{"a3"}, PriorityTier: 10, MaxTime: "UNLIMITED"})
	h.gpuNode("a3-0001", "b1")
	h.submitJob(job(1, 1, 8, limit(time.Hour)))
	h.submitJob(job(2, 1, 8, qos("high")))
	h.submitJob(job(3, 1, 8, func(j *loomv1.Job) { j.Partition = "urgent"; j.Qos = "low" }))
	// The higher tier goes first whatever the priorities.
	h.wantState(3, loomv1.JobState_PENDING, ReasonResources)
	if v := views.Job(h.s, jobName(3), h.now); v.GetPriorityFactors().GetPartition() != DefaultWeightPartition {
		t.Fatalf("partition factor %d", v.GetPriorityFactors().GetPartition())
	}
}

// TestBackfill is EASY backfill with time limits as the contract.
func TestBackfill(t *testing.T) {
	t.Parallel()
	h := newSpecHarness(t, Config{Policy: EASYPolicy()})
	h.gpuNode("a3-0001", "b1")
	h.gpuNode("a3-0002", "b1")
	h.submitJob(job(1, 1, 8, limit(time.Hour))) // a3-0001 until +1 h
	c := h.submitJob(job(2, 2, 8, limit(time.Hour)))
	h.wantState(2, loomv1.JobState_PENDING, ReasonResources)
	if len(c.Reservations) != 1 || c.Reservations[0].Job != jobName(2) || c.Reservations[0].Unbounded ||
		!c.Reservations[0].Start.Equal(h.job(1).GetStartTime().AsTime().Add(time.Hour)) {
		t.Fatalf("reservation: %+v", c.Reservations)
	}
	// The reserved job's view says when it will start and where (squeue
	// --start); the others promise nothing.
	if v := views.Job(h.s, jobName(2), h.now); !v.GetExpectedStartTime().AsTime().Equal(c.Reservations[0].Start) ||
		!reflect.DeepEqual(v.GetSchedNodes(), []string{"a3-0001", "a3-0002"}) || v.GetStartTime() != nil {
		t.Fatalf("job 2's view: expected start %v on %v, start %v; want %v on both nodes, no start",
			v.GetExpectedStartTime(), v.GetSchedNodes(), v.GetStartTime(), c.Reservations[0].Start)
	}
	// Ends before the reservation: backfilled on the reserved node.
	h.submitJob(job(3, 1, 4, limit(30*time.Minute)))
	h.wantState(3, loomv1.JobState_RUNNING, "")
	// Would run past it: waits.
	h.submitJob(job(4, 1, 4, limit(2*time.Hour)))
	h.wantState(4, loomv1.JobState_PENDING, ReasonPriority)
	// No limit of its own: the partition's MaxTime (1 day) counts.
	h.submitJob(job(5, 1, 1))
	h.wantState(5, loomv1.JobState_PENDING, ReasonPriority)
	// The head job starts when both nodes free up, before the later jobs.
	h.finish(1, 0)
	h.wantState(2, loomv1.JobState_PENDING, ReasonResources)
	h.finish(3, 0)
	h.wantState(2, loomv1.JobState_RUNNING, "")
	h.wantState(4, loomv1.JobState_PENDING, ReasonResources)
	for _, id := range []int{2, 5} {
		if v := views.Job(h.s, jobName(id), h.now); v.GetExpectedStartTime() != nil || len(v.GetSchedNodes()) > 0 {
			t.Errorf("job %d (no reservation) promises a start %v on %v", id, v.GetExpectedStartTime(), v.GetSchedNodes())
		}
	}
	if v := views.Job(h.s, jobName(4), h.now); v.GetExpectedStartTime() == nil {
		t.Errorf("job 4, the next head, has no expected start")
	}

	// FIFO: nothing passes a blocked head.
	f := newSpecHarness(t, Config{Policy: FIFOPolicy()})
	f.gpuNode("a3-0001", "b1")
	f.gpuNode("a3-0002", "b1")
	f.submitJob(job(1, 1, 8, limit(time.Hour)))
	f.submitJob(job(2, 2, 8, limit(time.Hour)))
	f.submitJob(job(3, 1, 4, limit(time.Minute)))
	f.wantState(3, loomv1.JobState_PENDING, ReasonPriority)
}

// TestBackfillUnlimitedBlocksReservedNodes: when the head waits for a job
// without any time limit, no start can be promised, and its nodes are kept
// from every later job.
func TestBackfillUnlimitedBlocksReservedNodes(t *testing.T) {
	t.Parallel()
	h := newSpecHarness(t, Config{Policy: EASYPolicy()}, &loomv1.SlurmPartition{Id: "long", NodeSetIds: []string{"a3"}, MaxTime: "UNLIMITED"})
	h.gpuNode("a3-0001", "b1")
	h.gpuNode("a3-0002", "b1")
	h.submitJob(job(1, 1, 4, func(j *loomv1.Job) { j.Partition = "long" }))
	c := h.submitJob(job(2, 2, 8, limit(time.Hour)))
	if len(c.Reservations) != 1 || !c.Reservations[0].Unbounded {
		t.Fatalf("reservation: %+v", c.Reservations)
	}
	if v := views.Job(h.s, jobName(2), h.now); v.GetExpectedStartTime() != nil || len(v.GetSchedNodes()) != 2 {
		t.Errorf("job 2 waiting on a job with no limit: expected start %v on %v, want none on two nodes", v.GetExpectedStartTime(), v.GetSchedNodes())
	}
	h.submitJob(job(3, 1, 4, limit(time.Minute)))
	h.wantState(3, loomv1.JobState_PENDING, ReasonPriority)
}

func TestTopologyPrefersOneBlock(t *testing.T) {
	t.Parallel()
	h := newSpecHarness(t, Config{})
	for i, b := range []string{"b1", "b1", "b2", "b2", "b2", "b3"} {
		h.gpuNode("a3-000"+strconv.Itoa(i+1), b)
	}
	// Two nodes: the smallest block that holds them (b1), not the first hosts of b2.
	h.submitJob(job(1, 2, 8))
	if got := h.job(1).GetNodes(); !reflect.DeepEqual(got, []string{"a3-0001", "a3-0002"}) {
		t.Fatalf("2-node gang on %v, want block b1", got)
	}
	// Three nodes: b2 whole.
	h.submitJob(job(2, 3, 8))
	if got := h.job(2).GetNodes(); !reflect.DeepEqual(got, []string{"a3-0003", "a3-0004", "a3-0005"}) {
		t.Fatalf("3-node gang on %v, want block b2", got)
	}
	// GPU jobs pack: a 1-GPU job goes to the fullest node that fits.
	h.finish(1, 0)
	h.submitJob(job(3, 1, 6))
	h.submitJob(job(4, 1, 1))
	if a, b := h.job(3).GetNodes()[0], h.job(4).GetNodes()[0]; a != b {
		t.Fatalf("1-GPU job on %s, not packed next to the 6-GPU job on %s", b, a)
	}
}

// TestStartedJobPlacementShowsRankerScores: a started job's placement says
// where it went and each ranker's score of its nodes (the first ranker
// decided here: best fit), for the whole of its attempt.
func TestStartedJobPlacementShowsRankerScores(t *testing.T) {
	t.Parallel()
	h := newSpecHarness(t, Config{})
	h.gpuNode("a3-0001", "b1")
	h.gpuNode("a3-0002", "b1")
	h.submitJob(job(1, 1, 6))
	h.submitJob(job(2, 1, 1))
	want := "started on a3-0001: 1 of 2 fitting nodes (2 looked at); ranker scores: BestFitGPUs 2; LeastLoadedCPUs 0; FewestAllocations 0"
	if p := views.Job(h.s, jobName(2), h.now).GetPlacement(); p != want {
		t.Fatalf("placement of the started job:\n got %q\nwant %q", p, want)
	}
	h.step(2, 1, "a3-0001", eventsv1.StepState_STEP_RUNNING, 0)
	if v := views.Job(h.s, jobName(2), h.now); v.GetState() != loomv1.JobState_RUNNING || v.GetPlacement() != want {
		t.Fatalf("running job: %v, placement %q", v.GetState(), v.GetPlacement())
	}
	// A gang: one score per node, in rank order (topology chose block b2,
	// the only one that holds it; a3-0002 fits too).
	h.gpuNode("a3-0003", "b2")
	h.gpuNode("a3-0004", "b2")
	h.submitJob(job(3, 2, 8))
	want = "started on a3-0003,a3-0004: 2 of 3 fitting nodes (4 looked at); ranker scores: BestFitGPUs 8,8; LeastLoadedCPUs 0,0; FewestAllocations 0,0"
	if p := views.Job(h.s, jobName(3), h.now).GetPlacement(); p != want {
		t.Fatalf("placement of the gang:\n got %q\nwant %q", p, want)
	}
	// Memory only: a restarted scheduler does not know it.
	fresh := NewState(h.s.Config())
	fresh.Restore(h.s.Snapshot())
	if p := views.Job(fresh, jobName(3), h.now).GetPlacement(); p != "" {
		t.Fatalf("placement after a restart: %q", p)
	}
}

func TestFewestBlocksAndSpread(t *testing.T) {
	t.Parallel()
	h := newSpecHarness(t, Config{})
	for i, b := range []string{"b1", "b2", "b2", "b3", "b3", "b3"} {
		h.gpuNode("a3-000"+strconv.Itoa(i+1), b)
	}
	// Four nodes fit in no block: the largest blocks first (b3, then b2).
	h.submitJob(job(1, 4, 8))
	got := h.job(1).GetNodes()
	if len(got) != 4 || slicesContain(got, "a3-0001") {
		t.Fatalf("4-node gang on %v: want b3 and one of b2", got)
	}
	// Jobs without GPUs spread over the least loaded nodes.
	s := newSpecHarness(t, Config{})
	s.cpuNode("cpu-0001")
	s.cpuNode("cpu-0002")
	s.submitJob(job(1, 1, 0, func(j *loomv1.Job) { j.Partition = "cpu" }))
	s.submitJob(job(2, 1, 0, func(j *loomv1.Job) { j.Partition = "cpu" }))
	if a, b := s.job(1).GetNodes()[0], s.job(2).GetNodes()[0]; a == b {
		t.Fatalf("two CPU jobs piled on %s", a)
	}
}

func slicesContain(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func TestResourceOptions(t *testing.T) {
	t.Parallel()
	h := newSpecHarness(t, Config{})
	h.gpuNode("a3-0001", "b1")
	h.gpuNode("a3-0002", "b1")
	h.cpuNode("cpu-0001")

	// --gres=gpu:TYPE: the a3 nodes' H100s match, an A100 does not.
	c := h.submitJob(job(1, 1, 1, func(j *loomv1.Job) { j.GpuType = "a100" }))
	h.wantState(1, loomv1.JobState_PENDING, ReasonBadConstraints)
	if d := decision(c, 1); d == nil || d.Filtered["GresType"] != 2 {
		t.Fatalf("want both GPU nodes filtered as GresType, got %+v", d)
	}
	h.submitJob(job(2, 1, 1, func(j *loomv1.Job) { j.GpuType = "H100" }))
	h.wantState(2, loomv1.JobState_RUNNING, "")
	h.do(&eventsv1.CancelJob{Job: jobName(2), Cluster: cl})
	h.finish(2, 0)

	// --gpus 12: spread over the fewest nodes, 6 each.
	c = h.submitJob(job(3, 0, 0, func(j *loomv1.Job) { j.Gpus = 12 }))
	ss := starts(c)
	if len(ss) != 2 || ss[0].GetGpus() != 6 || ss[1].GetGpus() != 6 || h.job(3).GetAllocGpus() != 12 {
		t.Fatalf("--gpus 12: %v", ss)
	}
	h.finish(3, 0)

	// --ntasks-per-node and --cpus-per-task against 208 CPUs.
	h.submitJob(job(4, 1, 0, func(j *loomv1.Job) { j.NtasksPerNode = 8; j.CpusPerTask = 32 }))
	h.wantState(4, loomv1.JobState_PENDING, ReasonBadConstraints) // 256 CPUs > 208 on any node
	h.submitJob(job(5, 1, 0, func(j *loomv1.Job) { j.NtasksPerNode = 4; j.CpusPerTask = 50 }))
	h.wantState(5, loomv1.JobState_RUNNING, "")
	h.submitJob(job(6, 2, 0, func(j *loomv1.Job) { j.NtasksPerNode = 4; j.CpusPerTask = 50 }))
	h.wantState(6, loomv1.JobState_PENDING, ReasonResources) // one node has 8 CPUs left
	// --mem above the node's memory.
	h.submitJob(job(7, 1, 0, func(j *loomv1.Job) { j.MemMb = 4 << 20; j.Partition = "cpu" }))
	h.wantState(7, loomv1.JobState_PENDING, ReasonBadConstraints)
	// A node's memory is what slurm.conf's RealMemory says: the machine's
	// less the share kept for the OS (clusterspec.MemoryReserve), so the
	// whole machine's memory is more than any job may ask for, and the
	// rest fits.
	n2, _ := clusterspec.Machine("n2-standard-8")
	h.submitJob(job(8, 1, 0, func(j *loomv1.Job) { j.MemMb = int64(n2.MemoryGiB) * 1024; j.Partition = "cpu" }))
	h.wantState(8, loomv1.JobState_PENDING, ReasonBadConstraints)
	h.submitJob(job(9, 1, 0, func(j *loomv1.Job) { j.MemMb = n2.SchedulableMemoryMiB(); j.Partition = "cpu" }))
	h.wantState(9, loomv1.JobState_RUNNING, "")
	var mem int64 = -1
	for _, n := range views.SlurmNodes(h.s, cl) {
		if n.GetHostname() == "cpu-0001" {
			mem = n.GetMemoryMb()
		}
	}
	if mem != n2.SchedulableMemoryMiB() {
		t.Fatalf("sinfo's memory of cpu-0001 %d, want slurm.conf's RealMemory %d", mem, n2.SchedulableMemoryMiB())
	}

	// --exclusive waits for an idle node and then keeps everything else off it.
	x := newSpecHarness(t, Config{})
	x.gpuNode("a3-0001", "b1")
	x.submitJob(job(1, 1, 1))
	x.submitJob(job(2, 1, 1, func(j *loomv1.Job) { j.Exclusive = true }))
	x.wantState(2, loomv1.JobState_PENDING, ReasonResources)
	x.finish(1, 0)
	x.wantState(2, loomv1.JobState_RUNNING, "")
	x.submitJob(job(3, 1, 1))
	x.wantState(3, loomv1.JobState_PENDING, ReasonResources)
	if n := views.SlurmNodes(x.s, cl)[0]; n.GetState() != loomv1.SlurmNode_ALLOCATED || n.GetAllocCpus() != 208 {
		t.Fatalf("node held by an exclusive job: %v", n)
	}

	// --nodelist and --exclude.
	l := newSpecHarness(t, Config{})
	l.gpuNode("a3-0001", "b1")
	l.gpuNode("a3-0002", "b1")
	l.submitJob(job(1, 1, 1, func(j *loomv1.Job) { j.Nodelist = []string{"a3-0002"} }))
	l.submitJob(job(2, 1, 1, func(j *loomv1.Job) { j.Exclude = []string{"a3-0001"} }))
	if a, b := l.job(1).GetNodes(), l.job(2).GetNodes(); !reflect.DeepEqual(a, []string{"a3-0002"}) || !reflect.DeepEqual(b, []string{"a3-0002"}) {
		t.Fatalf("nodelist job on %v, exclude job on %v", a, b)
	}
	l.submitJob(job(3, 1, 1, func(j *loomv1.Job) { j.Nodelist = []string{"a3-0009"} }))
	l.wantState(3, loomv1.JobState_PENDING, ReasonBadConstraints)
}

func TestTasksEnv(t *testing.T) {
	t.Parallel()
	h := newSpecHarness(t, Config{})
	h.gpuNode("a3-0001", "b1")
	h.gpuNode("a3-0002", "b1")
	c := h.submitJob(job(1, 2, 2, func(j *loomv1.Job) { j.Command = nil; j.Script = "srun x"; j.Ntasks = 5 }))
	ss := starts(c)
	if len(ss) != 1 {
		t.Fatalf("batch job: %d StartSteps", len(ss))
	}
	env := ss[0].GetEnv()
	// SLURM_JOB_CPUS_PER_NODE is every node's, as SLURM_TASKS_PER_NODE
	// (a script that sizes its workers by it reads the compressed form).
	if env["SLURM_NTASKS"] != "5" || env["SLURM_TASKS_PER_NODE"] != "3,2" || env["SLURM_JOB_CPUS_PER_NODE"] != "3,2" || env["SLURM_JOB_PARTITION"] != "gpu" ||
		env["SLURM_JOB_NUM_NODES"] != "2" || env["SLURM_GPUS_ON_NODE"] != "2" || env["SLURM_GPUS_PER_NODE"] != "2" ||
		env["SLURM_JOB_GPUS"] != "0,1" || env["GPU_DEVICE_ORDINAL"] != "0,1" || env["SLURM_GPUS"] != "" {
		t.Fatalf("env: %v", env)
	}
	// --gpus: the job's total, not a per-node count.
	c = h.submitJob(job(2, 1, 0, func(j *loomv1.Job) { j.Command = nil; j.Script = "x"; j.Gpus = 3 }))
	if ss = starts(c); len(ss) != 1 {
		t.Fatalf("--gpus job: %d StartSteps", len(ss))
	}
	env = ss[0].GetEnv()
	if env["SLURM_GPUS"] != "3" || env["SLURM_GPUS_PER_NODE"] != "" || env["SLURM_GPUS_ON_NODE"] != "3" || env["SLURM_JOB_GPUS"] != "2,3,4" {
		t.Fatalf("--gpus=3 env: %v", env)
	}
	// --gpus-per-task: the steps' default, in the job's environment (its
	// per-node count is derived from it, not asked for).
	c = h.submitJob(job(4, 1, 2, func(j *loomv1.Job) { j.Command = nil; j.Script = "x"; j.GpusPerTask = 1; j.Ntasks = 2 }))
	if ss = starts(c); len(ss) != 1 {
		t.Fatalf("--gpus-per-task job: %d StartSteps", len(ss))
	}
	if env = ss[0].GetEnv(); env["SLURM_GPUS_PER_TASK"] != "1" || env["SLURM_GPUS_PER_NODE"] != "" {
		t.Fatalf("--gpus-per-task=1 env: %v", env)
	}
	// sbatch -n2 --gpus-per-task=1 sends the total it derives (gpus 2):
	// Slurm 22.05's script has SLURM_GPUS_PER_TASK=1 alone (measured).
	c = h.submitJob(job(5, 1, 0, func(j *loomv1.Job) { j.Command = nil; j.Script = "x"; j.GpusPerTask, j.Ntasks, j.Gpus = 1, 2, 2 }))
	if ss = starts(c); len(ss) != 1 {
		t.Fatalf("-n2 --gpus-per-task=1 job: %d StartSteps", len(ss))
	}
	if env = ss[0].GetEnv(); env["SLURM_GPUS_PER_TASK"] != "1" || env["SLURM_GPUS"] != "" || env["SLURM_GPUS_PER_NODE"] != "" || env["SLURM_GPUS_ON_NODE"] != "2" {
		t.Fatalf("-n2 --gpus-per-task=1 env: SLURM_GPUS_PER_TASK=%q SLURM_GPUS=%q SLURM_GPUS_PER_NODE=%q SLURM_GPUS_ON_NODE=%q; want 1, none, none, 2",
			env["SLURM_GPUS_PER_TASK"], env["SLURM_GPUS"], env["SLURM_GPUS_PER_NODE"], env["SLURM_GPUS_ON_NODE"])
	}
	// No GPUs, no GPU ids.
	c = h.submitJob(job(3, 1, 0, func(j *loomv1.Job) { j.Command = nil; j.Script = "x" }))
	if ss = starts(c); len(ss) != 1 {
		t.Fatalf("CPU job: %d StartSteps", len(ss))
	}
	if env = ss[0].GetEnv(); env["SLURM_JOB_GPUS"] != "" || env["GPU_DEVICE_ORDINAL"] != "" || env["SLURM_GPUS_PER_NODE"] != "" {
		t.Fatalf("CPU job env: %v", env)
	}
	// --gres=gpu:1 (gres_gpus): the same request as --gpus-per-node=1,
	// but Slurm 22.05's script has no SLURM_GPUS_PER_NODE for it, so that
	// its sruns take no per-node default (measured).
	c = h.submitJob(job(6, 1, 1, func(j *loomv1.Job) { j.Command = nil; j.Script = "x"; j.GresGpus = true }))
	if ss = starts(c); len(ss) != 1 {
		t.Fatalf("--gres job: %d StartSteps", len(ss))
	}
	if env = ss[0].GetEnv(); env["SLURM_GPUS_PER_NODE"] != "" || env["SLURM_GPUS_ON_NODE"] != "1" {
		t.Fatalf("--gres=gpu:1 env: SLURM_GPUS_PER_NODE=%q SLURM_GPUS_ON_NODE=%q; want none, 1", env["SLURM_GPUS_PER_NODE"], env["SLURM_GPUS_ON_NODE"])
	}
}

// TestTasksPerNodeWithoutNtasks: a batch job without -n (nor
// --ntasks-per-node) gets Slurm 22.05's SLURM_TASKS_PER_NODE, each node's
// CPUs over its CPUs per task (env_array_for_batch_job), and no
// SLURM_CPUS_PER_TASK without -c; with -n its tasks, as before (checked
// beside a real Slurm's batch environment).
func TestTasksPerNodeWithoutNtasks(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name         string
		nodes, gpus  int32
		opt          func(*loomv1.Job)
		perNode, cpt string // cpt "": unset
		// ntasks is SLURM_NTASKS and SLURM_NPROCS: Slurm 22.05 sets them
		// only for a job that asked for tasks ("": unset).
		ntasks string
	}{
		{"--gres=gpu:2 --cpus-per-gpu=3", 1, 2, func(j *loomv1.Job) { j.CpusPerGpu = 3 }, "6", "", ""},
		{"--gpus=3 -N2 --cpus-per-gpu=2", 2, 0, func(j *loomv1.Job) { j.Gpus, j.CpusPerGpu = 3, 2 }, "4,2", "", ""},
		{"-N2 -c3", 2, 0, func(j *loomv1.Job) { j.CpusPerTask = 3 }, "1(x2)", "3", ""},
		{"-N2", 2, 0, func(j *loomv1.Job) {}, "1(x2)", "", ""},
		{"no options", 1, 0, func(j *loomv1.Job) {}, "1", "", ""},
		{"-n3 -c2", 1, 0, func(j *loomv1.Job) { j.Ntasks, j.CpusPerTask = 3, 2 }, "3", "2", "3"},
		{"-n4 --gres=gpu:2 --cpus-per-gpu=3", 1, 2, func(j *loomv1.Job) { j.Ntasks, j.CpusPerGpu = 4, 3 }, "4", "", "4"},
		{"-N2 -n3", 2, 0, func(j *loomv1.Job) { j.Ntasks = 3 }, "2,1", "", "3"},
		{"-N2 --ntasks-per-node=2", 2, 0, func(j *loomv1.Job) { j.NtasksPerNode = 2 }, "2(x2)", "", "4"},
		// Every CPU of the node (an a3-highgpu-8g's 208): as many tasks.
		{"--exclusive", 1, 0, func(j *loomv1.Job) { j.Exclusive = true }, "208", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newSpecHarness(t, Config{})
			h.gpuNode("a3-0001", "b1")
			h.gpuNode("a3-0002", "b1")
			c := h.submitJob(job(1, tc.nodes, tc.gpus, func(j *loomv1.Job) { j.Command = nil; j.Script = "x" }, tc.opt))
			ss := starts(c)
			if len(ss) != 1 {
				t.Fatalf("%d StartSteps, want the batch step", len(ss))
			}
			env := ss[0].GetEnv()
			cpt, set := env["SLURM_CPUS_PER_TASK"]
			if env["SLURM_TASKS_PER_NODE"] != tc.perNode || cpt != tc.cpt || set != (tc.cpt != "") {
				t.Errorf("SLURM_TASKS_PER_NODE=%q SLURM_CPUS_PER_TASK=%q (set %v); want %q and %q (SLURM_JOB_CPUS_PER_NODE=%q)",
					env["SLURM_TASKS_PER_NODE"], cpt, set, tc.perNode, tc.cpt, env["SLURM_JOB_CPUS_PER_NODE"])
			}
			for _, k := range []string{"SLURM_NTASKS", "SLURM_NPROCS"} {
				if v, set := env[k]; v != tc.ntasks || set != (tc.ntasks != "") {
					t.Errorf("%s=%q (set %v), want %q (unset when empty)", k, v, set, tc.ntasks)
				}
			}
		})
	}
}

// TestPreemptionWithSignalThenRequeue: a high-QOS job preempts a low-QOS
// one: the victim gets its --signal, a grace period, then StopStep,
// PREEMPTED, REQUEUED and PENDING; the preemptor starts once the victim's
// steps end, and the victim runs again later as a new attempt.
func TestPreemptionWithSignalThenRequeue(t *testing.T) {
	t.Parallel()
	h := newSpecHarness(t, Config{PreemptGrace: 30 * time.Second})
	h.gpuNode("a3-0001", "b1")
	h.submitJob(job(1, 1, 8, qos("low"), signalOpt("B:USR1@60")))
	c := h.submitJob(job(2, 1, 8, qos("high")))
	sg := signals(c)
	if len(sg) != 1 || sg[0].GetSignal() != "USR1" || !sg[0].GetBatchOnly() || sg[0].GetJob() != jobName(1) || len(stops(c)) != 0 {
		t.Fatalf("preemption start: signals %v, stops %v", sg, stops(c))
	}
	h.wantState(1, loomv1.JobState_RUNNING, "")
	h.wantState(2, loomv1.JobState_PENDING, ReasonResources)
	if v := views.Job(h.s, jobName(2), h.now); !strings.Contains(v.GetPlacement(), "preempting 1 job") {
		t.Fatalf("placement: %q", v.GetPlacement())
	}
	// Within the grace: nothing more, and no second victim is chosen.
	if c := h.tick(10 * time.Second); len(c.Emits) != 0 {
		t.Fatalf("during the grace period: %v", c.Emits)
	}
	c = h.tick(25 * time.Second)
	if st := stops(c); len(st) != 1 || st[0].GetJob() != jobName(1) {
		t.Fatalf("after the grace: stops %v", st)
	}
	if got := statesOf(c, 1); !reflect.DeepEqual(got, []loomv1.JobState{loomv1.JobState_PREEMPTED, loomv1.JobState_REQUEUED, loomv1.JobState_PENDING}) {
		t.Fatalf("victim went through %v", got)
	}
	// The preemptor starts when the victim's step ends.
	h.step(1, 1, "a3-0001", eventsv1.StepState_STEP_KILLED, 143)
	h.wantState(2, loomv1.JobState_RUNNING, "")
	h.finish(2, 0)
	h.wantState(1, loomv1.JobState_RUNNING, "")
	v := views.Job(h.s, jobName(1), h.now)
	if v.GetRestartCount() != 1 || len(v.GetRuns()) != 2 || v.GetRuns()[0].GetState() != loomv1.JobState_PREEMPTED {
		t.Fatalf("victim after its restart: restarts %d, runs %v", v.GetRestartCount(), v.GetRuns())
	}
}

func TestPreemptionWithoutSignalOrRequeue(t *testing.T) {
	t.Parallel()
	// No --signal: stopped at once. --no-requeue: it ends PREEMPTED.
	h := newSpecHarness(t, Config{})
	h.gpuNode("a3-0001", "b1")
	h.submitJob(job(1, 1, 8, qos("low"), func(j *loomv1.Job) { j.Requeue = proto.Bool(false) }))
	c := h.submitJob(job(2, 1, 8, qos("high")))
	if len(stops(c)) != 1 || len(signals(c)) != 0 {
		t.Fatalf("immediate preemption: stops %v signals %v", stops(c), signals(c))
	}
	h.wantState(1, loomv1.JobState_PREEMPTED, "Preempted")
	h.step(1, 1, "a3-0001", eventsv1.StepState_STEP_KILLED, 143)
	h.wantState(2, loomv1.JobState_RUNNING, "")

	// A normal job may not preempt another normal job.
	n := newSpecHarness(t, Config{})
	n.gpuNode("a3-0001", "b1")
	n.submitJob(job(1, 1, 8))
	if c := n.submitJob(job(2, 1, 8)); len(stops(c)) != 0 {
		t.Fatal("a normal job preempted a normal one")
	}

	// A higher partition tier preempts a lower one on shared nodes.
	p := newSpecHarness(t, Config{}, &loomv1.SlurmPartition{Id: "urgent", NodeSetIds: []string{"a3"}, PriorityTier: 5})
	p.gpuNode("a3-0001", "b1")
	p.submitJob(job(1, 1, 8))
	if c := p.submitJob(job(2, 1, 8, func(j *loomv1.Job) { j.Partition = "urgent" })); len(stops(c)) != 1 {
		t.Fatalf("tier preemption: %v", c.Emits)
	}
	// Requeued, it waits for its run to be reported stopped, then for resources.
	p.wantState(1, loomv1.JobState_PENDING, ReasonRequeued)
	p.step(1, 1, "a3-0001", eventsv1.StepState_STEP_KILLED, 143)
	p.wantState(1, loomv1.JobState_PENDING, ReasonResources) // the first of its partition waiting
}

// TestNodeFailRequeuesWithExclusion: a job that allows requeue goes
// NODE_FAIL, REQUEUED, PENDING and runs again elsewhere, never on the node
// that failed.
func TestNodeFailRequeuesWithExclusion(t *testing.T) {
	t.Parallel()
	h := newSpecHarness(t, Config{})
	h.gpuNode("a3-0001", "b1")
	h.gpuNode("a3-0002", "b1")
	h.submitJob(job(1, 1, 8))
	first := h.job(1).GetNodes()[0]
	other := map[string]string{"a3-0001": "a3-0002", "a3-0002": "a3-0001"}[first]
	h.submitJob(job(2, 1, 8))
	c := h.do(&eventsv1.NodeHealthChanged{Node: nodeName(first), Cluster: cl, Health: eventsv1.NodeHealth_UNHEALTHY, Reason: "gone"})
	if got := statesOf(c, 1); !reflect.DeepEqual(got, []loomv1.JobState{loomv1.JobState_NODE_FAIL, loomv1.JobState_REQUEUED, loomv1.JobState_PENDING}) {
		t.Fatalf("job 1 went through %v", got)
	}
	// The node comes back (not repaired): it answers the fence's StopStep,
	// and the job still never goes there.
	h.do(&eventsv1.NodeHealthChanged{Node: nodeName(first), Cluster: cl, Health: eventsv1.NodeHealth_HEALTHY})
	h.step(1, 1, first, eventsv1.StepState_STEP_KILLED, 143)
	h.wantState(1, loomv1.JobState_PENDING, ReasonResources)
	h.finish(2, 0)
	h.wantState(1, loomv1.JobState_RUNNING, "")
	if got := h.job(1).GetNodes(); !reflect.DeepEqual(got, []string{other}) || h.s.JobRecord(jobName(1)).Attempt != 2 {
		t.Fatalf("job 1 reran on %v (attempt %d), want %s", got, h.s.JobRecord(jobName(1)).Attempt, other)
	}
}

func TestTimeLimitSignalsThenTimesOut(t *testing.T) {
	t.Parallel()
	h := newSpecHarness(t, Config{})
	h.gpuNode("a3-0001", "b1")
	h.submitJob(job(1, 1, 8, limit(10*time.Minute), signalOpt("USR1@120")))
	if c := h.tick(7 * time.Minute); len(c.Emits) != 0 {
		t.Fatalf("before the signal time: %v", c.Emits)
	}
	c := h.tick(time.Minute + 5*time.Second)
	if sg := signals(c); len(sg) != 1 || sg[0].GetSignal() != "USR1" || sg[0].GetBatchOnly() {
		t.Fatalf("signal 120 s before the limit: %v", c.Emits)
	}
	if c := h.tick(time.Second); len(c.Emits) != 0 {
		t.Fatalf("the signal was sent twice: %v", c.Emits)
	}
	c = h.tick(2 * time.Minute)
	h.wantState(1, loomv1.JobState_TIMEOUT, ReasonTimeLimit)
	if len(stops(c)) != 1 {
		t.Fatalf("TIMEOUT without StopStep: %v", c.Emits)
	}
	// A running job's limit may be lowered, not raised, but by an
	// administrator (slurmctld's operator).
	h.submitJob(job(2, 1, 1, limit(time.Hour)))
	h.step(1, 1, "a3-0001", eventsv1.StepState_STEP_KILLED, 143)
	h.wantState(2, loomv1.JobState_RUNNING, "")
	h.do(&eventsv1.UpdateJob{Job: jobName(2), Cluster: cl, Action: ActionUpdate, TimeLimitSeconds: 7200})
	if h.job(2).GetTimeLimitSeconds() != 3600 {
		t.Fatal("a running job's limit was raised")
	}
	h.do(&eventsv1.UpdateJob{Job: jobName(2), Cluster: cl, Action: ActionUpdate, TimeLimitSeconds: 7200, Admin: true})
	if h.job(2).GetTimeLimitSeconds() != 7200 {
		t.Fatal("an administrator's raise of a running job's limit was dropped")
	}
	h.tick(90 * time.Minute)
	h.wantState(2, loomv1.JobState_RUNNING, "")
	// A pending job's too: a user lowers it, an administrator raises it.
	h.submitJob(job(3, 1, 8, limit(10*time.Minute), func(j *loomv1.Job) { j.Hold = true }))
	h.do(&eventsv1.UpdateJob{Job: jobName(3), Cluster: cl, Action: ActionUpdate, TimeLimitSeconds: 3600})
	if h.job(3).GetTimeLimitSeconds() != 600 {
		t.Fatal("a user's update raised a pending job's limit")
	}
	h.do(&eventsv1.UpdateJob{Job: jobName(3), Cluster: cl, Action: ActionUpdate, TimeLimitSeconds: 300})
	h.do(&eventsv1.UpdateJob{Job: jobName(3), Cluster: cl, Action: ActionUpdate, TimeLimitSeconds: 3600, Admin: true})
	if h.job(3).GetTimeLimitSeconds() != 3600 {
		t.Fatalf("a pending job's limit after a user's lowering and an admin's raise: %d s, want 3600", h.job(3).GetTimeLimitSeconds())
	}
	h.do(&eventsv1.UpdateJob{Job: jobName(2), Cluster: cl, Action: ActionUpdate, TimeLimitSeconds: 60})
	h.tick(2 * time.Minute)
	h.wantState(2, loomv1.JobState_TIMEOUT, ReasonTimeLimit)
}

// TestLoweredLimitSignalsBeforeStop: a limit lowered below a running job's
// elapsed time stops it at the next tick, as Slurm 22.05 does, and its
// --signal, never sent since the lead was never reached before, comes
// first on each node (measured beside Slurm: a B:USR1@60 batch shell's
// USR1 trap ran 3 ms before its TERM one).
func TestLoweredLimitSignalsBeforeStop(t *testing.T) {
	t.Parallel()
	h := newSpecHarness(t, Config{})
	h.gpuNode("a3-0001", "b1")
	h.gpuNode("a3-0002", "b1")
	h.submitJob(job(1, 1, 8, limit(10*time.Minute), signalOpt("B:USR1@60")))
	h.submitJob(job(2, 1, 8, limit(10*time.Minute), signalOpt("USR1@60")))
	h.wantState(1, loomv1.JobState_RUNNING, "")
	h.wantState(2, loomv1.JobState_RUNNING, "")
	h.tick(2 * time.Minute)
	for id := 1; id <= 2; id++ {
		h.do(&eventsv1.UpdateJob{Job: jobName(id), Cluster: cl, Action: ActionUpdate, TimeLimitSeconds: 60})
	}
	c := h.tick(time.Second)
	h.wantState(1, loomv1.JobState_TIMEOUT, ReasonTimeLimit)
	h.wantState(2, loomv1.JobState_TIMEOUT, ReasonTimeLimit)
	for id, batchOnly := range map[int]bool{1: true, 2: false} {
		sig, stop := -1, -1
		for i, e := range c.Emits {
			switch p := e.Payload.(type) {
			case *eventsv1.SignalStep:
				if p.GetJob() == jobName(id) && sig < 0 {
					sig = i
					if p.GetSignal() != "USR1" || p.GetBatchOnly() != batchOnly || e.Key != p.GetNode() {
						t.Errorf("job %d: signal %v, want USR1 batch-only %v keyed by its node", id, p, batchOnly)
					}
				}
			case *eventsv1.StopStep:
				if p.GetJob() == jobName(id) && stop < 0 {
					stop = i
				}
			}
		}
		if sig < 0 || stop < 0 || sig > stop {
			t.Errorf("job %d: signal at emit %d, stop at %d; want the signal, then the stop: %v", id, sig, stop, c.Emits)
		}
	}
	if c := h.tick(time.Minute); len(signals(c)) != 0 {
		t.Fatalf("signalled again after the stop: %v", c.Emits)
	}
}

func TestHoldReleaseRequeue(t *testing.T) {
	t.Parallel()
	h := newSpecHarness(t, Config{})
	h.gpuNode("a3-0001", "b1")
	h.submitJob(job(1, 1, 8, func(j *loomv1.Job) { j.Hold = true }))
	h.wantState(1, loomv1.JobState_PENDING, ReasonHeldUser)
	if v := views.Job(h.s, jobName(1), h.now); v.GetPriority() != 0 {
		t.Fatalf("held job priority %d", v.GetPriority())
	}
	h.do(&eventsv1.UpdateJob{Job: jobName(1), Cluster: cl, Action: ActionRelease})
	h.wantState(1, loomv1.JobState_RUNNING, "")
	h.submitJob(job(2, 1, 8))
	h.do(&eventsv1.UpdateJob{Job: jobName(2), Cluster: cl, Action: ActionHold, User: "root", Admin: true})
	h.wantState(2, loomv1.JobState_PENDING, ReasonHeldAdmin)
	// A user may not release an admin hold; an administrator may.
	h.do(&eventsv1.UpdateJob{Job: jobName(2), Cluster: cl, Action: ActionRelease, User: "ana"})
	h.wantState(2, loomv1.JobState_PENDING, ReasonHeldAdmin)
	// Nor turn it into a hold of their own, which they could release.
	for _, a := range []string{ActionHold, ActionUHold} {
		h.do(&eventsv1.UpdateJob{Job: jobName(2), Cluster: cl, Action: a, User: "ana"})
		h.wantState(2, loomv1.JobState_PENDING, ReasonHeldAdmin)
	}
	h.do(&eventsv1.UpdateJob{Job: jobName(2), Cluster: cl, Action: ActionRelease, User: "root", Admin: true})
	if j := h.job(2); j.GetHold() || j.GetStateReason() == ReasonHeldAdmin {
		t.Fatalf("admin release: %v %q", j.GetHold(), j.GetStateReason())
	}
	// A user hold (uhold) by an administrator.
	h.do(&eventsv1.UpdateJob{Job: jobName(2), Cluster: cl, Action: ActionUHold, User: "root", Admin: true})
	h.wantState(2, loomv1.JobState_PENDING, ReasonHeldUser)
	// Another user's job is left alone; its owner may hold it.
	h.submitJob(job(4, 1, 8, func(j *loomv1.Job) { j.User = "ana" }))
	h.do(&eventsv1.UpdateJob{Job: jobName(4), Cluster: cl, Action: ActionHold, User: "bob"})
	h.do(&eventsv1.CancelJob{Job: jobName(4), Cluster: cl, User: "bob"})
	if j := h.job(4); j.GetHold() || j.GetState() != loomv1.JobState_PENDING {
		t.Fatalf("bob acted on ana's job: %v %v", j.GetState(), j.GetHold())
	}
	h.do(&eventsv1.UpdateJob{Job: jobName(4), Cluster: cl, Action: ActionHold, User: "ana"})
	h.wantState(4, loomv1.JobState_PENDING, ReasonHeldUser)
	h.do(&eventsv1.CancelJob{Job: jobName(4), Cluster: cl, User: "ana"})
	h.wantState(4, loomv1.JobState_CANCELLED, "")

	// Requeue a running job: a new attempt.
	c := h.do(&eventsv1.UpdateJob{Job: jobName(1), Cluster: cl, Action: ActionRequeue})
	if got := statesOf(c, 1); !reflect.DeepEqual(got, []loomv1.JobState{loomv1.JobState_REQUEUED, loomv1.JobState_PENDING}) || len(stops(c)) != 1 {
		t.Fatalf("requeue: states %v, stops %v", got, stops(c))
	}
	h.step(1, 1, "a3-0001", eventsv1.StepState_STEP_KILLED, 143)
	h.wantState(1, loomv1.JobState_RUNNING, "")
	h.finish(1, 0)
	// Requeue a finished job: it runs again.
	h.do(&eventsv1.UpdateJob{Job: jobName(1), Cluster: cl, Action: ActionRequeue})
	h.wantState(1, loomv1.JobState_RUNNING, "")
	if r := h.s.JobRecord(jobName(1)); r.Attempt != 3 || r.Job.GetRestartCount() != 2 {
		t.Fatalf("after two requeues: attempt %d, restarts %d", r.Attempt, r.Job.GetRestartCount())
	}
	// --no-requeue refuses.
	h.submitJob(job(3, 1, 0, func(j *loomv1.Job) { j.Requeue = proto.Bool(false) }))
	h.do(&eventsv1.UpdateJob{Job: jobName(3), Cluster: cl, Action: ActionRequeue})
	h.wantState(3, loomv1.JobState_RUNNING, "")
	// Bad actions are refused.
	if _, err := h.s.Handle(h.now, &eventsv1.UpdateJob{Job: jobName(3), Action: "explode"}); err == nil {
		t.Fatal("unknown action accepted")
	}
}

func TestScancelSignalAndUpdatePartition(t *testing.T) {
	t.Parallel()
	h := newSpecHarness(t, Config{})
	h.gpuNode("a3-0001", "b1")
	h.cpuNode("cpu-0001")
	h.submitJob(job(1, 1, 8, func(j *loomv1.Job) { j.Exclusive = true }))
	c := h.do(&eventsv1.CancelJob{Job: jobName(1), Cluster: cl, Signal: "SIGUSR2"})
	if sg := signals(c); len(sg) != 1 || sg[0].GetSignal() != "USR2" {
		t.Fatalf("scancel --signal: %v", c.Emits)
	}
	h.wantState(1, loomv1.JobState_RUNNING, "")
	if _, err := h.s.Handle(h.now, &eventsv1.CancelJob{Job: jobName(1), Signal: "NOPE"}); err == nil {
		t.Fatal("bad signal accepted")
	}
	// A pending job moves to another partition.
	h.submitJob(job(2, 1, 0))
	h.wantState(2, loomv1.JobState_PENDING, ReasonResources)
	h.do(&eventsv1.UpdateJob{Job: jobName(2), Cluster: cl, Action: ActionUpdate, Partition: "cpu"})
	h.wantState(2, loomv1.JobState_RUNNING, "")
	if got := h.job(2).GetNodes(); !reflect.DeepEqual(got, []string{"cpu-0001"}) {
		t.Fatalf("job 2 on %v", got)
	}
}

func TestBeginTime(t *testing.T) {
	t.Parallel()
	h := newSpecHarness(t, Config{})
	h.gpuNode("a3-0001", "b1")
	h.submitJob(job(1, 1, 1, func(j *loomv1.Job) { j.BeginTime = timestamppb.New(h.now.Add(time.Hour)) }))
	h.wantState(1, loomv1.JobState_PENDING, ReasonBeginTime)
	h.tick(30 * time.Minute)
	h.wantState(1, loomv1.JobState_PENDING, ReasonBeginTime)
	h.tick(31 * time.Minute)
	h.wantState(1, loomv1.JobState_RUNNING, "")
}

func TestDependencies(t *testing.T) {
	t.Parallel()
	h := newSpecHarness(t, Config{})
	h.gpuNode("a3-0001", "b1")
	h.submitJob(job(1, 1, 1))
	h.submitJob(job(2, 1, 1, func(j *loomv1.Job) { j.Dependency = "afterok:1" }))
	h.submitJob(job(3, 1, 1, func(j *loomv1.Job) { j.Dependency = "afternotok:1" }))
	h.submitJob(job(4, 1, 1, func(j *loomv1.Job) { j.Dependency = "afterany:1" }))
	h.submitJob(job(5, 1, 1, func(j *loomv1.Job) { j.Dependency = "after:1" }))
	h.submitJob(job(6, 1, 1, func(j *loomv1.Job) { j.Dependency = "afterok:99" }))
	h.submitJob(job(7, 1, 1, func(j *loomv1.Job) { j.Dependency = "afterok:1?afternotok:1" }))
	h.wantState(2, loomv1.JobState_PENDING, ReasonDependency)
	h.wantState(5, loomv1.JobState_RUNNING, "") // job 1 started
	h.wantState(6, loomv1.JobState_PENDING, ReasonDependencyNeverSatisfied)
	h.finish(1, 0)
	h.wantState(2, loomv1.JobState_RUNNING, "")
	h.wantState(3, loomv1.JobState_PENDING, ReasonDependencyNeverSatisfied) // kept pending, as kill_invalid_depend=no
	h.wantState(4, loomv1.JobState_RUNNING, "")
	h.wantState(7, loomv1.JobState_RUNNING, "")

	// singleton: one job per user and name at a time, in submission order.
	s := newSpecHarness(t, Config{})
	s.gpuNode("a3-0001", "b1")
	single := func(j *loomv1.Job) { j.Dependency = "singleton"; j.User = "ada"; j.DisplayName = "etl" }
	s.submitJob(job(1, 1, 1, single))
	s.submitJob(job(2, 1, 1, single))
	s.submitJob(job(3, 1, 1, single, func(j *loomv1.Job) { j.User = "bob" }))
	s.wantState(1, loomv1.JobState_RUNNING, "")
	s.wantState(2, loomv1.JobState_PENDING, ReasonDependency)
	s.wantState(3, loomv1.JobState_RUNNING, "")
	s.finish(1, 0)
	s.wantState(2, loomv1.JobState_RUNNING, "")
}

// TestArrayTaskStep: SLURM_ARRAY_TASK_STEP is the step the spec writes, as
// Slurm 22.05 sets it (checked there): "1,3,5" is 1 though its indexes are
// two apart, so a script that handles indexes ID..ID+STEP-1 handles each
// once; "0-6:3,10" is 3.
func TestArrayTaskStep(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		spec string
		want string
	}{{"1,3,5", "1"}, {"0-6:3,10", "3"}, {"4", "1"}} {
		h := newSpecHarness(t, Config{})
		h.gpuNode("a3-0001", "b1")
		c := h.submitJob(job(10, 1, 1, func(j *loomv1.Job) { j.Array = tc.spec; j.Command = nil; j.Script = "run" }))
		h.wantState(10, loomv1.JobState_RUNNING, "")
		var env map[string]string
		for _, ss := range starts(c) {
			if ss.GetJob() == jobName(10) {
				env = ss.GetEnv()
			}
		}
		if env["SLURM_ARRAY_TASK_STEP"] != tc.want {
			t.Errorf("--array=%s: SLURM_ARRAY_TASK_STEP=%q, want %q (env %v)", tc.spec, env["SLURM_ARRAY_TASK_STEP"], tc.want, env)
		}
	}
}

func TestArrays(t *testing.T) {
	t.Parallel()
	h := newSpecHarness(t, Config{})
	h.gpuNode("a3-0001", "b1")
	c := h.submitJob(job(10, 1, 1, func(j *loomv1.Job) { j.Array = "0-6:2%2"; j.Command = nil; j.Script = "run $SLURM_ARRAY_TASK_ID" }))
	if n := len(jobChanges(c)); n < 4 {
		t.Fatalf("array of 4 tasks: %d JobChanged", n)
	}
	// Tasks 0,2,4,6 are jobs 10..13; two run at once.
	for k, idx := range []int32{0, 2, 4, 6} {
		r := h.s.JobRecord(jobName(10 + k))
		if r == nil || r.Job.GetArrayJobId() != "10" || r.Job.GetArrayTaskId() != idx {
			t.Fatalf("task %d: %+v", idx, r)
		}
	}
	h.wantState(10, loomv1.JobState_RUNNING, "")
	h.wantState(11, loomv1.JobState_RUNNING, "")
	h.wantState(12, loomv1.JobState_PENDING, ReasonJobArrayTaskLimit)
	var env map[string]string
	var out string
	for _, ss := range starts(c) {
		if ss.GetJob() == jobName(11) {
			env, out = ss.GetEnv(), ss.GetOutputPath()
		}
	}
	if env["SLURM_ARRAY_JOB_ID"] != "10" || env["SLURM_ARRAY_TASK_ID"] != "2" || env["SLURM_ARRAY_TASK_COUNT"] != "4" ||
		env["SLURM_ARRAY_TASK_MIN"] != "0" || env["SLURM_ARRAY_TASK_MAX"] != "6" || env["SLURM_ARRAY_TASK_STEP"] != "2" ||
		out != "/shared/c1/slurm-10_2.out" {
		t.Fatalf("task 2: env %v, output %q", env, out)
	}
	// jobs/10_4 is task 4 (job 12).
	if v := views.Job(h.s, "projects/default/jobs/10_4", h.now); v.GetJobId() != "12" {
		t.Fatalf("10_4 resolves to %v", v)
	}
	h.finish(10, 0)
	h.wantState(12, loomv1.JobState_RUNNING, "")
	// Cancelling jobs/10 cancels every task; jobs/10_6 alone only one.
	h.do(&eventsv1.CancelJob{Job: "projects/default/jobs/10_6", Cluster: cl})
	h.wantState(13, loomv1.JobState_CANCELLED, "")
	h.wantState(11, loomv1.JobState_RUNNING, "")
	h.do(&eventsv1.CancelJob{Job: jobName(10), Cluster: cl})
	h.wantState(11, loomv1.JobState_CANCELLED, "")
	h.wantState(12, loomv1.JobState_CANCELLED, "")
	// squeue -j 10 lists every task.
	if got := views.List(h.s, views.JobFilter{JobIDs: []string{"10"}}, h.now); len(got) != 4 {
		t.Fatalf("ListJobs -j 10: %d jobs", len(got))
	}
}

func TestQOSMaxGPUsPerUser(t *testing.T) {
	t.Parallel()
	q := DefaultQOS()
	q[1].MaxGPUsPerUser = 8 // normal
	h := newSpecHarness(t, Config{QOS: q})
	h.gpuNode("a3-0001", "b1")
	h.gpuNode("a3-0002", "b1")
	h.submitJob(job(1, 1, 8, user("ada", "a")))
	h.submitJob(job(2, 1, 1, user("ada", "a")))
	h.submitJob(job(3, 1, 8, user("bob", "a")))
	h.wantState(2, loomv1.JobState_PENDING, ReasonQOSMaxGRESPerUser)
	h.wantState(3, loomv1.JobState_RUNNING, "")
	h.finish(1, 0)
	h.wantState(2, loomv1.JobState_RUNNING, "")
}

// TestAdminDown: scontrol update State=DOWN ends the jobs the node runs
// (NODE_FAIL, requeued, the node excluded from their next run), keeps new
// work off it, shows it DOWN with its reason, who set it and when, and
// RESUME puts it back.
func TestAdminDown(t *testing.T) {
	t.Parallel()
	h := newSpecHarness(t, Config{})
	h.gpuNode("a3-0001", "b1")
	h.gpuNode("a3-0002", "b1")
	h.submitJob(job(1, 1, 8))
	busy := h.job(1).GetNodes()[0]
	other := map[string]string{"a3-0001": "a3-0002", "a3-0002": "a3-0001"}[busy]
	asked := h.now.Add(-time.Minute)
	if _, err := h.s.Handle(h.now, &eventsv1.UpdateSlurmNode{Cluster: cl, Hostname: busy, State: "DOWN"}); err == nil {
		t.Fatal("DOWN without a reason accepted")
	}
	c := h.do(&eventsv1.UpdateSlurmNode{Cluster: cl, Hostname: busy, State: "DOWN", Reason: "bad DIMM", User: "ops", Time: timestamppb.New(asked)})
	if n := slurmNodeChanges(c); len(n) != 1 || n[0].GetState() != "DOWN" {
		t.Fatalf("DOWN emitted SlurmNodeChanged %v", n)
	}
	j := h.s.JobViewer(h.now)(jobName(1))
	if len(j.GetRuns()) == 0 || j.GetRuns()[0].GetState() != loomv1.JobState_NODE_FAIL || !strings.Contains(j.GetRuns()[0].GetReason(), "bad DIMM") ||
		!slices.Contains(j.GetExcludedNodes(), busy) || j.GetUserFailures() != 0 {
		t.Fatalf("job on the downed node: %v; want its run NODE_FAIL (bad DIMM), %s excluded, no user failure", j, busy)
	}
	// Its stopped step frees the node; the requeued job runs on the other.
	h.step(1, 1, busy, eventsv1.StepState_STEP_KILLED, 143)
	h.wantState(1, loomv1.JobState_RUNNING, "")
	if nodes := h.job(1).GetNodes(); len(nodes) != 1 || nodes[0] != other {
		t.Fatalf("requeued onto %v, want %s", nodes, other)
	}
	h.submitJob(job(2, 1, 8))
	h.wantState(2, loomv1.JobState_PENDING, ReasonResources)
	if p := h.s.JobViewer(h.now)(jobName(2)).GetPlacement(); !strings.Contains(p, "NodeDown 1") {
		t.Errorf("job 2's placement %q does not count the down node", p)
	}
	for _, n := range views.SlurmNodes(h.s, cl) {
		if n.GetHostname() == busy && (n.GetState() != loomv1.SlurmNode_DOWN || n.GetReason() != "bad DIMM" || n.GetReasonUser() != "ops" ||
			!n.GetReasonTime().AsTime().Equal(asked)) {
			t.Fatalf("downed node's view: %v", n)
		}
	}
	// DRAIN after DOWN: the last wins, the node is drained, not down.
	h.do(&eventsv1.UpdateSlurmNode{Cluster: cl, Hostname: busy, State: "DRAIN", Reason: "checking"})
	for _, n := range views.SlurmNodes(h.s, cl) {
		if n.GetHostname() == busy && (n.GetState() != loomv1.SlurmNode_DRAINED || n.GetReason() != "checking") {
			t.Fatalf("drained after down: %v", n)
		}
	}
	h.do(&eventsv1.UpdateSlurmNode{Cluster: cl, Hostname: busy, State: "RESUME"})
	h.wantState(2, loomv1.JobState_RUNNING, "")
	if nodes := h.job(2).GetNodes(); len(nodes) != 1 || nodes[0] != busy {
		t.Fatalf("job 2 on %v after the resume, want %s", nodes, busy)
	}
}

func TestAdminDrainAndNodeViews(t *testing.T) {
	t.Parallel()
	h := newSpecHarness(t, Config{})
	h.gpuNode("a3-0001", "b1")
	h.gpuNode("a3-0002", "b1")
	h.submitJob(job(1, 1, 4))
	busy := h.job(1).GetNodes()[0]
	idle := map[string]string{"a3-0001": "a3-0002", "a3-0002": "a3-0001"}[busy]
	asked := h.now.Add(-time.Minute) // the gateway's clock when it took the request
	h.do(&eventsv1.UpdateSlurmNode{Cluster: cl, Hostname: busy, State: "DRAIN", Reason: "bad fan", User: "ops", Time: timestamppb.New(asked)})
	c := h.do(&eventsv1.UpdateSlurmNode{Cluster: cl, Hostname: idle, State: "DRAIN", Reason: "maintenance"})
	// The drain is said on the job events (the gateway's change feed lists
	// the Slurm nodes again on it); the same drain again changes nothing
	// and says nothing.
	if n := slurmNodeChanges(c); len(n) != 1 || n[0].GetHostname() != idle || n[0].GetCluster() != cl || n[0].GetState() != "DRAIN" {
		t.Fatalf("a drain emitted SlurmNodeChanged %v, want one for %s", n, idle)
	}
	if again, err := h.s.Handle(h.now, &eventsv1.UpdateSlurmNode{Cluster: cl, Hostname: idle, State: "DRAIN", Reason: "maintenance"}); err != nil || len(slurmNodeChanges(again)) != 0 {
		t.Fatalf("the same drain again: %v, emitting %v", err, slurmNodeChanges(again))
	}
	states := map[string]*loomv1.SlurmNode{}
	for _, n := range views.SlurmNodes(h.s, cl) {
		states[n.GetHostname()] = n
	}
	if n := states[busy]; n.GetState() != loomv1.SlurmNode_DRAINING || n.GetReason() != "bad fan" || n.GetAllocGpus() != 4 ||
		n.GetReasonUser() != "ops" || !n.GetReasonTime().AsTime().Equal(asked) {
		t.Fatalf("drained busy node: %v", n)
	}
	// A drain whose command says nothing of when is stamped with the scheduler's clock.
	if n := states[idle]; n.GetReasonUser() != "" || !n.GetReasonTime().AsTime().Equal(h.now) {
		t.Fatalf("drained idle node's reason user and time: %v", n)
	}
	if n := states[idle]; n.GetState() != loomv1.SlurmNode_DRAINED || n.GetGpuType() != "h100" || n.GetCpus() != 208 ||
		!reflect.DeepEqual(n.GetPartitions(), []string{"gpu"}) || n.GetBlock() != "b1" {
		t.Fatalf("drained idle node: %v", n)
	}
	h.wantState(1, loomv1.JobState_RUNNING, "") // drained, not killed
	h.submitJob(job(2, 1, 1))
	h.wantState(2, loomv1.JobState_PENDING, ReasonReqNodeNotAvail)
	if n := slurmNodeChanges(h.do(&eventsv1.UpdateSlurmNode{Cluster: cl, Hostname: idle, State: "RESUME"})); len(n) != 1 || n[0].GetState() != "RESUME" {
		t.Fatalf("a resume emitted SlurmNodeChanged %v, want one", n)
	}
	h.wantState(2, loomv1.JobState_RUNNING, "")
	for _, n := range views.SlurmNodes(h.s, cl) {
		if n.GetHostname() == idle && (n.GetReason() != "" || n.GetReasonUser() != "" || n.GetReasonTime() != nil) {
			t.Fatalf("resumed node keeps its drain reason: %v", n)
		}
	}
	if _, err := h.s.Handle(h.now, &eventsv1.UpdateSlurmNode{Cluster: cl, Hostname: idle, State: "DRAIN"}); err == nil {
		t.Fatal("DRAIN without a reason accepted")
	}
	// IDLE, MIXED, ALLOCATED and DOWN.
	v := newSpecHarness(t, Config{})
	for _, host := range []string{"a3-0001", "a3-0002", "a3-0003", "a3-0004"} {
		v.gpuNode(host, "b1")
	}
	v.submitJob(job(1, 1, 8))
	v.submitJob(job(2, 1, 2))
	v.do(&eventsv1.NodeChanged{Node: &loomv1.Node{Name: nodeName("a3-0004"), Cluster: cl, Hostname: "a3-0004", Gpus: 8,
		State: loomv1.Node_DOWN, Reason: "agent exited", NodePool: "a3"}})
	got := map[string]loomv1.SlurmNode_State{}
	for _, n := range views.SlurmNodes(v.s, cl) {
		got[n.GetHostname()] = n.GetState()
	}
	want := map[string]loomv1.SlurmNode_State{"a3-0001": loomv1.SlurmNode_ALLOCATED, "a3-0002": loomv1.SlurmNode_MIXED,
		"a3-0003": loomv1.SlurmNode_IDLE, "a3-0004": loomv1.SlurmNode_DOWN}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("node states %v, want %v", got, want)
	}
}

func TestOutputPatternsAndWorkDir(t *testing.T) {
	t.Parallel()
	j := &loomv1.Job{JobId: "7", SubmitDir: "/home/u", WorkDir: "/abs/dir"}
	if wd := workDir(j, "/shared"); wd != "/abs/dir" {
		t.Fatalf("absolute --chdir: %q", wd)
	}
	if wd := workDir(&loomv1.Job{}, "/shared"); wd != "/shared" {
		t.Fatalf("default work dir: %q", wd)
	}
	// A user's job submitted without a directory (the API, a CustomJob)
	// runs in its owner's home, as Slurm's: the shared dir is root's, and
	// the job could not write its output there. Root's stays in the
	// shared dir, as does a job whose owner's name is no account name.
	// Nor does one named as the shared dir's own entries (a user
	// "models" would own what every job writes its model to).
	for user, want := range map[string]string{"alice": "/shared/alice", "root": "/shared", "../etc": "/shared",
		"models": "/shared", "checkpoints": "/shared"} {
		spec := &loomv1.Job{JobId: "7", User: user}
		wd := workDir(spec, "/shared")
		out, _ := outputPaths(spec, wd, "a3-0001")
		if wd != want || out != want+"/slurm-7.out" || submitDir(spec, "/shared") != want {
			t.Errorf("%s's job without a directory: works in %q, writes %q, want %q", user, wd, out, want)
		}
	}
	for _, bad := range []string{"X:USR1", "USR1@x", "NOPE"} {
		if _, err := ParseJobSignal(bad); err == nil {
			t.Errorf("ParseJobSignal(%q) accepted", bad)
		}
	}
	if s, err := ParseJobSignal("B:10@30"); err != nil || s.Name != "USR1" || s.Lead != 30*time.Second || !s.BatchOnly {
		t.Fatalf("ParseJobSignal(B:10@30) = %+v, %v", s, err)
	}
	if a, err := ParseArraySpec("1-5:2,8%3", slurmspec.DefaultMaxArraySize); err != nil || !reflect.DeepEqual(a.Indexes, []int32{1, 3, 5, 8}) || a.Limit != 3 {
		t.Fatalf("ParseArraySpec: %+v %v", a, err)
	}
	// Slurm's MaxArraySize: ids below it, so 0-1000 by default and 0-1001 not.
	if a, err := ParseArraySpec("0-1000", slurmspec.DefaultMaxArraySize); err != nil || len(a.Indexes) != 1001 {
		t.Fatalf("ParseArraySpec(0-1000): %d tasks, %v", len(a.Indexes), err)
	}
	for _, bad := range []string{"", "5-1", "1:2", "a", "1%-1", "0-1001", "1000-1999"} {
		if _, err := ParseArraySpec(bad, slurmspec.DefaultMaxArraySize); err == nil {
			t.Errorf("ParseArraySpec(%q) accepted", bad)
		}
	}
}

func TestQOSAndPolicyConfig(t *testing.T) {
	t.Parallel()
	q, err := ParseQOS("qos", "low:0,normal:50:maxgpus=16,high:100:preempt=low|normal")
	if err != nil || len(q) != 3 || q[1].MaxGPUsPerUser != 16 || !reflect.DeepEqual(q[2].Preempt, []string{"low", "normal"}) {
		t.Fatalf("ParseQOS: %+v %v", q, err)
	}
	if FormatQOS(q) != "low:0,normal:50:maxgpus=16,high:100:preempt=low|normal" {
		t.Fatalf("FormatQOS: %q", FormatQOS(q))
	}
	for _, bad := range []string{"x", "a:b", "a:1:preempt=zz", "a:1,a:2", "a:1:color=red"} {
		if _, err := ParseQOS("qos", bad); err == nil || !strings.Contains(err.Error(), "qos") {
			t.Errorf("ParseQOS(%q): %v", bad, err)
		}
	}
	for _, name := range []string{"fifo", "easy", "loom"} {
		if p, ok := PolicyByName(name); !ok || p.Name != name {
			t.Errorf("PolicyByName(%q) = %+v", name, p)
		}
	}
	if _, ok := PolicyByName("random"); ok {
		t.Error("unknown policy accepted")
	}
}

// TestPreemptionPicksDistinctVictims: a second preemptor counts the runs
// already being preempted and picks another victim; the lowest priority goes
// first.
func TestPreemptionPicksDistinctVictims(t *testing.T) {
	t.Parallel()
	h := newSpecHarness(t, Config{})
	h.gpuNode("a3-0001", "b1")
	h.gpuNode("a3-0002", "b1")
	h.submitJob(job(1, 1, 8, qos("low"), signalOpt("USR1"), user("u1", "big")))
	h.submitJob(job(2, 1, 8, qos("low"), signalOpt("USR1"), user("u2", "small")))
	h.tick(time.Hour)
	h.finish(1, 0) // account "big" now has usage: its next job has the lower fair share
	h.submitJob(job(5, 1, 8, qos("low"), signalOpt("USR1"), user("u1", "big")))
	victims := map[string]int{}
	for _, id := range []int{3, 4} {
		c := h.submitJob(job(id, 1, 8, qos("high")))
		for _, s := range signals(c) {
			victims[s.GetJob()]++
		}
		if id == 3 && (len(signals(c)) != 1 || signals(c)[0].GetJob() != jobName(5)) {
			t.Fatalf("first preemptor signalled %v, want the lowest-priority job 5", signals(c))
		}
	}
	if len(victims) != 2 || victims[jobName(5)] != 1 || victims[jobName(2)] != 1 {
		t.Fatalf("victims %v, want jobs 5 and 2 once each", victims)
	}
	// A third high job finds nothing left to preempt and waits.
	if c := h.submitJob(job(6, 1, 8, qos("high"))); len(signals(c)) != 0 || len(stops(c)) != 0 {
		t.Fatalf("third preemptor: %v", c.Emits)
	}
}

// TestArrayMaxArraySize: the scheduler checks an array against the
// MaxArraySize it is configured with (default Slurm's 1001), with the
// gateway's grammar: a spec past it is refused as invalid, naming the field
// and the limit, and changes nothing.
func TestArrayMaxArraySize(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	submit := func(spec string) *eventsv1.SubmitJob {
		return &eventsv1.SubmitJob{Job: &loomv1.Job{Name: "projects/p/jobs/10", JobId: "10", Cluster: "projects/p/clusters/c", Array: spec}}
	}
	s := NewState(Config{})
	if got := s.Config().MaxArraySize; got != slurmspec.DefaultMaxArraySize {
		t.Fatalf("default MaxArraySize %d, want %d", got, slurmspec.DefaultMaxArraySize)
	}
	_, err := s.Handle(now, submit("0-1999"))
	var inv *errs.InvalidError
	if !errors.As(err, &inv) || !strings.Contains(err.Error(), "job.array: task id 1999 is not below MaxArraySize 1001") {
		t.Fatalf("0-1999 under the default: %v, want InvalidError naming job.array and the limit", err)
	}
	c, err := s.Handle(now, submit("0-1000"))
	if err != nil || len(c.Jobs) != 1001 || c.Arrays["projects/p/jobs/10"] == nil {
		t.Fatalf("0-1000 under the default: %d jobs, %v", len(c.Jobs), err)
	}
	big := NewState(Config{MaxArraySize: 2000})
	if c, err := big.Handle(now, submit("0-1999")); err != nil || len(c.Jobs) != 2000 {
		t.Fatalf("0-1999 under MaxArraySize 2000: %d jobs, %v", len(c.Jobs), err)
	}
}

// TestGateOnlyFlags: a gate the pass skips for jobs without its flags must
// let every such job through itself (the skip changes no decision).
func TestGateOnlyFlags(t *testing.T) {
	t.Parallel()
	for _, g := range gates {
		if g.only == 0 {
			continue
		}
		q := &queued{flags: ^g.only, reason: ReasonHeldAdmin, qos: -1}
		if reason, note := g.check(nil, q); reason != "" || note != "" {
			t.Errorf("gate %s stops a job without its flags: %q %q", g.name, reason, note)
		}
	}
}

// TestGateIdle: a gate a pass leaves out as idle (gate.idle) must let every
// job of that pass through itself (leaving it out changes no decision),
// and a gate with work to do is not idle.
func TestGateIdle(t *testing.T) {
	t.Parallel()
	s, now := benchCluster(40, 400, 0.9, 5)
	tx := writerTxn(s, now)
	p := tx.newPass(cl, tx.cluster(cl))
	idle := map[string]bool{}
	for i := range gates {
		if g := &gates[i]; g.idle != nil && g.idle(p) {
			idle[g.name] = true
		}
	}
	// benchCluster: schedulable, no association limits, no QOS cap,
	// backfill (the default policy); its partition has a MaxTime.
	for _, name := range []string{"cluster-schedulable", "partition-state", "assoc-max-jobs", "assoc-tres", "qos-gres-per-user", "fifo"} {
		if !idle[name] {
			t.Errorf("gate %s is not idle on a cluster that gives it nothing to do", name)
		}
	}
	if idle["partition-time-limit"] {
		t.Error("gate partition-time-limit is idle on a partition with a MaxTime")
	}
	if len(p.gates) != len(gates)-len(idle) {
		t.Errorf("the pass calls %d gates, want %d", len(p.gates), len(gates)-len(idle))
	}
	pend := tx.pendingEntries(cl)
	if len(pend) == 0 {
		t.Fatal("no pending job to look at")
	}
	for _, e := range pend {
		q := p.queued(e)
		for i := range gates {
			if g := &gates[i]; idle[g.name] {
				if reason, note := g.check(p, &q); reason != "" || note != "" {
					t.Fatalf("idle gate %s stops %s: %q %q", g.name, e.name, reason, note)
				}
			}
		}
	}
	// With a QOS cap and without backfill, those gates have work to do.
	cfg := s.Config()
	cfg.Policy.Backfill = false
	cfg.QOS = append([]QOS(nil), cfg.QOS...)
	cfg.QOS[0].MaxGPUsPerUser = 8
	s2 := NewState(cfg)
	s2.Restore(s.Snapshot())
	tx2 := writerTxn(s2, now)
	p2 := tx2.newPass(cl, tx2.cluster(cl))
	if idleQOSLimit(p2) || idleFIFO(p2) {
		t.Errorf("with a QOS cap and no backfill: QOS gate idle %v, FIFO gate idle %v; want both false",
			idleQOSLimit(p2), idleFIFO(p2))
	}
}

// slurmNodeChanges are the SlurmNodeChanged events c emits.
func slurmNodeChanges(c *Change) []*eventsv1.SlurmNodeChanged {
	var out []*eventsv1.SlurmNodeChanged
	for _, e := range c.Emits {
		if p, ok := e.Payload.(*eventsv1.SlurmNodeChanged); ok {
			out = append(out, p)
		}
	}
	return out
}

// TestAfterCorrAndBurstBuffer: aftercorr starts each task of an array once
// the task of the same index of the other array completed (a failed one's
// twin never starts; a task with no twin waits for nothing); afterburstbuffer
// is afterany, Loom having no burst buffers to stage out.
func TestAfterCorrAndBurstBuffer(t *testing.T) {
	t.Parallel()
	h := newSpecHarness(t, Config{})
	h.gpuNode("a3-0001", "b1")
	h.submitJob(job(10, 1, 1, func(j *loomv1.Job) { j.Array = "0-2" })) // tasks 0..2: jobs 10..12
	h.submitJob(job(20, 1, 1, func(j *loomv1.Job) { j.Array = "0-3"; j.Dependency = "aftercorr:10" }))
	for id := 20; id <= 22; id++ {
		h.wantState(id, loomv1.JobState_PENDING, ReasonDependency)
	}
	h.wantState(23, loomv1.JobState_RUNNING, "") // index 3: array 10 has none
	h.finish(10, 0)
	h.wantState(20, loomv1.JobState_RUNNING, "")
	h.wantState(21, loomv1.JobState_PENDING, ReasonDependency)
	h.finish(11, 1)
	h.wantState(21, loomv1.JobState_PENDING, ReasonDependencyNeverSatisfied)
	h.submitJob(job(30, 1, 1, func(j *loomv1.Job) { j.Dependency = "afterburstbuffer:12" }))
	h.wantState(30, loomv1.JobState_PENDING, ReasonDependency)
	h.finish(12, 2)
	h.wantState(30, loomv1.JobState_RUNNING, "")
	h.wantState(22, loomv1.JobState_PENDING, ReasonDependencyNeverSatisfied)
	// A job that is no array task: aftercorr is afterok on the whole array.
	h.submitJob(job(40, 1, 1, func(j *loomv1.Job) { j.Dependency = "aftercorr:10" }))
	h.wantState(40, loomv1.JobState_PENDING, ReasonDependencyNeverSatisfied)
	// after:ID+MIN takes each job's own delay (job 23 is task 20_3).
	h.submitJob(job(50, 1, 1, func(j *loomv1.Job) { j.Dependency = "after:20_3+5:30+20" }))
	h.wantState(50, loomv1.JobState_PENDING, ReasonDependency)
	h.tick(6 * time.Minute)
	h.wantState(50, loomv1.JobState_PENDING, ReasonDependency)
	h.tick(15 * time.Minute)
	h.wantState(50, loomv1.JobState_RUNNING, "")
	// Another type's +MIN is taken and not waited for, as Slurm 22.05's:
	// afterok:60+30 starts once 60 completed.
	h.submitJob(job(60, 1, 1))
	h.submitJob(job(61, 1, 1, func(j *loomv1.Job) { j.Dependency = "afterok:60+30" }))
	h.wantState(61, loomv1.JobState_PENDING, ReasonDependency)
	h.finish(60, 0)
	h.wantState(61, loomv1.JobState_RUNNING, "")
}

// TestCancelWithExitCode: srun and salloc end their allocation as the
// command in it ended (CancelJob.exit_code): COMPLETED for 0, else FAILED
// with the code, its processes stopped; a signal with it is refused.
func TestCancelWithExitCode(t *testing.T) {
	t.Parallel()
	h := newSpecHarness(t, Config{})
	h.gpuNode("a3-0001", "b1")
	h.submitJob(job(1, 1, 1))
	h.submitJob(job(2, 1, 1))
	h.wantState(2, loomv1.JobState_RUNNING, "")
	c := h.do(&eventsv1.CancelJob{Job: jobName(1), Cluster: cl, ExitCode: proto.Int32(3)})
	h.wantState(1, loomv1.JobState_FAILED, "") // COMPLETING while its processes stop
	if code := h.job(1).GetExitCode(); code != 3 {
		t.Errorf("job 1 after its allocation ended with 3: exit %d", code)
	}
	stopped := false
	for _, s := range stops(c) {
		stopped = stopped || s.GetJob() == jobName(1)
	}
	if !stopped {
		t.Error("job 1's processes were not stopped")
	}
	h.do(&eventsv1.CancelJob{Job: jobName(2), Cluster: cl, ExitCode: proto.Int32(0)})
	h.wantState(2, loomv1.JobState_COMPLETED, "")
	for _, ev := range []*eventsv1.CancelJob{{ExitCode: proto.Int32(256)}, {ExitCode: proto.Int32(1), Signal: "USR1"}} {
		ev.Job, ev.Cluster = jobName(2), cl
		if _, err := h.s.Handle(h.now, ev); err == nil {
			t.Errorf("cancel %v accepted", ev)
		}
	}
}

// TestDependencyStateWithinAPass: a pass judges a reference to a job once
// while nothing changes, and afresh once a job starts in it. Y (first in
// the queue) and Z (last) both wait on X's start: Y is judged before X
// starts and waits; Z after, and starts in the same pass as X.
func TestDependencyStateWithinAPass(t *testing.T) {
	t.Parallel()
	h := newSpecHarness(t, Config{})
	after := func(j *loomv1.Job) { j.Dependency = "after:1" }
	h.submitJob(job(1, 1, 1))
	h.submitJob(job(2, 1, 1, after, func(j *loomv1.Job) { j.Nice = -1000 }))
	h.submitJob(job(3, 1, 1, after, func(j *loomv1.Job) { j.Nice = 1000 }))
	h.gpuNode("a3-0001", "b1")
	h.wantState(1, loomv1.JobState_RUNNING, "")
	h.wantState(3, loomv1.JobState_RUNNING, "")
}

// BenchmarkDependencyOnAnArray: a pass over a 1001-task array each of whose
// tasks waits on every task of another (held) 1001-task array: a million
// task look-ups a pass, were each task's dependency judged on its own.
func BenchmarkDependencyOnAnArray(b *testing.B) {
	s, now := benchState(b,
		&eventsv1.SubmitJob{Job: job(1, 1, 1, func(j *loomv1.Job) { j.Array = "0-1000"; j.Hold = true })},
		&eventsv1.SubmitJob{Job: job(2000, 1, 1, func(j *loomv1.Job) { j.Array = "0-1000"; j.Dependency = "afterok:1" })})
	if r := s.Job(jobName(2000)).GetStateReason(); r != ReasonDependency {
		b.Fatalf("the dependent array's first task: reason %q", r)
	}
	for b.Loop() {
		s.Schedule(now.Add(time.Minute))
	}
}

// BenchmarkHostListsOfAnArray: a pass over a 1001-task array whose tasks
// each list 4,096 hosts to avoid (the most the gateway takes), waiting for
// a busy node.
func BenchmarkHostListsOfAnArray(b *testing.B) {
	lists := func(j *loomv1.Job) {
		j.Array, j.Nodelist = "0-1000", []string{"n1"}
		for i := range 4096 {
			j.Exclude = append(j.Exclude, fmt.Sprintf("x%04d", i))
		}
	}
	s, now := benchState(b, &eventsv1.SubmitJob{Job: job(1, 1, 8)}, &eventsv1.SubmitJob{Job: job(2000, 1, 1, lists)})
	if r := s.Job(jobName(2000)).GetStateReason(); r != ReasonResources {
		b.Fatalf("the array's first task: reason %q", r)
	}
	for b.Loop() {
		s.Schedule(now.Add(time.Minute))
	}
}

// TestRepeatedHostsCountOnce: -w n1,n1 is -w n1, as in Slurm (ReqNodeList=node1
// on Slurm 22.05), at submission and in scontrol update.
func TestRepeatedHostsCountOnce(t *testing.T) {
	t.Parallel()
	h := newSpecHarness(t, Config{})
	h.gpuNode("a3-0001", "b1")
	h.gpuNode("a3-0002", "b1")
	h.submitJob(job(1, 1, 1, func(j *loomv1.Job) {
		j.Nodelist = []string{"a3-0002", "a3-0002", "a3-0002"}
		j.Exclude = []string{"a3-0001", "a3-0001"}
		j.Hold = true
	}))
	if got := h.job(1); !slices.Equal(got.GetNodelist(), []string{"a3-0002"}) || !slices.Equal(got.GetExclude(), []string{"a3-0001"}) {
		t.Fatalf("nodelist %v, exclude %v", got.GetNodelist(), got.GetExclude())
	}
	h.do(&eventsv1.UpdateJob{Job: jobName(1), Cluster: cl, Action: ActionUpdate, Exclude: &loomv1.HostList{Hosts: []string{"a3-0003", "a3-0001", "a3-0003"}}})
	if got := h.job(1).GetExclude(); !slices.Equal(got, []string{"a3-0003", "a3-0001"}) {
		t.Fatalf("updated exclude %v", got)
	}
	h.do(&eventsv1.UpdateJob{Job: jobName(1), Cluster: cl, Action: ActionRelease})
	h.wantState(1, loomv1.JobState_RUNNING, "")
	if n := h.job(1).GetNodes(); !slices.Equal(n, []string{"a3-0002"}) {
		t.Fatalf("ran on %v", n)
	}
	if got := uniqueHosts([]string{"a", "b"}); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("uniqueHosts of distinct hosts: %v", got)
	}
}

// TestSubmitClearsOutputs: what a submission carries in the scheduler's own
// fields (a reservation's start and nodes, steps, runs) is not taken.
func TestSubmitClearsOutputs(t *testing.T) {
	t.Parallel()
	h := newSpecHarness(t, Config{})
	h.submitJob(job(1, 1, 1, func(j *loomv1.Job) {
		j.Hold = true
		j.ExpectedStartTime, j.SchedNodes = timestamppb.New(h.now), []string{"a3-0009"}
		j.Steps, j.StepsOmitted, j.RestartCount = []*loomv1.JobStep{{Name: "fake"}}, 3, 9
	}))
	if j := h.job(1); j.GetExpectedStartTime() != nil || j.GetSchedNodes() != nil || j.GetSteps() != nil ||
		j.GetStepsOmitted() != 0 || j.GetRestartCount() != 0 {
		t.Fatalf("submitted outputs kept: %v", j)
	}
}

// benchState is a state of one running cluster with one 8-GPU node, n1,
// that took evs in turn, and the time of the last.
func benchState(b *testing.B, evs ...proto.Message) (*State, time.Time) {
	b.Helper()
	s := NewState(Config{})
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, ev := range append([]proto.Message{
		&eventsv1.ClusterChanged{Cluster: &loomv1.Cluster{Name: cl, Status: &loomv1.ClusterStatus{State: loomv1.Cluster_RUNNING, SharedDir: "/shared/c1"}}},
		&eventsv1.NodeChanged{Node: &loomv1.Node{Name: nodeName("n1"), Cluster: cl, Hostname: "n1", Gpus: 8, State: loomv1.Node_READY}},
	}, evs...) {
		now = now.Add(time.Second)
		c, err := s.Handle(now, ev)
		if err != nil {
			b.Fatal(err)
		}
		s.Commit(c)
	}
	return s, now
}
