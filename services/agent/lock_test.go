package agent

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestOneAgentPerNode: the node's lock admits one agent; a second one
// waits, then refuses naming the holder; once the holder is gone the lock
// is free again. (flock conflicts between two opens in one process too.)
func TestOneAgentPerNode(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx := context.Background()
	first, err := lockNode(ctx, dir, node, time.Second, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, LockFile)); strings.TrimSpace(string(b)) != strconv.Itoa(os.Getpid()) {
		t.Fatalf("lock file holds %q, want this pid", b)
	}
	_, err = lockNode(ctx, dir, node, 100*time.Millisecond, slog.Default())
	if err == nil || !strings.Contains(err.Error(), "another agent of this node runs (pid "+strconv.Itoa(os.Getpid())) {
		t.Fatalf("second agent = %v, want a refusal naming the holder", err)
	}
	// A second agent waiting when the first ends takes the lock.
	got := make(chan error, 1)
	go func() {
		l, err := lockNode(ctx, dir, node, time.Minute, slog.Default())
		if err == nil {
			err = l.Close()
		}
		got <- err
	}()
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("agent waiting for the lock = %v", err)
	}
	// A cancelled start stops waiting. (The lock just closed can stay held
	// a moment: a parallel test's fork holds a copy of its descriptor until
	// the child execs; a passing run takes it at once.)
	held, err := lockNode(ctx, dir, node, 10*time.Second, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := lockNode(cctx, dir, node, time.Minute, slog.Default()); err != context.Canceled {
		t.Fatalf("cancelled wait = %v, want context.Canceled", err)
	}
}
