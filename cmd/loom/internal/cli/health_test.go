package cli

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/cmd/loom/internal/fakegw"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

const demoName = "projects/default/clusters/demo"

// newHealthGateway is the CLI fixture with node health, check results and
// goodput for cluster demo (gpu-0001 healthy on simulated GPUs, gpu-0002
// draining after an Xid 79), served.
func newHealthGateway(t *testing.T) (*fakegw.Gateway, string) {
	t.Helper()
	f := newHealthGatewayData(t)
	return f, f.Serve(t)
}

// newHealthGatewayData is newHealthGateway's gateway, not yet served.
func newHealthGatewayData(t *testing.T) *fakegw.Gateway {
	t.Helper()
	f := newFakeGatewayData()
	gpus := func(lost bool, temps ...float64) []*loomv1.GpuSample {
		var out []*loomv1.GpuSample
		for i, c := range temps {
			out = append(out, &loomv1.GpuSample{Index: int32(i), TemperatureC: c, EccSbeVolatile: uint64(i)})
		}
		if lost {
			out[0] = &loomv1.GpuSample{Index: 0, Lost: true, LastXid: 79}
		}
		return out
	}
	f.NodeHealth = []*loomv1.NodeHealth{
		{Node: demoName + "/nodes/gpu-0001", Hostname: "gpu-0001", Cluster: demoName, State: loomv1.RemediationState_NODE_HEALTHY,
			SetBy: "loom-health", StateTime: ts(3 * time.Hour), Gpus: gpus(false, 41, 44, 39), Simulated: true, LastHeartbeat: ts(2 * time.Second)},
		{Node: demoName + "/nodes/gpu-0002", Hostname: "gpu-0002", Cluster: demoName, State: loomv1.RemediationState_NODE_DRAINING,
			Reason: "Xid 79: GPU has fallen off the bus", SetBy: "loom-health", StateTime: ts(2 * time.Minute),
			NextAction: loomv1.RemediationAction_ACTION_REBOOT, Gpus: gpus(true, 0, 71, 52), LastHeartbeat: ts(20 * time.Second)},
	}
	f.HealthResults = []*loomv1.HealthCheckResult{
		// A skipped check stands for nothing: valid until its end.
		{Name: demoName + "/healthResults/3", Hostname: "gpu-0003", Check: "gpu_diag", Level: 1, Outcome: loomv1.CheckOutcome_CHECK_SKIPPED,
			Summary: "the node is busy with jobs", Trigger: "scan", ScanId: "s2", EndTime: ts(30 * time.Second), ValidUntil: ts(30 * time.Second)},
		{Name: demoName + "/healthResults/2", Hostname: "gpu-0002", Check: "gpu_diag", Level: 2, Outcome: loomv1.CheckOutcome_CHECK_FAIL,
			Summary: "memory test: GPU 0 not found\n(detail follows)", Trigger: "confirm", ScanId: "s1", EndTime: ts(time.Minute), ValidUntil: fakegw.Ago(-23 * time.Hour)},
		{Name: demoName + "/healthResults/1", Hostname: "gpu-0001", Check: "disk", Outcome: loomv1.CheckOutcome_CHECK_PASS,
			Summary: "/ 12% used", Trigger: "scan", ScanId: "s1", EndTime: ts(2 * time.Hour), ValidUntil: ts(time.Hour)},
	}
	at := func(s string) *timestamppb.Timestamp {
		tm, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return timestamppb.New(tm)
	}
	f.NodeHealthEvents = []*loomv1.NodeHealthEvent{
		{Time: at("2026-12-04T10:00:02Z"), Node: demoName + "/nodes/gpu-0003", Hostname: "gpu-0003", State: loomv1.RemediationState_NODE_HEALTHY,
			Reason: "repaired (replace) and confirmed by gpu_diag, for: row remapping failure on GPU 2", SetBy: "loom-health", Repaired: true},
		{Time: at("2026-12-04T10:00:00Z"), Node: demoName + "/nodes/gpu-0002", Hostname: "gpu-0002", State: loomv1.RemediationState_NODE_REPLACING,
			Reason: "row remapping failure on GPU 2", SetBy: "loom-health", Action: loomv1.RemediationAction_ACTION_REPLACE},
		{Time: at("2026-12-04T09:00:00Z"), Node: demoName + "/nodes/gpu-0001", Hostname: "gpu-0001", State: loomv1.RemediationState_NODE_DRAINING,
			Reason: "bad fan", SetBy: "users/ops", Action: loomv1.RemediationAction_ACTION_DRAIN},
	}
	f.Goodputs = map[string]*loomv1.Goodput{
		"projects/default/jobs/7": {Name: "projects/default/jobs/7", Wall: durationpb.New(10 * time.Hour), Productive: durationpb.New(9 * time.Hour),
			LostRecompute: durationpb.New(20 * time.Minute), LostRestart: durationpb.New(10 * time.Minute), LostQueueing: durationpb.New(25 * time.Minute),
			LostCheckpointing: durationpb.New(5 * time.Minute), Goodput: 0.9, Failures: 2, Restarts: 2, Jobs: 1},
		// A short job: what it lost is under a second, and shown so.
		"projects/default/jobs/8": {Name: "projects/default/jobs/8", Wall: durationpb.New(31200 * time.Millisecond), Productive: durationpb.New(30920 * time.Millisecond),
			LostRestart: durationpb.New(123 * time.Millisecond), LostCheckpointing: durationpb.New(157 * time.Millisecond), Goodput: 0.991, Failures: 1, Restarts: 1, Jobs: 1},
		demoName: {Name: demoName, Wall: durationpb.New(100 * time.Hour), Productive: durationpb.New(98 * time.Hour),
			LostRestart: durationpb.New(2 * time.Hour), Goodput: 0.98, Failures: 3, Restarts: 3, Jobs: 12},
		// A cluster that has run nothing yet: no ratio to show.
		"projects/default/clusters/a3u": {Name: "projects/default/clusters/a3u"},
	}
	f.HealthPolicies = map[string]*loomv1.HealthPolicy{demoName: {Cluster: demoName, Remediation: "dry-run", MaxRemediating: 0.25,
		MaxRemediatingNodes: 2, RemediatingNodes: 1, Nodes: 8, LemonFailures: 3, LemonWindow: durationpb.New(24 * time.Hour),
		HeartbeatTimeout: durationpb.New(15 * time.Second), MassSilence: 0.5,
		Thresholds:   &loomv1.TelemetryThresholds{SbePerMinute: 10, NvlinkPerMinute: 10, GpuTemperatureMaxC: 90, DiskFull: 0.97, DiskWarn: 0.9},
		DrainTimeout: durationpb.New(10 * time.Minute), ConfirmTimeout: durationpb.New(10 * time.Minute), RepairTimeout: durationpb.New(90 * time.Minute),
		ScanInterval: durationpb.New(6 * time.Hour), StragglerRatio: 0.8, ScanChecks: []string{"gpu_diag", "disk", "speed"}, ScanLevel: 1,
		CheckGrace: durationpb.New(30 * time.Second), AllreduceMinBusbwGbps: map[string]float64{"a3-highgpu-8g": 40, "*": 5},
		Checks: []*loomv1.CheckPolicy{{Check: "gpu_diag", Validity: durationpb.New(24 * time.Hour), Timeout: durationpb.New(time.Minute)},
			{Check: "disk", Validity: durationpb.New(time.Hour), Timeout: durationpb.New(30 * time.Second)}},
		DefaultCheckValidity: durationpb.New(time.Hour), DefaultCheckTimeout: durationpb.New(5 * time.Minute)}}
	// gpu-0001 is in demo only; a3u's nodes are a3u-*.
	return f
}

