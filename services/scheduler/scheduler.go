// Package scheduler is Loom's scheduler service. It owns jobs and their runs, and places jobs on the nodes of running clusters.
// See README.md beside this file for what it owns, the topics it reads and
// writes, and how it recovers.
//
// SKELETON: signatures are the contract; bodies are being written.
package scheduler

import (
	"context"
	"flag"

	"github.com/loom-ml/loom/libs/config"
)

// Config is the scheduler's configuration.
type Config struct {
	config.Common
}

// RegisterFlags adds the scheduler's flags to fs, defaults from LOOM_* variables.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	c.Common.Register(fs, "SCHEDULER", "127.0.0.1:7072", "127.0.0.1:9172")
}

// Run runs the scheduler until ctx ends, then shuts down gracefully.
func Run(ctx context.Context, cfg Config) error {
	panic("unimplemented")
}
