package slurmconf

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/loom-ml/loom/libs/clusterspec"
	"github.com/loom-ml/loom/libs/hostlist"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/testkit/need"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// TestSlurmctldAcceptsRenderedConfig starts a real slurmctld (Slurm 22.05)
// on the rendered files and checks that sinfo and scontrol see the
// partitions, nodes, GPUs, features and switches the spec asked for. Without
// slurmd the nodes stay down/unknown, which is fine: the controller read the
// files. Needs slurmctld, sinfo, scontrol, munged and mungekey (Debian:
// apt-get install slurmctld slurm-client munge).
func TestSlurmctldAcceptsRenderedConfig(t *testing.T) {
	t.Parallel()
	need.Tools(t, "apt-get install slurmctld slurm-client munge", "slurmctld", "sinfo", "scontrol", "munged", "mungekey")
	// A partition's State (scontrol update PartitionName=P State=...) is
	// slurm.conf's: sinfo's AVAIL shows it.
	states := twoPartitions()
	states.Name = "projects/default/clusters/states"
	states.Orchestrator.Slurm.Partitions = append(states.Orchestrator.Slurm.Partitions,
		&loomv1.SlurmPartition{Id: "down", NodeSetIds: []string{"a3u"}, State: "DOWN"},
		&loomv1.SlurmPartition{Id: "drain", NodeSetIds: []string{"a3u"}, State: "DRAIN"},
		&loomv1.SlurmPartition{Id: "inactive", NodeSetIds: []string{"a3u"}, State: "INACTIVE"})
	clusters := map[string]*loomv1.Cluster{"two-partitions": twoPartitions(), "reservation-spot": reservationSpot(), "partition-states": states}
	for name, c := range examples(t) {
		clusters["example-"+name] = c
	}
	for name, c := range clusters {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			runSlurmctld(t, c, nodesFor(c, nil))
		})
	}
}

