// Package app applies consumed events to the scheduler: the domain computes
// the change, store.Apply writes it (records, emitted events and the inbox
// mark, atomically, fenced by the leader lease), and only then does the
// in-memory state take it.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/bus"
	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/store"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/scheduler/internal/adapters"
	"github.com/loom-ml/loom/services/scheduler/internal/domain"
	"github.com/loom-ml/loom/services/scheduler/internal/domain/views"
)

// Source is the CloudEvents source of the scheduler's events.
const Source = "loom/scheduler"

// ErrNotLeader is returned by writers of an instance that does not hold the
// leader lease (or lost it: its fence was revoked).
var ErrNotLeader = errors.New("not the scheduler leader")

// App is the scheduler's state and the one path that changes it. Handle (the
// consumer) and Tick (the clock) may run concurrently; they take turns. Reads
// may run concurrently with either.
//
// With a lease (Lead), only the leader writes: every Apply carries its
// term's fence, and an Apply refused by the fence makes it step down at once.
// Without one (New alone, as in tests) it writes unfenced.
type App struct {
	st   *store.Store
	repo *adapters.Repo
	cfg  domain.Config
	now  func() time.Time
	log  *slog.Logger

	// work serialises the writers (Handle, Tick): each computes a change from
	// the state it sees and commits it before the next one looks.
	work sync.Mutex
	// mu guards state against readers while Commit runs; writers read it
	// under work alone because only they change it.
	mu    sync.RWMutex
	state *domain.State
	// drv writes every change and reloads memory after a write whose
	// outcome is unknown (Redis may have it); its calls run under work.
	drv *store.Driver

	// Leadership (under work): the term's token ("" when fencing is off),
	// whether this instance leads, the writes of the term, and what to call
	// when the fence refuses a write.
	fenced   bool
	token    string
	leading  bool
	seq      uint64
	onFenced func()
	// logPos and version are the change log's position and the store's
	// version the memory is current at (a follower's: adapters.ReadChanges),
	// "" when unknown: the next refresh reloads. A leader's own writes do
	// not advance them; it reloads after its term.
	logPos, version string
	// reloads and follows count how memory was brought up to date with the
	// store: every record read afresh, or the change log's writes applied.
	reloads, follows uint64
	// lastReload is when the last reload ended, and reloadTook how long it
	// took: a follower reloads no sooner than reloadCostFactor times that
	// after the last.
	lastReload time.Time
	reloadTook time.Duration
	// commandSecret is the services' secret the node command keys are
	// derived from (SealCommands); nil: step commands go out unsealed.
	commandSecret []byte
	// metrics times the passes (RegisterMetrics; nil: not timed); under work.
	metrics *metrics
}

// New returns an app over st; Start (or Lead) loads it. now is the clock.
func New(st *store.Store, cfg domain.Config, now func() time.Time, log *slog.Logger) *App {
	a := &App{st: st, repo: adapters.NewRepo(st), cfg: cfg, now: now, log: log, state: domain.NewState(cfg), leading: true}
	a.drv = store.NewDriver(st, a.reload)
	return a
}

// Start rebuilds memory from Redis and runs a scheduling pass over every
// cluster, so work that a crashed predecessor left to do is done. It is the
// unfenced start of a single instance; Lead is the fenced one.
func (a *App) Start(ctx context.Context) error {
	a.work.Lock()
	defer a.work.Unlock()
	return a.startLocked(ctx)
}

func (a *App) startLocked(ctx context.Context) error {
	if err := a.catchUp(ctx); err != nil {
		return err
	}
	start := time.Now()
	c := a.state.Schedule(a.now())
	a.observePass(start)
	if err := a.apply(ctx, "", c); err != nil {
		return fmt.Errorf("start-up pass: %w", err)
	}
	return nil
}

