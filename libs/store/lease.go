package store

import (
	"context"
	"time"
)

// renewScript extends a lease when the caller still holds it; 0 means it
// does not (it expired, and maybe another holder took it).
var renewScript = newScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
`)

// releaseScript deletes a lease only when the caller holds it, so a holder
// whose lease expired cannot release its successor's.
var releaseScript = newScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
`)

// RenewLease extends to ttl the lease at key (relative to the prefix) when
// token holds it, and reports whether it did: false means the lease is no
// longer token's. The outbox relay's lease and a service's leader lease are
// both such a key holding their holder's token.
func (s *Store) RenewLease(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	n, err := s.runScript(ctx, renewScript, []string{s.Key(key)}, token, ttl.Milliseconds()).Int()
	if err != nil {
		return false, err
	}
	return n == 1, nil
}

// ReleaseLease deletes the lease at key (relative to the prefix) when token
// holds it, so that a successor takes over at once instead of after the TTL.
func (s *Store) ReleaseLease(ctx context.Context, key, token string) error {
	return s.releaseLease(ctx, s.Key(key), token)
}

// releaseLease is ReleaseLease for a full key.
func (s *Store) releaseLease(ctx context.Context, fullKey, token string) error {
	return s.runScript(ctx, releaseScript, []string{fullKey}, token).Err()
}

// BreakRelayLease deletes the outbox relay's lease, whoever holds it, and
// reports whether there was one. It is only for a process that knows no
// other relay of this prefix runs: one that holds an OS lock each of its
// predecessors held until it died (an agent holds its node directory's).
// A killed relay's lease otherwise keeps the outbox unpublished until the
// lease expires (its TTL, 5 s): a restarted agent's registration would
// wait that long. Call it before RunRelay.
func (s *Store) BreakRelayLease(ctx context.Context) (bool, error) {
	n, err := s.rdb.Del(ctx, s.leaseKey).Result()
	return n > 0, err
}
