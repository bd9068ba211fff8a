// Package authn is the gateway's authentication: it turns the credential a
// call carries (an API key or an access token, "authorization: Bearer …")
// into the *auth.Principal that the rest of the gateway trusts, with the
// caller's project roles filled from the member store. It only
// authenticates: what a principal may do is authz's business.
package authn

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
	"google.golang.org/grpc"

	"github.com/loom-ml/loom/libs/auth"
	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/services/gateway/internal/adapters"
)

// Verifier turns a credential into the principal it proves.
type Verifier interface {
	// Authenticate returns the principal cred proves, or an error wrapping
	// errs.Unauthenticated that says what to do (errs.Unavailable when the
	// store cannot be read).
	Authenticate(ctx context.Context, cred string) (*auth.Principal, error)
}

// Store is what authentication reads: API keys by id and users' memberships.
type Store interface {
	APIKey(ctx context.Context, id string) (*adapters.KeyRecord, error)
	Roles(ctx context.Context, user string) (map[string]auth.Role, bool, error)
	NodeRegistration(ctx context.Context, cluster, node string) (string, error)
	// NodeRevocation is the revocation of node's identities written when
	// the provisioner removed it (auth.NodeRevocation), ok false if none.
	NodeRevocation(ctx context.Context, node string) (rev auth.NodeRevocation, ok bool, err error)
}

// Cache lifetimes (Options' defaults).
const (
	// DefaultKeyCacheTTL is how long a verified API key (or access token)
	// is trusted without reading the store (or checking the signature)
	// again: a key revoked through another gateway instance stops working
	// within it (this instance forgets it at once).
	DefaultKeyCacheTTL = 30 * time.Second
	// DefaultRoleCacheTTL is how long a user's roles are trusted: a role
	// changed through another instance takes effect within it.
	DefaultRoleCacheTTL = 3 * time.Second
	// maxCacheEntries bounds each cache; a full cache is emptied of its
	// stale entries, and wholly when none are stale (a flood of distinct
	// valid keys is rare; the store answers the misses).
	maxCacheEntries = 10000
)

// DevUser is the principal every call is with authentication turned off.
const DevUser = "dev"

// Options configure an Authenticator.
type Options struct {
	// Store holds the keys and members (required unless Disabled).
	Store Store
	// Issuer verifies access tokens (required unless Disabled).
	Issuer *auth.Issuer
	// Clock is what the caches' lifetimes are measured on (default the
	// real clock); tests move a fake one.
	Clock clockwork.Clock
	// Log gets the warning that authentication is off.
	Log *slog.Logger
	// Disabled turns authentication off (development only): every call is
	// the cluster administrator "users/dev", whatever it carries.
	Disabled bool
	// KeyCacheTTL and RoleCacheTTL default to DefaultKeyCacheTTL and
	// DefaultRoleCacheTTL; KeyCacheTTL is at most 30 s.
	KeyCacheTTL, RoleCacheTTL time.Duration
}

// Authenticator implements Verifier over a Store and an Issuer, with the
// caches that make an authenticated call cost microseconds. It is safe for
// concurrent use.
type Authenticator struct {
	o   Options
	dev *auth.Principal

	mu    sync.Mutex
	keys  map[[sha256.Size]byte]keyEntry
	roles map[string]roleEntry
	// failed holds, by API key id, when its secret last failed to check:
	// another check of it waits until failedWait has passed (see apiKey).
	failed map[string]time.Time
}

// failedWait is how long after a wrong secret a key stored the slow way
// (argon2id, the first keys: auth.SlowSecret) is not checked again: each
// check is ~6 ms of CPU, made before any rate limit (the caller is not
// known until it passes), which anyone who knows a key id could otherwise
// ask for at will. Keys made since are SHA-256 hashed: a check costs a
// microsecond and needs no such wait.
const failedWait = time.Second

