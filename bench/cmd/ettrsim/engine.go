package main

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

// eventQueue is a binary min-heap of events by (at, seq), typed so that
// pushing an event does not allocate (container/heap boxes each one).
type eventQueue []event

func (q eventQueue) less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}

func (q *eventQueue) push(ev event) {
	*q = append(*q, ev)
	h := *q
	for i := len(h) - 1; i > 0; {
		parent := (i - 1) / 2
		if !h.less(i, parent) {
			break
		}
		h[i], h[parent] = h[parent], h[i]
		i = parent
	}
}

func (q *eventQueue) pop() event {
	h := *q
	top := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h[last] = event{}
	h = h[:last]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(h) && h.less(l, m) {
			m = l
		}
		if r < len(h) && h.less(r, m) {
			m = r
		}
		if m == i {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	*q = h
	return top
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
	e.q.push(event{at: t, seq: e.seq, fn: fn})
}

// After schedules fn d seconds from now.
func (e *Engine) After(d float64, fn func()) { e.At(e.now+d, fn) }

// Run runs every event due before until, including those they schedule,
// then sets the clock to until. Events at until or later stay queued.
func (e *Engine) Run(until float64) {
	for len(e.q) > 0 && e.q[0].at < until {
		ev := e.q.pop()
		e.now = ev.at
		e.done++
		ev.fn()
	}
	e.now = until
}
