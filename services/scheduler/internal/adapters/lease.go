package adapters

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/loom-ml/loom/libs/store"
)

// The leader lease: one scheduler instance decides at a time.
//
//	scheduler:leader              the lease: the holder's token, with a TTL (SET NX PX, renewed)
//	scheduler:leader:terms        the set of tokens that held it since the last takeover
//	scheduler:leader:fence:<tok>  a term's fence: a hash while the term may write,
//	                              a string ("revoked") once a later term took over
//
// Fencing: every Apply of a leader writes a field of its term's fence hash
// (Fence). The store's apply script checks, before its first write, that a
// key it HSETs is a hash or absent; taking the lease over turns every
// earlier term's fence into a string in the same atomic step, so an old
// leader that has not noticed yet (a long pause, a partition) gets a
// FailedPrecondition from its next Apply and writes nothing. A revoked fence
// expires after RevokedTTL (the inbox's 7 days), long after any stalled
// writer has stepped down.
const (
	KeyLeader      = "leader"
	KeyLeaderTerms = "leader:terms"
	fencePrefix    = "leader:fence:"
	// RevokedTTL is how long a revoked fence is kept.
	RevokedTTL = store.InboxTTL
)

// ErrLeaseLost is returned by Renew when another instance holds the lease.
var ErrLeaseLost = errors.New("leader lease lost")

// acquireScript takes the lease if free and revokes every earlier term.
// KEYS: lease, terms set. ARGV: token, TTL ms, full fence prefix, revoked TTL s.
var acquireScript = redis.NewScript(`
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return 0
end
for _, old in ipairs(redis.call('SMEMBERS', KEYS[2])) do
  if old ~= ARGV[1] then
    redis.call('SET', ARGV[3] .. old, 'revoked', 'EX', ARGV[4])
  end
end
redis.call('DEL', KEYS[2])
redis.call('SADD', KEYS[2], ARGV[1])
return 1
`)

// Lease is one instance's handle on the leader lease.
type Lease struct {
	st       *store.Store
	instance string
	ttl      time.Duration
}

// NewLease returns the lease of st's service for instance (its id in the
// tokens, for people reading Redis), held for ttl between renewals.
func NewLease(st *store.Store, instance string, ttl time.Duration) *Lease {
	return &Lease{st: st, instance: instance, ttl: ttl}
}

// TTL is how long the lease lasts without a renewal.
func (l *Lease) TTL() time.Duration { return l.ttl }

// TryAcquire takes the lease if no one holds it and returns the new term's
// token ("" when another instance holds it). Taking it revokes the fences
// of every earlier term.
func (l *Lease) TryAcquire(ctx context.Context) (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("leader lease: token: %w", err)
	}
	token := l.instance + "." + hex.EncodeToString(b[:])
	keys := []string{l.st.Key(KeyLeader), l.st.Key(KeyLeaderTerms)}
	ok, err := acquireScript.Run(ctx, l.st.Client(), keys, token, l.ttl.Milliseconds(),
		l.st.Key(fencePrefix), int64(RevokedTTL/time.Second)).Int()
	if err != nil {
		return "", fmt.Errorf("leader lease: acquire: %w", err)
	}
	if ok == 0 {
		return "", nil
	}
	return token, nil
}

// Renew extends the lease held under token; ErrLeaseLost when it is not.
func (l *Lease) Renew(ctx context.Context, token string) error {
	held, err := l.st.RenewLease(ctx, KeyLeader, token, l.ttl)
	if err != nil {
		return fmt.Errorf("leader lease: renew: %w", err)
	}
	if !held {
		return ErrLeaseLost
	}
	return nil
}

// Release gives the lease up if token holds it, so that another instance
// takes over at once instead of after the TTL.
func (l *Lease) Release(ctx context.Context, token string) error {
	if err := l.st.ReleaseLease(ctx, KeyLeader, token); err != nil {
		return fmt.Errorf("leader lease: release: %w", err)
	}
	return nil
}

// Holder returns the token holding the lease, "" when none does.
func (l *Lease) Holder(ctx context.Context) (string, error) {
	v, err := l.st.Client().Get(ctx, l.st.Key(KeyLeader)).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("leader lease: read: %w", err)
	}
	return v, nil
}

// Fence adds to tx the write that makes it fail, writing nothing, once a
// later term than token's has taken the lease, and sets the store's version
// to token/seq (Version): followers of an earlier release reload when it
// changes, and the change log's readers check that the log holds the last
// write (LogChanges tags each entry with it).
func Fence(tx *store.Tx, token string, seq uint64) {
	v := []byte(strconv.FormatUint(seq, 10))
	tx.HSet(fencePrefix+token, "seq", v)
	tx.Set(KeyVersion, []byte(Version(token, seq)))
}

// KeyVersion is the store's version: every write of a leader sets it.
const KeyVersion = "version"

// Version is the store's version after the write seq of the term token.
func Version(token string, seq uint64) string { return token + "/" + strconv.FormatUint(seq, 10) }

// IsFenced reports whether an Apply failed because its term's fence was
// revoked: another instance leads now. Revoking turns the fence hash into a
// string, so the Apply fails as a store.WrongTypeError naming the fence; one
// naming another key (a scheduler key damaged by hand, say) is no sign of
// another leader, and stepping down would only hand the damage on.
func IsFenced(err error) bool {
	var wt *store.WrongTypeError
	return errors.As(err, &wt) && strings.HasPrefix(wt.Key, fencePrefix)
}
