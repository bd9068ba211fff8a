package sim

import (
	"flag"
	"io"
	"strings"
	"testing"
	"time"
)

func TestFlags(t *testing.T) {
	t.Parallel()
	var c Config
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c.RegisterFlags(fs)
	if c.TimeScale != 1 || c.HeartbeatInterval != 5*time.Second || c.BootFailureAfter != 10*time.Minute ||
		c.RebootTime != 3*time.Minute || c.ReimageTime != 15*time.Minute || c.ReplaceTime != time.Hour {
		t.Errorf("defaults %+v", c)
	}
	err := fs.Parse([]string{"-sim-seed=9", "-sim-time-scale=0.02", "-sim-latency=on_demand=2s/0.1,FLEX_START=15m",
		"-sim-stockout-rate=0.1", "-sim-preemption-rate=0.5", "-sim-heartbeat-interval=1s",
		"-sim-reboot-time=1m", "-sim-reimage-time=2m", "-sim-replace-time=3m"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Seed != 9 || c.TimeScale != 0.02 || c.StockoutRate != 0.1 || c.PreemptionRate != 0.5 || c.HeartbeatInterval != time.Second ||
		c.RebootTime != time.Minute || c.ReimageTime != 2*time.Minute || c.ReplaceTime != 3*time.Minute {
		t.Errorf("parsed %+v", c)
	}
	want := map[string]Latency{"ON_DEMAND": {Median: 2 * time.Second, Sigma: 0.1}, "FLEX_START": {Median: 15 * time.Minute}}
	if FormatLatency(c.Latency) != FormatLatency(want) || len(c.Latency) != 2 {
		t.Errorf("latency %v, want %v", c.Latency, want)
	}
	if got := FormatLatency(want); got != "FLEX_START=15m0s/0,ON_DEMAND=2s/0.1" {
		t.Errorf("FormatLatency = %q", got)
	}
	for _, bad := range []string{"ON_DEMAND", "=1s", "ON_DEMAND=fast", "ON_DEMAND=-1s", "ON_DEMAND=1s/x", "ON_DEMAND=1s/9"} {
		if _, err := ParseLatency(bad); err == nil || !strings.Contains(err.Error(), "sim latency") {
			t.Errorf("ParseLatency(%q) = %v, want an error", bad, err)
		}
	}
}
