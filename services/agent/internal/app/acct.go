package app

// Job accounting: what each running step's and task's processes use,
// sampled from the runtime every progress interval (with the progress
// look), reported every accounting interval while they run
// (UsageReported, for sstat) and with their ends (StepChanged,
// TasksChanged, for sacct), the last sample folded with the kernel's own
// count of the finished leader (rusage). Samples live in memory only: an
// agent that restarts under a running step starts its peaks again.

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/loom-ml/loom/libs/acct"
	"github.com/loom-ml/loom/libs/envelope"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/agent/internal/adapters"
	"github.com/loom-ml/loom/services/agent/internal/domain"
	"github.com/loom-ml/loom/services/agent/internal/ports"
)

// sampleUsage samples every running step and task here in one look at the
// runtime and folds the samples into a.usage.
func (a *App) sampleUsage(now time.Time) {
	type unit struct {
		key    string
		groups []ports.Group
		gpus   []int
	}
	var units []unit
	var all []ports.Group
	withGPUs := false
	a.mu.Lock()
	for k, p := range a.procs {
		if s := a.steps[k]; s != nil && s.Phase == domain.Running {
			units = append(units, unit{k, []ports.Group{p.g}, p.gpus})
			all = append(all, p.g)
			withGPUs = withGPUs || len(p.gpus) > 0
		}
	}
	for k, g := range a.groups {
		if t := a.tasks[k]; t != nil && t.Phase == domain.Running {
			units = append(units, unit{k, g.groups, g.gpus})
			all = append(all, g.groups...)
			withGPUs = withGPUs || len(g.gpus) > 0
		}
	}
	a.mu.Unlock()
	if len(all) == 0 {
		return
	}
	got := a.rt.Usage(all)
	var reading []*loomv1.GpuSample
	if withGPUs && a.opts.GPUReading != nil {
		reading = a.opts.GPUReading()
	}
	type over struct {
		key         string
		groups      []ports.Group
		held, limit int64
	}
	var overs []over
	a.mu.Lock()
	for _, u := range units {
		// A unit that ended meanwhile took its usage with it (finalUsage).
		if !a.runningUnit(u.key) {
			continue
		}
		kept := a.usage[u.key]
		if len(kept) != len(u.groups) {
			kept = make([]acct.Usage, len(u.groups))
			a.usage[u.key] = kept
		}
		// A limit is judged by the proportional set size: forked workers
		// (a data loader's) share their parent's pages, which RSS would
		// count once per worker, as a memory cgroup does not.
		pss, unread := int64(0), false
		for i, g := range u.groups {
			if s, ok := got[g]; ok {
				kept[i] = kept[i].Sample(acct.Sample{UserCPU: s.UserCPU, SystemCPU: s.SystemCPU, RSS: s.RSS,
					VMSize: s.VMSize, Read: s.Read, Write: s.Write}, now)
				pss += s.PSS
				unread = unread || s.Unread > 0
			}
		}
		if util, mem, ok := domain.GPUShare(reading, u.gpus); ok {
			for i := range kept {
				kept[i] = kept[i].SampleGPU(len(u.gpus), util, mem)
			}
		}
		limit := a.memLimit(u.key)
		v := domain.JudgeMemory(pss, limit, unread, a.memDoubt[u.key])
		if v.Doubt > 0 {
			a.memDoubt[u.key] = v.Doubt
		} else {
			delete(a.memDoubt, u.key)
		}
		if v.Kill {
			overs = append(overs, over{u.key, u.groups, pss, limit})
		}
	}
	a.mu.Unlock()
	for _, o := range overs {
		a.killOverMemory(o.key, o.groups, o.held, o.limit)
	}
}

// memLimit is the memory limit of the running unit key (0: none). a.mu is
// held.
func (a *App) memLimit(key string) int64 {
	if s := a.steps[key]; s != nil {
		return s.MemLimit
	}
	if t := a.tasks[key]; t != nil {
		return t.MemLimit
	}
	return 0
}

// killOverMemory ends a unit whose processes passed its memory limit, as
// Slurm's OverMemoryKill does: Slurm's line in a batch step's error output,
// every process of its groups killed at once, and its end reported out of
// memory (the job OUT_OF_MEMORY; an srun step's tasks failed "out of
// memory"). A unit already being stopped is left to its stop.
func (a *App) killOverMemory(key string, groups []ports.Group, held, limit int64) {
	unlock := a.lockStep(key)
	defer unlock()
	a.mu.Lock()
	s, t, p := a.steps[key], a.tasks[key], a.procs[key]
	stopping := (s != nil && (s.Phase != domain.Running || s.StopReason != "")) ||
		(t != nil && (t.Phase != domain.Running || t.StopReason != ""))
	if !stopping {
		a.oom[key] = true
	}
	a.mu.Unlock()
	if stopping {
		return
	}
	what := ""
	if s != nil {
		what = "Job " + s.JobID
	} else if t != nil {
		what = fmt.Sprintf("Step %s.%d", t.JobID, t.StepID)
	}
	a.log.Warn("killing a step past its memory limit", "unit", key, "pss", held, "limit", limit)
	if p != nil && p.errf != nil {
		if _, err := p.errf.WriteString(domain.MemoryLine(what, held, limit)); err != nil {
			a.log.Warn("could not write the memory line to the step's error output", "step", key, "err", err)
		}
	}
	for _, g := range groups {
		_ = a.rt.Kill(g)
	}
}

