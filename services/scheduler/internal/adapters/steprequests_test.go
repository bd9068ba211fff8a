package adapters

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/store"
	"github.com/loom-ml/loom/libs/testkit"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/scheduler/internal/domain"
)

// TestStepRequestsStoredBesideTheRun: the request of a job step that waits
// for resources is stored in its own hash, loaded back by a restarted
// scheduler and followed by a follower through the change log, and
// deleted when the step starts.
func TestStepRequestsStoredBesideTheRun(t *testing.T) {
	t.Parallel()
	_, rdb := testkit.Redis(t)
	st := store.New(rdb, "scheduler:")
	ctx := testkit.Context(t, 30*time.Second)
	repo := NewRepo(st)
	const cl = "projects/default/clusters/c1"
	const job = "projects/default/jobs/1"
	s := domain.NewState(domain.Config{})
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	step := func(rid string) *eventsv1.CreateJobStep {
		return &eventsv1.CreateJobStep{Job: job, Cluster: cl, RequestId: rid, Command: []string{"train"}, Env: map[string]string{"K": rid}}
	}
	for _, ev := range []proto.Message{
		&eventsv1.ClusterChanged{Cluster: &loomv1.Cluster{Name: cl, Status: &loomv1.ClusterStatus{State: loomv1.Cluster_RUNNING, SharedDir: "/s"}}},
		&eventsv1.NodeChanged{Node: &loomv1.Node{Name: cl + "/nodes/gpu-0001", Cluster: cl, Hostname: "gpu-0001", State: loomv1.Node_READY}},
		&eventsv1.SubmitJob{Job: &loomv1.Job{Name: job, JobId: "1", Cluster: cl, Script: "srun train", Ntasks: 1}},
		&eventsv1.StepChanged{Job: job, Attempt: 1, Node: cl + "/nodes/gpu-0001", Cluster: cl, State: eventsv1.StepState_STEP_RUNNING},
		step("first"),
	} {
		now = now.Add(time.Second)
		persist(t, ctx, st, s, now, ev)
	}
	// A follower loads now, and follows the log from here.
	recs, err := repo.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// As a leader writes: fenced, versioned, logged; the term's first
	// write gives the log a position.
	seq := uint64(0)
	apply := func(tx *store.Tx) {
		t.Helper()
		seq++
		Fence(tx, "t", seq)
		LogChanges(tx, Version("t", seq))
		if _, err := st.Apply(ctx, "", tx); err != nil {
			t.Fatal(err)
		}
	}
	apply(&store.Tx{})
	pos, _, _, err := repo.LogTail(ctx)
	if err != nil {
		t.Fatal(err)
	}
	logged := func(ev proto.Message) {
		t.Helper()
		now = now.Add(time.Second)
		c, err := s.Handle(now, ev)
		if err != nil {
			t.Fatal(err)
		}
		var tx store.Tx
		if err := Write(&tx, c); err != nil {
			t.Fatal(err)
		}
		apply(&tx)
		s.Commit(c)
	}
	logged(step("second")) // waits: the first holds the job's CPU
	if st := s.JobStep(job, 1); st.GetState() != loomv1.JobState_PENDING {
		t.Fatalf("second step %v, want PENDING", st)
	}
	if recs2, err := repo.Load(ctx); err != nil || len(recs2.StepRequests) != 1 || recs2.StepRequests[job+"#1.1"] == nil {
		t.Fatalf("stored requests %v (%v), want step 1's", recs2.StepRequests, err)
	}
	es, _, err := repo.ReadChanges(ctx, pos)
	if err != nil {
		t.Fatal(err)
	}
	u, err := DecodeUpdate(es, func(string) *loomv1.Job { return nil })
	if err != nil {
		t.Fatal(err)
	}
	f := domain.NewState(domain.Config{})
	f.Load(recs.Clusters, recs.Nodes, recs.Jobs, recs.Runs, recs.Arrays, recs.Usage)
	f.LoadStepRequests(recs.StepRequests)
	f.Follow(u)
	// The follower, and a scheduler restarted from the store, start the
	// waiting step with its request once the first step ends.
	restarted, err := repo.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r := domain.NewState(domain.Config{})
	r.Load(restarted.Clusters, restarted.Nodes, restarted.Jobs, restarted.Runs, restarted.Arrays, restarted.Usage)
	r.LoadStepRequests(restarted.StepRequests)
	end := &eventsv1.TasksChanged{Job: job, Attempt: 1, StepId: 0, Node: cl + "/nodes/gpu-0001", Cluster: cl,
		State: eventsv1.StepState_STEP_EXITED, ExitCodes: []int32{0}}
	for name, state := range map[string]*domain.State{"follower": f, "restarted": r} {
		c, err := state.Handle(now.Add(time.Second), end)
		if err != nil {
			t.Fatal(err)
		}
		var launch *eventsv1.LaunchTasks
		for _, e := range c.Emits {
			if l, ok := e.Payload.(*eventsv1.LaunchTasks); ok {
				launch = l
			}
		}
		if launch == nil || launch.GetStepId() != 1 || launch.GetEnv()["K"] != "second" {
			t.Fatalf("%s: the waiting step's launch %v", name, launch)
		}
		if b, ok := c.StepRequests[job+"#1.1"]; !ok || b != nil {
			t.Fatalf("%s: the started step's request is not deleted: %v", name, c.StepRequests)
		}
	}
}
