// Package health is Loom's health service. It owns node health: it marks a node DOWN when its heartbeats stop, and says so on its topic.
// See README.md beside this file for what it owns, the topics it reads and
// writes, and how it recovers.
package health

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/loom-ml/loom/libs/bus"
	"github.com/loom-ml/loom/libs/config"
	"github.com/loom-ml/loom/libs/service"
	"github.com/loom-ml/loom/services/health/internal/app"
	"github.com/loom-ml/loom/services/health/internal/ports"
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
}

// RegisterFlags adds the health's flags to fs, defaults from LOOM_* variables.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	c.Common.Register(fs, "HEALTH", "127.0.0.1:7073", "127.0.0.1:9173")
	fs.DurationVar(&c.HeartbeatTimeout, "heartbeat-timeout",
		config.EnvDuration("LOOM_HEALTH_HEARTBEAT_TIMEOUT", DefaultHeartbeatTimeout),
		"how long a node may be silent before it is UNHEALTHY (LOOM_HEALTH_HEARTBEAT_TIMEOUT; default 15s)")
	c.Scan.Register(fs)
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

// Run runs the health until ctx ends, then shuts down gracefully.
func Run(ctx context.Context, cfg Config) error {
	if cfg.HeartbeatTimeout <= 0 {
		cfg.HeartbeatTimeout = DefaultHeartbeatTimeout
	}
	scanCfg, err := cfg.Scan.Config()
	if err != nil {
		return fmt.Errorf("health config: %w", err)
	}
	base, err := service.New(ctx, "health", cfg.Common)
	if err != nil {
		return err
	}
	a := app.New(base.Store, cfg.HeartbeatTimeout, base.Clock.Now, base.Log)
	if err := a.Start(ctx); err != nil {
		_ = base.Close()
		return fmt.Errorf("health: %w", err)
	}
	// Scans: a consumer group of their own; their verdicts (a bisection's
	// culprit, a straggler) are stored as results (remediation takes them
	// through the verdict hook, nil until it does).
	scanner := app.NewScanner(base.Store, scanCfg, base.Clock.Now, base.Log, nil)
	if err := scanner.Start(ctx); err != nil {
		_ = base.Close()
		return fmt.Errorf("health: %w", err)
	}
	interval := max(cfg.HeartbeatTimeout/4, time.Millisecond)
	return base.Run(ctx, []service.Consume{{Topics: ports.Topics, Handler: a.Handle},
		{Topics: app.ScanTopics, Handler: scanner.Handle, Group: app.ScanGroup, Config: &bus.ConsumerConfig{Filter: app.ScanFilter}}},
		a.CheckLoop(interval, base.Clock), scanner.Loop(time.Second, base.Clock))
}
