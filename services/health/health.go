// Package health is Loom's health service. It owns node health: it marks a node DOWN when its heartbeats stop, and says so on its topic.
// See README.md beside this file for what it owns, the topics it reads and
// writes, and how it recovers.
//
// SKELETON: signatures are the contract; bodies are being written.
package health

import (
	"context"
	"flag"
	"time"

	"github.com/loom-ml/loom/libs/config"
)

// Config is the health's configuration.
type Config struct {
	config.Common
	// HeartbeatTimeout is how long a node may be silent before it is DOWN
	// (LOOM_HEALTH_HEARTBEAT_TIMEOUT; default 15s).
	HeartbeatTimeout time.Duration
}

// RegisterFlags adds the health's flags to fs, defaults from LOOM_* variables.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	c.Common.Register(fs, "HEALTH", "127.0.0.1:7073", "127.0.0.1:9173")
}

// Run runs the health until ctx ends, then shuts down gracefully.
func Run(ctx context.Context, cfg Config) error {
	panic("unimplemented")
}
