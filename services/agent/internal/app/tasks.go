package app

// Job steps (srun inside an allocation): LaunchTasks starts this node's
// tasks of a step, each task its own process group, output in
// <output_dir>/task-<rank>.out and .err; KillTasks kills (or signals) them;
// a StopStep of their job's run kills them too. The record of a step's tasks
// (domain.Tasks) follows the same rules as a step's: written STARTING with
// the inbox mark before any process starts, ordered by the striped step
// locks, reported on loom.step.events.v1 (TasksChanged).

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/loom-ml/loom/libs/bus"
	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/slurmspec"
	"github.com/loom-ml/loom/libs/store"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	"github.com/loom-ml/loom/services/agent/internal/adapters"
	"github.com/loom-ml/loom/services/agent/internal/domain"
	"github.com/loom-ml/loom/services/agent/internal/ports"
)

// taskGroup is the processes of one step's tasks on this node.
type taskGroup struct {
	groups []ports.Group // one per task, by local id
	done   chan struct{} // closed once every task was reaped
	gpus   []int         // the devices the tasks see (job accounting)
}

// tasksRec returns the task record of key (nil when none) and whether the
// agent is stopping.
func (a *App) tasksRec(key string) (*domain.Tasks, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.tasks[key], a.closing
}

// Tasks returns a copy of the task record of a job step here (nil when
// there is none): for tests and diagnostics.
func (a *App) Tasks(job string, attempt, step int32) *domain.Tasks {
	a.mu.Lock()
	defer a.mu.Unlock()
	if t := a.tasks[domain.TasksKey(job, attempt, step)]; t != nil {
		c := *t
		return &c
	}
	return nil
}

// recordTasks sets a task record in memory and writes it (with its event
// when emit, after the events first), retrying like record.
// The caller holds the record's step lock.
func (a *App) recordTasks(t *domain.Tasks, emit bool, first ...envelope.Event) bool {
	a.mu.Lock()
	a.setTasks(t.Key(), t)
	a.persisting[t.Key()]++
	a.mu.Unlock()
	defer a.persisted(t.Key())
	var tx store.Tx
	for _, e := range first {
		tx.Emit(e)
	}
	if err := adapters.PutTasks(&tx, t, a.opts.Self, emit); err != nil {
		a.log.Error("encode tasks", "tasks", t.Key(), "err", err)
		return false
	}
	return a.persist(&tx, "tasks", t.Key(), string(t.Phase))
}

// LaunchTasks applies a LaunchTasks delivered as event id: for this node's
// tasks of a step not seen before it records the intent (STARTING, with the
// inbox mark) and returns; a goroutine then starts the processes and
// reports RUNNING (or FAILED_TO_START). Tasks of a run that already ended
// here are recorded KILLED and never start.
func (a *App) LaunchTasks(ctx context.Context, id string, cmd *eventsv1.LaunchTasks) error {
	key := domain.TasksKey(cmd.GetJob(), cmd.GetAttempt(), cmd.GetStepId())
	unlock := a.lockStep(key)
	existing, closing := a.tasksRec(key)
	if closing && cmd.GetNode() == a.opts.Self.Node {
		unlock()
		select {
		case <-a.released:
		case <-ctx.Done():
		}
		return ErrShuttingDown
	}
	defer unlock()
	run, _ := a.step(domain.Key(cmd.GetJob(), cmd.GetAttempt()))
	rec, ended, skip := domain.Launch(a.opts.Self, existing, run, a.highestAttempt(cmd.GetJob()), cmd, a.opts.Now())
	if why := unopened(ctx); why != "" && skip == "" && !ended {
		// Sealed for another registration of this node (WithUnopened):
		// the tasks never start, a failed launch of the job step.
		rec, ended = domain.TasksNotOpened(rec, why, a.opts.Now()), true
	}
	if skip != "" {
		if cmd.GetNode() == a.opts.Self.Node {
			a.log.Info("not launching tasks", "tasks", key, "event", id, "why", skip)
		}
		return nil
	}
	if !ended {
		rec.OwnerUID = a.ownerUID(cmd.GetUser()) // as a step's (App.ownerUID)
	}
	var tx store.Tx
	if err := adapters.PutTasks(&tx, rec, a.opts.Self, ended); err != nil {
		return err
	}
	applied, err := a.apply(ctx, id, &tx)
	if err != nil {
		return fmt.Errorf("record launch of %s: %w", key, err)
	}
	if !applied {
		return nil
	}
	a.mu.Lock()
	a.setTasks(key, rec)
	closing = a.closing
	if !ended && !closing {
		a.watchers.Add(1)
	}
	a.mu.Unlock()
	switch {
	case ended:
		a.log.Info("tasks not launched", "tasks", key, "phase", rec.Phase, "why", rec.Message)
	case closing:
		a.recordTasks(domain.StopTasks(rec, rec.Job, rec.Attempt, rec.StepID, a.shutdownReason(), a.opts.Now()).Rec, true)
	default:
		go a.launchTasks(key, rec, cmd)
	}
	return nil
}

