package checks

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/loom-ml/loom/libs/healthcheck"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

const cluster = "projects/p/clusters/c"

// dcgmiFixture is a real `dcgmi diag -j` report (DCGM's own test sample),
// kept with the report's types.
const dcgmiFixture = "../../../../libs/healthcheck/testdata/dcgmi_diag.json"

func newRunner(t *testing.T, dev *fakeDevice, mod func(*Config)) *Runner {
	t.Helper()
	cfg := Config{Node: cluster + "/nodes/gpu-0001", Hostname: "gpu-0001", Cluster: cluster, WorkDir: t.TempDir()}
	if dev != nil {
		cfg.Device = dev
	}
	if mod != nil {
		mod(&cfg)
	}
	return New(cfg)
}

func diagCmd(level int32, params map[string]string) *eventsv1.RunHealthCheck {
	return &eventsv1.RunHealthCheck{Check: GPUDiag, Level: level, RunId: "r1", ScanId: "s1", Params: params, Trigger: "scan"}
}

func TestResultIdentity(t *testing.T) {
	t.Parallel()
	r := newRunner(t, newFake(2), nil)
	res := r.Run(context.Background(), diagCmd(1, nil))
	if res.GetName() != cluster+"/healthResults/r1" || res.GetHostname() != "gpu-0001" || res.GetNode() != cluster+"/nodes/gpu-0001" ||
		res.GetScanId() != "s1" || res.GetTrigger() != "scan" || res.GetCheck() != GPUDiag || res.GetLevel() != 1 {
		t.Fatalf("result identity: %v", res)
	}
	if res.GetStartTime() == nil || res.GetEndTime() == nil || res.GetEndTime().AsTime().Before(res.GetStartTime().AsTime()) {
		t.Fatalf("times: %v %v", res.GetStartTime(), res.GetEndTime())
	}
}

func TestBusyNodeIsSkippedUnlessAllowed(t *testing.T) {
	t.Parallel()
	r := newRunner(t, newFake(1), func(c *Config) { c.Busy = func() bool { return true } })
	if got := r.Run(context.Background(), diagCmd(1, nil)); got.GetOutcome() != loomv1.CheckOutcome_CHECK_SKIPPED ||
		!strings.Contains(got.GetSummary(), "busy") {
		t.Fatalf("busy node: %v %q", got.GetOutcome(), got.GetSummary())
	}
	cmd := diagCmd(1, nil)
	cmd.AllowBusy = true
	if got := r.Run(context.Background(), cmd); got.GetOutcome() != loomv1.CheckOutcome_CHECK_PASS {
		t.Fatalf("allow_busy: %v %q", got.GetOutcome(), got.GetSummary())
	}
}

// TestUnknownCheckIsAnError: a name that cannot name a check at all (none,
// a path, a hidden file) is CHECK_ERROR.
func TestUnknownCheckIsAnError(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r := newRunner(t, nil, func(c *Config) { c.CheckDir = dir })
	for _, name := range []string{"", "../../bin/true", ".hidden"} {
		got := r.Run(context.Background(), &eventsv1.RunHealthCheck{Check: name, RunId: "x"})
		if got.GetOutcome() != loomv1.CheckOutcome_CHECK_ERROR {
			t.Errorf("check %q: %v %q", name, got.GetOutcome(), got.GetSummary())
		}
	}
}

// TestMissingSiteCheckIsSkipped: a check name the node has no program for
// (no check directory, or none of that name in it) is CHECK_SKIPPED, saying
// why: it says nothing of the node. As CHECK_ERROR, a mistyped
// `loom health scan --checks` made each node SUSPECT, the confirming run of
// the same name errored again, and health drained and rebooted the node.
func TestMissingSiteCheckIsSkipped(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, tc := range []struct {
		dir, want string
	}{
		{"", "no check \"ib_ports\": not a built-in check, and the node's agent has no check directory (-check-dir, LOOM_AGENT_CHECK_DIR"},
		{dir, "no check \"ib_ports\": not a built-in check, and not in " + dir},
	} {
		r := newRunner(t, nil, func(c *Config) { c.CheckDir = tc.dir })
		got := r.Run(context.Background(), &eventsv1.RunHealthCheck{Check: "ib_ports", RunId: "x"})
		if got.GetOutcome() != loomv1.CheckOutcome_CHECK_SKIPPED || !strings.HasPrefix(got.GetSummary(), tc.want) || strings.Contains(got.GetSummary(), "no such check") {
			t.Errorf("check dir %q: %v %q, want CHECK_SKIPPED %q", tc.dir, got.GetOutcome(), got.GetSummary(), tc.want)
		}
	}
}