func TestHealthTables(t *testing.T) {
	t.Parallel()
	_, gw := newHealthGateway(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"health", "nodes", "demo"}, `
NODE      STATE     REASON                              SET BY       SINCE  NEXT    GPUS        TEMP  ECC SBE/DBE  XID      HEARTBEAT
gpu-0001  HEALTHY   -                                   loom-health  3h     -       3 sim       44C   3/0          -        2s ago
gpu-0002  DRAINING  Xid 79: GPU has fallen off the bus  loom-health  2m     REBOOT  3 (1 lost)  71C   3/0          79@GPU0  20s ago
`},
		// One node: its row, then each GPU's readings.
		{[]string{"health", "nodes", "demo", "gpu-0002"}, `
NODE      STATE     REASON                              SET BY       SINCE  NEXT    GPUS        TEMP  ECC SBE/DBE  XID      HEARTBEAT
gpu-0002  DRAINING  Xid 79: GPU has fallen off the bus  loom-health  2m     REBOOT  3 (1 lost)  71C   3/0          79@GPU0  20s ago

GPUs:
  GPU  TEMP  POWER  UTIL  MEMORY   SM CLOCK  ECC SBE/DBE (AGG)  REMAPPED C/U  RETIRED  NVLINK CRC/REPLAY  PCIE REPLAY  XID  STATE
  0    -     -      -     -        -         -                  -             -        -                  -            79   fell off the bus
  1    71C   0W     0%    0/0 MiB  0 MHz     1/0 (0/0)          0/0           0        0/0                0            -    ok
  2    52C   0W     0%    0/0 MiB  0 MHz     2/0 (0/0)          0/0           0        0/0                0            -    ok
`},
		{[]string{"health", "nodes", "demo", "gpu-[0003-0004]"}, `
No node of gpu-[0003-0004] in demo has reported to health; ` + "`loom health nodes demo`" + ` lists those that have.
`},
		// What happened, newest first, nodes since replaced too.
		{[]string{"health", "events", "demo"}, `
TIME                  NODE      STATE      REASON                                                                             SET BY       ACTION
2026-12-04T10:00:02Z  gpu-0003  HEALTHY    repaired (replace) and confirmed by gpu_diag, for: row remapping failure on GPU 2  loom-health  -
2026-12-04T10:00:00Z  gpu-0002  REPLACING  row remapping failure on GPU 2                                                     loom-health  REPLACE
2026-12-04T09:00:00Z  gpu-0001  DRAINING   bad fan                                                                            users/ops    DRAIN
`},
		{[]string{"health", "events", "demo", "gpu-0001"}, `
TIME                  NODE      STATE     REASON   SET BY     ACTION
2026-12-04T09:00:00Z  gpu-0001  DRAINING  bad fan  users/ops  DRAIN
`},
		{[]string{"health", "events", "demo", "gpu-0009"}, `
No health events in demo: no node has been taken out or repaired.
`},
		{[]string{"health", "results", "demo"}, `
NODE      CHECK       OUTCOME  SUMMARY                       TRIGGER  SCAN  AGE  VALID
gpu-0003  gpu_diag/1  SKIPPED  the node is busy with jobs    scan     s2    30s  -
gpu-0002  gpu_diag/2  FAIL     memory test: GPU 0 not found  confirm  s1    1m   23h
gpu-0001  disk        PASS     / 12% used                    scan     s1    2h   expired
`},
		// With --scan, how far the scan got first.
		{[]string{"health", "results", "demo", "--scan", "s1"}, `
Scan s1 (scan, 2h ago) is done: 2 of 2 checks answered (1 PASS, 1 FAIL).
NODE      CHECK       OUTCOME  SUMMARY                       TRIGGER  SCAN  AGE  VALID
gpu-0002  gpu_diag/2  FAIL     memory test: GPU 0 not found  confirm  s1    1m   23h
gpu-0001  disk        PASS     / 12% used                    scan     s1    2h   expired
`},
		{[]string{"health", "results", "a3u"}, `
No health results. Run checks with ` + "`loom health scan a3u`" + `.
`},
		{[]string{"jobs", "goodput", "7"}, `
Name:                   projects/default/jobs/7
Wall:                   10h0m0s
Productive:             9h0m0s (90.0%)
Lost to recompute:      20m0s (3.3%)
Lost to restarts:       10m0s (1.7%)
Lost to queueing:       25m0s (4.2%)
Lost to checkpointing:  5m0s (0.8%)
Failures:               2
Restarts:               2
Goodput:                90.0%
`},
		{[]string{"jobs", "goodput", "8"}, `
Name:                   projects/default/jobs/8
Wall:                   31.2s
Productive:             30.9s (99.1%)
Lost to recompute:      0s (0.0%)
Lost to restarts:       123ms (0.4%)
Lost to queueing:       0s (0.0%)
Lost to checkpointing:  157ms (0.5%)
Failures:               1
Restarts:               1
Goodput:                99.1%
`},
		{[]string{"clusters", "goodput", "demo"}, `
Name:                   projects/default/clusters/demo
Jobs:                   12
Wall:                   100h0m0s
Productive:             98h0m0s (98.0%)
Lost to recompute:      0s (0.0%)
Lost to restarts:       2h0m0s (2.0%)
Lost to queueing:       0s (0.0%)
Lost to checkpointing:  0s (0.0%)
Failures:               3
Restarts:               3
Goodput:                98.0%
`},
		{[]string{"clusters", "goodput", "a3u"}, `
Name:                   projects/default/clusters/a3u
Jobs:                   0
Wall:                   0s
Productive:             0s
Lost to recompute:      0s
Lost to restarts:       0s
Lost to queueing:       0s
Lost to checkpointing:  0s
Failures:               0
Restarts:               0
Goodput:                - (no run time yet)
`},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			out, errOut, code := run(t, gw, c.args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			golden(t, out, c.want)
		})
	}
	// --since is the window sent.
	f, gw2 := newHealthGateway(t)
	if _, errOut, code := run(t, gw2, "clusters", "goodput", "demo", "--since", "48h"); code != 0 {
		t.Fatalf("--since: exit %d: %s", code, errOut)
	}
	if req, _ := fakegw.LastRequest[*loomv1.GetClusterGoodputRequest](f); !req.GetSince().AsTime().Equal(testNow.Add(-48 * time.Hour)) {
		t.Errorf("--since 48h sent %v, want %v", req.GetSince().AsTime(), testNow.Add(-48*time.Hour))
	}
}

