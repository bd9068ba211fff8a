// Package service is the frame every Loom service runs in: it connects to
// Redis and Kafka, creates the topics, sets up telemetry, serves gRPC and the
// HTTP endpoints, runs the outbox relay and the consumers, and shuts all of
// them down gracefully when its context ends.
//
// SKELETON: signatures are the contract; bodies are being written.
package service

import (
	"context"
	"log/slog"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"

	"github.com/loom-ml/loom/libs/bus"
	"github.com/loom-ml/loom/libs/config"
	"github.com/loom-ml/loom/libs/store"
	"github.com/loom-ml/loom/libs/telemetry"
)

// Base is what a service gets to build itself from.
type Base struct {
	Name      string
	Config    config.Common
	Log       *slog.Logger
	Telemetry *telemetry.Telemetry
	Redis     *redis.Client
	// Store keeps the service's state under the prefix "<name>:".
	Store    *store.Store
	Producer *bus.Producer
	// GRPC is the service's gRPC server (with OpenTelemetry interceptors);
	// register services on it before Run.
	GRPC *grpc.Server
}

// New connects to Redis and Kafka (waiting, with backoff, until ctx ends for
// them to answer), creates the topics when cfg.CreateTopics, and sets up
// telemetry. name is the service's name, e.g. "scheduler".
func New(ctx context.Context, name string, cfg config.Common) (*Base, error) {
	panic("unimplemented")
}

// Consume describes one consumer group the service runs: its handler is called
// for each event of the topics, in order within a partition.
type Consume struct {
	Topics  []string
	Handler bus.Handler
	// Group defaults to "loom-<name>".
	Group string
}

// Run serves gRPC on cfg.GRPCAddr and HTTP on cfg.HTTPAddr, runs the outbox
// relay, the consumers and the extra background loops, and blocks until ctx
// ends or one of them fails; then it stops them all gracefully (consumers
// finish the record in hand and commit) and closes its connections. Loops
// must return when their context ends.
func (b *Base) Run(ctx context.Context, consumers []Consume, loops ...func(context.Context) error) error {
	panic("unimplemented")
}

// GRPCAddr returns the bound gRPC address once Run has started listening
// (useful with ":0"); it blocks until then or ctx ends.
func (b *Base) GRPCAddr(ctx context.Context) (string, error) { panic("unimplemented") }
