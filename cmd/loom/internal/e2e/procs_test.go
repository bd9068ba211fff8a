package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// repoRoot is the workspace root (where go.work is).
func repoRoot(t testing.TB) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOWORK").Output()
	if err != nil || strings.TrimSpace(string(out)) == "" || strings.TrimSpace(string(out)) == "off" {
		t.Fatalf("cannot find the workspace root (go env GOWORK): %v", err)
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// binaries builds every service and the loom CLI once per test binary and
// returns the directory holding them.
func binaries(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "loom-e2e-bin")
		if buildErr != nil {
			return
		}
		args := []string{"build", "-o", binDir + "/"}
		for _, s := range []string{"gateway", "provisioner", "scheduler", "health", "registry", "training", "bridge", "agent"} {
			args = append(args, "./services/"+s+"/cmd/"+s)
		}
		args = append(args, "./cmd/loom")
		cmd := exec.Command("go", args...)
		cmd.Dir = repoRoot(t)
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binDir
}

// dumpLogs prints every process log when the test failed.
func dumpLogs(t testing.TB, dir string) {
	t.Helper()
	if !t.Failed() {
		return
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
		if len(b) > 6000 {
			b = b[len(b)-6000:]
		}
		t.Logf("---- %s (tail)\n%s", e.Name(), b)
	}
}

// waitCtx returns a context for one wait, bounded by d.
func waitCtx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
