package local

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/loom-ml/loom/libs/proc"
	"github.com/loom-ml/loom/services/provisioner/internal/provider"
)

func node(data, cluster, host string) provider.Node {
	return provider.Node{
		Name: "projects/p/clusters/" + cluster + "/nodes/" + host, Cluster: "projects/p/clusters/" + cluster,
		ClusterID: cluster, Hostname: host, GPUs: 2, MachineType: "a3-highgpu-2g",
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
		"LOOM_AGENT_GPU_MODEL=NVIDIA H100 80GB HBM3", "LOOM_CLUSTER=" + n.Cluster, "LOOM_SHARED_DIR=" + n.SharedDir, "LOOM_SCRATCH_DIR=" + n.ScratchDir, "LOOM_BROKERS=127.0.0.1:1,127.0.0.1:2",
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
	// The next start's turn an hour away: a relaunch that waited for a
	// turn would wait until its context ended, and fail. (Timing the
	// relaunches instead failed on a loaded machine: three pidfile and
	// /proc reads can take longer than any bound short of a turn.)
	p.mu.Lock()
	next := time.Now().Add(time.Hour)
	p.nextStart = next
	p.mu.Unlock()
	relaunch, stop := context.WithTimeout(context.Background(), 10*time.Second)
	defer stop()
	for _, n := range nodes {
		if l, err := p.Launch(relaunch, n); err != nil || l.Started {
			t.Fatalf("relaunch of a running agent = %+v, %v; want no wait for a turn", l, err)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.nextStart.Equal(next) {
		t.Fatalf("relaunches of running agents took a turn: the next start moved from %v to %v", next, p.nextStart)
	}
}

// startStep starts a process group the way an agent starts a step (its own
// group, a pidfile under <work dir>/steps) and returns its pid and a
// channel closed once it has been reaped.
func startStep(t *testing.T, n provider.Node, id string) (int, <-chan struct{}) {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", "sleep 60 & wait")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	t.Cleanup(func() { _ = proc.KillGroup(pid, syscall.SIGKILL) })
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	start, _ := proc.StartTime(pid)
	if err := os.MkdirAll(filepath.Join(n.WorkDir, StepsDir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := proc.WritePIDFile(filepath.Join(n.WorkDir, StepsDir, id+".pid"), pid, start); err != nil {
		t.Fatal(err)
	}
	return pid, done
}

func reaped(t *testing.T, done <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s still runs", what)
	}
}

func TestRebootKillsStepsLeftByADeadAgent(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	p := newProvider(t, data, `echo END > ready.txt; exec sleep 60`, time.Second)
	n := node(data, "demo", "gpu-0001")
	cleanupGroup(t, p, n)
	ctx := context.Background()
	l, err := p.Launch(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	first := ReadBootID(n.WorkDir)
	if len(first) != 32 {
		t.Fatalf("first launch wrote boot id %q", first)
	}
	// The agent dies; its step outlives it (own group); a relaunch of the
	// agent is not a boot.
	step, stepDone := startStep(t, n, "job-1.0")
	_ = proc.KillGroup(l.PID, syscall.SIGKILL)
	if !waitUntil(10*time.Second, nil, func() bool { _, ok := p.Running(n); return !ok }) {
		t.Fatal("killed agent still running")
	}
	if !proc.Alive(step, 0) {
		t.Fatal("the step died with its agent; the test needs it alive")
	}
	l2, err := p.Launch(ctx, n)
	if err != nil || !l2.Started || ReadBootID(n.WorkDir) != first {
		t.Fatalf("relaunch = %+v, %v; boot id %q, want %q unchanged", l2, err, ReadBootID(n.WorkDir), first)
	}
	if err := os.WriteFile(filepath.Join(n.WorkDir, "keep.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}

	r, err := p.Repair(ctx, n, provider.Reboot, "boot-1")
	if err != nil || !r.Started || r.PID == l2.PID {
		t.Fatalf("reboot = %+v, %v", r, err)
	}
	reaped(t, stepDone, "the step process group")
	if proc.Alive(l2.PID, 0) && !gone(l2.PID) {
		t.Fatalf("the agent of the previous boot (%d) still runs", l2.PID)
	}
	if got := ReadBootID(n.WorkDir); got != "boot-1" {
		t.Fatalf("boot id after reboot = %q", got)
	}
	if _, err := os.Stat(filepath.Join(n.WorkDir, "keep.txt")); err != nil {
		t.Fatalf("a reboot lost the node's disk: %v", err)
	}
	if pid, ok := p.Running(n); !ok || pid != r.PID {
		t.Fatalf("agent after reboot: %d, %v", pid, ok)
	}
	// Idempotent per boot id: the same reboot again only checks the agent.
	if again, err := p.Repair(ctx, n, provider.Reboot, "boot-1"); err != nil || again.Started || again.PID != r.PID {
		t.Fatalf("repeated reboot = %+v, %v", again, err)
	}
}

// gone reports whether pid is gone or a zombie nobody reaped yet.
func gone(pid int) bool {
	st, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	return err != nil || strings.Contains(string(st), ") Z ")
}

func TestReimageWipesTheNodeAndReplaceBootsANewOne(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	p := newProvider(t, data, `echo END > ready.txt; exec sleep 60`, time.Second)
	n := node(data, "demo", "gpu-0001")
	cleanupGroup(t, p, n)
	ctx := context.Background()
	l, err := p.Launch(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	waitFile(t, filepath.Join(n.WorkDir, "ready.txt"))
	_, stepDone := startStep(t, n, "job-2.0")
	planted := filepath.Join(n.WorkDir, "identity", "planted.txt")
	if err := os.MkdirAll(filepath.Dir(planted), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(planted, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := p.Repair(ctx, n, provider.Reimage, "boot-2")
	if err != nil || !r.Started || r.PID == l.PID {
		t.Fatalf("reimage = %+v, %v", r, err)
	}
	reaped(t, stepDone, "the step process group")
	if _, err := os.Stat(planted); !os.IsNotExist(err) {
		t.Fatalf("the planted file survived the reimage: %v", err)
	}
	if _, err := os.Stat(filepath.Join(n.WorkDir, StepsDir)); !os.IsNotExist(err) {
		t.Fatalf("the steps directory survived the reimage: %v", err)
	}
	if ReadBootID(n.WorkDir) != "boot-2" {
		t.Fatalf("boot id = %q", ReadBootID(n.WorkDir))
	}
	waitFile(t, filepath.Join(n.WorkDir, "ready.txt")) // the fresh agent runs in the wiped directory

	// Replace: the old node is stopped and removed (a step it left dies
	// with it), the new one boots with the repair's boot id.
	_, oldStep := startStep(t, n, "job-3.0")
	if err := p.Stop(ctx, n); err != nil {
		t.Fatal(err)
	}
	if err := p.Remove(ctx, n); err != nil {
		t.Fatal(err)
	}
	reaped(t, oldStep, "a step of the removed node")
	repl := node(data, "demo", "gpu-0003")
	cleanupGroup(t, p, repl)
	if r, err := p.Repair(ctx, repl, provider.Replace, "boot-3"); err != nil || !r.Started || ReadBootID(repl.WorkDir) != "boot-3" {
		t.Fatalf("replacement boot = %+v, %v, boot id %q", r, err, ReadBootID(repl.WorkDir))
	}
	if _, err := p.Repair(ctx, repl, provider.Reboot, ""); err == nil {
		t.Fatal("a repair without a boot id was accepted")
	}
}

// recordingKeys is a RedisKeys that records the batches it is handed and
// fails the hosts in fail.
type recordingKeys struct {
	mu      sync.Mutex
	batches [][]string
	fail    map[string]bool
}

func (r *recordingKeys) DeleteAll(_ context.Context, nodes []provider.Node) []error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var hosts []string
	errs := make([]error, len(nodes))
	for i, n := range nodes {
		hosts = append(hosts, n.Hostname)
		if r.fail[n.Hostname] {
			errs[i] = errors.New("SCAN: connection refused")
		}
	}
	r.batches = append(r.batches, hosts)
	return errs
}

// TestRemoveNodesDeletesKeysInOneBatch: RemoveNodes hands every node's
// agent to one RedisKeys.DeleteAll (one walk of Redis's keyspace for them
// all) and deletes the directories of those whose keys went; a node whose
// keys could not be deleted keeps its directory and says why, and one
// that is not this provider's is refused without being handed over.
func TestRemoveNodesDeletesKeysInOneBatch(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	keys := &recordingKeys{fail: map[string]bool{"gpu-0002": true}}
	p, err := New(Config{DataDir: data, AgentCommand: []string{"/bin/true"}, RedisKeys: keys})
	if err != nil {
		t.Fatal(err)
	}
	var nodes []provider.Node
	for _, h := range []string{"gpu-0001", "gpu-0002", "gpu-0003", "gpu-0010"} {
		n := node(data, "demo", h)
		if err := os.MkdirAll(n.WorkDir, 0o755); err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, n)
	}
	bad := node(data, "demo", "gpu-0004")
	bad.WorkDir = "/etc"
	nodes = append(nodes, bad)

	errs := p.RemoveNodes(context.Background(), nodes)
	if len(keys.batches) != 1 || strings.Join(keys.batches[0], ",") != "gpu-0001,gpu-0002,gpu-0003,gpu-0010" {
		t.Fatalf("RedisKeys got %v; want one batch of the 4 nodes of this provider", keys.batches)
	}
	for i, n := range nodes {
		_, statErr := os.Stat(n.WorkDir)
		switch n.Hostname {
		case "gpu-0002":
			if errs[i] == nil || !strings.Contains(errs[i].Error(), "connection refused") || statErr != nil {
				t.Fatalf("%s: %v (dir: %v); want its failure and its directory kept", n.Hostname, errs[i], statErr)
			}
		case "gpu-0004":
			if errs[i] == nil || !strings.Contains(errs[i].Error(), "not where this provider puts them") || statErr != nil {
				t.Fatalf("%s: %v (dir: %v); want it refused, /etc untouched", n.Hostname, errs[i], statErr)
			}
		default:
			if errs[i] != nil || !os.IsNotExist(statErr) {
				t.Fatalf("%s: %v (dir: %v); want it removed", n.Hostname, errs[i], statErr)
			}
		}
	}
}
