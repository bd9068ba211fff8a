package app

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/loom-ml/loom/libs/store"
	"github.com/loom-ml/loom/libs/store/storetest"
	"github.com/loom-ml/loom/libs/testkit"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	"github.com/loom-ml/loom/services/registry/internal/adapters"
)

// TestUploadAttemptsEnd: an UploadModel that fails every one of its
// attempts (the SHA-256 check cut short by the handler's bound each time,
// or every write to Redis timing out) is answered ModelUploadFailed on the
// last, with the code and "upload again", registering nothing: before, the
// bus dead-lettered it unanswered, and the gateway's upload operation (or
// the training pipeline waiting on it, which not even a cancel can end)
// stayed RUNNING for ever. The same request sent again later registers.
func TestUploadAttemptsEnd(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 30*time.Second)
	_, rdb := testkit.Redis(t)
	drop := storetest.DropApplyRequests(rdb, "registry:")
	repo := adapters.NewRepo(store.New(rdb, "registry:"))
	r, err := New(ctx, repo, slog.Default(), nil)
	if err != nil {
		t.Fatal(err)
	}
	dir := artifactDir(t)

	// The handler's bound spent on every attempt (a set too large to hash
	// in time).
	slow := uploadCmd("req-slow", dir)
	for attempt := 1; attempt <= UploadAttempts; attempt++ {
		hctx, cancel := context.WithTimeout(ctx, 0)
		err := r.Handle(hctx, slow)
		cancel()
		if attempt < UploadAttempts && err == nil {
			t.Fatalf("attempt %d succeeded with its bound spent", attempt)
		}
		if attempt == UploadAttempts && err != nil {
			t.Fatalf("last attempt: %v, want the upload answered", err)
		}
	}
	if _, err := r.GetModel(model); err == nil {
		t.Fatal("a version was registered by an upload that was answered failed")
	}
	evs := drain(t, repo, 1)
	for i, want := range []struct {
		rid  string
		code codes.Code
	}{{"req-slow", codes.DeadlineExceeded}} {
		f, ok := evs[i].Payload.(*eventsv1.ModelUploadFailed)
		if !ok || f.GetRequestId() != want.rid || codes.Code(f.GetCode()) != want.code || !strings.Contains(f.GetReason(), "upload again") {
			t.Fatalf("answer %d: %v, want ModelUploadFailed %s %v saying to upload again", i, evs[i].Payload, want.rid, want.code)
		}
	}
	if n, _ := repo.Store().OutboxLen(ctx); n != 0 {
		t.Fatalf("%d more events in the outbox, want one answer each", n)
	}
	// Sent again (a new event), the request registers.
	if err := r.Handle(ctx, uploadCmd("req-slow", dir)); err != nil {
		t.Fatal(err)
	}
	if vs, err := r.ListVersions(model); err != nil || len(vs) != 1 {
		t.Fatalf("versions after the upload sent again: %v %v, want one", vs, err)
	}

	// Writes lost on their way to Redis (a restart) are not the upload's
	// failure: more of them than UploadAttempts answer nothing, and the
	// upload registers once Redis answers again.
	lost := uploadCmd("req-lost", dir)
	before, _ := repo.Store().OutboxLen(ctx)
	drop.Arm(2 * UploadAttempts)
	for attempt := 1; attempt <= 2*UploadAttempts; attempt++ {
		if err := r.Handle(ctx, lost); !store.OutcomeUnknown(err) {
			t.Fatalf("attempt %d: %v, want the write's outcome unknown", attempt, err)
		}
	}
	if n, _ := repo.Store().OutboxLen(ctx); n != before {
		t.Fatalf("an upload whose writes were lost was answered (%d events)", n-before)
	}
	if err := r.Handle(ctx, lost); err != nil {
		t.Fatalf("once Redis answers: %v", err)
	}
	if vs, err := r.ListVersions(model); err != nil || len(vs) != 2 {
		t.Fatalf("versions after Redis answered again: %v %v, want two", vs, err)
	}
}
