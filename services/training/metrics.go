package training

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

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

// ingest is the metrics consumer's state: the store, the log, the
// refusal and dropped-points counters and the clock.
type ingest struct {
	st      *series.Store
	log     *slog.Logger
	refused *prometheus.CounterVec
	dropped *prometheus.CounterVec
	now     func() time.Time
}

// Limits of loom_training_metrics_points_dropped_total: the job's own
// (points per series, series per job, points per job) and its project's
// budget (series.Limits.ProjectPoints).
const (
	droppedJob     = "job"
	droppedProject = "project"
)

// newIngest returns the metrics consumer's state; its refusal counter
// (loom_training_metrics_refused_total{reason}) has every reason at 0, and
// its dropped-points counter
// (loom_training_metrics_points_dropped_total{limit}) both limits.
func newIngest(st *series.Store, log *slog.Logger, now func() time.Time) *ingest {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "loom_training_metrics_refused_total",
		Help: "Metric batches (MetricsReported) refused, by reason: not-placed, too-late, swept, held-full, held-expired, rate (docs/metrics.md)."},
		[]string{"reason"})
	for _, r := range series.Reasons {
		c.WithLabelValues(r)
	}
	d := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "loom_training_metrics_points_dropped_total",
		Help: "Metric points stored records carried but the store did not keep, by the limit they were past: job (points per series, series per job, points per job) or project (-metrics-project-points) (docs/metrics.md)."},
		[]string{"limit"})
	d.WithLabelValues(droppedJob)
	d.WithLabelValues(droppedProject)
	return &ingest{st: st, log: log, refused: c, dropped: d, now: now}
}

// consume is the consumer that appends MetricsReported points to the
// store and records jobs' placements and ends (JobChanged) for the write
// rules and the retention sweep. Both are in one group so that a replay of
// the group rebuilds both together.
func (in *ingest) consume() service.Consume {
	return service.Consume{Topics: []string{topics.StepEvents, topics.JobEvents}, Group: MetricsGroup,
		Handler: in.handle,
		Config: &bus.ConsumerConfig{Filter: func(r bus.Record) bool {
			return r.Type == metricsType || r.Type == jobChangedType
		}}}
}

