package app

import (
	"context"
	"fmt"
	"time"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/paging"
	"github.com/loom-ml/loom/libs/resname"
	"github.com/loom-ml/loom/libs/store"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/gateway/internal/adapters"
)

// DefaultJobHistory is how long the gateway keeps ended jobs for sacct
// (LOOM_GATEWAY_JOB_HISTORY): 30 days.
const DefaultJobHistory = 30 * 24 * time.Hour

// HistoryGroup is the consumer group (shared by the gateway's instances,
// durable: it resumes where it stopped) that records ended jobs from
// loom.job.events.v1 into the history.
const HistoryGroup = "loom-gateway-history"

// sweepBatch bounds the records one sweep Apply deletes.
const sweepBatch = 500

// HandleHistoryEvent records a job that ended (a JobChanged in a final
// state) in the history, which serves GetJob and ListJobs (sacct) once the
// scheduler has pruned the job. The scheduler sends a final state with the
// job's runs; an event without them (from an older scheduler) has the job
// read from the scheduler for its runs, and when the scheduler no longer has
// it (this consumer lagged past its retention), the event's job is kept.
// The event id is the inbox id: a redelivered event writes nothing twice.
func (g *Gateway) HandleHistoryEvent(ctx context.Context, ev envelope.Event) error {
	jc, ok := ev.Payload.(*eventsv1.JobChanged)
	if !ok || jc.GetJob().GetName() == "" || !jc.GetJob().GetState().Terminal() {
		return nil
	}
	j := jc.GetJob()
	if len(j.GetRuns()) == 0 && jc.GetAttempt() > 0 {
		// A scheduler that did not send the runs with the final state.
		if cur, err := g.own.Jobs.GetJob(ctx, &loomv1.GetJobRequest{Name: j.GetName()}); err == nil &&
			cur.GetState() == j.GetState() && cur.GetRestartCount() == j.GetRestartCount() {
			j = cur
		} else if err != nil && !isNotFound(err) {
			return fmt.Errorf("history of %s: ask the scheduler: %w", j.GetName(), err)
		}
	}
	tx := &store.Tx{}
	if err := adapters.PutHistory(tx, j); err != nil {
		return err
	}
	if _, err := g.repo.Apply(ctx, "history:"+ev.ID, tx); err != nil {
		return fmt.Errorf("history of %s: %w", j.GetName(), err)
	}
	return nil
}

// SweepHistory drops, as of now, the ended jobs of the history and the
// accepted job records older than the history window, in small atomic
// batches (reads are never blocked: each batch is one short Apply), and
// gives request records left without a TTL theirs. It returns how many
// records it dropped. A crash mid-sweep leaves whole batches done and the
// rest for the next sweep.
func (g *Gateway) SweepHistory(ctx context.Context) (int, error) {
	cutoff := g.now().Add(-g.opt.JobHistory)
	hist, err := g.repo.HistoryJobs(ctx)
	if err != nil {
		return 0, err
	}
	var oldHist []*loomv1.Job
	for _, j := range hist {
		end := j.GetEndTime()
		if end == nil || end.AsTime().Before(cutoff) {
			oldHist = append(oldHist, j)
		}
	}
	accepted, err := g.repo.AcceptedJobs(ctx)
	if err != nil {
		return 0, err
	}
	var oldAccepted []*loomv1.Job
	for _, j := range accepted {
		if st := j.GetSubmitTime(); st != nil && st.AsTime().Before(cutoff) {
			oldAccepted = append(oldAccepted, j)
		}
	}
	dropped := 0
	for _, kind := range []struct {
		key, steps string // steps: the hash of the records' job steps, if any
		index      string // the prefix of the projects' indexes of them
		jobs       []*loomv1.Job
	}{{adapters.KeyHistory, adapters.KeyHistorySteps, adapters.KeyHistoryIndexPrefix, oldHist},
		{adapters.KeyJobs, "", adapters.KeyJobIndexPrefix, oldAccepted}} {
		for len(kind.jobs) > 0 {
			n := min(len(kind.jobs), sweepBatch)
			tx := &store.Tx{}
			for _, j := range kind.jobs[:n] {
				name := j.GetName()
				tx.HDel(kind.key, name)
				if kind.steps != "" {
					tx.HDel(kind.steps, name)
				}
				if p, err := resname.SplitJob(name); err == nil {
					tx.ZRem(kind.index+p.Project, paging.JobKey(j))
				}
			}
			if _, err := g.repo.Apply(ctx, "", tx); err != nil {
				return dropped, fmt.Errorf("sweep %s: %w", kind.key, err)
			}
			dropped += n
			kind.jobs = kind.jobs[n:]
		}
	}
	if _, err := g.repo.ExpireRequests(ctx); err != nil {
		return dropped, err
	}
	return dropped, nil
}

// EnsureJobIndexes builds the indexes ListJobs reads from the records of a
// store written before they were kept, once (adapters.EnsureJobIndexes).
func (g *Gateway) EnsureJobIndexes(ctx context.Context) error { return g.repo.EnsureJobIndexes(ctx) }

// RunHistorySweep sweeps every interval of the gateway's clock until ctx ends; a failed sweep is
// logged and tried again at the next.
func (g *Gateway) RunHistorySweep(ctx context.Context, every time.Duration) error {
	tk := g.opt.Clock.NewTicker(every)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tk.Chan():
			n, err := g.SweepHistory(ctx)
			switch {
			case err != nil && ctx.Err() == nil:
				g.opt.Log.Warn("job history sweep failed; retrying at the next", "err", err)
			case n > 0:
				g.opt.Log.Info("job history swept", "records", n)
			}
		}
	}
}
