// Package guard holds the gateway's interceptors that bound and record
// what principals do: per-principal rate limits and a cap on concurrent
// watch streams (Limiter), and the audit trail of every mutating request
// and every refusal (Auditor). The gateway chains them as its
// interceptors function says: errs → audit → authn → rate limit + watch
// cap → a request that did not decode refused (ports.DecodeGuard) → authz
// → request checks → handler.
package guard

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/grpc"

	"github.com/loom-ml/loom/libs/auth"
	"github.com/loom-ml/loom/libs/errs"
)

// Defaults of LimitOptions (the gateway's -rate, -burst and -max-watches
// flags). They are far above what a person at a terminal or the test
// suites do (the benchmarks submit about 400 jobs a second as one
// principal), so that they stop a runaway script without bothering anyone.
const (
	// DefaultRate is the requests per second a principal's bucket refills.
	DefaultRate = 1000
	// DefaultBurst is the bucket's size: requests a principal may make at
	// once after a quiet spell.
	DefaultBurst = 2000
	// DefaultMaxWatches is the watch streams (WatchJob, ReadJobLogs,
	// WaitOperation, WatchChanges) a principal may hold open at once.
	DefaultMaxWatches = 256
	// DefaultIdle is how long a principal's bucket is kept after its last
	// call; a principal back after that starts with a full bucket.
	DefaultIdle = 10 * time.Minute
	// DefaultMaxPrincipals bounds the principals tracked at once; past it
	// the idle ones are evicted first, then all whose watches are closed.
	DefaultMaxPrincipals = 100000
)

// WatchMethods are the long calls the watch cap counts.
var WatchMethods = map[string]bool{
	"/loom.v1.JobService/WatchJob":            true,
	"/loom.v1.JobService/ReadJobLogs":         true,
	"/loom.v1.OperationService/WaitOperation": true,
	"/loom.v1.ChangeService/WatchChanges":     true,
}

// LimitOptions tune a Limiter. Zero fields take the defaults.
type LimitOptions struct {
	// Rate is requests per second per principal (negative: no rate limit).
	Rate float64
	// Burst is the bucket's size.
	Burst int
	// MaxWatches caps a principal's open watch streams (negative: no cap).
	MaxWatches int
	// Idle is how long an idle principal is remembered.
	Idle time.Duration
	// MaxPrincipals bounds the principals remembered.
	MaxPrincipals int
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Limiter rate-limits each principal's calls with a token bucket
// (golang.org/x/time/rate) and caps its concurrent watch streams. A
// principal is auth.FromContext's Name; an anonymous call is keyed by its
// peer's IP address. Memory is bounded: principals idle for Idle are
// evicted, and at most MaxPrincipals are kept. Refusals are
// errs.ResourceExhausted naming the limit, its value and its variable.
type Limiter struct {
	opt LimitOptions

	mu        sync.Mutex
	m         map[string]*principalState
	lastSweep time.Time
}

type principalState struct {
	bucket  *rate.Limiter
	watches int
	last    time.Time
}

// NewLimiter returns a Limiter with opt's limits.
func NewLimiter(opt LimitOptions) *Limiter {
	if opt.Rate == 0 {
		opt.Rate = DefaultRate
	}
	if opt.Burst <= 0 {
		opt.Burst = DefaultBurst
	}
	if opt.MaxWatches == 0 {
		opt.MaxWatches = DefaultMaxWatches
	}
	if opt.Idle <= 0 {
		opt.Idle = DefaultIdle
	}
	if opt.MaxPrincipals <= 0 {
		opt.MaxPrincipals = DefaultMaxPrincipals
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	return &Limiter{opt: opt, m: map[string]*principalState{}}
}

// Key is who a call counts against: the principal's name, else
// "anonymous@" and the client's IP address (PeerIP: a REST call's client,
// not the REST port; every port of one host shares it), an IPv6 one by its
// /64, which one host or site holds whole: per address, it could make a
// bucket per call.
func Key(ctx context.Context) string {
	if p, ok := auth.FromContext(ctx); ok {
		return p.Name
	}
	ip := PeerIP(ctx)
	if a, err := netip.ParseAddr(ip); err == nil && a.Is6() && !a.Is4In6() {
		if pfx, err := a.Prefix(64); err == nil {
			ip = pfx.String()
		}
	}
	return "anonymous@" + ip
}

// ErrRateLimited marks a refusal of the rate limit (it wraps
// errs.ResourceExhausted), so that a caller can tell a rate refusal from a
// quota.
var ErrRateLimited = fmt.Errorf("rate limit: %w", errs.ResourceExhausted)

// state returns key's state, creating it; l.mu is held.
func (l *Limiter) state(key string, now time.Time) *principalState {
	if now.Sub(l.lastSweep) >= l.opt.Idle/2 || len(l.m) >= l.opt.MaxPrincipals {
		l.sweep(now)
	}
	s := l.m[key]
	if s == nil {
		lim := rate.Inf
		if l.opt.Rate > 0 {
			lim = rate.Limit(l.opt.Rate)
		}
		s = &principalState{bucket: rate.NewLimiter(lim, l.opt.Burst)}
		l.m[key] = s
	}
	s.last = now
	return s
}

// sweep evicts principals idle for Idle; when that leaves too many, every
// principal without an open watch (they start again with a full bucket:
// memory is bounded at the cost of leniency under a flood of principals).
func (l *Limiter) sweep(now time.Time) {
	l.lastSweep = now
	for k, s := range l.m {
		if s.watches == 0 && now.Sub(s.last) >= l.opt.Idle {
			delete(l.m, k)
		}
	}
	if len(l.m) >= l.opt.MaxPrincipals {
		for k, s := range l.m {
			if s.watches == 0 {
				delete(l.m, k)
			}
		}
	}
}

// Len is how many principals the limiter remembers now.
func (l *Limiter) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.m)
}

// admit takes a token from key's bucket and, for a watch method, counts a
// watch in; the returned done counts it out.
func (l *Limiter) admit(ctx context.Context, method string) (done func(), err error) {
	key := Key(ctx)
	now := l.opt.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.state(key, now)
	if !s.bucket.AllowN(now, 1) {
		return nil, fmt.Errorf("%s: more than %g requests a second (LOOM_GATEWAY_RATE), in bursts of at most %d (LOOM_GATEWAY_BURST); slow down and retry: %w",
			key, l.opt.Rate, l.opt.Burst, ErrRateLimited)
	}
	if !WatchMethods[method] || l.opt.MaxWatches < 0 {
		return func() {}, nil
	}
	if s.watches >= l.opt.MaxWatches {
		return nil, fmt.Errorf("%s: %d watch streams open (WatchJob, ReadJobLogs, WaitOperation, WatchChanges), the limit of %d (LOOM_GATEWAY_MAX_WATCHES); close one first: %w",
			key, s.watches, l.opt.MaxWatches, errs.ResourceExhausted)
	}
	s.watches++
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			s.watches--
			s.last = l.opt.Now()
		})
	}, nil
}

// UnaryServerInterceptor applies the limits to unary calls (WaitOperation
// counts as a watch while it waits).
func (l *Limiter) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		done, err := l.admit(ctx, info.FullMethod)
		if err != nil {
			return nil, err
		}
		defer done()
		return h(ctx, req)
	}
}

// StreamServerInterceptor applies the limits to streams (WatchJob and
// ReadJobLogs count as watches while they are open).
func (l *Limiter) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		done, err := l.admit(ss.Context(), info.FullMethod)
		if err != nil {
			return err
		}
		defer done()
		return h(srv, ss)
	}
}