// Lead makes this instance the leader for the term of token (from
// adapters.Lease.TryAcquire): it brings memory up to what the previous
// leader wrote (the change log's writes since the last refresh, or every
// record afresh), runs the start-up pass, and from then on fences every
// write with token, logging each to the change log for the followers.
// onFenced is called (once) when a write is refused because a later term
// took over.
func (a *App) Lead(ctx context.Context, token string, onFenced func()) error {
	a.work.Lock()
	defer a.work.Unlock()
	a.fenced, a.token, a.leading, a.onFenced = true, token, true, onFenced
	if err := a.startLocked(ctx); err != nil {
		a.leading = false
		return err
	}
	// The term's first write, even when the start-up pass changed nothing:
	// it checks the fence at once, and puts an entry in the change log, so
	// that a follower that loads from here on has a position in it (from
	// an empty log's, it would have to reload at the first write). When
	// the log did not hold every write before the term (a leader of an
	// earlier release wrote without it), the entry holds none of this one's
	// either: the followers that meet it reload, since what they applied
	// from the log lacks those writes.
	tx := a.fencedTx()
	if a.logPos == "" {
		adapters.ForceReload(tx, adapters.Version(a.token, a.seq))
	}
	if _, err := a.write(ctx, "start the term", nil, tx, func() {}); err != nil {
		a.leading = false
		return err
	}
	a.log.Info("leading", "term", token)
	return nil
}

// StepDown stops this instance from writing; memory is kept for reads and
// refreshed by Refresh.
func (a *App) StepDown() {
	a.work.Lock()
	defer a.work.Unlock()
	if a.leading && a.token != "" { // not the start of an instance that has not led yet
		a.log.Info("stepped down", "term", a.token)
	}
	a.fenced, a.leading, a.onFenced = true, false, nil
	// The next Refresh reloads: the term's own writes are in memory, with
	// its passes' explanations, which a follower's memory does not keep.
	a.logPos, a.version = "", ""
}

// Leading reports whether this instance may write.
func (a *App) Leading() bool {
	a.work.Lock()
	defer a.work.Unlock()
	return a.leading
}

// Refresh brings a follower's memory up to what the leader wrote: the
// change log's writes since the last refresh, or, when the log no longer
// holds them all, every record afresh. Followers keep serving reads close
// to the leader's state, and one that takes over needs no reload.
func (a *App) Refresh(ctx context.Context) error {
	a.work.Lock()
	defer a.work.Unlock()
	if a.leading {
		return nil
	}
	return a.catchUp(ctx)
}

// catchUp applies the change log's writes since the memory's position, or
// reloads when there is none or the log cannot bring memory up to date.
// Callers hold work.
func (a *App) catchUp(ctx context.Context) error {
	if a.logPos == "" {
		return a.reloadDue(ctx, "no position in the change log")
	}
	began := time.Now()
	es, v, err := a.repo.ReadChanges(ctx, a.logPos)
	if errors.Is(err, adapters.ErrReload) {
		return a.reloadDue(ctx, err.Error())
	}
	if err != nil {
		return err
	}
	if want := adapters.LoggedVersion(es, a.version); v != want {
		return a.reloadDue(ctx, fmt.Sprintf("the store is at version %q, the change log at %q: a write was not logged (a scheduler of an earlier release?)", v, want))
	}
	if len(es) == 0 {
		return nil
	}
	u, err := adapters.DecodeUpdate(es, a.state.ArrayTemplate) // the state changes only under work
	if err != nil {
		return a.reloadDue(ctx, err.Error())
	}
	a.mu.Lock()
	a.state.Follow(u)
	a.mu.Unlock()
	a.logPos, a.version = es[len(es)-1].ID, v
	a.follows++
	a.observeUpdate("log")
	level := slog.LevelDebug
	if a.leading {
		level = slog.LevelInfo
	}
	a.log.Log(ctx, level, "state brought up to date from the change log", "writes", len(es),
		"took", time.Since(began).Round(time.Microsecond).String())
	return nil
}

