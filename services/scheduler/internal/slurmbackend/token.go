package slurmbackend

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// MinKeyBytes is the shortest JWT key the backend takes: Slurm's own
// documentation makes a 32-byte one (dd if=/dev/random bs=32 count=1), and
// a short HS256 key can be guessed offline from any token it signed.
const MinKeyBytes = 32

// Signer mints slurmctld's JWTs (auth/jwt, HS256) for one Slurm user at a
// time, with the key slurmctld checks them with (AuthAltParameters=jwt_key).
// This is how `scontrol token username=U` makes them, without the scontrol
// binary, munge or a root token on the scheduler's host: slurmrestd 22.05
// has no endpoint that issues tokens, so issuing one per user "with root's
// token" would mean running scontrol as root (SlurmUser) here anyway.
// Holding the key is that power (any user's token, root's too), no more:
// the file must be the scheduler's alone (0600), as slurmctld's is.
//
// Tokens are cached per user and replaced once half their lifespan has
// passed, so a call never carries one about to expire. Safe for concurrent
// use.
type Signer struct {
	key      []byte
	lifespan time.Duration
	now      func() time.Time

	mu    sync.Mutex
	cache map[string]cached
}

type cached struct {
	token string
	fresh time.Time // replaced after this
}

// LoadSigner reads the key file at path (refused when others may read it or
// it is shorter than MinKeyBytes) and returns a signer whose tokens last
// lifespan.
func LoadSigner(path string, lifespan time.Duration, now func() time.Time) (*Signer, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("slurm-jwt-key: %w", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("slurm-jwt-key: %s is mode %04o: it mints any Slurm user's token, so only its owner may read it (chmod 600)", path, fi.Mode().Perm())
	}
	key, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("slurm-jwt-key: %w", err)
	}
	return NewSigner(key, lifespan, now)
}

// NewSigner returns a signer over key (at least MinKeyBytes) whose tokens
// last lifespan (1 minute to 1 day).
func NewSigner(key []byte, lifespan time.Duration, now func() time.Time) (*Signer, error) {
	if len(key) < MinKeyBytes {
		return nil, fmt.Errorf("slurm-jwt-key: the key is %d bytes, want at least %d", len(key), MinKeyBytes)
	}
	if lifespan < time.Minute || lifespan > 24*time.Hour {
		return nil, fmt.Errorf("slurm-token-lifespan: want 1m to 24h, got %v", lifespan)
	}
	if now == nil {
		now = time.Now
	}
	return &Signer{key: append([]byte(nil), key...), lifespan: lifespan, now: now, cache: map[string]cached{}}, nil
}

// Token returns a token for Slurm user user ("sun", slurmctld's claim for
// the user name), minting one when the cached one is past half its life.
func (s *Signer) Token(user string) (string, error) {
	if user == "" {
		return "", errors.New("slurm token: no user")
	}
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.cache[user]; ok && now.Before(c.fresh) {
		return c.token, nil
	}
	tok, err := s.mint(user, now)
	if err != nil {
		return "", err
	}
	s.cache[user] = cached{token: tok, fresh: now.Add(s.lifespan / 2)}
	return tok, nil
}

// mint signs {"iat","exp","sun"} with HS256, as Slurm's own tokens are
// (slurmctld's auth/jwt reads the user from "sun").
func (s *Signer) mint(user string, now time.Time) (string, error) {
	return jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
		"iat": now.Unix(), "exp": now.Add(s.lifespan).Unix(), "sun": user,
	}).SignedString(s.key)
}
