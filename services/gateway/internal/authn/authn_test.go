package authn

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"golang.org/x/crypto/argon2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/loom-ml/loom/libs/auth"
	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/services/gateway/internal/adapters"
)

// memStore is a Store in memory that counts its reads.
type memStore struct {
	mu        sync.Mutex
	keys      map[string]*adapters.KeyRecord
	roles     map[string]map[string]auth.Role
	admins    map[string]bool
	keyReads  atomic.Int64
	roleReads atomic.Int64
	revoked   map[string]auth.NodeRevocation
}

func (s *memStore) NodeRegistration(context.Context, string, string) (string, error) { return "", nil }

func (s *memStore) NodeRevocation(_ context.Context, node string) (auth.NodeRevocation, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.revoked[node]
	return r, ok, nil
}

func newMemStore() *memStore {
	return &memStore{keys: map[string]*adapters.KeyRecord{}, roles: map[string]map[string]auth.Role{}, admins: map[string]bool{},
		revoked: map[string]auth.NodeRevocation{}}
}

func (s *memStore) APIKey(_ context.Context, id string) (*adapters.KeyRecord, error) {
	s.keyReads.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	k, ok := s.keys[id]
	if !ok {
		return nil, fmt.Errorf("key %s: %w", id, errs.NotFound)
	}
	c := *k
	return &c, nil
}

func (s *memStore) Roles(_ context.Context, user string) (map[string]auth.Role, bool, error) {
	s.roleReads.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps(s.roles[user]), s.admins[user], nil
}

