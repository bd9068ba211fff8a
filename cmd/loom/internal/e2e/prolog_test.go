package e2e

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/loom-ml/loom/cmd/loom/stack"
	"github.com/loom-ml/loom/libs/gpu"
	"github.com/loom-ml/loom/libs/testkit"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/agent"
)

// TestPrologFailureDrainsTheNodeAndRequeuesTheJob: a node whose fault
// health has not heard of (no Xid event, no telemetry sample since) is
// caught by the agent's prolog checks when a job is about to start there.
// The job's program does not run on that node, the node is drained with
// the reason Slurm gives ("Prolog error: ..." naming the check), and the job
// is requeued and completes on a healthy node.
//
// Which node the job lands on first is made certain, not left to the
// scheduler: a blocker job holds the cluster's other node, so the only free
// node is the faulty one; once the job was refused there, the blocker is
// let go and the job runs on the node it held.
//
// An Xid raised while the node's agent was down is caught earlier than
// that: the restarted agent's first telemetry sample carries it (last_xid),
// and health drains the node for the Xid before any job is placed there.
// That case waits for the drain first, so that which of the two catches
// the fault is certain, and then checks that the job is never placed on
// the node.
func TestPrologFailureDrainsTheNodeAndRequeuesTheJob(t *testing.T) {
	t.Parallel()
	s := startStackWith(t, inProcess, func(o *stack.Options) {
		o.AgentEnv = append(o.AgentEnv,
			"LOOM_AGENT_PROLOG_CHECKS=gpu_diag,disk",
			// One telemetry sample as each agent starts, the next an hour
			// later: a fault injected after the start is one health has
			// not seen when the job starts.
			"LOOM_TELEMETRY_INTERVAL=1h")
		// A SIGSTOPped agent (below) must not be declared dead meanwhile.
		o.HeartbeatTimeout = 90 * time.Second
		// Health records its verdict and takes the node out, but repairs
		// nothing: the node stays DRAINING with its reason for the test to
		// read, however slowly the machine runs. Repairs are tested by
		// TestXid79DrainsRepairsAndResumesFromCheckpoint.
		o.HealthArgs = append(o.HealthArgs, "-remediation=dry-run")
	})
	gw := dialGateway(t, s)

	t.Run("gpu_xid_while_the_agent_was_down", func(t *testing.T) {
		t.Parallel()
		// Health drains the node from the restarted agent's first sample,
		// as it would for the Xid's event, before the job is submitted.
		prologCase(t, s, gw, "prolog-xid", "Xid 79: GPU has fallen off the bus", func(t *testing.T, a agentProc, dev *gpu.Simulated) {
			// The Xid is recorded while the agent is stopped, and the agent
			// is then killed: its restart opens the device afresh, and an
			// NVML event set (like the simulated device's Xids) reports only
			// what happens after it is opened. No XidObserved reaches health:
			// only the GPU's last_xid in the next telemetry sample.
			log := filepath.Join(a.workDir, "agent.log")
			registered := count(log, "agent registered")
			sendSignal(t, a.pid, syscall.SIGSTOP)
			if err := dev.Inject(&loomv1.Fault{Kind: loomv1.FaultKind_FAULT_XID, Gpu: 0, Xid: 79}); err != nil {
				sendSignal(t, a.pid, syscall.SIGCONT)
				t.Fatal(err)
			}
			sendSignal(t, a.pid, syscall.SIGKILL)
			testkit.WaitFor(t, 90*time.Second, "the provisioner restarted the agent and it registered", func() (bool, error) {
				return count(log, "agent registered") > registered, nil
			})
			// A crash restart is not a reboot: the GPU still carries the Xid.
			if g := sampleOf(t, dev); g.GetLastXid() != 79 {
				t.Fatalf("after the agent's restart GPU 0 reads last Xid %d, want 79", g.GetLastXid())
			}
		})
	})
	t.Run("disk_full_between_telemetry_samples", func(t *testing.T) {
		t.Parallel()
		prologCase(t, s, gw, "prolog-disk", "Prolog error: check disk failed", func(t *testing.T, a agentProc, dev *gpu.Simulated) {
			// The agent runs on; its next telemetry sample is an hour away.
			if err := dev.Inject(&loomv1.Fault{Kind: loomv1.FaultKind_FAULT_DISK_FULL, Gpu: -1}); err != nil {
				t.Fatal(err)
			}
			if !dev.DiskFull() {
				t.Fatal("the simulated disk is not full after FAULT_DISK_FULL")
			}
		})
	})
}

