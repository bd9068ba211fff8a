package app

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/loom-ml/loom/libs/envelope"
)

// Feed runs the feed of job changes to this process's watchers until ctx
// ends: it calls ready once every change written after that reaches handle
// (the service wires bus.Tail of loom.job.events.v1). An error return is
// retried with backoff while anyone watches.
type Feed func(ctx context.Context, ready func(), handle func(context.Context, envelope.Event)) error

const (
	// feedLinger is how long the feed keeps running after its last watcher
	// left, so that watches in a row do not restart it each time.
	feedLinger = 30 * time.Second
	// feedReadyWait bounds how long a new watch waits for the feed to
	// start; past it, the watch's refresh poll covers what the feed misses.
	feedReadyWait = 2 * time.Second
)

// watchFeed runs a Feed only while someone in this process watches a job
// (and feedLinger after), so that a gateway nobody watches through reads no
// job changes at all.
type watchFeed struct {
	run    Feed
	handle func(context.Context, envelope.Event)
	log    *slog.Logger
	stop   <-chan struct{} // the gateway's stop: ends the feed for good
	linger time.Duration   // feedLinger; shorter in tests

	mu     sync.Mutex
	users  int
	gen    int                // counts starts, so a late idle timer cannot stop a newer feed
	cancel context.CancelFunc // of the running feed; nil when none runs
	ready  chan struct{}      // closed once the running feed is ready
	idle   *time.Timer        // stops the feed once the linger passed
}

// acquire counts a watcher in, starting the feed if it is not running, and
// returns a channel closed once the feed is ready.
func (f *watchFeed) acquire() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.users++
	if f.idle != nil {
		f.idle.Stop()
		f.idle = nil
	}
	if f.cancel == nil {
		f.start()
	}
	return f.ready
}

// release counts a watcher out; the last one out stops the feed after
// feedLinger unless another comes meanwhile.
func (f *watchFeed) release() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.users--
	if f.users > 0 || f.cancel == nil {
		return
	}
	gen := f.gen
	f.idle = time.AfterFunc(f.linger, func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.users == 0 && f.gen == gen && f.cancel != nil {
			f.cancel()
			f.cancel, f.idle = nil, nil
		}
	})
}

// running reports whether a feed runs now.
func (f *watchFeed) running() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cancel != nil
}

// start runs the feed in the background, restarting it with backoff when
// it fails, until it is cancelled or the gateway stops. Call with mu held.
func (f *watchFeed) start() {
	ctx, cancel := context.WithCancel(context.Background())
	f.gen++
	f.cancel = cancel
	ready := make(chan struct{})
	f.ready = ready
	var once sync.Once
	markReady := func() { once.Do(func() { close(ready) }) }
	go func() {
		select {
		case <-f.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	go func() {
		delay := 100 * time.Millisecond
		for {
			err := f.run(ctx, markReady, f.handle)
			if ctx.Err() != nil {
				return
			}
			f.log.Warn("watch feed stopped; restarting it", "err", err, "in", delay)
			select {
			case <-ctx.Done():
				return
			case <-time.After(delay):
			}
			delay = min(2*delay, 5*time.Second)
		}
	}()
}
