package main

import (
	"math/rand/v2"
	"sort"
)

// failure is one interruption of the trace, with every random draw its
// handling may need made up front: all policies see the same failures at
// the same times (common random numbers), so their difference is the
// policy's and not the dice's.
type failure struct {
	at      float64
	planned bool
	comp    int // index into Scenario.Mix
	repair  bool
	warn    bool
	hang    bool
	sdc     bool
	action  int
	page    float64 // a person's response time, in units of Policy.Page (Exp(1))
	escPage float64 // the same for an escalation
	escU    float64 // uniform: escalated when below Policy.Escalation
}

// trace draws the interruptions of one run: Poisson arrivals at the
// scenario's rates over its days, components by their counts.
func trace(sc Scenario, seed uint64) []failure {
	rng := rand.New(rand.NewPCG(seed, 0x11a3a3))
	end := sc.Days * day
	total := 0
	for _, c := range sc.Mix {
		total += c.Count
	}
	var fs []failure
	arrivals := func(n float64, planned bool) {
		if n <= 0 {
			return
		}
		mean := end / n
		for t := rng.ExpFloat64() * mean; t < end; t += rng.ExpFloat64() * mean {
			f := failure{at: t, planned: planned, page: rng.ExpFloat64(), escPage: rng.ExpFloat64(), escU: rng.Float64()}
			if !planned {
				k := rng.IntN(total)
				for i, c := range sc.Mix {
					if k < c.Count {
						f.comp = i
						break
					}
					k -= c.Count
				}
				c := sc.Mix[f.comp]
				share := c.Repair
				if sc.RepairShare >= 0 {
					share = sc.RepairShare
				}
				f.repair = rng.Float64() < share
				f.warn = rng.Float64() < c.Warn
				f.hang = !f.warn && rng.Float64() < c.Hang
				f.sdc = c.SDC
				u := rng.Float64()
				f.action = replace
				for a := range nActions {
					if u < c.Actions[a] {
						f.action = a
						break
					}
					u -= c.Actions[a]
				}
			}
			fs = append(fs, f)
		}
	}
	arrivals(sc.Unexpected, false)
	arrivals(sc.Planned, true)
	sort.SliceStable(fs, func(i, j int) bool { return fs[i].at < fs[j].at })
	return fs
}

// Phases the job's time is spent in; their sum is the wall time.
const (
	phRollback = iota // running time whose work a rollback lost
	phStall
	phDetect
	phEscalate
	phDiagnose
	phWait
	phRequeue
	phManual
	phRestart
	phRunning
	phEnd
	nPhases
)

// phaseNames name the phases; phases lists the lost ones in report order.
var (
	phaseNames = [nPhases]string{"lost to rollback", "checkpoint stalls", "detection", "escalation to a person",
		"diagnosis by hand", "waiting for a node", "requeue onto a spare", "restart by hand", "restart", "running", "end"}
	phases = []int{phRollback, phStall, phDetect, phEscalate, phDiagnose, phWait, phRequeue, phManual, phRestart}
)

// Result is one simulated run.
type Result struct {
	Wall, Productive float64
	// Time by phase (seconds); Time[phRunning] is productive (running
	// less what a rollback lost, which is Time[phRollback]).
	Time                             [nPhases]float64
	Interruptions, Planned, Repairs  int
	Drained, Escalated, WaitedOnNode int
	MaxInRepair                      int
	Events                           int
}

// ETTR is the effective training time ratio: productive over wall time.
func (r Result) ETTR() float64 { return r.Productive / r.Wall }

// job is the state of one simulated run.
type job struct {
	eng  *Engine
	p    Policy
	up   bool // the job's processes are running (training or stalled)
	prog float64
	// durable lists the progress of every safe checkpoint, ascending.
	durable []float64
	// gen changes at every interruption: continuations of the handling
	// of an earlier one (and the checkpoint schedule) see it and stop.
	// life changes when the job's processes die: a checkpoint write in
	// flight dies with them.
	gen, life int
	need      int // nodes the job lacks (taken out for repair)
	spares    int
	inRepair  int
	waiting   func()
	phase     int
	phaseAt   float64
	res       Result
}