// keyEntry is a verified credential (an API key or an access token): who
// it proves, until when. A user's entry names the user, whose roles come
// from the role cache; any other principal is kept whole.
type keyEntry struct {
	// id is an API key's id (ForgetKey), "" for a token.
	id string
	// user is a user principal's user; p is any other principal.
	user, how string
	p         *auth.Principal
	until     time.Time
}

// roleEntry is a user principal with its roles, read at some time.
type roleEntry struct {
	p     *auth.Principal
	until time.Time
}

// New returns an Authenticator. With o.Disabled it logs, at WARN, that every
// call is a cluster administrator.
func New(o Options) *Authenticator {
	if o.Clock == nil {
		o.Clock = clockwork.NewRealClock()
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.KeyCacheTTL <= 0 || o.KeyCacheTTL > DefaultKeyCacheTTL {
		o.KeyCacheTTL = DefaultKeyCacheTTL
	}
	if o.RoleCacheTTL <= 0 {
		o.RoleCacheTTL = DefaultRoleCacheTTL
	}
	a := &Authenticator{o: o, keys: map[[sha256.Size]byte]keyEntry{}, roles: map[string]roleEntry{}, failed: map[string]time.Time{}}
	if o.Disabled {
		a.dev = &auth.Principal{Name: auth.UserName(DevUser), Kind: auth.KindUser, User: DevUser, ClusterAdmin: true, How: "dev"}
		o.Log.Warn("AUTHENTICATION IS OFF (-auth=off): every caller is the cluster administrator users/dev. " +
			"Development only: never run a shared or reachable gateway like this")
	}
	return a
}

// Disabled reports whether authentication is off.
func (a *Authenticator) Disabled() bool { return a.o.Disabled }

func unauthenticated(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errs.Unauthenticated, fmt.Sprintf(format, args...))
}

// Authenticate implements Verifier: an API key (looked up by id, its
// secret checked, cached for at most KeyCacheTTL) or an access token of
// the Issuer.
func (a *Authenticator) Authenticate(ctx context.Context, cred string) (*auth.Principal, error) {
	if a.o.Disabled {
		return a.dev, nil
	}
	if auth.IsAPIKey(cred) {
		return a.apiKey(ctx, cred)
	}
	return a.token(ctx, cred)
}

func (a *Authenticator) apiKey(ctx context.Context, key string) (*auth.Principal, error) {
	now := a.o.Clock.Now()
	sum := sha256.Sum256([]byte(key))
	if e, ok := a.cached(sum, now); ok {
		return a.principal(ctx, e)
	}
	id, secret, err := auth.ParseAPIKey(key)
	if err != nil {
		return nil, err
	}
	k, err := a.o.Store.APIKey(ctx, id)
	if errors.Is(err, errs.NotFound) {
		return nil, unauthenticated("unknown API key %s; create one with `loom auth keys create`, or log in with `loom auth login`", id)
	}
	if err != nil {
		return nil, err
	}
	slow := auth.SlowSecret(k.Hash)
	if slow {
		a.mu.Lock()
		last, failed := a.failed[id]
		a.mu.Unlock()
		if failed && now.Sub(last) < failedWait {
			return nil, unauthenticated("API key %s: a wrong secret was tried less than %s ago; try again after it", id, failedWait)
		}
	}
	if !auth.CheckSecret(k.Hash, secret) {
		if !slow {
			return nil, unauthenticated("wrong secret for API key %s; use the whole key as `loom auth keys create` printed it", id)
		}
		a.mu.Lock()
		if len(a.failed) >= maxCacheEntries {
			for k, t := range a.failed {
				if now.Sub(t) >= failedWait {
					delete(a.failed, k)
				}
			}
			if len(a.failed) >= maxCacheEntries {
				clear(a.failed)
			}
		}
		a.failed[id] = now
		a.mu.Unlock()
		return nil, unauthenticated("wrong secret for API key %s; use the whole key as `loom auth keys create` printed it", id)
	}
	switch {
	case !k.RevokeTime.IsZero():
		return nil, unauthenticated("API key %s was revoked; create a new one with `loom auth keys create`", id)
	case !k.Usable(now):
		return nil, unauthenticated("API key %s expired at %s; create a new one with `loom auth keys create`", id, k.ExpireTime.UTC().Format(time.RFC3339))
	}
	e := keyEntry{id: id, how: "api-key", until: now.Add(a.o.KeyCacheTTL)}
	if !k.ExpireTime.IsZero() && k.ExpireTime.Before(e.until) {
		e.until = k.ExpireTime
	}
	if user, ok := strings.CutPrefix(k.Owner, "users/"); ok {
		e.user = user
	} else if svc, ok := strings.CutPrefix(k.Owner, "services/"); ok {
		e.p = &auth.Principal{Name: auth.ServiceName(svc), Kind: auth.KindService, How: "api-key"}
	} else {
		return nil, unauthenticated("API key %s belongs to %q, which is not a user or a service", id, k.Owner)
	}
	a.remember(sum, e, now)
	return a.principal(ctx, e)
}

