package local

import "time"

// waitUntil polls cond until it holds, d passes or done closes; it reports
// whether cond held.
func waitUntil(d time.Duration, done <-chan struct{}, cond func() bool) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if cond() {
			return true
		}
		select {
		case <-t.C:
			return cond()
		case <-done:
			return cond()
		case <-tick.C:
		}
	}
}
