// Package health is Loom's health service. It owns node health: it marks a
// node DOWN when its heartbeats stop (or only unreachable, when many stop
// together), classifies what nodes report (Xids, GPU telemetry, check
// results), and drives each node's remediation (drain, reboot, reimage,
// replace, quarantine) within a blast radius. See README.md beside this
// file for what it owns, the topics it reads and writes, and how it recovers.
package health

import (
	"context"
	"flag"
	"fmt"
	"math"
	"time"

	"github.com/loom-ml/loom/libs/bus"
	"github.com/loom-ml/loom/libs/config"
	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/service"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/health/internal/app"
	"github.com/loom-ml/loom/services/health/internal/classify"
	"github.com/loom-ml/loom/services/health/internal/domain"
	"github.com/loom-ml/loom/services/health/internal/ports"
	"github.com/loom-ml/loom/services/health/internal/remedy"
)

// DefaultHeartbeatTimeout is how long a node may be silent by default.
const DefaultHeartbeatTimeout = 15 * time.Second

// Config is the health's configuration.
type Config struct {
	config.Common
	// HeartbeatTimeout is how long a node may be silent before it is DOWN
	// (LOOM_HEALTH_HEARTBEAT_TIMEOUT; default 15s). Nodes are checked every
	// quarter of it.
	HeartbeatTimeout time.Duration
	// Scan is the health checks' scan policy (-scan-interval,
	// -check-validity, -straggler-ratio, -allreduce-min-busbw,
	// -allreduce-sizes; see app.ScanFlags).
	Scan app.ScanFlags
	// Remediation is "on", "dry-run" or "off" (LOOM_HEALTH_REMEDIATION; default on).
	Remediation string
	// MaxRemediating is the share of a cluster's nodes in repair at once, at
	// least one node (LOOM_HEALTH_MAX_REMEDIATING; default 0.1).
	MaxRemediating float64
	// LemonFailures failures within LemonWindow quarantine a node
	// (LOOM_HEALTH_LEMON_FAILURES, LOOM_HEALTH_LEMON_WINDOW; defaults 3, 24h).
	LemonFailures int
	LemonWindow   time.Duration
	// MassSilence is the share of a cluster's watched nodes (at least 2) that,
	// silent together, are unreachable rather than failed
	// (LOOM_HEALTH_MASS_SILENCE; default 0.5; above 1 turns it off).
	MassSilence float64
	// Thresholds are the telemetry limits past which a node needs a repair
	// (-sbe-per-minute, -nvlink-per-minute, -gpu-temperature-max,
	// -disk-full, -disk-warn; LOOM_HEALTH_SBE_PER_MINUTE, …; defaults
	// classify.DefaultThresholds: 10, 10, 90 °C, 0.97, 0.90). A zero field
	// takes its default.
	Thresholds classify.Thresholds
	// DrainTimeout, ConfirmTimeout and RepairTimeout bound remediation's
	// waits: for a checkpoint-first node's drain, for the check confirming
	// a repair, for the provisioner's repair (-drain-timeout,
	// -confirm-timeout, -repair-timeout; LOOM_HEALTH_DRAIN_TIMEOUT, …;
	// defaults 10m, 10m, 30m; zero: the default).
	DrainTimeout, ConfirmTimeout, RepairTimeout time.Duration
	// NodeRate and NodeBurst bound the records each node signs on the
	// telemetry topic that health handles: so many a second, so many at
	// once (-node-rate, -node-burst; LOOM_HEALTH_NODE_RATE,
	// LOOM_HEALTH_NODE_BURST; defaults 20 and 200, far above an agent's
	// heartbeat every 2 s and telemetry every 10 s). Records past it are
	// dropped unhandled and counted (loom_health_dropped_total{reason="rate"};
	// the scans' consumer group keeps its own buckets: reason="scan-rate").
	// Zero: the default.
	NodeRate  float64
	NodeBurst int
	// Results, when set, serves ListHealthResults (the scan orchestration's
	// store); without it the RPC is Unimplemented.
	Results ports.ResultLister
}

