package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/prototext"

	"github.com/loom-ml/loom/cmd/loom/stack"
	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// trainArgs is the training run both resilience tests use: long enough (with
// --step-time) to be interrupted, with a checkpoint every 10 epochs.
var trainArgs = []string{"train", "--epochs", "240", "--checkpoint-every", "10", "--log-every", "10"}

// referenceModel trains uninterrupted, outside Loom, and returns the model file.
func referenceModel(t *testing.T, loom string) []byte {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command(loom, append(append([]string(nil), trainArgs...), "--out", dir)...)
	cmd.Env = append(os.Environ(), "LOOM_CHECKPOINT_DIR=", "AIP_CHECKPOINT_DIR=", "LOOM_PROGRESS_FILE=")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("reference run: %v\n%s", err, out)
	}
	b, err := os.ReadFile(filepath.Join(dir, "model.json"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// registeredModel waits for the first version of model (in the default
// project) to be registered and returns its model.json.
func registeredModel(t *testing.T, gw *grpc.ClientConn, model string) []byte {
	t.Helper()
	reg := loomv1.NewModelServiceClient(gw)
	var uri string
	testkit.WaitFor(t, 30*time.Second, "model version registered", func() (bool, error) {
		v, err := reg.ListModelVersions(waitCtx(t, 5*time.Second), &loomv1.ListModelVersionsRequest{
			Parent: "projects/default/models/" + model})
		if err != nil || len(v.Versions) == 0 {
			return false, nil
		}
		uri = v.Versions[0].ArtifactUri
		return true, nil
	})
	b, err := os.ReadFile(filepath.Join(strings.TrimPrefix(uri, "file://"), "model.json"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// nodeHealth returns health's view of one node of the cluster.
func nodeHealth(t *testing.T, conn *grpc.ClientConn, cluster, host string) (*loomv1.NodeHealth, error) {
	resp, err := loomv1.NewHealthServiceClient(conn).ListNodeHealth(waitCtx(t, 5*time.Second),
		&loomv1.ListNodeHealthRequest{Cluster: cluster})
	if err != nil {
		return nil, err
	}
	for _, n := range resp.Nodes {
		if n.Hostname == host {
			return n, nil
		}
	}
	return nil, nil
}

// outThenRepaired waits up to within until health has published, for
// node, a verdict taking it out that out accepts and, after it, the node
// back in service after a repair; it returns both. Read from health's
// events: a local repair and its confirm take about a second, less than a
// poll of the node's state may see.
func outThenRepaired(t *testing.T, broker, node string, within time.Duration, out func(*eventsv1.NodeHealthChanged) bool) (taken, back *eventsv1.NodeHealthChanged) {
	t.Helper()
	testkit.WaitFor(t, within, node+" taken out, then repaired", func() (bool, error) {
		taken = nil
		for _, e := range testkit.Events(t, broker, topics.HealthEvents) {
			h, ok := e.Payload.(*eventsv1.NodeHealthChanged)
			switch {
			case !ok || h.GetNode() != node:
			case h.GetState() != loomv1.RemediationState_NODE_HEALTHY:
				if taken == nil && out(h) {
					taken = h
				}
			case taken != nil && h.GetRepaired():
				back = h
				return true, nil
			}
		}
		return false, nil
	})
	return taken, back
}

// checkpointDir is where job's `loom train` writes its checkpoints
// ($LOOM_CHECKPOINT_DIR, which the scheduler sets): the job's
// checkpoint_dir when it has one, else <shared>/checkpoints/<job id>.
func checkpointDir(cl *loomv1.Cluster, j *loomv1.Job) string {
	switch {
	case filepath.IsAbs(j.CheckpointDir):
		return j.CheckpointDir
	case j.CheckpointDir != "": // relative: under the shared dir
		return filepath.Join(cl.GetStatus().GetSharedDir(), j.CheckpointDir)
	}
	return filepath.Join(cl.GetStatus().GetSharedDir(), "checkpoints", j.JobId)
}

// waitJob waits for the job to reach a terminal state and returns it.
func waitJob(t *testing.T, jobs loomv1.JobServiceClient, name string, within time.Duration) *loomv1.Job {
	t.Helper()
	var j *loomv1.Job
	testkit.WaitFor(t, within, "job "+name+" ends", func() (bool, error) {
		got, err := jobs.GetJob(waitCtx(t, 5*time.Second), &loomv1.GetJobRequest{Name: name})
		if err != nil {
			return false, nil
		}
		j = got
		return got.State.Terminal(), nil
	})
	return j
}

// TestXid79DrainsRepairsAndResumesFromCheckpoint is the end-to-end
// case: a 2-node training job runs, Xid 79 (GPU fallen off the bus) is
// injected on one of its nodes, the node is drained and repaired, and the job
// resumes from its checkpoint on healthy nodes and finishes with the very
// model an uninterrupted run writes. The checkpoint it resumes from is the
// one the surviving node wrote on the failure's USR1 (checkpoint on
// failure, the scheduler's default), or a later one the survivor wrote
// before its stop landed.
func TestXid79DrainsRepairsAndResumesFromCheckpoint(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the loom binary; skipped with -short")
	}
	loom := filepath.Join(binaries(t), "loom")
	want := referenceModel(t, loom)

	// The agents report progress only after they signalled a step (every
	// 100 ms then): when the node fails, the scheduler has heard nothing of
	// the run's progress, and checkpoint on failure must wait for the
	// survivor anyway (as for a run in its first progress interval, or a
	// program that does not report progress).
	s := startStackWith(t, inProcess, func(o *stack.Options) {
		o.AgentEnv = append(o.AgentEnv, "LOOM_PROGRESS_INTERVAL=1h")
	})
	gw := dialGateway(t, s)
	cl := createCluster(t, gw, "xid79", &loomv1.NodePool{Id: "gpu", MachineType: "a3-highgpu-1g",
		NodeCount: 3, AcceleratorType: "nvidia-h100-80gb", AcceleratorCount: 1})

	jobs := loomv1.NewJobServiceClient(gw)
	job, err := jobs.SubmitJob(waitCtx(t, 10*time.Second), &loomv1.SubmitJobRequest{Parent: "projects/default",
		Job: &loomv1.Job{Cluster: cl.Name, DisplayName: "xid79", NodeCount: 2, GpusPerNode: 1,
			Command:     append(append([]string{loom}, trainArgs...), "--step-time", "40ms"),
			ModelOutput: &loomv1.ModelOutput{ModelId: "xid79-model"}}})
	if err != nil {
		t.Fatal(err)
	}
	// Running, with a checkpoint written: the failure comes mid-training.
	// Checkpoints go to the job's checkpoint directory (LOOM_CHECKPOINT_DIR),
	// the same for all its runs.
	var running *loomv1.Job
	var last loomv1.JobState
	testkit.WaitFor(t, 60*time.Second, "job running with a checkpoint", func() (bool, error) {
		j, err := jobs.GetJob(waitCtx(t, 5*time.Second), &loomv1.GetJobRequest{Name: job.Name})
		if err == nil && j.State != last {
			last = j.State
			t.Logf("job %s: %v (%s) on %v, checkpoint_dir %q", job.Name, j.State, j.StateReason, j.Nodes, j.CheckpointDir)
		}
		if err == nil && j.State.Terminal() {
			out, _ := os.ReadFile(j.OutputPath)
			t.Fatalf("job ended %v (%s) before the fault:\n%s", j.State, j.StateReason, out)
		}
		if err != nil || j.State != loomv1.JobState_RUNNING {
			return false, nil
		}
		running = j
		m, _ := filepath.Glob(filepath.Join(checkpointDir(cl, j), "checkpoint-*"))
		return len(m) > 0, nil
	})
	if len(running.Nodes) != 2 {
		t.Fatalf("job runs on %v, want 2 nodes", running.Nodes)
	}
	bad := running.Nodes[1]
	health := loomv1.NewHealthServiceClient(gw)
	if _, err := health.InjectFault(waitCtx(t, 5*time.Second), &loomv1.InjectFaultRequest{Cluster: cl.Name, Hostname: bad,
		Fault: &loomv1.Fault{Kind: loomv1.FaultKind_FAULT_XID, Gpu: 0, Xid: 79}}); err != nil {
		t.Fatal(err)
	}

	// The node leaves service (drained, then repaired) and comes back
	// healthy.
	taken, repaired := outThenRepaired(t, s.BrokerAddr, cl.Name+"/nodes/"+bad, 120*time.Second,
		func(*eventsv1.NodeHealthChanged) bool { return true })
	back := repaired.GetTime().AsTime() // when health put it back
	if !strings.Contains(taken.GetReason(), "Xid 79") {
		t.Errorf("node %s was taken out %v with reason %q, want one naming Xid 79", bad, taken.GetState(), taken.GetReason())
	}

	end := waitJob(t, jobs, job.Name, 180*time.Second)
	if end.State != loomv1.JobState_COMPLETED {
		t.Fatalf("job ended %v (%s)", end.State, end.StateReason)
	}
	if end.RestartCount < 1 || len(end.Runs) < 2 {
		t.Fatalf("job completed with %d restarts and runs %v: it was never interrupted", end.RestartCount, end.Runs)
	}
	first := end.Runs[0]
	if first.State != loomv1.JobState_NODE_FAIL || !strings.Contains(first.Reason, "Xid 79") {
		t.Errorf("first run ended %v (%q), want NODE_FAIL naming Xid 79", first.State, first.Reason)
	}
	for _, r := range end.Runs[1:] {
		for _, n := range r.Nodes {
			if n == bad && r.StartTime.AsTime().Before(back) {
				t.Errorf("run %d was placed on the failed node %s before it was repaired", r.Attempt, bad)
			}
		}
	}
	// The same model as an uninterrupted run, byte for byte.
	if got := registeredModel(t, gw, "xid79-model"); !bytes.Equal(got, want) {
		t.Errorf("the resumed job's model differs from an uninterrupted run's:\n got %s\nwant %s", got, want)
	}
	out, err := os.ReadFile(end.OutputPath)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "resuming from checkpoint") {
		t.Errorf("the second run did not resume from a checkpoint:\n%s", out)
	}
	// Checkpoint on failure: the surviving rank (0, which writes the
	// checkpoints) was sent USR1 before it was stopped, wrote a checkpoint
	// for it, and the next run resumed from that one or a newer one, not
	// from the last periodic checkpoint before the failure. A newer one: the
	// survivor trains on until its stop lands, and when that takes it past
	// a periodic checkpoint (every 10 epochs; a loaded machine is slow to
	// deliver the stop) that one is the latest.
	o := string(out)
	sig := regexp.MustCompile(`checkpoint at epoch (\d+) written \(requested by signal\)`).FindAllStringSubmatchIndex(o, -1)
	if len(sig) == 0 {
		t.Errorf("the survivor wrote no checkpoint on the failure's signal:\n%s", o)
	} else {
		last := sig[len(sig)-1]
		saved, _ := strconv.Atoi(o[last[2]:last[3]])
		res := regexp.MustCompile(`resuming from checkpoint at epoch (\d+) `).FindStringSubmatch(o[last[1]:])
		from := -1
		if res != nil {
			from, _ = strconv.Atoi(res[1])
		}
		if from < saved {
			t.Errorf("the next run resumed from epoch %d, before the survivor's checkpoint at epoch %d:\n%s", from, saved, o)
		} else {
			t.Logf("the survivor checkpointed at epoch %d on the failure's signal; the next run resumed from epoch %d", saved, from)
		}
	}
	// What the failure cost, through the gateway: a failure, the restart,
	// the trainer's timed saves (forwarded by the agent), and parts that
	// add up to the wall time.
	goodput := loomv1.NewGoodputServiceClient(gw)
	gp, err := goodput.GetJobGoodput(waitCtx(t, 5*time.Second),
		&loomv1.GetJobGoodputRequest{Name: job.Name})
	if err != nil {
		t.Fatal(err)
	}
	parts := gp.Productive.AsDuration() + gp.LostRecompute.AsDuration() + gp.LostRestart.AsDuration() +
		gp.LostQueueing.AsDuration() + gp.LostCheckpointing.AsDuration()
	if gp.Failures < 1 || gp.Restarts < 1 || gp.LostRestart.AsDuration() <= 0 || gp.LostCheckpointing.AsDuration() <= 0 ||
		parts != gp.Wall.AsDuration() || gp.Goodput <= 0 || gp.Goodput >= 1 {
		t.Errorf("goodput of the interrupted job: %v", gp)
	}
	// The survivor's checkpoint came after the failed run's end, before it
	// was stopped: none of that run is lost to recompute.
	if gp.LostRecompute.AsDuration() != 0 {
		t.Errorf("lost to recompute %v after a checkpoint on failure, want 0", gp.LostRecompute.AsDuration())
	}
	t.Logf("goodput: %v", gp)
}

// TestXid13RestartsTheJobWithoutDrainingTheNode: an application Xid (13,
// graphics engine exception: RESTART_APP) restarts the job; the node stays in
// service.
func TestXid13RestartsTheJobWithoutDrainingTheNode(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the loom binary; skipped with -short")
	}
	loom := filepath.Join(binaries(t), "loom")
	s := startStack(t, inProcess)
	gw := dialGateway(t, s)
	cl := createCluster(t, gw, "xid13", &loomv1.NodePool{Id: "gpu", MachineType: "a3-highgpu-1g",
		NodeCount: 1, AcceleratorType: "nvidia-h100-80gb", AcceleratorCount: 1})
	jobs := loomv1.NewJobServiceClient(gw)
	job, err := jobs.SubmitJob(waitCtx(t, 10*time.Second), &loomv1.SubmitJobRequest{Parent: "projects/default",
		Job: &loomv1.Job{Cluster: cl.Name, DisplayName: "xid13", NodeCount: 1, GpusPerNode: 1,
			Command:     append(append([]string{loom}, trainArgs...), "--step-time", "30ms"),
			ModelOutput: &loomv1.ModelOutput{ModelId: "xid13-model"}}})
	if err != nil {
		t.Fatal(err)
	}
	var host string
	var last loomv1.JobState
	testkit.WaitFor(t, 60*time.Second, "job running", func() (bool, error) {
		j, err := jobs.GetJob(waitCtx(t, 5*time.Second), &loomv1.GetJobRequest{Name: job.Name})
		if err == nil && j.State != last {
			last = j.State
			t.Logf("job %s: %v (%s) nodes %v", job.Name, j.State, j.StateReason, j.Nodes)
		}
		if err == nil && j.State.Terminal() {
			out, _ := os.ReadFile(j.OutputPath)
			t.Fatalf("job ended %v (%s) before the fault:\n%s", j.State, j.StateReason, out)
		}
		if err != nil || j.State != loomv1.JobState_RUNNING || len(j.Nodes) == 0 {
			return false, nil
		}
		host = j.Nodes[0]
		return true, nil
	})
	if _, err := loomv1.NewHealthServiceClient(gw).InjectFault(waitCtx(t, 5*time.Second), &loomv1.InjectFaultRequest{
		Cluster: cl.Name, Hostname: host, Fault: &loomv1.Fault{Kind: loomv1.FaultKind_FAULT_XID, Gpu: 0, Xid: 13}}); err != nil {
		t.Fatal(err)
	}
	slurm := loomv1.NewSlurmServiceClient(gw)
	end := waitJob(t, jobs, job.Name, 120*time.Second)
	if end.State != loomv1.JobState_COMPLETED || end.RestartCount < 1 {
		out, _ := os.ReadFile(end.OutputPath)
		t.Fatalf("job ended %v after %d restarts (%s), runs %v, want COMPLETED after a restart; its output:\n%s",
			end.State, end.RestartCount, end.StateReason, end.Runs, out)
	}
	// The one node ran both runs: it was never taken out.
	if n := end.Runs[len(end.Runs)-1].Nodes; len(n) != 1 || n[0] != host {
		t.Errorf("last run on %v, want %s", n, host)
	}
	nodes, err := slurm.ListSlurmNodes(waitCtx(t, 5*time.Second), &loomv1.ListSlurmNodesRequest{Cluster: cl.Name})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Nodes {
		if n.State == loomv1.SlurmNode_DRAINING || n.State == loomv1.SlurmNode_DRAINED || n.State == loomv1.SlurmNode_DOWN {
			t.Errorf("node %s is %v (%s) after an application Xid", n.Hostname, n.State, n.Reason)
		}
	}
	if h, err := nodeHealth(t, gw, cl.Name, host); err != nil || h == nil || h.State != loomv1.RemediationState_NODE_HEALTHY {
		t.Errorf("node health after Xid 13: %v (%v), want NODE_HEALTHY", h, err)
	}
}

// TestTelemetryFaultsTakeNodesOut: each fault the GPU telemetry shows — a
// double-bit ECC error, single-bit errors at a rising rate, a row remapping
// failure, thermal runaway, NVLink errors, a full disk — goes the whole way
// on real processes: the simulated device behind the agent's NVML-shaped
// sampling, the agent's GpuTelemetry (and XidObserved, for the faults the
// driver also reports as an Xid), health's classification, its verdict on
// loom.health.events.v1 taking the node out with the reason an operator
// reads in sinfo -R, and the repair: the node back HEALTHY once the repair
// is confirmed, or replaced, or (the single-bit rate) the ladder climbing
// past a GPU reset. (Xid 79 and Xid 13 have their own tests above.)
func TestTelemetryFaultsTakeNodesOut(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs a cluster of agent processes; skipped with -short")
	}
	s := startStackWith(t, inProcess, func(o *stack.Options) {
		// A sample every second (the least), not every ten: rates need two.
		o.AgentEnv = append(o.AgentEnv, "LOOM_TELEMETRY_INTERVAL=1s")
		// Every node in repair at once: by default one of six would be,
		// and the others would wait their turn, drained.
		o.HealthArgs = append(o.HealthArgs, "-max-remediating=1")
	})
	gw := dialGateway(t, s)
	// then values that are not a reason: replaced (the node is being
	// replaced), reimaged (a GPU reset did not stop the fault, the ladder
	// climbed to a reimage, and the reimaged node was confirmed HEALTHY).
	const replaced, reimaged = "replaced", "reimaged"
	faults := []struct {
		fault *loomv1.Fault
		// reasons are what the verdict's reason may start with: the
		// telemetry's, or the Xid the driver raises with the fault, which
		// the event path may judge first.
		reasons []string
		// then is the repair's end: "repaired (" (HEALTHY), or replaced.
		then string
	}{
		{&loomv1.Fault{Kind: loomv1.FaultKind_FAULT_ECC_DBE, Gpu: 0, Value: 1}, []string{"ECC: 1 double-bit errors on GPU 0", "Xid 48: "}, "repaired ("},
		// The simulated single-bit rate outlives a GPU reset (the card is
		// degrading): the ladder climbs to a reimage, which wipes the
		// injection, and the reimaged node's confirm passes. (The reimage
		// often kills the agent that had just restarted after the reset,
		// in the middle of joining its command groups: the new agent must
		// read its commands at once all the same; see bus.keyBalancer.)
		{&loomv1.Fault{Kind: loomv1.FaultKind_FAULT_ECC_SBE, Gpu: 0, Value: 6000}, []string{"ECC: single-bit errors at"}, reimaged},
		{&loomv1.Fault{Kind: loomv1.FaultKind_FAULT_ROW_REMAP_FAILURE, Gpu: 0}, []string{"row remapping failure on GPU 0", "Xid 64: "}, replaced},
		{&loomv1.Fault{Kind: loomv1.FaultKind_FAULT_THERMAL, Gpu: 0, Value: 10}, []string{"thermal: GPU 0 throttling at"}, "repaired ("},
		{&loomv1.Fault{Kind: loomv1.FaultKind_FAULT_NVLINK, Gpu: 0, Value: 6000}, []string{"NVLink: ", "Xid 74: "}, "repaired ("},
		{&loomv1.Fault{Kind: loomv1.FaultKind_FAULT_DISK_FULL, Gpu: -1}, []string{"disk full: "}, "repaired ("},
	}
	cl := createCluster(t, gw, "telemetry", &loomv1.NodePool{Id: "gpu", MachineType: "a3-highgpu-1g",
		NodeCount: int32(len(faults)), AcceleratorType: "nvidia-h100-80gb", AcceleratorCount: 1})
	nodes, err := loomv1.NewSlurmServiceClient(gw).ListSlurmNodes(waitCtx(t, 10*time.Second), &loomv1.ListSlurmNodesRequest{Cluster: cl.Name})
	if err != nil || len(nodes.GetNodes()) != len(faults) {
		t.Fatalf("nodes of %s: %v (%v), want %d", cl.Name, nodes, err, len(faults))
	}
	health := loomv1.NewHealthServiceClient(gw)
	for i, f := range faults {
		host := nodes.GetNodes()[i].GetHostname()
		if _, err := health.InjectFault(waitCtx(t, 5*time.Second), &loomv1.InjectFaultRequest{Cluster: cl.Name, Hostname: host, Fault: f.fault}); err != nil {
			t.Fatalf("inject %v on %s: %v", f.fault.GetKind(), host, err)
		}
	}
	// verdict waits for the node's first health event that matches, and
	// says what the node went through when none comes (repairs on a loaded
	// machine take a while: the deadline is generous, the wait a poll).
	verdict := func(node, what string, match func(*eventsv1.NodeHealthChanged) bool) *eventsv1.NodeHealthChanged {
		t.Helper()
		var found *eventsv1.NodeHealthChanged
		var seen []string
		defer func() {
			if found == nil {
				t.Logf("%s's health events: %s", node, strings.Join(seen, "; "))
				host := node[strings.LastIndexByte(node, '/')+1:]
				for _, topic := range []string{topics.NodeCommands, topics.NodeEvents, topics.RemediationCommand} {
					for _, e := range testkit.Events(t, s.BrokerAddr, topic) {
						if e.Key != node {
							continue
						}
						txt := prototext.MarshalOptions{}.Format(e.Payload)
						if len(txt) > 400 {
							txt = txt[:400]
						}
						t.Logf("%s %s %s %s", e.Time.Format("15:04:05.000"), topic, e.Type, txt)
					}
				}
				if b, err := os.ReadFile(filepath.Join(s.DataDir, "provisioner", "clusters", "telemetry", "nodes", host, "agent.log")); err == nil {
					lines := strings.Split(string(b), "\n")
					t.Logf("the end of its agent's log:\n%s", strings.Join(lines[max(0, len(lines)-80):], "\n"))
				}
			}
		}()
		testkit.WaitFor(t, 3*time.Minute, node+": "+what, func() (bool, error) {
			seen = seen[:0]
			for _, e := range testkit.Events(t, s.BrokerAddr, topics.HealthEvents) {
				h, ok := e.Payload.(*eventsv1.NodeHealthChanged)
				if !ok || h.GetNode() != node {
					continue
				}
				seen = append(seen, fmt.Sprintf("%v %q", h.GetState(), h.GetReason()))
				if match(h) {
					found = h
					return true, nil
				}
			}
			return false, nil
		})
		return found
	}
	for i, f := range faults {
		node := nodes.GetNodes()[i].GetNode()
		out := verdict(node, "out of service for "+f.fault.GetKind().String(), func(h *eventsv1.NodeHealthChanged) bool {
			if h.GetState() == loomv1.RemediationState_NODE_HEALTHY {
				return false
			}
			for _, r := range f.reasons {
				if strings.HasPrefix(h.GetReason(), r) {
					return true
				}
			}
			return false
		})
		if out.GetSetBy() != "loom-health" {
			t.Errorf("%v: verdict set by %q, want loom-health", f.fault.GetKind(), out.GetSetBy())
		}
		back := verdict(node, "repaired or replaced", func(h *eventsv1.NodeHealthChanged) bool {
			switch f.then {
			case replaced:
				return h.GetState() == loomv1.RemediationState_NODE_REPLACING
			case reimaged:
				return h.GetState() == loomv1.RemediationState_NODE_HEALTHY && h.GetRepaired() && strings.HasPrefix(h.GetReason(), "repaired (reimage")
			}
			return h.GetState() == loomv1.RemediationState_NODE_HEALTHY && h.GetRepaired() && strings.HasPrefix(h.GetReason(), f.then)
		})
		t.Logf("%v on %s: %v %q, then %v %q", f.fault.GetKind(), node, out.GetState(), out.GetReason(), back.GetState(), back.GetReason())
		if f.then != replaced {
			continue
		}
		// The history (loom health events) says which node took its place.
		host := nodes.GetNodes()[i].GetHostname()
		var evs []*loomv1.NodeHealthEvent
		testkit.WaitFor(t, 2*time.Minute, host+"'s history saying what replaced it", func() (bool, error) {
			resp, err := health.ListNodeHealthEvents(waitCtx(t, 5*time.Second), &loomv1.ListNodeHealthEventsRequest{Cluster: cl.Name, Hostnames: []string{host}})
			if err != nil {
				return false, nil
			}
			evs = resp.GetEvents()
			return len(evs) > 0 && strings.HasPrefix(evs[0].GetReason(), "replaced by gpu-") && evs[0].GetRepaired(), nil
		})
	}
}

// TestSiteCheckThroughAScan: a site's own check program (a file in the
// agents' -check-dir) runs through a scan as the built-in checks do: the
// scan asks each node, the agent runs the program, its JSON answer (a
// summary and metrics) or its exit status and last stderr line become the
// stored result, and a failure takes the node out with that line as the
// reason, on loom.health.events.v1; the node that passed stays in.
func TestSiteCheckThroughAScan(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs a cluster of agent processes; skipped with -short")
	}
	dir := t.TempDir()
	prog := `#!/bin/sh
# ib_ports: every InfiniBand port up (one node's port 3 is down here).
if [ "$LOOM_CHECK_HOSTNAME" = gpu-0002 ]; then
  echo "checking 4 ports"
  echo "ib port 3 down" >&2
  exit 1
fi
echo '{"summary":"4/4 ports up","metrics":{"ports":4}}'
`
	if err := os.WriteFile(filepath.Join(dir, "ib_ports"), []byte(prog), 0o755); err != nil {
		t.Fatal(err)
	}
	s := startStackWith(t, inProcess, func(o *stack.Options) {
		o.AgentEnv = append(o.AgentEnv, "LOOM_AGENT_CHECK_DIR="+dir)
	})
	gw := dialGateway(t, s)
	cl := createCluster(t, gw, "site", &loomv1.NodePool{Id: "gpu", MachineType: "a3-highgpu-1g",
		NodeCount: 2, AcceleratorType: "nvidia-h100-80gb", AcceleratorCount: 1})
	hs := loomv1.NewHealthServiceClient(gw)
	var scan *loomv1.ScanNodesResponse
	testkit.WaitFor(t, 30*time.Second, "a scan of both nodes accepted", func() (bool, error) {
		var err error
		scan, err = hs.ScanNodes(waitCtx(t, 5*time.Second), &loomv1.ScanNodesRequest{Cluster: cl.Name, Checks: []string{"ib_ports"},
			Hostnames: []string{"gpu-[0001-0002]"}})
		return err == nil, nil // health may not know both nodes yet
	})
	results := map[string]*loomv1.HealthCheckResult{}
	testkit.WaitFor(t, 60*time.Second, "both nodes' ib_ports results", func() (bool, error) {
		resp, err := hs.ListHealthResults(waitCtx(t, 5*time.Second), &loomv1.ListHealthResultsRequest{Cluster: cl.Name, ScanId: scan.GetScanId()})
		if err != nil {
			return false, nil
		}
		for _, r := range resp.GetResults() {
			results[r.GetHostname()] = r
		}
		return len(results) == 2, nil
	})
	if r := results["gpu-0001"]; r.GetOutcome() != loomv1.CheckOutcome_CHECK_PASS || r.GetSummary() != "4/4 ports up" || r.GetMetrics()["ports"] != 4 || r.GetCheck() != "ib_ports" {
		t.Errorf("gpu-0001's result: %v; want PASS with the program's summary and metric", r)
	}
	if r := results["gpu-0002"]; r.GetOutcome() != loomv1.CheckOutcome_CHECK_FAIL || !strings.Contains(r.GetSummary(), "ib port 3 down") ||
		!strings.Contains(r.GetDetail(), "checking 4 ports") {
		t.Errorf("gpu-0002's result: %v; want FAIL with its stderr in the summary and its stdout in the detail", r)
	}
	node := cl.Name + "/nodes/gpu-0002"
	ev := testkit.WaitEvent(t, s.BrokerAddr, topics.HealthEvents, 60*time.Second, func(e envelope.Event) bool {
		h, ok := e.Payload.(*eventsv1.NodeHealthChanged)
		return ok && h.GetNode() == node && h.GetState() != loomv1.RemediationState_NODE_HEALTHY && strings.Contains(h.GetReason(), "ib port 3 down")
	})
	t.Logf("gpu-0002: %v %q", ev.Payload.(*eventsv1.NodeHealthChanged).GetState(), ev.Payload.(*eventsv1.NodeHealthChanged).GetReason())
	if h, err := nodeHealth(t, gw, cl.Name, "gpu-0001"); err != nil || h.GetState() != loomv1.RemediationState_NODE_HEALTHY {
		t.Errorf("gpu-0001 after its pass: %v (%v), want HEALTHY", h, err)
	}
}

