package app

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// recentIDs remembers the job id counter over the last minutes, so that a
// filtered list reads only the accepted records recent enough to show.
// A filtered list adds an accepted job the scheduler does not list only
// if it was accepted within acceptedWindow (unknownToScheduler): the
// accepted index holds every job not ended (running ones too, a hundred
// thousand in a busy project), and without a bound each filtered page read
// up to maxIndexScan of those records to drop them all. Job ids come from
// one counter and grow with acceptance, so a job with an id at most the
// counter's value at a time older than the window was accepted before it.
type recentIDs struct {
	mu      sync.Mutex
	samples []idSample // by time
}

type idSample struct {
	at time.Time
	id int64
}

const (
	// recentIDsEvery is how often the counter is read again, at most.
	recentIDsEvery = time.Minute
	// recentIDsMargin is added to acceptedWindow: an id is taken a moment
	// before its job's submit time is set, and the gateway that set it may
	// have a clock ahead of this one's (gateways' clocks must agree within
	// it: docs in the README).
	recentIDsMargin = 5 * time.Minute
)

// floor returns the greatest job id known to have been given before
// acceptedWindow (and a margin) ago, 0 when none is known (this gateway's
// samples are younger): every job accepted within the window has a greater
// id. It reads the counter (one GET) when the last sample is older than
// recentIDsEvery.
func (g *Gateway) recentIDFloor(ctx context.Context) (int64, error) {
	r := &g.recent
	now := g.now()
	r.mu.Lock()
	stale := len(r.samples) == 0 || now.Sub(r.samples[len(r.samples)-1].at) >= recentIDsEvery
	r.mu.Unlock()
	if stale {
		id, err := g.repo.LastJobID(ctx)
		if err != nil {
			return 0, fmt.Errorf("recent job ids: %w", err)
		}
		// Stamped after the read: every id up to the value was given by
		// then (a stamp from before the read would claim ids given while
		// it was under way were older).
		at := g.now()
		r.mu.Lock()
		if n := len(r.samples); n == 0 || r.samples[n-1].at.Before(at) {
			r.samples = append(r.samples, idSample{at: at, id: id})
		}
		r.mu.Unlock()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	old := now.Add(-acceptedWindow - recentIDsMargin)
	// The newest sample at or before old bounds; those before it are no
	// longer needed.
	i := -1
	for k, s := range r.samples {
		if !s.at.After(old) {
			i = k
		}
	}
	if i < 0 {
		return 0, nil
	}
	r.samples = r.samples[i:]
	return r.samples[0].id, nil
}
