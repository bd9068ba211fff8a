// Package app applies consumed events to the scheduler: the domain computes
// the change, store.Apply writes it (records, emitted events and the inbox
// mark, atomically), and only then does the in-memory state take it.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/loom-ml/loom/libs/bus"
	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/store"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/scheduler/internal/adapters"
	"github.com/loom-ml/loom/services/scheduler/internal/domain"
)

// Source is the CloudEvents source of the scheduler's events.
const Source = "loom/scheduler"

// App is the scheduler's state and the one path that changes it. Handle (the
// consumer) and Tick (the clock) may run concurrently; they take turns. Reads
// may run concurrently with either.
type App struct {
	st   *store.Store
	repo *adapters.Repo
	cfg  domain.Config
	now  func() time.Time
	log  *slog.Logger

	// work serialises the writers (Handle, Tick): each computes a change from
	// the state it sees and commits it before the next one looks.
	work sync.Mutex
	// mu guards state against readers while Commit runs; writers read it
	// under work alone because only they change it.
	mu    sync.RWMutex
	state *domain.State
	// stale is set when an Apply failed without saying whether it wrote:
	// memory may lag Redis, so the next event reloads first.
	stale bool
}

// New returns an app over st; Start loads it. now is the clock.
func New(st *store.Store, cfg domain.Config, now func() time.Time, log *slog.Logger) *App {
	return &App{st: st, repo: adapters.NewRepo(st), cfg: cfg, now: now, log: log, state: domain.NewState(cfg)}
}

// Start rebuilds memory from Redis and runs a scheduling pass over every
// cluster, so work that a crashed predecessor left to do is done.
func (a *App) Start(ctx context.Context) error {
	a.work.Lock()
	defer a.work.Unlock()
	if err := a.reload(ctx); err != nil {
		return err
	}
	c := a.state.Schedule(a.now())
	if err := a.apply(ctx, "", c); err != nil {
		return fmt.Errorf("start-up pass: %w", err)
	}
	return nil
}

func (a *App) reload(ctx context.Context) error {
	recs, err := a.repo.Load(ctx)
	if err != nil {
		return fmt.Errorf("load state: %w", err)
	}
	s := domain.NewState(a.cfg)
	s.Load(recs.Clusters, recs.Nodes, recs.Jobs, recs.Runs)
	a.mu.Lock()
	a.state, a.stale = s, false
	a.mu.Unlock()
	a.log.Info("state loaded", "clusters", len(recs.Clusters), "nodes", len(recs.Nodes), "jobs", len(recs.Jobs), "runs", len(recs.Runs))
	return nil
}

// Handle applies one consumed event; it is the consumer's bus.Handler. An
// event that can never apply is returned as bus.Permanent (dead-lettered).
func (a *App) Handle(ctx context.Context, ev envelope.Event) error {
	a.work.Lock()
	defer a.work.Unlock()
	if a.stale {
		if err := a.reload(ctx); err != nil {
			return err
		}
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

// Tick applies what the clock asks for (drain deadlines that have passed).
// Its change carries no inbox mark: a crash before it is stored loses
// nothing, since the next tick, or the start-up pass, computes it again.
func (a *App) Tick(ctx context.Context) error {
	a.work.Lock()
	defer a.work.Unlock()
	if a.stale {
		if err := a.reload(ctx); err != nil {
			return err
		}
	}
	if err := a.apply(ctx, "", a.state.Tick(a.now())); err != nil {
		return fmt.Errorf("tick: %w", err)
	}
	return nil
}

// RunClock calls Tick every interval until ctx ends. A failed tick is logged
// and tried again at the next one, so a Redis hiccup does not stop the
// service; it returns nil when ctx ends.
func (a *App) RunClock(ctx context.Context, every time.Duration) error {
	tk := time.NewTicker(every)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tk.C:
			if err := a.Tick(ctx); err != nil && ctx.Err() == nil {
				a.log.Warn("tick failed; retrying at the next", "err", err)
			}
		}
	}
}

// apply writes c with the inbox mark inboxID and commits it to memory.
func (a *App) apply(ctx context.Context, inboxID string, c *domain.Change) error {
	for _, d := range c.Decisions {
		a.log.Debug("job waits", "job", d.Job, "reason", d.Reason, "filtered", d.Filtered)
	}
	if c.Empty() {
		// Nothing to write: the event changes nothing, now or on redelivery.
		return nil
	}
	var tx store.Tx
	if err := adapters.Write(&tx, c); err != nil {
		return err
	}
	for _, e := range c.Emits {
		ev := envelope.New(e.Topic, e.Key, Source, e.Payload)
		if e.Subject != "" {
			ev.Subject = e.Subject
		}
		tx.Emit(ev)
	}
	applied, err := a.st.Apply(ctx, inboxID, &tx)
	if err != nil {
		a.stale = true
		return fmt.Errorf("apply: %w", err)
	}
	if !applied {
		return nil // applied before; memory was loaded with it
	}
	a.mu.Lock()
	a.state.Commit(c)
	a.mu.Unlock()
	return nil
}

// GetJob returns the job named name, or an error wrapping errs.NotFound.
func (a *App) GetJob(name string) (*loomv1.Job, error) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	j := a.state.Job(name)
	if j == nil {
		return nil, fmt.Errorf("job %s: %w", name, errs.NotFound)
	}
	return j, nil
}

// ListJobs returns the jobs keep returns true for, in queue order.
func (a *App) ListJobs(keep func(*loomv1.Job) bool) []*loomv1.Job {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.state.Jobs(keep)
}