// takeOOM reports whether the unit key was killed past its memory limit,
// and forgets it.
func (a *App) takeOOM(key string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	oom := a.oom[key]
	delete(a.oom, key)
	return oom
}

// runningUnit reports whether key names a running step or tasks record
// with processes here. a.mu is held.
func (a *App) runningUnit(key string) bool {
	if _, ok := a.procs[key]; ok {
		return a.steps[key] != nil && a.steps[key].Phase == domain.Running
	}
	if _, ok := a.groups[key]; ok {
		return a.tasks[key] != nil && a.tasks[key].Phase == domain.Running
	}
	return false
}

// finalUsage takes what was sampled of the unit key's task i and folds in
// the kernel's count of its finished leader; the unit's samples go when
// last is set.
func (a *App) finalUsage(key string, i int, exit ports.Exit, last bool) *acct.Usage {
	a.mu.Lock()
	var u acct.Usage
	if kept := a.usage[key]; i < len(kept) {
		u = kept[i]
	}
	if last {
		delete(a.usage, key)
		delete(a.memDoubt, key)
	}
	a.mu.Unlock()
	u = u.Final(exit.Usage.UserCPU, exit.Usage.SystemCPU, exit.Usage.MaxRSS, a.opts.Now())
	return &u
}

// usageReports are the UsageReported of every run here whose last report
// is at least an accounting interval old, from the samples kept; the runs
// reported are stamped now. Nothing when the interval is not positive.
func (a *App) usageReports(now time.Time) []envelope.Event {
	if a.opts.AcctInterval <= 0 {
		return nil
	}
	type run struct {
		job     string
		attempt int32
		usage   domain.RunUsage
	}
	runs := map[string]*run{}
	a.mu.Lock()
	for k, kept := range a.usage {
		var rk, job string
		var attempt int32
		if s := a.steps[k]; s != nil && s.Phase == domain.Running && len(kept) == 1 {
			rk, job, attempt = k, s.Job, s.Attempt
		} else if t := a.tasks[k]; t != nil && t.Phase == domain.Running {
			rk, job, attempt = t.RunKey(), t.Job, t.Attempt
		} else {
			continue
		}
		if last, ok := a.usageSent[rk]; ok && now.Sub(last) < a.opts.AcctInterval {
			continue
		}
		r := runs[rk]
		if r == nil {
			r = &run{job: job, attempt: attempt}
			runs[rk] = r
		}
		if rk == k {
			u := kept[0]
			r.usage.Step = &u
		} else {
			if r.usage.Tasks == nil {
				r.usage.Tasks = map[int32][]acct.Usage{}
			}
			r.usage.Tasks[a.tasks[k].StepID] = append([]acct.Usage(nil), kept...)
		}
	}
	for rk := range runs {
		a.usageSent[rk] = now
	}
	// A run with nothing running here any more is forgotten.
	for rk := range a.usageSent {
		if runs[rk] == nil && !a.runsHere(rk) {
			delete(a.usageSent, rk)
		}
	}
	a.mu.Unlock()
	var out []envelope.Event
	for rk, r := range runs {
		ev := domain.UsageReport(a.opts.Self, r.job, r.attempt, r.usage)
		if ev == nil {
			continue
		}
		e, err := adapters.Event(ev)
		if err != nil {
			a.log.Error("encode usage", "run", rk, "err", err)
			continue
		}
		out = append(out, e)
	}
	return out
}

// runsHere reports whether anything of the run rk still runs here. a.mu is
// held.
func (a *App) runsHere(rk string) bool {
	if _, ok := a.procs[rk]; ok {
		return true
	}
	for k := range a.groups {
		if t := a.tasks[k]; t != nil && t.RunKey() == rk {
			return true
		}
	}
	return false
}

// visibleDevices are the GPU indices of a CUDA_VISIBLE_DEVICES list in env
// (none when it names none, or names devices by UUID).
func visibleDevices(env map[string]string) []int {
	var out []int
	for _, f := range strings.Split(env["CUDA_VISIBLE_DEVICES"], ",") {
		if i, err := strconv.Atoi(strings.TrimSpace(f)); err == nil && i >= 0 {
			out = append(out, i)
		}
	}
	return out
}
