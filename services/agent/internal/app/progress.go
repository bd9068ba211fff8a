package app

// Progress: every step (and task) gets LOOM_PROGRESS_FILE, a file of its
// own the program reports its training step and latest checkpoint in; the
// agent looks at it, and at the size of the step's output file, every
// progress interval, and reports StepProgress when something moved. The
// scheduler's hang detection and checkpoint-aware drain read it.

import (
	"context"
	"encoding/json"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/store"
	"github.com/loom-ml/loom/services/agent/internal/adapters"
	"github.com/loom-ml/loom/services/agent/internal/domain"
)

// DefaultProgressInterval is Options.ProgressInterval when unset.
const DefaultProgressInterval = 5 * time.Second

// progressDir is the directory of a run's progress file (the run key,
// job#attempt): <shared dir>/.loom/progress/<hostname>/<run>, its owner's
// (made by the agent, where only the agent makes names, as the task
// output directories the scheduler puts under .loom), so that the program
// can write a temporary file there and rename it over the report.
func (a *App) progressDir(run string) string {
	return filepath.Join(a.opts.SharedDir, ".loom", "progress", a.opts.Hostname, url.PathEscape(run))
}

// progressFile is the run's LOOM_PROGRESS_FILE.
func (a *App) progressFile(run string) string {
	return filepath.Join(a.progressDir(run), "progress.json")
}

// prepareProgress makes the run's progress directory for user (the job's
// owner). A failure is logged: the job runs, and reports no progress.
func (a *App) prepareProgress(user, run string) {
	if err := a.rt.GiveDir(user, a.progressDir(run)); err != nil {
		a.log.Warn("could not make a run's progress directory; it reports no progress", "run", run, "err", err)
	}
}

// dropProgress removes the run's progress directory once nothing of the run
// runs here.
func (a *App) dropProgress(run string) {
	a.mu.Lock()
	for k, t := range a.tasks {
		if strings.HasPrefix(k, run+".") && !t.Phase.Terminal() {
			a.mu.Unlock()
			return
		}
	}
	if s := a.steps[run]; s != nil && !s.Phase.Terminal() {
		a.mu.Unlock()
		return
	}
	delete(a.progress, run)
	a.mu.Unlock()
	_ = os.RemoveAll(a.progressDir(run))
}

// maxProgressBytes bounds the progress file the agent reads: a report is a
// few hundred bytes; a bigger file reads as nothing new.
const maxProgressBytes = 64 << 10

// readProgress reads a progress report; a missing, malformed (a program
// that writes it in place, not by rename, may be caught half way) or
// oversized one (over maxProgressBytes), or one the agent may not read
// (openRunFile: a link, a FIFO, a second name, someone else's file)
// reads as nothing new: prev. The open never blocks: a step's last read
// is made while its end waits to be recorded.
func readProgress(path string, prev domain.ProgressReport) domain.ProgressReport {
	f, fi := openRunFile(path)
	if f == nil {
		return prev
	}
	defer f.Close()
	if fi.Size() > maxProgressBytes {
		return prev
	}
	b, err := io.ReadAll(io.LimitReader(f, maxProgressBytes+1))
	if err != nil || len(b) > maxProgressBytes {
		return prev
	}
	var r domain.ProgressReport
	if json.Unmarshal(b, &r) != nil {
		return prev
	}
	return r
}

