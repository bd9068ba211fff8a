package cli

import (
	"bytes"
	"context"
	"os"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"github.com/loom-ml/loom/cmd/loom/internal/agentcmd"
)

// TestMain lets tests start this binary as `loom train ...`, `loom agent` or
// a Slurm command (the re-exec trick): the in-process stack's agents are this binary with
// LOOM_TEST_RUN_AGENT=1, and the demo job runs `<this binary> train`.
func TestMain(m *testing.M) {
	// Started through a Slurm command's link (`loom clusters login`).
	if args := Args(os.Args[0], os.Args[1:]); len(args) > 0 && args[0] == "slurm" {
		os.Exit(Execute(context.Background(), args, os.Stdout, os.Stderr))
	}
	if len(os.Args) > 1 && (os.Args[1] == "train" || os.Args[1] == "agent") {
		os.Exit(Execute(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
	}
	if os.Getenv("LOOM_TEST_RUN_AGENT") == "1" {
		if err := agentcmd.Run(signalContext(), os.Args[1:], os.Stderr); err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// run executes the CLI against gw with a fixed clock and fast polling.
func run(t *testing.T, gw string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return runWith(t, gw, nil, args...)
}

// runWith is run with the app adjusted by setup (when not nil) first.
func runWith(t *testing.T, gw string, setup func(*app), args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	a := newApp()
	a.now = func() time.Time { return testNow }
	a.pollInterval = time.Millisecond
	a.callTimeout = 10 * time.Second
	// The credentials file is the test's own, never the real user's.
	a.configDir = t.TempDir()
	if setup != nil {
		setup(a)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code = a.execute(ctx, append([]string{"--gateway", gw}, args...), &out, &errb)
	return out.String(), errb.String(), code
}

func signalContext() context.Context {
	ctx, _ := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	return ctx
}
