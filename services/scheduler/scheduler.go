// Package scheduler is Loom's scheduler service. It owns jobs and their runs, and places jobs on the nodes of running clusters.
// See README.md beside this file for what it owns, the topics it reads and
// writes, and how it recovers.
package scheduler

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/loom-ml/loom/libs/config"
	"github.com/loom-ml/loom/libs/service"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/scheduler/internal/app"
	"github.com/loom-ml/loom/services/scheduler/internal/domain"
	"github.com/loom-ml/loom/services/scheduler/internal/ports"
)

// DefaultMasterAddr is MASTER_ADDR by default: the local provider runs every
// node of a cluster on this machine, where hostnames like "gpu-0001" do not
// resolve.
const DefaultMasterAddr = "127.0.0.1"

// Config is the scheduler's configuration.
type Config struct {
	config.Common
	// MasterAddr is the MASTER_ADDR every step is given
	// (LOOM_SCHEDULER_MASTER_ADDR; default 127.0.0.1). Empty means the
	// hostname of the job's first node, as under Slurm, for providers whose
	// hostnames resolve.
	MasterAddr string
	// TickInterval is how often drain deadlines are checked (default
	// DefaultTickInterval); a deadline is acted on at most this late.
	TickInterval time.Duration
}

// DefaultTickInterval is how often drain deadlines are checked by default.
const DefaultTickInterval = time.Second

// RegisterFlags adds the scheduler's flags to fs, defaults from LOOM_* variables.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	c.Common.Register(fs, "SCHEDULER", "127.0.0.1:7072", "127.0.0.1:9172")
	fs.StringVar(&c.MasterAddr, "master-addr", config.Env("LOOM_SCHEDULER_MASTER_ADDR", DefaultMasterAddr),
		"MASTER_ADDR given to every step; empty means the job's first hostname (LOOM_SCHEDULER_MASTER_ADDR; default "+DefaultMasterAddr+")")
}

// Run runs the scheduler until ctx ends, then shuts down gracefully.
func Run(ctx context.Context, cfg Config) error {
	base, err := service.New(ctx, "scheduler", cfg.Common)
	if err != nil {
		return err
	}
	a := app.New(base.Store, domain.Config{Policy: domain.DefaultPolicy(), MasterAddr: cfg.MasterAddr}, time.Now, base.Log)
	if err := a.Start(ctx); err != nil {
		_ = base.Close()
		return fmt.Errorf("scheduler: %w", err)
	}
	loomv1.RegisterJobServiceServer(base.GRPC, ports.NewJobServer(a))
	every := cfg.TickInterval
	if every <= 0 {
		every = DefaultTickInterval
	}
	clock := func(ctx context.Context) error { return a.RunClock(ctx, every) }
	return base.Run(ctx, []service.Consume{{Topics: ports.Topics, Handler: a.Handle}}, clock)
}
