package app

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/store"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/gateway/internal/adapters"
	"github.com/loom-ml/loom/services/gateway/internal/domain"
)

// raceGateway is a gateway over a real Redis holding one running cluster
// create, opName.
func raceGateway(t *testing.T, ctx context.Context, opName string) (*Gateway, *adapters.Repo, *store.Store) {
	t.Helper()
	_, rdb := testkit.Redis(t)
	st := store.New(rdb, "gateway:")
	repo := adapters.NewRepo(st)
	owners, err := adapters.DialOwners("127.0.0.1:1", "127.0.0.1:1", "127.0.0.1:1") // never called here
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = owners.Close() })
	g := New(repo, owners, Options{Poll: time.Hour})
	tx := &store.Tx{}
	if err := adapters.PutOperation(tx, domain.NewOperation(opName, domain.VerbCreate, "projects/p/clusters/c1", time.Now())); err != nil {
		t.Fatal(err)
	}
	if _, err := repo.Apply(ctx, "", tx); err != nil {
		t.Fatal(err)
	}
	return g, repo, st
}

// interleave makes g's next operation write (and only that one) run other
// first, between its read and its Apply: the other writer lands in the
// window a real race would use.
func interleave(t *testing.T, g *Gateway, other func()) {
	ran := false
	g.beforeOperationWrite = func(string) {
		if ran {
			return
		}
		ran = true
		other()
	}
	t.Cleanup(func() {
		if !ran {
			t.Error("the interleaved writer never ran")
		}
	})
}

// The create completes between CancelOperation's read (running) and its
// Apply: the cancel's write is refused by its condition, it reads again,
// finds the operation done and answers FailedPrecondition; the completed
// operation stays as the provisioner's event made it, and no delete is
// emitted.
func TestCancelAfterCompletionIsRefused(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 30*time.Second)
	const opName = "projects/p/operations/op-complete-first"
	g, repo, st := raceGateway(t, ctx, opName)
	done := envelope.New(topics.ClusterEvents, "projects/p/clusters/c1", "loom/provisioner",
		&eventsv1.ClusterChanged{Operation: opName, OperationDone: true, Cluster: &loomv1.Cluster{Name: "projects/p/clusters/c1"}})
	interleave(t, g, func() {
		if err := g.HandleClusterEvent(ctx, done); err != nil {
			t.Errorf("HandleClusterEvent in the cancel's window: %v", err)
		}
	})

	_, err := g.CancelOperation(ctx, &loomv1.CancelOperationRequest{Name: opName})
	if !errors.Is(err, errs.FailedPrecondition) {
		t.Fatalf("CancelOperation after the completion = %v, want FailedPrecondition", err)
	}
	op, err := repo.Operation(ctx, opName)
	if err != nil {
		t.Fatal(err)
	}
	if !op.GetDone() || op.GetError() != nil || op.GetCluster().GetName() != "projects/p/clusters/c1" {
		t.Fatalf("operation after the refused cancel = %v, want done with its cluster", op)
	}
	if n, _ := st.OutboxLen(ctx); n != 0 {
		t.Fatalf("outbox holds %d entries; the refused cancel must emit no DeleteCluster", n)
	}
	if seen, _ := st.Seen(ctx, "cancel:"+opName); seen {
		t.Fatal("the refused cancel left its inbox mark")
	}
}

// The cancel lands between the completion's read (running) and its Apply:
// the completion's write is refused by its condition, it reads again, finds
// the operation done (cancelled) and writes nothing; the cancelled
// operation and its delete stay. A later failure event changes nothing
// either.
func TestCompletionAfterCancelLeavesItCancelled(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 30*time.Second)
	const opName = "projects/p/operations/op-cancel-first"
	g, repo, st := raceGateway(t, ctx, opName)
	var cancelled *loomv1.Operation
	interleave(t, g, func() {
		var err error
		if cancelled, err = g.CancelOperation(ctx, &loomv1.CancelOperationRequest{Name: opName}); err != nil {
			t.Errorf("CancelOperation in the completion's window: %v", err)
		}
	})

	done := envelope.New(topics.ClusterEvents, "projects/p/clusters/c1", "loom/provisioner",
		&eventsv1.ClusterChanged{Operation: opName, OperationDone: true, Cluster: &loomv1.Cluster{Name: "projects/p/clusters/c1"}})
	if err := g.HandleClusterEvent(ctx, done); err != nil {
		t.Fatalf("HandleClusterEvent after the cancel: %v", err)
	}
	failed := envelope.New(topics.ClusterEvents, "projects/p/clusters/c1", "loom/provisioner",
		&eventsv1.ClusterOperationFailed{Operation: opName, Code: int32(codes.Aborted), Message: "create ended by a delete"})
	if err := g.HandleClusterEvent(ctx, failed); err != nil {
		t.Fatalf("HandleClusterEvent of the failure: %v", err)
	}
	op, err := repo.Operation(ctx, opName)
	if err != nil {
		t.Fatal(err)
	}
	if !op.GetDone() || op.GetError().GetCode() != int32(codes.Canceled) || op.GetMetadata().GetProgress() != "cancelled" {
		t.Fatalf("operation after the late completion = %v, want it cancelled", op)
	}
	if cancelled == nil || op.GetError().GetMessage() != cancelled.GetError().GetMessage() {
		t.Fatalf("stored %v, the cancel answered %v", op, cancelled)
	}
	if n, _ := st.OutboxLen(ctx); n != 1 {
		t.Fatalf("outbox holds %d entries, want the cancel's DeleteCluster alone", n)
	}
	// The cancel answers the same again.
	again, err := g.CancelOperation(ctx, &loomv1.CancelOperationRequest{Name: opName})
	if err != nil || again.GetError().GetCode() != int32(codes.Canceled) {
		t.Fatalf("CancelOperation again = %v, %v; want the cancelled operation", again, err)
	}
}

// A progress event (the operation not done) that lands after a cancel does
// not bring the operation back to running either.
func TestProgressAfterCancelLeavesItCancelled(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 30*time.Second)
	const opName = "projects/p/operations/op-progress"
	g, repo, _ := raceGateway(t, ctx, opName)
	interleave(t, g, func() {
		if _, err := g.CancelOperation(ctx, &loomv1.CancelOperationRequest{Name: opName}); err != nil {
			t.Errorf("CancelOperation in the progress write's window: %v", err)
		}
	})
	progress := envelope.New(topics.ClusterEvents, "projects/p/clusters/c1", "loom/provisioner",
		&eventsv1.ClusterChanged{Operation: opName, Cluster: &loomv1.Cluster{Name: "projects/p/clusters/c1",
			Status: &loomv1.ClusterStatus{State: loomv1.Cluster_CREATING}}})
	if err := g.HandleClusterEvent(ctx, progress); err != nil {
		t.Fatal(err)
	}
	if op, err := repo.Operation(ctx, opName); err != nil || !op.GetDone() || op.GetError().GetCode() != int32(codes.Canceled) {
		t.Fatalf("operation after a late progress event = %v (%v), want it cancelled", op, err)
	}
}
