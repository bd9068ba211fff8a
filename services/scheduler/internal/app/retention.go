package app

import (
	"context"
	"errors"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/loom-ml/loom/services/scheduler/internal/adapters"
	"github.com/loom-ml/loom/services/scheduler/internal/domain"
)

// pruneBatch bounds the jobs one prune Apply drops, so that a long backlog
// (a restart after days) is written in many small atomic steps rather than
// one huge script.
const pruneBatch = 1000

// Prune drops ended jobs past their retention (domain.Retention) from memory
// and Redis, as one Apply per batch: the jobs, their runs and arrays deleted
// and their compact records written together, fenced like every write. A
// crash before an Apply loses nothing (the next prune does it again); after
// it, nothing pruned comes back. It takes its turn with Handle and Tick.
func (a *App) Prune(ctx context.Context, ret domain.Retention) (int, error) {
	total := 0
	for {
		n, more, err := a.pruneOnce(ctx, ret)
		total += n
		if err != nil || !more {
			return total, err
		}
	}
}

func (a *App) pruneOnce(ctx context.Context, ret domain.Retention) (int, bool, error) {
	a.work.Lock()
	defer a.work.Unlock()
	if !a.leading {
		return 0, false, ErrNotLeader
	}
	if err := a.drv.Ready(ctx); err != nil {
		return 0, false, err
	}
	p := a.state.Prune(a.now(), ret, pruneBatch)
	if p.Empty() {
		return 0, false, nil
	}
	tx := a.fencedTx()
	if err := adapters.WritePruned(tx, p); err != nil {
		return 0, false, err
	}
	commit := func() {
		a.mu.Lock()
		a.state.CommitPrune(p)
		a.mu.Unlock()
	}
	if _, err := a.write(ctx, "prune", nil, tx, commit); err != nil {
		return 0, false, err
	}
	return len(p.Jobs), p.More, nil
}

// RunPrune prunes every interval of clock until ctx ends or the instance stops
// leading; a failed prune is logged and tried again at the next.
func (a *App) RunPrune(ctx context.Context, ret domain.Retention, every time.Duration, clock clockwork.Clock) error {
	tk := clock.NewTicker(every)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tk.Chan():
			n, err := a.Prune(ctx, ret)
			switch {
			case errors.Is(err, ErrNotLeader):
				return nil
			case err != nil && ctx.Err() == nil:
				a.log.Warn("prune failed; retrying at the next", "err", err)
			case n > 0:
				a.log.Info("pruned ended jobs", "jobs", n)
			}
		}
	}
}