// cached returns the unexpired cache entry of the credential whose
// SHA-256 is sum.
func (a *Authenticator) cached(sum [sha256.Size]byte, now time.Time) (keyEntry, bool) {
	a.mu.Lock()
	e, ok := a.keys[sum]
	a.mu.Unlock()
	return e, ok && now.Before(e.until)
}

// remember caches e for the credential whose SHA-256 is sum.
func (a *Authenticator) remember(sum [sha256.Size]byte, e keyEntry, now time.Time) {
	a.mu.Lock()
	if len(a.keys) >= maxCacheEntries {
		pruneKeys(a.keys, now)
	}
	a.keys[sum] = e
	a.mu.Unlock()
}

// principal is the caller's own copy of the principal e proves.
func (a *Authenticator) principal(ctx context.Context, e keyEntry) (*auth.Principal, error) {
	if e.user != "" {
		p, err := a.user(ctx, e.user, e.how)
		if err == nil {
			p.KeyID = e.id
		}
		return p, err
	}
	p := *e.p
	p.KeyID = e.id // a service's key, or the one its token was made with
	return &p, nil
}

func pruneKeys(m map[[sha256.Size]byte]keyEntry, now time.Time) {
	for k, e := range m {
		if !now.Before(e.until) {
			delete(m, k)
		}
	}
	if len(m) >= maxCacheEntries {
		clear(m)
	}
}

// token verifies an access token and builds its principal from its
// claims. A verified token is cached (by its SHA-256) until it expires, for
// at most KeyCacheTTL: a token cannot be revoked, so the cache changes no
// answer and spares the signature check and JSON decoding of each call.
func (a *Authenticator) token(ctx context.Context, tok string) (*auth.Principal, error) {
	now := a.o.Clock.Now()
	sum := sha256.Sum256([]byte(tok))
	if e, ok := a.cached(sum, now); ok {
		if e.p != nil && e.p.Kind == auth.KindNode {
			// Read on every call, not cached: a removed node's identity
			// is refused from its removal on, on every instance.
			if err := CheckNodeRevoked(ctx, a.o.Store, e.p.Node, e.p.Registration); err != nil {
				return nil, err
			}
		}
		return a.principal(ctx, e)
	}
	c, err := a.o.Issuer.Verify(tok, auth.UseAccess)
	if err != nil {
		return nil, err
	}
	kind, err := auth.ParseKind(c.Kind)
	if err != nil {
		return nil, unauthenticated("token of unknown kind %q", c.Kind)
	}
	e := keyEntry{how: "token", until: now.Add(a.o.KeyCacheTTL)}
	if exp := c.ExpiresAt.Time; exp.Before(e.until) {
		e.until = exp
	}
	if c.Key != "" {
		// A token made with an API key (a user's session, a service's
		// token, the sessions the login service's key made) lives only
		// while that key does: checked as the key itself is, and dropped
		// from the cache with it (ForgetKey).
		if err := CheckSessionKey(ctx, a.o.Store, c.Key, now); err != nil {
			return nil, err
		}
		e.id = c.Key
	}
	switch kind {
	case auth.KindUser:
		if c.Subject != auth.UserName(c.User) {
			return nil, unauthenticated("token subject %q does not match its user", c.Subject)
		}
		e.user = c.User
	case auth.KindNode:
		if c.Node == "" || c.Cluster == "" {
			return nil, unauthenticated("node token without a node or cluster")
		}
		if _, err := CheckNodeRegistration(ctx, a.o.Store, c.Cluster, c.Node, c.Reg); err != nil {
			return nil, err
		}
		e.p = &auth.Principal{Name: c.Subject, Kind: auth.KindNode, Node: c.Node, Cluster: c.Cluster, Pool: c.Pool, How: "node-identity", Registration: c.Reg}
	case auth.KindWorkload:
		if c.Project == "" || c.Job == "" {
			return nil, unauthenticated("workload token without a project or job")
		}
		e.p = &auth.Principal{Name: c.Subject, Kind: auth.KindWorkload, User: c.User, Project: c.Project, Job: c.Job, How: "token"}
	default:
		e.p = &auth.Principal{Name: c.Subject, Kind: kind, User: c.User, How: "token"}
	}
	a.remember(sum, e, now)
	return a.principal(ctx, e)
}