// reloadCostFactor bounds a follower's reloads to 1/reloadCostFactor of its
// time, and of Redis's: a reload reads every record (at 100,000 jobs about
// 1.3 s of the follower's time and 200 ms of Redis's, time in which Redis,
// single-threaded, serves nobody else: the leader's writes wait).
const reloadCostFactor = 10

// reloadDue reloads, unless this instance is a follower whose last reload
// ended less than reloadCostFactor times its duration ago: then it keeps
// its memory (reads lag) until a later refresh. why says what made the
// reload necessary.
func (a *App) reloadDue(ctx context.Context, why string) error {
	if !a.leading && !a.lastReload.IsZero() && time.Since(a.lastReload) < reloadCostFactor*a.reloadTook {
		a.log.Debug("reload deferred: the last one was too recent", "why", why, "last", a.lastReload, "took", a.reloadTook)
		return nil
	}
	a.log.Debug("reloading", "why", why)
	return a.reload(ctx)
}

// reloadAttempts bounds how many times reload reads every record when
// the log cannot say what changed while it read (a write overflowed the
// log, or the reads took so long the log was trimmed past them).
const reloadAttempts = 3

// reload reads every record afresh. The reads are not atomic: writes may
// land between them. So it takes the change log's position before reading
// and applies the writes logged since to what it read, which leaves exactly
// what the store held at the last of them (a record read before a write
// is replaced by it; one read after is rewritten with the same bytes).
// When the log cannot (reloadAttempts times: it does not hold every write,
// one overflowed, or the store was written without it), it keeps what it
// read and no position: the next refresh reloads again.
func (a *App) reload(ctx context.Context) error {
	began := time.Now()
	var raw adapters.Raw
	pos, version := "", ""
	for attempt := 1; attempt <= reloadAttempts && pos == ""; attempt++ {
		from, at, complete, err := a.repo.LogTail(ctx)
		if err != nil {
			return fmt.Errorf("load state: %w", err)
		}
		if raw, err = a.repo.LoadRaw(ctx); err != nil {
			return fmt.Errorf("load state: %w", err)
		}
		es, v, err := a.repo.ReadChanges(ctx, from)
		if errors.Is(err, adapters.ErrReload) {
			continue
		}
		if err != nil {
			return fmt.Errorf("load state: %w", err)
		}
		if !complete || v != adapters.LoggedVersion(es, at) {
			continue // written without the log: what it says is not all
		}
		if err := raw.Apply(es); err != nil {
			continue
		}
		pos, version = from, v
		if len(es) > 0 {
			pos = es[len(es)-1].ID
		}
	}
	recs, err := raw.Decode()
	if err != nil {
		return fmt.Errorf("load state: %w", err)
	}
	s := domain.NewState(a.cfg)
	s.Load(recs.Clusters, recs.Nodes, recs.Jobs, recs.Runs, recs.Arrays, recs.Usage)
	s.LoadEnded(recs.Ended)
	s.LoadAssocLimits(recs.Assocs)
	s.LoadStepRequests(recs.StepRequests)
	a.mu.Lock()
	a.state = s
	a.mu.Unlock()
	a.logPos, a.version = pos, version
	a.lastReload, a.reloadTook = time.Now(), time.Since(began)
	a.reloads++
	a.observeUpdate("reload")
	// A follower reloads only when the change log cannot bring it up to
	// date: its reloads are debug lines, a leader's start an info line.
	level := slog.LevelDebug
	if a.leading {
		level = slog.LevelInfo
	}
	a.log.Log(ctx, level, "state loaded", "clusters", len(recs.Clusters), "nodes", len(recs.Nodes), "jobs", len(recs.Jobs),
		"runs", len(recs.Runs), "arrays", len(recs.Arrays), "took", time.Since(began).Round(time.Millisecond).String())
	return nil
}

