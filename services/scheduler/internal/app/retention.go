package app

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/loom-ml/loom/libs/store"
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
	if a.stale {
		if err := a.reload(ctx); err != nil {
			return 0, false, err
		}
	}
	p := a.state.Prune(a.now(), ret, pruneBatch)
	if p.Empty() {
		return 0, false, nil
	}
	var tx store.Tx
	if a.fenced {
		a.seq++
		adapters.Fence(&tx, a.token, a.seq)
	}
	if err := adapters.WritePruned(&tx, p); err != nil {
		return 0, false, err
	}
	if _, err := a.st.Apply(ctx, "", &tx); err != nil {
		a.stale = true
		if a.fenced && adapters.IsFenced(err) {
			a.leading = false
			if f := a.onFenced; f != nil {
				a.onFenced = nil
				f()
			}
			return 0, false, fmt.Errorf("prune: %w: %w", ErrNotLeader, err)
		}
		return 0, false, fmt.Errorf("prune: %w", err)
	}
	a.mu.Lock()
	a.state.CommitPrune(p)
	a.mu.Unlock()
	return len(p.Jobs), p.More, nil
}

// RunPrune prunes every interval until ctx ends or the instance stops
// leading; a failed prune is logged and tried again at the next.
func (a *App) RunPrune(ctx context.Context, ret domain.Retention, every time.Duration) error {
	tk := time.NewTicker(every)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tk.C:
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
