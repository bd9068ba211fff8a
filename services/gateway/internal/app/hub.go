package app

import (
	"strings"
	"sync"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// watchBuffer is how many changes a watcher may lag behind before it is cut off.
const watchBuffer = 64

// hub fans job changes out to the watchers of each job in this process,
// and to the watchers of each job's project (WatchChanges), keyed
// "projects/{project}".
type hub struct {
	mu   sync.Mutex
	subs map[string]map[*sub]struct{}
}

// sub is one watcher. C is closed when the watcher fell too far behind.
type sub struct {
	job string
	C   chan *loomv1.Job
}

func newHub() *hub { return &hub{subs: map[string]map[*sub]struct{}{}} }

// subscribe starts delivering changes of job (a job's name, or a
// project's: every job of it) to the returned sub.
func (h *hub) subscribe(job string) *sub {
	s := &sub{job: job, C: make(chan *loomv1.Job, watchBuffer)}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.subs[job] == nil {
		h.subs[job] = map[*sub]struct{}{}
	}
	h.subs[job][s] = struct{}{}
	return s
}

// unsubscribe stops deliveries to s (a no-op when publish dropped it already).
func (h *hub) unsubscribe(s *sub) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.subs[s.job], s)
	if len(h.subs[s.job]) == 0 {
		delete(h.subs, s.job)
	}
}

// watched reports whether job has a watcher now.
func (h *hub) watched(job string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs[job]) > 0
}

// publish hands j to every watcher of its job without blocking: a watcher
// whose buffer is full is dropped and its channel closed, so one slow client
// never holds up the consumer that feeds everyone.
func (h *hub) publish(j *loomv1.Job) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, key := range []string{j.GetName(), jobProject(j.GetName())} {
		if key == "" {
			continue
		}
		for s := range h.subs[key] {
			select {
			case s.C <- j:
			default:
				delete(h.subs[key], s)
				close(s.C)
			}
		}
		if len(h.subs[key]) == 0 {
			delete(h.subs, key)
		}
	}
}

// jobProject is the project part ("projects/{project}") of a job's name,
// or "" when it has none.
func jobProject(job string) string {
	if p, _, ok := strings.Cut(job, "/jobs/"); ok && strings.HasPrefix(p, "projects/") {
		return p
	}
	return ""
}

// signals wakes the waiters of a name (operations) in this process.
type signals struct {
	mu      sync.Mutex
	waiters map[string]map[chan struct{}]struct{}
}

func newSignals() *signals { return &signals{waiters: map[string]map[chan struct{}]struct{}{}} }

// wait returns a channel that receives after the next notify of name, and a
// function that stops the wait.
func (s *signals) wait(name string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	s.mu.Lock()
	if s.waiters[name] == nil {
		s.waiters[name] = map[chan struct{}]struct{}{}
	}
	s.waiters[name][ch] = struct{}{}
	s.mu.Unlock()
	return ch, func() {
		s.mu.Lock()
		delete(s.waiters[name], ch)
		if len(s.waiters[name]) == 0 {
			delete(s.waiters, name)
		}
		s.mu.Unlock()
	}
}

// notify wakes every waiter of name.
func (s *signals) notify(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for ch := range s.waiters[name] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// notifyAll wakes every waiter of every name: they read Redis again.
func (s *signals) notifyAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, chs := range s.waiters {
		for ch := range chs {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
}