// TestHealthJSON: every get and list of health and goodput takes -o json
// and prints the message whole.
func TestHealthJSON(t *testing.T) {
	t.Parallel()
	_, gw := newHealthGateway(t)
	for _, c := range []struct {
		args []string
		into proto.Message
		ok   func(proto.Message) bool
	}{
		{[]string{"health", "nodes", "demo"}, &loomv1.ListNodeHealthResponse{}, func(m proto.Message) bool {
			n := m.(*loomv1.ListNodeHealthResponse).GetNodes()
			return len(n) == 2 && n[1].GetReason() == "Xid 79: GPU has fallen off the bus" && len(n[1].GetGpus()) == 3
		}},
		{[]string{"health", "results", "demo", "--check", "gpu_diag"}, &loomv1.ListHealthResultsResponse{}, func(m proto.Message) bool {
			r := m.(*loomv1.ListHealthResultsResponse).GetResults()
			return len(r) == 2 && r[0].GetOutcome() == loomv1.CheckOutcome_CHECK_SKIPPED && strings.Contains(r[1].GetSummary(), "(detail follows)")
		}},
		{[]string{"health", "events", "demo", "gpu-000[2-3]"}, &loomv1.ListNodeHealthEventsResponse{}, func(m proto.Message) bool {
			e := m.(*loomv1.ListNodeHealthEventsResponse).GetEvents()
			return len(e) == 2 && e[0].GetRepaired() && e[1].GetAction() == loomv1.RemediationAction_ACTION_REPLACE
		}},
		{[]string{"jobs", "goodput", "7"}, &loomv1.Goodput{}, func(m proto.Message) bool { return m.(*loomv1.Goodput).GetFailures() == 2 }},
		{[]string{"health", "policy", "demo"}, &loomv1.HealthPolicy{}, func(m proto.Message) bool {
			p := m.(*loomv1.HealthPolicy)
			return p.GetRemediation() == "dry-run" && p.GetMaxRemediatingNodes() == 2 && len(p.GetChecks()) == 2
		}},
		{[]string{"clusters", "goodput", "demo"}, &loomv1.Goodput{}, func(m proto.Message) bool { return m.(*loomv1.Goodput).GetJobs() == 12 }},
		{[]string{"health", "scan", "demo"}, &loomv1.ScanNodesResponse{}, func(m proto.Message) bool {
			return m.(*loomv1.ScanNodesResponse).GetScanId() != ""
		}},
		{[]string{"nodes", "drain", "gpu-0001", "--reason", "bad fan"}, &loomv1.ListNodeHealthResponse{}, func(m proto.Message) bool {
			n := m.(*loomv1.ListNodeHealthResponse).GetNodes()
			return len(n) == 1 && n[0].GetNextAction() == loomv1.RemediationAction_ACTION_DRAIN
		}},
		{[]string{"nodes", "inject-fault", "gpu-0001", "--gpu", "3", "--xid", "79"}, &loomv1.InjectFaultResponse{}, func(m proto.Message) bool {
			return m.(*loomv1.InjectFaultResponse).GetFault().GetXid() == 79
		}},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			out, errOut, code := run(t, gw, append(c.args, "-o", "json")...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			if err := protojson.Unmarshal([]byte(out), c.into); err != nil || !c.ok(c.into) {
				t.Fatalf("JSON %v: %s", err, out)
			}
		})
	}
}

