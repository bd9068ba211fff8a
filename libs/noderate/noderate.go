// Package noderate holds each node to a rate on the records it signs: a
// compromised node may write as fast as Kafka takes its records, and every
// record it writes costs its readers. Health holds the nodes' telemetry to
// its -node-rate with Buckets, and every verifying bus consumer each node's
// records to -bus-node-rate (bus.ConsumerConfig.NodeRate); DropLog sums up
// what they drop.
package noderate

import (
	"time"

	"golang.org/x/time/rate"
)

// Buckets are the nodes' token buckets: perSecond records a second, burst
// at once, kept only for the nodes heard lately (a bucket that filled up
// again is a new one, and Prune forgets it). It is not safe for concurrent
// use.
type Buckets struct {
	rate  rate.Limit
	burst int
	m     map[string]*rate.Limiter
}

// New returns empty buckets of perSecond records a second and burst at
// once; both must be positive.
func New(perSecond float64, burst int) *Buckets {
	return &Buckets{rate: rate.Limit(perSecond), burst: burst, m: map[string]*rate.Limiter{}}
}

// Allowed reports whether node has a token at now (Take takes it).
func (b *Buckets) Allowed(now time.Time, node string) bool {
	l := b.m[node]
	return l == nil || l.TokensAt(now) >= 1
}

// Take takes a token from node's bucket at now.
func (b *Buckets) Take(now time.Time, node string) {
	l := b.m[node]
	if l == nil {
		l = rate.NewLimiter(b.rate, b.burst)
		b.m[node] = l
	}
	l.AllowN(now, 1)
}

// Prune forgets the buckets that have filled up again: a full bucket is a
// new one, so memory holds only the nodes that sent records lately.
func (b *Buckets) Prune(now time.Time) {
	for node, l := range b.m {
		if l.TokensAt(now) >= float64(b.burst) {
			delete(b.m, node)
		}
	}
}

// Len is how many nodes' buckets are kept.
func (b *Buckets) Len() int { return len(b.m) }
