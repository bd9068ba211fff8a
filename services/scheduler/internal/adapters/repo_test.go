package adapters

import (
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
	} {
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
	if len(recs.Clusters) != 1 || len(recs.Nodes) != 2 || len(recs.Jobs) != 2 || len(recs.Runs) != 1 {
		t.Fatalf("loaded %d clusters, %d nodes, %d jobs, %d runs", len(recs.Clusters), len(recs.Nodes), len(recs.Jobs), len(recs.Runs))
	}
	loaded := domain.NewState(domain.Config{})
	loaded.Load(recs.Clusters, recs.Nodes, recs.Jobs, recs.Runs)
	for _, name := range []string{"projects/default/jobs/1", "projects/default/jobs/2"} {
		if !proto.Equal(loaded.Job(name), s.Job(name)) {
			t.Fatalf("job %s: loaded %v, want %v", name, loaded.Job(name), s.Job(name))
		}
		a, b := *loaded.JobRecord(name), *s.JobRecord(name)
		a.Job, b.Job = nil, nil
		if a != b {
			t.Fatalf("job record %s: loaded %+v, want %+v", name, a, b)
		}
	}
	if !reflect.DeepEqual(loaded.Run("projects/default/jobs/1", 1), s.Run("projects/default/jobs/1", 1)) {
		t.Fatalf("run: loaded %+v, want %+v", loaded.Run("projects/default/jobs/1", 1), s.Run("projects/default/jobs/1", 1))
	}
	if !reflect.DeepEqual(loaded.ActiveRuns(), s.ActiveRuns()) {
		t.Fatal("active runs differ after load")
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
