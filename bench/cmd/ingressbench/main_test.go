package main

import (
	"strings"
	"testing"
	"time"
)

// TestOptionsBounds: every setting out of its bounds is refused, all at
// once, naming the flag; the defaults pass.
func TestOptionsBounds(t *testing.T) {
	t.Parallel()
	good := options{n: 1000, rate: 50, duration: 20 * time.Second, concurrency: 16, batch: 100, probeTimeout: time.Second, timeout: time.Minute}
	if err := good.check(); err != nil {
		t.Fatalf("defaults refused: %v", err)
	}
	bad := options{n: 0, rate: -1, duration: time.Millisecond, concurrency: 0, batch: 20_000}
	err := bad.check()
	for _, flag := range []string{"-n ", "-rate ", "-duration ", "-concurrency ", "-batch ", "-probe-timeout"} {
		if err == nil || !strings.Contains(err.Error(), flag) {
			t.Errorf("check() = %v, want it to name %s", err, flag)
		}
	}
}

// TestSummarize: p50 and p99 of a known set, and none of an empty one.
func TestSummarize(t *testing.T) {
	t.Parallel()
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	l := summarize(ds)
	if l.n != 100 || l.p50 != 51*time.Millisecond || l.p99 != 100*time.Millisecond || l.max != 100*time.Millisecond {
		t.Errorf("summarize = %+v", l)
	}
	if l := summarize(nil); l.n != 0 || l.p99 != 0 {
		t.Errorf("summarize(nil) = %+v", l)
	}
}