// handle applies one record of the metrics consumer.
func (in *ingest) handle(ctx context.Context, ev envelope.Event) error {
	switch p := ev.Payload.(type) {
	case *eventsv1.MetricsReported:
		return in.admit(ctx, ev, p)
	case *eventsv1.JobChanged:
		if err := trackJobEnd(ctx, in.st, p.GetJob(), ev.Time); err != nil {
			return err
		}
		return in.place(ctx, p)
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

// runsOf is where a job's attempts run, from its JobChanged: each of its
// runs (attempt, hostnames, end), or, when it lists none, the event's
// attempt on the job's nodes. Hostnames become node names in the job's
// cluster (the names agents sign with).
func runsOf(c *eventsv1.JobChanged) []series.Run {
	j := c.GetJob()
	names := func(hosts []string) []string {
		out := make([]string, 0, len(hosts))
		for _, h := range hosts {
			out = append(out, resname.NodeIn(j.GetCluster(), h))
		}
		return out
	}
	var runs []series.Run
	for _, r := range j.GetRuns() {
		if r.GetAttempt() > 0 && len(r.GetNodes()) > 0 {
			runs = append(runs, series.Run{Attempt: r.GetAttempt(), Nodes: names(r.GetNodes()),
				End: endOf(r.GetEndTime(), jobEnded(r.GetState()))})
		}
	}
	if len(runs) == 0 && c.GetAttempt() > 0 && len(j.GetNodes()) > 0 {
		runs = append(runs, series.Run{Attempt: c.GetAttempt(), Nodes: names(j.GetNodes()),
			End: endOf(j.GetEndTime(), jobEnded(j.GetState()))})
	}
	return runs
}

// endOf is an ended run's end time; zero while it runs or when unknown.
func endOf(t *timestamppb.Timestamp, ended bool) time.Time {
	if !ended || t == nil || !t.IsValid() {
		return time.Time{}
	}
	return t.AsTime()
}

// place records the job's placement and releases the writes held until it
// came.
func (in *ingest) place(ctx context.Context, c *eventsv1.JobChanged) error {
	job := c.GetJob().GetName()
	if _, err := resname.ParseJob(job); err != nil {
		return nil
	}
	runs := runsOf(c)
	if len(runs) == 0 {
		return nil
	}
	if err := in.st.Place(ctx, job, runs); err != nil {
		return err
	}
	return in.release(ctx, job)
}

// release applies or refuses job's held writes (series.Store.Release).
func (in *ingest) release(ctx context.Context, job string) error {
	refused, err := in.st.Release(ctx, job, in.now(), func(w series.Write) error { return in.applyHeld(ctx, w) })
	in.count(ctx, refused)
	return err
}

// count counts and logs held writes refused. Their refusal is final (they
// left the held list), so no retry would count one whose refusal could
// not be marked (refuse): it is counted unmarked, the failure logged.
func (in *ingest) count(ctx context.Context, refused []series.Refused) {
	for _, r := range refused {
		record := ""
		if ev, err := decodeHeld(r.Write); err == nil {
			record = recordID(ev)
		}
		args := []any{"held_since", r.Write.HeldAt}
		if err := in.refuse(ctx, record, r.Reason, r.Write.Job, "nodes/"+r.Write.Node, r.Write.Attempt, args...); err != nil {
			in.log.Warn("counting a held write's refusal without its mark: a redelivered copy may count again", "job", r.Write.Job, "err", err)
			_ = in.refuse(ctx, "", r.Reason, r.Write.Job, "nodes/"+r.Write.Node, r.Write.Attempt, args...)
		}
	}
}

// recordID is a record's identity for FirstRefusal: its topic, partition
// and offset, which a redelivered copy (or a held copy of it) shares.
func recordID(ev envelope.Event) string {
	return ev.Topic + "/" + strconv.Itoa(ev.Partition) + ":" + strconv.FormatInt(ev.Offset, 10)
}

// refuse counts and logs one refused batch, record (recordID; "" for one
// whose identity is not known, counted every time) once: never a silent
// drop, and never counted twice for a record delivered again (a consumer
// that failed to commit, a restart, a rebalance), which is decided again
// and may be refused again (series.Store.FirstRefusal keeps the mark in
// Redis, shared by every replica). A refusal whose mark cannot be written
// is neither counted nor logged and returns the error: the caller fails
// the record, whose redelivery refuses it again.
func (in *ingest) refuse(ctx context.Context, record, reason, job, signer string, attempt int32, args ...any) error {
	if record != "" {
		first, err := in.st.FirstRefusal(ctx, record)
		if err != nil {
			return err
		}
		if !first {
			return nil // counted and logged at its first refusal
		}
	}
	in.refused.WithLabelValues(reason).Inc()
	in.log.Warn("metrics refused", append([]any{"reason", reason, "job", job, "attempt", attempt, "signer", signer}, args...)...)
	return nil
}

// heldRecord is how a held MetricsReported is kept: its topic, partition
// and offset (its source and sequence for redelivery) and its payload.
func heldRecord(ev envelope.Event, m *eventsv1.MetricsReported) ([]byte, error) {
	b, err := proto.Marshal(m)
	if err != nil {
		return nil, err
	}
	h := ev.Topic + "\n" + strconv.Itoa(ev.Partition) + "\n" + strconv.FormatInt(ev.Offset, 10) + "\n"
	return append([]byte(h), b...), nil
}

// applyHeld stores a released write (heldRecord).
func (in *ingest) applyHeld(ctx context.Context, w series.Write) error {
	ev, err := decodeHeld(w)
	if err != nil {
		return err
	}
	return in.store(ctx, ev)
}

// decodeHeld is the record a held write keeps (heldRecord), as delivered.
func decodeHeld(w series.Write) (envelope.Event, error) {
	f := bytes.SplitN(w.Data, []byte{'\n'}, 4)
	if len(f) != 4 {
		return envelope.Event{}, fmt.Errorf("held metrics of %s: want 4 parts", w.Job)
	}
	part, err1 := strconv.Atoi(string(f[1]))
	off, err2 := strconv.ParseInt(string(f[2]), 10, 64)
	m := &eventsv1.MetricsReported{}
	if err := errors.Join(err1, err2, proto.Unmarshal(f[3], m)); err != nil {
		return envelope.Event{}, fmt.Errorf("held metrics of %s: %w", w.Job, err)
	}
	return envelope.Event{Topic: string(f[0]), Partition: part, Offset: off, Payload: m, Signer: "nodes/" + w.Node}, nil
}

// admit applies the write rules to one MetricsReported (docs/metrics.md):
// a node may write only for a run the scheduler placed on it, at most
// Limits.NodeRate batches an hour (a record counted once, however often it
// is delivered) and Limits.Late after the run's end; a write whose run's
// placement is not known yet is held (once per record); a swept job's
// series are never recreated. A service's record (no node signer: an
// unsigned bus's; a signed bus refuses a service's, envelope.Senders) is
// bound by the sweep and the age only. Every refusal is counted and logged,
// once per record (refuse).
func (in *ingest) admit(ctx context.Context, ev envelope.Event, m *eventsv1.MetricsReported) error {
	if _, err := resname.ParseJob(m.GetJob()); err != nil {
		in.log.Warn("metrics of an unnamed job dropped", "job", m.GetJob(), "err", err)
		return nil
	}
	now := in.now()
	node, isNode := strings.CutPrefix(ev.Signer, "nodes/")
	w := series.Write{Job: m.GetJob(), Attempt: m.GetAttempt()}
	if isNode {
		// Counted once per record, and held once (a redelivery before
		// the placement takes the first copy's slot): its topic,
		// partition and offset are its identity.
		src := series.RecordSource(ev.Topic, ev.Partition, ev.Offset, ev.HighWaterMark)
		w.ID = src.String()
		over, err := in.st.CountNodeWrite(ctx, node, src, now)
		if err != nil {
			return err
		}
		if over {
			return in.refuse(ctx, recordID(ev), series.ReasonRate, m.GetJob(), ev.Signer, m.GetAttempt(), "limit", in.st.Limits().NodeRate)
		}
		if w.Data, err = heldRecord(ev, m); err != nil {
			return err
		}
		w.Node = node
	}
	v, err := in.st.Admit(ctx, w, now)
	if err != nil {
		return err
	}
	switch {
	case v.Reason != "":
		return in.refuse(ctx, recordID(ev), v.Reason, m.GetJob(), ev.Signer, m.GetAttempt())
	case v.Held:
		// The placement may have come between the check and the hold.
		return in.release(ctx, m.GetJob())
	}
	return in.store(ctx, ev)
}

// sweepMetrics deletes, at each tick, the series of at most SweepBatch jobs
// that ended longer than retention ago (0: none), and refuses the held
// writes whose placement did not come within Limits.HoldFor. A failed
// sweep is logged and retried at the next tick: the sweep is idempotent.
func (in *ingest) sweepMetrics(ctx context.Context, tick <-chan time.Time, retention time.Duration) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick:
			now := in.now()
			refused, err := in.st.SweepHeld(ctx, now, SweepBatch, func(w series.Write) error { return in.applyHeld(ctx, w) })
			in.count(ctx, refused)
			if err != nil && ctx.Err() == nil {
				in.log.Warn("held metrics sweep", "err", err)
			}
			if retention <= 0 {
				continue
			}
			n, err := in.st.Sweep(ctx, now, retention, SweepBatch)
			if err != nil && ctx.Err() == nil {
				in.log.Warn("metric series retention sweep", "err", err, "deleted", n)
			} else if n > 0 {
				in.log.Info("metric series past their retention deleted", "jobs", n)
			}
		}
	}
}

