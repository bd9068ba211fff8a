package telemetry

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Warnings and errors are rate limited per message: a service logs one
// for each record it refuses, and a hostile producer (a compromised node
// signing records the consumers refuse) could otherwise turn its flood
// into a flood of log lines on every consumer, filling their disks. Each
// message text may log LogBurst records at once and LogPerSecond after;
// the rest are dropped, and the next record of that message that is
// logged says how many were (attribute "suppressed"). Info and debug
// records are not limited: nothing a caller sends makes them per record.
const (
	LogBurst     = 20
	LogPerSecond = 5
	// logKinds bounds the messages tracked: messages are the code's
	// constants, so this is never reached but by a message built from
	// input, which then shares one bucket with all others past the bound.
	logKinds = 1024
)

// limited is the rate-limit state one logger and its derived loggers
// (With, WithGroup) share.
type limited struct {
	mu      sync.Mutex
	now     func() time.Time
	buckets map[string]*logBucket
}

// logBucket is one message's token bucket and the records it dropped
// since the last it let through.
type logBucket struct {
	lim        *rate.Limiter
	suppressed int
}

func newLimited(now func() time.Time) *limited {
	if now == nil {
		now = time.Now
	}
	return &limited{now: now, buckets: make(map[string]*logBucket)}
}

// admit reports whether a record of msg may be logged now, and how many
// of msg's were dropped since the last one logged.
func (l *limited) admit(msg string) (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.buckets[msg]
	if b == nil && len(l.buckets) >= logKinds {
		msg = ""
		b = l.buckets[msg]
	}
	if b == nil {
		b = &logBucket{lim: rate.NewLimiter(LogPerSecond, LogBurst)}
		l.buckets[msg] = b
	}
	if !b.lim.AllowN(l.now(), 1) {
		b.suppressed++
		return false, 0
	}
	n := b.suppressed
	b.suppressed = 0
	return true, n
}

// limitHandler is a slog.Handler that rate limits warnings and errors per
// message (limited).
type limitHandler struct {
	slog.Handler
	l *limited
}

func (h limitHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level < slog.LevelWarn {
		return h.Handler.Handle(ctx, r)
	}
	ok, dropped := h.l.admit(r.Message)
	if !ok {
		return nil
	}
	if dropped > 0 {
		r = r.Clone()
		r.AddAttrs(slog.Int("suppressed", dropped))
	}
	return h.Handler.Handle(ctx, r)
}

func (h limitHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return limitHandler{h.Handler.WithAttrs(as), h.l}
}

func (h limitHandler) WithGroup(name string) slog.Handler {
	return limitHandler{h.Handler.WithGroup(name), h.l}
}