func TestGPUDiagNoDeviceIsSkipped(t *testing.T) {
	t.Parallel()
	r := newRunner(t, nil, nil)
	if got := r.Run(context.Background(), diagCmd(1, nil)); got.GetOutcome() != loomv1.CheckOutcome_CHECK_SKIPPED {
		t.Fatalf("no device: %v", got.GetOutcome())
	}
}

// testResult finds one test's result for one GPU in a report.
func testResult(t *testing.T, detail, test string, gpuID string) healthcheck.DiagResult {
	t.Helper()
	rep, err := healthcheck.ParseDiag([]byte(detail))
	if err != nil {
		t.Fatalf("detail is not dcgmi diag JSON: %v\n%s", err, detail)
	}
	for _, c := range rep.Diag.Categories {
		for _, tt := range c.Tests {
			if tt.Name != test {
				continue
			}
			for _, r := range tt.Results {
				if r.GPUIDs == gpuID {
					return r
				}
			}
		}
	}
	t.Fatalf("no %s result for GPU %s in\n%s", test, gpuID, detail)
	return healthcheck.DiagResult{}
}

func TestGPUDiagHealthyLevels(t *testing.T) {
	t.Parallel()
	dev := newFake(4)
	r := newRunner(t, dev, func(c *Config) { c.GPUs = 4 })
	wantCats := map[int32][]string{1: {"Deployment"}, 2: {"Deployment", "Hardware", "Integration"}, 3: {"Deployment", "Hardware", "Integration", "Stress"}}
	for level := int32(1); level <= 3; level++ {
		got := r.Run(context.Background(), diagCmd(level, map[string]string{"stress": "50ms"}))
		if got.GetOutcome() != loomv1.CheckOutcome_CHECK_PASS {
			t.Fatalf("level %d: %v %q\n%s", level, got.GetOutcome(), got.GetSummary(), got.GetDetail())
		}
		rep, err := healthcheck.ParseDiag([]byte(got.GetDetail()))
		if err != nil {
			t.Fatal(err)
		}
		var cats []string
		for _, c := range rep.Diag.Categories {
			cats = append(cats, c.Category)
		}
		if strings.Join(cats, ",") != strings.Join(wantCats[level], ",") {
			t.Errorf("level %d categories %v, want %v", level, cats, wantCats[level])
		}
	}
}

func TestGPUDiagFailsFaultedGPU(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		fault func(s *loomv1.GpuSample)
		// errorID is DCGM's id for the failure (dcgm_errors.h), which
		// health reads to choose the repair.
		errorID int
	}{
		{"dbe", func(s *loomv1.GpuSample) { s.EccDbeVolatile = 1 }, healthcheck.DCGMVolatileDBE},
		{"remap failure", func(s *loomv1.GpuSample) { s.RemapFailure = true }, healthcheck.DCGMRowRemapFailure},
		{"lost", func(s *loomv1.GpuSample) { s.Lost = true }, healthcheck.DCGMAPIFailGPU},
		{"xid 79", func(s *loomv1.GpuSample) { s.LastXid = 79 }, healthcheck.DCGMXidError},
		{"xid 48", func(s *loomv1.GpuSample) { s.LastXid = 48 }, healthcheck.DCGMXidError},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dev := newFake(4)
			dev.set(2, tc.fault)
			r := newRunner(t, dev, nil)
			for level := int32(1); level <= 2; level++ {
				got := r.Run(context.Background(), diagCmd(level, nil))
				if got.GetOutcome() != loomv1.CheckOutcome_CHECK_FAIL || got.GetGpu() != 2 {
					t.Fatalf("level %d: %v on GPU %d %q", level, got.GetOutcome(), got.GetGpu(), got.GetSummary())
				}
				rep, err := healthcheck.ParseDiag([]byte(got.GetDetail()))
				if err != nil {
					t.Fatal(err)
				}
				if ids := rep.FailedErrorIDs(); !slices.Contains(ids, tc.errorID) {
					t.Errorf("level %d: failed error ids %v, want %d among them", level, ids, tc.errorID)
				}
				if level == 2 {
					// The compute check itself must catch the fault, not only
					// the counters: its product on GPU 2 is wrong.
					if res := testResult(t, got.GetDetail(), "compute_correctness", "2"); res.Status != healthcheck.StatusFail {
						t.Errorf("compute_correctness on the faulted GPU: %+v", res)
					}
					if res := testResult(t, got.GetDetail(), "compute_correctness", "1"); res.Status != healthcheck.StatusPass {
						t.Errorf("compute_correctness on a healthy GPU: %+v", res)
					}
					if res := testResult(t, got.GetDetail(), "memory", "2"); res.Status != healthcheck.StatusFail {
						t.Errorf("memory on the faulted GPU: %+v", res)
					}
				}
			}
		})
	}
}

