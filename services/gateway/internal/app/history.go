package app

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/paging"
	"github.com/loom-ml/loom/libs/resname"
	"github.com/loom-ml/loom/libs/store"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/gateway/internal/adapters"
	"github.com/loom-ml/loom/services/gateway/internal/domain"
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
// state, not a run's end a requeue follows) in the history, which serves GetJob and ListJobs (sacct) once the
// scheduler has pruned the job. The scheduler sends a final state with the
// job's runs; an event without them (from an older scheduler) has the job
// read from the scheduler for its runs, and when the scheduler no longer has
// it (this consumer lagged past its retention), the event's job is kept.
// The event id is the inbox id: a redelivered event writes nothing twice.
func (g *Gateway) HandleHistoryEvent(ctx context.Context, ev envelope.Event) error {
	jc, ok := ev.Payload.(*eventsv1.JobChanged)
	if !ok || jc.GetJob().GetName() == "" || !jc.GetJob().GetState().Terminal() || jc.GetRequeueFollows() {
		// Not an end, or a run's end the scheduler requeues in the same
		// change (requeue_follows): the job goes on.
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
//
// It reads each project's indexes in job id order up to the newest id a
// job old enough to drop can have: the job id counter as an earlier sweep
// sampled it at or after the window's start (every job accepted before
// that sample has an id at most its value, and a job ends after it is
// accepted). So a sweep reads the records near the window's start and the
// few older ones still kept (jobs that ran long), not the whole window;
// with no such sample yet (the first window of a store) it reads all.
func (g *Gateway) SweepHistory(ctx context.Context) (int, error) {
	now := g.now()
	cutoff := now.Add(-g.opt.JobHistory)
	upto := ""
	if v, ok, err := g.repo.JobIDAt(ctx, cutoff); err != nil {
		return 0, err
	} else if ok {
		upto = fmt.Sprintf("%020d\xff", v) // after every key of id v (paging.JobKey)
	}
	if err := g.repo.EnsureJobProjects(ctx); err != nil {
		return 0, err
	}
	projects, err := g.repo.JobProjects(ctx)
	if err != nil {
		return 0, err
	}
	dropped := 0
	for _, p := range projects {
		for _, history := range []bool{true, false} {
			n, err := g.sweepIndex(ctx, p, history, cutoff, upto)
			dropped += n
			if err != nil {
				return dropped, err
			}
		}
	}
	// After the walk: this sample, taken at now, bounds the sweeps of one
	// window from now (a sample of this sweep's own would bound this one
	// by the newest id).
	if err := g.repo.SampleJobID(ctx, now, g.opt.JobHistory+24*time.Hour); err != nil {
		return dropped, err
	}
	if _, err := g.repo.ExpireRequests(ctx); err != nil {
		return dropped, err
	}
	return dropped, nil
}

// sweepIndex drops the records of project's history index (history) or
// accepted index older than cutoff, reading the index in order up to upto
// ("": its end), sweepBatch entries a time, and the entries whose record is
// gone or does not decode (with such a record). It returns how many
// records it dropped of those that decoded.
func (g *Gateway) sweepIndex(ctx context.Context, project string, history bool, cutoff time.Time, upto string) (int, error) {
	hash, steps, index := adapters.KeyJobs, "", adapters.KeyJobIndexPrefix+project
	if history {
		hash, steps, index = adapters.KeyHistory, adapters.KeyHistorySteps, adapters.KeyHistoryIndexPrefix+project
	}
	dropped := 0
	for after := ""; ; {
		entries, err := g.repo.IndexedRange(ctx, project, history, after, upto, sweepBatch)
		if err != nil || len(entries) == 0 {
			return dropped, err
		}
		tx := &store.Tx{}
		n := 0
		for _, e := range entries {
			name := adapters.IndexedName(e.Key)
			j := e.Job
			if j == nil {
				// An entry whose record is gone, or does not decode: the
				// entry goes, and a damaged record (no list can show it)
				// with it, said in the log; nothing else of the job's.
				if e.Damaged {
					g.opt.Log.Warn("job history sweep: a record that does not decode dropped", "key", hash, "job", name)
					tx.IfHField(hash, name, e.Raw)
					tx.HDel(hash, name)
				}
				tx.ZRem(index, e.Key)
				continue
			}
			var old bool
			if history {
				end := j.GetEndTime()
				old = end == nil || end.AsTime().Before(cutoff)
			} else {
				st := j.GetSubmitTime()
				old = st != nil && st.AsTime().Before(cutoff)
			}
			if !old {
				continue
			}
			if live, err := g.arrayLive(ctx, project, j); err != nil || live {
				// An array's record (its first task's) stands for the
				// array while any task of it is pending or running (Slurm
				// keeps an array's record while any task is left): scancel
				// and scontrol of "A" read it. Kept to the next sweep; the
				// scheduler unreachable, the same.
				if err != nil {
					g.opt.Log.Warn("job history sweep: array kept, its tasks unknown", "job", name, "err", err)
				}
				continue
			}
			// Only as read: a record written again since (a job that ran
			// and ended again) is judged at the next sweep.
			tx.IfHField(hash, name, e.Raw)
			tx.HDel(hash, name)
			if history {
				// The job's steps, and its accepted record: an ended job
				// left the accepted index (PutHistory), and its record goes
				// with its history.
				tx.HDel(steps, name)
				tx.HDel(adapters.KeyJobs, name)
			}
			tx.ZRem(index, e.Key)
			n++
		}
		if !tx.Empty() {
			if g.beforeSweepWrite != nil {
				g.beforeSweepWrite()
			}
			_, err := g.repo.Apply(ctx, "", tx)
			switch {
			case errors.Is(err, store.ErrConflict):
				// A record of the batch changed since it was read: the
				// batch is left to the next sweep, which reads it anew.
			case err != nil:
				return dropped, fmt.Errorf("sweep %s: %w", hash, err)
			default:
				dropped += n
			}
		}
		if len(entries) < sweepBatch {
			return dropped, nil
		}
		after = entries[len(entries)-1].Key
	}
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

// arrayLive reports whether j is an array's record (as accepted, or its
// first task's) whose array the scheduler still lists a pending or running
// task of (the first task included). A record that is not an array's of
// more than one task is never live. Each call to the scheduler has
// arrayLiveTimeout (the sweep's context has no deadline: a scheduler that
// never answers must not stop the sweep), and the walk stops at the
// array's last task id: its tasks' ids are A..A+count-1, so pages past it
// (a project's active jobs after A) hold none.
func (g *Gateway) arrayLive(ctx context.Context, project string, j *loomv1.Job) (bool, error) {
	id := j.GetJobId()
	n := domain.ArrayTaskCount(j.GetArray())
	first, err := strconv.ParseInt(id, 10, 64)
	if j.GetArray() == "" || (j.GetArrayJobId() != "" && j.GetArrayJobId() != id) || n < 2 || err != nil {
		return false, nil
	}
	last := fmt.Sprintf("%020d\xff", first+int64(n)-1) // after every key of the last task (paging.JobKey)
	live := false
	err = paging.Each(func(token string) (string, error) {
		cctx, cancel := context.WithTimeout(ctx, arrayLiveTimeout)
		defer cancel()
		resp, err := g.own.Jobs.ListJobs(cctx, &loomv1.ListJobsRequest{Parent: resname.Project{ID: project}.String(),
			JobIds: []string{id}, ActiveOnly: true, PageSize: 1, PageToken: token})
		if err != nil {
			return "", fmt.Errorf("ask the scheduler for the tasks of array %s: %w", id, err)
		}
		if live = len(resp.GetJobs()) > 0; live {
			return "", nil
		}
		// A page may come back empty with a token (the scheduler's scan
		// bound): go on, but not past the last task.
		next := resp.GetNextPageToken()
		if key, err := paging.TokenKey(next); next == "" || err != nil || key >= last {
			return "", nil
		}
		return next, nil
	})
	return live, err
}

// arrayLiveTimeout bounds one question of the sweep to the scheduler.
const arrayLiveTimeout = 10 * time.Second