// TestHungJobIsRequeuedAndItsNodeChecked is hang detection end to end on
// real processes: a training job runs with a hang timeout of 4s; the hung
// job fault (the agent stops the node's step processes, as a deadlocked
// collective leaves them) makes its progress stop; the scheduler ends the
// run as hung and requeues it (an infrastructure restart: the user's retry
// budget is untouched), and health checks the node (trigger "hang"). Once
// the fault is cleared the job resumes from its checkpoint and finishes
// with the very model an uninterrupted run writes.
func TestHungJobIsRequeuedAndItsNodeChecked(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the loom binary; skipped with -short")
	}
	loom := filepath.Join(binaries(t), "loom")
	want := referenceModel(t, loom)
	// Progress is reported every 200ms: a healthy run is never 4s silent.
	s := startStackWith(t, inProcess, func(o *stack.Options) {
		o.AgentEnv = append(o.AgentEnv, "LOOM_PROGRESS_INTERVAL=200ms")
	})
	gw := dialGateway(t, s)
	cl := createCluster(t, gw, "hang", &loomv1.NodePool{Id: "gpu", MachineType: "a3-highgpu-1g",
		NodeCount: 1, AcceleratorType: "nvidia-h100-80gb", AcceleratorCount: 1})
	jobs := loomv1.NewJobServiceClient(gw)
	job, err := jobs.SubmitJob(waitCtx(t, 10*time.Second), &loomv1.SubmitJobRequest{Parent: "projects/default",
		Job: &loomv1.Job{Cluster: cl.Name, DisplayName: "hang", NodeCount: 1, GpusPerNode: 1, HangTimeoutSeconds: 4,
			Command:     append(append([]string{loom}, trainArgs...), "--step-time", "40ms"),
			ModelOutput: &loomv1.ModelOutput{ModelId: "hang-model"}}})
	if err != nil {
		t.Fatal(err)
	}
	var host string
	testkit.WaitFor(t, 60*time.Second, "job running with a checkpoint", func() (bool, error) {
		j, err := jobs.GetJob(waitCtx(t, 5*time.Second), &loomv1.GetJobRequest{Name: job.Name})
		if err == nil && j.State.Terminal() {
			out, _ := os.ReadFile(j.OutputPath)
			t.Fatalf("job ended %v (%s) before the fault:\n%s", j.State, j.StateReason, out)
		}
		if err != nil || j.State != loomv1.JobState_RUNNING || len(j.Nodes) != 1 {
			return false, nil
		}
		host = j.Nodes[0]
		m, _ := filepath.Glob(filepath.Join(checkpointDir(cl, j), "checkpoint-*"))
		return len(m) > 0, nil
	})
	health := loomv1.NewHealthServiceClient(gw)
	inject := func(kind loomv1.FaultKind) {
		t.Helper()
		if _, err := health.InjectFault(waitCtx(t, 5*time.Second), &loomv1.InjectFaultRequest{Cluster: cl.Name, Hostname: host,
			Fault: &loomv1.Fault{Kind: kind, Gpu: -1}}); err != nil {
			t.Fatal(err)
		}
	}
	inject(loomv1.FaultKind_FAULT_HUNG_JOB)

	// The run is ended as hung and the job requeued.
	testkit.WaitFor(t, 60*time.Second, "the run ended as hung", func() (bool, error) {
		j, err := jobs.GetJob(waitCtx(t, 5*time.Second), &loomv1.GetJobRequest{Name: job.Name})
		if err != nil || len(j.Runs) == 0 {
			return false, nil
		}
		r := j.Runs[0]
		if r.State.Terminal() && !strings.HasPrefix(r.Reason, "hung: no progress for 4s") {
			t.Fatalf("the first run ended %v (%q), want hung", r.State, r.Reason)
		}
		return r.State == loomv1.JobState_NODE_FAIL, nil
	})
	// Health checks the node the hung run held.
	var hangResults []*loomv1.HealthCheckResult
	testkit.WaitFor(t, 60*time.Second, "health's checks of "+host+" for the hang", func() (bool, error) {
		res, err := health.ListHealthResults(waitCtx(t, 5*time.Second), &loomv1.ListHealthResultsRequest{Cluster: cl.Name, Hostname: host})
		if err != nil {
			return false, nil
		}
		hangResults = hangResults[:0]
		for _, r := range res.Results {
			if r.Trigger == "hang" {
				hangResults = append(hangResults, r)
			}
		}
		return len(hangResults) >= 2, nil // gpu_diag and disk
	})
	for _, r := range hangResults {
		// The node is busy (the requeued run is back on it, held by the
		// fault): the checks run all the same, and find no fault of the
		// node's.
		t.Logf("hang check on %s: %s %v %q", host, r.Check, r.Outcome, r.Summary)
		if r.Outcome != loomv1.CheckOutcome_CHECK_PASS {
			t.Errorf("hang check %s: %v %q, want CHECK_PASS", r.Check, r.Outcome, r.Summary)
		}
	}

	// The node's processes run again; the requeued run resumes and finishes.
	inject(loomv1.FaultKind_FAULT_CLEAR)
	end := waitJob(t, jobs, job.Name, 180*time.Second)
	out, _ := os.ReadFile(end.OutputPath)
	if end.State != loomv1.JobState_COMPLETED || end.RestartCount < 1 {
		t.Fatalf("job ended %v after %d restarts (%s), runs %v:\n%s", end.State, end.RestartCount, end.StateReason, end.Runs, out)
	}
	if !strings.Contains(string(out), "resuming from checkpoint") {
		t.Errorf("the next run did not resume from a checkpoint:\n%s", out)
	}
	if got := registeredModel(t, gw, "hang-model"); !bytes.Equal(got, want) {
		t.Errorf("the resumed job's model differs from an uninterrupted run's:\n got %s\nwant %s", got, want)
	}
}