// A PCIe replay now and then is no fault (a real H200 showed one on a fresh
// machine): the pcie test warns only past DCGM's allowance of 80, or the
// scan's max_pcie_replays.
func TestGPUDiagPCIeReplayAllowance(t *testing.T) {
	t.Parallel()
	dev := newFake(2)
	dev.set(1, func(s *loomv1.GpuSample) { s.PcieReplay = 1 })
	r := newRunner(t, dev, nil)
	if got := r.Run(context.Background(), diagCmd(2, nil)); got.GetOutcome() != loomv1.CheckOutcome_CHECK_PASS {
		t.Fatalf("1 replay: %v %q", got.GetOutcome(), got.GetSummary())
	}
	got := r.Run(context.Background(), diagCmd(2, map[string]string{"max_pcie_replays": "0"}))
	if got.GetOutcome() != loomv1.CheckOutcome_CHECK_WARN || got.GetGpu() != 1 || !strings.Contains(got.GetSummary(), "1 PCIe replays, more than 0") {
		t.Fatalf("max_pcie_replays=0: %v GPU %d %q", got.GetOutcome(), got.GetGpu(), got.GetSummary())
	}
	dev.set(1, func(s *loomv1.GpuSample) { s.PcieReplay = 81 })
	if got := r.Run(context.Background(), diagCmd(2, nil)); got.GetOutcome() != loomv1.CheckOutcome_CHECK_WARN || got.GetGpu() != 1 {
		t.Fatalf("81 replays: %v GPU %d %q", got.GetOutcome(), got.GetGpu(), got.GetSummary())
	}
}

// On real GPUs without dcgmi the tests that would run on the host (memory
// patterns, the compute check, the stress run) are skipped, each saying
// why, rather than passed; the driver's own counters are still judged.
func TestGPUDiagRealGPUsWithoutDcgmi(t *testing.T) {
	t.Parallel()
	dev := newFake(1)
	dev.sim = false
	r := newRunner(t, dev, func(c *Config) {
		c.GPUs = 1
		c.LookPath = func(string) (string, error) { return "", os.ErrNotExist }
	})
	got := r.Run(context.Background(), diagCmd(3, map[string]string{"stress": "50ms"}))
	if got.GetOutcome() != loomv1.CheckOutcome_CHECK_PASS || !strings.Contains(got.GetSummary(), "3 skipped") {
		t.Fatalf("level 3: %v %q\n%s", got.GetOutcome(), got.GetSummary(), got.GetDetail())
	}
	for _, name := range []string{"memory", "compute_correctness", "sm_stress"} {
		if res := testResult(t, got.GetDetail(), name, "0"); res.Status != healthcheck.StatusSkip || len(res.Warnings) == 0 ||
			!strings.Contains(res.Warnings[0].Warning, "needs dcgmi") {
			t.Errorf("%s: %+v", name, res)
		}
	}
	dev.set(0, func(s *loomv1.GpuSample) { s.EccDbeVolatile = 2 })
	if got := r.Run(context.Background(), diagCmd(1, nil)); got.GetOutcome() != loomv1.CheckOutcome_CHECK_FAIL || got.GetGpu() != 0 {
		t.Fatalf("DBE on a real GPU: %v GPU %d %q", got.GetOutcome(), got.GetGpu(), got.GetSummary())
	}
}

