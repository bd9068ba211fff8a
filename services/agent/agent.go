// Package agent is Loom's agent service. One agent runs on each node: it registers, heartbeats, and runs the steps assigned to its node as real processes.
// See README.md beside this file for what it owns, the topics it reads and
// writes, and how it recovers.
//
// SKELETON: signatures are the contract; bodies are being written.
package agent

import (
	"context"
	"flag"
	"time"

	"github.com/loom-ml/loom/libs/config"
)

// Config is the agent's configuration.
type Config struct {
	config.Common
	// Node is the node's full name, e.g. projects/p/clusters/c/nodes/gpu-0001 (LOOM_NODE).
	Node string
	// Hostname is the Slurm-style node name (LOOM_HOSTNAME).
	Hostname string
	// WorkDir is the node's own directory (LOOM_WORK_DIR).
	WorkDir string
	// GPUs is how many GPUs the node offers (LOOM_GPUS).
	GPUs int
	// HeartbeatInterval is how often the agent says it is alive
	// (LOOM_HEARTBEAT_INTERVAL; default 2s).
	HeartbeatInterval time.Duration
}

// RegisterFlags adds the agent's flags to fs, defaults from LOOM_* variables.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	c.Common.Register(fs, "AGENT", "127.0.0.1:0", "127.0.0.1:0")
}

// Run runs the agent until ctx ends, then shuts down gracefully.
func Run(ctx context.Context, cfg Config) error {
	panic("unimplemented")
}
