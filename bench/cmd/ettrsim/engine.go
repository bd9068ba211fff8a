package main

import "container/heap"

// Engine is a discrete-event engine: a clock and a queue of events, run in
// order of time and, at equal times, in the order they were scheduled (so a
// run is deterministic). Times are seconds since the start of the run.
type Engine struct {
	now  float64
	seq  uint64
	q    eventQueue
	done int // events run
}

type event struct {
	at  float64
	seq uint64
	fn  func()
}

type eventQueue []event

func (q eventQueue) Len() int { return len(q) }
func (q eventQueue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q eventQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *eventQueue) Push(x any)   { *q = append(*q, x.(event)) }
func (q *eventQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

// Now is the engine's clock: the time of the event being run, or the end
// of the last Run.
func (e *Engine) Now() float64 { return e.now }

// At schedules fn at time t; a time in the past runs at the current time
// (after what is already scheduled for it).
func (e *Engine) At(t float64, fn func()) {
	if t < e.now {
		t = e.now
	}
	e.seq++
	heap.Push(&e.q, event{at: t, seq: e.seq, fn: fn})
}

// After schedules fn d seconds from now.
func (e *Engine) After(d float64, fn func()) { e.At(e.now+d, fn) }

// Run runs every event due before until, including those they schedule,
// then sets the clock to until. Events at until or later stay queued.
func (e *Engine) Run(until float64) {
	for e.q.Len() > 0 && e.q[0].at < until {
		ev := heap.Pop(&e.q).(event)
		e.now = ev.at
		e.done++
		ev.fn()
	}
	e.now = until
}
