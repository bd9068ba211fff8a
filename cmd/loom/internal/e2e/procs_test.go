package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
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
		for _, s := range []string{"gateway", "provisioner", "scheduler", "health", "registry", "agent"} {
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

// proc is a service running as its own process.
type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	log  *os.File
}

// startProc runs bin with env added to the environment, its output in logDir/<name>.log.
func startProc(t testing.TB, name, bin, logDir string, env []string, args ...string) *proc {
	t.Helper()
	f, err := os.Create(filepath.Join(logDir, name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	p := &proc{name: name, cmd: cmd, done: make(chan struct{}), log: f}
	go func() { _ = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() { p.stop(t); _ = f.Close() })
	return p
}

// kill9 kills the process outright, as a crash would.
func (p *proc) kill9(t testing.TB) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not die after SIGKILL", p.name)
	}
}

// stop asks the process to shut down gracefully, then kills it.
func (p *proc) stop(t testing.TB) {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		t.Logf("%s ignored SIGTERM for 15s; killing it", p.name)
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.done
	}
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