// simulate runs one policy on one trace for the scenario's days.
func simulate(sc Scenario, p Policy, fs []failure) Result {
	j := &job{eng: &Engine{}, p: p, spares: p.Spares, phase: phRestart}
	// Each failure schedules the next when it fires: the queue stays a
	// handful of events long instead of holding the whole trace.
	var next func(i int)
	next = func(i int) {
		if i == len(fs) {
			return
		}
		f := fs[i]
		j.eng.At(f.at, func() {
			next(i + 1)
			if f.sdc {
				// Corruption starts now and is found SDCDetect later: roll
				// back to a checkpoint from before it.
				j.setPhase(j.phase) // bring prog up to date
				onset := j.prog
				j.eng.After(p.SDCDetect, func() { j.interrupt(f, onset) })
				return
			}
			j.interrupt(f, -1)
		})
	}
	next(0)
	end := sc.Days * day
	j.start(j.gen)
	j.eng.Run(end)
	j.setPhase(phEnd)
	j.res.Wall = end
	j.res.Productive = j.prog
	j.res.Time[phRunning] -= j.res.Time[phRollback]
	j.res.Events = j.eng.done
	return j.res
}

// setPhase closes the current phase at the engine's time and opens next.
func (j *job) setPhase(next int) {
	now := j.eng.Now()
	d := now - j.phaseAt
	j.res.Time[j.phase] += d
	if j.phase == phRunning {
		j.prog += d
	}
	j.phase, j.phaseAt = next, now
}

// start runs the job (after a restart) and schedules its checkpoints.
func (j *job) start(g int) {
	j.up = true
	j.setPhase(phRunning)
	if j.p.CkptInterval > 0 {
		j.eng.After(j.p.CkptInterval, func() { j.checkpoint(g, false) })
	}
}

// checkpoint takes a checkpoint: a stall, then (async) the write; with
// drain it then stops the job for f's handling.
func (j *job) checkpoint(g int, drain bool, then ...func()) {
	if g != j.gen {
		return
	}
	began := j.eng.Now()
	j.setPhase(phStall)
	at, life := j.prog, j.life
	j.eng.After(j.p.CkptStall, func() {
		if g != j.gen {
			return
		}
		j.setPhase(phRunning)
		safe := func() {
			if life == j.life && (len(j.durable) == 0 || j.durable[len(j.durable)-1] < at) {
				j.durable = append(j.durable, at)
			}
		}
		if j.p.CkptDurable > 0 {
			j.eng.After(j.p.CkptDurable, func() {
				safe()
				if drain && g == j.gen {
					then[0]()
				}
			})
		} else {
			safe()
			if drain {
				then[0]()
			}
		}
		if !drain {
			next := began + j.p.CkptInterval
			j.eng.At(max(next, j.eng.Now()), func() { j.checkpoint(g, false) })
		}
	})
}

// interrupt handles failure f. onset >= 0 is silent data corruption's:
// training rolls back to a checkpoint from before it.
func (j *job) interrupt(f failure, onset float64) {
	if f.planned && !j.up {
		return // maintenance done while the job is down costs it nothing
	}
	j.gen++
	g := j.gen
	j.waiting = nil
	if f.planned {
		j.res.Planned++
		j.checkpoint(g, true, func() { j.stop(-1); j.recover(f, g, true, -1) })
		return
	}
	j.res.Interruptions++
	if f.warn && j.p.Drain && j.up {
		j.res.Drained++
		j.checkpoint(g, true, func() { j.stop(-1); j.recover(f, g, true, -1) })
		return
	}
	saved := -1.0
	if onset < 0 && j.up && (j.p.FailureCkptAll || j.p.FailureCkpt && f.repair && !f.hang) {
		j.setPhase(j.phase) // bring prog up to date
		saved = j.prog
	}
	j.stop(onset)
	j.recover(f, g, false, saved)
}

// stop ends the job's processes: its progress goes back to the latest safe
// checkpoint (one from before onset when onset >= 0).
func (j *job) stop(onset float64) {
	j.setPhase(phDetect)
	if !j.up && onset < 0 {
		return
	}
	j.up = false
	j.life++
	for len(j.durable) > 0 && onset >= 0 && j.durable[len(j.durable)-1] > onset {
		j.durable = j.durable[:len(j.durable)-1]
	}
	back := 0.0
	if len(j.durable) > 0 {
		back = j.durable[len(j.durable)-1]
	}
	if back < j.prog {
		j.res.Time[phRollback] += j.prog - back
		j.prog = back
	}
}

