package scheduler

import (
	"testing"
	"time"
)

// TestRefreshWait: a follower refreshes every interval while reloads are
// cheap, and no sooner than ten times the last reload once they are not
// (a state of 100,000 jobs reloads in about a second).
func TestRefreshWait(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ interval, took, want time.Duration }{
		{2 * time.Second, 0, 2 * time.Second},                           // nothing changed: no reload
		{2 * time.Second, 150 * time.Millisecond, 2 * time.Second},      // a small state
		{2 * time.Second, 200 * time.Millisecond, 2 * time.Second},      // the edge
		{2 * time.Second, 1100 * time.Millisecond, 11 * time.Second},    // 100,000 jobs
		{30 * time.Second, 1100 * time.Millisecond, 30 * time.Second},   // a longer interval set
		{time.Millisecond, 3 * time.Millisecond, 30 * time.Millisecond}, // a short one
	} {
		if got := refreshWait(c.interval, c.took); got != c.want {
			t.Errorf("refreshWait(%v, %v) = %v, want %v", c.interval, c.took, got, c.want)
		}
	}
}