// countDropped counts and logs the points an append dropped, by limit.
func (in *ingest) countDropped(job string, r series.Result, lim series.Limits) {
	if r.OverBudget > 0 {
		in.dropped.WithLabelValues(droppedProject).Add(float64(r.OverBudget))
		in.log.Warn("metric points dropped: the project keeps its whole metrics budget; ended jobs' series free it after -metrics-retention, or raise -metrics-project-points",
			"job", job, "points", r.OverBudget, "budget", lim.ProjectPoints)
	}
	if n := r.Dropped - r.OverBudget; n > 0 {
		in.dropped.WithLabelValues(droppedJob).Add(float64(n))
		in.log.Warn("metric points dropped past the job's limits", "job", job, "points", n)
	}
}

// store appends one admitted MetricsReported's points. A record is applied
// once: its topic partition and offset are the store's source and
// sequence, so a redelivered record adds nothing. Values the store cannot
// keep (a name outside the grammar, NaN) are dropped one by one, logged,
// never failing the record; the rest goes in batches within the store's
// limits.
func (in *ingest) store(ctx context.Context, ev envelope.Event) error {
	m, ok := ev.Payload.(*eventsv1.MetricsReported)
	if !ok {
		return nil
	}
	st, log := in.st, in.log
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
		// What was dropped is counted even when the project's count failed
		// after the append (err with r): the retry is a duplicate, which
		// drops nothing.
		in.countDropped(m.GetJob(), r, lim)
		if err != nil {
			return err
		}
		if r.Swept {
			// Swept between the admission and this append (the sweep's
			// marker stands): refused, once per record.
			if chunk == 0 {
				if err := in.refuse(ctx, recordID(ev), series.ReasonSwept, m.GetJob(), ev.Signer, m.GetAttempt()); err != nil {
					return err
				}
			}
			b, n = series.Batch{}, 0
			chunk++
			return nil
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
