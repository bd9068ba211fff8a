package provisioner

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/proc"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/provisioner/internal/provider/local"
)

func remediateNode(t *testing.T, broker, node, id string, action loomv1.RemediationAction) {
	t.Helper()
	testkit.PublishAs(t, broker, "health", envelope.New(topics.RemediationCommand, node, "loom/health", &eventsv1.RemediateNode{
		Node: node, Cluster: filepath.Dir(filepath.Dir(node)), Action: action, RemediationId: id, Reason: "Xid 79: GPU has fallen off the bus",
	}))
}

func remediationFinished(t *testing.T, broker, id string) *eventsv1.RemediationFinished {
	t.Helper()
	return testkit.WaitEvent(t, broker, topics.NodeEvents, wait, func(ev envelope.Event) bool {
		f, ok := ev.Payload.(*eventsv1.RemediationFinished)
		return ok && f.GetRemediationId() == id
	}).Payload.(*eventsv1.RemediationFinished)
}

// plantStep starts a process group as an agent starts a step (its own
// group, a pidfile under <work dir>/steps) and returns a channel closed
// once it ended.
func plantStep(t *testing.T, workDir, id string) (int, <-chan struct{}) {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", "sleep 300 & wait")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	t.Cleanup(func() { _ = proc.KillGroup(pid, syscall.SIGKILL) })
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	start, _ := proc.StartTime(pid)
	if err := os.MkdirAll(filepath.Join(workDir, local.StepsDir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := proc.WritePIDFile(filepath.Join(workDir, local.StepsDir, id+".pid"), pid, start); err != nil {
		t.Fatal(err)
	}
	return pid, done
}

// TestRepairsWithRealAgents: health's repairs carried out on the local
// provider with real agent processes: a reboot kills the step a dead
// agent left and brings the agent back on a new boot; a second repair of
// the node meanwhile is refused; a reimage wipes the node's directory and
// the agent comes back with a new identity; a replace brings a new node
// up and removes the old one; a provisioner restarted in the middle of a
// repair finishes it, once.
func TestRepairsWithRealAgents(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/proc/self/environ"); err != nil {
		t.Skip("needs /proc")
	}
	f := &fixture{broker: testkit.Broker(t), data: t.TempDir()}
	f.redis, _ = testkit.Redis(t)
	t.Cleanup(func() { killAgents(f.data) })
	stop := f.run(t, false)
	name := project + "/clusters/fix"
	testkit.PublishAs(t, f.broker, "gateway", createCluster("fix", "fix", 2))
	waitRunning(t, f.broker, "fix")
	n1, n2 := name+"/nodes/gpu-0001", name+"/nodes/gpu-0002"
	work1, work2 := filepath.Join(f.data, "clusters", "fix", "nodes", "gpu-0001"), filepath.Join(f.data, "clusters", "fix", "nodes", "gpu-0002")

	// 1. Reboot. The agent died, leaving a step running (steps outlive it).
	boot1 := local.ReadBootID(work1)
	if len(boot1) != 32 {
		t.Fatalf("first boot id %q", boot1)
	}
	step, stepDone := plantStep(t, work1, "job-1.0")
	oldAgent := pidOf(t, work1)
	_ = syscall.Kill(-oldAgent, syscall.SIGKILL)
	if !proc.Alive(step, 0) {
		t.Fatal("the step died with its agent")
	}
	remediateNode(t, f.broker, n1, "rem-reboot", loomv1.RemediationAction_ACTION_REBOOT)
	remediateNode(t, f.broker, n1, "rem-again", loomv1.RemediationAction_ACTION_REIMAGE)
	nodeEvent(t, f.broker, n1, func(n *loomv1.Node) bool { return n.GetState() == loomv1.Node_REBOOTING })
	if again := remediationFinished(t, f.broker, "rem-again"); again.GetOk() || !strings.Contains(again.GetMessage(), "already being repaired") {
		t.Fatalf("second repair of a node = %v", again)
	}
	done := remediationFinished(t, f.broker, "rem-reboot")
	boot2 := local.ReadBootID(work1)
	if !done.GetOk() || boot2 == boot1 || len(boot2) != 32 || !strings.Contains(done.GetMessage(), boot2) {
		t.Fatalf("reboot finished %v; boot id %q → %q", done, boot1, boot2)
	}
	select {
	case <-stepDone:
	case <-time.After(wait):
		t.Fatal("the step left by the dead agent survived the reboot")
	}
	nodeEvent(t, f.broker, n1, func(n *loomv1.Node) bool { return n.GetState() == loomv1.Node_READY && n.GetReason() == "" })
	agent1 := pidOf(t, work1)
	if a := agents(t, n1); len(a) != 1 || a[0] != agent1 || agent1 == oldAgent {
		t.Fatalf("agents of %s after the reboot = %v (pidfile %d, before %d)", n1, a, agent1, oldAgent)
	}

	// 2. Reimage: everything the node had goes; the agent comes back with
	// a new identity (the provisioner's direct one here).
	planted := filepath.Join(work2, "planted.txt")
	if err := os.WriteFile(planted, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	oldID, err := os.ReadFile(filepath.Join(work2, agentIdentityFile))
	if err != nil {
		t.Fatal(err)
	}
	agent2 := pidOf(t, work2)
	remediateNode(t, f.broker, n2, "rem-reimage", loomv1.RemediationAction_ACTION_REIMAGE)
	if done := remediationFinished(t, f.broker, "rem-reimage"); !done.GetOk() {
		t.Fatalf("reimage = %v", done)
	}
	if _, err := os.Stat(planted); !os.IsNotExist(err) {
		t.Fatalf("the planted file survived the reimage: %v", err)
	}
	if id, err := os.ReadFile(filepath.Join(work2, agentIdentityFile)); err != nil || bytes.Equal(id, oldID) {
		t.Fatalf("identity after the reimage: %v (unchanged: %v)", err, bytes.Equal(id, oldID))
	}
	if !gone(agent2) {
		t.Fatal("the agent of the node's previous image still runs")
	}
	if a := agents(t, n2); len(a) != 1 || a[0] != pidOf(t, work2) {
		t.Fatalf("agents of %s after the reimage = %v", n2, a)
	}

	// 3. Replace: a new node joins, the old one is removed.
	remediateNode(t, f.broker, n1, "rem-replace", loomv1.RemediationAction_ACTION_REPLACE)
	done = remediationFinished(t, f.broker, "rem-replace")
	n3 := name + "/nodes/gpu-0003"
	if !done.GetOk() || done.GetReplacement() != n3 {
		t.Fatalf("replace = %v", done)
	}
	testkit.WaitEvent(t, f.broker, topics.NodeEvents, wait, func(ev envelope.Event) bool {
		r, ok := ev.Payload.(*eventsv1.NodeRemoved)
		return ok && r.Node == n1
	})
	nodeEvent(t, f.broker, n3, func(n *loomv1.Node) bool { return n.GetState() == loomv1.Node_READY })
	if _, err := os.Stat(work1); !os.IsNotExist(err) || !gone(agent1) || len(agents(t, n1)) != 0 {
		t.Fatalf("the replaced node lingers: dir %v, agent gone %v", err, gone(agent1))
	}
	work3 := filepath.Join(f.data, "clusters", "fix", "nodes", "gpu-0003")
	if a := agents(t, n3); len(a) != 1 || len(local.ReadBootID(work3)) != 32 {
		t.Fatalf("replacement agents %v, boot id %q", a, local.ReadBootID(work3))
	}
	cl := clusterEvent(t, f.broker, func(c *eventsv1.ClusterChanged) bool {
		return c.Cluster.GetName() == name && c.Cluster.GetStatus().GetMessage() == "2 of 2 nodes ready"
	})
	if cl.Cluster.GetStatus().GetTotalNodes() != 2 {
		t.Fatalf("cluster after the replace = %v", cl.Cluster.GetStatus())
	}

	// 4. The provisioner stops in the middle of a reboot; the next one
	// finishes it, once, with one agent.
	agent3 := pidOf(t, work3)
	remediateNode(t, f.broker, n3, "rem-crash", loomv1.RemediationAction_ACTION_REBOOT)
	nodeEvent(t, f.broker, n3, func(n *loomv1.Node) bool { return n.GetState() == loomv1.Node_REBOOTING })
	if err := stop(); err != nil {
		t.Fatalf("provisioner stop: %v", err)
	}
	f.run(t, false)
	if done := remediationFinished(t, f.broker, "rem-crash"); !done.GetOk() {
		t.Fatalf("reboot across a restart = %v", done)
	}
	nodeEvent(t, f.broker, n3, func(n *loomv1.Node) bool { return n.GetState() == loomv1.Node_READY })
	var count int
	for _, ev := range testkit.Delivered(t, f.broker, topics.NodeEvents) {
		if fin, ok := ev.Payload.(*eventsv1.RemediationFinished); ok && fin.GetRemediationId() == "rem-crash" {
			count++
		}
	}
	if a := agents(t, n3); count != 1 || len(a) != 1 || a[0] == agent3 || !gone(agent3) {
		t.Fatalf("after the restart: %d RemediationFinished, agents %v (before %d)", count, a, agent3)
	}
}

// TestSimProviderCarriesOutRepairs: on the sim provider a reboot and a
// replace take their simulated times (3 min and 1 h at 1/1000 speed) and
// end like the local provider's.
func TestSimProviderCarriesOutRepairs(t *testing.T) {
	t.Parallel()
	f := startSim(t)
	name := project + "/clusters/simfix"
	testkit.PublishAs(t, f.broker, "gateway", envelope.New(topics.ClusterCommands, name, "loom/gateway",
		&eventsv1.CreateCluster{Operation: project + "/operations/simfix", Cluster: clusterSpec(name, 2)}))
	waitRunning(t, f.broker, "simfix")

	n1, n2 := name+"/nodes/gpu-0001", name+"/nodes/gpu-0002"
	begin := time.Now()
	remediateNode(t, f.broker, n1, "sim-reboot", loomv1.RemediationAction_ACTION_RESET_GPU)
	remediateNode(t, f.broker, n2, "sim-replace", loomv1.RemediationAction_ACTION_REPLACE)
	if done := remediationFinished(t, f.broker, "sim-reboot"); !done.GetOk() || !strings.Contains(done.GetMessage(), "GPUs reset") {
		t.Fatalf("reboot = %v", done)
	}
	done := remediationFinished(t, f.broker, "sim-replace")
	if !done.GetOk() || done.GetReplacement() != name+"/nodes/gpu-0003" {
		t.Fatalf("replace = %v", done)
	}
	// One simulated hour at 1/1000 speed is 3.6 s: the replacement took it.
	if took := time.Since(begin); took < 3600*time.Millisecond {
		t.Fatalf("the simulated replacement took %v, less than its hour at 1/1000", took)
	}
	for _, ev := range testkit.Events(t, f.broker, topics.NodeTelemetry) {
		if r, ok := ev.Payload.(*eventsv1.AgentRegistered); ok && r.GetNode() == name+"/nodes/gpu-0003" && r.GetHostBootId() == "" {
			t.Fatalf("the replacement registered without a host boot id: %v", r)
		}
	}
}