func TestGPUDiagAppXidPasses(t *testing.T) {
	t.Parallel()
	dev := newFake(2)
	dev.set(0, func(s *loomv1.GpuSample) { s.LastXid = 13 })
	got := newRunner(t, dev, nil).Run(context.Background(), diagCmd(2, nil))
	if got.GetOutcome() != loomv1.CheckOutcome_CHECK_PASS {
		t.Fatalf("Xid 13 (the application's): %v %q", got.GetOutcome(), got.GetSummary())
	}
}

func TestGPUDiagStressFindsSlowAndHotGPU(t *testing.T) {
	t.Parallel()
	dev := newFake(4)
	dev.factor[3] = 0.5
	r := newRunner(t, dev, nil)
	if got := r.Run(context.Background(), diagCmd(1, nil)); got.GetOutcome() != loomv1.CheckOutcome_CHECK_PASS {
		t.Fatalf("level 1 does not stress: %v", got.GetOutcome())
	}
	got := r.Run(context.Background(), diagCmd(3, map[string]string{"stress": "50ms"}))
	if got.GetOutcome() != loomv1.CheckOutcome_CHECK_FAIL || got.GetGpu() != 3 || !strings.Contains(got.GetSummary(), "stress level") {
		t.Fatalf("slow GPU at level 3: %v GPU %d %q", got.GetOutcome(), got.GetGpu(), got.GetSummary())
	}
	hot := newFake(2)
	hot.set(1, func(s *loomv1.GpuSample) { s.TemperatureC = 95; s.ThrottleReasons = 0x40 })
	got = newRunner(t, hot, nil).Run(context.Background(), diagCmd(3, map[string]string{"stress": "20ms"}))
	if got.GetOutcome() != loomv1.CheckOutcome_CHECK_FAIL || got.GetGpu() != 1 {
		t.Fatalf("hot GPU at level 3: %v GPU %d %q", got.GetOutcome(), got.GetGpu(), got.GetSummary())
	}
}

func TestParseDiagFixture(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(dcgmiFixture)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := healthcheck.ParseDiag(b)
	if err != nil {
		t.Fatal(err)
	}
	var cats, tests []string
	statuses := map[string]int{}
	for _, c := range rep.Diag.Categories {
		cats = append(cats, c.Category)
		for _, tt := range c.Tests {
			tests = append(tests, tt.Name)
			for _, r := range tt.Results {
				statuses[r.Status]++
			}
		}
	}
	if strings.Join(cats, ",") != "Deployment,Hardware,Integration,Stress" {
		t.Errorf("categories %v", cats)
	}
	if statuses[healthcheck.StatusFail] != 3 || statuses[healthcheck.StatusPass] != 17 || statuses[healthcheck.StatusSkip] != 17 {
		t.Errorf("statuses %v, want 3 FAIL, 17 PASS, 17 SKIP", statuses)
	}
	v := diagVerdict(rep)
	if v.outcome != loomv1.CheckOutcome_CHECK_FAIL || v.gpu != 0 || !strings.Contains(v.summary, "Stress/sm_stress") ||
		!strings.Contains(v.summary, "did not exceed desired stress level") {
		t.Errorf("verdict %v GPU %d %q", v.outcome, v.gpu, v.summary)
	}
	if _, err := healthcheck.ParseDiag([]byte(`{"other": 1}`)); err == nil {
		t.Error("a JSON that is not dcgmi's parsed")
	}
	if _, err := healthcheck.ParseDiag([]byte("Error: unable to connect to host engine")); err == nil {
		t.Error("an error text parsed")
	}
}

