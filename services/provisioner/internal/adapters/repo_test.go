package adapters

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/store"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/provisioner/internal/domain"
)

func TestClusterRecordRoundTrip(t *testing.T) {
	t.Parallel()
	in := &domain.Cluster{
		Cluster:   &loomv1.Cluster{Name: "projects/p/clusters/c", Status: &loomv1.ClusterStatus{State: loomv1.Cluster_UPDATING}},
		Operation: "op2", CreateOperation: "op1",
		Deadline:  time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC),
		NextIndex: map[string]int32{"gpu": 7, "c-login": 1},
		Retired:   []*loomv1.NodePool{{Id: "old", MachineType: "n2-standard-8", NodeCount: 2}},
	}
	b, err := EncodeCluster(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := DecodeCluster(b)
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(in.Cluster, out.Cluster) || out.Operation != "op2" || out.CreateOperation != "op1" || !out.Deadline.Equal(in.Deadline) ||
		out.NextIndex["gpu"] != 7 || len(out.Retired) != 1 || !proto.Equal(out.Retired[0], in.Retired[0]) {
		t.Fatalf("round trip = %+v", out)
	}
	// A record without the issue-3 fields (written by an older provisioner) still loads.
	old, err := DecodeCluster([]byte(`{"cluster":{"name":"projects/p/clusters/c"},"operation":"x"}`))
	if err != nil || old.NextIndex == nil || !old.Deadline.IsZero() || old.Operation != "x" {
		t.Fatalf("old record = %+v, %v", old, err)
	}
}

func TestLoadWhatTxWrote(t *testing.T) {
	t.Parallel()
	_, rdb := testkit.Redis(t)
	st := store.New(rdb, "provisioner:")
	ctx := context.Background()
	ch := domain.Change{
		PutClusters:     []*domain.Cluster{{Cluster: &loomv1.Cluster{Name: "projects/p/clusters/c"}, NextIndex: map[string]int32{}}},
		PutNodes:        []*loomv1.Node{{Name: "projects/p/clusters/c/nodes/gpu-0001", Cluster: "projects/p/clusters/c"}},
		PutReservations: []*loomv1.Reservation{{Name: "projects/p/reservations/r", Count: 2}},
		PutSlurm:        map[string]*loomv1.SlurmConfig{"projects/p/clusters/c": {SlurmConf: "x"}},
		Events: []proto.Message{
			&eventsv1.ReservationChanged{Operation: "o", Reservation: &loomv1.Reservation{Name: "projects/p/reservations/r"}},
			&eventsv1.ReservationDeleted{Operation: "o", Reservation: "projects/p/reservations/q"},
		},
	}
	tx, err := Tx(ch)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Apply(ctx, "", tx); err != nil {
		t.Fatal(err)
	}
	s, err := Load(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Clusters) != 1 || len(s.ClusterNodes("projects/p/clusters/c")) != 1 || s.Reservations["projects/p/reservations/r"].GetCount() != 2 ||
		s.Slurm["projects/p/clusters/c"].GetSlurmConf() != "x" {
		t.Fatalf("loaded %+v", s)
	}
	for _, p := range ch.Events {
		ev, err := Event(p)
		if err != nil || ev.Topic != topics.ClusterEvents || ev.Key == "" {
			t.Fatalf("Event(%T) = %+v, %v", p, ev, err)
		}
	}
	// Deletions remove what was put.
	tx, _ = Tx(domain.Change{DelReservations: []string{"projects/p/reservations/r"}, DelSlurm: []string{"projects/p/clusters/c"}})
	if _, err := st.Apply(ctx, "", tx); err != nil {
		t.Fatal(err)
	}
	if s, err := Load(ctx, st); err != nil || len(s.Reservations) != 0 || len(s.Slurm) != 0 {
		t.Fatalf("after deletes: %+v, %v", s, err)
	}
}

func TestRepairsAreStoredAndLoaded(t *testing.T) {
	t.Parallel()
	_, rdb := testkit.Redis(t)
	st := store.New(rdb, "provisioner:")
	ctx := context.Background()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	r := &domain.Repair{ID: "rem-1", Node: "projects/p/clusters/c/nodes/gpu-0001", Cluster: "projects/p/clusters/c",
		Action: loomv1.RemediationAction_ACTION_REPLACE, Reason: "Xid 79", BootID: "b1", Phase: domain.RepairSwapped,
		Target: "projects/p/clusters/c/nodes/gpu-0003", Replacement: "projects/p/clusters/c/nodes/gpu-0003",
		Started: at, Deadline: at.Add(time.Hour), PID: 42}
	fin := &eventsv1.RemediationFinished{Node: r.Node, RemediationId: "rem-0", Ok: true}
	tx, err := Tx(domain.Change{PutRepairs: []*domain.Repair{r}, Events: []proto.Message{fin}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Apply(ctx, "", tx); err != nil {
		t.Fatal(err)
	}
	s, err := Load(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	got := s.Repairs[r.Node]
	if got == nil || *got != *r || s.RepairOf(r.Target) != got {
		t.Fatalf("loaded repair %+v, want %+v", got, r)
	}
	if ev, err := Event(fin); err != nil || ev.Topic != topics.NodeEvents || ev.Key != r.Node {
		t.Fatalf("Event(RemediationFinished) = %+v, %v", ev, err)
	}
	tx, _ = Tx(domain.Change{DelRepairs: []string{r.Node}})
	if _, err := st.Apply(ctx, "", tx); err != nil {
		t.Fatal(err)
	}
	if s, err := Load(ctx, st); err != nil || len(s.Repairs) != 0 || s.RepairOf(r.Target) != nil {
		t.Fatalf("after delete: %+v, %v", s.Repairs, err)
	}
	if _, err := DecodeRepair([]byte(`{"node":"n","action":"ACTION_DANCE"}`)); err == nil {
		t.Fatal("an unknown action decoded")
	}
}
