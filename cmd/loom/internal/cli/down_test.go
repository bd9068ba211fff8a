package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/loom-ml/loom/cmd/loom/stack"
	"github.com/loom-ml/loom/libs/proc"
	"github.com/loom-ml/loom/libs/testkit"
)

// upWithCluster runs `loom up --data-dir dir args...` (on free ports, its
// agents this test binary as `loom agent`), creates a one-node cluster
// through it, then stops it as Ctrl-C does and returns what it printed.
func upWithCluster(t *testing.T, dir string, args ...string) string {
	t.Helper()
	return upWhile(t, dir, nil, args...)
}

// upWhile is upWithCluster, calling then (when not nil) with a CLI of the
// running `loom up` after the cluster is created.
func upWhile(t *testing.T, dir string, then func(liveCLI), args ...string) string {
	t.Helper()
	a := newApp()
	a.upAddrs = func(int) (stack.Addrs, error) { return stack.Addrs{}, nil }
	a.configDir = t.TempDir() // the administrator key goes there, not into the real user's
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut testkit.Buffer
	code := make(chan int, 1)
	go func() {
		code <- a.execute(ctx, append([]string{"up", "--data-dir", dir, "--log-level", "warn"}, args...), &out, &errOut)
	}()
	gw := regexp.MustCompile(`Loom is up: gateway (\S+) `)
	var addr string
	testkit.WaitFor(t, 90*time.Second, "loom up to be up", func() (bool, error) {
		select {
		case c := <-code:
			t.Fatalf("loom up exited %d:\n%s%s", c, out.String(), errOut.String())
		default:
		}
		if m := gw.FindStringSubmatch(out.String()); m != nil {
			addr = m[1]
			return true, nil
		}
		return false, nil
	})
	cli := liveCLI{t: t, gw: addr, token: adminKey(t, dir)}
	cli.ok("clusters", "create", "-f", writeFile(t, "c.json",
		`{"name": "down", "compute": {"node_pools": [{"id": "cpu", "machine_type": "n2-standard-8", "node_count": 1}]}}`))
	if then != nil {
		then(cli)
	}
	// While it runs, `loom down` refuses and says what to do.
	if _, downErr, downCode := run(t, "127.0.0.1:1", "down", "--data-dir", dir); downCode != 1 ||
		!strings.Contains(downErr, fmt.Sprintf("`loom up` (pid %d) is still running with data dir %s: stop it first with Ctrl-C", os.Getpid(), dir)) {
		t.Fatalf("loom down while loom up runs: exit %d, %q; want 1 and the refusal", downCode, downErr)
	}
	cancel() // Ctrl-C
	select {
	case c := <-code:
		if c != 0 {
			t.Fatalf("loom up exited %d after Ctrl-C:\n%s%s", c, out.String(), errOut.String())
		}
	case <-time.After(time.Minute):
		t.Fatal("loom up did not stop after Ctrl-C")
	}
	if _, err := os.Stat(upPIDFile(dir)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("loom up left its pidfile behind (%v)", err)
	}
	return out.String()
}

// TestDownRefusesWhileUpHoldsTheDataDir: a data dir whose `loom up`
// pidfile names a live process (a real one, not this test) is held: `loom
// down` and another `loom up` refuse. Once that process has exited, or
// when the pid is alive but started at another time (reused), the file
// holds nothing.
func TestDownRefusesWhileUpHoldsTheDataDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	holder, start := livePIDFile(t, upPIDFile(dir))
	_, errOut, code := run(t, "127.0.0.1:1", "down", "--data-dir", dir)
	want := fmt.Sprintf("`loom up` (pid %d) is still running with data dir %s: stop it first with Ctrl-C in its terminal, then run `loom down --data-dir %s` again", holder.Process.Pid, dir, dir)
	if code != 1 || !strings.Contains(errOut, want) {
		t.Fatalf("loom down: exit %d, %q; want 1 and %q", code, errOut, want)
	}
	if _, errOut, code := run(t, "127.0.0.1:1", "up", "--data-dir", dir); code != 1 ||
		!strings.Contains(errOut, fmt.Sprintf("another `loom up` (pid %d) is running with data dir %s", holder.Process.Pid, dir)) {
		t.Fatalf("a second loom up: exit %d, %q", code, errOut)
	}

	// The pid of a live process, with another start time: not the holder.
	self, _ := proc.StartTime(os.Getpid())
	if err := proc.WritePIDFile(upPIDFile(dir), os.Getpid(), self+1); err != nil {
		t.Fatal(err)
	}
	if stdout, errOut, code := run(t, "127.0.0.1:1", "down", "--data-dir", dir); code != 0 || stdout != "No node agents of "+dir+" are running.\n" {
		t.Fatalf("loom down with a reused pid in the pidfile: exit %d, %q %q", code, stdout, errOut)
	}

	// The holder gone, its pidfile left behind (a killed loom up).
	if err := proc.WritePIDFile(upPIDFile(dir), holder.Process.Pid, start); err != nil {
		t.Fatal(err)
	}
	_ = holder.Process.Kill()
	_ = holder.Wait()
	if stdout, errOut, code := run(t, "127.0.0.1:1", "down", "--data-dir", dir); code != 0 || stdout != "No node agents of "+dir+" are running.\n" {
		t.Fatalf("loom down after the holder exited: exit %d, %q %q", code, stdout, errOut)
	}
}