// Handle applies one consumed event; it is the consumer's bus.Handler. An
// event that can never apply is returned as bus.Permanent (dead-lettered).
// An instance that lost the lease refuses the event (it stays uncommitted
// and goes to the next leader).
func (a *App) Handle(ctx context.Context, ev envelope.Event) error {
	a.work.Lock()
	defer a.work.Unlock()
	if !a.leading {
		return fmt.Errorf("event %s: %w", ev.ID, ErrNotLeader)
	}
	if err := a.drv.Ready(ctx); err != nil {
		return err
	}
	if err := a.checkSigner(ev); err != nil {
		return err
	}
	start := time.Now()
	c, err := a.state.Handle(a.now(), AsPrincipal(ev))
	a.observePass(start)
	if err != nil {
		var inv *errs.InvalidError
		if errors.As(err, &inv) {
			return bus.Permanent(fmt.Errorf("event %s (%s): %w", ev.ID, ev.Type, err))
		}
		return fmt.Errorf("event %s (%s): %w", ev.ID, ev.Type, err)
	}
	if err := a.apply(ctx, ev.ID, c); err != nil {
		return fmt.Errorf("event %s (%s): %w", ev.ID, ev.Type, err)
	}
	return nil
}

// errBatchSeen refuses a batch one of whose events was applied before: the
// consumer then takes them one by one, and the inbox skips that one.
var errBatchSeen = errors.New("an event of the batch was applied before")

// HandleBatch applies several consumed events as one change with one
// scheduling pass and one store write (bus.BatchHandler). It changes nothing
// and returns an error when any event fails or was applied before; the
// consumer then hands them to Handle one by one. Each emitted event carries
// the trace context of the event that caused it (the pass's, the first's).
func (a *App) HandleBatch(ctx context.Context, evs []envelope.Event) error {
	a.work.Lock()
	defer a.work.Unlock()
	if !a.leading {
		return fmt.Errorf("batch of %d events: %w", len(evs), ErrNotLeader)
	}
	if err := a.drv.Ready(ctx); err != nil {
		return err
	}
	payloads := make([]proto.Message, len(evs))
	ids := make([]string, len(evs))
	for i, ev := range evs {
		if err := a.checkSigner(ev); err != nil {
			return err // one by one: Handle dead-letters it
		}
		payloads[i], ids[i] = AsPrincipal(ev), ev.ID
	}
	start := time.Now()
	c, ends, err := a.state.HandleBatch(a.now(), payloads)
	a.observePass(start)
	if err != nil {
		return fmt.Errorf("batch of %d events: %w", len(evs), err)
	}
	traceOf := func(i int) string {
		if k := sort.Search(len(ends), func(k int) bool { return i < ends[k] }); k < len(ends) {
			return evs[k].TraceParent
		}
		return evs[0].TraceParent
	}
	applied, err := a.applyMany(ctx, ids, c, traceOf)
	switch {
	case err != nil:
		return fmt.Errorf("batch of %d events: %w", len(evs), err)
	case !applied:
		return errBatchSeen
	}
	return nil
}

// Tick applies what the clock asks for (time limits, preemption grace
// periods, drain deadlines, begin times). Its change carries no inbox mark:
// a crash before it is stored loses nothing, since the next tick, or the
// start-up pass, computes it again.
func (a *App) Tick(ctx context.Context) error {
	a.work.Lock()
	defer a.work.Unlock()
	if !a.leading {
		return ErrNotLeader
	}
	if err := a.drv.Ready(ctx); err != nil {
		return err
	}
	start := time.Now()
	c := a.state.Tick(a.now())
	a.observePass(start)
	if err := a.apply(ctx, "", c); err != nil {
		return fmt.Errorf("tick: %w", err)
	}
	return nil
}

// RunClock calls Tick every interval of clock until ctx ends. A failed tick is logged
// and tried again at the next one, so a Redis hiccup does not stop the
// service; it returns nil when ctx ends or the instance stops leading.
func (a *App) RunClock(ctx context.Context, every time.Duration, clock clockwork.Clock) error {
	tk := clock.NewTicker(every)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tk.Chan():
			err := a.Tick(ctx)
			switch {
			case errors.Is(err, ErrNotLeader):
				return nil
			case err != nil && ctx.Err() == nil:
				a.log.Warn("tick failed; retrying at the next", "err", err)
			}
		}
	}
}

