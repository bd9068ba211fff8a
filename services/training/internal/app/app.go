// Package app runs the training service's domain: it applies consumed
// events and clock ticks to the state, stores each change with its outbox
// and inbox in one store.Apply, and answers reads from memory.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/resname"
	"github.com/loom-ml/loom/libs/series"
	"github.com/loom-ml/loom/libs/store"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
	"github.com/loom-ml/loom/services/training/internal/adapters"
	"github.com/loom-ml/loom/services/training/internal/domain"
)

// App is the training service's state in memory, kept in step with Redis.
// Handle and Tick are serialised by the app's own lock; reads are safe
// concurrently with them.
type App struct {
	repo *adapters.Repo
	log  *slog.Logger
	now  func() time.Time
	drv  *store.Driver

	// write serialises decisions (Handle, Tick); mu guards state.
	write sync.Mutex
	mu    sync.RWMutex
	state *domain.State
	// grace is the domain's MetricGrace, set on every state loaded.
	grace time.Duration
	// tuningWrites counts the trials' metric records each node sends an
	// hour (LimitTuningWrites); nil: not counted. tuningRefused counts
	// the trials' metric records not merged into their measurements, by
	// reason: "rate" (those refused for it) and domain.DropReasons.
	tuningWrites  NodeWrites
	tuningRefused *prometheus.CounterVec
	// logDirs makes an owner's log directory before their create is
	// decided (UseLogDirs); nil: the service keeps none.
	logDirs LogDirMaker
}

// LogDirMaker makes the directory a user's CustomJobs of a project write
// their output to (adapters.LogDirs.Make), for the user, and returns it, or
// why it cannot. MakeAgain makes such a directory, as Make returned it,
// again if it is gone (adapters.LogDirs.MakeAgain).
type LogDirMaker interface {
	Make(project, user string) (string, error)
	MakeAgain(dir, user string) error
}

// UseLogDirs has the output of CustomJobs (and trials) that would go with
// their ephemeral cluster go to the owner's directory m makes instead
// (domain.LogDir). It is made here, at the service's edge, when the
// create is handled, before any of its jobs can be submitted; where it
// cannot be, the create is decided with the reason, and the CustomJob says
// that its output goes with its cluster. Call it before Handle.
func (a *App) UseLogDirs(m LogDirMaker) { a.logDirs = m }

// reasonRate is loom_training_trial_metrics_refused_total's reason for
// a record over its node's hourly rate (LimitTuningWrites).
const reasonRate = "rate"

// NodeWrites counts one node's writes in an hour, each record (src:
// series.RecordSource) once, and says whether the node is over its limit
// (series.Store.CountNodeWrite, in Redis: every replica shares the count).
type NodeWrites interface {
	CountNodeWrite(ctx context.Context, node string, src series.Source, now time.Time) (bool, error)
}

// LimitTuningWrites bounds the metric records (MetricsReported) one node
// may have merged into trials' measurements an hour: w counts each such
// record of a node (of a job that is a trial's) in its own key, apart from
// the series' count, and one over the limit is refused (logged, counted in
// loom_training_trial_metrics_refused_total{reason="rate"}), never merged.
// The series path (metrics.go) bounds the same records as series; this
// bounds the trials' state, which one writer updates record by record.
// Call it before Handle.
func (a *App) LimitTuningWrites(w NodeWrites) { a.tuningWrites = w }

// New loads the stored state through repo. now is the clock (time.Now when
// nil); grace is how long a trial whose job succeeded waits for its
// metric (domain.State.MetricGrace; 0: domain.DefaultMetricGrace).
func New(ctx context.Context, repo *adapters.Repo, log *slog.Logger, now func() time.Time, grace time.Duration) (*App, error) {
	if now == nil {
		now = time.Now
	}
	st, err := repo.Load(ctx)
	if err != nil {
		return nil, fmt.Errorf("training: %w", err)
	}
	st.MetricGrace = grace
	refused := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "loom_training_trial_metrics_refused_total",
		Help: "Metric records (MetricsReported) of trials not merged into their measurements, by reason: rate (their node sent more than -metrics-node-rate an hour to trials), held-full, not-run, job-ended, evicted (held until their run was named), not-placed (the node does not run the run named), other-cluster (the node is not of the job's cluster); docs/metrics.md."},
		[]string{"reason"})
	for _, r := range append([]string{reasonRate}, domain.DropReasons...) {
		refused.WithLabelValues(r)
	}
	a := &App{repo: repo, log: log, now: now, state: st, grace: grace, tuningRefused: refused}
	a.drv = store.NewDriver(repo.Store(), a.reload)
	return a, nil
}

