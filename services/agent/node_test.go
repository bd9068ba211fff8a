package agent

import (
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/gpu"
	"github.com/loom-ml/loom/libs/proc"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/agent/internal/stepd"
)

// startSimulated runs an agent with 2 simulated GPUs and telemetry every
// second, and returns its HTTP (/metrics) address.
func (e *env) startSimulated(t *testing.T) string {
	t.Helper()
	cfg := e.config()
	cfg.GPUs, cfg.GPUMode, cfg.TelemetryInterval = 2, GPUModeSimulated, time.Second
	cfg.HTTPAddr = testkit.FreeAddr()
	testkit.Start(t, "agent", func(ctx context.Context) error { return Run(ctx, cfg) })
	return cfg.HTTPAddr
}

// metrics is the agent's /metrics text ("" while it does not answer).
func metrics(addr string) string {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// nodeCommand is a node command keyed by its node, as health sends it.
func nodeCommand(p proto.Message) envelope.Event {
	return envelope.New(topics.NodeCommands, node, "loom/test", p)
}

func inject(t *testing.T, e *env, f *loomv1.Fault) {
	t.Helper()
	cmd := &eventsv1.InjectNodeFault{Node: node, Cluster: cluster, Fault: f, User: "users/admin"}
	publish(t, e.broker, nodeCommand(cmd))
}

// waitXid waits for the agent's XidObserved of code on gpu.
func waitXid(t *testing.T, e *env, gpuIdx, code int32) *eventsv1.XidObserved {
	t.Helper()
	ev := testkit.WaitEvent(t, e.broker, topics.NodeTelemetry, wait, func(ev envelope.Event) bool {
		x, ok := ev.Payload.(*eventsv1.XidObserved)
		return ok && x.GetNode() == node && x.GetGpu() == gpuIdx && x.GetXid() == code
	})
	return ev.Payload.(*eventsv1.XidObserved)
}

func TestNodeCommandsFaultsTelemetryAndChecks(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	addr := e.startSimulated(t)
	testkit.WaitEvent(t, e.broker, topics.NodeTelemetry, wait, func(ev envelope.Event) bool {
		r, ok := ev.Payload.(*eventsv1.AgentRegistered)
		return ok && r.GetSimulatedGpus() && r.GetGpus() == 2
	})

	inject(t, e, &loomv1.Fault{Kind: loomv1.FaultKind_FAULT_FALLEN_OFF_BUS, Gpu: 1})
	x := waitXid(t, e, 1, 79)
	if !strings.Contains(x.GetMessage(), "GPU has fallen off the bus") || x.GetCluster() != cluster {
		t.Errorf("XidObserved %v", x)
	}
	testkit.WaitEvent(t, e.broker, topics.NodeTelemetry, wait, func(ev envelope.Event) bool {
		g, ok := ev.Payload.(*eventsv1.GpuTelemetry)
		return ok && g.GetSimulated() && len(g.GetGpus()) == 2 && g.GetGpus()[1].GetLost() && !g.GetGpus()[0].GetLost() &&
			g.GetGpus()[0].GetTemperatureC() > 0 && len(g.GetDisks()) > 0
	})
	// /metrics, as dcgm-exporter names them: GPU 1 lost, GPU 0 read.
	testkit.WaitFor(t, wait, "GPU 1 lost on /metrics", func() (bool, error) {
		m := metrics(addr)
		return strings.Contains(m, `loom_gpu_lost{DCGM_FI_DRIVER_VERSION="580.159.04",Hostname="gpu-0001",UUID="`) &&
			regexp.MustCompile(`(?m)^loom_gpu_lost\{[^}]*gpu="1"[^}]*\} 1$`).MatchString(m) &&
			regexp.MustCompile(`(?m)^DCGM_FI_DEV_GPU_TEMP\{[^}]*gpu="0"[^}]*\} [1-9]`).MatchString(m) &&
			!regexp.MustCompile(`(?m)^DCGM_FI_DEV_GPU_TEMP\{[^}]*gpu="1"`).MatchString(m), nil
	})
	// The node's nvidia-smi sees what the agent injected.
	st, err := gpu.ReadSimulated(gpu.Options{StateDir: filepath.Join(e.work, GPUStateDir)})
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := st.Sample(context.Background()); !s[1].GetLost() {
		t.Errorf("the state dir's GPU 1 is not lost: %v", s[1])
	}

	// The node's checks run on its device: the level-1 diagnostic finds the
	// GPU that fell off the bus, in dcgmi's JSON.
	chk := &eventsv1.RunHealthCheck{Node: node, Cluster: cluster, RunId: "run-1", ScanId: "scan-1", Check: "gpu_diag", Level: 1, Trigger: "scan"}
	publish(t, e.broker, nodeCommand(chk))
	ev := testkit.WaitEvent(t, e.broker, topics.NodeTelemetry, wait, func(ev envelope.Event) bool {
		h, ok := ev.Payload.(*eventsv1.HealthCheckCompleted)
		return ok && h.GetResult().GetScanId() == "scan-1"
	})
	r := ev.Payload.(*eventsv1.HealthCheckCompleted).GetResult()
	if r.GetOutcome() != loomv1.CheckOutcome_CHECK_FAIL || r.GetGpu() != 1 || !strings.Contains(r.GetSummary(), "fallen off the bus") ||
		!strings.Contains(r.GetDetail(), `"DCGM GPU Diagnostic"`) || r.GetNode() != node ||
		r.GetHostname() != "gpu-0001" || r.GetCheck() != "gpu_diag" || r.GetName() != cluster+"/healthResults/run-1" || r.GetEndTime() == nil {
		t.Errorf("check result %v", r)
	}
}

func TestNodeNoHeartbeatFault(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startSimulated(t)
	inject(t, e, &loomv1.Fault{Kind: loomv1.FaultKind_FAULT_NO_HEARTBEAT, Gpu: -1})
	// Commands of a node apply in order: once this marker's Xid is out,
	// heartbeats are muted.
	inject(t, e, &loomv1.Fault{Kind: loomv1.FaultKind_FAULT_XID, Gpu: 0, Xid: 13})
	marker := waitXid(t, e, 0, 13).GetTime().AsTime()
	// A second marker well after the first (Xids are not muted): over that
	// window heartbeats (every 100 ms) and telemetry (every second) would
	// have been sent, and health takes both for signs of life.
	var until time.Time
	testkit.WaitFor(t, wait, "an Xid 1.5s after the marker", func() (bool, error) {
		inject(t, e, &loomv1.Fault{Kind: loomv1.FaultKind_FAULT_XID, Gpu: 1, Xid: 43})
		for _, ev := range testkit.Events(t, e.broker, topics.NodeTelemetry) {
			if x, ok := ev.Payload.(*eventsv1.XidObserved); ok && x.GetGpu() == 1 && x.GetTime().AsTime().After(marker.Add(1500*time.Millisecond)) {
				until = x.GetTime().AsTime()
				return true, nil
			}
		}
		return false, nil
	})
	for _, ev := range testkit.Events(t, e.broker, topics.NodeTelemetry) {
		var at time.Time
		switch p := ev.Payload.(type) {
		case *eventsv1.Heartbeat:
			at = p.GetTime().AsTime()
		case *eventsv1.GpuTelemetry:
			at = p.GetTime().AsTime()
		default:
			continue
		}
		if at.After(marker.Add(200*time.Millisecond)) && at.Before(until) {
			t.Fatalf("%s at %s, muted since %s", ev.Type, at, marker)
		}
	}
	inject(t, e, &loomv1.Fault{Kind: loomv1.FaultKind_FAULT_CLEAR, Gpu: -1})
	testkit.WaitEvent(t, e.broker, topics.NodeTelemetry, wait, func(ev envelope.Event) bool {
		hb, ok := ev.Payload.(*eventsv1.Heartbeat)
		return ok && hb.GetTime().AsTime().After(marker.Add(time.Second))
	})
}

// procState is the state letter of pid in /proc (T: stopped).
func procState(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return ""
	}
	return s[i+2 : i+3]
}

func TestNodeHungJobFault(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// A step's process group, as the agent records it in <work dir>/steps:
	// its leader marked as a step's shim (the agent's sweep at start drops
	// pidfiles of anything else).
	cmd := exec.Command("sleep", "300")
	cmd.Env = append(os.Environ(), stepd.Env+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() })
	start, ok := proc.StartTime(cmd.Process.Pid)
	if !ok {
		t.Fatal("no start time")
	}
	if err := os.MkdirAll(filepath.Join(e.work, "steps"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := proc.WritePIDFile(filepath.Join(e.work, "steps", "job-1.pid"), cmd.Process.Pid, start); err != nil {
		t.Fatal(err)
	}
	e.startSimulated(t)
	inject(t, e, &loomv1.Fault{Kind: loomv1.FaultKind_FAULT_HUNG_JOB, Gpu: -1})
	testkit.WaitFor(t, wait, "the step's group stopped", func() (bool, error) { return procState(cmd.Process.Pid) == "T", nil })
	inject(t, e, &loomv1.Fault{Kind: loomv1.FaultKind_FAULT_CLEAR, Gpu: -1})
	testkit.WaitFor(t, wait, "the step's group running again", func() (bool, error) { return procState(cmd.Process.Pid) == "S", nil })
}