// livePIDFile starts a process that lives until the test ends (sleep,
// with env as its environment, or this process's when none), standing in for the one a pidfile
// names (a loom up, a node agent), and writes path for it as
// proc.WritePIDFile does: the process and its start time.
func livePIDFile(t *testing.T, path string, env ...string) (*exec.Cmd, uint64) {
	t.Helper()
	c := exec.Command("sleep", "60")
	c.Env = env
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
	start, ok := proc.StartTime(c.Process.Pid)
	if !ok {
		t.Fatalf("pid %d, started for %s, does not run", c.Process.Pid, path)
	}
	if err := proc.WritePIDFile(path, c.Process.Pid, start); err != nil {
		t.Fatal(err)
	}
	return c, start
}

// TestUpLeavesAgentsAndDownEndsThem: Ctrl-C on `loom up` stops the
// services but leaves the node agents running, and says so; `loom down`
// ends exactly those (real processes), and `loom up --stop-agents` leaves
// none.
func TestUpLeavesAgentsAndDownEndsThem(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	out := upWithCluster(t, dir)
	left, err := stack.Agents(dir)
	if err != nil || len(left) != 1 || !strings.HasPrefix(left[0].Node, "down/") {
		t.Fatalf("agents left after Ctrl-C: %+v (%v), want the cluster's one\n%s", left, err, out)
	}
	t.Logf("loom up printed:\n%s", out)
	agent := left[0]
	t.Cleanup(func() { _ = proc.KillGroup(agent.PID, syscall.SIGKILL) })
	if !proc.Alive(agent.PID, agent.Start) {
		t.Fatalf("the agent %d is not running after loom up stopped", agent.PID)
	}
	if want := "1 node agent keeps running (its jobs go on); `loom down --data-dir " + dir + "` ends it"; !strings.Contains(out, want) {
		t.Errorf("loom up's farewell does not say what it leaves behind:\n%s\nwant %q", out, want)
	}
	// The running agent is registered for Prometheus' file_sd (-metrics-sd
	// defaults to <data dir>/metrics-sd), and says where.
	sdFiles := filepath.Join(dir, "metrics-sd", "agent-*.json")
	if files, _ := filepath.Glob(sdFiles); len(files) != 1 || !strings.Contains(out, "file_sd_configs files: ["+sdFiles+"]") {
		t.Errorf("file_sd registrations of the running agent: %v, want 1 (and loom up naming %s)\n%s", files, sdFiles, out)
	}

	// A pidfile naming a live process that is not this node's agent (a
	// recycled pid) is not an agent, and down never signals it.
	other := filepath.Join(dir, "provisioner", "clusters", "down", "nodes", "down-cpu-9999")
	if err := os.MkdirAll(other, 0o755); err != nil {
		t.Fatal(err)
	}
	self, _ := proc.StartTime(os.Getpid())
	if err := os.WriteFile(filepath.Join(other, "agent.pid"), fmt.Appendf(nil, "%d %d\n", os.Getpid(), self), 0o644); err != nil {
		t.Fatal(err)
	}

	stdout, errOut, code := run(t, "127.0.0.1:1", "down", "--data-dir", dir, "--grace", "20s")
	if code != 0 || !strings.Contains(stdout, "stopped node agent "+agent.Node+" (pid "+strconv.Itoa(agent.PID)+")\n") ||
		!strings.HasSuffix(stdout, "1 node agent stopped.\n") || errOut != "" {
		t.Fatalf("loom down: exit %d\nstdout %q\nstderr %q", code, stdout, errOut)
	}
	if proc.Alive(agent.PID, agent.Start) {
		t.Fatal("the agent still runs after loom down")
	}
	if files, _ := filepath.Glob(sdFiles); len(files) != 0 {
		t.Errorf("file_sd registrations left after loom down: %v", files)
	}
	if stdout, _, code := run(t, "127.0.0.1:1", "down", "--data-dir", dir); code != 0 || stdout != "No node agents of "+dir+" are running.\n" {
		t.Fatalf("loom down again: exit %d, %q", code, stdout)
	}
	if _, errOut, code := run(t, "127.0.0.1:1", "down", "--data-dir", filepath.Join(dir, "nope")); code != 1 || !strings.Contains(errOut, "is not a Loom data directory") {
		t.Fatalf("loom down on no data dir: exit %d, %q", code, errOut)
	}
	if _, errOut, code := run(t, "127.0.0.1:1", "down", "--data-dir", dir, "--grace", "0s"); code != 2 || !strings.Contains(errOut, "--grace must be more than 0") {
		t.Fatalf("loom down --grace 0: exit %d, %q", code, errOut)
	}

	// --stop-agents: nothing is left, and nothing is said about it.
	dir2 := t.TempDir()
	out = upWithCluster(t, dir2, "--stop-agents")
	if left, err := stack.Agents(dir2); err != nil || len(left) != 0 {
		t.Fatalf("agents left after loom up --stop-agents: %+v (%v)", left, err)
	}
	if strings.Contains(out, "keeps running") || !strings.Contains(out, "Loom stopped.") {
		t.Errorf("loom up --stop-agents output:\n%s", out)
	}
}