func (a *App) reload(ctx context.Context) error {
	st, err := a.repo.Load(ctx)
	if err != nil {
		return err
	}
	st.MetricGrace = a.grace
	a.mu.Lock()
	a.state = st
	a.mu.Unlock()
	a.log.Info("state reloaded", "roots", len(st.Roots))
	return nil
}

// Handle applies one consumed event: the change it decides is stored with
// its emitted commands and events and the event's inbox mark in one Apply,
// and only then applied to memory. A command the domain refuses (unknown
// name, another user's cancel, a running job's delete) is logged and
// dropped: commands are asynchronous, nobody waits on an answer.
func (a *App) Handle(ctx context.Context, ev envelope.Event) error {
	a.write.Lock()
	defer a.write.Unlock()
	if err := a.drv.Ready(ctx); err != nil {
		return err
	}
	if done, err := a.settledByTuningRate(ctx, ev); err != nil || done {
		return err
	}
	in := domain.Input{Payload: ev.Payload, Principal: ev.Principal, Signer: ev.Signer}
	if name, project, user, ok := domain.CreateOwner(ev.Payload); ok && a.logDirs != nil {
		// A copy of a create already applied decides nothing: making the
		// directory again changes nothing either.
		dir, err := a.logDirs.Make(project, user)
		in.LogDir = domain.LogDir{Dir: dir}
		if err != nil {
			// The detail (paths, uid, errno) is the operator's: here, under
			// the job's name. The CustomJob only says the output is not
			// kept, and what its owner can do (output_warning).
			in.LogDir = domain.LogDir{Why: err.Error()}
			a.log.Warn("log directory not made: the output of this create's jobs goes with their clusters",
				"name", name, "type", ev.Type, "id", ev.ID, "project", project, "user", user, "err", err)
		}
	}
	a.mu.RLock()
	c, err := a.state.Handle(a.now().UTC(), in)
	a.mu.RUnlock()
	if err != nil {
		if errors.Is(err, domain.ErrIgnored) {
			logRefused := func() {
				a.log.Warn("event refused", "type", ev.Type, "id", ev.ID, "principal", ev.Principal, "reason", err)
			}
			if r, ok := domain.DroppedBy(err); ok {
				return a.refuseRecord(ctx, ev, r, logRefused)
			}
			logRefused()
			return nil
		}
		return err
	}
	if c == nil {
		return nil
	}
	return a.apply(ctx, ev.ID, c)
}

// refuseRecord counts a trial's metric record refused for reason, and
// calls logIt, once per record: the refusal is stored as the record's
// inbox mark (an Apply of nothing else), and counted when that Apply is
// applied, as a change's drops are (apply). A redelivered record (a
// consumer that failed to commit, a restart) is refused again, but finds
// its mark: neither counted nor logged twice.
func (a *App) refuseRecord(ctx context.Context, ev envelope.Event, reason string, logIt func()) error {
	if _, err := a.drv.Apply(ctx, ev.ID, &store.Tx{}, func() {
		a.tuningRefused.WithLabelValues(reason).Inc()
		logIt()
	}); err != nil {
		return fmt.Errorf("refuse %s: %w", ev.ID, err)
	}
	return nil
}

// settledByTuningRate counts ev when it is a node's metric record for a
// trial's job (LimitTuningWrites) and reports whether ev is settled, so
// that Handle goes no further: its node is over its hourly limit (the
// refusal is then counted and logged once, refuseRecord), or it was
// handled before (its inbox mark is there: merged or refused; a
// redelivery counts nothing again, against the rate either).
func (a *App) settledByTuningRate(ctx context.Context, ev envelope.Event) (bool, error) {
	m, ok := ev.Payload.(*eventsv1.MetricsReported)
	if !ok || a.tuningWrites == nil {
		return false, nil
	}
	node, isNode := strings.CutPrefix(ev.Signer, "nodes/")
	if !isNode {
		return false, nil
	}
	a.mu.RLock()
	r := a.state.Lookup("job:" + m.GetJob())
	trial := r != nil && r.Tuning != nil
	a.mu.RUnlock()
	if !trial {
		return false, nil
	}
	if ev.ID != "" {
		seen, err := a.drv.Store().Seen(ctx, ev.ID)
		if err != nil || seen {
			return seen, err
		}
	}
	// Counted by the record's identity, not only after the inbox check:
	// a record counted whose handling then stored no inbox mark (an
	// Apply that failed or crashed, a record that changed nothing) comes
	// again and must not count again.
	over, err := a.tuningWrites.CountNodeWrite(ctx, node, series.RecordSource(ev.Topic, ev.Partition, ev.Offset, ev.HighWaterMark), a.now())
	if err != nil || !over {
		return false, err
	}
	return true, a.refuseRecord(ctx, ev, reasonRate, func() {
		a.log.Warn("trial metrics refused", "reason", reasonRate, "job", m.GetJob(), "signer", ev.Signer, "id", ev.ID)
	})
}