// progressWritten reports whether the program has written its progress
// file at path (the run's LOOM_PROGRESS_FILE): the sign that it is up
// (resignalReady).
func progressWritten(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// outputSize is the size of a step's output file (0: none, or unknown),
// not of what a link there leads to: the agent looks as root.
func outputSize(path string) int64 {
	if path == "" {
		return 0
	}
	fi, err := os.Lstat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// lastProgress reads the progress of a run one last time as what ran of it
// here ends (a step whose process exited or was stopped, srun tasks of a
// run whose step is elsewhere, or either found ended by a restarted
// agent), and returns the StepProgress of what moved since prev (what was
// last reported of the run here; none when nothing did) and the progress
// as it now stands. out is the step's output file ("" for tasks: their
// output is theirs, not the run's).
//
// The caller writes it in the same write as the end, ahead of it.
// A program that saves a checkpoint on a signal (its --signal, SIGTERM)
// and exits at once would otherwise have that checkpoint reported by the
// next progress look — up to a whole progress interval later, after its
// end, or never (the run's progress is dropped with it). The scheduler
// takes progress only for a run it has not released, and it releases a
// run when its last step ends; so the report must come first. Both are
// keyed by job on loom.step.events.v1 (one partition), and one outbox
// write keeps its events' order to the bus (libs/store's relay), so the
// scheduler always handles the checkpoint before the end: goodput counts
// the work up to it as kept, not as lost to recomputation. A separate
// write before the end would do the same unless it failed; in one write
// the progress is retried with the end and cannot be lost without it.
func (a *App) lastProgress(run, job string, attempt int32, out string, prev domain.Progress) (domain.Progress, []envelope.Event) {
	r := readProgress(a.progressFile(run), prev.ProgressReport)
	p, ev := domain.Observe(a.opts.Self, job, attempt, prev, r, outputSize(out), a.opts.Now())
	if ev == nil {
		return prev, nil
	}
	e, err := adapters.Event(ev)
	if err != nil {
		a.log.Error("encode step progress", "run", run, "err", err)
		return prev, nil
	}
	return p, []envelope.Event{e}
}

// lastTasksProgress is lastProgress for tasks t as they end, on a node
// where the run has no step (srun tasks on the run's other nodes). Where
// it has one, the step reads the run's progress last as it ends, and the
// run's tasks end with it. The progress it returns is kept as reported,
// for the run's other tasks here: a later look then finds nothing new. A
// periodic look racing with it may report the same progress again; the
// scheduler keeps the highest.
func (a *App) lastTasksProgress(t *domain.Tasks) []envelope.Event {
	run := t.RunKey()
	a.mu.Lock()
	s, prev := a.steps[run], a.progress[run]
	a.mu.Unlock()
	if s != nil {
		return nil
	}
	p, evs := a.lastProgress(run, t.Job, t.Attempt, "", prev)
	if evs != nil {
		a.mu.Lock()
		a.progress[run] = p
		a.mu.Unlock()
	}
	return evs
}

// SignalledProgressInterval is how often the agent looks at progress for
// one progress interval after it signalled a step: the signal (a job's
// --signal, sent for a checkpoint-aware drain or for checkpoint on a node's
// failure) asks for a checkpoint that the scheduler waits on before it
// stops or requeues the run, so it is reported within this, not within a
// whole progress interval.
const SignalledProgressInterval = 100 * time.Millisecond

// progressSoon makes ProgressLoop look often for a while (a step was
// signalled). It never blocks.
func (a *App) progressSoon() {
	select {
	case a.signalled <- struct{}{}:
	default:
	}
}

// ProgressLoop looks at the progress of every run here each progress
// interval, and every SignalledProgressInterval for one progress interval
// after a step was signalled, and reports what moved, until ctx ends.
func (a *App) ProgressLoop(ctx context.Context) error {
	t := a.opts.Clock.NewTicker(a.opts.ProgressInterval)
	defer t.Stop()
	var fast clockwork.Ticker
	var fastC <-chan time.Time
	var fastUntil time.Time
	defer func() {
		if fast != nil {
			fast.Stop()
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.Chan():
		case <-a.signalled:
			fastUntil = a.opts.Clock.Now().Add(a.opts.ProgressInterval)
			if fast == nil && SignalledProgressInterval < a.opts.ProgressInterval {
				fast = a.opts.Clock.NewTicker(SignalledProgressInterval)
				fastC = fast.Chan()
			}
			continue
		case now := <-fastC:
			if !now.Before(fastUntil) {
				fast.Stop()
				fast, fastC = nil, nil
			}
		}
		a.observeProgress(ctx)
	}
}

// observeProgress looks once at the progress of every running run here (a
// running step, or tasks of a run that has no step here) and writes the
// StepProgress of those that moved, in one write.
func (a *App) observeProgress(ctx context.Context) {
	type look struct {
		job     string
		attempt int32
		out     string
		prev    domain.Progress
	}
	a.mu.Lock()
	runs := map[string]look{}
	// What runs here (procs, groups), not every record the node keeps.
	for k := range a.procs {
		if s := a.steps[k]; s != nil && s.Phase == domain.Running {
			runs[k] = look{job: s.Job, attempt: s.Attempt, out: s.OutPath, prev: a.progress[k]}
		}
	}
	for k := range a.groups {
		t := a.tasks[k]
		if t == nil || t.Phase != domain.Running {
			continue
		}
		if run := t.RunKey(); runs[run].job == "" {
			runs[run] = look{job: t.Job, attempt: t.Attempt, prev: a.progress[run]}
		}
	}
	a.mu.Unlock()
	a.resignalReady()
	keys := make([]string, 0, len(runs))
	for k := range runs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	now := a.opts.Now()
	a.sampleUsage(now)
	var tx store.Tx
	next := map[string]domain.Progress{}
	for _, k := range keys {
		l := runs[k]
		p, ev := domain.Observe(a.opts.Self, l.job, l.attempt, l.prev, readProgress(a.progressFile(k), l.prev.ProgressReport), outputSize(l.out), now)
		if ev == nil {
			continue
		}
		e, err := adapters.Event(ev)
		if err != nil {
			a.log.Error("encode step progress", "run", k, "err", err)
			continue
		}
		tx.Emit(e)
		next[k] = p
	}
	usage := a.usageReports(now)
	for _, e := range usage {
		tx.Emit(e)
	}
	if len(next) == 0 && len(usage) == 0 {
		return
	}
	// Through the outbox, keyed by job as the steps' own events: in order
	// with them (a report that raced with its run's end may follow it;
	// readers pass over progress of ended runs, and the end carried the
	// run's last progress ahead of it: lastProgress). A write that fails is not
	// retried: the next look reports what moved since.
	wctx, cancel := context.WithTimeout(ctx, a.opts.ProgressInterval)
	defer cancel()
	if _, err := a.drv.Apply(wctx, "", &tx, nil); err != nil {
		a.log.Warn("step progress not reported", "runs", len(next), "err", err)
		return
	}
	a.mu.Lock()
	for k, p := range next {
		if s := a.steps[k]; s == nil || !s.Phase.Terminal() {
			a.progress[k] = p
		}
	}
	a.mu.Unlock()
}
