package training

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/services/training/internal/adapters"
)

// TestLogDirSettings: a relative -log-dir (the agents, elsewhere, open the
// files it names) and a -log-retention out of bounds are refused naming
// the flag, before anything starts.
func TestLogDirSettings(t *testing.T) {
	t.Parallel()
	for arg, flag := range map[string]string{"-log-dir=logs": "log-dir", "-log-retention=30m": "log-retention",
		"-log-retention=-1h": "log-retention", "-log-retention=100000h": "log-retention"} {
		err := RunArgs(context.Background(), []string{arg})
		if errs.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), flag) {
			t.Errorf("%s: %v, want InvalidArgument naming %s", arg, err, flag)
		}
	}
}

// TestLogDirPrunedAtStartAndOnTheClock: when the pruner starts, and at
// each tick of its clock after, the output files whose last write is
// older than the retention go, as measured by that clock. At the start
// too: a service restarted more often than LogPruneEvery would otherwise
// never prune. A running job's file stays, however old.
func TestLogDirPrunedAtStartAndOnTheClock(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	dir := filepath.Join(root, "p", "alice")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, adapters.LogDirMarker), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	at := time.Now().Add(-48 * time.Hour)
	write := func(path string, old bool) {
		t.Helper()
		if err := os.WriteFile(path, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		if old {
			if err := os.Chtimes(path, at, at); err != nil {
				t.Fatal(err)
			}
		}
	}
	gone := func(path string) func() (bool, error) {
		return func() (bool, error) {
			_, err := os.Stat(path)
			return os.IsNotExist(err), nil
		}
	}
	old, recent, running := filepath.Join(dir, "job-1.out"), filepath.Join(dir, "job-2.out"), filepath.Join(dir, "job-4.out")
	write(old, true)
	write(recent, false)
	write(running, true)
	isRunning := func(project string, id int64) bool { return project == "p" && id == 4 }
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	tick := make(chan time.Time)
	done := make(chan error, 1)
	go func() {
		done <- pruneLogs(ctx, adapters.LogDirs{Root: root}, isRunning, tick, time.Now, 24*time.Hour, slog.New(slog.NewTextHandler(io.Discard, nil)))
	}()
	// No tick yet.
	testkit.WaitFor(t, 10*time.Second, "job-1.out pruned at the start", gone(old))
	if _, err := os.Stat(recent); err != nil {
		t.Errorf("a file within the retention: %v", err)
	}
	// The tick is taken once the first prune is over: one older now goes
	// at it.
	later := filepath.Join(dir, "job-3.out")
	write(later, true)
	tick <- time.Now()
	testkit.WaitFor(t, 10*time.Second, "job-3.out pruned at the tick", gone(later))
	if _, err := os.Stat(recent); err != nil {
		t.Errorf("a file within the retention: %v", err)
	}
	if _, err := os.Stat(running); err != nil {
		t.Errorf("a running job's file: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("pruner ended with %v", err)
	}
}