// AdoptedPrefix begins the registration a node identity without one gets
// at its first renewal (app's RenewNodeIdentity), as opposed to one
// RegisterNode records (a bootstrap token's id).
const AdoptedPrefix = auth.AdoptedRegistrationPrefix

// CheckNodeRegistration checks that a node identity of registration reg
// is not revoked (CheckNodeRevoked) and is still node's: Unauthenticated once the node registered again (its
// machine reimaged or replaced, a new agent bootstrapped), so that what
// the old image held stops working (within KeyCacheTTL on an instance
// that had it cached) and cannot be renewed. An identity made without a
// registration ("": issued before registrations were kept, or renewed by
// a gateway of an earlier release during a rolling upgrade) is judged by
// its expiry alone until the node registers again: while the node's
// record is none, or one adopted by such an identity's renewal
// (AdoptedPrefix), it passes.
// It returns the node's record as read, which a renewal goes on from.
func CheckNodeRegistration(ctx context.Context, st Store, cluster, node, reg string) (current string, err error) {
	if err := CheckNodeRevoked(ctx, st, node, reg); err != nil {
		return "", err
	}
	current, err = st.NodeRegistration(ctx, cluster, node)
	if err != nil {
		return "", err
	}
	if current == "" || current == reg || (reg == "" && strings.HasPrefix(current, AdoptedPrefix)) {
		return current, nil
	}
	return "", RegisteredAgain(node)
}

// CheckNodeRevoked refuses (Unauthenticated) an identity of node of
// registration reg that the provisioner revoked when it removed the node
// (auth.NodeRevocation.Revokes): the old node's, or its stolen key's, until
// it would have expired. A node made again with the same name registers
// after the revocation, and its identities pass. Revocations are read on
// the wall clock, on which the provisioner writes them.
func CheckNodeRevoked(ctx context.Context, st Store, node, reg string) error {
	rev, ok, err := st.NodeRevocation(ctx, node)
	if err != nil {
		return err
	}
	if ok && rev.Live(time.Now()) && rev.Revokes(reg) {
		return unauthenticated("node %s was removed, and this identity of it (registration %q) was revoked with it; "+
			"a node made again with that name registers with a new bootstrap token from its provisioner", node, clip(reg))
	}
	return nil
}

// clip bounds what a refusal echoes of a credential's own text.
func clip(s string) string {
	if len(s) > 100 {
		return s[:100] + "…"
	}
	return s
}