// agentProc is the process running one node's agent.
type agentProc struct {
	pid     int
	workDir string
}

// sampleOf reads GPU 0 of dev.
func sampleOf(t *testing.T, dev *gpu.Simulated) *loomv1.GpuSample {
	t.Helper()
	g, err := dev.Sample(waitCtx(t, 10*time.Second))
	if err != nil || len(g) == 0 {
		t.Fatalf("reading the simulated GPUs: %v (%d GPUs)", err, len(g))
	}
	return g[0]
}

// prologCase runs one case of TestPrologFailureDrainsTheNodeAndRequeuesTheJob
// on a cluster of its own (id): fault breaks the node that the job is
// about to be placed on, behind health's back; the node's drain reason must
// start with reason. A prolog's reason ("Prolog error: ...") means the job
// is placed there and refused by the prolog; any other means health drains
// the node from what it hears after fault, and the case waits for that
// before it submits the job, which is then never placed on the node.
func prologCase(t *testing.T, s *stack.Stack, gw *grpc.ClientConn, id, reason string, fault func(*testing.T, agentProc, *gpu.Simulated)) {
	byProlog := strings.HasPrefix(reason, "Prolog error: ")
	cl := createCluster(t, gw, id, &loomv1.NodePool{Id: "gpu", MachineType: "a3-highgpu-1g",
		NodeCount: 2, AcceleratorType: "nvidia-h100-80gb", AcceleratorCount: 1})
	shared := cl.GetStatus().GetSharedDir()
	jobs := loomv1.NewJobServiceClient(gw)
	slurm := loomv1.NewSlurmServiceClient(gw)

	// The blocker holds one node until the test lets it end.
	blocker, err := jobs.SubmitJob(waitCtx(t, 10*time.Second), &loomv1.SubmitJobRequest{Parent: "projects/default",
		Job: &loomv1.Job{Cluster: cl.Name, DisplayName: "blocker", NodeCount: 1, GpusPerNode: 1,
			Script: `while [ ! -e go-$SLURM_JOB_ID ]; do sleep 0.1; done`}})
	if err != nil {
		t.Fatal(err)
	}
	var good string
	testkit.WaitFor(t, 90*time.Second, "the blocker running", func() (bool, error) {
		j, err := jobs.GetJob(waitCtx(t, 5*time.Second), &loomv1.GetJobRequest{Name: blocker.Name})
		if err == nil && j.State.Terminal() {
			t.Fatalf("blocker ended %v (%s)", j.State, j.StateReason)
		}
		if err != nil || j.State != loomv1.JobState_RUNNING || len(j.Nodes) != 1 {
			return false, nil
		}
		good = j.Nodes[0]
		return true, nil
	})
	release := func() {
		if err := os.WriteFile(filepath.Join(shared, "go-"+blocker.JobId), nil, 0o644); err != nil {
			t.Error(err)
		}
	}
	var bad string
	nodes, err := slurm.ListSlurmNodes(waitCtx(t, 5*time.Second), &loomv1.ListSlurmNodesRequest{Cluster: cl.Name})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Nodes {
		if n.Hostname != good {
			bad = n.Hostname
		}
	}
	if bad == "" || len(nodes.Nodes) != 2 {
		t.Fatalf("cluster nodes %v: want two, one of them %s", nodes.Nodes, good)
	}
	la, ok := agentOf(t, s, id, bad)
	if !ok {
		t.Fatalf("no agent runs node %s", bad)
	}
	dev, err := gpu.ReadSimulated(gpu.Options{StateDir: filepath.Join(la.WorkDir, agent.GPUStateDir)})
	if err != nil {
		t.Fatal(err)
	}
	fault(t, agentProc{pid: la.PID, workDir: la.WorkDir}, dev)
	var seen string // each view of the node, logged as it changes
	if !byProlog {
		// Once the scheduler's Slurm view shows the node drained, the
		// scheduler places nothing there.
		waitDrained(t, slurm, cl.Name, bad, reason, &seen)
	}

	// The job can only go to the faulty node: its prolog refuses it there
	// (or, drained already, the job waits for the blocker's node).
	job, err := jobs.SubmitJob(waitCtx(t, 10*time.Second), &loomv1.SubmitJobRequest{Parent: "projects/default",
		Job: &loomv1.Job{Cluster: cl.Name, DisplayName: "work", NodeCount: 1, GpusPerNode: 1,
			Script: `echo "$SLURMD_NODENAME" >> ran-$SLURM_JOB_ID`}})
	if err != nil {
		release()
		t.Fatal(err)
	}
	waitFor := "the job's first run refused by " + bad + "'s prolog"
	if !byProlog {
		waitFor = "the job pending for want of a node"
	}
	testkit.WaitFor(t, 120*time.Second, waitFor, func() (bool, error) {
		j, err := jobs.GetJob(waitCtx(t, 5*time.Second), &loomv1.GetJobRequest{Name: job.Name})
		if err != nil {
			return false, nil
		}
		if j.State.Terminal() || !byProlog && len(j.Runs) > 0 {
			release()
			t.Fatalf("job is %v (%s) with runs %v, want it requeued or, its node drained, pending", j.State, j.StateReason, j.Runs)
		}
		if !byProlog {
			// A scheduling pass has seen it and found no node it may use.
			return j.State == loomv1.JobState_PENDING &&
				(strings.HasPrefix(j.StateReason, "Resources") || strings.HasPrefix(j.StateReason, "ReqNodeNotAvail")), nil
		}
		return len(j.Runs) > 0 && j.Runs[0].State.Terminal(), nil
	})
	release()
	end := waitJob(t, jobs, job.Name, 180*time.Second)
	if end.State != loomv1.JobState_COMPLETED {
		t.Fatalf("job ended %v (%s), runs %v, want COMPLETED", end.State, end.StateReason, end.Runs)
	}
	switch first := end.Runs[0]; {
	case !byProlog:
		if len(end.Runs) != 1 {
			t.Errorf("runs %v, want one, on %s: %s was drained before the job was submitted", end.Runs, good, bad)
		}
	case !slices.Equal(first.Nodes, []string{bad}) || first.State != loomv1.JobState_NODE_FAIL ||
		!strings.Contains(first.Reason, "prolog check failed on "+bad):
		t.Errorf("first run %v, want NODE_FAIL on %s naming its prolog check", first, bad)
	}
	if last := end.Runs[len(end.Runs)-1]; !slices.Equal(last.Nodes, []string{good}) || last.State != loomv1.JobState_COMPLETED {
		t.Errorf("last run %v, want COMPLETED on %s", last, good)
	}
	// The user's program ran once, on the healthy node only.
	out, err := os.ReadFile(filepath.Join(shared, "ran-"+job.JobId))
	if err != nil || string(out) != good+"\n" {
		t.Errorf("the job's program ran on %q (%v), want once on %s", out, err, good)
	}

	// Health drained the node for its prolog (or the fault it heard of),
	// as Slurm words it; the Slurm view shows the node out of service with
	// that reason.
	testkit.WaitFor(t, 60*time.Second, bad+" drained with reason "+reason, func() (bool, error) {
		n, err := nodeHealth(t, gw, cl.Name, bad)
		if err != nil || n == nil {
			return false, nil
		}
		if v := n.State.String() + " " + n.Reason; v != seen {
			seen = v
			t.Logf("health: %s is %s", bad, v)
		}
		return n.State == loomv1.RemediationState_NODE_DRAINING && strings.HasPrefix(n.Reason, reason), nil
	})
	waitDrained(t, slurm, cl.Name, bad, reason, &seen)
}

// waitDrained waits until the Slurm view shows host of cluster DRAINING or
// DRAINED with a reason that starts with reason; seen is the last view
// logged.
func waitDrained(t *testing.T, slurm loomv1.SlurmServiceClient, cluster, bad, reason string, seen *string) {
	t.Helper()
	testkit.WaitFor(t, 60*time.Second, bad+" out of service in the Slurm view", func() (bool, error) {
		nodes, err := slurm.ListSlurmNodes(waitCtx(t, 5*time.Second), &loomv1.ListSlurmNodesRequest{Cluster: cluster})
		if err != nil {
			return false, nil
		}
		for _, n := range nodes.Nodes {
			if n.Hostname != bad {
				continue
			}
			if v := n.State.String() + " " + n.Reason; v != *seen {
				*seen = v
				t.Logf("sinfo -R: %s is %s", bad, v)
			}
			return (n.State == loomv1.SlurmNode_DRAINING || n.State == loomv1.SlurmNode_DRAINED) && strings.HasPrefix(n.Reason, reason), nil
		}
		return false, nil
	})
}