// launchTasks starts the processes of tasks recorded STARTING (rec) and
// records them RUNNING, unless a stop came first.
func (a *App) launchTasks(key string, rec *domain.Tasks, cmd *eventsv1.LaunchTasks) {
	a.awaitCaughtUp() // as a step's launch
	unlock := a.lockStep(key)
	defer unlock()
	if cur, closing := a.tasksRec(key); cur != rec || closing {
		if cur == rec {
			a.recordTasks(domain.StopTasks(rec, rec.Job, rec.Attempt, rec.StepID, a.shutdownReason(), a.opts.Now()).Rec, true)
		}
		a.watchers.Done()
		return
	}
	ps, err := a.spawnTasks(key, cmd)
	if err != nil {
		a.log.Warn("tasks failed to start", "tasks", key, "err", err)
		a.recordTasks(domain.TasksStartFailed(rec, err.Error(), a.opts.Now()), true)
		a.watchers.Done()
		return
	}
	g := &taskGroup{done: make(chan struct{}), gpus: visibleDevices(cmd.GetEnv())}
	pids, starts := make([]int, len(ps)), make([]uint64, len(ps))
	for i, p := range ps {
		g.groups = append(g.groups, p.Group())
		pids[i], starts[i] = p.Group().PID, p.Group().Start
	}
	a.mu.Lock()
	a.groups[key] = g
	closing := a.closing
	a.mu.Unlock()
	go a.watchTasks(key, ps, g)
	a.log.Info("tasks started", "tasks", key, "pids", pids, "output_dir", cmd.GetOutputDir())
	started := domain.TasksStarted(rec, pids, starts)
	a.recordTasks(started, true)
	if closing {
		if d := domain.StopTasks(started, rec.Job, rec.Attempt, rec.StepID, a.shutdownReason(), a.opts.Now()); d.Rec != nil {
			a.recordTasks(d.Rec, false)
			a.killTasks(key)
		}
	}
}