// RegisteredAgain is the refusal of an identity of node whose
// registration is no longer the node's.
func RegisteredAgain(node string) error {
	return unauthenticated("node %s registered again since this identity was issued (reimaged or replaced); the agent bootstraps with a new token from its provisioner", node)
}

// CheckSessionKey checks that the API key id a user's session started
// from (its tokens' Claims.Key) may still authenticate at now: an
// Unauthenticated error, saying what to do, when it was revoked, has
// expired or is gone. Authentication checks it for each such token, the
// token service for each refresh.
func CheckSessionKey(ctx context.Context, st Store, id string, now time.Time) error {
	k, err := st.APIKey(ctx, id)
	switch {
	case errors.Is(err, errs.NotFound):
		return unauthenticated("this session started from API key %s, which no longer exists; log in again with `loom auth login`", id)
	case err != nil:
		return err
	case !k.RevokeTime.IsZero():
		return unauthenticated("this session started from API key %s, which was revoked; log in again with `loom auth login`", id)
	case !k.Usable(now):
		return unauthenticated("this session started from API key %s, which expired at %s; log in again with `loom auth login`", id, k.ExpireTime.UTC().Format(time.RFC3339))
	}
	return nil
}

// user returns the principal of user with its roles (cached RoleCacheTTL),
// authenticated by how. The principal returned is the caller's own copy.
func (a *Authenticator) user(ctx context.Context, user, how string) (*auth.Principal, error) {
	now := a.o.Clock.Now()
	a.mu.Lock()
	e, ok := a.roles[user]
	a.mu.Unlock()
	if !ok || !now.Before(e.until) {
		roles, admin, err := a.o.Store.Roles(ctx, user)
		if err != nil {
			return nil, err
		}
		e = roleEntry{p: &auth.Principal{Name: auth.UserName(user), Kind: auth.KindUser, User: user, Roles: roles, ClusterAdmin: admin},
			until: now.Add(a.o.RoleCacheTTL)}
		a.mu.Lock()
		if len(a.roles) >= maxCacheEntries {
			for u, old := range a.roles {
				if !now.Before(old.until) {
					delete(a.roles, u)
				}
			}
			if len(a.roles) >= maxCacheEntries {
				clear(a.roles)
			}
		}
		a.roles[user] = e
		a.mu.Unlock()
	}
	// The cached Roles map is shared and never written after it is cached.
	p := *e.p
	p.How = how
	return &p, nil
}

// ForgetUser drops user's cached roles, so that a membership changed
// through this instance applies to the next call.
func (a *Authenticator) ForgetUser(user string) {
	a.mu.Lock()
	delete(a.roles, user)
	a.mu.Unlock()
}

// ForgetKey drops the cached verification of API key id, so that a key
// revoked through this instance stops working at once.
func (a *Authenticator) ForgetKey(id string) {
	a.mu.Lock()
	for k, e := range a.keys {
		if e.id == id {
			delete(a.keys, k)
		}
	}
	a.mu.Unlock()
}

// Context authenticates the credential ctx carries: ctx with its principal
// (auth.NewContext), ctx unchanged when it carries none (anonymous; authz
// decides what an anonymous call may do), or an Unauthenticated error for a
// malformed or bad credential.
func (a *Authenticator) Context(ctx context.Context) (context.Context, error) {
	if a.o.Disabled {
		return auth.NewContext(ctx, a.dev), nil
	}
	cred, err := auth.CredentialFromContext(ctx)
	if err != nil || cred == "" {
		return ctx, err
	}
	p, err := a.Authenticate(ctx, cred)
	if err != nil {
		return nil, err
	}
	return auth.NewContext(ctx, p), nil
}

// UnaryServerInterceptor authenticates each unary call (Context).
func (a *Authenticator) UnaryServerInterceptor() grpc.UnaryServerInterceptor { return a.Unary }

// StreamServerInterceptor authenticates each streaming call (Context).
func (a *Authenticator) StreamServerInterceptor() grpc.StreamServerInterceptor { return a.Stream }

