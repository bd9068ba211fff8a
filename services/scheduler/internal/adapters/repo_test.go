package adapters

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/store"
	"github.com/loom-ml/loom/libs/testkit"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/scheduler/internal/domain"
)

// TestWriteThenLoad stores the records a real scheduling change produces and
// checks that a state loaded from Redis equals the committed one.
func TestWriteThenLoad(t *testing.T) {
	t.Parallel()
	_, rdb := testkit.Redis(t)
	st := store.New(rdb, "scheduler:")
	ctx := testkit.Context(t, 30*time.Second)
	const cl = "projects/default/clusters/c1"

	s := domain.NewState(domain.Config{})
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, ev := range []proto.Message{
		&eventsv1.ClusterChanged{Cluster: &loomv1.Cluster{Name: cl, Status: &loomv1.ClusterStatus{State: loomv1.Cluster_RUNNING, SharedDir: "/s"}}},
		&eventsv1.NodeChanged{Node: &loomv1.Node{Name: cl + "/nodes/gpu-0001", Cluster: cl, Hostname: "gpu-0001", Gpus: 2, State: loomv1.Node_READY}},
		&eventsv1.SubmitJob{Job: &loomv1.Job{Name: "projects/default/jobs/1", JobId: "1", Cluster: cl, GpusPerNode: 1,
			ModelOutput: &loomv1.ModelOutput{ModelId: "m"}, Env: map[string]string{"A": "b"}}},
		&eventsv1.SubmitJob{Job: &loomv1.Job{Name: "projects/default/jobs/2", JobId: "2", Cluster: cl, GpusPerNode: 2}},
		&eventsv1.NodeRemoved{Node: cl + "/nodes/gone", Cluster: cl},
		// Draining and idle: NodeDrained is emitted and recorded.
		&eventsv1.NodeChanged{Node: &loomv1.Node{Name: cl + "/nodes/gpu-0002", Cluster: cl, Hostname: "gpu-0002", Gpus: 2,
			State: loomv1.Node_DRAINING, DrainDeadline: timestamppb.New(now.Add(time.Minute))}},
		// An array, a finished run (fair-share usage) and a node failure
		// (job 2 requeued with gpu-0001 excluded).
		&eventsv1.SubmitJob{Job: &loomv1.Job{Name: "projects/default/jobs/10", JobId: "10", Cluster: cl, Array: "0-1%1",
			GpusPerNode: 1, User: "ada", Account: "lab"}},
		&eventsv1.StepChanged{Job: "projects/default/jobs/1", Attempt: 1, Node: cl + "/nodes/gpu-0001", State: eventsv1.StepState_STEP_EXITED},
		&eventsv1.NodeHealthChanged{Node: cl + "/nodes/gpu-0001", Cluster: cl, Health: eventsv1.NodeHealth_UNHEALTHY, Reason: "x"},
	} {
		now = now.Add(time.Minute)
		c, err := s.Handle(now, ev)
		if err != nil {
			t.Fatal(err)
		}
		var tx store.Tx
		if err := Write(&tx, c); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Apply(ctx, "", &tx); err != nil {
			t.Fatal(err)
		}
		s.Commit(c)
	}

	recs, err := NewRepo(st).Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs.Clusters) != 1 || len(recs.Nodes) != 2 || len(recs.Jobs) != 4 || len(recs.Runs) != 2 ||
		len(recs.Arrays) != 1 || len(recs.Usage) != 3 {
		t.Fatalf("loaded %d clusters, %d nodes, %d jobs, %d runs, %d arrays, %d usage records", len(recs.Clusters), len(recs.Nodes),
			len(recs.Jobs), len(recs.Runs), len(recs.Arrays), len(recs.Usage))
	}
	loaded := domain.NewState(domain.Config{})
	loaded.Load(recs.Clusters, recs.Nodes, recs.Jobs, recs.Runs, recs.Arrays, recs.Usage)
	excluded := 0
	for _, j := range recs.Jobs {
		if reflect.DeepEqual(j.Excluded, []string{"gpu-0001"}) {
			excluded++
		}
	}
	if excluded != 1 {
		t.Fatalf("%d jobs exclude gpu-0001 after it failed under one, want 1", excluded)
	}
	if a := loaded.ArrayRecord("projects/default/jobs/10"); a == nil || !reflect.DeepEqual(a, s.ArrayRecord("projects/default/jobs/10")) {
		t.Fatalf("array: loaded %+v", a)
	}
	for _, name := range []string{"projects/default/jobs/1", "projects/default/jobs/2", "projects/default/jobs/10", "projects/default/jobs/11"} {
		if !proto.Equal(loaded.Job(name), s.Job(name)) {
			t.Fatalf("job %s: loaded %v, want %v", name, loaded.Job(name), s.Job(name))
		}
		a, b := loaded.JobRecord(name), s.JobRecord(name)
		if a.Attempt != b.Attempt || a.ModelDir != b.ModelDir || !reflect.DeepEqual(a.Excluded, b.Excluded) {
			t.Fatalf("job record %s: loaded %+v, want %+v", name, a, b)
		}
	}
	for _, r := range recs.Runs {
		a, b := *loaded.Run(r.Job, r.Attempt), *s.Run(r.Job, r.Attempt)
		ja, _ := json.Marshal(a)
		jb, _ := json.Marshal(b)
		if string(ja) != string(jb) {
			t.Fatalf("run %s: loaded %s, want %s", r.Key(), ja, jb)
		}
	}
	if len(loaded.ActiveRuns()) != len(s.ActiveRuns()) {
		t.Fatal("active runs differ after load")
	}
	// The same priorities (fair share from the stored usage) as the original.
	for _, name := range []string{"projects/default/jobs/10", "projects/default/jobs/11"} {
		a, b := loaded.JobView(name, now), s.JobView(name, now)
		b.Placement = "" // memory only: the loaded state's next pass explains it again
		if !proto.Equal(a, b) {
			t.Fatalf("view of %s: loaded %v, want %v", name, a, b)
		}
	}
	drained := cl + "/nodes/gpu-0002"
	if got, want := loaded.Node(drained), s.Node(drained); !want.Drained || !reflect.DeepEqual(got, want) {
		t.Fatalf("draining node: loaded %+v, want %+v (drained)", got, want)
	}
	// The loaded state schedules exactly as the original: nothing to do, and
	// NodeDrained, recorded as emitted, is not emitted again.
	if c := loaded.Schedule(now); !c.Empty() {
		t.Fatalf("pass on loaded state changed %v", c.Emits)
	}
	if c := loaded.Tick(now.Add(2 * time.Minute)); !c.Empty() {
		t.Fatalf("tick on loaded state changed %v", c.Emits)
	}
}