func maps(m map[string]auth.Role) map[string]auth.Role {
	out := make(map[string]auth.Role, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// addKey stores a new key for owner and returns the whole key.
func (s *memStore) addKey(t testing.TB, owner string, now time.Time, ttl time.Duration) (id, key string) {
	t.Helper()
	id, key, err := auth.NewAPIKey()
	if err != nil {
		t.Fatal(err)
	}
	_, secret, _ := auth.ParseAPIKey(key)
	h, err := auth.HashSecret(secret)
	if err != nil {
		t.Fatal(err)
	}
	rec := &adapters.KeyRecord{ID: id, Owner: owner, Hash: h, CreateTime: now}
	if ttl > 0 {
		rec.ExpireTime = now.Add(ttl)
	}
	s.mu.Lock()
	s.keys[id] = rec
	s.mu.Unlock()
	return id, key
}

func (s *memStore) revoke(id string, now time.Time) {
	s.mu.Lock()
	s.keys[id].RevokeTime = now
	s.mu.Unlock()
}

type fixture struct {
	a     *Authenticator
	store *memStore
	clock *clockwork.FakeClock
	iss   *auth.Issuer
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	clock := clockwork.NewFakeClockAt(time.Unix(1_800_000_000, 0))
	iss, err := auth.NewIssuer(make([]byte, 32), "loom", clock.Now)
	if err != nil {
		t.Fatal(err)
	}
	st := newMemStore()
	return &fixture{a: New(Options{Store: st, Issuer: iss, Clock: clock}), store: st, clock: clock, iss: iss}
}

func wantUnauthenticated(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, errs.Unauthenticated) {
		t.Fatalf("%s: got %v, want Unauthenticated", what, err)
	}
}

func TestAPIKeyCache(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	f.store.roles["alice"] = map[string]auth.Role{"projects/p": auth.RoleUser}
	id, key := f.store.addKey(t, "users/alice", f.clock.Now(), 0)

	for range 5 {
		p, err := f.a.Authenticate(ctx, key)
		if err != nil || p.Name != "users/alice" || p.User != "alice" || p.Role("projects/p") != auth.RoleUser || p.How != "api-key" {
			t.Fatalf("authenticate: %+v %v", p, err)
		}
	}
	if n := f.store.keyReads.Load(); n != 1 {
		t.Fatalf("the store was read %d times for 5 calls with one key, want 1", n)
	}
	// A wrong secret for the same id misses the cache and is refused.
	_, err := f.a.Authenticate(ctx, key[:len(key)-1]+"x")
	wantUnauthenticated(t, "wrong secret", err)

	// Revoked elsewhere: trusted until 30 s after it was verified, not after.
	f.store.revoke(id, f.clock.Now())
	f.clock.Advance(DefaultKeyCacheTTL - time.Second)
	if _, err := f.a.Authenticate(ctx, key); err != nil {
		t.Fatalf("within 30 s: %v", err)
	}
	f.clock.Advance(time.Second)
	_, err = f.a.Authenticate(ctx, key)
	wantUnauthenticated(t, "revoked after 30 s", err)

	// Revoked through this instance: at once.
	id2, key2 := f.store.addKey(t, "users/alice", f.clock.Now(), 0)
	if _, err := f.a.Authenticate(ctx, key2); err != nil {
		t.Fatal(err)
	}
	f.store.revoke(id2, f.clock.Now())
	f.a.ForgetKey(id2)
	_, err = f.a.Authenticate(ctx, key2)
	wantUnauthenticated(t, "revoked here", err)

	// An expiring key is not cached past its expiry.
	_, key3 := f.store.addKey(t, "users/alice", f.clock.Now(), 10*time.Second)
	if _, err := f.a.Authenticate(ctx, key3); err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(10 * time.Second)
	_, err = f.a.Authenticate(ctx, key3)
	wantUnauthenticated(t, "expired", err)

	// Roles are re-read after RoleCacheTTL, at once after ForgetUser.
	f.store.mu.Lock()
	f.store.roles["alice"] = map[string]auth.Role{"projects/p": auth.RoleAdmin}
	f.store.mu.Unlock()
	_, key4 := f.store.addKey(t, "users/alice", f.clock.Now(), 0)
	f.a.ForgetUser("alice")
	if p, err := f.a.Authenticate(ctx, key4); err != nil || p.Role("projects/p") != auth.RoleAdmin {
		t.Fatalf("after ForgetUser: %+v %v", p, err)
	}
	// A service's key is a service principal.
	_, svcKey := f.store.addKey(t, "services/login", f.clock.Now(), 0)
	if p, err := f.a.Authenticate(ctx, svcKey); err != nil || p.Kind != auth.KindService || p.Name != "services/login" {
		t.Fatalf("service key: %+v %v", p, err)
	}
	_, err = f.a.Authenticate(ctx, "lk_0123456789abcdef.nope")
	wantUnauthenticated(t, "unknown key", err)
}

func TestTokens(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	f.store.admins["root"] = true
	issue := func(c auth.Claims, ttl time.Duration) string {
		tok, _, err := f.iss.Issue(c, ttl)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	user := issue(auth.Claims{Use: auth.UseAccess, Kind: "user", User: "root", RegisteredClaims: auth.ForSubject("users/root")}, time.Minute)
	if p, err := f.a.Authenticate(ctx, user); err != nil || !p.ClusterAdmin || p.How != "token" {
		t.Fatalf("user token: %+v %v", p, err)
	}
	node := issue(auth.Claims{Use: auth.UseAccess, Kind: "node", Node: "n1", Cluster: "projects/p/clusters/c", Pool: "gpu", RegisteredClaims: auth.ForSubject("nodes/n1")}, time.Minute)
	if p, err := f.a.Authenticate(ctx, node); err != nil || p.Kind != auth.KindNode || p.Node != "n1" || p.Pool != "gpu" || p.Role("projects/p") != auth.RoleNone {
		t.Fatalf("node token: %+v %v", p, err)
	}
	wl := issue(auth.Claims{Use: auth.UseAccess, Kind: "workload", User: "bob", Project: "p", Job: "projects/p/jobs/1", RegisteredClaims: auth.ForSubject("jobs/p/1")}, time.Minute)
	if p, err := f.a.Authenticate(ctx, wl); err != nil || p.Kind != auth.KindWorkload || p.Job != "projects/p/jobs/1" || p.User != "bob" {
		t.Fatalf("workload token: %+v %v", p, err)
	}
	// A user token whose subject is not its user's name is refused.
	_, err := f.a.Authenticate(ctx, issue(auth.Claims{Use: auth.UseAccess, Kind: "user", User: "root", RegisteredClaims: auth.ForSubject("users/bob")}, time.Minute))
	wantUnauthenticated(t, "mismatched subject", err)
	_, err = f.a.Authenticate(ctx, issue(auth.Claims{Use: auth.UseRefresh, Kind: "user", User: "root", RegisteredClaims: auth.ForSubject("users/root")}, time.Minute))
	wantUnauthenticated(t, "refresh token as access", err)
	f.clock.Advance(time.Minute)
	_, err = f.a.Authenticate(ctx, user)
	wantUnauthenticated(t, "expired", err)
}

func TestInterceptor(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	_, key := f.store.addKey(t, "users/alice", f.clock.Now(), 0)
	call := func(md metadata.MD) (*auth.Principal, error) {
		ctx, slot := auth.WithSlot(metadata.NewIncomingContext(context.Background(), md))
		var got *auth.Principal
		_, err := f.a.UnaryServerInterceptor()(ctx, nil, &grpc.UnaryServerInfo{}, func(ctx context.Context, _ any) (any, error) {
			got, _ = auth.FromContext(ctx)
			return nil, nil
		})
		if got != slot.Principal {
			t.Fatalf("the slot holds %+v, the handler got %+v", slot.Principal, got)
		}
		return got, err
	}
	if p, err := call(metadata.Pairs("authorization", "Bearer "+key)); err != nil || p == nil || p.Name != "users/alice" {
		t.Fatalf("with a key: %+v %v", p, err)
	}
	if p, err := call(metadata.MD{}); err != nil || p != nil {
		t.Fatalf("anonymous: %+v %v", p, err)
	}
	_, err := call(metadata.Pairs("authorization", "Basic eDp5"))
	wantUnauthenticated(t, "basic", err)
	_, err = call(metadata.Pairs("authorization", "Bearer lk_bad"))
	wantUnauthenticated(t, "malformed key", err)

	off := New(Options{Disabled: true})
	ctx, err := off.Context(context.Background())
	if p, _ := auth.FromContext(ctx); err != nil || p == nil || p.Name != "users/dev" || !p.ClusterAdmin {
		t.Fatalf("authentication off: %+v %v", p, err)
	}
}

// BenchmarkAuthenticate measures authentication per call as the
// interceptor does it (header parsing included), and reports the p99.
func BenchmarkAuthenticate(b *testing.B) {
	f := newFixture(b)
	f.store.roles["alice"] = map[string]auth.Role{"projects/p": auth.RoleUser, "projects/q": auth.RoleViewer}
	_, key := f.store.addKey(b, "users/alice", f.clock.Now(), 0)
	tok, _, err := f.iss.Issue(auth.Claims{Use: auth.UseAccess, Kind: "user", User: "alice", RegisteredClaims: auth.ForSubject("users/alice")}, time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name, cred string
		// uncached empties the cache before each call: the first call
		// with a token (its signature checked) or a role change read.
		uncached bool
	}{{"api-key-cached", key, false}, {"access-token-cached", tok, false}, {"access-token-uncached", tok, true}} {
		b.Run(bc.name, func(b *testing.B) {
			ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer "+bc.cred))
			if _, err := f.a.Context(ctx); err != nil { // warm the caches
				b.Fatal(err)
			}
			lat := make([]time.Duration, 0, b.N)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if bc.uncached {
					f.a.mu.Lock()
					clear(f.a.keys)
					f.a.mu.Unlock()
				}
				start := time.Now()
				if _, err := f.a.Context(ctx); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(start))
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
		})
	}
}

// sendStream is a grpc.ServerStream whose sends are counted.
type sendStream struct {
	grpc.ServerStream
	ctx  context.Context
	sent int
}

func (s *sendStream) Context() context.Context { return s.ctx }
func (s *sendStream) SendMsg(any) error        { s.sent++; return nil }

// TestStreamChecksItsCallerAgain: a stream authenticates its caller again
// before a send once the role cache's lifetime has passed, and ends when the
// caller's role changed (PermissionDenied) or its key was revoked
// (Unauthenticated); within the lifetime it sends without a look-up.
func TestStreamChecksItsCallerAgain(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id, key := f.store.addKey(t, "users/alice", f.clock.Now(), 0)
	f.store.mu.Lock()
	f.store.roles["alice"] = map[string]auth.Role{"default": auth.RoleAdmin}
	f.store.mu.Unlock()
	open := func(steps func(ss grpc.ServerStream) error) error {
		ss := &sendStream{ctx: metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer "+key))}
		return f.a.Stream(nil, ss, &grpc.StreamServerInfo{}, func(_ any, ss grpc.ServerStream) error { return steps(ss) })
	}
	err := open(func(ss grpc.ServerStream) error {
		if err := ss.SendMsg(nil); err != nil {
			return fmt.Errorf("first send: %w", err)
		}
		f.store.mu.Lock()
		f.store.roles["alice"] = map[string]auth.Role{"default": auth.RoleViewer}
		f.store.mu.Unlock()
		if err := ss.SendMsg(nil); err != nil {
			return fmt.Errorf("a send within the cache's lifetime: %w", err)
		}
		f.clock.Advance(DefaultRoleCacheTTL)
		return ss.SendMsg(nil)
	})
	if !errors.Is(err, errs.PermissionDenied) || !strings.Contains(err.Error(), "users/alice is no longer what it was") {
		t.Fatalf("a stream after its caller's role changed: %v", err)
	}
	err = open(func(ss grpc.ServerStream) error {
		f.store.revoke(id, f.clock.Now())
		f.clock.Advance(DefaultKeyCacheTTL)
		return ss.SendMsg(nil)
	})
	wantUnauthenticated(t, "a stream after its key was revoked", err)
	// With an access token: it outlives the token's expiry (a watch of a
	// long job), not a change of the user's roles.
	tok, _, err := f.iss.Issue(auth.Claims{Use: auth.UseAccess, Kind: "user", User: "alice", RegisteredClaims: auth.ForSubject("users/alice")}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	ss := &sendStream{ctx: metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer "+tok))}
	err = f.a.Stream(nil, ss, &grpc.StreamServerInfo{}, func(_ any, ss grpc.ServerStream) error {
		f.clock.Advance(2 * time.Minute)
		if err := ss.SendMsg(nil); err != nil {
			return fmt.Errorf("past the token's expiry: %w", err)
		}
		f.store.mu.Lock()
		f.store.roles["alice"] = map[string]auth.Role{}
		f.store.mu.Unlock()
		f.clock.Advance(DefaultRoleCacheTTL)
		return ss.SendMsg(nil)
	})
	if !errors.Is(err, errs.PermissionDenied) || ss.sent != 1 {
		t.Fatalf("a token's stream: %v after %d sends, want PermissionDenied after 1", err, ss.sent)
	}
}

// TestSlowKeyFailuresWait: a key stored the slow way (argon2id, ~6 ms a
// check) is not checked again within failedWait of a wrong secret, so a
// caller who knows its id cannot spend the gateway's CPU at will; a key
// stored as SHA-256 needs no wait.
func TestSlowKeyFailuresWait(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	id, key := f.store.addKey(t, "users/alice", f.clock.Now(), 0)
	_, secret, _ := auth.ParseAPIKey(key)
	salt := make([]byte, 16)
	slow := "argon2id$" + base64.RawStdEncoding.EncodeToString(salt) + "$" +
		base64.RawStdEncoding.EncodeToString(argon2.IDKey([]byte(secret), salt, 1, 8*1024, 1, 32))
	f.store.mu.Lock()
	f.store.keys[id].Hash = slow
	f.store.mu.Unlock()
	_, err := f.a.Authenticate(ctx, key[:len(key)-1]+"x")
	wantUnauthenticated(t, "wrong secret", err)
	if _, err := f.a.Authenticate(ctx, key); !errors.Is(err, errs.Unauthenticated) || !strings.Contains(err.Error(), "try again after it") {
		t.Fatalf("right secret within a second of a wrong one: %v", err)
	}
	f.clock.Advance(failedWait)
	if p, err := f.a.Authenticate(ctx, key); err != nil || p.Name != "users/alice" {
		t.Fatalf("right secret after the wait: %+v %v", p, err)
	}
	// SHA-256: a wrong secret, then the right one at once.
	id2, key2 := f.store.addKey(t, "users/alice", f.clock.Now(), 0)
	if h := f.store.keys[id2].Hash; !strings.HasPrefix(h, "sha256$") {
		t.Fatalf("a new key stored as %q", h)
	}
	_, err = f.a.Authenticate(ctx, key2[:len(key2)-1]+"x")
	wantUnauthenticated(t, "wrong secret", err)
	if _, err := f.a.Authenticate(ctx, key2); err != nil {
		t.Fatalf("a SHA-256 key right after a wrong secret: %v", err)
	}
}

// TestRemovedNodesTokenIsRefusedAtOnce: once the provisioner revoked a
// removed node's identities, the node's access token is refused on the next
// call, though this instance had it cached; a token of the node made again
// with the same name (a later registration) passes.
func TestRemovedNodesTokenIsRefusedAtOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	const node, cluster = "projects/p/clusters/c/nodes/h1", "projects/p/clusters/c"
	issue := func(reg string) string {
		tok, _, err := f.iss.Issue(auth.Claims{Use: auth.UseAccess, Kind: "node", Node: node, Cluster: cluster, Pool: "gpu", Reg: reg,
			RegisteredClaims: auth.ForSubject(auth.NodeName(node))}, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	removed := time.Now()
	old := issue(auth.NewRegistration(removed.Add(-time.Minute), "boot1"))
	if _, err := f.a.Authenticate(ctx, old); err != nil {
		t.Fatalf("the node's token before its removal: %v", err)
	}
	f.store.mu.Lock()
	f.store.revoked[node] = auth.RevocationFor(removed, "", time.Hour)
	f.store.mu.Unlock()
	_, err := f.a.Authenticate(ctx, old)
	wantUnauthenticated(t, "the removed node's cached token", err)
	if err == nil || !strings.Contains(err.Error(), "was removed") {
		t.Fatalf("the refusal does not say the node was removed: %v", err)
	}
	// Uncached too: another token of the old registration, and one of no
	// registration (issued before registrations were kept).
	_, err = f.a.Authenticate(ctx, issue(auth.NewRegistration(removed.Add(-2*time.Minute), "boot0")))
	wantUnauthenticated(t, "another token of an earlier registration", err)
	_, err = f.a.Authenticate(ctx, issue(""))
	wantUnauthenticated(t, "a token of no registration", err)
	// The node made again registers after the revocation: it passes.
	if p, err := f.a.Authenticate(ctx, issue(auth.NewRegistration(removed.Add(time.Second), "boot2"))); err != nil || p.Node != node {
		t.Fatalf("the token of the node made again: %+v %v", p, err)
	}
}
