package health

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/config"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/health/internal/classify"
	"github.com/loom-ml/loom/services/health/internal/domain"
	"github.com/loom-ml/loom/services/health/internal/remedy"
	"github.com/loom-ml/loom/services/health/internal/scan"
)

func parse(t *testing.T, args ...string) Config {
	t.Helper()
	cfg, err := config.ParseArgs("health", args, (*Config).RegisterFlags)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// hot is a sample of one GPU at c °C, no throttle reason.
func hot(c float64) *eventsv1.GpuTelemetry {
	return &eventsv1.GpuTelemetry{Time: timestamppb.Now(), Gpus: []*loomv1.GpuSample{{Index: 0, TemperatureC: c}}}
}

// Without flags the policy is the documented defaults; each threshold and
// timeout flag reaches the policy the service runs with, and acts: a GPU
// at 75 °C is fine by default and throttling under -gpu-temperature-max=70.
func TestHealthPolicyFlags(t *testing.T) {
	t.Parallel()
	def := parse(t)
	d, err := def.domainConfig()
	if err != nil {
		t.Fatal(err)
	}
	if d.NodeRate != domain.DefaultNodeRate || d.NodeBurst != domain.DefaultNodeBurst {
		t.Fatalf("default node rate %v, burst %d", d.NodeRate, d.NodeBurst)
	}
	if d.Thresholds != classify.DefaultThresholds() || d.Remedy.DrainTimeout != remedy.DefaultDrainTimeout ||
		d.Remedy.ConfirmTimeout != remedy.DefaultConfirmTimeout || d.Remedy.RepairTimeout != remedy.DefaultRepairTimeout {
		t.Fatalf("default policy %+v", d)
	}
	if v := d.Thresholds.Telemetry(nil, hot(75), nil); len(v) != 0 {
		t.Fatalf("75 °C under the default threshold: %+v", v)
	}

	cfg := parse(t, "-gpu-temperature-max=70", "-sbe-per-minute=2", "-nvlink-per-minute=3", "-disk-full=0.8", "-disk-warn=0.5",
		"-drain-timeout=2m", "-confirm-timeout=3m", "-repair-timeout=4m", "-check-timeouts=disk=5s,site-nccl=7m", "-check-grace=3s",
		"-node-rate=5", "-node-burst=50")
	d, err = cfg.domainConfig()
	if err != nil {
		t.Fatal(err)
	}
	want := classify.Thresholds{SBEPerMinute: 2, NVLinkPerMinute: 3, TemperatureC: 70, DiskFull: 0.8, DiskWarn: 0.5}
	if d.Thresholds != want {
		t.Errorf("thresholds %+v, want %+v", d.Thresholds, want)
	}
	if d.Remedy.DrainTimeout != 2*time.Minute || d.Remedy.ConfirmTimeout != 3*time.Minute || d.Remedy.RepairTimeout != 4*time.Minute {
		t.Errorf("remediation timeouts %+v", d.Remedy)
	}
	if d.NodeRate != 5 || d.NodeBurst != 50 {
		t.Errorf("node rate %v, burst %d, want 5 and 50", d.NodeRate, d.NodeBurst)
	}
	if v := d.Thresholds.Telemetry(nil, hot(75), nil); len(v) != 1 || !strings.Contains(v[0].Reason, "thermal") {
		t.Errorf("75 °C under -gpu-temperature-max=70: %+v, want a thermal verdict", v)
	}
	sc, err := cfg.Scan.Config()
	if err != nil {
		t.Fatal(err)
	}
	if sc.Timeouts[scan.Disk] != 5*time.Second || sc.Timeouts["site-nccl"] != 7*time.Minute ||
		sc.Timeouts[scan.AllReduce] != 2*time.Minute || sc.Grace != 3*time.Second {
		t.Errorf("scan timeouts %v, grace %s", sc.Timeouts, sc.Grace)
	}
}

// A variable sets a flag's default.
func TestHealthPolicyVariables(t *testing.T) {
	t.Setenv("LOOM_HEALTH_DISK_FULL", "0.9")
	t.Setenv("LOOM_HEALTH_REPAIR_TIMEOUT", "1h")
	cfg := parse(t)
	d, err := cfg.domainConfig()
	if err != nil {
		t.Fatal(err)
	}
	if d.Thresholds.DiskFull != 0.9 || d.Remedy.RepairTimeout != time.Hour {
		t.Errorf("from variables: disk full %v, repair timeout %s", d.Thresholds.DiskFull, d.Remedy.RepairTimeout)
	}
}

// A bad value stops the health at start, naming its setting.
func TestBadHealthPolicyRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ arg, field string }{
		{"-gpu-temperature-max=-1", "gpu_temperature_max"},
		{"-sbe-per-minute=-5", "sbe_per_minute"},
		{"-nvlink-per-minute=NaN", "nvlink_per_minute"},
		{"-disk-full=1.5", "disk_full"},
		{"-disk-warn=0.99", "disk_warn"},
		{"-drain-timeout=-1s", "drain_timeout"},
		{"-confirm-timeout=-1s", "confirm_timeout"},
		{"-repair-timeout=-1m", "repair_timeout"},
		{"-check-timeouts=disk=soon", "check_timeouts"},
		{"-check-grace=-1s", "check_grace"},
		{"-node-rate=-1", "node_rate"},
		{"-node-rate=+Inf", "node_rate"},
		{"-node-burst=-1", "node_burst"},
	} {
		err := RunArgs(context.Background(), []string{tc.arg})
		if err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: %v, want refused naming %s", tc.arg, err, tc.field)
		}
	}
}
