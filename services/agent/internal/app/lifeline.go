package app

import (
	"context"
	"errors"
	"os"
	"syscall"
	"time"

	"github.com/loom-ml/loom/services/agent/internal/domain"
	"github.com/loom-ml/loom/services/agent/internal/ports"
)

// DefaultOrphanAfter is Options.OrphanAfter when unset: long enough to ride
// out any restart of the control plane (a `loom up` started again, Redis
// or Kafka restarted), short enough that agents left behind by a control
// plane that is gone for good do not pile up.
const DefaultOrphanAfter = 10 * time.Minute

// kafkaAnswered records a heartbeat the broker took (domain.Lifeline).
func (a *App) kafkaAnswered(now time.Time) {
	a.lifeMu.Lock()
	a.life.KafkaAnswered(now)
	a.lifeMu.Unlock()
}

// Watch checks, every heartbeat interval, that the agent still has a node
// and a control plane (domain.Lifeline): it returns why the agent must end
// itself, or nil once ctx ends. Heartbeats tell it whether Kafka answers;
// it pings Redis itself.
func (a *App) Watch(ctx context.Context) *domain.SelfExit {
	t := a.opts.Clock.NewTicker(a.opts.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.Chan():
		}
		pctx, cancel := context.WithTimeout(ctx, max(a.opts.HeartbeatInterval, time.Second))
		err := a.opts.Store.Client().Ping(pctx).Err()
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		_, serr := os.Stat(a.opts.WorkDir)
		now := a.opts.Now()
		a.lifeMu.Lock()
		if err == nil {
			a.life.RedisAnswered(now)
		}
		exit := a.life.Check(now, a.opts.WorkDir, errors.Is(serr, os.ErrNotExist))
		a.lifeMu.Unlock()
		if exit != nil {
			return exit
		}
	}
}

// Abandon ends every step and task group this agent runs without recording
// their ends, for an agent that stops (on its own or asked to) while its
// control plane does not answer (nothing could be written): SIGTERM to
// each group, SIGKILL to what is left after the kill grace or when ctx
// ends. The records stay
// RUNNING, and the agent's next start reports them LOST, as after a crash.
// StartSteps arriving from now on wait for Release and stay uncommitted.
func (a *App) Abandon(ctx context.Context, why string) {
	a.mu.Lock()
	a.beginClosing()
	var groups []ports.Group
	var done []chan struct{}
	var names []string
	for key, p := range a.procs {
		a.log.Warn("ending step: "+why, "step", key, "pid", p.g.PID)
		groups = append(groups, p.g)
		done = append(done, p.done)
		names = append(names, key)
	}
	for key, g := range a.groups {
		a.log.Warn("ending tasks: "+why, "tasks", key, "pids", groupIDs(g.groups))
		groups = append(groups, g.groups...)
		done = append(done, g.done)
		if t := a.tasks[key]; t != nil {
			for l := range t.NTasks {
				names = append(names, taskName(key, l))
			}
		}
	}
	a.mu.Unlock()
	// The exits the shims record are the agent's own kills, not the jobs'
	// ends: dropped once the groups are gone, so that the next start finds
	// nothing and reports the steps LOST (an infrastructure failure), not
	// EXITED 143.
	defer func() {
		for _, n := range names {
			a.rt.Forget(n)
		}
	}()
	for _, g := range groups {
		_ = a.rt.Signal(g, syscall.SIGTERM)
	}
	t := time.NewTimer(a.opts.KillGrace)
	defer t.Stop()
	for _, d := range done {
		select {
		case <-d:
			continue
		case <-t.C:
		case <-ctx.Done():
		}
		a.log.Warn("steps ignored SIGTERM; killing them", "grace", a.opts.KillGrace)
		break
	}
	for _, g := range groups {
		_ = a.rt.Kill(g)
	}
}