// TestHealthPolicy: the policy as an aligned list, its durations without
// trailing zero units, then the checks' table; an unknown cluster says
// where to look.
func TestHealthPolicy(t *testing.T) {
	t.Parallel()
	_, gw := newHealthGateway(t)
	out, errOut, code := run(t, gw, "health", "policy", "demo")
	want := `Cluster:             projects/default/clusters/demo
Remediation:         dry-run
In repair:           1 of at most 2 (0.25 of 8 nodes, at least 1)
Quarantine (lemon):  3 failures within 24h
Heartbeat timeout:   15s
Mass silence:        0.5 of the nodes silent together are unreachable, not failed
Single-bit ECC:      10 a minute
NVLink errors:       10 a minute
GPU temperature:     90 °C
Disk:                97% full: reimage; 90%: warning
Drain timeout:       10m
Confirm timeout:     10m
Repair timeout:      1h30m
Scheduled scans:     every 6h: gpu_diag (level 1), disk, speed
Check grace:         30s past a check's timeout, then unanswered
Straggler ratio:     0.8 of the median speed
All-reduce sizes:    256K,1M,4M (the agent's)
All-reduce minimum:  a3-highgpu-8g 40; other types 5 GB/s bus bandwidth

CHECK       VALID FOR  TIMEOUT
gpu_diag    24h        1m a level
disk        1h         30s
(a site's)  1h         5m
`
	if code != 0 || out != want {
		t.Fatalf("health policy demo: exit %d, stderr %q, stdout\n%s\nwant\n%s", code, errOut, out, want)
	}
	_, errOut, code = run(t, gw, "health", "policy", "nope")
	if code == 0 || !strings.Contains(errOut, "loom clusters list") {
		t.Errorf("unknown cluster: exit %d, %q; want a failure naming loom clusters list", code, errOut)
	}
}

// TestHealthScan: the request carries the flags; --wait shows each result
// as it comes, then the table, and fails when a check failed, saying where
// to look next.
func TestHealthScan(t *testing.T) {
	t.Parallel()
	f, gw := newHealthGateway(t)
	f.ScanOutcomes = map[string]loomv1.CheckOutcome{"gpu-0002": loomv1.CheckOutcome_CHECK_FAIL}
	// A check named twice is asked once (health runs it once; --wait
	// counting it twice waited for a result that never came).
	out, errOut, code := run(t, gw, "health", "scan", "demo", "--nodes", "gpu-[0001-0002]", "--checks", "gpu_diag, disk,gpu_diag", "--level", "2", "--allow-busy", "--wait", "--wait-timeout", "20s")
	if code != 1 {
		t.Fatalf("exit %d, want 1 (a check failed): %s%s", code, out, errOut)
	}
	req, _ := fakegw.LastRequest[*loomv1.ScanNodesRequest](f)
	want := &loomv1.ScanNodesRequest{Cluster: demoName, Hostnames: []string{"gpu-[0001-0002]"}, Checks: []string{"gpu_diag", "disk"}, Level: 2, AllowBusy: true}
	if !proto.Equal(req, want) {
		t.Errorf("ScanNodes request %v, want %v", req, want)
	}
	golden(t, out, `
Scan scan-1: gpu_diag,disk on 2 nodes (gpu-[0001-0002]).
  0 of 4 checks answered
  1 of 4 checks answered
  2 of 4 checks answered
  3 of 4 checks answered (1 failed)
  4 of 4 checks answered (2 failed)
NODE      CHECK       OUTCOME  SUMMARY                      TOOK
gpu-0001  disk        PASS     ok                           0s
gpu-0001  gpu_diag/2  PASS     ok                           0s
gpu-0002  disk        FAIL     disk failed on gpu-0002      0s
gpu-0002  gpu_diag/2  FAIL     gpu_diag failed on gpu-0002  0s
`)
	if !strings.Contains(errOut, "2 of 4 checks failed; `loom health nodes demo` shows what health does about them") {
		t.Errorf("stderr %q", errOut)
	}

	// A gateway without GetHealthScan (or a scan health has not taken up
	// yet, a real scan's first lines): the results are counted, a check
	// per node, in the same words ("0 of 10 results" then "5 of 10 checks
	// answered" read as two different counts).
	f.NoScanProgress = true
	out, _, code = run(t, gw, "health", "scan", "demo", "--nodes", "gpu-0001", "--checks", "disk", "--wait", "--wait-timeout", "20s")
	f.NoScanProgress = false
	if code != 0 || !strings.Contains(out, "  1 of 1 check answered\n") || strings.Contains(out, "results") {
		t.Fatalf("--wait without scan progress: exit %d\n%s", code, out)
	}

	// --timeout goes with the request (each check's own deadline).
	if _, errOut, code := run(t, gw, "health", "scan", "demo", "--checks", "disk", "--timeout", "90s"); code != 0 {
		t.Fatalf("--timeout: exit %d: %s", code, errOut)
	}
	if req, _ := fakegw.LastRequest[*loomv1.ScanNodesRequest](f); req.GetTimeout().AsDuration() != 90*time.Second || req.GetParams() != nil {
		t.Errorf("--timeout 90s sent %v, params %v", req.GetTimeout(), req.GetParams())
	}
	// Without --wait: the scan id, and where its results will be.
	out, errOut, code = run(t, gw, "health", "scan", "demo")
	if code != 0 || !strings.Contains(out, "Scan scan-4: gpu_diag,disk on 2 nodes (gpu-[0001-0002]).") ||
		!strings.Contains(out, "loom health results demo --scan scan-4") {
		t.Errorf("scan without --wait: exit %d\n%s%s", code, out, errOut)
	}
	// Each --param goes with the request as given: a value may hold '='
	// and commas, and may be empty (the check's default).
	if _, errOut, code := run(t, gw, "health", "scan", "demo", "--checks", "disk,allreduce", "--param", "paths=/,/scratch",
		"--param", "min_free_gb=50", "--param", "site_opt=a=b", "--param", "iters="); code != 0 {
		t.Fatalf("--param: exit %d: %s", code, errOut)
	}
	wantParams := map[string]string{"paths": "/,/scratch", "min_free_gb": "50", "site_opt": "a=b", "iters": ""}
	if req, _ := fakegw.LastRequest[*loomv1.ScanNodesRequest](f); !maps.Equal(req.GetParams(), wantParams) {
		t.Errorf("--param sent %v, want %v", req.GetParams(), wantParams)
	}
	// Mistakes say what is right.
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"health", "scan", "demo", "--level", "7"}, 2, "--level must be 1, 2 or 3"},
		{[]string{"health", "scan", "demo", "--param", "stress"}, 2, `--param wants KEY=VALUE, e.g. --param stress=10s, got "stress"`},
		{[]string{"health", "scan", "demo", "--param", "=10s"}, 2, "--param wants KEY=VALUE"},
		{[]string{"health", "scan", "demo", "--param", "iters=5", "--param", "iters=6"}, 2, "--param iters given twice"},
		{[]string{"health", "scan"}, 2, "give the cluster"},
		{[]string{"health", "scan", "nope"}, 1, "loom clusters list"},
		{[]string{"health", "scan", "demo", "--nodes", "gpu-0009"}, 1, "gpu-0009 is not a node of"},
	} {
		_, errOut, code := run(t, gw, c.args...)
		if code != c.code || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d %q, want %d and %q", c.args, code, errOut, c.code, c.want)
		}
	}
}