// apply writes c with the inbox mark inboxID (and the term's fence) and
// commits it to memory.
func (a *App) apply(ctx context.Context, inboxID string, c *domain.Change) error {
	if inboxID == "" {
		_, err := a.applyMany(ctx, nil, c, nil)
		return err
	}
	_, err := a.applyMany(ctx, []string{inboxID}, c, nil)
	return err
}

// applyMany writes c with the inbox marks of the events it is the outcome
// of, fenced when leading under a lease, and then commits it to memory. It
// reports applied=false, writing and committing nothing, when one of the
// events was applied before. traceOf, when not nil, gives the traceparent of
// emitted event i (the event that caused it), else the one in ctx is used.
func (a *App) applyMany(ctx context.Context, inboxIDs []string, c *domain.Change, traceOf func(i int) string) (bool, error) {
	if a.log.Enabled(ctx, slog.LevelDebug) {
		for _, d := range c.Decisions {
			a.log.Debug("job waits", "job", d.Job, "reason", d.Reason, "filtered", d.Filtered, "note", d.Note)
		}
	}
	if c.Empty() {
		// Nothing to write: the event changes nothing, now or on redelivery.
		// Its memory-only parts (placement explanations, wake-ups) still count.
		a.mu.Lock()
		a.state.Commit(c)
		a.mu.Unlock()
		return true, nil
	}
	tx := a.fencedTx()
	if err := adapters.Write(tx, c); err != nil {
		return false, err
	}
	for i := range c.Emits {
		e := &c.Emits[i]
		payload, err := a.seal(e.Message())
		if err != nil {
			return false, err
		}
		ev, err := envelope.Route(e.Key, Source, payload)
		if err != nil {
			return false, err
		}
		if e.Subject != "" {
			ev.Subject = e.Subject
		}
		if traceOf != nil {
			ev.TraceParent = traceOf(i)
		}
		tx.Emit(ev)
	}
	applied, err := a.write(ctx, "apply", inboxIDs, tx, func() {
		a.mu.Lock()
		a.state.Commit(c)
		a.mu.Unlock()
	})
	if err != nil {
		return false, err
	}
	// !applied: applied before; memory was loaded with it (at start, or
	// by the driver after a write whose outcome was unknown).
	return applied, nil
}

// fencedTx returns an empty transaction that carries this term's fence
// when the instance writes under a lease.
func (a *App) fencedTx() *store.Tx {
	tx := &store.Tx{}
	if a.fenced {
		a.seq++
		adapters.Fence(tx, a.token, a.seq)
		adapters.LogChanges(tx, adapters.Version(a.token, a.seq))
	}
	return tx
}

// write applies tx with the inbox marks of inboxIDs (none: a change of the
// clock's or a prune) through the driver, which calls commit once Redis has
// it and reloads memory after a write whose outcome is unknown. A write
// refused by the fence makes this instance step down at once: a later term
// holds the lease.
func (a *App) write(ctx context.Context, what string, inboxIDs []string, tx *store.Tx, commit func()) (bool, error) {
	applied, err := a.drv.ApplyBatch(ctx, inboxIDs, tx, commit)
	if err == nil {
		return applied, nil
	}
	if a.fenced && adapters.IsFenced(err) {
		a.log.Warn("a later term holds the leader lease; stepping down", "term", a.token, "err", err)
		a.leading = false
		if f := a.onFenced; f != nil {
			a.onFenced = nil
			f()
		}
		return false, fmt.Errorf("%s: %w: %w", what, ErrNotLeader, err)
	}
	return false, fmt.Errorf("%s: %w", what, err)
}

// GetJob returns the job named name (array tasks as "jobs/A_i"), as of now,
// or an error wrapping errs.NotFound.
func (a *App) GetJob(name string) (*loomv1.Job, error) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	j := views.Job(a.state, name, a.now())
	if j == nil {
		return nil, fmt.Errorf("job %s: %w", name, errs.NotFound)
	}
	return j, nil
}

