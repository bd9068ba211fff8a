package app

import (
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/store"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/scheduler/internal/domain"
)

// partLayout is cluster cl with a CPU pool (n2-standard-8) and a node set
// per partition, the partition named p<pool>.
func partLayout(pools ...string) *eventsv1.ClusterChanged {
	s := &loomv1.SlurmOrchestrator{}
	var ps []*loomv1.NodePool
	for i, p := range pools {
		ps = append(ps, &loomv1.NodePool{Id: p, MachineType: "n2-standard-8"})
		s.NodeSets = append(s.NodeSets, &loomv1.SlurmNodeSet{Id: p, NodePoolId: p})
		s.Partitions = append(s.Partitions, &loomv1.SlurmPartition{Id: "p" + p, NodeSetIds: []string{p}, Default: i == 0})
	}
	return &eventsv1.ClusterChanged{Cluster: &loomv1.Cluster{Name: cl, Compute: &loomv1.ComputeResources{NodePools: ps},
		Orchestrator: &loomv1.Orchestrator{Slurm: s},
		Status:       &loomv1.ClusterStatus{State: loomv1.Cluster_RUNNING, SharedDir: "/shared"}}}
}

// TestRemovedPartitionFailsItsJobsStored: an update that removes partition
// pb ends its pending job NODE_FAIL and its running one NODE_FAIL (stopped,
// not requeued) in the one Apply of the ClusterChanged, so an instance
// loading Redis finds them so; pa's job runs on. A job left pending in pb
// by an earlier release (the cluster stored without pb) is failed by the
// start-up pass, stored, and emitted once.
func TestRemovedPartitionFailsItsJobsStored(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 30*time.Second)
	_, rdb := testkit.Redis(t)
	st := store.New(rdb, "scheduler:")
	var mu sync.Mutex
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func() { mu.Lock(); now = now.Add(time.Second); mu.Unlock() }
	log := slog.New(slog.DiscardHandler)
	start := func() *App {
		t.Helper()
		a := New(st, domain.Config{}, clock, log)
		if err := a.Start(ctx); err != nil {
			t.Fatal(err)
		}
		return a
	}
	a := start()
	handle := func(p proto.Message) {
		t.Helper()
		advance()
		if err := a.Handle(ctx, envelope.New(topics.ClusterEvents, cl, "test", p)); err != nil {
			t.Fatalf("handle %T: %v", p, err)
		}
	}
	name := func(id int) string { return "projects/p/jobs/" + strconv.Itoa(id) }
	submit := func(id int, part string, cpus int32, hold bool) {
		handle(&eventsv1.SubmitJob{Job: &loomv1.Job{Name: name(id), JobId: strconv.Itoa(id), Cluster: cl,
			Partition: part, CpusPerTask: cpus, Hold: hold, Command: []string{"/bin/true"}}})
	}
	state := func(a *App, id int) *loomv1.Job {
		t.Helper()
		j, err := a.GetJob(name(id))
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	wantGone := func(a *App, id int, state loomv1.JobState) {
		t.Helper()
		j, err := a.GetJob(name(id))
		if err != nil || j.GetState() != state || j.GetExitCode() != 1 || j.GetRestartCount() != 0 ||
			!strings.HasPrefix(j.GetStateReason(), domain.ReasonNodeDown) || !strings.Contains(j.GetStateReason(), "partition pb") {
			t.Fatalf("job %d: %v exit %d restarts %d %q (%v), want %v exit 1 NodeDown naming partition pb",
				id, j.GetState(), j.GetExitCode(), j.GetRestartCount(), j.GetStateReason(), err, state)
		}
	}
	handle(partLayout("a", "b"))
	for _, n := range []struct{ host, pool string }{{"a1", "a"}, {"b1", "b"}} {
		handle(&eventsv1.NodeChanged{Node: &loomv1.Node{Name: cl + "/nodes/" + n.host, Cluster: cl, Hostname: n.host,
			State: loomv1.Node_READY, NodePool: n.pool, MachineType: "n2-standard-8", Role: "compute"}})
	}
	submit(1, "pb", 8, false)
	submit(2, "pb", 4, false)
	submit(3, "pa", 8, false)
	if s1, s2, s3 := state(a, 1).GetState(), state(a, 2).GetState(), state(a, 3).GetState(); s1 != loomv1.JobState_RUNNING ||
		s2 != loomv1.JobState_PENDING || s3 != loomv1.JobState_RUNNING {
		t.Fatalf("before the update: %v %v %v, want RUNNING PENDING RUNNING", s1, s2, s3)
	}

	handle(partLayout("a"))
	for _, in := range []*App{a, start()} { // memory, and what Redis holds
		wantGone(in, 2, loomv1.JobState_NODE_FAIL)
		wantGone(in, 1, loomv1.JobState_COMPLETING) // NODE_FAIL once its step ends
		if s := state(in, 3).GetState(); s != loomv1.JobState_RUNNING {
			t.Fatalf("pa's job: %v", s)
		}
	}
	handle(&eventsv1.StepChanged{Job: name(1), Attempt: 1, Node: cl + "/nodes/b1", State: eventsv1.StepState_STEP_KILLED, ExitCode: 143})
	wantGone(a, 1, loomv1.JobState_NODE_FAIL)
}