// TestHealthScans: the scans health keeps, newest first, a running one
// with its checks still out; --limit, -o json, and a cluster that does
// not exist.
func TestHealthScans(t *testing.T) {
	t.Parallel()
	f, gw := newHealthGateway(t)
	if _, errOut, code := run(t, gw, "health", "scan", "demo", "--nodes", "gpu-[0001-0002]", "--checks", "disk", "--level", "2"); code != 0 {
		t.Fatalf("scan: exit %d: %s", code, errOut)
	}
	out, errOut, code := run(t, gw, "health", "scans", "demo")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	golden(t, out, `
SCAN    TRIGGER  LEVEL  AGE  STATE    ANSWERED  PASS  WARN  FAIL  SKIPPED  ERROR  NODES
scan-1  scan     -      0s   running  0/2       -     -     -     -        -      gpu-[0001-0002]
s2      scan     -      30s  done     1/1       -     -     -     1        -      gpu-0003
s1      scan     -      2h   done     2/2       1     -     1     -        -      gpu-[0001-0002]
`)
	if req, _ := fakegw.LastRequest[*loomv1.ListHealthScansRequest](f); req.GetCluster() != demoName {
		t.Errorf("asked for %q, want %q", req.GetCluster(), demoName)
	}
	out, _, code = run(t, gw, "health", "scans", "demo", "--limit", "1", "-o", "json")
	var got loomv1.ListHealthScansResponse
	if code != 0 || protojson.Unmarshal([]byte(out), &got) != nil || len(got.GetScans()) != 1 || got.GetScans()[0].GetScanId() != "scan-1" {
		t.Errorf("--limit 1 -o json: exit %d\n%s", code, out)
	}
	if _, errOut, code := run(t, gw, "health", "scans", "nope"); code != 1 || !strings.Contains(errOut, "loom clusters list") {
		t.Errorf("a cluster that does not exist: exit %d %q", code, errOut)
	}
	if _, errOut, code := run(t, gw, "health", "scans"); code != 2 || !strings.Contains(errOut, "loom health scans demo") {
		t.Errorf("no cluster: exit %d %q", code, errOut)
	}
}