// spawnTasks starts every task of a LaunchTasks through the runtime, each
// in a group of its own, as the job's owner (cmd.user; refused, before any
// file is touched, where the owner may not run jobs here), cwd work_dir
// (default the shared dir), stdout and stderr in
// <output_dir>/task-<rank>.out and .err, opened as the owner. The output
// directory is the owner's, mode 0700: under the shared dir's .loom, where
// the scheduler puts it and only the agent may make it, the agent makes it
// for the owner; elsewhere the owner makes it. If one task cannot start,
// those started are killed and the error says why.
func (a *App) spawnTasks(key string, cmd *eventsv1.LaunchTasks) ([]ports.Process, error) {
	user := cmd.GetUser()
	acct, err := a.rt.Account(user)
	if err != nil {
		return nil, err
	}
	dir := cmd.GetWorkDir()
	if dir == "" {
		dir = a.opts.SharedDir
	}
	// Looked at as the owner: as root, a directory the owner may not
	// reach would fail here when missing and at the start when there,
	// telling them which.
	if err := a.rt.StatDir(user, dir); err != nil {
		return nil, fmt.Errorf("chdir to %s: %w", dir, err)
	}
	outDir := cmd.GetOutputDir()
	if outDir == "" {
		outDir = filepath.Join(a.opts.WorkDir, "steps", fmt.Sprintf("%s.%d", cmd.GetJobId(), cmd.GetStepId()))
	}
	mkdir := a.rt.MakeDir
	if within(filepath.Join(a.opts.SharedDir, ".loom"), outDir) || within(a.opts.WorkDir, outDir) {
		mkdir = a.rt.GiveDir
	}
	if err := mkdir(user, outDir); err != nil {
		return nil, fmt.Errorf("create output directory: %w", err)
	}
	if n := len(cmd.GetTaskGpus()); n > 0 && n != int(cmd.GetNtasks()) {
		// Tasks past the lists would see every GPU of the node.
		return nil, fmt.Errorf("bad launch: %d tasks' GPUs for %d tasks", n, cmd.GetNtasks())
	}
	a.prepareProgress(user, domain.Key(cmd.GetJob(), cmd.GetAttempt()))
	base := append(a.taskEnv(key, cmd, acct), a.workloadEnv(key, cmd.GetJob(), cmd.GetEnv())...)
	var ps []ports.Process
	fail := func(err error) ([]ports.Process, error) {
		for _, p := range ps {
			_ = a.rt.Kill(p.Group())
			_ = p.Wait()
		}
		return nil, err
	}
	for l := int32(0); l < cmd.GetNtasks(); l++ {
		rank := domain.TaskRank(cmd, l)
		out, err := a.rt.OpenOutput(user, filepath.Join(outDir, fmt.Sprintf("task-%d.out", rank)), false)
		if err != nil {
			return fail(fmt.Errorf("open task output: %w", err))
		}
		errf, err := a.rt.OpenOutput(user, filepath.Join(outDir, fmt.Sprintf("task-%d.err", rank)), false)
		if err != nil {
			out.Close()
			return fail(fmt.Errorf("open task error file: %w", err))
		}
		var in *os.File
		if slurmspec.TakesInput(cmd.GetInput(), rank) {
			// srun's input, in the step's directory: one open each, so
			// that every task reads all of it.
			if in, err = a.rt.OpenInput(user, filepath.Join(outDir, slurmspec.InputFile)); err != nil {
				out.Close()
				errf.Close()
				return fail(fmt.Errorf("open the step's input: %w", err))
			}
		}
		p, err := a.rt.Start(ports.Spec{
			Argv: cmd.GetCommand(), Dir: dir, Stdout: out, Stderr: errf, Nice: a.opts.JobNice, User: user, Name: taskName(key, l),
			Env: append(append(append([]string(nil), base...),
				"SLURM_PROCID="+strconv.Itoa(int(rank)), "SLURM_LOCALID="+strconv.Itoa(int(l)),
				"PMI_RANK="+strconv.Itoa(int(rank)), "PMI_SIZE="+strconv.Itoa(int(cmd.GetTotalTasks()))),
				taskGPUVars(cmd, l)...),
			Input: in, InputEOF: filepath.Join(outDir, slurmspec.InputEOF), PTY: taskPTY(cmd, rank, outDir),
		})
		out.Close()
		errf.Close()
		if in != nil {
			in.Close()
		}
		if err != nil {
			return fail(err)
		}
		ps = append(ps, p)
	}
	return ps, nil
}

// gpuVars name a task's GPUs, as Slurm's gres/gpu plugin sets them.
var gpuVars = []string{"CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL", "SLURM_STEP_GPUS"}

