package local

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/loom-ml/loom/libs/proc"
	"github.com/loom-ml/loom/services/provisioner/internal/provider"
)

func node(data, cluster, host string) provider.Node {
	return provider.Node{
		Name: "projects/p/clusters/" + cluster + "/nodes/" + host, Cluster: "projects/p/clusters/" + cluster,
		ClusterID: cluster, Hostname: host, GPUs: 2,
		WorkDir: WorkDir(data, cluster, host), SharedDir: SharedDir(data, cluster), ScratchDir: ScratchDir(data, cluster),
	}
}

func newProvider(t *testing.T, data string, script string, grace time.Duration) *Provider {
	t.Helper()
	p, err := New(Config{
		DataDir: data, AgentCommand: []string{"/bin/sh", "-c", script}, AgentEnv: []string{"EXTRA=1"},
		Brokers: []string{"127.0.0.1:1", "127.0.0.1:2"}, RedisAddr: "127.0.0.1:3", StopGrace: grace,
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// waitFile waits for a file the fake agent writes (no sleeping as sync: poll with a deadline).
func waitFile(t *testing.T, path string) string {
	t.Helper()
	var b []byte
	if !waitUntil(10*time.Second, nil, func() bool {
		var err error
		b, err = os.ReadFile(path)
		return err == nil && strings.HasSuffix(string(b), "END\n")
	}) {
		t.Fatalf("%s not written", path)
	}
	return string(b)
}

func cleanupGroup(t *testing.T, p *Provider, n provider.Node) {
	t.Cleanup(func() {
		if pid, ok := p.Running(n); ok {
			_ = proc.KillGroup(pid, syscall.SIGKILL)
		}
	})
}

func TestLaunchStopRemove(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	const script = `env > env.txt; echo END >> env.txt; exec sleep 60`
	p := newProvider(t, data, script, 5*time.Second)
	n := node(data, "demo", "gpu-0001")
	cleanupGroup(t, p, n)
	ctx := context.Background()

	l, err := p.Launch(ctx, n)
	if err != nil || !l.Started || l.PID <= 0 {
		t.Fatalf("Launch = %+v, %v", l, err)
	}
	env := waitFile(t, filepath.Join(n.WorkDir, "env.txt"))
	for _, want := range []string{
		"LOOM_NODE=" + n.Name, "LOOM_HOSTNAME=gpu-0001", "LOOM_WORK_DIR=" + n.WorkDir, "LOOM_GPUS=2",
		"LOOM_CLUSTER=" + n.Cluster, "LOOM_SHARED_DIR=" + n.SharedDir, "LOOM_SCRATCH_DIR=" + n.ScratchDir, "LOOM_BROKERS=127.0.0.1:1,127.0.0.1:2",
		"LOOM_REDIS_ADDR=127.0.0.1:3", "EXTRA=1", "LOOM_AGENT_GRPC_ADDR=127.0.0.1:0", "PATH=",
	} {
		if !strings.Contains(env, "\n"+want) && !strings.HasPrefix(env, want) {
			t.Errorf("agent env lacks %q", want)
		}
	}
	for _, d := range []string{n.SharedDir, n.ScratchDir} {
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
			t.Fatalf("shared dir %s: %v", d, err)
		}
	}
	if n.SharedDir != filepath.Join(data, "clusters", "demo", "home") {
		t.Fatalf("shared dir = %s, want the cluster's home", n.SharedDir)
	}
	if pgid, err := syscall.Getpgid(l.PID); err != nil || pgid != l.PID {
		t.Fatalf("agent pgid = %d, %v; want its own group %d", pgid, err, l.PID)
	}

	// Idempotent, also for a fresh provider (a restarted provisioner).
	for _, q := range []*Provider{p, newProvider(t, data, script, time.Second)} {
		again, err := q.Launch(ctx, n)
		if err != nil || again.Started || again.PID != l.PID {
			t.Fatalf("second Launch = %+v, %v; want the running pid %d", again, err, l.PID)
		}
	}

	if err := p.Stop(ctx, n); err != nil {
		t.Fatal(err)
	}
	if _, ok := p.Running(n); ok {
		t.Fatal("agent runs after Stop")
	}
	if err := p.Stop(ctx, n); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if err := p.Remove(ctx, n); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(n.WorkDir); !os.IsNotExist(err) {
		t.Fatalf("work dir still there: %v", err)
	}
	if err := p.RemoveCluster(ctx, "demo"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(ClusterDir(data, "demo")); !os.IsNotExist(err) {
		t.Fatalf("cluster dir still there: %v", err)
	}
}

func TestRelaunchReportsPreviousExit(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	p := newProvider(t, data, `echo END > ran.txt; exec sleep 60`, time.Second)
	n := node(data, "crash", "a-0001")
	cleanupGroup(t, p, n)
	l, err := p.Launch(context.Background(), n)
	if err != nil {
		t.Fatal(err)
	}
	_ = proc.KillGroup(l.PID, syscall.SIGKILL)
	if !waitUntil(10*time.Second, nil, func() bool { _, ok := p.Running(n); return !ok }) {
		t.Fatal("killed agent still seen running")
	}
	// The reaper records the exit asynchronously; Launch reports it once known.
	var again provider.Launched
	if !waitUntil(10*time.Second, nil, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.exits[n.Name] != ""
	}) {
		t.Fatal("exit not recorded")
	}
	again, err = p.Launch(context.Background(), n)
	if err != nil || !again.Started || again.PID == l.PID || !strings.Contains(again.PrevExit, "killed") {
		t.Fatalf("relaunch = %+v, %v", again, err)
	}
}

func TestStopEscalatesToSIGKILL(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	p := newProvider(t, data, `trap '' TERM; echo END > ready.txt; sleep 60 & wait`, 200*time.Millisecond)
	n := node(data, "stubborn", "a-0001")
	cleanupGroup(t, p, n)
	l, err := p.Launch(context.Background(), n)
	if err != nil {
		t.Fatal(err)
	}
	waitFile(t, filepath.Join(n.WorkDir, "ready.txt"))
	if err := p.Stop(context.Background(), n); err != nil {
		t.Fatal(err)
	}
	if proc.Alive(l.PID, 0) {
		t.Fatal("agent survived Stop")
	}
	// The group's other members die asynchronously after SIGKILL.
	if !waitUntil(10*time.Second, nil, func() bool { return syscall.Kill(-l.PID, 0) != nil }) {
		t.Fatal("agent's group (its sleep) survived Stop")
	}
}

func TestLaunchFailure(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	p, err := New(Config{DataDir: data, AgentCommand: []string{filepath.Join(data, "no-such-agent")}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Launch(context.Background(), node(data, "demo", "a-0001")); err == nil || !strings.Contains(err.Error(), "no-such-agent") {
		t.Fatalf("Launch of a missing binary = %v", err)
	}
	bad := node(data, "demo", "a-0001")
	bad.WorkDir = "/etc"
	if _, err := p.Launch(context.Background(), bad); err == nil {
		t.Fatal("Launch accepted a work dir outside the data dir")
	}
	if err := p.Remove(context.Background(), bad); err == nil {
		t.Fatal("Remove accepted a work dir outside the data dir")
	}
	if err := p.RemoveCluster(context.Background(), "../x"); err == nil {
		t.Fatal("RemoveCluster accepted a bad id")
	}
	if _, err := New(Config{DataDir: "relative", AgentCommand: []string{"x"}}); err == nil {
		t.Fatal("New accepted a relative data dir")
	}
}

func TestPrepareCluster(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	p := newProvider(t, data, "true", time.Second)
	setup := provider.ClusterSetup{
		Cluster: "projects/p/clusters/demo", ClusterID: "demo",
		HomeDir: HomeDir(data, "demo"), ScratchDir: ScratchDir(data, "demo"),
		Files: map[string][]byte{".loom/slurm/slurm.conf": []byte("ClusterName=demo\n")},
	}
	ctx := context.Background()
	if err := p.PrepareCluster(ctx, setup); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(data, "clusters", "demo", "home", ".loom", "slurm", "slurm.conf")
	if b, err := os.ReadFile(conf); err != nil || string(b) != "ClusterName=demo\n" {
		t.Fatalf("slurm.conf = %q, %v", b, err)
	}
	if fi, err := os.Stat(ScratchDir(data, "demo")); err != nil || !fi.IsDir() {
		t.Fatalf("scratch: %v", err)
	}
	// Unchanged content is not rewritten; changed content is replaced.
	st1, _ := os.Stat(conf)
	if err := p.PrepareCluster(ctx, setup); err != nil {
		t.Fatal(err)
	}
	if st2, _ := os.Stat(conf); !os.SameFile(st1, st2) {
		t.Fatal("unchanged file was rewritten")
	}
	setup.Files[".loom/slurm/slurm.conf"] = []byte("ClusterName=demo2\n")
	if err := p.PrepareCluster(ctx, setup); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(conf); string(b) != "ClusterName=demo2\n" {
		t.Fatalf("slurm.conf after change = %q", b)
	}
	bad := setup
	bad.Files = map[string][]byte{"../escape": nil}
	if err := p.PrepareCluster(ctx, bad); err == nil {
		t.Fatal("PrepareCluster wrote outside the home")
	}
	bad = setup
	bad.HomeDir = "/etc"
	if err := p.PrepareCluster(ctx, bad); err == nil {
		t.Fatal("PrepareCluster accepted a home outside the data dir")
	}
}

// TestLaunchIsPaced: starts are at most LaunchRate a second; a Launch whose
// context ends while it waits for its turn starts nothing; one that finds
// its agent running does not wait.
func TestLaunchIsPaced(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	p, err := New(Config{DataDir: data, AgentCommand: []string{"/bin/sh", "-c", "exec sleep 600"}, LaunchRate: 5, LaunchConcurrency: 1})
	if err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	var nodes []provider.Node
	for _, h := range []string{"n-0001", "n-0002", "n-0003"} {
		n := node(data, "c", h)
		nodes = append(nodes, n)
		cleanupGroup(t, p, n)
		if l, err := p.Launch(context.Background(), n); err != nil || !l.Started {
			t.Fatalf("launch %s: %+v, %v", h, l, err)
		}
	}
	if took := time.Since(begin); took < 350*time.Millisecond {
		t.Fatalf("three starts at 5 a second took %v, want at least 400ms", took)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	late := node(data, "c", "n-0004")
	if l, err := p.Launch(ctx, late); err == nil || l.Started {
		t.Fatalf("launch with an ended context = %+v, %v; want an error", l, err)
	}
	if _, ok := p.Running(late); ok {
		t.Fatal("an agent started for a cancelled launch")
	}
	begin = time.Now()
	for _, n := range nodes {
		if l, err := p.Launch(context.Background(), n); err != nil || l.Started {
			t.Fatalf("relaunch of a running agent = %+v, %v", l, err)
		}
	}
	if took := time.Since(begin); took > 150*time.Millisecond {
		t.Fatalf("launches of running agents waited %v", took)
	}
}
