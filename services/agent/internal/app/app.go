// Package app runs one node's agent: it applies step commands through the
// domain (decide → store.Apply → memory), runs the steps through its
// ports.Runtime (process groups, by default), reports their ends, heartbeats, and on start recovers from a predecessor
// that died.
package app

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/loom-ml/loom/libs/acct"
	"github.com/loom-ml/loom/libs/bus"
	"github.com/loom-ml/loom/libs/clusterspec"
	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/slurmspec"
	"github.com/loom-ml/loom/libs/store"
	"github.com/loom-ml/loom/libs/workerenv"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/agent/internal/adapters"
	"github.com/loom-ml/loom/services/agent/internal/domain"
	"github.com/loom-ml/loom/services/agent/internal/ports"
	steprt "github.com/loom-ml/loom/services/agent/internal/runtime"
)

// StepIDEnv is set in every step's environment to "<node>#<job>#<attempt>",
// so that a restarted agent can find a process it started but never recorded.
const StepIDEnv = "LOOM_STEP_ID"

// ErrShuttingDown is returned for a StartStep that arrives while the agent
// stops: the record stays uncommitted and the next agent start runs it.
var ErrShuttingDown = errors.New("agent is shutting down")

// defaultPath is the steps' PATH when the agent has none.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// persistTimeout bounds the retries of a write that has no event to redeliver
// it (a step's start or end) once the agent stops (Options.PersistTimeout),
// and the retries of the node's own events (Node.emit): long enough to ride
// out a Redis restart.
const persistTimeout = 30 * time.Second

// Publisher publishes events directly; *bus.Producer is one.
type Publisher interface {
	Publish(ctx context.Context, events ...envelope.Event) error
}

// Options configure an App. Zero durations take the documented defaults.
type Options struct {
	Store *store.Store
	// Publisher sends heartbeats (which bypass the outbox).
	Publisher Publisher
	Self      domain.Self
	Hostname  string
	GPUs      int
	// WorkDir is the node's directory; SharedDir the cluster's (default WorkDir).
	WorkDir, SharedDir string
	// KillGrace is the time between SIGTERM and SIGKILL when a step is
	// stopped (default 10 s).
	KillGrace time.Duration
	// HeartbeatInterval is how often Heartbeats sends one (default 2 s).
	HeartbeatInterval time.Duration
	// JobNice is how far below the agent's own CPU priority steps and their
	// tasks run: a nice value increment, 0..19 (ports.Spec.Nice).
	JobNice int
	// Runtime starts and controls the steps' and tasks' processes
	// (required; the agent's is the process runtime,
	// internal/adapters/procruntime).
	Runtime ports.Runtime
	// SlurmBin, when set, leads every step's and task's PATH (see
	// jobPath).
	SlurmBin string
	// Gateway, when set, is every Slurm step's and task's LOOM_GATEWAY
	// unless its environment has one (see nodeVars).
	Gateway string
	// WorkloadToken, when set, mints the token a job attempt's processes
	// get as LOOM_TOKEN (scoped to that job: the gateway's CreateToken
	// with the node's identity). A failure is logged and the job runs
	// without one (its srun and scontrol calls are then refused).
	WorkloadToken func(ctx context.Context, job string) (string, error)
	// OrphanAfter is how long the control plane (Kafka, Redis) may stay
	// silent before the agent ends itself (see Watch; default
	// DefaultOrphanAfter).
	OrphanAfter time.Duration
	Log         *slog.Logger
	// Clock is what the loops wait on (default the real clock); tests give a
	// clockwork.FakeClock. Now defaults to its Now.
	Clock clockwork.Clock
	// Now is the time the domain is given (default Clock.Now).
	Now func() time.Time
	// CheckAddr is the "host:port" of the node's health-check endpoint
	// (internal/checks' Serve), advertised as AgentRegistered.check_addr;
	// empty when it serves none.
	CheckAddr string
	// NodeEnv is KEY=VALUE variables every step and task gets after its
	// own: what the node tells its jobs (LOOM_GPU_STATE_DIR, where the
	// node's nvidia-smi finds simulated GPUs).
	NodeEnv []string
	// SimulatedGPUs is AgentRegistered.simulated_gpus: the node's GPUs
	// are the simulated device.
	SimulatedGPUs bool
	// ProgressInterval is how often the agent looks at its runs' progress
	// and reports what moved (ProgressLoop; default
	// DefaultProgressInterval): at most one StepProgress per run per
	// interval.
	ProgressInterval time.Duration
	// GPUReading is the node's latest GPU telemetry (Node.LastGPUs; nil: no
	// GPUs are accounted): each step's share is read from it with every
	// usage sample.
	GPUReading func() []*loomv1.GpuSample
	// AcctInterval is how often a running step's usage, sampled every
	// progress interval, is reported (UsageReported, for sstat; 0:
	// domain.DefaultAcctInterval; negative: only with the step's end).
	AcctInterval time.Duration
	// HoldStarts makes the agent record the starts it is sent (StartStep,
	// LaunchTasks) but start no process until CaughtUp is called: a
	// restarted agent first works through the backlog of its step
	// commands, so that a start whose stop follows in the backlog never
	// runs, and a node declared dead stops what it ran before it starts
	// anything new.
	HoldStarts bool
	// JobChecks are the prolog and epilog checks run around each step
	// (prolog.go; none by default), by JobCheckRunner (the agent's Node;
	// nil: none run).
	JobChecks      JobChecks
	JobCheckRunner JobCheckRunner
	// Container is what a step's command runs in (runtime.New: the
	// process runtime by default, or a site's container template applied
	// to steps whose env names LOOM_CONTAINER_IMAGE). nil: the process
	// runtime.
	Container steprt.Runtime
	// Metrics bound the metrics read from steps' CLOUD_ML_HP_METRIC_FILE
	// and sent as MetricsReported (hypertune.go; zero fields: defaults).
	Metrics MetricsOptions
	// PersistTimeout is how long a record the agent writes on its own (a
	// step's or its tasks' start or end) is still retried once the agent
	// stops (default persistTimeout); while it runs, such a write is
	// retried until Redis takes it.
	PersistTimeout time.Duration
}

// stepLocks is how many locks order the work on steps (see App.lockStep).
const stepLocks = 256

// App is one node's agent. Its methods are safe for concurrent use.
//
// Steps are started concurrently: a StartStep handler writes the STARTING
// record (with its inbox mark) and returns; the process is spawned and its
// RUNNING record written by a goroutine of its own. The work on one step
// (decisions, their writes, spawning, signals, kills) is ordered by a lock
// per step (striped: one of stepLocks), so that its events are written in
// the order they happened; mu guards only the maps.
type App struct {
	opts   Options
	log    *slog.Logger
	rt     ports.Runtime
	bootID string

	stepMu [stepLocks]sync.Mutex

	// mu guards steps, procs, tasks, groups and closing; it is never held
	// across I/O. tasks and groups are the job steps' tasks (tasks.go):
	// records by TasksKey, and the process groups of those running here.
	mu      sync.Mutex
	steps   map[string]*domain.Step
	procs   map[string]*process
	tasks   map[string]*domain.Tasks
	groups  map[string]*taskGroup
	closing bool
	running atomic.Int32
	// persisting counts, by key, the records whose memory is ahead of Redis
	// by design (record sets memory, then persists): a reload leaves them.
	persisting map[string]int
	// progress is, by run key (job#attempt), what was last reported of
	// its progress (progress.go).
	progress map[string]domain.Progress
	// usage is, by step or tasks key, what each running unit's processes
	// have used so far, by local task id; usageSent, by run key, when its
	// usage was last reported (acct.go).
	usage     map[string][]acct.Usage
	usageSent map[string]time.Time
	// oom marks, by step or tasks key, the units killed past their memory
	// limit, until their end is recorded (acct.go).
	oom map[string]bool
	// memDoubt holds, by step or tasks key, for how many more samples a
	// unit's sample past its memory limit only with processes unread
	// still counts (domain.JudgeMemory): the next past it meanwhile kills.
	memDoubt map[string]int
	// signalled wakes ProgressLoop after a step was signalled, so that a
	// checkpoint the signal asked for is reported at once (progress.go).
	signalled chan struct{}
	// attempts is, by job, the highest attempt this node has a step or
	// task record of (setStep, setTasks): a start of an older one is stale.
	attempts map[string]int32
	// tails are, by step key, the metrics files of running steps being
	// read (hypertune.go); dropped counts the lines dropped.
	tails   map[string]*tail
	dropped *prometheus.CounterVec

	// caughtUp is closed once the agent may start processes: at once,
	// unless Options.HoldStarts, then by CaughtUp. stopping is closed when
	// the shutdown begins, so that starts held back give up.
	caughtUp     chan struct{}
	caughtUpOnce sync.Once
	stopping     chan struct{}

	// drv writes every record and reloads memory after a write whose
	// outcome is unknown.
	drv *store.Driver

	// released is closed once the consumers are stopping (Release).
	released     chan struct{}
	releaseOnce  sync.Once
	shutdownOnce sync.Once
	watchers     sync.WaitGroup

	// lifeMu guards life, what the agent knows of its node and control
	// plane (Watch).
	lifeMu sync.Mutex
	life   *domain.Lifeline
	// closeWhy, once set, is the stop reason of the agent's own shutdown
	// (ShutdownBecause).
	closeWhy atomic.Pointer[string]
}