// taskGPUVars are the GPU variables of local task l when the step gives
// each task its own (srun --gpus-per-task: LaunchTasks.task_gpus), none
// otherwise (the node's, in the step's env, stand).
func taskGPUVars(cmd *eventsv1.LaunchTasks, l int32) []string {
	ids := cmd.GetTaskGpus()
	if int(l) >= len(ids) {
		return nil
	}
	out := make([]string, len(gpuVars))
	for i, k := range gpuVars {
		out[i] = k + "=" + ids[l]
	}
	return out
}

// taskPTY is the terminal of the task of rank rank (srun --pty: task 0's
// alone), resized as srun writes in outDir, nil for none. The sizes were bounded by the gateway and the
// scheduler; a bad one here gets the default.
func taskPTY(cmd *eventsv1.LaunchTasks, rank int32, outDir string) *ports.PTY {
	if !cmd.GetPty() || rank != 0 {
		return nil
	}
	size := func(n int32) uint16 {
		if n <= 0 || n > slurmspec.MaxTermSize {
			return 0
		}
		return uint16(n)
	}
	return &ports.PTY{Rows: size(cmd.GetPtyRows()), Cols: size(cmd.GetPtyCols()), WinsizeFile: filepath.Join(outDir, slurmspec.WinsizeFile)}
}

// taskName is the runtime's name of the local task l of the tasks key.
func taskName(key string, l int32) string { return key + "/" + strconv.Itoa(int(l)) }

// taskEnv is the environment the tasks of a step share: a clean base (PATH,
// HOME = the shared dir), the step's variables, what a Slurm job learns
// from the node (nodeVars: its owner's HOME among them), and the id a
// restarted agent finds them by. The per-task ranks are added by spawnTasks.
func (a *App) taskEnv(key string, cmd *eventsv1.LaunchTasks, acct ports.Account) []string {
	vars := map[string]string{"HOME": a.opts.SharedDir}
	maps.Copy(vars, cmd.GetEnv())
	vars["PATH"] = a.jobPath(vars["PATH"])
	// From the command's own variables: the default HOME above is not the
	// job's saying.
	maps.Copy(vars, a.nodeVars(cmd.GetEnv(), cmd.GetUser(), acct))
	for _, k := range []string{"SLURM_PROCID", "SLURM_LOCALID", "PMI_RANK", "PMI_SIZE", StepIDEnv} {
		delete(vars, k)
	}
	if len(cmd.GetTaskGpus()) > 0 {
		// Each task's own (taskGPUVars), not the node's.
		for _, k := range gpuVars {
			delete(vars, k)
		}
	}
	// The run's progress file, as its batch step's (one per run here).
	vars[domain.ProgressEnv] = a.progressFile(domain.Key(cmd.GetJob(), cmd.GetAttempt()))
	names := make([]string, 0, len(vars))
	for k := range vars {
		names = append(names, k)
	}
	sort.Strings(names)
	env := make([]string, 0, len(names)+5)
	for _, k := range names {
		env = append(env, k+"="+vars[k])
	}
	env = append(env, a.opts.NodeEnv...)
	return append(env, StepIDEnv+"="+a.stepID(key))
}

