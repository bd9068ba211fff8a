package app

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/testkit"
)

// runs records the runs of a Feed: each run's context, and whether it fails
// at once instead of running.
type runs struct {
	mu   sync.Mutex
	ctxs []context.Context
	fail int // how many runs from the start fail at once
}

func (r *runs) feed(ctx context.Context, ready func(), _ func(context.Context, envelope.Event)) error {
	r.mu.Lock()
	r.ctxs = append(r.ctxs, ctx)
	failing := len(r.ctxs) <= r.fail
	r.mu.Unlock()
	if failing {
		return errors.New("broker down")
	}
	ready()
	<-ctx.Done()
	return nil
}

func (r *runs) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.ctxs)
}

func (r *runs) last() context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ctxs[len(r.ctxs)-1]
}

func newFeed(r *runs, stop chan struct{}) *watchFeed {
	return &watchFeed{run: r.feed, handle: func(context.Context, envelope.Event) {}, log: slog.Default(),
		stop: stop, linger: 50 * time.Millisecond}
}

func waitClosed(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(10 * time.Second):
		t.Fatal(what)
	}
}

func TestWatchFeedRunsOnlyWhileWatched(t *testing.T) {
	t.Parallel()
	r := &runs{}
	f := newFeed(r, make(chan struct{}))
	if f.running() || r.count() != 0 {
		t.Fatal("the feed runs before anyone watches")
	}
	waitClosed(t, f.acquire(), "the feed never got ready")
	waitClosed(t, f.acquire(), "a second watcher does not see the feed ready")
	if r.count() != 1 {
		t.Fatalf("feed started %d times for two watchers, want once", r.count())
	}
	first := r.last()
	f.release()
	f.release()
	// A watcher within the linger keeps the same feed.
	waitClosed(t, f.acquire(), "the feed is not ready for a watcher within the linger")
	if r.count() != 1 || first.Err() != nil {
		t.Fatalf("a watch within the linger restarted the feed (%d starts, first %v)", r.count(), first.Err())
	}
	f.release()
	testkit.WaitFor(t, 10*time.Second, "the feed stopped after the linger", func() (bool, error) {
		return first.Err() != nil && !f.running(), nil
	})
	// The next watcher starts a new one.
	waitClosed(t, f.acquire(), "the feed did not start again")
	if r.count() != 2 {
		t.Fatalf("%d starts, want 2", r.count())
	}
	f.release()
}

func TestWatchFeedRestartsAfterAFailureAndStopsWithTheGateway(t *testing.T) {
	t.Parallel()
	r := &runs{fail: 2}
	stop := make(chan struct{})
	f := newFeed(r, stop)
	waitClosed(t, f.acquire(), "the feed never got ready after failing twice")
	if r.count() != 3 {
		t.Fatalf("%d runs, want 2 failures and a third that runs", r.count())
	}
	close(stop)
	waitClosed(t, r.last().Done(), "the gateway's stop did not end the feed")
}