// recover takes the job from an interruption back to running: detection,
// an escalation now and then, a node swapped for the bad one, a restart.
// saved >= 0 is the progress a checkpoint on failure (Policy.FailureCkpt,
// FailureCkptAll) saves once the failure is detected; training resumes
// from there.
func (j *job) recover(f failure, g int, warned bool, saved float64) {
	p := j.p
	var steps []step
	add := func(phase int, d float64) {
		if d > 0 {
			steps = append(steps, step{phase: phase, d: d})
		}
	}
	switch {
	case warned || f.planned:
	case p.Manual:
		if f.hang {
			add(phDetect, p.HangDetect)
		}
		add(phDetect, p.Page*f.page)
	case f.hang:
		add(phDetect, p.HangDetect)
	default:
		add(phDetect, p.Detect)
	}
	if saved >= 0 {
		// The survivors write what training had reached: a stall, then
		// it is safe, and the rollback stop() counted is undone.
		steps = append(steps, step{phase: phStall, d: p.CkptStall + p.CkptDurable})
		steps[len(steps)-1].then = func() {
			if saved > j.prog {
				j.res.Time[phRollback] -= saved - j.prog
				j.prog = saved
			}
			if len(j.durable) == 0 || j.durable[len(j.durable)-1] < saved {
				j.durable = append(j.durable, saved)
			}
		}
	}
	if !p.Manual && !f.planned && f.escU < p.Escalation {
		j.res.Escalated++
		add(phEscalate, p.Page*f.escPage+p.EscalationWork)
	}
	if f.repair && p.Manual {
		add(phDiagnose, p.Diagnose)
	}
	var after func()
	after = func() {
		if g != j.gen {
			return
		}
		if f.repair {
			f.repair = false // once, even if this continuation is resumed
			j.res.Repairs++
			j.need++
			j.inRepair++
			j.res.MaxInRepair = max(j.res.MaxInRepair, j.inRepair)
			j.eng.After(p.RepairQueue+p.RepairTime[f.action], func() {
				j.inRepair--
				j.spares++
				j.assign()
			})
			j.assign()
			if j.need > 0 {
				j.res.WaitedOnNode++
				j.setPhase(phWait)
				j.waiting = func() { j.restart(g, true) }
				return
			}
			j.restart(g, true)
			return
		}
		if j.need > 0 { // still short of nodes from an earlier failure
			j.setPhase(phWait)
			j.waiting = func() { j.restart(g, true) }
			return
		}
		j.restart(g, false)
	}
	j.chain(g, steps, after)
}

// step is a phase of a recovery and how long it lasts; then, when set,
// runs at its end.
type step struct {
	phase int
	d     float64
	then  func()
}

// chain runs timed phases one after another, then fn, unless the job is
// interrupted again in between.
func (j *job) chain(g int, steps []step, fn func()) {
	if g != j.gen {
		return
	}
	if len(steps) == 0 {
		fn()
		return
	}
	j.setPhase(steps[0].phase)
	j.eng.After(steps[0].d, func() {
		if g == j.gen && steps[0].then != nil {
			steps[0].then()
		}
		j.chain(g, steps[1:], fn)
	})
}

// assign gives spare nodes to the job while it lacks some; when it has
// all it needs, a restart waiting for them goes on.
func (j *job) assign() {
	n := min(j.need, j.spares)
	j.need -= n
	j.spares -= n
	if j.need == 0 && j.waiting != nil {
		w := j.waiting
		j.waiting = nil
		w()
	}
}

// restart puts the job back: onto a spare (moved), by hand or not.
func (j *job) restart(g int, moved bool) {
	p := j.p
	var steps []step
	add := func(phase int, d float64) {
		if d > 0 {
			steps = append(steps, step{phase: phase, d: d})
		}
	}
	if moved && !p.Manual {
		add(phRequeue, p.Requeue)
	}
	if p.Manual {
		add(phManual, p.ManualWork)
	}
	add(phRestart, p.Restart)
	j.chain(g, steps, func() { j.start(g) })
}