// A real device with dcgmi on PATH runs it and judges its JSON.
// A node whose driver lists fewer GPUs than it offers the scheduler fails
// gpu_diag as a node (GPU -1), before dcgmi or any per-GPU test runs: a
// GPU gone from the bus altogether is not listed at all, as an a3-ultragpu-8g
// node on the one-GPU H200 machine showed (bench/REPORT.md).
func TestGPUDiagMissingGPUFailsNode(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ran := filepath.Join(dir, "ran")
	dcgmi := filepath.Join(dir, "dcgmi")
	if err := os.WriteFile(dcgmi, []byte("#!/bin/sh\ntouch "+ran+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, sim := range []bool{true, false} {
		dev := newFake(1)
		dev.sim = sim
		r := newRunner(t, dev, func(c *Config) {
			c.GPUs = 8
			c.LookPath = func(f string) (string, error) { return filepath.Join(dir, f), nil }
		})
		got := r.Run(context.Background(), diagCmd(2, nil))
		if got.GetOutcome() != loomv1.CheckOutcome_CHECK_FAIL || got.GetGpu() != -1 ||
			!strings.Contains(got.GetSummary(), "the node offers 8 GPUs, the driver lists 1") {
			t.Fatalf("sim=%v: %v GPU %d %q", sim, got.GetOutcome(), got.GetGpu(), got.GetSummary())
		}
		rep, err := healthcheck.ParseDiag([]byte(got.GetDetail()))
		if err != nil || len(rep.Diag.Categories) != 1 || rep.Diag.Categories[0].Tests[0].Name != "GPU Count" {
			t.Fatalf("sim=%v: detail %v %s", sim, err, got.GetDetail())
		}
	}
	if _, err := os.Stat(ran); err == nil {
		t.Error("dcgmi ran on a node with GPUs missing")
	}
	// More GPUs listed than offered (a node offering part of its board) is
	// no failure.
	r := newRunner(t, newFake(4), func(c *Config) { c.GPUs = 2 })
	if got := r.Run(context.Background(), diagCmd(1, nil)); got.GetOutcome() != loomv1.CheckOutcome_CHECK_PASS {
		t.Errorf("4 listed, 2 offered: %v %q", got.GetOutcome(), got.GetSummary())
	}
}

func TestGPUDiagRunsDcgmi(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fixture, _ := filepath.Abs(dcgmiFixture)
	args := filepath.Join(dir, "args")
	script := "#!/bin/sh\necho \"$@\" > " + args + "\ncat " + fixture + "\nexit 226\n"
	dcgmi := filepath.Join(dir, "dcgmi")
	if err := os.WriteFile(dcgmi, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	dev := newFake(4)
	dev.sim = false
	r := newRunner(t, dev, func(c *Config) {
		c.LookPath = func(f string) (string, error) { return filepath.Join(dir, f), nil }
	})
	got := r.Run(context.Background(), diagCmd(3, nil))
	if got.GetOutcome() != loomv1.CheckOutcome_CHECK_FAIL || got.GetGpu() != 0 || !strings.HasPrefix(got.GetSummary(), "dcgmi diag -r 3") {
		t.Fatalf("dcgmi: %v GPU %d %q", got.GetOutcome(), got.GetGpu(), got.GetSummary())
	}
	if a, _ := os.ReadFile(args); strings.TrimSpace(string(a)) != "diag -r 3 -j" {
		t.Errorf("dcgmi args %q", a)
	}
	if _, err := healthcheck.ParseDiag([]byte(got.GetDetail())); err != nil {
		t.Errorf("detail is not dcgmi's JSON: %v", err)
	}
	// The simulated device never runs dcgmi.
	dev.sim = true
	if got := r.Run(context.Background(), diagCmd(1, nil)); got.GetOutcome() != loomv1.CheckOutcome_CHECK_PASS {
		t.Errorf("simulated: %v %q", got.GetOutcome(), got.GetSummary())
	}
}

// A check that ignores its context is abandoned at its timeout: the
// result is CHECK_ERROR (the check failed, not the node).
func TestHungGPUDiagIsKilledAtTimeout(t *testing.T) {
	t.Parallel()
	dev := newFake(2)
	dev.block = make(chan struct{})
	t.Cleanup(func() { close(dev.block) })
	r := newRunner(t, dev, nil)
	cmd := diagCmd(1, nil)
	cmd.Timeout = durationpb.New(100 * time.Millisecond)
	t0 := time.Now()
	got := r.Run(context.Background(), cmd)
	if got.GetOutcome() != loomv1.CheckOutcome_CHECK_ERROR || !strings.Contains(got.GetSummary(), "killed at its timeout") {
		t.Fatalf("hung check: %v %q", got.GetOutcome(), got.GetSummary())
	}
	if el := time.Since(t0); el > 100*time.Millisecond+abandonGrace+2*time.Second {
		t.Fatalf("hung check returned after %s", el)
	}
}

func writeScript(t *testing.T, dir, name, body string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
}

func TestSiteChecks(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeScript(t, dir, "ok", "echo all good\n")
	writeScript(t, dir, "bad", "echo ib port down >&2\nexit 1\n")
	writeScript(t, dir, "broken", "exit 3\n")
	writeScript(t, dir, "json", `echo '{"summary":"ib 4/4 ports up","metrics":{"ports":4},"warn":true}'`+"\n")
	writeScript(t, dir, "env", `echo "$LOOM_CHECK_HOSTNAME $LOOM_CHECK_LEVEL $LOOM_CHECK_PARAM_PORT_COUNT"`+"\n")
	if err := os.WriteFile(filepath.Join(dir, "notexec"), []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := newRunner(t, nil, func(c *Config) { c.CheckDir = dir })
	run := func(name string, params map[string]string) *loomv1.HealthCheckResult {
		return r.Run(context.Background(), &eventsv1.RunHealthCheck{Check: name, RunId: name, Level: 2, Params: params})
	}
	for name, want := range map[string]loomv1.CheckOutcome{
		"ok": loomv1.CheckOutcome_CHECK_PASS, "bad": loomv1.CheckOutcome_CHECK_FAIL, "broken": loomv1.CheckOutcome_CHECK_ERROR,
		"json": loomv1.CheckOutcome_CHECK_WARN, "notexec": loomv1.CheckOutcome_CHECK_ERROR,
	} {
		if got := run(name, nil); got.GetOutcome() != want {
			t.Errorf("%s: %v %q, want %v", name, got.GetOutcome(), got.GetSummary(), want)
		}
	}
	if got := run("ok", nil); got.GetDetail() != "all good\n" {
		t.Errorf("stdout not kept: %q", got.GetDetail())
	}
	if got := run("bad", nil); !strings.Contains(got.GetSummary(), "ib port down") {
		t.Errorf("stderr not in the summary: %q", got.GetSummary())
	}
	if got := run("json", nil); got.GetSummary() != "ib 4/4 ports up" || got.GetMetrics()["ports"] != 4 {
		t.Errorf("JSON output: %q %v", got.GetSummary(), got.GetMetrics())
	}
	if got := run("env", map[string]string{"port-count": "4"}); strings.TrimSpace(got.GetDetail()) != "gpu-0001 2 4" {
		t.Errorf("environment: %q", got.GetDetail())
	}
	if got := SiteChecks(dir); strings.Join(got, ",") != "bad,broken,env,json,ok" {
		t.Errorf("SiteChecks: %v", got)
	}
}

// A site check that hangs is killed at its timeout, with everything it
// started: CHECK_ERROR, and no process of it left.
func TestHungSiteCheckIsKilledAtTimeout(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pids := filepath.Join(dir, "pids")
	writeScript(t, dir, "hang", "sleep 60 &\necho $! > "+pids+".tmp\necho $$ >> "+pids+".tmp\nmv "+pids+".tmp "+pids+"\nwait\n")
	r := newRunner(t, nil, func(c *Config) { c.CheckDir = dir })
	// The script must have recorded its processes before its timeout for
	// the test to see them killed: a shell, a fork and an mv, which a
	// loaded machine may not get through in 300 ms. A run killed before
	// that shows nothing, and the check runs again with twice the time.
	var b []byte
	for timeout := 300 * time.Millisecond; ; timeout *= 2 {
		cmd := &eventsv1.RunHealthCheck{Check: "hang", RunId: "h", Timeout: durationpb.New(timeout)}
		t0 := time.Now()
		got := r.Run(context.Background(), cmd)
		if got.GetOutcome() != loomv1.CheckOutcome_CHECK_ERROR || !strings.Contains(got.GetSummary(), "killed at its timeout") {
			t.Fatalf("hung site check: %v %q", got.GetOutcome(), got.GetSummary())
		}
		if el := time.Since(t0); el > timeout+10*time.Second {
			t.Fatalf("returned after %s, %s after its timeout", el, el-timeout)
		}
		var err error
		if b, err = os.ReadFile(pids); err == nil {
			break
		}
		if timeout > 5*time.Second {
			t.Fatalf("the script never recorded its processes, even in %s: %v", timeout, err)
		}
		t.Logf("killed at %s before it recorded its processes: again with twice the time", timeout)
	}
	for _, f := range strings.Fields(string(b)) {
		var pid int
		if _, err := fmtSscan(f, &pid); err != nil {
			t.Fatal(err)
		}
		// Killed processes may linger as zombies of their parent only
		// while it lives; the group is gone once kill(2) says ESRCH or the
		// process is a zombie.
		deadline := time.Now().Add(5 * time.Second)
		for alive(pid) {
			if time.Now().After(deadline) {
				t.Fatalf("process %d of the hung check still runs", pid)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile("/proc/" + itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// The state follows the command's closing parenthesis.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

func TestDisk(t *testing.T) {
	t.Parallel()
	usage := map[string]uint64{}
	r := newRunner(t, nil, func(c *Config) {
		c.Disks = func(paths ...string) []*loomv1.DiskSample {
			var out []*loomv1.DiskSample
			for _, p := range paths {
				out = append(out, &loomv1.DiskSample{Mount: p, TotalBytes: 1000e9, UsedBytes: usage[p]})
			}
			return out
		}
	})
	cmd := &eventsv1.RunHealthCheck{Check: Disk, RunId: "d", Params: map[string]string{"paths": "/a,/b"}}
	for _, tc := range []struct {
		a, b uint64
		want loomv1.CheckOutcome
	}{
		{500e9, 100e9, loomv1.CheckOutcome_CHECK_PASS},
		{920e9, 100e9, loomv1.CheckOutcome_CHECK_WARN},
		{100e9, 998e9, loomv1.CheckOutcome_CHECK_FAIL}, // 2 GB free: under 5 GB
		{960e9, 100e9, loomv1.CheckOutcome_CHECK_FAIL}, // 96% used
	} {
		usage["/a"], usage["/b"] = tc.a, tc.b
		got := r.Run(context.Background(), cmd)
		if got.GetOutcome() != tc.want {
			t.Errorf("used %d/%d: %v %q, want %v", tc.a, tc.b, got.GetOutcome(), got.GetSummary(), tc.want)
		}
	}
	if got := r.Run(context.Background(), cmd); got.GetMetrics()["free_gb:/a"] != 40 {
		t.Errorf("metrics %v", got.GetMetrics())
	}
	// The real filesystem of a temporary directory, by statfs.
	real := newRunner(t, nil, nil)
	got := real.Run(context.Background(), &eventsv1.RunHealthCheck{Check: Disk, RunId: "d2", Params: map[string]string{"min_free_gb": "0", "max_used_percent": "100", "warn_used_percent": "100"}})
	if got.GetOutcome() != loomv1.CheckOutcome_CHECK_PASS || got.GetMetrics()["min_free_gb"] <= 0 || !strings.HasPrefix(got.GetSummary(), "1 filesystem: ") {
		t.Errorf("statfs: %v %q %v", got.GetOutcome(), got.GetSummary(), got.GetMetrics())
	}
}

func TestSpeed(t *testing.T) {
	t.Parallel()
	dev := newFake(4)
	r := newRunner(t, dev, nil)
	cmd := &eventsv1.RunHealthCheck{Check: Speed, RunId: "s", Params: map[string]string{"products": "20"}}
	got := r.Run(context.Background(), cmd)
	if got.GetOutcome() != loomv1.CheckOutcome_CHECK_PASS || got.GetMetrics()["throughput"] != 100 || got.GetMetrics()["cpu_gflops"] <= 0 {
		t.Fatalf("healthy: %v %q %v", got.GetOutcome(), got.GetSummary(), got.GetMetrics())
	}
	dev.factor[2] = 0.5
	got = r.Run(context.Background(), cmd)
	if got.GetMetrics()["throughput"] != 50 || got.GetGpu() != 2 {
		t.Fatalf("slow GPU 2: %v GPU %d", got.GetMetrics(), got.GetGpu())
	}
	cmd.Params["min_throughput"] = "60"
	if got := r.Run(context.Background(), cmd); got.GetOutcome() != loomv1.CheckOutcome_CHECK_FAIL {
		t.Fatalf("under min_throughput: %v", got.GetOutcome())
	}
	// No GPUs: the measured rate.
	cpu := newRunner(t, nil, nil).Run(context.Background(), &eventsv1.RunHealthCheck{Check: Speed, RunId: "s", Params: map[string]string{"products": "5"}})
	if cpu.GetMetrics()["throughput"] != cpu.GetMetrics()["cpu_gflops"] {
		t.Fatalf("no GPUs: %v", cpu.GetMetrics())
	}
}

func fmtSscan(s string, p *int) (int, error) { return fmt.Sscan(s, p) }
func itoa(i int) string                      { return strconv.Itoa(i) }

// A site check that passes but leaves a child holding its stdout (a
// helper daemon it started) passes: the child is killed with its process
// group, and the exit status decides. Before, Wait's ErrWaitDelay made it
// CHECK_ERROR, and two such passes in a row drained a healthy node.
func TestSiteCheckChildHoldingStdoutPasses(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pids := filepath.Join(dir, "pids")
	writeScript(t, dir, "daemon", "sleep 60 &\necho $! > "+pids+"\necho ports up\nexit 0\n")
	writeScript(t, dir, "daemonfail", "sleep 60 &\necho port 3 down\nexit 1\n")
	r := newRunner(t, nil, func(c *Config) { c.CheckDir = dir })
	got := r.Run(context.Background(), &eventsv1.RunHealthCheck{Check: "daemon", RunId: "d"})
	if got.GetOutcome() != loomv1.CheckOutcome_CHECK_PASS || got.GetDetail() != "ports up\n" {
		t.Fatalf("passing check with a child holding stdout: %v %q %q", got.GetOutcome(), got.GetSummary(), got.GetDetail())
	}
	b, err := os.ReadFile(pids)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("the check's child %d outlived it", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := r.Run(context.Background(), &eventsv1.RunHealthCheck{Check: "daemonfail", RunId: "f"}); got.GetOutcome() != loomv1.CheckOutcome_CHECK_FAIL {
		t.Fatalf("failing check with a child holding stdout: %v %q", got.GetOutcome(), got.GetSummary())
	}
}

// TestBrokenCheckDirIsAnError: only a name a readable check directory does
// not hold is CHECK_SKIPPED. A check directory that is gone (a mount that
// failed), a dangling link in it, or one the agent cannot search is the
// node's fault: CHECK_ERROR, which health counts, so that a broken node
// cannot pass for one that lacks the check.
func TestBrokenCheckDirIsAnError(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	dangling := filepath.Join(base, "dangling")
	if err := os.Mkdir(dangling, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(base, "gone"), filepath.Join(dangling, "ib_ports")); err != nil {
		t.Fatal(err)
	}
	dirs := map[string]string{
		"missing dir":   filepath.Join(base, "not-mounted"),
		"dangling link": dangling,
	}
	if os.Geteuid() != 0 { // root searches any directory
		locked := filepath.Join(base, "locked")
		if err := os.Mkdir(locked, 0o000); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.Chmod(locked, 0o755) })
		dirs["unsearchable dir"] = locked
	}
	for what, dir := range dirs {
		r := newRunner(t, nil, func(c *Config) { c.CheckDir = dir })
		got := r.Run(context.Background(), &eventsv1.RunHealthCheck{Check: "ib_ports", RunId: "x"})
		if got.GetOutcome() != loomv1.CheckOutcome_CHECK_ERROR || !strings.Contains(got.GetSummary(), `check "ib_ports"`) {
			t.Errorf("%s: %v %q, want CHECK_ERROR naming the check", what, got.GetOutcome(), got.GetSummary())
		}
	}
}
