package sim

import (
	"flag"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/loom-ml/loom/libs/config"
	"github.com/loom-ml/loom/libs/errs"
)

// RegisterFlags adds the simulated cloud's settings to fs as -sim-* flags,
// with defaults from LOOM_SIM_* variables (an unparsable number or
// duration is refused when the provisioner starts: config.CheckEnv).
// The provisioner calls it from its own RegisterFlags.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.Uint64Var(&c.Seed, "sim-seed", uint64(config.EnvInt("LOOM_SIM_SEED", 0)), "sim provider: random seed (LOOM_SIM_SEED)")
	fs.Float64Var(&c.TimeScale, "sim-time-scale", config.EnvFloat("LOOM_SIM_TIME_SCALE", 1),
		"sim provider: real seconds per simulated second, e.g. 0.01 (LOOM_SIM_TIME_SCALE)")
	if l := config.EnvParse("LOOM_SIM_LATENCY", nil, ParseLatency, "TYPE=MEDIAN/SIGMA,... such as ON_DEMAND=90s/0.35"); len(l) > 0 {
		c.Latency = l
	}
	fs.Var(latencyFlag{&c.Latency}, "sim-latency",
		"sim provider: provisioning latency per capacity type, TYPE=MEDIAN/SIGMA,... e.g. ON_DEMAND=90s/0.35 (LOOM_SIM_LATENCY)")
	fs.Float64Var(&c.StockoutRate, "sim-stockout-rate", config.EnvFloat("LOOM_SIM_STOCKOUT_RATE", 0),
		"sim provider: probability that a launch fails with ZONE_RESOURCE_POOL_EXHAUSTED (LOOM_SIM_STOCKOUT_RATE)")
	fs.Float64Var(&c.BootFailureRate, "sim-boot-failure-rate", config.EnvFloat("LOOM_SIM_BOOT_FAILURE_RATE", 0),
		"sim provider: probability that a node never boots (LOOM_SIM_BOOT_FAILURE_RATE)")
	fs.DurationVar(&c.BootFailureAfter, "sim-boot-failure-after", config.EnvDuration("LOOM_SIM_BOOT_FAILURE_AFTER", 10*time.Minute),
		"sim provider: simulated time after which a failed boot is reported (LOOM_SIM_BOOT_FAILURE_AFTER)")
	fs.Float64Var(&c.SlowBootRate, "sim-slow-boot-rate", config.EnvFloat("LOOM_SIM_SLOW_BOOT_RATE", 0),
		"sim provider: probability of a tail-latency boot (LOOM_SIM_SLOW_BOOT_RATE)")
	fs.Float64Var(&c.SlowBootFactor, "sim-slow-boot-factor", config.EnvFloat("LOOM_SIM_SLOW_BOOT_FACTOR", 5),
		"sim provider: how many times longer a slow boot takes (LOOM_SIM_SLOW_BOOT_FACTOR)")
	fs.Float64Var(&c.PreemptionRate, "sim-preemption-rate", config.EnvFloat("LOOM_SIM_PREEMPTION_RATE", 0),
		"sim provider: preemptions per SPOT node per simulated hour (LOOM_SIM_PREEMPTION_RATE)")
	fs.DurationVar(&c.RebootTime, "sim-reboot-time", config.EnvDuration("LOOM_SIM_REBOOT_TIME", DefaultRebootTime),
		"sim provider: simulated time a reboot (and a GPU reset) takes until the agent registers again (LOOM_SIM_REBOOT_TIME)")
	fs.DurationVar(&c.ReimageTime, "sim-reimage-time", config.EnvDuration("LOOM_SIM_REIMAGE_TIME", DefaultReimageTime),
		"sim provider: simulated time a reimage takes until the agent registers again (LOOM_SIM_REIMAGE_TIME)")
	fs.DurationVar(&c.ReplaceTime, "sim-replace-time", config.EnvDuration("LOOM_SIM_REPLACE_TIME", DefaultReplaceTime),
		"sim provider: simulated time until a replacement node registers (LOOM_SIM_REPLACE_TIME)")
	fs.DurationVar(&c.HeartbeatInterval, "sim-heartbeat-interval", config.EnvDuration("LOOM_SIM_HEARTBEAT_INTERVAL", 5*time.Second),
		"sim provider: real time between heartbeats of every node (LOOM_SIM_HEARTBEAT_INTERVAL)")
}

