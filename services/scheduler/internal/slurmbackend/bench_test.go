package slurmbackend

import (
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/loom-ml/loom/libs/slurmrest"
	"github.com/loom-ml/loom/services/scheduler/internal/domain/views"
)

// benchJobs is n active records, each in Slurm, and Slurm's list of them
// (every job RUNNING on a node): a poll's input at n jobs.
func benchJobs(n int) (*Backend, []*record, []slurmrest.Job) {
	b := &Backend{now: time.Now, log: slog.New(slog.NewTextHandler(io.Discard, nil)), jobs: map[string]*record{},
		refused: map[string]bool{"root": true, "slurm": true}}
	active := make([]*record, n)
	list := make([]slurmrest.Job, n)
	for i := range n {
		j := job(fmt.Sprint(i + 1))
		id := fmt.Sprint(1000 + i)
		r := &record{job: j, slurmID: id, tried: true}
		r.job.Placement = slurmID(id)
		active[i] = r
		b.jobs[j.Name] = r
		list[i] = slurmrest.Job{JobID: int64(1000 + i), State: "RUNNING", Nodes: fmt.Sprintf("node%d", i%64),
			BatchHost: fmt.Sprintf("node%d", i%64), StartTime: 1700000000, Comment: CommentPrefix + j.Name, UserName: "ana"}
	}
	return b, active, list
}

// BenchmarkMapPoll is the poll's work without its calls at 10,000 active
// jobs, all in Slurm's list: sorting the records, indexing the list and
// bringing each job to Slurm's state (docs/slurm-backend.md, "Poll").
// "unchanged" is a steady poll (every record already as Slurm reports
// it: nothing to clone or write), "changed" one where every job changed
// (each record cloned and brought to Slurm's state).
func BenchmarkMapPoll(b *testing.B) {
	for _, steady := range []bool{true, false} {
		name := "changed"
		if steady {
			name = "unchanged"
		}
		b.Run(name, func(b *testing.B) {
			be, active, list := benchJobs(10_000)
			if steady {
				for i, r := range active {
					observe(r.job, list[i], true)
				}
			}
			b.ReportAllocs()
			for b.Loop() {
				steps := be.mapPoll(active, list)
				if len(steps) != len(active) {
					b.Fatalf("%d steps", len(steps))
				}
				if (steps[0].next == nil) != steady {
					b.Fatalf("steady %v: first step's next %v", steady, steps[0].next)
				}
			}
		})
	}
}

// BenchmarkListJobsPage is one ListJobs page (squeue's first 100) over
// 10,000 jobs of one project: the read sorts the project's jobs at each
// call (source.ProjectJobs).
func BenchmarkListJobsPage(b *testing.B) {
	be, _, _ := benchJobs(10_000)
	b.ReportAllocs()
	for b.Loop() {
		if js, _ := be.ListJobs(views.JobFilter{Project: "projects/p"}, "", 100); len(js) != 100 {
			b.Fatalf("%d jobs", len(js))
		}
	}
}