// RegisterFlags adds the health's flags to fs, defaults from LOOM_* variables.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	c.Common.Register(fs, "HEALTH", "127.0.0.1:7073", "127.0.0.1:9173")
	fs.DurationVar(&c.HeartbeatTimeout, "heartbeat-timeout",
		config.EnvDuration("LOOM_HEALTH_HEARTBEAT_TIMEOUT", DefaultHeartbeatTimeout),
		"how long a node may be silent before it is UNHEALTHY (LOOM_HEALTH_HEARTBEAT_TIMEOUT; default 15s)")
	c.Scan.Register(fs)
	fs.StringVar(&c.Remediation, "remediation", config.Env("LOOM_HEALTH_REMEDIATION", "on"),
		"on: repair failed nodes; dry-run: decide and record, take nodes out, but repair nothing; off: only heartbeats (LOOM_HEALTH_REMEDIATION)")
	fs.Float64Var(&c.MaxRemediating, "max-remediating", config.EnvFloat("LOOM_HEALTH_MAX_REMEDIATING", 0.1),
		"share of a cluster's nodes in repair at once, at least 1 node; the others wait, drained (LOOM_HEALTH_MAX_REMEDIATING)")
	fs.IntVar(&c.LemonFailures, "lemon-failures", int(config.EnvInt("LOOM_HEALTH_LEMON_FAILURES", 3)),
		"failures within -lemon-window that quarantine a node (LOOM_HEALTH_LEMON_FAILURES)")
	fs.DurationVar(&c.LemonWindow, "lemon-window", config.EnvDuration("LOOM_HEALTH_LEMON_WINDOW", 24*time.Hour),
		"window of -lemon-failures (LOOM_HEALTH_LEMON_WINDOW)")
	fs.Float64Var(&c.MassSilence, "mass-silence", config.EnvFloat("LOOM_HEALTH_MASS_SILENCE", domain.DefaultMassSilence),
		"share of a cluster's watched nodes (at least 2) silent together that are unreachable, not failed, until confirmed (LOOM_HEALTH_MASS_SILENCE)")
	th := classify.DefaultThresholds()
	fs.Float64Var(&c.Thresholds.SBEPerMinute, "sbe-per-minute", config.EnvFloat("LOOM_HEALTH_SBE_PER_MINUTE", th.SBEPerMinute),
		"single-bit ECC errors a minute on a GPU at or above which it is reset after a checkpoint (LOOM_HEALTH_SBE_PER_MINUTE)")
	fs.Float64Var(&c.Thresholds.NVLinkPerMinute, "nvlink-per-minute", config.EnvFloat("LOOM_HEALTH_NVLINK_PER_MINUTE", th.NVLinkPerMinute),
		"NVLink CRC plus replay errors a minute on a GPU at or above which it is reset after a checkpoint (LOOM_HEALTH_NVLINK_PER_MINUTE)")
	fs.Float64Var(&c.Thresholds.TemperatureC, "gpu-temperature-max", config.EnvFloat("LOOM_HEALTH_GPU_TEMPERATURE_MAX", th.TemperatureC),
		"GPU temperature in °C at or above which the node is rebooted after a checkpoint (LOOM_HEALTH_GPU_TEMPERATURE_MAX)")
	fs.Float64Var(&c.Thresholds.DiskFull, "disk-full", config.EnvFloat("LOOM_HEALTH_DISK_FULL", th.DiskFull),
		"share of a node filesystem used (0 to 1) at or above which the node is reimaged after a checkpoint (LOOM_HEALTH_DISK_FULL)")
	fs.Float64Var(&c.Thresholds.DiskWarn, "disk-warn", config.EnvFloat("LOOM_HEALTH_DISK_WARN", th.DiskWarn),
		"share of a node filesystem used (0 to 1) that is recorded as a warning, not acted on; at most -disk-full (LOOM_HEALTH_DISK_WARN)")
	fs.DurationVar(&c.DrainTimeout, "drain-timeout", config.EnvDuration("LOOM_HEALTH_DRAIN_TIMEOUT", remedy.DefaultDrainTimeout),
		"how long remediation waits for a checkpoint-first node's jobs to drain before it repairs the node anyway (LOOM_HEALTH_DRAIN_TIMEOUT)")
	fs.DurationVar(&c.ConfirmTimeout, "confirm-timeout", config.EnvDuration("LOOM_HEALTH_CONFIRM_TIMEOUT", remedy.DefaultConfirmTimeout),
		"how long remediation waits for the check confirming a repair before the repair counts as failed (LOOM_HEALTH_CONFIRM_TIMEOUT)")
	fs.DurationVar(&c.RepairTimeout, "repair-timeout", config.EnvDuration("LOOM_HEALTH_REPAIR_TIMEOUT", remedy.DefaultRepairTimeout),
		"how long remediation waits for the provisioner to finish a repair before it counts as failed (LOOM_HEALTH_REPAIR_TIMEOUT)")
	fs.Float64Var(&c.NodeRate, "node-rate", config.EnvFloat("LOOM_HEALTH_NODE_RATE", domain.DefaultNodeRate),
		"records a second each node may sign on the telemetry topic; past it (and -node-burst) they are dropped unhandled (LOOM_HEALTH_NODE_RATE)")
	fs.IntVar(&c.NodeBurst, "node-burst", int(config.EnvInt("LOOM_HEALTH_NODE_BURST", domain.DefaultNodeBurst)),
		"records each node may sign on the telemetry topic at once, above -node-rate (LOOM_HEALTH_NODE_BURST)")
}