// watchTasks reaps a step's tasks and reports their end once all ended.
func (a *App) watchTasks(key string, ps []ports.Process, g *taskGroup) {
	defer a.watchers.Done()
	exits := make([]domain.Exit, len(ps))
	ended := make([]ports.Exit, len(ps))
	var wg sync.WaitGroup
	for i, p := range ps {
		wg.Go(func() {
			ended[i] = p.Wait()
			exits[i] = domainExit(ended[i])
			// What a task left in its group ends with it, as under Slurm.
			_ = a.rt.Kill(p.Group())
		})
	}
	wg.Wait()
	close(g.done)

	unlock := a.lockStep(key)
	defer unlock()
	a.mu.Lock()
	delete(a.groups, key)
	rec := a.tasks[key]
	a.mu.Unlock()
	oom := a.takeOOM(key)
	for i := range exits {
		exits[i].Usage = a.finalUsage(key, i, ended[i], i == len(exits)-1)
		exits[i].OOM = exits[i].OOM || (oom && exits[i].Code != 0)
	}
	if rec == nil || rec.Phase != domain.Running {
		return
	}
	end := domain.TasksEnded(rec, exits, a.opts.Now())
	a.log.Info("tasks ended", "tasks", key, "phase", end.Phase, "exit_codes", end.ExitCodes)
	// What the run's program wrote last here goes out with the tasks'
	// end, ahead of it, when no step of the run here will read it later.
	if a.recordTasks(end, true, a.lastTasksProgress(rec)...) {
		// Recorded; exits that could not be (the agent stopped first)
		// stay for the next start, which records them.
		for l := range ps {
			a.rt.Forget(taskName(key, int32(l)))
		}
	}
	a.dropProgress(domain.Key(rec.Job, rec.Attempt))
}

// KillTasks applies a KillTasks delivered as event id: without a signal the
// tasks get SIGTERM, SIGKILL after the grace period, and their end is
// reported KILLED (tasks not started yet are recorded KILLED and never
// start); with one, the signal goes to every task's process group and no
// record changes.
func (a *App) KillTasks(ctx context.Context, id string, cmd *eventsv1.KillTasks) error {
	if cmd.GetNode() != a.opts.Self.Node {
		return nil
	}
	key := domain.TasksKey(cmd.GetJob(), cmd.GetAttempt(), cmd.GetStepId())
	unlock := a.lockStep(key)
	defer unlock()
	existing, _ := a.tasksRec(key)
	if cmd.GetSignal() != "" {
		sig, err := signalOf(cmd.GetSignal())
		if err != nil {
			return bus.Permanent(fmt.Errorf("signal tasks %s: %w", key, err))
		}
		if existing == nil || existing.Phase != domain.Running {
			a.log.Info("not signalling tasks that do not run", "tasks", key, "signal", cmd.GetSignal())
			return nil
		}
		applied, err := a.apply(ctx, id, &store.Tx{})
		if err != nil || !applied {
			return err
		}
		a.signalTasks(key, sig)
		return nil
	}
	d := domain.StopTasks(existing, cmd.GetJob(), cmd.GetAttempt(), cmd.GetStepId(), cmd.GetReason(), a.opts.Now())
	if d.Rec == nil {
		return nil
	}
	var tx store.Tx
	if err := adapters.PutTasks(&tx, d.Rec, a.opts.Self, d.Rec.Phase.Terminal()); err != nil {
		return err
	}
	applied, err := a.apply(ctx, id, &tx)
	if err != nil {
		return fmt.Errorf("record kill of %s: %w", key, err)
	}
	if !applied {
		return nil
	}
	a.mu.Lock()
	a.setTasks(key, d.Rec)
	a.mu.Unlock()
	if d.Kill {
		a.killTasks(key)
	}
	return nil
}

// stopRunTasks stops every live task group of the run key (job#attempt) on
// this node: a StopStep of a run ends its job steps' tasks too. Each stop
// is written like the agent's own (no inbox mark: the StopStep's is written).
func (a *App) stopRunTasks(runKey, reason string) {
	a.mu.Lock()
	var keys []string
	for k, t := range a.tasks {
		if strings.HasPrefix(k, runKey+".") && !t.Phase.Terminal() {
			keys = append(keys, k)
		}
	}
	a.mu.Unlock()
	sort.Strings(keys)
	for _, k := range keys {
		unlock := a.lockStep(k)
		if t, _ := a.tasksRec(k); t != nil {
			d := domain.StopTasks(t, t.Job, t.Attempt, t.StepID, reason, a.opts.Now())
			if d.Rec != nil {
				a.recordTasks(d.Rec, d.Rec.Phase.Terminal())
			}
			if d.Kill {
				a.killTasks(k)
			}
		}
		unlock()
	}
}

