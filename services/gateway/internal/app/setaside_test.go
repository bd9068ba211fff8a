package app

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/store"
	"github.com/loom-ml/loom/libs/store/storetest"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/gateway/internal/adapters"
	"github.com/loom-ml/loom/services/gateway/internal/domain"
)

// Fault injection: the Apply that finishes an operation ran in Redis but its
// answer was lost. The gateway keeps nothing in memory but its waiters; the
// driver's reload wakes them, so a WaitOperation (which would otherwise only
// poll, here once an hour) returns the operation as Redis has it, done, at
// once; and the redelivered event changes nothing.
func TestApplyWithLostAnswerLeavesMemoryAsRedis(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 30*time.Second)
	_, rdb := testkit.Redis(t)
	lost := storetest.LoseApplyReplies(rdb, "gateway:")
	repo := adapters.NewRepo(store.New(rdb, "gateway:"))
	owners, err := adapters.DialOwners("127.0.0.1:1", "127.0.0.1:1", "127.0.0.1:1") // never called here
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = owners.Close() })
	g := New(repo, owners, Options{Poll: time.Hour})

	const opName = "projects/p/operations/op1"
	op := domain.NewOperation(opName, domain.VerbCreate, "projects/p/clusters/c1", time.Now())
	tx := &store.Tx{}
	if err := adapters.PutOperation(tx, op); err != nil {
		t.Fatal(err)
	}
	if _, err := repo.Apply(ctx, "", tx); err != nil {
		t.Fatal(err)
	}
	waited := make(chan *loomv1.Operation, 1)
	go func() {
		got, err := g.WaitOperation(ctx, &loomv1.WaitOperationRequest{Name: opName, TimeoutSeconds: 20})
		if err != nil {
			t.Error(err)
		}
		waited <- got
	}()
	testkit.WaitFor(t, 10*time.Second, "the waiter listens", func() (bool, error) {
		g.ops.mu.Lock()
		defer g.ops.mu.Unlock()
		return len(g.ops.waiters[opName]) == 1, nil
	})

	done := envelope.New(topics.ClusterEvents, "projects/p/clusters/c1", "loom/provisioner",
		&eventsv1.ClusterChanged{Operation: opName, OperationDone: true, Cluster: &loomv1.Cluster{Name: "projects/p/clusters/c1"}})
	lost.Arm(1)
	if err := g.HandleClusterEvent(ctx, done); !store.OutcomeUnknown(err) {
		t.Fatalf("HandleClusterEvent with a lost answer = %v, want the outcome unknown", err)
	}
	inRedis, err := repo.Operation(ctx, opName)
	if err != nil || !inRedis.GetDone() {
		t.Fatalf("Redis has %v (%v); the script should have run", inRedis, err)
	}
	select {
	case got := <-waited:
		if !proto.Equal(got, inRedis) {
			t.Fatalf("the waiter got %v, Redis has %v", got, inRedis)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter was not woken after the write whose outcome was unknown")
	}
	if err := g.HandleClusterEvent(ctx, done); err != nil { // the redelivery
		t.Fatal(err)
	}
	if again, _ := repo.Operation(ctx, opName); !proto.Equal(again, inRedis) {
		t.Fatalf("the redelivery changed the operation: %v", again)
	}
}

// The set-aside hook fails what a refused command belonged to, once: an
// operation ends with InvalidArgument naming the limit, a job ends FAILED in
// the history, and being told again changes nothing.
func TestHandleSetAsideFailsTheOperationOrJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, rdb := testkit.Redis(t)
	repo := adapters.NewRepo(store.New(rdb, "gateway:"))
	owners, err := adapters.DialOwners("127.0.0.1:1", "127.0.0.1:1", "127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = owners.Close() })
	g := New(repo, owners, Options{})

	const opName = "projects/p/operations/op1"
	op := domain.NewOperation(opName, domain.VerbCreate, "projects/p/clusters/c1", time.Now())
	job := &loomv1.Job{Name: "projects/p/jobs/7", JobId: "7", Cluster: "projects/p/clusters/c1", State: loomv1.JobState_PENDING}
	tx := &store.Tx{}
	if err := adapters.PutOperation(tx, op); err != nil {
		t.Fatal(err)
	}
	if err := adapters.PutJob(tx, job); err != nil {
		t.Fatal(err)
	}
	if _, err := repo.Apply(ctx, "", tx); err != nil {
		t.Fatal(err)
	}
	refused := func(ev envelope.Event) store.SetAside {
		m, err := envelope.Encode(ev)
		if err != nil {
			t.Fatal(err)
		}
		return store.SetAside{OutboxID: "1-1", Kind: store.SetAsideRefused, Message: m, EventID: ev.ID, Type: ev.Type,
			Reason: "the broker refused the 2000000-byte record for good: Message Size Too Large"}
	}
	create := refused(envelope.New(topics.ClusterCommands, "projects/p/clusters/c1", Source,
		&eventsv1.CreateCluster{Operation: opName, Cluster: &loomv1.Cluster{Name: "projects/p/clusters/c1"}}))
	submit := refused(envelope.New(topics.JobCommands, job.GetCluster(), Source, &eventsv1.SubmitJob{Job: job}))
	for range 2 { // told twice, as after a crash
		for _, e := range []store.SetAside{create, submit} {
			if err := g.HandleSetAside(ctx, e); err != nil {
				t.Fatal(err)
			}
		}
	}
	got, err := repo.Operation(ctx, opName)
	if err != nil || !got.GetDone() || got.GetError().GetCode() != 3 ||
		!containsAll(got.GetError().GetMessage(), "2000000-byte", "max.message.bytes") {
		t.Fatalf("operation %v (%v); want done with InvalidArgument naming the size and the limit", got, err)
	}
	h, err := repo.HistoryJob(ctx, job.GetName())
	if err != nil || h.GetState() != loomv1.JobState_FAILED || !containsAll(h.GetStateReason(), "SubmitJob", "max.message.bytes") ||
		h.GetEndTime() == nil {
		t.Fatalf("job history %v (%v); want FAILED with the reason", h, err)
	}

	// A model's operations fail likewise, instead of never finishing: an
	// upload names its operation by its request id, an export by its
	// operation.
	for _, tc := range []struct {
		op  string
		cmd proto.Message
	}{
		{"projects/p/operations/up1", &eventsv1.UploadModel{RequestId: "projects/p/operations/up1", Project: "p"}},
		{"projects/p/operations/ex1", &eventsv1.ExportModel{Operation: "projects/p/operations/ex1", Name: "projects/p/models/m"}},
	} {
		tx := &store.Tx{}
		if err := adapters.PutOperation(tx, domain.NewOperation(tc.op, domain.VerbUpload, "projects/p/locations/global", time.Now())); err != nil {
			t.Fatal(err)
		}
		if _, err := repo.Apply(ctx, "", tx); err != nil {
			t.Fatal(err)
		}
		if err := g.HandleSetAside(ctx, refused(envelope.New(topics.ModelCommands, "projects/p", Source, tc.cmd))); err != nil {
			t.Fatal(err)
		}
		got, err := repo.Operation(ctx, tc.op)
		if err != nil || !got.GetDone() || got.GetError().GetCode() != 3 || !containsAll(got.GetError().GetMessage(), "max.message.bytes") {
			t.Fatalf("%T's operation %v (%v); want done with InvalidArgument", tc.cmd, got, err)
		}
	}
}

// containsAll reports whether s contains every one of parts.
func containsAll(s string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}