// process is a step's process group that this agent started.
type process struct {
	g ports.Group
	// gpus are the device indices the step sees (CUDA_VISIBLE_DEVICES),
	// for job accounting; none when not known.
	gpus []int
	done chan struct{} // closed once the process was reaped
	// errf is the step's error file, opened as its owner when it started
	// and kept for the stop line (tellStop): the agent never opens the
	// path again, which the job could meanwhile have made a link to a file
	// its owner may not write. Closed by watch, under the step's lock.
	errf *os.File
	// early is a signal (SignalStep) sent before the program had written
	// its progress file, sent again once it has (resignalReady); nil when
	// none. Under a.mu.
	early *earlySignal
}

// New loads the agent's step records and returns the App.
func New(ctx context.Context, opts Options) (*App, error) {
	if opts.Runtime == nil {
		return nil, errors.New("agent: no runtime to run steps with")
	}
	if opts.Clock == nil {
		opts.Clock = clockwork.NewRealClock()
	}
	if opts.Now == nil {
		opts.Now = opts.Clock.Now
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.KillGrace <= 0 {
		opts.KillGrace = 10 * time.Second
	}
	if opts.HeartbeatInterval <= 0 {
		opts.HeartbeatInterval = 2 * time.Second
	}
	if opts.SharedDir == "" {
		opts.SharedDir = opts.WorkDir
	}
	if opts.OrphanAfter <= 0 {
		opts.OrphanAfter = DefaultOrphanAfter
	}
	if opts.ProgressInterval <= 0 {
		opts.ProgressInterval = DefaultProgressInterval
	}
	if opts.AcctInterval == 0 {
		opts.AcctInterval = domain.DefaultAcctInterval
	}
	if opts.JobChecks.Timeout <= 0 {
		opts.JobChecks.Timeout = DefaultPrologTimeout
	}
	if opts.JobChecks.EpilogTimeout <= 0 {
		opts.JobChecks.EpilogTimeout = opts.JobChecks.Timeout
	}
	if opts.Container == nil {
		opts.Container, _ = steprt.New(steprt.Process)
	}
	opts.Metrics.fill()
	steps, err := adapters.LoadSteps(ctx, opts.Store)
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	tasks, err := adapters.LoadTasks(ctx, opts.Store)
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	a := &App{
		opts:       opts,
		log:        opts.Log,
		rt:         opts.Runtime,
		bootID:     envelope.NewID(),
		steps:      steps,
		procs:      map[string]*process{},
		tasks:      tasks,
		groups:     map[string]*taskGroup{},
		persisting: map[string]int{},
		attempts:   map[string]int32{},
		progress:   map[string]domain.Progress{},
		usage:      map[string][]acct.Usage{},
		usageSent:  map[string]time.Time{},
		oom:        map[string]bool{},
		memDoubt:   map[string]int{},
		signalled:  make(chan struct{}, 1),
		tails:      map[string]*tail{},
		dropped:    newDroppedLines(),
		caughtUp:   make(chan struct{}),
		stopping:   make(chan struct{}),
		released:   make(chan struct{}),
		life:       domain.NewLifeline(opts.Now(), opts.OrphanAfter),
	}
	for _, s := range steps {
		a.noteAttempt(s.Job, s.Attempt)
	}
	for _, t := range tasks {
		a.noteAttempt(t.Job, t.Attempt)
	}
	if !opts.HoldStarts {
		a.CaughtUp()
	}
	a.drv = store.NewDriver(opts.Store, a.reload)
	return a, nil
}

// reload brings the step and task records in memory back to what Redis
// holds, after a write whose outcome is unknown. It runs beside the work on
// other steps, so it only moves memory towards Redis: records being persisted
// (memory ahead by design) are left, and a record Redis lacks stays (it is
// one being written). What runs here (procs, groups) is not in Redis and is
// kept.
func (a *App) reload(ctx context.Context) error {
	steps, err := adapters.LoadSteps(ctx, a.opts.Store)
	if err != nil {
		return err
	}
	tasks, err := adapters.LoadTasks(ctx, a.opts.Store)
	if err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for k, s := range steps {
		if a.persisting[k] == 0 {
			a.setStep(k, s)
		}
	}
	for k, t := range tasks {
		if a.persisting[k] == 0 {
			a.setTasks(k, t)
		}
	}
	return nil
}

// apply writes tx with the inbox mark id through the driver. When the
// outcome is unknown and the mark is in Redis, the write landed (only this
// agent writes its node's marks, one event at a time per step): it reports
// applied, so that the caller goes on (starts the step, kills it) instead of
// leaving that to a redelivery that the mark would turn into a no-op.
func (a *App) apply(ctx context.Context, id string, tx *store.Tx) (bool, error) {
	if err := a.drv.Ready(ctx); err != nil {
		return false, err
	}
	applied, err := a.drv.Apply(ctx, id, tx, nil)
	if !store.OutcomeUnknown(err) || id == "" {
		return applied, err
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if seen, serr := a.opts.Store.Seen(sctx, id); serr == nil && seen {
		a.log.Warn("a write whose answer was lost had landed; going on", "event", id, "err", err)
		return true, nil
	}
	return false, err
}

// setStep sets the record of key in memory. The caller holds a.mu.
func (a *App) setStep(key string, s *domain.Step) {
	a.steps[key] = s
	a.noteAttempt(s.Job, s.Attempt)
}

// setTasks sets the task record of key in memory. The caller holds a.mu.
func (a *App) setTasks(key string, t *domain.Tasks) {
	a.tasks[key] = t
	a.noteAttempt(t.Job, t.Attempt)
}

// noteAttempt notes that the node has a record of job's attempt. The
// caller holds a.mu (or owns a).
func (a *App) noteAttempt(job string, attempt int32) {
	if attempt > a.attempts[job] {
		a.attempts[job] = attempt
	}
}

// highestAttempt is the highest attempt of job this node has a record of.
func (a *App) highestAttempt(job string) int32 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.attempts[job]
}

// CaughtUp lets the agent start the processes of the starts it recorded
// (see Options.HoldStarts). Calling it again does nothing.
func (a *App) CaughtUp() {
	a.caughtUpOnce.Do(func() { close(a.caughtUp) })
}

// beginClosing marks the agent stopping: no step starts from now on, and
// starts held back (awaitCaughtUp) give up. The caller holds a.mu.
func (a *App) beginClosing() {
	if !a.closing {
		a.closing = true
		close(a.stopping)
	}
}

// awaitCaughtUp waits until the agent may start processes, or stops; the
// caller then finds the agent closing.
func (a *App) awaitCaughtUp() {
	select {
	case <-a.caughtUp:
	case <-a.stopping:
	}
}

// BootID is this start's boot id, as sent in AgentRegistered and heartbeats.
func (a *App) BootID() string { return a.bootID }

// lockStep takes the lock that orders the work on the step key and returns
// its unlock. Take it before mu, never the other way round.
func (a *App) lockStep(key string) (unlock func()) {
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	m := &a.stepMu[h.Sum32()%stepLocks]
	m.Lock()
	return m.Unlock
}

// step returns the record of key (nil when there is none) and whether the
// agent is stopping.
func (a *App) step(key string) (*domain.Step, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.steps[key], a.closing
}

// stepID is the value of StepIDEnv for a step key.
func (a *App) stepID(key string) string { return a.opts.Self.Node + "#" + key }

// Recover settles what a predecessor left, as slurmd does with the
// slurmstepds that outlived it: a step it recorded running or starting whose
// shim still runs is adopted (watched until it ends, and reported then); one
// that ended meanwhile is reported EXITED with the exit code its shim
// recorded; only one of which nothing remains is reported LOST (its
// leftover processes, if any, are killed: nothing runs unobserved).
// Terminal records older than the inbox window are pruned, and the agent
// registers with a new boot id, its node's host boot id and how many steps
// it adopted. Call it once, before consuming.
func (a *App) Recover(ctx context.Context) error {
	a.mu.Lock()
	locked := true
	defer func() {
		if locked {
			a.mu.Unlock()
		}
	}()
	now := a.opts.Now()
	var tx store.Tx
	var prune []string
	type settled struct {
		recs  []*domain.Step
		adopt ports.Process
	}
	found := map[string]settled{}
	var wg sync.WaitGroup
	var lmu sync.Mutex
	for key, s := range a.steps {
		switch {
		case s.Phase.Terminal():
			if !s.Ended.IsZero() && now.Sub(s.Ended) > store.InboxTTL {
				prune = append(prune, key)
			}
		case s.Phase == domain.Running || s.Phase == domain.Starting:
			wg.Go(func() {
				recs, p := a.settle(key, s, now)
				lmu.Lock()
				found[key] = settled{recs, p}
				lmu.Unlock()
			})
		}
	}
	wg.Wait()
	keys := make([]string, 0, len(found))
	for k := range found {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	adopted := 0
	for _, k := range keys {
		recs := found[k].recs
		for i, r := range recs {
			if i == len(recs)-1 && r.Phase.Terminal() {
				// A step that ended while no agent watched it: what its
				// program wrote last (a checkpoint saved as it was told
				// to stop) goes out ahead of its end, as a watched
				// step's does (lastProgress). Nothing of the run was
				// reported by this agent yet: all of it counts as new,
				// and the scheduler keeps the highest.
				_, last := a.lastProgress(r.Key(), r.Job, r.Attempt, r.OutPath, domain.Progress{})
				for _, e := range last {
					tx.Emit(e)
				}
			}
			if err := adapters.PutStep(&tx, r, a.opts.Self, true); err != nil {
				return err
			}
		}
		if found[k].adopt != nil {
			adopted++
		}
	}
	for _, k := range prune {
		tx.HDel(adapters.KeySteps, k)
	}
	foundTasks, pruneTasks, err := a.recoverTasks(&tx, now)
	if err != nil {
		return err
	}
	// Where the tails of the adopted steps' metrics files stood; the
	// others' positions are dropped.
	positions, err := adapters.LoadMetricPositions(ctx, a.opts.Store)
	if err != nil {
		return err
	}
	for k := range positions {
		if found[k].adopt == nil {
			tx.HDel(adapters.KeyMetrics, k)
		}
	}
	for _, f := range foundTasks {
		if f.adopt != nil {
			adopted++
		}
	}
	reg := domain.Registered(a.opts.Self, a.opts.Hostname, os.Getpid(), a.opts.GPUs, a.bootID)
	reg.HostBootId, reg.AdoptedSteps = a.hostBootID(), int32(adopted)
	reg.SimulatedGpus = a.opts.SimulatedGPUs
	reg.CheckAddr = a.opts.CheckAddr
	regEv, err := adapters.Event(reg)
	if err != nil {
		return err
	}
	tx.Set(adapters.KeyBootID, []byte(a.bootID))
	tx.Emit(regEv)
	// Not under mu: the driver's reload after a write whose outcome is
	// unknown takes it. Nothing else runs yet.
	a.mu.Unlock()
	locked = false
	if _, err := a.drv.Apply(ctx, "", &tx, nil); err != nil {
		return fmt.Errorf("agent: recover and register: %w", err)
	}
	a.mu.Lock()
	locked = true
	for _, k := range keys {
		f := found[k]
		if len(f.recs) > 0 {
			a.setStep(k, f.recs[len(f.recs)-1])
		}
		s := a.steps[k]
		switch {
		case f.adopt != nil:
			p := &process{g: f.adopt.Group(), done: make(chan struct{}), errf: a.reopenErr(k, s)}
			a.procs[k] = p
			a.running.Add(1)
			a.watchers.Add(1)
			a.resumeMetrics(k, s, positions)
			go a.watch(k, f.adopt, p)
			a.log.Info("step adopted across an agent restart", "step", k, "pid", p.g.PID)
		case s.Phase == domain.Lost:
			_ = os.RemoveAll(a.progressDir(k))
			a.log.Warn("step lost across an agent restart", "step", k, "why", s.Message)
		default:
			_ = os.RemoveAll(a.progressDir(k))
			a.rt.Forget(k)
			a.log.Info("step ended while the agent was down", "step", k, "phase", s.Phase, "exit_code", s.ExitCode)
		}
	}
	for _, k := range prune {
		delete(a.steps, k)
	}
	// Exits a predecessor had recorded but not yet dropped: only the
	// adopted units' may still come.
	a.rt.Sweep(func(name string) bool {
		if s := a.steps[name]; s != nil && !s.Phase.Terminal() {
			return true
		}
		// A task's name is its tasks' key, "/", its local id.
		i := strings.LastIndexByte(name, '/')
		return i > 0 && foundTasks[name[:i]].adopt != nil
	})
	for k, f := range foundTasks {
		if len(f.recs) > 0 {
			a.setTasks(k, f.recs[len(f.recs)-1])
		}
		t := a.tasks[k]
		switch {
		case f.adopt != nil:
			g := &taskGroup{done: make(chan struct{})}
			for _, p := range f.adopt {
				if p.Group().PID > 0 {
					g.groups = append(g.groups, p.Group())
				}
			}
			a.groups[k] = g
			a.watchers.Add(1)
			go a.watchTasks(k, f.adopt, g)
			a.log.Info("tasks adopted across an agent restart", "tasks", k, "groups", groupIDs(g.groups))
		case t.Phase == domain.Lost:
			a.log.Warn("tasks lost across an agent restart", "tasks", k, "why", t.Message)
		default:
			for l := range t.NTasks {
				a.rt.Forget(taskName(k, l))
			}
			a.log.Info("tasks ended while the agent was down", "tasks", k, "phase", t.Phase, "exit_codes", t.ExitCodes)
		}
	}
	for _, k := range pruneTasks {
		delete(a.tasks, k)
	}
	a.log.Info("agent registered", "node", a.opts.Self.Node, "boot_id", a.bootID, "adopted_steps", adopted)
	return nil
}

// hostBootID is the id of the node's own boot: <work dir>/host_boot_id
// (the provisioner writes a new one whenever it boots the node), else the
// kernel's.
func (a *App) hostBootID() string {
	for _, p := range []string{filepath.Join(a.opts.WorkDir, "host_boot_id"), "/proc/sys/kernel/random/boot_id"} {
		if b, err := os.ReadFile(p); err == nil && strings.TrimSpace(string(b)) != "" {
			return strings.TrimSpace(string(b))
		}
	}
	return ""
}

// settle finds what remains of a step a predecessor started (rec, running or
// starting) and decides it (domain.Recover): the records to write, and the
// process to adopt when it still runs. A step of which only processes
// outside a shim remain (a predecessor without shims, or a shim killed
// alone) has them killed and is lost.
func (a *App) settle(key string, s *domain.Step, now time.Time) ([]*domain.Step, ports.Process) {
	var g ports.Group
	if s.Phase == domain.Running {
		g = ports.Group{PID: s.PID, Start: s.PIDStart}
	}
	var r domain.Remains
	p, exit := a.rt.Recover(key, g)
	switch {
	case p != nil:
		r.Running, r.PID, r.PIDStart = true, p.Group().PID, p.Group().Start
	case exit != nil:
		r.Exit = &domain.Exit{Code: exit.Code, Signal: exit.Signal, OOM: exit.OOM, Unknown: exit.Unknown}
		r.PID = s.PID
		// What the step left in its group ends with it, as when the agent
		// watches (found by the id in their environment: the group's
		// leader is gone).
		for _, g := range a.rt.Adopt(StepIDEnv+"="+a.stepID(key), s.OwnerUID, s.Owner) {
			_ = a.rt.Kill(g)
		}
	default:
		r.Why = a.killRemains(key, s)
	}
	recs, adopt := domain.Recover(s, r, now)
	if !adopt {
		p = nil
	}
	return recs, p
}

// killRemains kills whatever still runs of a step a predecessor started and of
// which no shim remains, and says what it found.
func (a *App) killRemains(key string, s *domain.Step) string {
	var groups []ports.Group
	if g := (ports.Group{PID: s.PID, Start: s.PIDStart}); s.Phase == domain.Running && a.rt.Alive(g) {
		groups = append(groups, g)
	}
	if s.Phase == domain.Starting || len(groups) == 0 {
		// Started but never recorded, or a group whose leader died: find
		// its processes by the id in their environment.
		groups = append(groups, a.rt.Adopt(StepIDEnv+"="+a.stepID(key), s.OwnerUID, s.Owner)...)
	}
	if len(groups) == 0 {
		if s.Phase == domain.Starting {
			return "the agent stopped while starting the step"
		}
		return fmt.Sprintf("the agent restarted and the step's process (pid %d) was gone", s.PID)
	}
	for _, g := range groups {
		a.terminate(g)
	}
	return fmt.Sprintf("the agent restarted; the step's processes (groups %v) were no longer its children and were killed", groupIDs(groups))
}

// groupIDs returns the ids of groups, for messages.
func groupIDs(groups []ports.Group) []int {
	ids := make([]int, len(groups))
	for i, g := range groups {
		ids[i] = g.PID
	}
	return ids
}

// terminate kills a process group that is not our child: SIGTERM, SIGKILL
// after the grace period.
func (a *App) terminate(g ports.Group) {
	if err := a.rt.Signal(g, syscall.SIGTERM); err != nil {
		a.log.Warn("terminate step group", "pgid", g.PID, "err", err)
	}
	if !a.rt.WaitGone(g, a.opts.KillGrace) {
		_ = a.rt.Kill(g)
	}
}

// record sets a step's record in memory and writes it (with its event when
// emit), retrying until it is written (persist); first (a run's last progress:
// lastProgress) goes out in the same write, ahead of the step's event. The
// caller holds the step's lock (lockStep), not a.mu.
func (a *App) record(s *domain.Step, emit bool, first ...envelope.Event) bool {
	a.mu.Lock()
	a.setStep(s.Key(), s)
	a.persisting[s.Key()]++
	a.mu.Unlock()
	defer a.persisted(s.Key())
	var tx store.Tx
	for _, e := range first {
		tx.Emit(e)
	}
	if err := adapters.PutStep(&tx, s, a.opts.Self, emit); err != nil {
		a.log.Error("encode step", "step", s.Key(), "err", err)
		return false
	}
	return a.persist(&tx, "step", s.Key(), string(s.Phase))
}

// persisted ends what record (or recordTasks) began for key.
func (a *App) persisted(key string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.persisting[key]--; a.persisting[key] <= 0 {
		delete(a.persisting, key)
	}
}

// persist writes tx, retrying with backoff until Redis takes it: a record
// the agent writes on its own (a process started or ended) has no
// redelivery to fall back on, and nothing else would tell the scheduler
// (a step whose end is not written holds its nodes, and a stop for it
// finds it ended in memory and does nothing). Only once the agent stops
// does it give up, after Options.PersistTimeout: what and key name the
// record in the logs; a record that could not be written is settled by the
// next start. A write Redis refuses for what it is (invalid, the wrong
// type of key) is not retried. It reports whether the record was written.
func (a *App) persist(tx *store.Tx, what, key, phase string) bool {
	delay := 50 * time.Millisecond
	var deadline <-chan time.Time
	stopping := a.stopping
	for {
		// Written again after a write whose outcome is unknown: the same
		// record, and the same event id, so a second copy is harmless.
		ctx, cancel := context.WithTimeout(context.Background(), a.persistFor())
		_, err := a.apply(ctx, "", tx)
		cancel()
		if err == nil {
			return true
		}
		var inv *errs.InvalidError
		if errors.As(err, &inv) || errors.Is(err, errs.FailedPrecondition) {
			a.log.Error("could not record "+what+"; a restart will settle it", what, key, "phase", phase, "err", err)
			return false
		}
		a.log.Warn("recording "+what+" failed; retrying", what, key, "phase", phase, "err", err)
		select {
		case <-stopping:
			// The agent stops: what is left is bounded from now on.
			stopping, deadline = nil, time.After(a.persistFor())
			continue
		case <-deadline:
			a.log.Error("could not record "+what+" before the agent stopped; a restart will settle it", what, key, "phase", phase, "err", err)
			return false
		case <-time.After(delay):
		}
		delay = min(2*delay, 2*time.Second)
	}
}

// persistFor is Options.PersistTimeout, or its default.
func (a *App) persistFor() time.Duration {
	if a.opts.PersistTimeout > 0 {
		return a.opts.PersistTimeout
	}
	return persistTimeout
}

// StartStep applies a StartStep delivered as event id: for this node's steps
// not seen before it records the intent (STARTING, with the inbox mark) and
// returns; a goroutine of its own then starts the process and reports
// STEP_RUNNING (or STEP_FAILED_TO_START), so that the next command is handled
// while the process starts.
func (a *App) StartStep(ctx context.Context, id string, cmd *eventsv1.StartStep) error {
	key := domain.Key(cmd.GetJob(), cmd.GetAttempt())
	unlock := a.lockStep(key)
	existing, closing := a.step(key)
	if closing {
		unlock()
		// Hold the record until the consumer stops, so that it is not
		// committed and the next start of this agent runs it.
		select {
		case <-a.released:
		case <-ctx.Done():
		}
		return ErrShuttingDown
	}
	defer unlock()
	rec, skip := domain.Start(a.opts.Self, existing, a.highestAttempt(cmd.GetJob()), cmd, a.opts.Now())
	if why := unopened(ctx); why != "" && skip == "" && !rec.Phase.Terminal() {
		// Sealed for another registration of this node: it cannot run
		// here, and the scheduler hears so at once (LOST, marked never
		// run: the control plane's race, not the job's nor the node's),
		// rather than waiting on a start that never comes.
		rec = domain.NotOpened(rec, why, a.opts.Now())
	}
	if skip != "" {
		if cmd.GetNode() == a.opts.Self.Node {
			a.log.Info("not starting step", "step", key, "event", id, "why", skip)
		}
		return nil
	}
	// The intent is durable, with the inbox mark, before the process exists:
	// no redelivery, whatever its event id, can start it a second time.
	// A refused start (a stale attempt) is reported at once.
	refused := rec.Phase.Terminal()
	if !refused {
		rec.OwnerUID = a.ownerUID(cmd.GetUser())
	}
	var tx store.Tx
	if err := adapters.PutStep(&tx, rec, a.opts.Self, refused); err != nil {
		return err
	}
	applied, err := a.apply(ctx, id, &tx)
	if err != nil {
		return fmt.Errorf("record start of %s: %w", key, err)
	}
	if !applied {
		return nil
	}
	if refused {
		a.mu.Lock()
		a.setStep(key, rec)
		a.mu.Unlock()
		a.log.Warn("refused to start a step", "step", key, "event", id, "why", rec.Message)
		return nil
	}
	a.mu.Lock()
	a.setStep(key, rec)
	closing = a.closing
	if !closing {
		// Counted while closing is false under mu, so Shutdown's wait
		// covers it.
		a.watchers.Add(1)
	}
	a.mu.Unlock()
	if closing {
		// The agent began stopping meanwhile: the step will not run here,
		// and the scheduler hears so.
		a.record(domain.ShutdownStop(a.opts.Self, rec, a.shutdownReason(), a.opts.Now()).Rec, true)
		return nil
	}
	go a.launch(key, rec, cmd)
	return nil
}

// ownerUID is the uid that the processes of user (a step's or tasks'
// owner, as StartStep.user names it) will run as, kept in their record
// from its Starting record on (domain.Step.OwnerUID) so that a restarted
// agent looks for those processes among that uid's without resolving the
// name again, which may fail by then and would have every process read
// (Runtime.Adopt). nil where the runtime refuses user: the start then
// fails, saying why, before any process exists.
func (a *App) ownerUID(user string) *uint32 {
	acct, err := a.rt.Account(user)
	if err != nil {
		return nil
	}
	return &acct.UID
}

// shutdownReason is why the agent stops its steps: "agent shutting down",
// or what ShutdownBecause was given.
func (a *App) shutdownReason() string {
	if why := a.closeWhy.Load(); why != nil {
		return *why
	}
	return "agent shutting down"
}

// launch starts the process of a step recorded STARTING (rec) and records it
// RUNNING, unless a stop came first. It holds the step's lock throughout, so
// a stop or a signal for the step waits until the process exists.
func (a *App) launch(key string, rec *domain.Step, cmd *eventsv1.StartStep) {
	// Not before the backlog is worked through (Options.HoldStarts): a
	// stop there records the step KILLED, and it never starts.
	a.awaitCaughtUp()
	// The prolog runs before the step's lock is taken, so that a stop of
	// the step meanwhile is recorded (KILLED) at once and wins below.
	refuse := ""
	if a.hasProlog() {
		refuse = a.prolog(key)
	}
	unlock := a.lockStep(key)
	defer unlock()
	if cur, closing := a.step(key); cur != rec || closing {
		// A StopStep recorded the step KILLED before it started, or the
		// agent is stopping.
		if cur == rec {
			a.record(domain.ShutdownStop(a.opts.Self, rec, a.shutdownReason(), a.opts.Now()).Rec, true)
		}
		a.watchers.Done()
		return
	}
	if refuse != "" {
		a.record(domain.StartFailed(rec, refuse, a.opts.Now()), true)
		a.watchers.Done()
		return
	}
	pr, errf, outPath, err := a.spawn(key, cmd)
	if err != nil {
		a.log.Warn("step failed to start", "step", key, "err", err)
		a.record(domain.StartFailed(rec, err.Error(), a.opts.Now()), true)
		a.watchers.Done()
		return
	}
	errPath := errf.Name()
	p := &process{g: pr.Group(), done: make(chan struct{}), errf: errf, gpus: visibleDevices(cmd.GetEnv())}
	a.mu.Lock()
	a.procs[key] = p
	closing := a.closing
	a.mu.Unlock()
	a.running.Add(1)
	go a.watch(key, pr, p) // it records the end once this unlocks the step
	a.log.Info("step started", "step", key, "pid", p.g.PID, "output", cmd.GetOutputPath())
	started := domain.Started(rec, p.g.PID, p.g.Start, errPath)
	owner := cmd.GetUser()
	started.OutPath, started.Owner = outPath, &owner
	a.record(started, true)
	if closing {
		// The shutdown began while the process started; nothing may run
		// unobserved after the agent.
		if d := domain.ShutdownStop(a.opts.Self, started, a.shutdownReason(), a.opts.Now()); d.Rec != nil {
			a.record(d.Rec, false)
			a.kill(key)
		}
	}
}

// openOutputs opens a step's stdout (out) and stderr (errPath, or out when
// empty or the same file) for appending, as the step's owner user (the
// runtime's OpenOutput: where the owner may not write, the step fails and
// the file is left as it was), creating them and their directories,
// emptied first unless keep (--open-mode=append); relative paths are taken
// against dir. stdout and stderr are the same *os.File when joined (closing
// it twice is harmless). Appending, even to an emptied file, keeps the
// step's processes from writing over each other.
func (a *App) openOutputs(user, dir, out, errPath string, keep bool) (stdout, stderr *os.File, err error) {
	abs := func(p string) string {
		switch {
		case p == "":
			return ""
		case !filepath.IsAbs(p):
			return filepath.Join(dir, p)
		}
		return filepath.Clean(p)
	}
	out, errPath = abs(out), abs(errPath)
	if stdout, err = a.rt.OpenOutput(user, out, keep); err != nil {
		return nil, nil, fmt.Errorf("open output %s: %w", out, err)
	}
	if errPath == "" || errPath == out {
		return stdout, stdout, nil
	}
	if stderr, err = a.rt.OpenOutput(user, errPath, keep); err != nil {
		stdout.Close()
		return nil, nil, fmt.Errorf("open error file %s: %w", errPath, err)
	}
	return stdout, stderr, nil
}

// spawn starts a step's process through the runtime, in a group of its
// own, as the job's owner (cmd.user; refused, before any file is touched,
// where the owner may not run jobs here), in the step's working directory
// (work_dir, default the shared dir; made as the owner when missing),
// stdout appended to output_path and stderr to error_path (output_path when
// empty), both opened as the owner; relative paths are taken against the
// working directory. It returns the process, its error file, open (the
// caller closes it), and its output file's path.
func (a *App) spawn(key string, cmd *eventsv1.StartStep) (ports.Process, *os.File, string, error) {
	user := cmd.GetUser()
	acct, err := a.rt.Account(user)
	if err != nil {
		return nil, nil, "", err
	}
	spec := ports.Spec{Nice: a.opts.JobNice, User: user, Name: key}
	switch {
	case strings.HasPrefix(cmd.GetScript(), "#!"):
		// Run as Slurm does: the script itself is executed, so the kernel
		// starts the interpreter its first line names (#!/bin/bash, with
		// its argument, #!/usr/bin/env python3, …).
		spec.Script = cmd.GetScript()
	case cmd.GetScript() != "":
		spec.Argv = []string{"/bin/sh", "-c", cmd.GetScript()}
	case len(cmd.GetCommand()) > 0 && cmd.GetCommand()[0] != "":
		spec.Argv = cmd.GetCommand()
	default:
		return nil, nil, "", errors.New("the step has neither a script nor a command")
	}
	dir := cmd.GetWorkDir()
	if dir == "" {
		dir = a.opts.SharedDir
	}
	replica, err := replicaEnv(cmd)
	if err != nil {
		return nil, nil, "", err
	}
	if err := a.contain(&spec, cmd, dir); err != nil {
		return nil, nil, "", err
	}
	if hasHome(user) && filepath.Clean(dir) == filepath.Join(a.opts.SharedDir, user) {
		// The owner's home, where a job submitted without a directory
		// runs: made as the login makes it (the shared dir above it is
		// root's, so the owner could not make it).
		a.userHome(user, user)
	}
	if err := a.rt.MakeDir(user, dir); err != nil {
		return nil, nil, "", fmt.Errorf("create working directory: %w", err)
	}
	out := cmd.GetOutputPath()
	if out == "" {
		out = filepath.Join(a.opts.WorkDir, fmt.Sprintf("slurm-%s.%d.out", cmd.GetJobId(), cmd.GetAttempt()))
	}
	stdout, stderr, err := a.openOutputs(user, dir, out, cmd.GetErrorPath(), cmd.GetAppendOutput())
	if err != nil {
		return nil, nil, "", err
	}
	// The child gets its own copies; stderr is kept for the stop line.
	if stdout != stderr {
		defer stdout.Close()
	}
	a.prepareModelDir(user, cmd.GetModelDir())
	a.prepareProgress(user, key)
	tbDir := ""
	if cmd.GetEnv()[domain.MetricFileEnv] == "" {
		replica[domain.MetricFileEnv] = a.metricsFile(key)
		tbDir = a.tensorboardDir(key, cmd.GetEnv(), replica)
	}
	spec.Dir, spec.Env, spec.Stdout, spec.Stderr = dir, a.env(key, cmd, acct, replica), stdout, stderr
	// Last, so that it wins over a LOOM_TOKEN the submitter's exported
	// environment carried.
	spec.Env = append(spec.Env, a.workloadEnv(key, cmd.GetJob(), cmd.GetEnv())...)
	if replica[domain.MetricFileEnv] != "" {
		a.prepareMetrics(user, key, cmd.GetJob(), cmd.GetAttempt(), tbDir, acct.UID)
	}
	p, err := a.rt.Start(spec)
	if err != nil {
		a.dropMetrics(key)
		stderr.Close()
		return nil, nil, "", err
	}
	return p, stderr, stdout.Name(), nil
}

// replicaEnv is the environment of a CustomJob's replica (its env has
// LOOM_WORKER_POOLS; libs/workerenv): CLUSTER_SPEC, TF_CONFIG and
// torchrun's variables, from the node's place in the job. A step of any
// other job gets none; one whose pools, nodes or port do not add up fails
// to start with the reason.
func replicaEnv(cmd *eventsv1.StartStep) (map[string]string, error) {
	pools, ok := cmd.GetEnv()[workerenv.PoolsEnv]
	if !ok {
		return map[string]string{}, nil
	}
	env, err := workerenv.Env(workerenv.Input{Pools: pools, NodeIndex: int(cmd.GetNodeIndex()),
		Hostnames: cmd.GetNodeHostnames(), JobID: cmd.GetJobId(), Env: cmd.GetEnv()})
	if err != nil {
		return nil, fmt.Errorf("replica environment: %w", err)
	}
	return env, nil
}

// contain runs spec's argv through the node's container runtime
// (Options.Container) when the step names an image (LOOM_CONTAINER_IMAGE):
// the process runtime leaves it as it is; a site's template wraps it
// (podman run … {image} argv). The shim then runs the wrapped argv like any
// other, so stops, signals, exits and adoption after a restart are the
// same. A batch script that starts with "#!" is handed to the kernel as a
// file descriptor and cannot be wrapped: with a template and an image it
// fails to start, saying so.
func (a *App) contain(spec *ports.Spec, cmd *eventsv1.StartStep, dir string) error {
	image := cmd.GetEnv()[steprt.ImageEnv]
	if image == "" || a.opts.Container.Name() == steprt.Process {
		return nil
	}
	if spec.Script != "" {
		return fmt.Errorf("the container runtime runs commands, and this step is a batch script; drop %s or submit a command", steprt.ImageEnv)
	}
	argv, err := a.opts.Container.Command(steprt.Command{Argv: spec.Argv, Image: image, WorkDir: dir})
	if err != nil {
		return fmt.Errorf("container runtime: %w", err)
	}
	spec.Argv = argv
	return nil
}

// prepareModelDir gives a job that declared a model output the directory
// the scheduler gave it (StartStep.model_dir, <shared dir>/models/<model>/
// job-<id>), its owner's, mode 0700: the owner may not make it under the
// shared dir, and no other user may read the model. Only that one: a
// LOOM_MODEL_DIR the job set itself once had root make any directory under
// models/, through a link the owner left in a directory of theirs (root on
// the node: a systemd drop-in), or claim another job's ahead of it. A
// failure is logged: the job's own writes then say why.
func (a *App) prepareModelDir(user, dir string) {
	models := filepath.Join(a.opts.SharedDir, "models")
	if dir == "" || !within(models, dir) {
		return
	}
	// models/<model>/job-<id>: parents only root makes (a model id has no
	// '/'), so no directory of the owner's lies on the way.
	if rel, _ := filepath.Rel(models, filepath.Clean(dir)); strings.Count(rel, string(filepath.Separator)) != 1 {
		a.log.Warn("not making a model directory that is not models/<model>/job-<id>", "user", user, "dir", dir)
		return
	}
	if err := a.rt.GiveDir(user, dir); err != nil {
		a.log.Warn("could not make a job's model directory", "user", user, "dir", dir, "err", err)
	}
}

// within reports whether path lies strictly under dir (both clean and
// absolute once joined: no ".." escapes).
func within(dir, path string) bool {
	rel, err := filepath.Rel(filepath.Clean(dir), filepath.Clean(path))
	return err == nil && filepath.IsAbs(path) && rel != "." && filepath.IsLocal(rel)
}

// env is a step's environment: a clean base (PATH; HOME = the shared dir
// unless the step's variables or nodeVars say it), the step's own
// variables, what a Slurm job learns from the node, and the step id the
// agent finds it by.
func (a *App) env(key string, cmd *eventsv1.StartStep, acct ports.Account, extra map[string]string) []string {
	node := a.nodeVars(cmd.GetEnv(), cmd.GetUser(), acct)
	env := []string{"PATH=" + a.jobPath(cmd.GetEnv()["PATH"])}
	if cmd.GetEnv()["HOME"] == "" && node["HOME"] == "" {
		env = append(env, "HOME="+a.opts.SharedDir)
	}
	vars := maps.Clone(cmd.GetEnv())
	if vars == nil {
		vars = map[string]string{}
	}
	// The replica's place in its job is the node's to say: it wins over
	// the job's own variables of the same names.
	maps.Copy(vars, extra)
	names := make([]string, 0, len(vars))
	for k := range vars {
		if k != "PATH" {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	for _, k := range names {
		env = append(env, k+"="+vars[k])
	}
	for _, k := range slices.Sorted(maps.Keys(node)) {
		env = append(env, k+"="+node[k])
	}
	env = append(env, a.opts.NodeEnv...)
	return append(env, domain.ProgressEnv+"="+a.progressFile(key), StepIDEnv+"="+a.stepID(key))
}

// nodeVars are what a Slurm job's processes (their env has SLURM_JOB_ID)
// learn from the node, unless their env says it: SLURM_JOB_UID and
// SLURM_JOB_GID, the ids they run as here (acct: their owner's account,
// the runtime's Account of owner), USER and LOGNAME, the job's owner, and
// HOME, the owner's home, <shared dir>/<user> (a login environment has
// them, as `loom clusters login` gives them: --export=NONE jobs too; see
// userHome), and LOOM_GATEWAY, where their srun and scontrol find Loom
// (Options.Gateway).
func (a *App) nodeVars(vars map[string]string, owner string, acct ports.Account) map[string]string {
	if vars["SLURM_JOB_ID"] == "" {
		return nil
	}
	out := map[string]string{}
	if vars["LOOM_GATEWAY"] == "" && a.opts.Gateway != "" {
		out["LOOM_GATEWAY"] = a.opts.Gateway
	}
	if vars["SLURM_JOB_UID"] == "" {
		out["SLURM_JOB_UID"] = strconv.FormatUint(uint64(acct.UID), 10)
	}
	if vars["SLURM_JOB_GID"] == "" {
		out["SLURM_JOB_GID"] = strconv.FormatUint(uint64(acct.GID), 10)
	}
	if u := vars["SLURM_JOB_USER"]; u != "" {
		for _, k := range []string{"USER", "LOGNAME"} {
			if vars[k] == "" {
				out[k] = u
			}
		}
		if vars["HOME"] == "" && hasHome(u) {
			out["HOME"] = a.userHome(u, owner)
		}
	}
	return out
}

// loginName is a user name that may name a home directory: the rule
// `loom clusters login` applies (useradd's), which keeps it one path
// element. A job whose owner's name breaks it, or is one of the shared
// dir's own entries (clusterspec.HomeName), gets the shared dir as HOME.
var loginName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.-]{0,31}$`)

// hasHome reports whether user has a home under the shared dir, <shared
// dir>/<user>: the one rule for both the HOME a job gets and the working
// directory the agent makes as that home (a login name, not one of the
// shared dir's own entries).
func hasHome(user string) bool { return loginName.MatchString(user) && clusterspec.HomeName(user) }

// userHome is the home of user on this cluster, <shared dir>/<user>: what
// `loom clusters login` gives a session, so that a job gets the same HOME
// whether its environment was exported from that session or not
// (--export=NONE), as Slurm gives a job its owner's home. It is made when
// missing, as the login makes it: the owner's, mode 0700 (the runtime's
// GiveDir), when user is the job's owner (who the job runs as; "" runs it
// as the agent); a home found there that is not the owner's is left alone.
// A failure is logged, and the job runs with it anyway, as Slurm's would
// with a home that is not there.
func (a *App) userHome(user, owner string) string {
	home := filepath.Join(a.opts.SharedDir, user)
	if owner != "" && owner != user {
		return home
	}
	if err := a.rt.GiveDir(owner, home); err != nil {
		a.log.Warn("could not make a job owner's home", "user", user, "home", home, "err", err)
	}
	return home
}

// jobPath is the PATH of a step or task whose environment says path: that
// (the agent's own, else defaultPath, when it says none) led by SlurmBin
// when set — the job's own PATH may name a directory of links that is gone
// on this node (a login session's), or a real Slurm's srun.
func (a *App) jobPath(path string) string {
	if path == "" {
		path = os.Getenv("PATH")
	}
	if path == "" {
		path = defaultPath
	}
	bin := a.opts.SlurmBin
	if bin == "" || path == bin || strings.HasPrefix(path, bin+string(os.PathListSeparator)) {
		return path
	}
	return bin + string(os.PathListSeparator) + path
}

// watch reaps a step's process and reports its end.
func (a *App) watch(key string, pr ports.Process, p *process) {
	defer a.watchers.Done()
	exit := pr.Wait()
	// What the step left behind in its group ends with it, as under Slurm.
	_ = a.rt.Kill(p.g)
	close(p.done)
	// Its last metrics go out before its end is recorded (and so before
	// its end on the step's partition).
	a.finishMetrics(key)

	unlock := a.lockStep(key)
	defer unlock()
	a.mu.Lock()
	delete(a.procs, key)
	rec := a.steps[key]
	a.mu.Unlock()
	if p.errf != nil {
		_ = p.errf.Close()
	}
	a.running.Add(-1)
	// Whatever ended it (its exit, a stop), the node's epilog checks run,
	// once its end is recorded.
	defer a.epilog(key)
	de := domainExit(exit)
	de.Usage = a.finalUsage(key, 0, exit, true)
	// Killed past its memory: out of memory, unless it exited cleanly
	// first (the kill raced with its end).
	de.OOM = a.takeOOM(key) && exit.Code != 0 || de.OOM
	if rec == nil || rec.Phase != domain.Running {
		return
	}
	end := domain.Ended(rec, de, a.opts.Now())
	a.log.Info("step ended", "step", key, "phase", end.Phase, "exit_code", exit.Code, "signal", exit.Signal, "oom", exit.OOM)
	// What its program wrote last (a checkpoint saved on a signal just
	// before it exited) goes out with its end, ahead of it.
	a.mu.Lock()
	prev := a.progress[key]
	a.mu.Unlock()
	_, last := a.lastProgress(key, rec.Job, rec.Attempt, rec.OutPath, prev)
	if a.record(end, true, last...) {
		// Recorded; an end that could not be (the agent stopped first)
		// keeps its exit for the next start, which records it.
		a.rt.Forget(key)
	}
	a.dropProgress(key)
}

// domainExit is a runtime's exit as the domain records it.
func domainExit(e ports.Exit) domain.Exit {
	return domain.Exit{Code: e.Code, Signal: e.Signal, OOM: e.OOM, Unknown: e.Unknown}
}

// StopStep applies a StopStep delivered as event id: the step's process
// group gets SIGTERM, SIGKILL after the grace period, and its end is
// reported as STEP_KILLED. A step still being started is stopped once its
// process exists; one not started yet is recorded KILLED and never starts.
// The run's job-step tasks on this node (srun) are stopped with it.
func (a *App) StopStep(ctx context.Context, id string, cmd *eventsv1.StopStep) error {
	if err := a.stopStep(ctx, id, cmd); err != nil {
		return err
	}
	if cmd.GetNode() == a.opts.Self.Node {
		reason := cmd.GetReason()
		if reason == "" {
			reason = "stop requested"
		}
		a.stopRunTasks(domain.Key(cmd.GetJob(), cmd.GetAttempt()), reason)
	}
	return nil
}

func (a *App) stopStep(ctx context.Context, id string, cmd *eventsv1.StopStep) error {
	key := domain.Key(cmd.GetJob(), cmd.GetAttempt())
	unlock := a.lockStep(key)
	defer unlock()
	existing, _ := a.step(key)
	d := domain.Stop(a.opts.Self, existing, cmd, a.opts.Now())
	if d.Rec == nil {
		return nil
	}
	var tx store.Tx
	if err := adapters.PutStep(&tx, d.Rec, a.opts.Self, d.Rec.Phase.Terminal()); err != nil {
		return err
	}
	applied, err := a.apply(ctx, id, &tx)
	if err != nil {
		return fmt.Errorf("record stop of %s: %w", key, err)
	}
	if !applied {
		return nil
	}
	a.mu.Lock()
	a.setStep(key, d.Rec)
	a.mu.Unlock()
	if d.Kill {
		a.tellStop(d.Rec, cmd.GetCause())
		a.kill(key)
	}
	return nil
}

// reopenErr opens the error file of step k, adopted across a restart, for
// its stop line (tellStop), as the non-adopted step keeps the file it was
// started with. It is opened as the step's owner, appended to and never
// emptied, so that a path the job made a link to a file its owner may not
// write fails to open instead. nil (no stop line) when it does not open or
// the record does not say who the owner is.
func (a *App) reopenErr(k string, s *domain.Step) *os.File {
	if s == nil || s.ErrPath == "" || s.Owner == nil {
		a.log.Info("adopted step gets no stop line: its record names no error file or owner", "step", k)
		return nil
	}
	f, err := a.rt.OpenOutput(*s.Owner, s.ErrPath, true)
	if err != nil {
		a.log.Warn("adopted step gets no stop line: its error file does not open as its owner", "step", k, "path", s.ErrPath, "err", err)
		return nil
	}
	return f
}

// tellStop writes Slurm's line for a stop to the step's error output before
// the step is killed, so that the job's log says why it ended. Best effort:
// a log that cannot be written does not hold up the stop.
func (a *App) tellStop(rec *domain.Step, cause eventsv1.StopCause) {
	line := domain.StopLine(rec.JobID, a.opts.Hostname, cause, a.opts.Now())
	a.mu.Lock()
	p := a.procs[rec.Key()]
	a.mu.Unlock()
	if line == "" || p == nil || p.errf == nil {
		return
	}
	// The file the step was started with, opened as its owner: appended
	// to, never opened again by path (see process.errf).
	if _, err := p.errf.WriteString(line); err != nil {
		a.log.Warn("could not write the stop line to the step's error output", "step", rec.Key(), "err", err)
	}
}

// SignalStep applies a SignalStep delivered as event id: the named signal
// goes to the step's process group, or only to its leader (the batch shell)
// when batch_only. It changes no record; the event's inbox mark is written
// first, so a redelivery does not signal twice. A step that is not running
// here is left alone; a signal name the agent does not know is dead-lettered.
func (a *App) SignalStep(ctx context.Context, id string, cmd *eventsv1.SignalStep) error {
	key := domain.Key(cmd.GetJob(), cmd.GetAttempt())
	unlock := a.lockStep(key)
	defer unlock()
	existing, _ := a.step(key)
	send, skip := domain.Signal(a.opts.Self, existing, cmd)
	if !send {
		if cmd.GetNode() == a.opts.Self.Node {
			a.log.Info("not signalling step", "step", key, "event", id, "signal", cmd.GetSignal(), "why", skip)
		}
		return nil
	}
	sig, err := signalOf(cmd.GetSignal())
	if err != nil {
		return bus.Permanent(fmt.Errorf("signal step %s: %w", key, err))
	}
	applied, err := a.apply(ctx, id, &store.Tx{})
	if err != nil {
		return fmt.Errorf("record signal of %s: %w", key, err)
	}
	if !applied {
		return nil
	}
	a.mu.Lock()
	p := a.procs[key]
	a.mu.Unlock()
	if p == nil {
		return nil
	}
	// Looked at before the signal goes: a file written after it may be
	// the program's first, not a sign that it was up when it came.
	up := progressWritten(a.progressFile(key))
	if cmd.GetBatchOnly() {
		err = a.rt.SignalLeader(p.g, sig)
	} else {
		err = a.rt.Signal(p.g, sig)
	}
	if err != nil {
		a.log.Warn("signal step", "step", key, "signal", cmd.GetSignal(), "err", err)
		return nil
	}
	a.log.Info("step signalled", "step", key, "pid", p.g.PID, "signal", cmd.GetSignal(), "batch_only", cmd.GetBatchOnly())
	// The last signal decides: one sent after an early one is not to be
	// followed by that one again (a CONT after an early STOP, a USR2).
	var early *earlySignal
	if !up && resendable(sig) {
		early = &earlySignal{name: cmd.GetSignal(), sig: sig, batchOnly: cmd.GetBatchOnly()}
	}
	a.mu.Lock()
	if a.procs[key] == p {
		p.early = early
	}
	a.mu.Unlock()
	a.progressSoon()
	return nil
}

// earlySignal is a signal sent to a step before its program was up
// (process.early).
type earlySignal struct {
	name      string
	sig       syscall.Signal
	batchOnly bool
}

// resendable reports whether sig, sent before its step's program was up,
// is sent again once it is (resignalReady). Not a signal that ends or
// stops a program, or continues it: a program not up yet is ended by
// TERM, INT, HUP or QUIT (a Go runtime exits on them, it drops only the
// others, USR1 the first), and one that has caught it often reads a
// second as "now, without cleaning up"; STOP, CONT and the terminal stops
// sent again could undo a later signal; KILL needs no second. Slurm sends
// a user's scancel --signal once.
func resendable(sig syscall.Signal) bool {
	switch sig {
	case syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGKILL,
		syscall.SIGSTOP, syscall.SIGCONT, syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU:
		return false
	}
	return true
}

// resignalReady sends again each signal that reached a step before its
// program had written its progress file (process.early), once it has.
//
// A program that catches the signal only from some point on loses one
// that comes before: a Go program's runtime catches every signal from its
// start and drops those nobody asked for with signal.Notify (`loom train`
// takes ~0.1-0.5 s to get there), so a node that fails that early in its
// survivors' run made checkpoint on failure wait for a checkpoint that
// could not come. A program writes its progress file once it handles its
// signal (the trainer does; docs/health.md asks it of any other), so the
// file's appearance says it is up. One that handled the first signal too
// saves twice, which costs a checkpoint; one that ended on it is not sent
// anything (its process is gone); one that writes no progress file is not
// sent it again.
func (a *App) resignalReady() {
	a.mu.Lock()
	var keys []string
	for k, p := range a.procs {
		if p.early != nil {
			keys = append(keys, k)
		}
	}
	a.mu.Unlock()
	sort.Strings(keys)
	for _, key := range keys {
		if !progressWritten(a.progressFile(key)) {
			continue
		}
		a.resignal(key)
	}
}

// resignal sends step key's early signal again (resignalReady), under the
// step's lock, as SignalStep sends it: not to a step that ended meanwhile.
func (a *App) resignal(key string) {
	unlock := a.lockStep(key)
	defer unlock()
	a.mu.Lock()
	p := a.procs[key]
	var e *earlySignal
	if p != nil {
		e, p.early = p.early, nil
	}
	rec := a.steps[key]
	a.mu.Unlock()
	if e == nil || rec == nil || rec.Phase != domain.Running {
		return
	}
	var err error
	if e.batchOnly {
		err = a.rt.SignalLeader(p.g, e.sig)
	} else {
		err = a.rt.Signal(p.g, e.sig)
	}
	if err != nil {
		a.log.Warn("signal step again", "step", key, "signal", e.name, "err", err)
		return
	}
	a.log.Info("step signalled again: its program was not up when the signal came", "step", key, "pid", p.g.PID, "signal", e.name, "batch_only", e.batchOnly)
	a.progressSoon()
}

// signalOf returns the signal a name ("USR1", "SIGUSR1") or number ("10",
// Linux numbering, as Slurm takes it) stands for on this system.
func signalOf(name string) (syscall.Signal, error) {
	n, err := slurmspec.ParseSignalName(name)
	if err != nil {
		return 0, err
	}
	sig := unix.SignalNum("SIG" + n)
	if sig == 0 {
		return 0, fmt.Errorf("signal %s does not exist on this system", n)
	}
	return sig, nil
}

// kill sends SIGTERM to a running step's group and SIGKILL after the grace
// period unless it ended. The caller holds the step's lock.
func (a *App) kill(key string) {
	a.mu.Lock()
	p := a.procs[key]
	rec := a.steps[key]
	a.mu.Unlock()
	if p == nil {
		return
	}
	a.log.Info("stopping step", "step", key, "pid", p.g.PID, "reason", rec.StopReason)
	if err := a.rt.Signal(p.g, syscall.SIGTERM); err != nil {
		a.log.Warn("stop step", "step", key, "err", err)
	}
	grace := a.opts.KillGrace
	go func() {
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-p.done:
		case <-t.C:
			a.log.Warn("step ignored SIGTERM; killing it", "step", key, "pid", p.g.PID, "grace", grace)
			_ = a.rt.Kill(p.g)
		}
	}()
}

// Running returns how many step processes run.
func (a *App) Running() int { return int(a.running.Load()) }

// Shutdown stops every running step (SIGTERM, SIGKILL after the grace
// period) and waits until their ends are recorded as STEP_KILLED or ctx
// ends, so that nothing keeps running unobserved after the agent. StartSteps
// arriving from now on wait for Release and stay uncommitted.
func (a *App) Shutdown(ctx context.Context) { a.ShutdownBecause(ctx, "") }

// ShutdownBecause is Shutdown with why as the steps' stop reason (their
// KILLED records' message), for an agent that ends itself (see Watch); ""
// is Shutdown's "agent shutting down".
func (a *App) ShutdownBecause(ctx context.Context, why string) {
	a.shutdownOnce.Do(func() {
		if why != "" {
			a.closeWhy.Store(&why)
		}
		a.mu.Lock()
		a.beginClosing()
		keys := make([]string, 0, len(a.procs))
		for key := range a.procs {
			keys = append(keys, key)
		}
		a.mu.Unlock()
		// Steps still being started see closing and stop themselves.
		for _, key := range keys {
			unlock := a.lockStep(key)
			rec, _ := a.step(key)
			if rec != nil {
				d := domain.ShutdownStop(a.opts.Self, rec, a.shutdownReason(), a.opts.Now())
				if d.Rec != nil {
					a.record(d.Rec, false)
				}
				if d.Kill {
					a.kill(key)
				}
			}
			unlock()
		}
		a.shutdownTasks()
	})
	done := make(chan struct{})
	go func() {
		a.watchers.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		a.log.Warn("steps still running at shutdown deadline", "running", a.Running())
	}
}

// KillAll kills every running step's group at once without reporting (for
// when the agent can no longer write); a restart reports them LOST.
func (a *App) KillAll() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.beginClosing()
	for _, p := range a.procs {
		_ = a.rt.Kill(p.g)
	}
	for _, g := range a.groups {
		for _, pg := range g.groups {
			_ = a.rt.Kill(pg)
		}
	}
}

// Release lets StartSteps that wait in a stopping agent return.
func (a *App) Release() { a.releaseOnce.Do(func() { close(a.released) }) }

// Drain waits until the outbox is published or ctx ends.
func (a *App) Drain(ctx context.Context) {
	for {
		n, err := a.opts.Store.OutboxLen(ctx)
		if err == nil && n == 0 {
			return
		}
		select {
		case <-ctx.Done():
			a.log.Warn("outbox not drained at shutdown; the next start publishes it", "entries", n, "err", err)
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Heartbeats sends a Heartbeat every interval until ctx ends. Heartbeats go
// straight to the producer, not through the outbox: they only say "alive
// now", so one that cannot be sent is worth nothing later, and replaying
// stored ones after a crash would claim liveness for a time the agent was
// dead. Send failures are logged; health notices the silence.
func (a *App) Heartbeats(ctx context.Context) error {
	t := a.opts.Clock.NewTicker(a.opts.HeartbeatInterval)
	defer t.Stop()
	for {
		ev, err := adapters.Event(domain.Heartbeat(a.opts.Self, a.bootID, a.opts.Now(), a.Running()))
		if err != nil {
			return err
		}
		pctx, cancel := context.WithTimeout(ctx, max(a.opts.HeartbeatInterval, time.Second))
		if err := a.opts.Publisher.Publish(pctx, ev); err != nil {
			if ctx.Err() == nil {
				a.log.Warn("heartbeat not sent", "err", err)
			}
		} else {
			a.kafkaAnswered(a.opts.Now())
		}
		cancel()
		select {
		case <-ctx.Done():
			return nil
		case <-t.Chan():
		}
	}
}

type unopenedKey struct{}

// WithUnopened marks ctx as carrying a StartStep or LaunchTasks for this
// node that is sealed for another registration of it (one the node had
// before it registered again, or one the scheduler has not learnt yet): its
// confidential fields cannot be opened here, and why says so. The app records
// the step LOST (the tasks FAILED_TO_START) with why, marked
// registration_mismatch, and reports it, so that its job is requeued as never
// launched (its srun step fails to launch) instead of waiting on it.
func WithUnopened(ctx context.Context, why string) context.Context {
	return context.WithValue(ctx, unopenedKey{}, why)
}

func unopened(ctx context.Context) string {
	why, _ := ctx.Value(unopenedKey{}).(string)
	return why
}

// workloadEnv is what a process of job (its batch step's, a step's
// task's) is given to call Loom as the job (LOOM_TOKEN, from
// WorkloadToken, and LOOM_GATEWAY where env has none): as under Slurm,
// where any process of a job may run scontrol, squeue or srun, a task an
// srun started may too. Appended last, so that it wins over a LOOM_TOKEN
// the submitter's exported environment carried. Nothing where no token
// can be had (logged: the process runs, and its Slurm commands are
// refused).
func (a *App) workloadEnv(key, job string, env map[string]string) []string {
	if a.opts.WorkloadToken == nil || job == "" {
		return nil
	}
	tctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	tok, err := a.opts.WorkloadToken(tctx, job)
	cancel()
	if err != nil {
		a.log.Warn("no workload token for the job; it runs without LOOM_TOKEN", "step", key, "err", err)
		return nil
	}
	out := []string{"LOOM_TOKEN=" + tok}
	if env["LOOM_GATEWAY"] == "" && a.opts.Gateway != "" {
		out = append(out, "LOOM_GATEWAY="+a.opts.Gateway)
	}
	return out
}