// signalTasks sends sig to every task's process group of key.
func (a *App) signalTasks(key string, sig syscall.Signal) {
	a.mu.Lock()
	g := a.groups[key]
	a.mu.Unlock()
	if g == nil {
		return
	}
	for _, pg := range g.groups {
		if err := a.rt.Signal(pg, sig); err != nil {
			a.log.Warn("signal task", "tasks", key, "pid", pg.PID, "err", err)
		}
	}
}

// killTasks sends SIGTERM to every task's group of key and SIGKILL after
// the grace period unless they all ended. The caller holds the step lock.
func (a *App) killTasks(key string) {
	a.mu.Lock()
	g := a.groups[key]
	a.mu.Unlock()
	if g == nil {
		return
	}
	a.log.Info("stopping tasks", "tasks", key, "pids", groupIDs(g.groups))
	a.signalTasks(key, syscall.SIGTERM)
	grace := a.opts.KillGrace
	go func() {
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-g.done:
		case <-t.C:
			a.log.Warn("tasks ignored SIGTERM; killing them", "tasks", key, "grace", grace)
			for _, pg := range g.groups {
				_ = a.rt.Kill(pg)
			}
		}
	}()
}

// settledTasks is what Recover decided for tasks a predecessor left: the
// records to write, and, when adopted, a process per task (one that
// ended meanwhile gives its recorded exit at once).
type settledTasks struct {
	recs  []*domain.Tasks
	adopt []ports.Process
}

// endedUnit is a task that ended while no agent watched it: its Wait gives
// the exit its shim recorded, at once.
type endedUnit struct{ exit ports.Exit }

func (endedUnit) Group() ports.Group { return ports.Group{} }
func (e endedUnit) Wait() ports.Exit { return e.exit }

