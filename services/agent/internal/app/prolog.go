package app

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/loom-ml/loom/libs/envelope"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// Prolog and epilog checks: health checks a node runs around its jobs'
// steps, as Slurm's prolog and epilog (docs/health.md, "Prolog and epilog
// checks"). The batch step of an attempt (StartStep) runs the prolog checks
// before its process starts: a CHECK_FAIL refuses the step (FAILED_TO_START,
// PrologFailedPrefix), which the scheduler takes for the node's failure, not
// the job's. Its end, whatever it was, runs the epilog checks. Every result
// is emitted as HealthCheckCompleted, as a RunHealthCheck's is, so health
// judges and repairs the node as after any check.

// Check triggers of the prolog and epilog checks (HealthCheckResult.trigger).
const (
	TriggerProlog = "prolog"
	TriggerEpilog = "epilog"
)

// PrologFailedPrefix starts the message of a step refused because a prolog
// check failed ("prolog check failed on <host>: <summary>"); the scheduler
// knows a node's failure by it.
const PrologFailedPrefix = "prolog check failed"

// DefaultPrologTimeout bounds the prolog checks of a step when
// JobChecks.Timeout is 0 (and the epilog's, when EpilogTimeout is 0 too).
const DefaultPrologTimeout = 30 * time.Second

// JobChecks are the checks a node runs around its jobs' steps.
type JobChecks struct {
	// Prolog and Epilog name the checks (as the check runner knows them:
	// gpu_diag, disk, speed, a site check) run before a step's process
	// starts and after it ends. Empty: none (no cost on the start path).
	Prolog, Epilog []string
	// Timeout bounds each run of the prolog, all its checks together
	// (default DefaultPrologTimeout).
	Timeout time.Duration
	// EpilogTimeout bounds each run of the epilog, all its checks
	// together (default Timeout).
	EpilogTimeout time.Duration
}

// JobCheckRunner runs a step's prolog or epilog checks (the agent's Node):
// every named check at once, each result emitted as HealthCheckCompleted
// before it returns them. It returns by ctx's deadline.
type JobCheckRunner interface {
	RunJobChecks(ctx context.Context, trigger string, names []string) []*loomv1.HealthCheckResult
}

// RunJobChecks runs the checks names on this node's CheckRunner, all at
// once, at level 1 and allowed on a busy node (the node is about to run, or
// has just run, the job's step), with trigger: each result is completed
// (fill) and emitted as HealthCheckCompleted through the outbox, and
// returned in the order of names. A check cut short because ctx was
// cancelled (the agent stopping) is neither emitted nor returned as a
// failure: it would tell health nothing of the node.
func (n *Node) RunJobChecks(ctx context.Context, trigger string, names []string) []*loomv1.HealthCheckResult {
	out := make([]*loomv1.HealthCheckResult, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		cmd := &eventsv1.RunHealthCheck{Node: n.opts.Self.Node, Cluster: n.opts.Self.Cluster,
			RunId: trigger + "-" + envelope.NewID(), Check: name, Level: 1, Trigger: trigger, AllowBusy: true}
		if dl, ok := ctx.Deadline(); ok {
			cmd.Timeout = durationpb.New(time.Until(dl))
		}
		wg.Go(func() {
			start := n.opts.Clock.Now()
			res := n.runCheck(ctx, cmd)
			n.fill(res, cmd, start)
			if errors.Is(ctx.Err(), context.Canceled) {
				return
			}
			n.emitResult(res)
			out[i] = res
		})
	}
	wg.Wait()
	return out
}

// hasProlog reports whether steps get prolog checks.
func (a *App) hasProlog() bool {
	return len(a.opts.JobChecks.Prolog) > 0 && a.opts.JobCheckRunner != nil
}

// prolog runs the prolog checks of step key before its process starts and
// returns why the step must not start ("" when it may): the first check
// that failed (CHECK_FAIL). A check that could not run (CHECK_ERROR: hung,
// unknown) does not hold the job back; health hears of it. The checks end
// early when the agent stops.
func (a *App) prolog(key string) string {
	ctx, cancel := context.WithTimeout(context.Background(), a.opts.JobChecks.Timeout)
	defer cancel()
	go func() {
		select {
		case <-a.stopping:
			cancel()
		case <-ctx.Done():
		}
	}()
	start := a.opts.Clock.Now()
	results := a.opts.JobCheckRunner.RunJobChecks(ctx, TriggerProlog, a.opts.JobChecks.Prolog)
	var errored []string
	for _, r := range results {
		switch r.GetOutcome() {
		case loomv1.CheckOutcome_CHECK_FAIL:
			a.log.Warn("prolog check failed: the step does not start here", "step", key, "check", r.GetCheck(), "summary", r.GetSummary())
			return fmt.Sprintf("%s on %s: %s (check %s)", PrologFailedPrefix, a.opts.Hostname, r.GetSummary(), r.GetCheck())
		case loomv1.CheckOutcome_CHECK_ERROR:
			errored = append(errored, r.GetCheck()+": "+r.GetSummary())
		}
	}
	if len(errored) > 0 {
		a.log.Warn("prolog checks could not run; the step starts anyway", "step", key, "errors", strings.Join(errored, "; "))
	}
	a.log.Debug("prolog checks passed", "step", key, "took", a.opts.Clock.Since(start))
	return ""
}

// epilog runs the epilog checks after step key ended, in a goroutine of
// its own: they report on the node, never on the step, whose end is
// already recorded. Not while the agent stops (the node goes down: its
// next start's checks tell more).
func (a *App) epilog(key string) {
	if len(a.opts.JobChecks.Epilog) == 0 || a.opts.JobCheckRunner == nil {
		return
	}
	a.mu.Lock()
	closing := a.closing
	a.mu.Unlock()
	if closing {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), a.opts.JobChecks.EpilogTimeout)
		defer cancel()
		for _, r := range a.opts.JobCheckRunner.RunJobChecks(ctx, TriggerEpilog, a.opts.JobChecks.Epilog) {
			if r.GetOutcome() == loomv1.CheckOutcome_CHECK_FAIL {
				a.log.Warn("epilog check failed", "step", key, "check", r.GetCheck(), "summary", r.GetSummary())
			}
		}
	}()
}