// TestInjectFault: every kind becomes its Fault; flags that do not belong
// to the kind, a missing kind or a bad Xid are usage errors; a node with
// real GPUs is refused with the reason.
func TestInjectFault(t *testing.T) {
	t.Parallel()
	f, gw := newHealthGateway(t)
	for _, c := range []struct {
		args []string
		want *loomv1.Fault
		says string
	}{
		{[]string{"--gpu", "3", "--xid", "79"}, &loomv1.Fault{Kind: loomv1.FaultKind_FAULT_XID, Gpu: 3, Xid: 79}, "Injected Xid 79 into GPU 3 of gpu-0001."},
		{[]string{"--kind", "ecc-sbe", "--rate", "50"}, &loomv1.Fault{Kind: loomv1.FaultKind_FAULT_ECC_SBE, Gpu: -1, Value: 50}, "single-bit ECC errors at 50/min into every GPU"},
		{[]string{"--kind", "dbe", "--gpu", "1"}, &loomv1.Fault{Kind: loomv1.FaultKind_FAULT_ECC_DBE, Gpu: 1}, "a double-bit ECC error into GPU 1"},
		{[]string{"--kind", "remap-failure", "--gpu", "0"}, &loomv1.Fault{Kind: loomv1.FaultKind_FAULT_ROW_REMAP_FAILURE}, "row-remapping failure"},
		{[]string{"--kind", "thermal"}, &loomv1.Fault{Kind: loomv1.FaultKind_FAULT_THERMAL, Gpu: -1}, "thermal runaway (+0.25 °C/s)"},
		{[]string{"--kind", "thermal", "--rate", "2", "--gpu", "0"}, &loomv1.Fault{Kind: loomv1.FaultKind_FAULT_THERMAL, Value: 2}, "thermal runaway (+2 °C/s) into GPU 0"},
		{[]string{"--kind", "slow", "--factor", "3", "--gpu", "2"}, &loomv1.Fault{Kind: loomv1.FaultKind_FAULT_SLOW_GPU, Gpu: 2, Value: 3}, "a slowdown by 3x into GPU 2"},
		{[]string{"--kind", "off-bus", "--gpu", "5"}, &loomv1.Fault{Kind: loomv1.FaultKind_FAULT_FALLEN_OFF_BUS, Gpu: 5}, "a fall off the bus into GPU 5"},
		{[]string{"--kind", "nvlink", "--rate", "10"}, &loomv1.Fault{Kind: loomv1.FaultKind_FAULT_NVLINK, Gpu: -1, Value: 10}, "NVLink errors"},
		{[]string{"--kind", "disk-full"}, &loomv1.Fault{Kind: loomv1.FaultKind_FAULT_DISK_FULL, Gpu: -1}, "a full disk into the node of gpu-0001"},
		{[]string{"--kind", "hung-job"}, &loomv1.Fault{Kind: loomv1.FaultKind_FAULT_HUNG_JOB, Gpu: -1}, "a hung job"},
		{[]string{"--kind", "no-heartbeat", "--seconds", "30"}, &loomv1.Fault{Kind: loomv1.FaultKind_FAULT_NO_HEARTBEAT, Gpu: -1, Value: 30}, "no heartbeats for 30s"},
		{[]string{"--kind", "clear"}, &loomv1.Fault{Kind: loomv1.FaultKind_FAULT_CLEAR, Gpu: -1}, "a clear of the injected faults into every GPU"},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			out, errOut, code := run(t, gw, append([]string{"nodes", "inject-fault", "gpu-0001"}, c.args...)...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			if !strings.Contains(out, c.says) || !strings.Contains(out, "loom health nodes demo") {
				t.Errorf("output %q, want %q", out, c.says)
			}
		})
	}
	// Requests, in order (the subtests ran one after the other).
	reqs := fakegw.Requests[*loomv1.InjectFaultRequest](f)
	if len(reqs) != 13 {
		t.Fatalf("%d InjectFault requests, want 13", len(reqs))
	}
	if r := reqs[0]; r.GetCluster() != demoName || r.GetHostname() != "gpu-0001" || !proto.Equal(r.GetFault(), &loomv1.Fault{Kind: loomv1.FaultKind_FAULT_XID, Gpu: 3, Xid: 79}) {
		t.Errorf("first request %v", r)
	}
	if !proto.Equal(reqs[5].GetFault(), &loomv1.Fault{Kind: loomv1.FaultKind_FAULT_THERMAL, Value: 2}) ||
		!proto.Equal(reqs[6].GetFault(), &loomv1.Fault{Kind: loomv1.FaultKind_FAULT_SLOW_GPU, Gpu: 2, Value: 3}) ||
		!proto.Equal(reqs[11].GetFault(), &loomv1.Fault{Kind: loomv1.FaultKind_FAULT_NO_HEARTBEAT, Gpu: -1, Value: 30}) {
		t.Errorf("thermal, slow and no-heartbeat requests: %v, %v, %v", reqs[5], reqs[6], reqs[11])
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"gpu-0001"}, 2, "say what to inject: --xid N, or --kind KIND"},
		{[]string{"gpu-0001", "--kind", "xid", "--rate", "5", "--xid", "13"}, 2, "--rate does not apply to --kind xid"},
		{[]string{"gpu-0001", "--xid", "1000"}, 2, "--xid must be an Xid code from 1 to 999"},
		{[]string{"gpu-0001", "--kind", "ecc-sbe"}, 2, "--kind ecc-sbe needs --rate"},
		{[]string{"gpu-0001", "--kind", "ecc-sbe", "--rate", "-5"}, 2, "--rate must be above 0 for --kind ecc-sbe, got -5"},
		{[]string{"gpu-0001", "--kind", "ecc-sbe", "--rate", "0"}, 2, "--rate must be above 0 for --kind ecc-sbe, got 0"},
		{[]string{"gpu-0001", "--kind", "dbe", "--count", "-3"}, 2, "--count must not be negative (0: the default) for --kind dbe, got -3"},
		{[]string{"gpu-0001", "--kind", "no-heartbeat", "--seconds", "-1"}, 2, "--seconds must not be negative"},
		{[]string{"gpu-0001", "--kind", "hung-job", "--gpu", "2"}, 2, "--kind hung-job is about the whole node: drop --gpu"},
		{[]string{"gpu-0001", "--kind", "meltdown"}, 2, "is not a fault kind: xid, ecc-sbe"},
		{[]string{"gpu-0002", "--xid", "13"}, 1, "has real GPUs"},
		{[]string{"gpu-0099", "--xid", "13"}, 1, "node gpu-0099 is in no cluster of project default"},
		{[]string{"gpu-0099", "--xid", "13", "--cluster", "demo"}, 1, "loom nodes list --cluster demo"},
		// A cluster that does not exist: its nodes' list would not help.
		{[]string{"gpu-0001", "--xid", "13", "--cluster", "nosuch"}, 1, "not found (see `loom clusters list`)"},
	} {
		_, errOut, code := run(t, gw, append([]string{"nodes", "inject-fault"}, c.args...)...)
		if code != c.code || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d %q, want %d and %q", c.args, code, errOut, c.code, c.want)
		}
	}
}