func (a *App) apply(ctx context.Context, inboxID string, c *domain.Change) error {
	a.makeLogDirsAgain(c)
	tx, err := a.repo.Tx(c)
	if err != nil {
		return fmt.Errorf("store %s: %w", c.Root, err)
	}
	if _, err := a.drv.Apply(ctx, inboxID, tx, func() {
		a.mu.Lock()
		a.state.Apply(c)
		a.mu.Unlock()
		// Counted once stored: a redelivery applies nothing.
		for r, n := range c.Dropped {
			a.tuningRefused.WithLabelValues(r).Add(float64(n))
			a.log.Warn("trial metrics dropped", "reason", r, "records", n, "root", c.Root, "id", inboxID)
		}
	}); err != nil {
		return fmt.Errorf("store %s: %w", c.Root, err)
	}
	return nil
}

// makeLogDirsAgain makes again, before c is stored (and so before its
// SubmitJobs are published), the owner's log directory of each job c
// submits whose output goes there (Change.LogDirSubmits): made when the
// create was taken, it may have been deleted since, and a later trial's
// output (or a job's that waited for its cluster) could then not be
// opened. Where it cannot be made (MakeAgain's rules), a WARN names the
// job and says why; the job is submitted as decided, and fails to start
// when its output cannot be opened, with the agent's reason. With no log
// directory now (the service restarted without -log-dir), nothing is
// made.
func (a *App) makeLogDirsAgain(c *domain.Change) {
	if a.logDirs == nil {
		return
	}
	for _, j := range c.LogDirSubmits() {
		if err := a.logDirs.MakeAgain(c.After.LogDir.Dir, j.GetUser()); err != nil {
			a.log.Warn("log directory not made again: the job's output may not be opened",
				"job", j.GetName(), "root", c.Root, "user", j.GetUser(), "err", err)
		}
	}
}

// Tick applies the passing of time (FLEX_START expiry) at the app's clock.
func (a *App) Tick(ctx context.Context) error {
	a.write.Lock()
	defer a.write.Unlock()
	if err := a.drv.Ready(ctx); err != nil {
		return err
	}
	a.mu.RLock()
	cs := a.state.Tick(a.now().UTC())
	a.mu.RUnlock()
	for _, c := range cs {
		if err := a.apply(ctx, "", c); err != nil {
			return err
		}
	}
	return nil
}

// RunTicker calls Tick every interval until ctx ends; a failed tick is
// logged and retried at the next.
func (a *App) RunTicker(ctx context.Context, every func() <-chan time.Time) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-every():
			if err := a.Tick(ctx); err != nil && ctx.Err() == nil {
				a.log.Warn("tick failed", "err", err)
			}
		}
	}
}

// ---- reads ----

// JobRunning reports whether the job with id in project is a CustomJob's
// that has not ended (domain.State.JobRunning): the log directory's pruner
// keeps its output file whatever its age (adapters.LogDirs.Prune).
func (a *App) JobRunning(project string, id int64) bool {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.state.JobRunning(resname.JobOf(project, id).String())
}

func (a *App) lookup(name, collection string) (*domain.Root, domain.Name, error) {
	n, err := domain.ParseName(name, collection)
	if err != nil {
		return nil, n, errs.Invalid("name", "%v", err)
	}
	a.mu.RLock()
	r := a.state.Lookup(name)
	a.mu.RUnlock()
	if r == nil {
		return nil, n, fmt.Errorf("%s: %w", name, errs.NotFound)
	}
	return r, n, nil
}

// GetCustomJob returns a CustomJob (a trial's or a pipeline's too).
func (a *App) GetCustomJob(name string) (*trainingv1.CustomJob, error) {
	r, _, err := a.lookup(name, domain.CustomJobs)
	if err != nil {
		return nil, err
	}
	a.mu.RLock()
	defer a.mu.RUnlock()
	for _, cj := range r.CJs {
		if cj.Job.GetName() == name {
			return proto.Clone(cj.Job).(*trainingv1.CustomJob), nil
		}
	}
	return nil, fmt.Errorf("%s: %w", name, errs.NotFound)
}

// GetTuningJob returns a tuning job with its trials and their measurements.
func (a *App) GetTuningJob(name string) (*trainingv1.HyperparameterTuningJob, error) {
	r, _, err := a.lookup(name, domain.TuningJobs)
	if err != nil {
		return nil, err
	}
	a.mu.RLock()
	defer a.mu.RUnlock()
	if r.Tuning == nil || r.Tuning.Job.GetName() != name {
		return nil, fmt.Errorf("%s: %w", name, errs.NotFound)
	}
	return proto.Clone(r.Tuning.Job).(*trainingv1.HyperparameterTuningJob), nil
}