// ListJobs returns one page of the jobs f selects, in submission order:
// those after the list key after, at most size (see
// views.ListPage), and the key to continue after ("" at the end).
func (a *App) ListJobs(f views.JobFilter, after string, size int) ([]*loomv1.Job, string) {
	a.mu.RLock()
	if !a.state.Listed() {
		// The first list since the state was loaded makes the project
		// lists (domain.State.BuildLists), once, as a writer.
		a.mu.RUnlock()
		a.mu.Lock()
		a.state.BuildLists()
		a.mu.Unlock()
		a.mu.RLock()
	}
	defer a.mu.RUnlock()
	return views.ListPage(a.state, f, after, size, a.now())
}

// ListPartitions returns the cluster's partitions (sinfo).
func (a *App) ListPartitions(cluster string) []*loomv1.Partition {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return views.Partitions(a.state, cluster)
}

// ListShares returns the cluster's fair-share standing now (sshare).
func (a *App) ListShares(cluster string) []*loomv1.Share {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.state.Shares(cluster, a.now())
}

// JobGoodput returns the goodput of the job name as of now (final figures
// for a job pruned since its end), or an error wrapping errs.NotFound for a
// job the scheduler does not know, or whose record predates goodput.
func (a *App) JobGoodput(name string) (*loomv1.Goodput, error) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	g := a.state.JobGoodput(name, a.now())
	if g == nil {
		if a.state.EndedRecord(a.state.ResolveJobName(name)) != nil {
			return nil, fmt.Errorf("job %s ended, and was pruned, before the scheduler kept goodput with its final record: %w",
				name, errs.NotFound)
		}
		return nil, fmt.Errorf("job %s: %w", name, errs.NotFound)
	}
	return g, nil
}

// ClusterGoodput returns the goodput of the cluster's jobs live at or after
// since, as of now, or an error wrapping errs.NotFound for an unknown cluster.
func (a *App) ClusterGoodput(cluster string, since time.Time) (*loomv1.Goodput, error) {
	a.mu.RLock()
	indexed := a.state.ClusterJobsIndexed()
	a.mu.RUnlock()
	if !indexed {
		// Built at the first call, not at the load: a restart's first
		// decision does not wait for an index only this view reads.
		a.mu.Lock()
		a.state.IndexClusterJobs()
		a.mu.Unlock()
	}
	a.mu.RLock()
	defer a.mu.RUnlock()
	g := a.state.ClusterGoodput(cluster, since, a.now())
	if g == nil {
		return nil, fmt.Errorf("cluster %s: %w", cluster, errs.NotFound)
	}
	return g, nil
}

// ListSlurmNodes returns the cluster's compute nodes (sinfo -N).
func (a *App) ListSlurmNodes(cluster string) []*loomv1.SlurmNode {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return views.SlurmNodes(a.state, cluster)
}

// ListJobSteps returns the steps (srun) of the job's run attempt (0: its
// current run), by step id, or an error wrapping errs.NotFound for a job
// the scheduler does not know or an attempt the job has not had.
func (a *App) ListJobSteps(job string, attempt int32) ([]*loomv1.JobStep, error) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	steps, ok := a.state.JobSteps(job, attempt)
	if !ok {
		if attempt > 0 {
			return nil, fmt.Errorf("job %s has had no attempt %d: %w", job, attempt, errs.NotFound)
		}
		return nil, fmt.Errorf("job %s: %w", job, errs.NotFound)
	}
	return steps, nil
}

// GetJobStep returns step id of the job's current run, or an error wrapping
// errs.NotFound.
func (a *App) GetJobStep(job string, id int32) (*loomv1.JobStep, error) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	s := a.state.JobStep(job, id)
	if s == nil {
		return nil, fmt.Errorf("step %d of job %s: %w", id, job, errs.NotFound)
	}
	return s, nil
}
