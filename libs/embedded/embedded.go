// Package embedded starts the infrastructure Loom needs on loopback, in process
// or as child processes: a Kafka-protocol broker (kfake, with a data directory
// so it survives restarts) and Redis (a real redis-server when one is on PATH,
// with its own data directory and appendonly; miniredis otherwise).
//
// SKELETON: signatures are the contract; bodies are being written.
package embedded

import "context"

// Broker is a running kfake broker.
type Broker struct {
	// Addr is host:port of the broker, on 127.0.0.1.
	Addr string
}

// StartBroker starts a kfake broker on addr ("127.0.0.1:0" or "" picks a free
// port) keeping its data in dataDir ("" keeps it in memory only).
func StartBroker(ctx context.Context, addr, dataDir string) (*Broker, error) {
	panic("unimplemented")
}

// Close stops the broker.
func (b *Broker) Close() error { panic("unimplemented") }

// Redis is a running Redis.
type Redis struct {
	// Addr is host:port, on 127.0.0.1.
	Addr string
	// Kind is "redis-server" or "miniredis".
	Kind string
}

// StartRedis starts redis-server (when on PATH; with dir=dataDir and
// appendonly yes) or else miniredis, on addr ("" picks a free port).
func StartRedis(ctx context.Context, addr, dataDir string) (*Redis, error) {
	panic("unimplemented")
}

// Close stops Redis (SHUTDOWN for redis-server, so its data is on disk).
func (r *Redis) Close() error { panic("unimplemented") }
