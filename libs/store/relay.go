package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"
)

// Publisher writes encoded records to Kafka; *bus.Producer is one.
type Publisher interface {
	PublishMessages(ctx context.Context, msgs ...kafka.Message) error
}

// PublisherFunc adapts a function to a Publisher.
type PublisherFunc func(ctx context.Context, msgs ...kafka.Message) error

// PublishMessages calls f.
func (f PublisherFunc) PublishMessages(ctx context.Context, msgs ...kafka.Message) error {
	return f(ctx, msgs...)
}

// RunRelay publishes the outbox to pub until ctx ends: in order, in batches,
// deleting entries only after pub returned nil. It wakes at once after Apply
// wrote events in this process, and polls otherwise, so entries written by a
// crashed predecessor are published too. Only one relay per prefix publishes at
// a time (a Redis lease), so several instances of a service can run.
//
// A failed publish is retried with backoff, the same batch from the same
// place, so nothing is dropped or reordered; Redis errors are retried too. An
// entry that cannot be decoded (written by something other than Apply) is
// moved to the stream "<prefix>outbox:dead" rather than blocking the outbox.
// RunRelay returns nil when ctx ends, after releasing the lease.
//
// The lease bounds each publish by a deadline inside the lease's lifetime, so
// a relay that lost its lease has stopped publishing; a record kafka-go sent
// just before its deadline may still land, which the consumers' inboxes absorb.
func (s *Store) RunRelay(ctx context.Context, pub Publisher) error {
	var b [16]byte
	_, _ = rand.Read(b[:])
	r := &relay{s: s, pub: pub, token: hex.EncodeToString(b[:]), backoff: minBackoff}
	err := r.run(ctx)
	var crash crashError
	if errors.As(err, &crash) {
		return err // a crashed process leaves its lease to expire
	}
	if r.held {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		if err := s.releaseLease(rctx, s.leaseKey, r.token); err != nil {
			s.log().Warn("outbox relay: release lease", "err", err)
		}
		cancel()
	}
	return err
}

// relay is one RunRelay's state.
type relay struct {
	s       *Store
	pub     Publisher
	token   string
	held    bool
	backoff time.Duration
	// published are the ids of outbox entries that Kafka has and that are
	// not deleted yet: the next read deletes them in its round trip.
	published []string
}

func (r *relay) run(ctx context.Context) (err error) {
	s := r.s
	defer func() {
		var crash crashError
		if len(r.published) == 0 || errors.As(err, &crash) {
			return
		}
		// Published records must go even when ctx just ended; a failure
		// here only republishes them later.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		if derr := s.rdb.XDel(dctx, s.outboxKey, r.published...).Err(); derr != nil {
			s.log().Warn("outbox relay: delete published entries; they will be republished", "err", derr)
		}
	}()
	for ctx.Err() == nil {
		if !r.held {
			ok, err := s.rdb.SetNX(ctx, s.leaseKey, r.token, s.leaseTTL).Result()
			if err != nil {
				if ctx.Err() == nil {
					s.log().Warn("outbox relay: acquire lease", "err", err)
				}
				r.sleep(ctx, s.pollInterval, false)
				continue
			}
			if !ok {
				r.sleep(ctx, s.pollInterval, false)
				continue
			}
			r.held = true
			s.log().Debug("outbox relay: lease acquired")
		}

		leaseFrom := time.Now()
		held, entries, err := r.renewAndRead(ctx)
		if err != nil {
			if ctx.Err() == nil {
				s.log().Warn("outbox relay: read outbox", "err", err)
				r.sleep(ctx, r.nextBackoff(), false)
			}
			continue
		}
		if !held {
			r.held = false
			s.log().Warn("outbox relay: lease lost; another relay publishes")
			continue
		}
		if len(entries) == 0 {
			r.sleep(ctx, s.pollInterval, true)
			continue
		}

		msgs, ids, bad := decodePrefix(entries)
		if len(msgs) == 0 {
			r.deadLetter(ctx, entries[0], bad)
			continue
		}
		// Kafka must have the batch before the lease could lapse, so that a
		// successor never publishes alongside this relay.
		pctx, cancel := context.WithDeadline(ctx, leaseFrom.Add(s.leaseTTL))
		err = r.pub.PublishMessages(pctx, msgs...)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				s.log().Warn("outbox relay: publish; retrying", "records", len(msgs), "err", err)
				r.sleep(ctx, r.nextBackoff(), false)
			}
			continue
		}
		r.backoff = minBackoff
		if f := s.fp.afterPublish; f != nil {
			if err := f(msgs); err != nil {
				return fmt.Errorf("store %s: relay: %w", s.prefix, crashError{err})
			}
		}
		// The next read deletes them, in its round trip.
		r.published = ids
	}
	return nil
}

