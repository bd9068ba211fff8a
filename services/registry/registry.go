// Package registry is Loom's registry service. It owns models and their versions, registering a version when a job that declared a model output succeeds.
// See README.md beside this file for what it owns, the topics it reads and
// writes, and how it recovers.
//
// SKELETON: signatures are the contract; bodies are being written.
package registry

import (
	"context"
	"flag"

	"github.com/loom-ml/loom/libs/config"
)

// Config is the registry's configuration.
type Config struct {
	config.Common
}

// RegisterFlags adds the registry's flags to fs, defaults from LOOM_* variables.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	c.Common.Register(fs, "REGISTRY", "127.0.0.1:7074", "127.0.0.1:9174")
}

// Run runs the registry until ctx ends, then shuts down gracefully.
func Run(ctx context.Context, cfg Config) error {
	panic("unimplemented")
}
