// Package gateway is Loom's gateway service. It is the only public entry: the gRPC API loom.v1 and the same resources over REST/JSON. Commands go onto Kafka through its outbox; reads go to the owning services.
// See README.md beside this file for what it owns, the topics it reads and
// writes, and how it recovers.
//
// SKELETON: signatures are the contract; bodies are being written.
package gateway

import (
	"context"
	"flag"

	"github.com/loom-ml/loom/libs/config"
)

// Config is the gateway's configuration.
type Config struct {
	config.Common
	// RESTAddr serves the REST/JSON API (LOOM_GATEWAY_REST_ADDR; default 127.0.0.1:7080).
	RESTAddr string
	// ProvisionerAddr, SchedulerAddr and RegistryAddr are the owning services'
	// internal gRPC addresses, where reads go (LOOM_PROVISIONER_ADDR,
	// LOOM_SCHEDULER_ADDR, LOOM_REGISTRY_ADDR).
	ProvisionerAddr, SchedulerAddr, RegistryAddr string
}

// RegisterFlags adds the gateway's flags to fs, defaults from LOOM_* variables.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	c.Common.Register(fs, "GATEWAY", "127.0.0.1:7070", "127.0.0.1:9170")
}

// Run runs the gateway until ctx ends, then shuts down gracefully.
func Run(ctx context.Context, cfg Config) error {
	panic("unimplemented")
}
