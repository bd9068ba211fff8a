package store

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/testkit/need"
)

// realRedis starts a Redis for the test with testkit (a real redis-server,
// which the tests that need keys to expire on their own require) and returns a
// client to it.
func realRedis(t testing.TB) *redis.Client {
	t.Helper()
	need.Tools(t, "apt-get install redis-server", "redis-server")
	_, rdb := testkit.Redis(t)
	return rdb
}

// miniRedis starts a miniredis for the test.
func miniRedis(t testing.TB) *redis.Client {
	t.Helper()
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// backends runs f against a real redis-server and against miniredis.
func backends(t *testing.T, f func(t *testing.T, rdb *redis.Client)) {
	t.Helper()
	for _, b := range []struct {
		name  string
		start func(testing.TB) *redis.Client
	}{{"redis-server", realRedis}, {"miniredis", miniRedis}} {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			f(t, b.start(t))
		})
	}
}

// waitFor is testkit.WaitFor.
var waitFor = testkit.WaitFor

// testEvent returns an event on topic "loom.test.v1" with key key and a payload naming n.
func testEvent(key, n string) envelope.Event {
	return envelope.New("loom.test.v1", key, "loom/test", wrapperspb.String(n))
}

// recorder is a Publisher that records what it is asked to publish. fail, when
// set, decides per call whether the call fails (nothing recorded then). It
// also counts how many calls are in flight at once, across recorders that
// share inflight.
type recorder struct {
	mu       sync.Mutex
	msgs     []kafka.Message
	calls    int
	fail     func(call int) error
	inflight *atomic.Int32
	overlap  *atomic.Bool
}

func newRecorder() *recorder {
	return &recorder{inflight: new(atomic.Int32), overlap: new(atomic.Bool)}
}

func (r *recorder) PublishMessages(ctx context.Context, msgs ...kafka.Message) error {
	if r.inflight.Add(1) > 1 {
		r.overlap.Store(true)
	}
	defer r.inflight.Add(-1)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls++
	if r.fail != nil {
		if err := r.fail(r.calls); err != nil {
			return err
		}
	}
	r.msgs = append(r.msgs, msgs...)
	return nil
}

// ids returns the ce_id of every recorded message, in publish order.
func (r *recorder) ids() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.msgs))
	for _, m := range r.msgs {
		out = append(out, headerValue(m.Headers, envelope.HeaderID))
	}
	return out
}

func (r *recorder) messages() []kafka.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.msgs)
}

// runRelay runs s's relay until the test ends (or stop is called) and
// returns stop, which cancels it and returns RunRelay's error.
func runRelay(t testing.TB, s *Store, pub Publisher) (stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.RunRelay(ctx, pub) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				t.Errorf("relay did not stop within 10s of cancel")
			}
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}
