// Package goodput computes how much of a job's (or a cluster's jobs') wall
// time was productive training, and where the rest went: queueing before
// the first run, recomputation of what failed runs did after their last
// checkpoint, restarts (from a failure to the next run's start), and the
// time spent writing checkpoints. It is a pure function of the job and its
// runs (their starts, ends, outcomes, and the checkpoint times and
// checkpointing durations their steps reported in StepProgress); it imports
// nothing of the domain.
package goodput

import (
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"

	"github.com/loom-ml/loom/services/scheduler/internal/domain/jobstore"
)

// Failed reports whether a run's end lost work: it ended (or was requeued)
// in any state but COMPLETED or CANCELLED (a user's cancel is not a failure).
func Failed(r *jobstore.RunRecord) bool {
	if !r.Ended() {
		return false
	}
	switch r.Outcome {
	case loomv1.JobState_COMPLETED, loomv1.JobState_CANCELLED:
		return false
	}
	return true
}

// Job returns the goodput of job, whose runs are given in attempt order
// (nil entries are skipped), as of now:
//
//   - wall: from submission to the job's end (now while it is not over);
//   - queueing: from submission to the first run's start (all of wall
//     while it never ran);
//   - a failed run's time after its last checkpoint (its start when it
//     wrote none) is lost to recomputation; the rest of it, and the whole
//     of every other run, is kept;
//   - checkpointing: of each run's kept time, what its program reported
//     spending on writing checkpoints (bounded by the kept time; a failed
//     run's saves all end by its last checkpoint, so they lie in the kept
//     part);
//   - productive: the kept time less checkpointing;
//   - restart: from a failed run's end to the next run's start (to now, or
//     to the job's end, when none followed);
//   - failures count the failed runs, restarts the runs after the first.
//
// productive and every lost part add up to wall, and goodput is
// productive / wall (0 for no wall time).
func Job(job *loomv1.Job, runs []*jobstore.RunRecord, now time.Time) *loomv1.Goodput {
	return message(job.GetName(), Figures(job, runs, now), 1)
}

// Figures is Job's computation as plain durations and counts (what a
// pruned job's compact record keeps, and what Total adds up without a
// message per job).
func Figures(job *loomv1.Job, runs []*jobstore.RunRecord, now time.Time) jobstore.EndedGoodput {
	submit := job.GetSubmitTime().AsTime()
	// Wall clock readings only: a time.Time of this process still carries
	// its monotonic reading, and a difference of two such differs (by a few
	// ns) from the same difference read from the job's stored timestamps,
	// so the parts would not add up to wall exactly.
	end := now.Round(0)
	if job.GetState().Terminal() && job.GetEndTime() != nil {
		end = job.GetEndTime().AsTime()
	}
	if job.GetSubmitTime() == nil || end.Before(submit) {
		submit = end
	}
	var productive, recompute, restart, queueing, checkpointing time.Duration
	var failures, restarts int32
	var rs []*jobstore.RunRecord
	for _, r := range runs {
		if r != nil && !r.Start.IsZero() {
			rs = append(rs, r)
		}
	}
	if len(rs) == 0 {
		queueing = end.Sub(submit)
	} else {
		queueing = clip(rs[0].Start.Round(0).Sub(submit))
		restarts = int32(len(rs) - 1)
	}
	for i, r := range rs {
		start, rEnd := r.Start.Round(0), end
		if r.Ended() {
			rEnd = r.End.Round(0)
		}
		d := clip(rEnd.Sub(start))
		kept := d
		failed := Failed(r)
		if failed {
			switch ck := r.Progress.CheckpointTime.Round(0); {
			case !ck.IsZero() && !ck.Before(start) && !ck.After(rEnd):
				kept = ck.Sub(start)
			case !ck.IsZero() && ck.After(rEnd) && r.FailedNode != "" && !r.StopsSent.IsZero() && !ck.After(r.StopsSent.Round(0)):
				// Checkpoint on failure: the survivors of the failed node
				// saved after the attempt ended, before they were stopped:
				// the whole run is kept (their training past its end is
				// counted as no part of it).
			default:
				kept = 0
			}
			recompute += d - kept
		}
		ckpt := min(clip(r.Progress.Checkpointing), kept)
		checkpointing += ckpt
		productive += kept - ckpt
		if !failed {
			continue
		}
		failures++
		next := end
		if i+1 < len(rs) {
			next = rs[i+1].Start.Round(0)
		}
		restart += clip(next.Sub(rEnd))
	}
	return jobstore.EndedGoodput{Wall: clip(end.Sub(submit)), Productive: productive, Recompute: recompute, Restart: restart,
		Queueing: queueing, Checkpointing: checkpointing, Failures: failures, Restarts: restarts}
}

// Total adds up jobs' figures (a cluster's goodput) without a message per
// job. The zero Total is empty.
type Total struct {
	f    jobstore.EndedGoodput
	jobs int32
}

// Add counts one job's figures.
func (t *Total) Add(f *jobstore.EndedGoodput) {
	t.f.Wall += f.Wall
	t.f.Productive += f.Productive
	t.f.Recompute += f.Recompute
	t.f.Restart += f.Restart
	t.f.Queueing += f.Queueing
	t.f.Checkpointing += f.Checkpointing
	t.f.Failures += f.Failures
	t.f.Restarts += f.Restarts
	t.jobs++
}

// AddTotal counts every job of o.
func (t *Total) AddTotal(o *Total) {
	t.Add(&o.f)
	t.jobs += o.jobs - 1
}

// Goodput returns the total named name: every duration and count summed,
// goodput the sum's productive over its wall (jobs weigh by their wall
// time).
func (t *Total) Goodput(name string) *loomv1.Goodput { return message(name, t.f, t.jobs) }

func clip(d time.Duration) time.Duration { return max(d, 0) }

// FromCompact returns the goodput of the job named name from its compact
// record e: the figures it had when it was pruned, which are final since
// the job had ended.
func FromCompact(name string, e *jobstore.EndedGoodput) *loomv1.Goodput { return message(name, *e, 1) }

func message(name string, f jobstore.EndedGoodput, jobs int32) *loomv1.Goodput {
	g := &loomv1.Goodput{Name: name, Wall: durationpb.New(f.Wall), Productive: durationpb.New(f.Productive),
		LostRecompute: durationpb.New(f.Recompute), LostRestart: durationpb.New(f.Restart),
		LostQueueing: durationpb.New(f.Queueing), LostCheckpointing: durationpb.New(f.Checkpointing),
		Failures: f.Failures, Restarts: f.Restarts, Jobs: jobs}
	if f.Wall > 0 {
		g.Goodput = float64(f.Productive) / float64(f.Wall)
	}
	return g
}