// TestNodeRemediation: drain, resume, quarantine, reboot, reimage and
// replace send one request per node of their hostlists, with the reason
// (required but for resume); report-faulty sends the nodes at once.
func TestNodeRemediation(t *testing.T) {
	t.Parallel()
	f, gw := newHealthGateway(t)
	out, errOut, code := run(t, gw, "nodes", "drain", "gpu-[0001-0002]", "--reason", "bad fan")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	golden(t, out, `
gpu-0001: drain requested (it was HEALTHY).
gpu-0002: drain requested (it was DRAINING).
Follow it with `+"`loom health nodes demo`"+`.
`)
	for verb, action := range map[string]loomv1.RemediationAction{"resume": loomv1.RemediationAction_ACTION_RESUME,
		"quarantine": loomv1.RemediationAction_ACTION_QUARANTINE, "reboot": loomv1.RemediationAction_ACTION_REBOOT,
		"reimage": loomv1.RemediationAction_ACTION_REIMAGE, "replace": loomv1.RemediationAction_ACTION_REPLACE} {
		args := []string{"nodes", verb, "gpu-0002", "--cluster", "demo"}
		if verb != "resume" {
			args = append(args, "--reason", "by hand")
		}
		if _, errOut, code := run(t, gw, args...); code != 0 {
			t.Fatalf("%s: exit %d: %s", verb, code, errOut)
		}
		r, _ := fakegw.LastRequest[*loomv1.UpdateNodeRemediationRequest](f)
		if r.GetAction() != action || r.GetHostname() != "gpu-0002" || r.GetCluster() != demoName {
			t.Errorf("%s sent %v", verb, r)
		}
	}
	reqs := fakegw.Requests[*loomv1.UpdateNodeRemediationRequest](f)
	if len(reqs) != 7 || reqs[0].GetHostname() != "gpu-0001" || reqs[1].GetHostname() != "gpu-0002" || reqs[0].GetReason() != "bad fan" ||
		reqs[0].GetAction() != loomv1.RemediationAction_ACTION_DRAIN {
		t.Errorf("requests %v", reqs)
	}

	out, errOut, code = run(t, gw, "nodes", "report-faulty", "gpu-0001", "gpu-0002", "--reason", "NCCL hangs")
	if code != 0 || out != "Reported gpu-[0001-0002] faulty (NCCL hangs). Follow the repair with `loom health nodes demo`.\n" {
		t.Errorf("report-faulty: exit %d %q %s", code, out, errOut)
	}
	rf, _ := fakegw.LastRequest[*loomv1.ReportFaultyNodesRequest](f)
	if !proto.Equal(rf, &loomv1.ReportFaultyNodesRequest{Cluster: demoName, Hostnames: []string{"gpu-0001", "gpu-0002"}, Reason: "NCCL hangs"}) {
		t.Errorf("ReportFaultyNodes request %v", rf)
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"nodes", "drain", "gpu-0001"}, 2, "needs --reason"},
		{[]string{"nodes", "reboot"}, 2, "needs the nodes"},
		{[]string{"nodes", "report-faulty", "gpu-0001"}, 2, "needs --reason"},
		{[]string{"nodes", "drain", "gpu-[0001", "--reason", "x"}, 2, "hostlist"},
		{[]string{"nodes", "drain", "gpu-0001", "a3u-0001", "--reason", "x"}, 1, "act on one cluster at a time with --cluster"},
		{[]string{"nodes", "drain", "gpu-0009", "--reason", "x", "--cluster", "demo"}, 1, "loom nodes list --cluster demo"},
		{[]string{"jobs", "goodput", "99"}, 1, "loom jobs list"},
		{[]string{"clusters", "goodput", "demo", "--since", "-1h"}, 2, "--since must be a positive duration"},
	} {
		_, errOut, code := run(t, gw, c.args...)
		if code != c.code || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d %q, want %d and %q", c.args, code, errOut, c.code, c.want)
		}
	}
	// A name that is not in --cluster stops the command before any node is
	// acted on; a hostlist past 4,096 names stops it before it is built.
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"nodes", "drain", "gpu-0001", "gpu-0009", "--reason", "x", "--cluster", "demo"}, 1, "node gpu-0009 is not in cluster demo"},
		{[]string{"nodes", "drain", "gpu-[000000-999999]", "--reason", "x"}, 2, "more than 4096 nodes named"},
	} {
		before := len(fakegw.Requests[*loomv1.UpdateNodeRemediationRequest](f))
		_, errOut, code := run(t, gw, c.args...)
		if code != c.code || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d %q, want %d and %q", c.args, code, errOut, c.code, c.want)
		}
		if after := len(fakegw.Requests[*loomv1.UpdateNodeRemediationRequest](f)); after != before {
			t.Errorf("%v: %d nodes acted on before the command failed", c.args, after-before)
		}
	}
}