// Unary is the unary interceptor (UnaryServerInterceptor's value).
func (a *Authenticator) Unary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	ctx, err := a.Context(ctx)
	if err != nil {
		return nil, err
	}
	return h(ctx, req)
}

// Stream is the stream interceptor (StreamServerInterceptor's value).
// A stream lives as long as its caller keeps it open, and was authorized
// once, with the principal it opened with: before each message it sends
// once the role cache's lifetime has passed, it checks its caller again
// and ends (Unauthenticated) when an API key no longer holds (revoked,
// expired) or (PermissionDenied) when a user is no longer who they were (a
// role in a project taken away or changed), so that a watch opened before
// a user left a project shows them nothing after.
func (a *Authenticator) Stream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	ctx, err := a.Context(ss.Context())
	if err != nil {
		return err
	}
	s := &stream{ServerStream: ss, ctx: ctx, a: a, checked: a.o.Clock.Now()}
	s.p, _ = auth.FromContext(ctx)
	return h(srv, s)
}

// stream is a ServerStream whose Context carries the principal, checked
// again as it sends (see Stream).
type stream struct {
	grpc.ServerStream
	ctx context.Context
	a   *Authenticator
	p   *auth.Principal // nil: anonymous, nothing to check again

	mu      sync.Mutex
	checked time.Time
}

// SendMsg sends m once the caller is checked again, when due.
func (s *stream) SendMsg(m any) error {
	if err := s.recheck(); err != nil {
		return err
	}
	return s.ServerStream.SendMsg(m)
}

func (s *stream) recheck() error {
	if s.p == nil || s.a.o.Disabled {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.a.o.Clock.Now()
	if now.Sub(s.checked) < s.a.o.RoleCacheTTL {
		return nil
	}
	var p *auth.Principal
	switch {
	case s.p.How == "api-key":
		// A key may be revoked or expire at its owner's word: checked
		// whole again.
		ctx, err := s.a.Context(s.ServerStream.Context())
		if err != nil {
			return err
		}
		p, _ = auth.FromContext(ctx)
	case s.p.Kind == auth.KindUser:
		// An access token's expiry only bounds how long it opens new
		// calls (a watch of a long job outlives it): the user's roles
		// may change, and the API key its session started from may be
		// revoked or expire.
		if s.p.KeyID != "" {
			if err := CheckSessionKey(s.ServerStream.Context(), s.a.o.Store, s.p.KeyID, now); err != nil {
				return err
			}
		}
		var err error
		if p, err = s.a.user(s.ServerStream.Context(), s.p.User, s.p.How); err != nil {
			return err
		}
		p.KeyID = s.p.KeyID
	case s.p.KeyID != "":
		// A service's: its rights are its token's, while the key it was
		// made with lives.
		if err := CheckSessionKey(s.ServerStream.Context(), s.a.o.Store, s.p.KeyID, now); err != nil {
			return err
		}
		s.checked = now
		return nil
	default:
		return nil // a node's, a workload's rights are their token's
	}
	if !samePrincipal(s.p, p) {
		return fmt.Errorf("%s is no longer what it was when this stream opened (a role changed or was taken away); open it again: %w",
			s.p.Name, errs.PermissionDenied)
	}
	s.checked = now
	return nil
}

// samePrincipal reports whether a and b are the same caller with the same
// rights.
func samePrincipal(a, b *auth.Principal) bool {
	if a == nil || b == nil {
		return a == b
	}
	if len(a.Roles) != len(b.Roles) {
		return false
	}
	for k, v := range a.Roles {
		if w, ok := b.Roles[k]; !ok || w != v {
			return false
		}
	}
	return a.Name == b.Name && a.Kind == b.Kind && a.User == b.User && a.ClusterAdmin == b.ClusterAdmin &&
		a.Project == b.Project && a.Job == b.Job && a.Node == b.Node && a.Cluster == b.Cluster && a.Pool == b.Pool
}

func (s *stream) Context() context.Context { return s.ctx }
