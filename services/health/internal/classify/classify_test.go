package classify

import (
	"bufio"
	"encoding/csv"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/healthcheck"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

const (
	none    = loomv1.RemediationAction_ACTION_NONE
	restart = loomv1.RemediationAction_ACTION_RESTART_JOB
	reset   = loomv1.RemediationAction_ACTION_RESET_GPU
	reboot  = loomv1.RemediationAction_ACTION_REBOOT
	reimage = loomv1.RemediationAction_ACTION_REIMAGE
	replace = loomv1.RemediationAction_ACTION_REPLACE
)

// standard is the mapping of the catalog's immediate resolutions,
// written out again here so that a change to the package's table fails.
var standard = map[string]loomv1.RemediationAction{
	"RESTART_APP": restart, "RESET_GPU": reset, "RESTART_BM": reboot,
	"RESTART_VM": reimage, "CONTACT_SUPPORT": replace, "IGNORE": none,
}

// special is every Xid whose row has no standard resolution, and Loom's
// reading of it.
var special = map[int32]loomv1.RemediationAction{
	45: none, 48: reset, 54: replace, 74: reset, 78: reimage, 144: reset, 145: reset, 146: reset, 147: reset,
	148: reset, 149: reset, 150: reset, 154: none, 159: restart,
	162: none, 163: none, 164: none, 165: none, 166: reset, 167: reboot, 168: reset, 169: reset, 170: reset,
	171: reset, 172: reset,
}

// TestWholeCatalog classifies every row of the catalog file (read here with
// its own parser) and checks action, severity, urgency and reason.
func TestWholeCatalog(t *testing.T) {
	t.Parallel()
	f, err := os.Open("xid_catalog.csv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(rows)-1 != 172 || len(Catalog()) != 172 {
		t.Fatalf("catalog has %d rows, package %d, want 172", len(rows)-1, len(Catalog()))
	}
	seenSpecial := 0
	for _, r := range rows[1:] {
		x64, err := strconv.ParseInt(r[0], 10, 32)
		if err != nil {
			t.Fatal(err)
		}
		x := int32(x64)
		want, ok := standard[r[3]]
		if s, isSpecial := special[x]; isSpecial {
			want, ok = s, true
			seenSpecial++
		}
		if !ok {
			t.Errorf("xid %d: resolution %q has no expected action in the test", x, r[3])
			continue
		}
		v := Xid(2, x)
		if v.Action != want {
			t.Errorf("xid %d (%s): action %v, want %v", x, r[3], v.Action, want)
		}
		wantSev := SeverityCritical
		switch want {
		case none:
			wantSev = SeverityInfo
		case restart:
			wantSev = SeverityWarning
		}
		if v.Severity != wantSev || v.Urgent != (wantSev == SeverityCritical) || v.CheckpointFirst {
			t.Errorf("xid %d: severity %v urgent %v checkpoint-first %v", x, v.Severity, v.Urgent, v.CheckpointFirst)
		}
		desc := strings.TrimSpace(strings.SplitN(r[2], " | ", 2)[0])
		if v.Reason != "Xid "+r[0]+": "+desc || v.Xid != x || v.GPU != 2 {
			t.Errorf("xid %d: reason %q xid %d gpu %d", x, v.Reason, v.Xid, v.GPU)
		}
		if info, ok := Lookup(x); !ok || info.Immediate != r[3] || info.Mnemonic != r[1] {
			t.Errorf("xid %d: lookup %+v %v", x, info, ok)
		}
	}
	if seenSpecial != len(special) {
		t.Errorf("%d special Xids in the catalog, the test names %d", seenSpecial, len(special))
	}
}

func TestWellKnownXids(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		xid    int32
		action loomv1.RemediationAction
		urgent bool
		reason string
	}{
		{79, reboot, true, "Xid 79: GPU has fallen off the bus"},
		{13, restart, false, "Xid 13: Graphics Engine Exception"},
		{31, restart, false, "Xid 31: GPU memory page fault"},
		{48, reset, true, "Xid 48: Double Bit ECC Error"},
		{119, reset, true, "Xid 119: GSP RPC Timeout"},
		{151, reimage, true, "Xid 151: Key rotation Error"},
		{63, none, false, "Xid 63: GPU memory remapping event"},
		{62, reset, true, "Xid 62: Internal micro-controller halt"},
		{9999, reset, true, "Xid 9999: unknown Xid"},
	} {
		v := Xid(0, tc.xid)
		if v.Action != tc.action || v.Urgent != tc.urgent || v.Reason != tc.reason {
			t.Errorf("xid %d: %+v, want %v urgent=%v %q", tc.xid, v, tc.action, tc.urgent, tc.reason)
		}
	}
	if Xid(0, 13).Drains() || !Xid(0, 13).Acts() || Xid(0, 63).Acts() || !Xid(0, 79).Drains() {
		t.Error("Acts/Drains disagree with the actions")
	}
}