// TestNodeHealthStateMarksDryRun: under -remediation=dry-run a node's
// state says health only tells what it would do.
func TestNodeHealthStateMarksDryRun(t *testing.T) {
	t.Parallel()
	for n, want := range map[*loomv1.NodeHealth]string{
		{State: loomv1.RemediationState_NODE_DRAINING, DryRun: true}: "DRAINING (dry-run)",
		{State: loomv1.RemediationState_NODE_DRAINING}:               "DRAINING",
	} {
		if got := nodeHealthState(n); got != want {
			t.Errorf("nodeHealthState(%v) = %q, want %q", n, got, want)
		}
	}
}

// TestNegativeLimitIsAUsageError: every list's --limit goes through
// collect, which refuses a negative one the same way (health's lists took
// -1 as "all" before, jobs list exited 1 for it).
func TestNegativeLimitIsAUsageError(t *testing.T) {
	t.Parallel()
	_, gw := newHealthGateway(t)
	for _, args := range [][]string{
		{"health", "events", "demo", "--limit", "-1"},
		{"health", "results", "demo", "--limit", "-1"},
		{"jobs", "list", "--limit", "-1"},
	} {
		_, errOut, code := run(t, gw, args...)
		if code != 2 || !strings.Contains(errOut, "--limit must not be negative, got -1; 0 lists them all") {
			t.Errorf("%v: exit %d %q, want 2 and the limit named", args, code, errOut)
		}
	}
}

// TestScanLine: a running scan with a level, and one where nothing has
// answered yet.
func TestScanLine(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	sc := &loomv1.HealthScan{ScanId: "s7", Trigger: "schedule", Level: 2, StartTime: timestamppb.New(now.Add(-90 * time.Second)),
		Checks: 8, Answered: 3, Passed: 2, Errored: 1}
	if got, want := scanLine(sc, now), "Scan s7 (schedule, level 2, 1m ago) is running: 3 of 8 checks answered (2 PASS, 1 ERROR)."; got != want {
		t.Errorf("scanLine = %q, want %q", got, want)
	}
	sc = &loomv1.HealthScan{ScanId: "s8", Trigger: "scan", StartTime: timestamppb.New(now), Checks: 1}
	if got, want := scanLine(sc, now), "Scan s8 (scan, 0s ago) is running: 0 of 1 check answered."; got != want {
		t.Errorf("scanLine = %q, want %q", got, want)
	}
}

// TestNodesListHealth: loom nodes list shows each node's health (a drain
// the provisioner does not know of), reading every page of each listed
// cluster's health, and where health cannot be read shows "?" and says why
// and what to run instead of failing the list.
func TestNodesListHealth(t *testing.T) {
	t.Parallel()
	t.Run("paged", func(t *testing.T) {
		t.Parallel()
		f := newFakeGatewayData()
		// Past a page (100) of a3u's health: the drained node's is on the second.
		var filler []*loomv1.NodeHealth
		for i := range 150 {
			filler = append(filler, &loomv1.NodeHealth{Hostname: fmt.Sprintf("gone-%04d", i), Cluster: a3uName, State: loomv1.RemediationState_NODE_HEALTHY})
		}
		f.NodeHealth = append(filler, f.NodeHealth...)
		gw := f.Serve(t)
		out, errOut, code := run(t, gw, "nodes", "list")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		if !regexp.MustCompile(`(?m)^a3u-0004 +a3u +a3u +READY +DRAINING +8 .* maint$`).MatchString(out) {
			t.Fatalf("a3u-0004 not shown DRAINING, maint under REASON/NEXT:\n%s", out)
		}
		var clusters []string
		for _, r := range fakegw.Requests[*loomv1.ListNodeHealthRequest](f) {
			if r.GetPageToken() == "" {
				clusters = append(clusters, r.GetCluster())
			}
		}
		if want := []string{demoName, a3uName}; !slices.Equal(clusters, want) {
			t.Fatalf("health read for %v, want once each for %v", clusters, want)
		}
	})
	for _, c := range []struct {
		name string
		err  error
		next string
	}{
		{"unimplemented", status.Error(codes.Unimplemented, "unknown service loom.v1.HealthService"), "`loom slurm sinfo -R -M demo` shows drained nodes."},
		{"unavailable", status.Error(codes.Unavailable, "health: connection refused"), "`loom health nodes demo` shows it once it can be read."},
		{"denied", status.Error(codes.PermissionDenied, "Access/permission denied: alice is not a viewer of cluster demo"), "`loom auth whoami` says who you are"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := newFakeGatewayData()
			f.NodeHealthErr = c.err
			gw := f.Serve(t)
			out, errOut, code := run(t, gw, "nodes", "list")
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
			if len(lines) != 12 {
				t.Fatalf("want the header, 10 nodes and one line under them:\n%s", out)
			}
			for _, l := range lines[1:11] {
				if strings.Fields(l)[4] != "?" {
					t.Fatalf("HEALTH of %q is not ?:\n%s", l, out)
				}
			}
			note := lines[11]
			if !strings.HasPrefix(note, "HEALTH ?: could not read the node health of demo, a3u: ") || !strings.Contains(note, c.next) {
				t.Fatalf("the line under the table: %q", note)
			}
		})
	}
	t.Run("other errors fail", func(t *testing.T) {
		t.Parallel()
		f := newFakeGatewayData()
		f.NodeHealthErr = status.Error(codes.Internal, "boom")
		gw := f.Serve(t)
		out, errOut, code := run(t, gw, "nodes", "list")
		if code == 0 || !strings.Contains(errOut, "read the health of the nodes of demo: Internal: boom") {
			t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
		}
	})
}
