package store

import (
	"context"
	"sync"
	"time"
)

// commitGate lets the relay publish an event only once the change that
// wrote it is in this process's memory too. A Driver's Apply enters the gate
// before its Redis write and leaves it after its commit; the relay, between
// reading a batch and publishing it, waits for every Apply in flight at that
// moment. Any entry the read saw was written by an Apply that had entered by
// then, so a client that sees the event and then asks this service reads the
// change (read your events), not memory one write behind. Applies that enter
// later are not waited for, so the relay cannot be starved; an Apply nested
// inside a commit enters and leaves on its own and cannot deadlock it.
type commitGate struct {
	mu   sync.Mutex
	next uint64
	open map[uint64]chan struct{}
}

// enter records an Apply in flight; the returned func records its end.
func (g *commitGate) enter() (leave func()) {
	ch := make(chan struct{})
	g.mu.Lock()
	if g.open == nil {
		g.open = map[uint64]chan struct{}{}
	}
	id := g.next
	g.next++
	g.open[id] = ch
	g.mu.Unlock()
	return func() {
		g.mu.Lock()
		delete(g.open, id)
		g.mu.Unlock()
		close(ch)
	}
}

// busy reports whether an Apply is in flight.
func (g *commitGate) busy() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.open) > 0
}

// wait waits for the Applies in flight now to leave, at most max (it
// reports false then) or until ctx ends.
func (g *commitGate) wait(ctx context.Context, max time.Duration) bool {
	g.mu.Lock()
	if len(g.open) == 0 {
		g.mu.Unlock()
		return true
	}
	chs := make([]chan struct{}, 0, len(g.open))
	for _, ch := range g.open {
		chs = append(chs, ch)
	}
	g.mu.Unlock()
	t := time.NewTimer(max)
	defer t.Stop()
	for _, ch := range chs {
		select {
		case <-ch:
		case <-t.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
	return true
}