// Check adds to v, under the flag's name, every setting out of its range:
// a probability (-sim-stockout-rate, -sim-boot-failure-rate,
// -sim-slow-boot-rate) outside 0..1, a negative or non-finite time scale,
// preemption rate or slow-boot factor, a slow-boot factor below 1, and a
// -sim-latency type that is not a capacity type (it would never be used).
// New clamps such values silently; a command line gets an error instead
// (a -sim-stockout-rate of 5, meant as 5%, would fail every launch).
func (c *Config) Check(v *errs.Validator) {
	finite := func(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }
	for _, r := range []struct {
		flag string
		val  float64
	}{{"sim-stockout-rate", c.StockoutRate}, {"sim-boot-failure-rate", c.BootFailureRate}, {"sim-slow-boot-rate", c.SlowBootRate}} {
		v.Check(r.val >= 0 && r.val <= 1, r.flag, "is a probability, 0 to 1 (0.05 for 5%%), got %g", r.val)
	}
	v.Check(finite(c.TimeScale) && c.TimeScale >= 0, "sim-time-scale", "must be a positive number of real seconds per simulated second (0.01: 100 times faster), got %g", c.TimeScale)
	v.Check(finite(c.PreemptionRate) && c.PreemptionRate >= 0, "sim-preemption-rate", "must be 0 or more preemptions per SPOT node per simulated hour, got %g", c.PreemptionRate)
	v.Check(c.SlowBootFactor == 0 || (finite(c.SlowBootFactor) && c.SlowBootFactor >= 1), "sim-slow-boot-factor", "must be at least 1 (how many times longer a slow boot takes), got %g", c.SlowBootFactor)
	types := make([]string, 0, len(DefaultLatency))
	for t := range DefaultLatency {
		types = append(types, t)
	}
	sort.Strings(types)
	for _, t := range slices.Sorted(maps.Keys(c.Latency)) {
		v.Check(DefaultLatency[t] != (Latency{}), "sim-latency", "%q is not a capacity type (%s)", t, strings.Join(types, ", "))
	}
}

// ParseLatency parses "TYPE=MEDIAN/SIGMA,..." (SIGMA optional, default 0),
// e.g. "ON_DEMAND=90s/0.35,FLEX_START=15m/0.8".
func ParseLatency(s string) (map[string]Latency, error) {
	out := map[string]Latency{}
	for _, item := range config.SplitList(s) {
		typ, val, ok := strings.Cut(item, "=")
		if !ok || typ == "" {
			return nil, fmt.Errorf("sim latency %q: want TYPE=MEDIAN/SIGMA", item)
		}
		med, sig, _ := strings.Cut(val, "/")
		d, err := time.ParseDuration(med)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("sim latency %q: median %q is not a positive duration", item, med)
		}
		l := Latency{Median: d}
		if sig != "" {
			if l.Sigma, err = strconv.ParseFloat(sig, 64); err != nil || l.Sigma < 0 || l.Sigma > 5 {
				return nil, fmt.Errorf("sim latency %q: sigma %q is not a number in 0..5", item, sig)
			}
		}
		out[strings.ToUpper(typ)] = l
	}
	return out, nil
}

// FormatLatency is the inverse of ParseLatency, types sorted.
func FormatLatency(m map[string]Latency) string {
	types := make([]string, 0, len(m))
	for t := range m {
		types = append(types, t)
	}
	sort.Strings(types)
	parts := make([]string, len(types))
	for i, t := range types {
		parts[i] = fmt.Sprintf("%s=%v/%g", t, m[t].Median, m[t].Sigma)
	}
	return strings.Join(parts, ",")
}

type latencyFlag struct{ m *map[string]Latency }

func (f latencyFlag) String() string {
	if f.m == nil {
		return ""
	}
	return FormatLatency(*f.m)
}

func (f latencyFlag) Set(s string) error {
	l, err := ParseLatency(s)
	if err != nil {
		return err
	}
	*f.m = l
	return nil
}