// TestKernelLog parses the real dmesg sample: every NVRM Xid line, and no
// other.
func TestKernelLog(t *testing.T) {
	t.Parallel()
	f, err := os.Open("testdata/gpud_testdata_dmesg-with-xid-119.log")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	lines, xids := 0, 0
	for sc.Scan() {
		lines++
		k, ok := ParseKernelLine(sc.Text())
		if ok != strings.Contains(sc.Text(), "NVRM: Xid") {
			t.Errorf("line %d: parsed=%v: %s", lines, ok, sc.Text())
		}
		if !ok {
			continue
		}
		xids++
		if k.Xid != 119 || k.PCI != "PCI:0000:9b:00" || k.PID == 0 || k.Name == "" ||
			!strings.HasPrefix(k.Message, "Timeout after 6s of waiting for RPC response from GPU4 GSP!") {
			t.Errorf("line %d: %+v", lines, k)
		}
		if v := Xid(4, k.Xid); v.Reason != "Xid 119: GSP RPC Timeout" || v.Action != reset {
			t.Errorf("line %d: verdict %+v", lines, v)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if xids < 5 {
		t.Fatalf("%d Xid lines parsed of %d, want the sample's", xids, lines)
	}
	// The line an H200's driver (580.159.04) wrote when a CUDA kernel wrote
	// through a null pointer (bench/device/xid.sh): an application's Xid,
	// which restarts the job and leaves the node in service.
	real, err := os.ReadFile("testdata/h200-580-dmesg-xid31.log")
	if err != nil {
		t.Fatal(err)
	}
	k, ok := ParseKernelLine(string(real))
	if !ok || k.Xid != 31 || k.PCI != "PCI:0000:00:06" || k.PID != 674 || k.Name != "python3" ||
		!strings.Contains(k.Message, "MMU Fault: ENGINE GRAPHICS") {
		t.Fatalf("the H200's Xid 31 line: %+v %v", k, ok)
	}
	if v := Xid(0, k.Xid); v.Action != restart || !strings.HasPrefix(v.Reason, "Xid 31") {
		t.Errorf("Xid 31 verdict %+v, want the job restarted", v)
	}
	k, ok = ParseKernelLine("[1234.5] NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.")
	if !ok || k.Xid != 79 || k.PID != 0 || k.Name != "" || k.Message != "GPU has fallen off the bus." {
		t.Fatalf("unknown-process line: %+v %v", k, ok)
	}
	k, ok = ParseKernelLine("NVRM: Xid (PCI:0000:3b:00): 13, Graphics Exception: ESR 0x404600=0x80000002")
	if !ok || k.Xid != 13 || k.Message != "Graphics Exception: ESR 0x404600=0x80000002" {
		t.Fatalf("old-format line: %+v %v", k, ok)
	}
}

func sample(at time.Time, gpus ...*loomv1.GpuSample) *eventsv1.GpuTelemetry {
	return &eventsv1.GpuTelemetry{Node: "n", Time: timestamppb.New(at), Gpus: gpus}
}

func TestTelemetryThresholds(t *testing.T) {
	t.Parallel()
	th := DefaultThresholds()
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	t1 := t0.Add(time.Minute)
	ok := &loomv1.GpuSample{Index: 0, TemperatureC: 60}
	if v := th.Telemetry(nil, sample(t0, ok), nil); len(v) != 0 {
		t.Fatalf("healthy GPU: %v", v)
	}
	for _, tc := range []struct {
		name            string
		prev, cur       *loomv1.GpuSample
		action          loomv1.RemediationAction
		urgent, ckptFst bool
		reason          string
	}{
		{"dbe", ok, &loomv1.GpuSample{Index: 1, EccDbeVolatile: 1}, reset, true, false, "ECC: 1 double-bit errors on GPU 1"},
		{"sbe rate", &loomv1.GpuSample{Index: 1, EccSbeVolatile: 100}, &loomv1.GpuSample{Index: 1, EccSbeVolatile: 120}, reset, false, true, "ECC: single-bit errors at 20/min on GPU 1"},
		{"remap failure", nil, &loomv1.GpuSample{Index: 2, RemapFailure: true}, replace, false, true, "row remapping failure on GPU 2"},
		{"remap pending", nil, &loomv1.GpuSample{Index: 2, RemapPending: true}, reset, false, true, "row remapping pending on GPU 2"},
		{"thermal", nil, &loomv1.GpuSample{Index: 3, TemperatureC: 95, ThrottleReasons: ThrottleHWThermalSlowdown}, reboot, false, true, "thermal: GPU 3 throttling at 95C"},
		{"nvlink", &loomv1.GpuSample{Index: 0}, &loomv1.GpuSample{Index: 0, NvlinkCrcErrors: 30}, reset, false, true, "NVLink: 30 errors/min on GPU 0"},
		{"lost", nil, &loomv1.GpuSample{Index: 5, Lost: true}, reboot, true, false, "Xid 79: GPU has fallen off the bus (GPU 5 lost)"},
	} {
		var prev *eventsv1.GpuTelemetry
		if tc.prev != nil {
			prev = sample(t0, tc.prev)
		}
		vs := th.Telemetry(prev, sample(t1, tc.cur), LastXids(prev))
		v, found := Worst(vs)
		if !found || v.Action != tc.action || v.Urgent != tc.urgent || v.CheckpointFirst != tc.ckptFst || v.Reason != tc.reason {
			t.Errorf("%s: %+v (of %v)", tc.name, v, vs)
		}
	}
	// A node whose driver lists fewer GPUs than it offers (a GPU gone from
	// the bus altogether, as an 8-GPU machine type on the one-GPU H200
	// showed) is taken out as for a lost GPU, without an Xid of its own;
	// listing as many or more, or not knowing the count, is fine.
	short := sample(t1, ok)
	short.OfferedGpus = 8
	if v, found := Worst(th.Telemetry(nil, short, nil)); !found || v.Action != reboot || !v.Urgent || v.GPU != -1 || v.Xid != 0 ||
		v.Reason != "GPU count: the driver lists 1 of the node's 8 GPUs" {
		t.Errorf("1 of 8 GPUs listed: %+v", v)
	}
	for _, offered := range []int32{0, 1} {
		full := sample(t1, ok)
		full.OfferedGpus = offered
		if v := th.Telemetry(nil, full, nil); len(v) != 0 {
			t.Errorf("1 GPU listed, %d offered: %v", offered, v)
		}
	}
	// Below the rates: nothing. A counter reset is not a burst.
	if v := th.Telemetry(sample(t0, &loomv1.GpuSample{EccSbeVolatile: 100}), sample(t1, &loomv1.GpuSample{EccSbeVolatile: 105}), nil); len(v) != 0 {
		t.Errorf("5 SBE/min flagged: %v", v)
	}
	if v := th.Telemetry(sample(t0, &loomv1.GpuSample{EccSbeVolatile: 1000}), sample(t1, &loomv1.GpuSample{EccSbeVolatile: 2}), nil); len(v) != 0 {
		t.Errorf("counter reset flagged: %v", v)
	}
	// A DBE count that does not grow is not a new error.
	if v := th.Telemetry(sample(t0, &loomv1.GpuSample{EccDbeVolatile: 1}), sample(t1, &loomv1.GpuSample{EccDbeVolatile: 1}), nil); len(v) != 0 {
		t.Errorf("old DBE flagged again: %v", v)
	}
	disk := func(used uint64) *eventsv1.GpuTelemetry {
		return &eventsv1.GpuTelemetry{Time: timestamppb.New(t1), Disks: []*loomv1.DiskSample{{Mount: "/", TotalBytes: 100, UsedBytes: used}}}
	}
	if v, ok := Worst(th.Telemetry(nil, disk(98), nil)); !ok || v.Action != reimage || !v.CheckpointFirst || v.Reason != "disk full: / 98% used" {
		t.Errorf("disk full: %+v", v)
	}
	if vs := th.Telemetry(nil, disk(92), nil); len(vs) != 1 || vs[0].Acts() {
		t.Errorf("disk warn: %+v", vs)
	}
	if vs := th.Telemetry(nil, disk(50), nil); len(vs) != 0 {
		t.Errorf("disk fine: %+v", vs)
	}
}

func TestWorstAndChecks(t *testing.T) {
	t.Parallel()
	v, ok := Worst([]Verdict{Xid(0, 13), {Action: reimage, CheckpointFirst: true}, Xid(1, 79), Xid(0, 63)})
	if !ok || v.Xid != 79 {
		t.Fatalf("worst: %+v", v)
	}
	if _, ok := Worst([]Verdict{Xid(0, 63)}); ok {
		t.Fatal("an ignored Xid acts")
	}
	c := CheckFailed(&loomv1.HealthCheckResult{Check: "gpu_diag", Summary: "memory test failed on GPU 3", Gpu: 3})
	if c.Action != reboot || !c.CheckpointFirst || c.Urgent || c.Reason != "check gpu_diag failed: memory test failed on GPU 3" || c.GPU != 3 {
		t.Fatalf("check: %+v", c)
	}
	if CheckFailed(&loomv1.HealthCheckResult{Check: "disk"}).Action != reimage {
		t.Fatal("disk check")
	}
	// Around a job, the reason reads as Slurm drains a node for a failed
	// prolog or epilog, naming the check; the repair is the check's own.
	for _, tc := range []struct {
		r      *loomv1.HealthCheckResult
		reason string
		action loomv1.RemediationAction
	}{
		{&loomv1.HealthCheckResult{Check: "gpu_diag", Trigger: TriggerProlog, Summary: "level 1 on 1 GPUs: Xid 79", Gpu: 0},
			"Prolog error: check gpu_diag failed: level 1 on 1 GPUs: Xid 79", reboot},
		{&loomv1.HealthCheckResult{Check: "disk", Trigger: TriggerProlog, Summary: "/ 100.0% used"},
			"Prolog error: check disk failed: / 100.0% used", reimage},
		{&loomv1.HealthCheckResult{Check: "gpu_diag", Trigger: TriggerEpilog, Summary: "memory test failed"},
			"Epilog error: check gpu_diag failed: memory test failed", reboot},
		{&loomv1.HealthCheckResult{Check: "ib_ports", Trigger: TriggerEpilog}, "Epilog error: check ib_ports failed", reboot},
		{&loomv1.HealthCheckResult{Check: "disk", Trigger: "scan", Summary: "full"}, "check disk failed: full", reimage},
	} {
		v := CheckFailed(tc.r)
		if v.Reason != tc.reason || v.Action != tc.action || !v.CheckpointFirst {
			t.Errorf("CheckFailed(%v) = %+v, want reason %q, action %v", tc.r, v, tc.reason, tc.action)
		}
	}
	// A gpu_diag failure asks for the repair its DCGM error ids ask for
	// (the detail is dcgmi diag -j's JSON): the heaviest of its FAILs.
	diag := func(results string) string {
		return `{"DCGM GPU Diagnostic": {"test_categories": [{"category": "Deployment", "tests": [` +
			`{"name": "Page Retirement/Row Remap", "results": [` + results + `]}]}]}}`
	}
	fail := func(gpu string, id int) string {
		return fmt.Sprintf(`{"gpu_ids": %q, "status": "FAIL", "warnings": [{"warning": "w", "error_id": %d}]}`, gpu, id)
	}
	for _, tc := range []struct {
		name, detail string
		action       loomv1.RemediationAction
	}{
		{"row remap failure", diag(fail("0", healthcheck.DCGMRowRemapFailure)), replace},
		{"uncorrectable remap", diag(fail("0", healthcheck.DCGMUncorrectableRemap)), replace},
		{"double-bit error", diag(fail("0", healthcheck.DCGMVolatileDBE)), reset},
		{"pending remap", diag(fail("1", healthcheck.DCGMPendingRowRemap)), reset},
		{"faulty memory", diag(fail("0", healthcheck.DCGMFaultyMemory)), reboot},
		{"the heaviest", diag(fail("0", healthcheck.DCGMVolatileDBE) + "," + fail("1", healthcheck.DCGMRowRemapFailure)), replace},
		{"a warning asks for nothing", diag(`{"gpu_ids": "0", "status": "WARN", "warnings": [{"warning": "w", "error_id": 80}]}`), reboot},
		{"not a report", "dcgmi: not found", reboot},
		{"no detail", "", reboot},
	} {
		if v := CheckFailed(&loomv1.HealthCheckResult{Check: "gpu_diag", Detail: tc.detail}); v.Action != tc.action {
			t.Errorf("%s: CheckFailed action %v, want %v", tc.name, v.Action, tc.action)
		}
	}
	// Another check's detail asks for nothing of the kind.
	if v := CheckFailed(&loomv1.HealthCheckResult{Check: "site.sh", Detail: diag(fail("0", healthcheck.DCGMRowRemapFailure))}); v.Action != reboot {
		t.Errorf("a site check's dcgm-shaped detail: %v", v.Action)
	}
	if Rank(replace) <= Rank(reimage) || Rank(reimage) <= Rank(reboot) || Rank(reboot) <= Rank(reset) || Rank(reset) <= Rank(restart) || Rank(restart) <= Rank(none) {
		t.Fatal("rank order")
	}
}

// TestTelemetryLastXid: a GPU's last_xid acts when it changes to an Xid
// that takes the node out, with the verdict the Xid event gives; never for
// a value that stays, an application Xid, zero, or without a previous
// sample.
func TestTelemetryLastXid(t *testing.T) {
	t.Parallel()
	th := DefaultThresholds()
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	t1 := t0.Add(time.Minute)
	xid := func(gpu, code int32) *loomv1.GpuSample {
		return &loomv1.GpuSample{Index: gpu, TemperatureC: 50, LastXid: code}
	}
	for _, tc := range []struct {
		name      string
		prev      *eventsv1.GpuTelemetry
		cur       *eventsv1.GpuTelemetry
		want      bool
		code, gpu int32
	}{
		{"0 to 79", sample(t0, xid(0, 0), xid(1, 0)), sample(t1, xid(0, 0), xid(1, 79)), true, 79, 1},
		{"48 to 79", sample(t0, xid(2, 48)), sample(t1, xid(2, 79)), true, 79, 2},
		{"0 to 48", sample(t0, xid(0, 0)), sample(t1, xid(0, 48)), true, 48, 0},
		{"0 to unknown", sample(t0, xid(0, 0)), sample(t1, xid(0, 9999)), true, 9999, 0},
		// prev's time is not needed to see a change.
		{"same time", sample(t1, xid(0, 0)), sample(t1, xid(0, 79)), true, 79, 0},
		{"79 stays", sample(t0, xid(0, 79)), sample(t1, xid(0, 79)), false, 0, 0},
		{"79 to 0", sample(t0, xid(0, 79)), sample(t1, xid(0, 0)), false, 0, 0},
		{"0 stays", sample(t0, xid(0, 0)), sample(t1, xid(0, 0)), false, 0, 0},
		{"app Xid 13", sample(t0, xid(0, 0)), sample(t1, xid(0, 13)), false, 0, 0},
		{"app Xid 31 after 79", sample(t0, xid(0, 79)), sample(t1, xid(0, 31)), false, 0, 0},
		{"ignored Xid 63", sample(t0, xid(0, 0)), sample(t1, xid(0, 63)), false, 0, 0},
		{"no previous sample", nil, sample(t1, xid(0, 79)), false, 0, 0},
		{"GPU not in the previous sample", sample(t0, xid(0, 0)), sample(t1, xid(0, 0), xid(1, 79)), false, 0, 0},
	} {
		vs := th.Telemetry(tc.prev, tc.cur, LastXids(tc.prev))
		v, found := Worst(vs)
		if !tc.want {
			if found {
				t.Errorf("%s: %+v, want none", tc.name, v)
			}
			continue
		}
		if want := Xid(tc.gpu, tc.code); !found || v != want || !v.Drains() {
			t.Errorf("%s: %+v (found %v), want %+v", tc.name, v, found, want)
		}
	}
}