// recoverTasks settles the task records a predecessor left running or
// starting, as Recover does steps: tasks whose shims all still run or left
// their exits are adopted (or reported ended with their real exit codes);
// when nothing remains of one of them, what survives of them all is killed
// and they are reported LOST. The records are written into tx; terminal
// records past the inbox window are pruned. The caller holds a.mu.
func (a *App) recoverTasks(tx *store.Tx, now time.Time) (found map[string]settledTasks, prune []string, err error) {
	found = map[string]settledTasks{}
	var wg sync.WaitGroup
	var lmu sync.Mutex
	for key, t := range a.tasks {
		switch {
		case t.Phase.Terminal():
			if !t.Ended.IsZero() && now.Sub(t.Ended) > store.InboxTTL {
				prune = append(prune, key)
			}
		case t.Phase == domain.Running || t.Phase == domain.Starting:
			wg.Go(func() {
				st := a.settleTasks(key, t, now)
				lmu.Lock()
				found[key] = st
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
	read := map[string]bool{}
	for _, k := range keys {
		recs := found[k].recs
		for i, r := range recs {
			if run := r.RunKey(); i == len(recs)-1 && r.Phase.Terminal() && !read[run] {
				// Tasks that ended while no agent watched them: what the
				// run's program wrote last here goes out ahead of their
				// end, as a watched group's does (lastTasksProgress),
				// once per run, where the run has no step here (a step
				// found ended reports the run's last progress itself).
				read[run] = true
				if a.steps[run] == nil {
					_, last := a.lastProgress(run, r.Job, r.Attempt, "", domain.Progress{})
					for _, e := range last {
						tx.Emit(e)
					}
				}
			}
			if err := adapters.PutTasks(tx, r, a.opts.Self, true); err != nil {
				return nil, nil, err
			}
		}
	}
	for _, k := range prune {
		tx.HDel(adapters.KeyTasks, k)
	}
	return found, prune, nil
}

// settleTasks finds what remains of each task of t and decides them
// (domain.RecoverTasks).
func (a *App) settleTasks(key string, t *domain.Tasks, now time.Time) settledTasks {
	n := int(t.NTasks)
	remains := make([]domain.Remains, n)
	procs := make([]ports.Process, n)
	complete := n > 0
	for l := range n {
		var g ports.Group
		if t.Phase == domain.Running && l < len(t.PIDs) && l < len(t.PIDStarts) {
			g = ports.Group{PID: t.PIDs[l], Start: t.PIDStarts[l]}
		}
		p, exit := a.rt.Recover(taskName(key, int32(l)), g)
		switch {
		case p != nil:
			procs[l] = p
			remains[l] = domain.Remains{Running: true, PID: p.Group().PID, PIDStart: p.Group().Start}
		case exit != nil:
			procs[l] = endedUnit{*exit}
			remains[l] = domain.Remains{Exit: &domain.Exit{Code: exit.Code, Signal: exit.Signal, OOM: exit.OOM, Unknown: exit.Unknown}}
		default:
			complete = false
		}
	}
	why := ""
	if !complete {
		why = a.killTaskRemains(key, t, procs)
	} else {
		// What ended tasks left in their groups ends with them.
		for _, g := range a.rt.Adopt(StepIDEnv+"="+a.stepID(key), t.OwnerUID, t.Owner) {
			if !slices.ContainsFunc(procs, func(p ports.Process) bool { return p.Group().PID == g.PID }) {
				_ = a.rt.Kill(g)
			}
		}
	}
	recs, adopt := domain.RecoverTasks(t, remains, why, now)
	if !adopt {
		procs = nil
	}
	return settledTasks{recs: recs, adopt: procs}
}

// killTaskRemains kills whatever still runs of tasks that cannot be
// adopted (nothing remains of one of them): their shims found, their
// recorded groups, and what carries their LOOM_STEP_ID. It says what it
// found.
func (a *App) killTaskRemains(key string, t *domain.Tasks, procs []ports.Process) string {
	var groups []ports.Group
	add := func(g ports.Group) {
		if g.PID > 1 && !slices.ContainsFunc(groups, func(h ports.Group) bool { return h.PID == g.PID }) {
			groups = append(groups, g)
		}
	}
	for _, p := range procs {
		if p != nil {
			add(p.Group())
		}
	}
	for i, pid := range t.PIDs[:min(len(t.PIDs), len(t.PIDStarts))] {
		if g := (ports.Group{PID: pid, Start: t.PIDStarts[i]}); a.rt.Alive(g) {
			add(g)
		}
	}
	for _, g := range a.rt.Adopt(StepIDEnv+"="+a.stepID(key), t.OwnerUID, t.Owner) {
		add(g)
	}
	for _, g := range groups {
		a.terminate(g)
	}
	switch {
	case len(groups) > 0:
		return fmt.Sprintf("the agent restarted; the tasks' processes (groups %v) could not all be found again and were killed", groupIDs(groups))
	case t.Phase == domain.Starting:
		return "the agent stopped while starting the tasks"
	}
	return "the agent restarted and the tasks' processes were gone"
}

// shutdownTasks marks every running task group as stopping (its end will be
// KILLED) and kills it: part of Shutdown.
func (a *App) shutdownTasks() {
	a.mu.Lock()
	keys := make([]string, 0, len(a.groups))
	for key := range a.groups {
		keys = append(keys, key)
	}
	a.mu.Unlock()
	for _, key := range keys {
		unlock := a.lockStep(key)
		if t, _ := a.tasksRec(key); t != nil {
			d := domain.StopTasks(t, t.Job, t.Attempt, t.StepID, a.shutdownReason(), a.opts.Now())
			if d.Rec != nil {
				a.recordTasks(d.Rec, false)
			}
			if d.Kill {
				a.killTasks(key)
			}
		}
		unlock()
	}
}
