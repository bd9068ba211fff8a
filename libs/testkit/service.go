package testkit

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// StopTimeout bounds how long Service.Stop waits for a service to return
// after its context is cancelled: a service that takes longer is stuck.
const StopTimeout = 60 * time.Second

// Service is one service's Run, running in the test's process until Stop or
// the end of the test. It replaces the cancel-and-result-channel pair every
// service's tests once wrote for themselves.
type Service struct {
	name   string
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex
	err     error // what run returned; valid once done is closed
	stopped bool  // the test called Stop, and so checks what it returned
}

// Start runs run(ctx) in its own goroutine. When the test ends, a service
// the test did not stop is stopped, and the test fails if it did not stop
// within StopTimeout or if run returned an error (a clean stop returns nil).
// A test that calls Stop itself checks what it returned.
func Start(t testing.TB, name string, run func(ctx context.Context) error) *Service {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &Service{name: name, cancel: cancel, done: make(chan struct{})}
	go func() {
		err := run(ctx)
		s.mu.Lock()
		s.err = err
		s.mu.Unlock()
		close(s.done)
	}()
	t.Cleanup(func() {
		s.mu.Lock()
		checked := s.stopped
		s.mu.Unlock()
		if err := s.stop(); err != nil && !checked {
			t.Errorf("%v", err)
		}
	})
	return s
}

// Stop cancels the service's context and waits for run to return, at most
// StopTimeout. It returns what run returned (wrapped with the service's
// name), or an error saying it did not stop; later calls return the same.
func (s *Service) Stop() error {
	s.mu.Lock()
	s.stopped = true
	s.mu.Unlock()
	return s.stop()
}

func (s *Service) stop() error {
	s.cancel()
	select {
	case <-s.done:
	case <-time.After(StopTimeout):
		return fmt.Errorf("%s did not stop within %v", s.name, StopTimeout)
	}
	return s.result()
}

// Done is closed when run has returned, whether stopped or not: a test
// waiting for the service to come up selects on it to notice a failed start.
func (s *Service) Done() <-chan struct{} { return s.done }

// Err returns what run returned once Done is closed (nil before).
func (s *Service) Err() error {
	select {
	case <-s.done:
		return s.result()
	default:
		return nil
	}
}

func (s *Service) result() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return fmt.Errorf("%s: %w", s.name, s.err)
	}
	return nil
}

// Dial returns a gRPC client connection to addr (plaintext, as on loopback
// in tests), closed when the test ends. Its calls carry a service token of
// the test's services' secret ("services/test"), as the gateway's calls to
// the internal APIs do (a gateway ignores it where it wants a user). It does not wait for the server:
// calls made before it listens fail with Unavailable, which WaitFor loops
// treat as not yet.
func Dial(t testing.TB, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()), ServiceCredentials())
	if err != nil {
		t.Fatalf("testkit: dial %s: %v", addr, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}