// RunArgs runs the health from a command line (args, without the program
// name): RegisterFlags' flags, each defaulting to its LOOM_* variable,
// then Run until ctx ends. A command line that does not parse is a
// *config.UsageError. The health binary and loom's in-process stack both
// start the health here, so that its command line is read in one place.
func RunArgs(ctx context.Context, args []string) error {
	cfg, err := config.ParseArgs("health", args, (*Config).RegisterFlags)
	if err != nil {
		return err
	}
	return Run(ctx, cfg)
}

// domainConfig checks cfg's policy and fills in defaults for what is zero
// (a Config built in code, not from flags).
func (cfg *Config) domainConfig() (domain.Config, error) {
	if cfg.HeartbeatTimeout <= 0 {
		cfg.HeartbeatTimeout = DefaultHeartbeatTimeout
	}
	mode, err := remedy.ParseMode(cfg.Remediation)
	if err != nil {
		return domain.Config{}, errs.Invalid("remediation", "%v", err)
	}
	var v errs.Validator
	v.Check(cfg.MaxRemediating >= 0 && cfg.MaxRemediating <= 1, "max_remediating", "is a share: 0 to 1")
	v.Check(cfg.LemonFailures >= 0, "lemon_failures", "must not be negative")
	v.Check(cfg.LemonWindow >= 0, "lemon_window", "must not be negative")
	v.Check(cfg.MassSilence >= 0, "mass_silence", "must not be negative")
	th, def := cfg.Thresholds, classify.DefaultThresholds()
	for _, f := range []struct {
		field     string
		v         *float64
		def, most float64
	}{
		{"sbe_per_minute", &th.SBEPerMinute, def.SBEPerMinute, math.Inf(1)},
		{"nvlink_per_minute", &th.NVLinkPerMinute, def.NVLinkPerMinute, math.Inf(1)},
		{"gpu_temperature_max", &th.TemperatureC, def.TemperatureC, 200},
		{"disk_full", &th.DiskFull, def.DiskFull, 1},
		{"disk_warn", &th.DiskWarn, def.DiskWarn, 1},
	} {
		v.Check(*f.v >= 0 && *f.v <= f.most && !math.IsNaN(*f.v), f.field, "must be from 0 to %v, got %v", f.most, *f.v)
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	v.Check(th.DiskWarn <= th.DiskFull, "disk_warn", "must be at most disk_full (%v), got %v", th.DiskFull, th.DiskWarn)
	v.Check(cfg.DrainTimeout >= 0, "drain_timeout", "must not be negative, got %s", cfg.DrainTimeout)
	v.Check(cfg.ConfirmTimeout >= 0, "confirm_timeout", "must not be negative, got %s", cfg.ConfirmTimeout)
	v.Check(cfg.RepairTimeout >= 0, "repair_timeout", "must not be negative, got %s", cfg.RepairTimeout)
	v.Check(cfg.NodeRate >= 0 && !math.IsNaN(cfg.NodeRate) && !math.IsInf(cfg.NodeRate, 0), "node_rate", "must be a finite number of records a second, not negative (0: the default), got %v", cfg.NodeRate)
	v.Check(cfg.NodeBurst >= 0, "node_burst", "must not be negative (0: the default), got %d", cfg.NodeBurst)
	if err := v.Err(); err != nil {
		return domain.Config{}, err
	}
	return domain.Config{
		Timeout:     cfg.HeartbeatTimeout,
		MassSilence: cfg.MassSilence,
		Thresholds:  th,
		NodeRate:    cfg.NodeRate,
		NodeBurst:   cfg.NodeBurst,
		Remedy: remedy.Config{Mode: mode, MaxRemediating: cfg.MaxRemediating, LemonFailures: cfg.LemonFailures,
			LemonWindow: cfg.LemonWindow, DrainTimeout: cfg.DrainTimeout, ConfirmTimeout: cfg.ConfirmTimeout,
			RepairTimeout: cfg.RepairTimeout, Seed: uint64(time.Now().UnixNano())},
	}, nil
}

// Run runs the health until ctx ends, then shuts down gracefully.
func Run(ctx context.Context, cfg Config) error {
	dcfg, err := cfg.domainConfig()
	if err != nil {
		return fmt.Errorf("health: %w", err)
	}
	scanCfg, err := cfg.Scan.Config()
	if err != nil {
		return fmt.Errorf("health config: %w", err)
	}
	// Only Loom services (the gateway) call its API: each call carries a
	// service token.
	internal, err := service.InternalAuth(cfg.Common)
	if err != nil {
		return err
	}
	base, err := service.New(ctx, "health", cfg.Common, internal...)
	if err != nil {
		return err
	}
	a := app.NewWith(base.Store, dcfg, base.Clock.Now, base.Log)
	if err := a.RegisterMetrics(base.Telemetry.Registry); err != nil {
		_ = base.Close()
		return fmt.Errorf("health: metrics: %w", err)
	}
	if err := a.Start(ctx); err != nil {
		_ = base.Close()
		return fmt.Errorf("health: %w", err)
	}
	// Scans: a consumer group of their own. Their verdicts (a bisection's
	// culprit, a straggler) go to remediation as check results health
	// itself decided, applied once each (the result's name is the inbox id).
	scanner := app.NewScanner(base.Store, scanCfg, base.Clock.Now, base.Log,
		func(ctx context.Context, r *loomv1.HealthCheckResult) {
			ev := envelope.Event{ID: "scan-verdict:" + r.GetName(), Payload: &eventsv1.HealthCheckCompleted{Result: r}}
			if err := a.Handle(ctx, ev); err != nil {
				base.Log.Warn("scan verdict not applied", "result", r.GetName(), "err", err)
			}
		})
	scanner.SetDropped(a.Dropped)
	scanner.SetNodeRate(dcfg.NodeRate, dcfg.NodeBurst)
	if err := scanner.Start(ctx); err != nil {
		_ = base.Close()
		return fmt.Errorf("health: %w", err)
	}
	results := cfg.Results
	if results == nil {
		results = scanner
	}
	// The policy is remediation's (the app's) and the scans' together.
	policy := policyOf(func(cluster string) *loomv1.HealthPolicy {
		p := a.HealthPolicy(cluster)
		scanner.FillPolicy(p)
		return p
	})
	loomv1.RegisterHealthServiceServer(base.GRPC, ports.NewHealthServer(a, results, policy))
	interval := max(cfg.HeartbeatTimeout/4, time.Millisecond)
	return base.Run(ctx, []service.Consume{{Topics: ports.Topics, Handler: a.Handle, Config: &bus.ConsumerConfig{Passed: a.Passed}},
		{Topics: app.ScanTopics, Handler: scanner.Handle, Group: app.ScanGroup, Config: &bus.ConsumerConfig{Filter: app.ScanFilter}}},
		a.CheckLoop(interval, base.Clock), scanner.Loop(time.Second, base.Clock))
}

// policyOf makes a function a ports.PolicyReader.
type policyOf func(cluster string) *loomv1.HealthPolicy

// HealthPolicy calls f.
func (f policyOf) HealthPolicy(cluster string) *loomv1.HealthPolicy { return f(cluster) }