// GetPipeline returns a training pipeline.
func (a *App) GetPipeline(name string) (*trainingv1.TrainingPipeline, error) {
	r, _, err := a.lookup(name, domain.Pipelines)
	if err != nil {
		return nil, err
	}
	a.mu.RLock()
	defer a.mu.RUnlock()
	if r.Pipeline == nil || r.Pipeline.P.GetName() != name {
		return nil, fmt.Errorf("%s: %w", name, errs.NotFound)
	}
	return proto.Clone(r.Pipeline.P).(*trainingv1.TrainingPipeline), nil
}

// JobResource is the training resource whose id the scheduler job named
// job ("projects/{p}/jobs/{id}") has, by name: the CustomJob it runs (a
// trial's or a pipeline's too), or a tuning job or pipeline, which takes
// that id and runs no job of its own. ok is false when no training
// resource of the project has it (a plain job's, or no job's). A
// CustomJob is found in the index; the others, asked only of a job that
// is no CustomJob's, cost a pass over the resources held.
func (a *App) JobResource(job string) (name string, ok bool) {
	project, id, found := strings.Cut(strings.TrimPrefix(job, "projects/"), "/jobs/")
	if !found {
		return "", false
	}
	a.mu.RLock()
	defer a.mu.RUnlock()
	if r := a.state.Lookup("job:" + job); r != nil {
		for _, cj := range r.CJs {
			if n, err := domain.ParseName(cj.Job.GetName(), domain.CustomJobs); err == nil && n.Job() == job {
				return cj.Job.GetName(), true
			}
		}
	}
	for _, r := range a.state.Roots {
		var names []string
		if r.Tuning != nil {
			names = append(names, r.Tuning.Job.GetName())
		}
		if r.Pipeline != nil {
			names = append(names, r.Pipeline.P.GetName())
		}
		for _, name := range names {
			if n, err := domain.ParseName(name, ""); err == nil && n.Project == project && strconv.FormatInt(n.ID, 10) == id {
				return name, true
			}
		}
	}
	return "", false
}

// inParent reports whether resource name is under parent
// "projects/{p}/locations/{l}".
func inParent(name string, project, location string) bool {
	n, err := domain.ParseName(name, "")
	return err == nil && n.Project == project && (location == AnyLocation || n.Location == location)
}

// AnyLocation as a List parent's location lists every location of the
// project (AIP-159's "-"); the gateway counts a project's training
// resources against its quotas so.
const AnyLocation = "-"

func parent(p string) (string, string, error) {
	if project, ok := strings.CutSuffix(p, "/locations/"+AnyLocation); ok {
		if pr, _, err := domain.ParseParent(project + "/locations/any"); err == nil {
			return pr, AnyLocation, nil
		}
	}
	project, location, err := domain.ParseParent(p)
	if err != nil {
		return "", "", errs.Invalid("parent", "%v", err)
	}
	return project, location, nil
}

// ListCustomJobs returns the CustomJobs under parent, by name.
func (a *App) ListCustomJobs(p string) ([]*trainingv1.CustomJob, error) {
	project, location, err := parent(p)
	if err != nil {
		return nil, err
	}
	a.mu.RLock()
	defer a.mu.RUnlock()
	var out []*trainingv1.CustomJob
	for _, r := range a.state.Roots {
		for _, cj := range r.CJs {
			if inParent(cj.Job.GetName(), project, location) {
				out = append(out, proto.Clone(cj.Job).(*trainingv1.CustomJob))
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetName() < out[j].GetName() })
	return out, nil
}

// ListTuningJobs returns the tuning jobs under parent, by name, their
// trials without intermediate measurements.
func (a *App) ListTuningJobs(p string) ([]*trainingv1.HyperparameterTuningJob, error) {
	project, location, err := parent(p)
	if err != nil {
		return nil, err
	}
	a.mu.RLock()
	defer a.mu.RUnlock()
	var out []*trainingv1.HyperparameterTuningJob
	for _, r := range a.state.Roots {
		if r.Tuning != nil && inParent(r.Tuning.Job.GetName(), project, location) {
			out = append(out, domain.Summary(r.Tuning.Job))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetName() < out[j].GetName() })
	return out, nil
}

// ListPipelines returns the training pipelines under parent, by name.
func (a *App) ListPipelines(p string) ([]*trainingv1.TrainingPipeline, error) {
	project, location, err := parent(p)
	if err != nil {
		return nil, err
	}
	a.mu.RLock()
	defer a.mu.RUnlock()
	var out []*trainingv1.TrainingPipeline
	for _, r := range a.state.Roots {
		if r.Pipeline != nil && inParent(r.Pipeline.P.GetName(), project, location) {
			out = append(out, proto.Clone(r.Pipeline.P).(*trainingv1.TrainingPipeline))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetName() < out[j].GetName() })
	return out, nil
}
