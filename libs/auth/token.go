package auth

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/loom-ml/loom/libs/errs"
)

// DefaultTokenLifetime is an access token's lifetime unless shortened:
// 30 minutes, as Slurm's `scontrol token`.
const DefaultTokenLifetime = 30 * time.Minute

// DefaultRefreshLifetime is how long a refresh token may be used.
const DefaultRefreshLifetime = 24 * time.Hour

// DefaultBootstrapLifetime is a node bootstrap token's lifetime: long enough
// for a node to boot and register, short enough to be of little use stolen.
const DefaultBootstrapLifetime = 15 * time.Minute

// MinKeyBytes is the shortest signing secret an Issuer accepts (HS256's
// key should be at least the hash's size).
const MinKeyBytes = 32

// MaxTokenBytes bounds a token accepted for verification: longer ones are
// refused before any parsing.
const MaxTokenBytes = 4096

// Uses of a token: a token minted for one use is refused for another.
const (
	UseAccess    = "access"
	UseRefresh   = "refresh"
	UseBootstrap = "bootstrap"
)

// Claims are what a Loom token says. The registered claims' Subject is the
// principal's Name, ID (jti) is unique per token (a bootstrap or refresh
// token is used up by recording it).
type Claims struct {
	jwt.RegisteredClaims
	Use     string `json:"use"`
	Kind    string `json:"knd"`
	User    string `json:"usr,omitempty"`
	Project string `json:"prj,omitempty"`
	Job     string `json:"job,omitempty"`
	Node    string `json:"nod,omitempty"`
	Cluster string `json:"cls,omitempty"`
	Pool    string `json:"pol,omitempty"`
	// Key is the id of the API key a user's session started from (its
	// tokens and their refreshes): the session lives only while that key
	// is usable.
	Key string `json:"key,omitempty"`
	// Reg is, in a node's access token, the registration it belongs to
	// (the id of the bootstrap token RegisterNode took, kept through
	// renewals): a node registered again (reimaged, replaced) ends the
	// identities of its earlier registrations.
	Reg string `json:"reg,omitempty"`
}

// Issuer mints and verifies Loom's tokens (JWT, HS256) with one secret.
// Tokens carry identity only; roles are looked up on each call, so that
// a role removed takes effect without waiting for tokens to expire.
type Issuer struct {
	key    []byte
	name   string
	now    func() time.Time
	parser *jwt.Parser
}

// NewIssuer returns an Issuer signing with key (at least MinKeyBytes) as
// iss name; now is the clock (nil: time.Now), which tests replace.
func NewIssuer(key []byte, name string, now func() time.Time) (*Issuer, error) {
	if len(key) < MinKeyBytes {
		return nil, fmt.Errorf("token signing key: %d bytes, want at least %d", len(key), MinKeyBytes)
	}
	if now == nil {
		now = time.Now
	}
	i := &Issuer{key: append([]byte(nil), key...), name: name, now: now}
	i.parser = jwt.NewParser(
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
		jwt.WithIssuer(name),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithTimeFunc(func() time.Time { return i.now() }),
	)
	return i, nil
}

// Issue signs c for ttl from now, setting its issuer, issue time, expiry
// and a fresh ID. It returns the token and its expiry.
func (i *Issuer) Issue(c Claims, ttl time.Duration) (string, time.Time, error) {
	if ttl <= 0 {
		return "", time.Time{}, fmt.Errorf("token lifetime %v: must be positive", ttl)
	}
	if c.Use == "" || c.Subject == "" {
		return "", time.Time{}, errors.New("token: use and subject are required")
	}
	id := make([]byte, 16)
	if _, err := rand.Read(id); err != nil {
		return "", time.Time{}, err
	}
	now := i.now().UTC().Truncate(time.Second)
	exp := now.Add(ttl)
	c.Issuer = i.name
	c.IssuedAt = jwt.NewNumericDate(now)
	c.ExpiresAt = jwt.NewNumericDate(exp)
	c.ID = base64.RawURLEncoding.EncodeToString(id)
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(i.key)
	return tok, exp, err
}

// Verify checks tok's signature, issuer, expiry (on the Issuer's clock)
// and use, and returns its claims. Every failure wraps errs.Unauthenticated
// and says why without echoing the token.
func (i *Issuer) Verify(tok, use string) (*Claims, error) {
	if len(tok) > MaxTokenBytes {
		return nil, fmt.Errorf("%w: token of %d bytes is longer than the limit of %d", errs.Unauthenticated, len(tok), MaxTokenBytes)
	}
	var c Claims
	if _, err := i.parser.ParseWithClaims(tok, &c, func(*jwt.Token) (any, error) { return i.key, nil }); err != nil {
		if errors.Is(err, jwt.ErrTokenExpired) {
			return nil, fmt.Errorf("%w: token expired; get a new one with `loom auth login`", errs.Unauthenticated)
		}
		return nil, fmt.Errorf("%w: invalid token: %v", errs.Unauthenticated, err)
	}
	if c.Use != use {
		return nil, fmt.Errorf("%w: a %s token cannot be used as a %s token", errs.Unauthenticated, c.Use, use)
	}
	if c.Subject == "" || c.ID == "" {
		return nil, fmt.Errorf("%w: token lacks a subject or id", errs.Unauthenticated)
	}
	return &c, nil
}

// ForSubject is registered claims with only a subject set: how callers
// start the Claims they pass to Issue.
func ForSubject(subject string) jwt.RegisteredClaims { return jwt.RegisteredClaims{Subject: subject} }
