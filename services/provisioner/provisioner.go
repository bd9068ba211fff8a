// Package provisioner is Loom's provisioner service. It owns clusters, node pools and nodes, and brings nodes up through a compute provider.
// See README.md beside this file for what it owns, the topics it reads and
// writes, and how it recovers.
//
// SKELETON: signatures are the contract; bodies are being written.
package provisioner

import (
	"context"
	"flag"

	"github.com/loom-ml/loom/libs/config"
)

// Config is the provisioner's configuration.
type Config struct {
	config.Common
	// Provider is the compute provider: "local" (LOOM_PROVIDER; default local).
	Provider string
	// DataDir holds the local provider's node and shared directories (LOOM_DATA_DIR).
	DataDir string
	// AgentCommand is the argv that starts one agent process; the provider
	// passes the agent's settings as LOOM_* environment variables.
	// Default: the "agent" binary beside this one (LOOM_AGENT_COMMAND, space-separated).
	AgentCommand []string
	// AgentEnv is added to each agent's environment.
	AgentEnv []string
}

// RegisterFlags adds the provisioner's flags to fs, defaults from LOOM_* variables.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	c.Common.Register(fs, "PROVISIONER", "127.0.0.1:7071", "127.0.0.1:9171")
}

// Run runs the provisioner until ctx ends, then shuts down gracefully.
func Run(ctx context.Context, cfg Config) error {
	panic("unimplemented")
}
