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

	"github.com/loom-ml/loom/libs/envelope"
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
// a time (a Redis lease), so several instances of a service can run. A
// batch waits for this process's Driver Applies in flight when it was read
// to commit to memory first (commitGate), so its events are never ahead of
// the service's reads.
//
// A failed publish is retried with backoff, the same batch from the same
// place, so nothing is dropped or reordered; Redis errors are retried too.
// No single entry can block the outbox: one the broker refuses for good
// (RefusedForGood: too large, an invalid record, a topic it may not write) and
// one that cannot be decoded (written by something other than Apply) are set
// aside: the hook given to OnSetAside is told, then the entry moves, with its
// reason and original fields, to the bounded stream "<prefix>outbox:dead"
// (DeadStreamMaxLen), is counted (loom_outbox_set_aside_total) and logged,
// and the entries behind it are published. A batch refused for good is
// published again one entry at a time, so that only the culprit is set aside.
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
	// singles counts the entries still to publish one at a time, after a
	// batch the broker refused for good, so that only the entry it refused
	// is set aside and none of its neighbours.
	singles int
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

		if r.singles > 0 {
			entries = entries[:1]
		}
		msgs, ids, bad := decodePrefix(entries)
		if len(msgs) == 0 {
			r.setAside(ctx, entries[0], nil, SetAsideUndecodable, bad)
			r.doneOne()
			continue
		}
		// This process's Applies that may have written these entries
		// change memory first (commitGate).
		if f := s.fp.commitWait; f != nil && s.commits.busy() {
			f()
		}
		// A commit is a change to memory: only a bug holds one for long,
		// and the outbox must not stall behind it nor outlive the lease.
		if wait := s.leaseTTL / 2; !s.commits.wait(ctx, wait) && ctx.Err() == nil {
			s.log().Warn("outbox relay: an apply's memory commit is still running; publishing without waiting for it",
				"waited", wait)
		}
		// Kafka must have the batch before the lease could lapse, so that a
		// successor never publishes alongside this relay.
		pctx, cancel := context.WithDeadline(ctx, leaseFrom.Add(s.leaseTTL))
		err = r.pub.PublishMessages(pctx, msgs...)
		cancel()
		if err != nil && ctx.Err() == nil && RefusedForGood(err) {
			if len(msgs) == 1 {
				r.setAside(ctx, entries[0], &msgs[0], SetAsideRefused, err)
				r.doneOne()
				continue
			}
			// Which entry the broker refused is not always said (a whole
			// partition's batch fails together): find it one by one.
			s.log().Warn("outbox relay: the broker refused a batch for good; publishing it one entry at a time",
				"records", len(msgs), "err", err)
			r.singles = len(msgs)
			continue
		}
		if err != nil {
			if ctx.Err() == nil {
				s.log().Warn("outbox relay: publish; retrying", "records", len(msgs), "err", err)
				r.sleep(ctx, r.nextBackoff(), false)
			}
			continue
		}
		r.doneOne()
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

// doneOne records that the read that ended — published or set aside — is
// done with: while the relay goes one entry at a time, one fewer is left.
func (r *relay) doneOne() {
	if r.singles > 0 {
		r.singles--
	}
}

// renewAndRead deletes the entries published last, renews the lease and
// reads the first batch of the outbox, in one round trip. held=false means
// the lease is no longer this relay's.
func (r *relay) renewAndRead(ctx context.Context) (held bool, entries []redis.XMessage, err error) {
	s := r.s
	pipe := s.rdb.Pipeline()
	var del *redis.IntCmd
	if len(r.published) > 0 {
		del = pipe.XDel(ctx, s.outboxKey, r.published...)
	}
	// EVALSHA: an agent's user may not EVAL (ACLCommands). A script cache
	// that lost it is runScript's to deal with, after the round trip.
	keys, args := []string{s.leaseKey}, []any{r.token, s.leaseTTL.Milliseconds()}
	renew := renewScript.EvalSha(ctx, pipe, keys, args...)
	rng := pipe.XRangeN(ctx, s.outboxKey, "-", "+", int64(s.batchSize))
	if _, err := pipe.Exec(ctx); err != nil {
		if !isNoScript(renew.Err()) || rng.Err() != nil || (del != nil && del.Err() != nil) {
			return false, nil, fmt.Errorf("store %s: relay: %w", s.prefix, err)
		}
		// Renewed after the read: a lease still this relay's now was
		// this relay's all along (it did not lapse: another holder would
		// have its own token in it), so what was read is its to publish.
		renew = s.runScript(ctx, renewScript, keys, args...)
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

// setAside hands an entry that can never be published to the store's
// SetAsideFunc and then moves it to the dead stream with its reason, so that
// it neither blocks the outbox nor is lost. m is the entry as it would have
// been published (nil when it does not decode). A failing hook is retried with
// backoff up to setAsideAttempts times, then the entry is set aside anyway
// (the hook's failure logged with it): a broken hook must not block the outbox
// either. A crash between the hook and the move publishes the entry again,
// which the broker refuses again, and the hook is told again: it must be
// idempotent (an Apply with an inbox id derived from the entry is).
func (r *relay) setAside(ctx context.Context, e redis.XMessage, m *kafka.Message, kind string, reason error) {
	s := r.s
	sa := SetAside{OutboxID: e.ID, Kind: kind, Reason: reason.Error()}
	if kind == SetAsideRefused && m != nil {
		// The size is what a too-large refusal is about; the broker's
		// words do not say it.
		sa.Reason = fmt.Sprintf("the broker refused the %d-byte record for good: %v", recordSize(*m), reason)
	}
	if m != nil {
		sa.Message = *m
		sa.EventID = headerValue(m.Headers, envelope.HeaderID)
		sa.Type = headerValue(m.Headers, envelope.HeaderType)
	}
	var hookErr error
	if f := s.onSetAside; f != nil {
		for attempt := 1; ; attempt++ {
			if hookErr = f(ctx, sa); hookErr == nil || ctx.Err() != nil {
				break
			}
			if attempt == setAsideAttempts {
				break
			}
			s.log().Warn("outbox relay: set-aside hook failed; retrying", "entry", e.ID, "attempt", attempt, "err", hookErr)
			r.sleep(ctx, r.nextBackoff(), false)
		}
		if ctx.Err() != nil {
			return // the next relay sets it aside
		}
	}
	s.log().Error("outbox relay: setting aside an entry that can never be published",
		"entry", e.ID, "kind", kind, "topic", sa.Message.Topic, "type", sa.Type, "event", sa.EventID,
		"dead", s.deadKey, "err", reason, "hook_err", hookErr)
	values := make(map[string]any, len(e.Values)+4)
	for k, v := range e.Values {
		values[k] = v
	}
	values["outbox_id"] = e.ID
	values["kind"] = kind
	values["error"] = sa.Reason
	if hookErr != nil {
		values["hook_error"] = hookErr.Error()
	}
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.XAdd(ctx, &redis.XAddArgs{Stream: s.deadKey, Values: values, MaxLen: s.deadMaxLen, Approx: true})
		p.XDel(ctx, s.outboxKey, e.ID)
		return nil
	})
	if err != nil {
		if ctx.Err() == nil {
			s.log().Warn("outbox relay: set entry aside", "entry", e.ID, "err", err)
			r.sleep(ctx, r.nextBackoff(), false)
		}
		return
	}
	s.setAsideCount(ctx, kind)
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

// recordSize is about what a record weighs against the broker's limit: its
// key, value and headers.
func recordSize(m kafka.Message) int {
	n := len(m.Key) + len(m.Value)
	for _, h := range m.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return n
}
