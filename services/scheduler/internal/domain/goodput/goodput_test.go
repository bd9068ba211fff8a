package goodput

import (
	"math"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"

	"github.com/loom-ml/loom/services/scheduler/internal/domain/jobstore"
)

func TestJobGoodput(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(min int) time.Time { return t0.Add(time.Duration(min) * time.Minute) }
	run := func(start, end int, outcome loomv1.JobState, ckpt int) *jobstore.RunRecord {
		r := &jobstore.RunRecord{Start: at(start), Outcome: outcome}
		if end >= 0 {
			r.End = at(end)
		}
		if ckpt >= 0 {
			r.Progress.CheckpointTime = at(ckpt)
		}
		return r
	}
	saving := func(r *jobstore.RunRecord, min int) *jobstore.RunRecord {
		r.Progress.Checkpointing = time.Duration(min) * time.Minute
		return r
	}
	survivors := func(r *jobstore.RunRecord, stopped int) *jobstore.RunRecord {
		r.FailedNode, r.StopsSent = "projects/p/clusters/c/nodes/gpu-0002", at(stopped)
		return r
	}
	job := func(state loomv1.JobState, end int) *loomv1.Job {
		j := &loomv1.Job{Name: "projects/p/jobs/1", State: state, SubmitTime: timestamppb.New(t0)}
		if end >= 0 {
			j.EndTime = timestamppb.New(at(end))
		}
		return j
	}
	type want struct {
		wall, productive, recompute, restart, queueing, checkpointing int // minutes
		failures, restarts                                            int32
	}
	for _, c := range []struct {
		name string
		job  *loomv1.Job
		runs []*jobstore.RunRecord
		now  int
		want want
	}{
		{"never ran", job(loomv1.JobState_PENDING, -1), nil, 30,
			want{wall: 30, queueing: 30}},
		{"uninterrupted", job(loomv1.JobState_COMPLETED, 100),
			[]*jobstore.RunRecord{run(10, 100, loomv1.JobState_COMPLETED, -1)}, 200,
			want{wall: 100, productive: 90, queueing: 10}},
		{"running", job(loomv1.JobState_RUNNING, -1),
			[]*jobstore.RunRecord{run(5, -1, 0, -1)}, 65,
			want{wall: 65, productive: 60, queueing: 5}},
		// Fails at 60 with a checkpoint at 50: 10 min recomputed; back at 64.
		{"node failure after a checkpoint", job(loomv1.JobState_COMPLETED, 120),
			[]*jobstore.RunRecord{run(0, 60, loomv1.JobState_NODE_FAIL, 50), run(64, 120, loomv1.JobState_COMPLETED, 110)}, 130,
			want{wall: 120, productive: 50 + 56, recompute: 10, restart: 4, failures: 1, restarts: 1}},
		// No checkpoint in the failed run: all of it is lost.
		{"failure without a checkpoint", job(loomv1.JobState_COMPLETED, 50),
			[]*jobstore.RunRecord{run(0, 20, loomv1.JobState_FAILED, -1), run(25, 50, loomv1.JobState_COMPLETED, -1)}, 60,
			want{wall: 50, productive: 25, recompute: 20, restart: 5, failures: 1, restarts: 1}},
		// A checkpoint from before the run (an earlier attempt's) saves nothing of it.
		{"stale checkpoint time", job(loomv1.JobState_RUNNING, -1),
			[]*jobstore.RunRecord{run(0, 30, loomv1.JobState_NODE_FAIL, 20), run(32, 40, loomv1.JobState_REQUEUED, 10), run(45, -1, 0, -1)}, 50,
			want{wall: 50, productive: 20 + 5, recompute: 10 + 8, restart: 2 + 5, failures: 2, restarts: 2}},
		// Checkpoint on failure: the survivors saved at 33, after the
		// attempt ended at 30 and before they were stopped at 34: nothing
		// of the run is lost. A checkpoint time past the stop is not theirs.
		{"checkpoint on failure", job(loomv1.JobState_RUNNING, -1),
			[]*jobstore.RunRecord{survivors(run(0, 30, loomv1.JobState_NODE_FAIL, 33), 34), run(40, -1, 0, -1)}, 50,
			want{wall: 50, productive: 30 + 10, restart: 10, failures: 1, restarts: 1}},
		{"checkpoint on failure, time past the stop", job(loomv1.JobState_PENDING, -1),
			[]*jobstore.RunRecord{survivors(run(0, 30, loomv1.JobState_NODE_FAIL, 36), 34)}, 40,
			want{wall: 40, recompute: 30, restart: 10, failures: 1}},
		// Failed, waiting to run again: the restart runs to now.
		{"restart under way", job(loomv1.JobState_PENDING, -1),
			[]*jobstore.RunRecord{run(0, 30, loomv1.JobState_NODE_FAIL, 30)}, 40,
			want{wall: 40, productive: 30, restart: 10, failures: 1}},
		// Checkpointing: 3 saves of 2 min each in a clean run.
		{"checkpointing", job(loomv1.JobState_COMPLETED, 100),
			[]*jobstore.RunRecord{saving(run(10, 100, loomv1.JobState_COMPLETED, 90), 6)}, 100,
			want{wall: 100, productive: 84, queueing: 10, checkpointing: 6}},
		// A failed run's saves (4 min) all lie before its last checkpoint
		// (at 50): they are checkpointing, the 10 min after it recompute.
		{"checkpointing in a failed run", job(loomv1.JobState_COMPLETED, 120),
			[]*jobstore.RunRecord{saving(run(0, 60, loomv1.JobState_NODE_FAIL, 50), 4),
				saving(run(64, 120, loomv1.JobState_COMPLETED, 110), 2)}, 130,
			want{wall: 120, productive: 46 + 54, recompute: 10, restart: 4, checkpointing: 4 + 2, failures: 1, restarts: 1}},
		// A report beyond what the run kept (hostile, or a clock gone
		// wrong) is bounded by it: the parts still add up to the wall time.
		{"checkpointing beyond the run", job(loomv1.JobState_RUNNING, -1),
			[]*jobstore.RunRecord{saving(run(0, 30, loomv1.JobState_NODE_FAIL, 20), 1000), saving(run(35, -1, 0, -1), -5)}, 40,
			want{wall: 40, productive: 5, recompute: 10, restart: 5, checkpointing: 20, failures: 1, restarts: 1}},
		// Cancelled by its user: not a failure.
		{"cancelled", job(loomv1.JobState_CANCELLED, 30),
			[]*jobstore.RunRecord{run(10, 30, loomv1.JobState_CANCELLED, -1)}, 40,
			want{wall: 30, productive: 20, queueing: 10}},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := Job(c.job, c.runs, at(c.now))
			min := func(d interface{ AsDuration() time.Duration }) int { return int(d.AsDuration() / time.Minute) }
			got := want{min(g.GetWall()), min(g.GetProductive()), min(g.GetLostRecompute()), min(g.GetLostRestart()),
				min(g.GetLostQueueing()), min(g.GetLostCheckpointing()), g.GetFailures(), g.GetRestarts()}
			if got != c.want {
				t.Fatalf("got %+v\nwant %+v", got, c.want)
			}
			if w := c.want.wall; w > 0 && math.Abs(g.GetGoodput()-float64(c.want.productive)/float64(w)) > 1e-9 {
				t.Fatalf("goodput %v, want %v", g.GetGoodput(), float64(c.want.productive)/float64(w))
			}
			// Where the time went adds up to the wall time.
			if sum := got.productive + got.recompute + got.restart + got.queueing + got.checkpointing; sum != got.wall {
				t.Fatalf("productive+lost = %d min, wall %d min", sum, got.wall)
			}
		})
	}
	var total Total
	for _, f := range []jobstore.EndedGoodput{
		Figures(job(loomv1.JobState_COMPLETED, 100), []*jobstore.RunRecord{run(10, 100, loomv1.JobState_COMPLETED, -1)}, at(100)),
		Figures(job(loomv1.JobState_PENDING, -1), nil, at(100)),
		Figures(job(loomv1.JobState_COMPLETED, 100), []*jobstore.RunRecord{saving(run(0, 100, loomv1.JobState_COMPLETED, 90), 10)}, at(100)),
	} {
		total.Add(&f)
	}
	s := total.Goodput("projects/p/clusters/c")
	// A pruned job's record reads back as the job's own goodput.
	f := Figures(job(loomv1.JobState_COMPLETED, 100), []*jobstore.RunRecord{run(0, 60, loomv1.JobState_NODE_FAIL, 50),
		saving(run(64, 100, loomv1.JobState_COMPLETED, 90), 3)}, at(200))
	if g, want := FromCompact("projects/p/jobs/1", &f), Job(job(loomv1.JobState_COMPLETED, 100),
		[]*jobstore.RunRecord{run(0, 60, loomv1.JobState_NODE_FAIL, 50), saving(run(64, 100, loomv1.JobState_COMPLETED, 90), 3)}, at(200)); !proto.Equal(g, want) {
		t.Fatalf("from the compact record %v, want %v", g, want)
	}
	if s.GetJobs() != 3 || s.GetWall().AsDuration() != 300*time.Minute || s.GetLostCheckpointing().AsDuration() != 10*time.Minute ||
		math.Abs(s.GetGoodput()-(90.0+90)/300) > 1e-9 {
		t.Fatalf("cluster sum %v", s)
	}
}
