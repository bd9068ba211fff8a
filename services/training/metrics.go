package training

import (
	"context"
	"log/slog"
	"maps"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/loom-ml/loom/libs/bus"
	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/resname"
	"github.com/loom-ml/loom/libs/series"
	"github.com/loom-ml/loom/libs/service"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// MetricsGroup is the consumer group that stores every job's reported
// metrics (MetricsReported: hypertune lines and TensorBoard scalars the
// agents read) as series (docs/metrics.md). It is a group of its own, so
// that storing series neither waits on nor holds up the training state's
// consumer, and covers plain Slurm jobs as well as CustomJobs and trials.
const MetricsGroup = "loom-training-metrics"

// SweepBatch is the most jobs whose series one tick's sweep deletes, so
// that a backlog (a retention just shortened) is worked off a batch a
// tick without holding Redis for long.
const SweepBatch = 100

// jobChangedType is the job event the metrics consumer reads: a job's end
// starts its series' retention, a run again stops it.
var jobChangedType = envelope.TypeOf(&eventsv1.JobChanged{})

// metricsConsume is the consumer that appends MetricsReported points to st
// and records jobs' ends (JobChanged) for the retention sweep. Both are in
// one group so that a replay of the group rebuilds both together.
func metricsConsume(st *series.Store, log *slog.Logger) service.Consume {
	return service.Consume{Topics: []string{topics.StepEvents, topics.JobEvents}, Group: MetricsGroup,
		Handler: func(ctx context.Context, ev envelope.Event) error { return handleMetrics(ctx, st, log, ev) },
		Config: &bus.ConsumerConfig{Filter: func(r bus.Record) bool {
			return r.Type == metricsType || r.Type == jobChangedType
		}}}
}

// handleMetrics applies one record of the metrics consumer.
func handleMetrics(ctx context.Context, st *series.Store, log *slog.Logger, ev envelope.Event) error {
	switch p := ev.Payload.(type) {
	case *eventsv1.MetricsReported:
		return storeMetrics(ctx, st, log, ev)
	case *eventsv1.JobChanged:
		return trackJobEnd(ctx, st, p.GetJob(), ev.Time)
	}
	return nil
}

// jobEnded reports whether a job in state s has ended for good: PREEMPTED
// and REQUEUED jobs run again.
func jobEnded(s loomv1.JobState) bool {
	switch s {
	case loomv1.JobState_COMPLETED, loomv1.JobState_FAILED, loomv1.JobState_CANCELLED,
		loomv1.JobState_TIMEOUT, loomv1.JobState_NODE_FAIL, loomv1.JobState_OUT_OF_MEMORY:
		return true
	}
	return false
}

// trackJobEnd records job's end time (its end_time, else the event's) once
// it ended, and forgets it while it runs (a requeued job), so its series
// are deleted only a retention after its last end. Idempotent.
func trackJobEnd(ctx context.Context, st *series.Store, job *loomv1.Job, at time.Time) error {
	if _, err := resname.ParseJob(job.GetName()); err != nil {
		return nil
	}
	if !jobEnded(job.GetState()) {
		return st.Running(ctx, job.GetName())
	}
	if t := job.GetEndTime(); t != nil && t.IsValid() && !t.AsTime().IsZero() {
		at = t.AsTime()
	}
	return st.Ended(ctx, job.GetName(), at)
}

// sweepMetrics deletes, at each tick, the series of at most SweepBatch jobs
// that ended longer than retention ago (0: never called). A failed sweep
// is logged and retried at the next tick: the sweep is idempotent.
func sweepMetrics(ctx context.Context, st *series.Store, log *slog.Logger, now func() time.Time,
	tick <-chan time.Time, retention time.Duration) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick:
			n, err := st.Sweep(ctx, now(), retention, SweepBatch)
			if err != nil && ctx.Err() == nil {
				log.Warn("metric series retention sweep", "err", err, "deleted", n)
			} else if n > 0 {
				log.Info("metric series past their retention deleted", "jobs", n)
			}
		}
	}
}

// storeMetrics appends one MetricsReported's points. A record is applied
// once: its topic partition and offset are the store's source and
// sequence, so a redelivered record adds nothing. Values the store cannot
// keep (a name outside the grammar, NaN) are dropped one by one, logged,
// never failing the record; the rest goes in batches within the store's
// limits.
func storeMetrics(ctx context.Context, st *series.Store, log *slog.Logger, ev envelope.Event) error {
	m, ok := ev.Payload.(*eventsv1.MetricsReported)
	if !ok {
		return nil
	}
	if _, err := resname.ParseJob(m.GetJob()); err != nil {
		log.Warn("metrics of an unnamed job dropped", "job", m.GetJob(), "err", err)
		return nil
	}
	lim := st.Limits()
	src := ev.Topic + "/" + strconv.Itoa(ev.Partition)
	b := series.Batch{}
	n, chunk, dropped := 0, 0, 0
	flush := func() error {
		if n == 0 {
			return nil
		}
		name := src
		if chunk > 0 {
			name += "#" + strconv.Itoa(chunk)
		}
		r, err := st.Append(ctx, m.GetJob(), series.Source{Name: name, Seq: ev.Offset}, b)
		if err != nil {
			return err
		}
		if r.Dropped > 0 {
			log.Warn("metric points past the store's limits dropped", "job", m.GetJob(), "points", r.Dropped)
		}
		b, n = series.Batch{}, 0
		chunk++
		return nil
	}
	for _, p := range m.GetPoints() {
		// In name order, so that a redelivered record is cut into the
		// same batches as the first delivery.
		vals := p.GetValues()
		for _, name := range slices.Sorted(maps.Keys(vals)) {
			v := vals[name]
			if math.IsNaN(v) || series.ValidName("metric", name, lim.Name) != nil {
				dropped++
				continue
			}
			if _, ok := b[name]; !ok && len(b) >= lim.BatchMetrics || n >= lim.BatchPoints {
				if err := flush(); err != nil {
					return err
				}
			}
			pt := series.Point{Step: p.GetStep(), Value: v}
			if p.GetTime() != nil {
				pt.Time = p.GetTime().AsTime()
			}
			b[name] = append(b[name], pt)
			n++
		}
	}
	if dropped > 0 {
		log.Warn("metric values the store cannot keep dropped (name or NaN)", "job", m.GetJob(), "values", dropped)
	}
	return flush()
}
