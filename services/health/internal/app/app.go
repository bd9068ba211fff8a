// Package app applies telemetry and membership events to the health service
// and runs its check loop: the domain computes each change, store.Apply writes
// the durable part (verdicts, membership, emitted events, inbox mark) at once,
// and only then does memory take it.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/loom-ml/loom/libs/bus"
	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/store"
	"github.com/loom-ml/loom/services/health/internal/adapters"
	"github.com/loom-ml/loom/services/health/internal/domain"
)

// Source is the CloudEvents source of the health service's events.
const Source = "loom/health"

// App is the health service's state. The consumer and the check loop both
// change it, so each change is computed, written and committed under mu.
type App struct {
	st      *store.Store
	timeout time.Duration
	now     func() time.Time
	log     *slog.Logger
	// drv writes each change and reloads memory after a write whose
	// outcome is unknown; its calls run under mu.
	drv *store.Driver

	mu    sync.Mutex
	state *domain.State
}

// New returns an app over st that declares a node UNHEALTHY after timeout of
// silence, reading time from now; Start loads it.
func New(st *store.Store, timeout time.Duration, now func() time.Time, log *slog.Logger) *App {
	a := &App{st: st, timeout: timeout, now: now, log: log, state: domain.NewState(timeout)}
	a.drv = store.NewDriver(st, a.reload)
	return a
}

// Start loads the members and their verdicts; every member gets a full
// timeout of grace from now, since when it last spoke was not kept.
func (a *App) Start(ctx context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.reload(ctx)
}

func (a *App) reload(ctx context.Context) error {
	nodes, err := adapters.LoadNodes(ctx, a.st)
	if err != nil {
		return err
	}
	s := domain.NewState(a.timeout)
	s.Load(a.now(), nodes)
	a.state = s
	a.log.Info("state loaded", "nodes", len(nodes))
	return nil
}

// Handle applies one consumed event; it is the consumer's bus.Handler. An
// event that can never apply is returned as bus.Permanent (dead-lettered).
func (a *App) Handle(ctx context.Context, ev envelope.Event) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.drv.Ready(ctx); err != nil {
		return err
	}
	c, err := a.state.Handle(a.now(), ev.Payload)
	if err != nil {
		var inv *errs.InvalidError
		if errors.As(err, &inv) {
			return bus.Permanent(fmt.Errorf("event %s (%s): %w", ev.ID, ev.Type, err))
		}
		return fmt.Errorf("event %s (%s): %w", ev.ID, ev.Type, err)
	}
	if err := a.apply(ctx, ev.ID, c); err != nil {
		return fmt.Errorf("event %s (%s): %w", ev.ID, ev.Type, err)
	}
	return nil
}

// Check declares the nodes silent for the timeout UNHEALTHY, once each.
func (a *App) Check(ctx context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.drv.Ready(ctx); err != nil {
		return err
	}
	if err := a.apply(ctx, "", a.state.Check(a.now())); err != nil {
		return fmt.Errorf("health check: %w", err)
	}
	return nil
}

// CheckLoop runs Check every interval of clock until ctx ends; a failed
// check is logged and tried again at the next tick. It is a service.Base loop.
func (a *App) CheckLoop(interval time.Duration, clock clockwork.Clock) func(context.Context) error {
	return func(ctx context.Context) error {
		t := clock.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-t.Chan():
				if err := a.Check(ctx); err != nil && ctx.Err() == nil {
					a.log.Warn("health check failed", "err", err)
				}
			}
		}
	}
}

// apply writes the durable part of c with the inbox mark inboxID, then
// commits c to memory. A change that only refreshes last-seen times (a
// routine heartbeat) writes nothing: it is idempotent as it is.
func (a *App) apply(ctx context.Context, inboxID string, c *domain.Change) error {
	if c.Durable() {
		var tx store.Tx
		if err := adapters.Write(&tx, c); err != nil {
			return err
		}
		for _, e := range c.Emits {
			ev, err := envelope.Route(e.Key, Source, e.Payload)
			if err != nil {
				return err
			}
			tx.Emit(ev)
		}
		applied, err := a.drv.Apply(ctx, inboxID, &tx, func() { a.state.Commit(c) })
		if err != nil {
			return fmt.Errorf("apply: %w", err)
		}
		if applied {
			for _, e := range c.Emits {
				a.log.Info("node health changed", "node", e.Key, "verdict", e.Payload)
			}
		}
		return nil
	}
	a.state.Commit(c)
	return nil
}

// Node returns the node's record, for reads; ok is false for non-members.
func (a *App) Node(name string) (n domain.Node, ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if p := a.state.Node(name); p != nil {
		return *p, true
	}
	return domain.Node{}, false
}
