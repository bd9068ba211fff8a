// Package testkit starts real infrastructure for tests (a kfake broker and a
// Redis on random loopback ports, cleaned up with the test) and waits on
// conditions with deadlines instead of sleeping.
//
// SKELETON: signatures are the contract; bodies are being written.
package testkit

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/loom-ml/loom/libs/envelope"
)

// Broker starts a broker for the test with all of Loom's topics created and
// returns its address. It is closed when the test ends.
func Broker(t testing.TB) string { panic("unimplemented") }

// Redis starts a Redis for the test (redis-server when on PATH, else
// miniredis) and returns a client to it. Both end with the test.
func Redis(t testing.TB) (addr string, client *redis.Client) { panic("unimplemented") }

// WaitFor polls cond until it returns true, failing the test with msg when
// timeout passes first or cond returns an error.
func WaitFor(t testing.TB, timeout time.Duration, msg string, cond func() (bool, error)) {
	panic("unimplemented")
}

// WaitEvent reads topic from its start with a fresh reader until match returns
// true for an event, and returns that event; it fails the test after timeout.
func WaitEvent(t testing.TB, broker, topic string, timeout time.Duration, match func(envelope.Event) bool) envelope.Event {
	panic("unimplemented")
}