// renewAndRead deletes the entries published last, renews the lease and
// reads the first batch of the outbox, in one round trip. held=false means
// the lease is no longer this relay's.
func (r *relay) renewAndRead(ctx context.Context) (held bool, entries []redis.XMessage, err error) {
	s := r.s
	pipe := s.rdb.Pipeline()
	if len(r.published) > 0 {
		pipe.XDel(ctx, s.outboxKey, r.published...)
	}
	renew := renewScript.Eval(ctx, pipe, []string{s.leaseKey}, r.token, s.leaseTTL.Milliseconds())
	rng := pipe.XRangeN(ctx, s.outboxKey, "-", "+", int64(s.batchSize))
	if _, err := pipe.Exec(ctx); err != nil {
		return false, nil, fmt.Errorf("store %s: relay: %w", s.prefix, err)
	}
	r.published = nil
	n, err := renew.Int()
	if err != nil {
		return false, nil, fmt.Errorf("store %s: relay: renew lease: %w", s.prefix, err)
	}
	return n == 1, rng.Val(), nil
}

// decodePrefix decodes entries up to the first that does not decode, so that
// the good ones before it are published in order and the bad one is dealt with
// on its own once it is first.
func decodePrefix(entries []redis.XMessage) (msgs []kafka.Message, ids []string, bad error) {
	for _, e := range entries {
		m, err := decodeEntry(e.Values)
		if err != nil {
			return msgs, ids, fmt.Errorf("outbox entry %s: %w", e.ID, err)
		}
		msgs = append(msgs, m)
		ids = append(ids, e.ID)
	}
	return msgs, ids, nil
}

// deadLetter moves an undecodable entry to the dead stream, keeping it for
// inspection instead of dropping it or letting it block the outbox forever.
func (r *relay) deadLetter(ctx context.Context, e redis.XMessage, reason error) {
	s := r.s
	s.log().Error("outbox relay: moving undecodable entry to the dead stream",
		"entry", e.ID, "dead", s.deadKey, "err", reason)
	values := make(map[string]any, len(e.Values)+2)
	for k, v := range e.Values {
		values[k] = v
	}
	values["outbox_id"] = e.ID
	values["error"] = reason.Error()
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.XAdd(ctx, &redis.XAddArgs{Stream: s.deadKey, Values: values})
		p.XDel(ctx, s.outboxKey, e.ID)
		return nil
	})
	if err != nil && ctx.Err() == nil {
		s.log().Warn("outbox relay: dead-letter entry", "entry", e.ID, "err", err)
		r.sleep(ctx, r.nextBackoff(), false)
	}
}

// nextBackoff returns the delay before the next retry and doubles it, up to
// maxBackoff.
func (r *relay) nextBackoff() time.Duration {
	d := r.backoff
	r.backoff = min(2*r.backoff, maxBackoff)
	return d
}

// sleep waits d, or less when ctx ends or (with wake) Apply wrote events.
func (r *relay) sleep(ctx context.Context, d time.Duration, wake bool) {
	t := time.NewTimer(d)
	defer t.Stop()
	var w <-chan struct{}
	if wake {
		w = r.s.wake
	}
	select {
	case <-ctx.Done():
	case <-t.C:
	case <-w:
	}
}