func runSlurmctld(t *testing.T, c *loomv1.Cluster, nodes []*loomv1.Node) {
	// A short base: munged's socket path must fit in sun_path.
	base, err := os.MkdirTemp("", "slurmconf-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	for _, d := range []string{"etc", "dev", "munge", "state"} {
		if err := os.MkdirAll(filepath.Join(base, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The munge socket's directory must be enterable by everyone.
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range 8 {
		if err := os.Symlink("/dev/null", filepath.Join(base, "dev", "nvidia"+strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	me, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	opts := RenderOptions{
		ControlHost: "localhost", ControlAddr: "127.0.0.1",
		Port: freePort(t), SlurmdPort: freePort(t),
		StateDir: filepath.Join(base, "state"), ConfDir: filepath.Join(base, "etc"),
		GPUDeviceDir: filepath.Join(base, "dev"), NodeHostname: "localhost", NodeAddr: "127.0.0.1",
		SlurmUser: me.Username, MungeSocket: filepath.Join(base, "munge", "munge.socket.2"),
	}
	for _, d := range opts.Dirs() {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	files, err := RenderWith(c, nodes, opts)
	if err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(opts.ConfDir, "slurm.conf")
	for name, body := range map[string]string{"slurm.conf": files.GetSlurmConf(), "gres.conf": files.GetGresConf(), "topology.conf": files.GetTopologyConf()} {
		if err := os.WriteFile(filepath.Join(opts.ConfDir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range Scripts(c) {
		p := filepath.Join(opts.ConfDir, s.Path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		testkit.WriteExecutable(t, p, []byte(s.Content), 0o755)
	}

	key := filepath.Join(base, "munge", "munge.key")
	if out, err := exec.Command("mungekey", "-c", "-k", key).CombinedOutput(); err != nil {
		t.Fatalf("mungekey: %v\n%s", err, out)
	}
	mungePID := filepath.Join(base, "munge", "munged.pid")
	mungeAlive := startDaemon(t, "munged", mungePID, filepath.Join(base, "munge", "munged.log"), nil,
		"munged", "-F", "-f", "--key-file="+key, "--socket="+opts.MungeSocket, "--pid-file="+mungePID,
		"--log-file="+filepath.Join(base, "munge", "munged.log"), "--seed-file="+filepath.Join(base, "munge", "munged.seed"))
	testkit.WaitFor(t, 10*time.Second, "munged's socket", func() (bool, error) {
		_, err := os.Stat(opts.MungeSocket)
		return err == nil, mungeAlive()
	})

	env := append(os.Environ(), "SLURM_CONF="+conf)
	ctldLog := filepath.Join(opts.StateDir, "log", "slurmctld.log")
	ctldAlive := startDaemon(t, "slurmctld", filepath.Join(opts.StateDir, "run", "slurmctld.pid"), ctldLog, env,
		"slurmctld", "-D", "-i", "-f", conf)

	// sinfo -N: one line per (node, partition); the default partition has a '*'.
	var got []string
	testkit.WaitFor(t, 30*time.Second, "sinfo to answer", func() (bool, error) {
		cmd := exec.Command("sinfo", "-h", "-N", "-o", "%N %P")
		cmd.Env = env
		out, err := cmd.Output()
		if err != nil {
			return false, ctldAlive()
		}
		got = strings.Split(strings.TrimSpace(string(out)), "\n")
		return true, nil
	})
	slices.Sort(got)
	var want []string
	bySet := map[string][]string{}
	for _, n := range nodes {
		if n.GetRole() != "login" {
			set := n.GetHostname()[:strings.LastIndex(n.GetHostname(), "-")]
			bySet[set] = append(bySet[set], n.GetHostname())
		}
	}
	for _, p := range c.GetOrchestrator().GetSlurm().GetPartitions() {
		name := p.GetId()
		if p.GetDefault() {
			name += "*"
		}
		for _, s := range p.GetNodeSetIds() {
			for _, h := range bySet[s] {
				want = append(want, h+" "+name)
			}
		}
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("sinfo -N shows\n%s\nwant\n%s\nslurmctld log:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"), tail(ctldLog))
	}

	// Each partition's State, as sinfo's AVAIL shows it.
	cmd := exec.Command("sinfo", "-h", "-o", "%R %a")
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("sinfo -o '%%R %%a': %v\n%s", err, out)
	}
	for _, p := range c.GetOrchestrator().GetSlurm().GetPartitions() {
		avail := map[string]string{"": "up", "DOWN": "down", "DRAIN": "drain", "INACTIVE": "inactive"}[p.GetState()] // the default format's %.5a cuts it to "inact"
		if !slices.Contains(strings.Split(strings.TrimSpace(string(out)), "\n"), p.GetId()+" "+avail) {
			t.Errorf("sinfo shows\n%s\nwant partition %s %s", out, p.GetId(), avail)
		}
	}

	// The controller parsed each node's hardware, GRES and features.
	sets := map[string]*loomv1.SlurmNodeSet{}
	for _, s := range c.GetOrchestrator().GetSlurm().GetNodeSets() {
		sets[s.GetId()] = s
	}
	for _, n := range nodes {
		if n.GetRole() == "login" {
			continue
		}
		m, _ := clusterspec.Machine(n.GetMachineType())
		want := []string{fmt.Sprintf("CPUTot=%d ", m.VCPUs), fmt.Sprintf("RealMemory=%d ", int(float64(m.MemoryGiB)*1024*0.95))}
		if m.AcceleratorCount > 0 {
			want = append(want, fmt.Sprintf("Gres=gpu:%s:%d", m.GresType, m.AcceleratorCount))
		}
		if f := sets[n.GetHostname()[:strings.LastIndex(n.GetHostname(), "-")]].GetFeatures(); len(f) > 0 {
			want = append(want, "AvailableFeatures="+strings.Join(f, ","))
		}
		cmd := exec.Command("scontrol", "show", "node", n.GetHostname())
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("scontrol show node %s: %v\n%s", n.GetHostname(), err, out)
		}
		for _, w := range want {
			if !strings.Contains(string(out), w) {
				t.Errorf("scontrol show node %s lacks %q:\n%s", n.GetHostname(), w, out)
			}
		}
	}
	// And the topology: every compute node under some switch, the spine over all.
	cmd = exec.Command("scontrol", "show", "topology")
	cmd.Env = env
	out, err = cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("scontrol show topology: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "SwitchName="+TopSwitch) {
		t.Errorf("topology lacks the top switch:\n%s", out)
	}
	var under []string
	for _, line := range strings.Split(string(out), "\n") {
		// Leaf switches are Level=0; the spine lists every node again.
		if !strings.Contains(line, " Level=0 ") {
			continue
		}
		for _, f := range strings.Fields(line) {
			if expr, ok := strings.CutPrefix(f, "Nodes="); ok {
				names, err := hostlist.Expand(expr)
				if err != nil {
					t.Fatal(err)
				}
				under = append(under, names...)
			}
		}
	}
	slices.Sort(under)
	var computeHosts []string
	for _, hs := range bySet {
		computeHosts = append(computeHosts, hs...)
	}
	slices.Sort(computeHosts)
	if !slices.Equal(under, computeHosts) {
		t.Errorf("switches hold %v, want every compute node once: %v\n%s", under, computeHosts, out)
	}
}

// startDaemon runs a daemon in the foreground as a child and stops it when
// the test ends: SIGTERM, then SIGKILL, for the child and for whatever pid
// its pidfile names. The function it returns fails once the daemon exited.
func startDaemon(t *testing.T, name, pidfile, logfile string, env []string, argv ...string) (alive func() error) {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		pids := []int{cmd.Process.Pid}
		if b, err := os.ReadFile(pidfile); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 1 && pid != cmd.Process.Pid {
				pids = append(pids, pid)
			}
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGTERM)
		}
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
		for _, pid := range pids[1:] {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		if t.Failed() {
			t.Logf("%s output:\n%s\n%s log:\n%s", name, out.String(), name, tail(logfile))
		}
	})
	// A daemon that dies (bad config) fails the wait on it with its reason.
	return func() error {
		select {
		case err := <-exited:
			exited <- err
			return fmt.Errorf("%s exited: %v\n%s\n%s", name, err, out.String(), tail(logfile))
		default:
			return nil
		}
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	_, port, err := net.SplitHostPort(testkit.FreeAddr())
	if err != nil {
		t.Fatal(err)
	}
	p, _ := strconv.Atoi(port)
	return p
}

// tail returns the end of a log file, for failure messages.
func tail(path string) string {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return "(no log)"
	}
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return fmt.Sprintf("%s", b)
}
