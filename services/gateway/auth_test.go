package gateway

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/jonboulle/clockwork"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/loom-ml/loom/libs/auth"
	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/gateway/internal/adapters"
	"github.com/loom-ml/loom/services/gateway/internal/app"
	"github.com/loom-ml/loom/services/gateway/internal/authn"
)

// fakeClockHarness starts a gateway on a fake clock, returned with it.
func fakeClockHarness(t *testing.T, configure ...func(*Config)) (*harness, *clockwork.FakeClock) {
	t.Helper()
	clock := clockwork.NewFakeClockAt(time.Now().Truncate(time.Second))
	h := newHarness(t, append([]func(*Config){func(c *Config) { c.Common.Clock = clock }}, configure...)...)
	return h, clock
}

func authClient(h *harness, t *testing.T, cred string) loomv1.AuthServiceClient {
	return loomv1.NewAuthServiceClient(h.dial(t, cred))
}

// wantCode fails the test unless err has code want and (when set) a
// message holding text.
func wantAuthCode(t *testing.T, what string, err error, want codes.Code, text string) {
	t.Helper()
	if status.Code(err) != want || !strings.Contains(status.Convert(err).Message(), text) {
		t.Fatalf("%s: got %v, want %v with %q", what, err, want, text)
	}
}

// newKey has the admin create an API key for user.
func newKey(t *testing.T, ctx context.Context, h *harness, user string, ttl int64) *loomv1.ApiKey {
	t.Helper()
	k, err := authClient(h, t, h.adminKey).CreateApiKey(ctx, &loomv1.CreateApiKeyRequest{Parent: "users/" + user, TtlSeconds: ttl, Key: &loomv1.ApiKey{DisplayName: "test"}})
	if err != nil {
		t.Fatalf("create key for %s: %v", user, err)
	}
	return k
}

// TestAuthAPIKeyLimitUnderConcurrency: a user's API keys are bounded
// (MaxKeysPerOwner) however many creates arrive at once: the count was a
// read before the write, and concurrent creates all passed it.
func TestAuthAPIKeyLimitUnderConcurrency(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := testkit.Context(t, 2*wait)
	admin := authClient(h, t, h.adminKey)
	const racers = 12
	for range app.MaxKeysPerOwner - racers/2 {
		newKey(t, ctx, h, "carol", 0)
	}
	errs := make([]error, racers)
	var wg sync.WaitGroup
	for i := range racers {
		wg.Go(func() {
			_, errs[i] = admin.CreateApiKey(ctx, &loomv1.CreateApiKeyRequest{Parent: "users/carol"})
		})
	}
	wg.Wait()
	made := 0
	for _, err := range errs {
		switch status.Code(err) {
		case codes.OK:
			made++
		case codes.ResourceExhausted:
			wantAuthCode(t, "a create past the limit", err, codes.ResourceExhausted, fmt.Sprintf("the limit is %d", app.MaxKeysPerOwner))
		default:
			t.Errorf("concurrent create: %v", err)
		}
	}
	var held int
	for token := ""; ; {
		page, err := admin.ListApiKeys(ctx, &loomv1.ListApiKeysRequest{Parent: "users/carol", PageSize: 1000, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		held += len(page.GetKeys())
		if token = page.GetNextPageToken(); token == "" {
			break
		}
	}
	if made != racers/2 || held != app.MaxKeysPerOwner {
		t.Errorf("%d of %d concurrent creates made a key and carol holds %d; want %d and the limit, %d", made, racers, held, racers/2, app.MaxKeysPerOwner)
	}
}

func TestAuthAPIKeys(t *testing.T) {
	t.Parallel()
	h, clock := fakeClockHarness(t)
	ctx := testkit.Context(t, wait)
	admin := authClient(h, t, h.adminKey)

	me, err := admin.WhoAmI(ctx, &loomv1.WhoAmIRequest{})
	if err != nil || me.GetName() != "users/admin" || !me.GetClusterAdmin() || me.GetHow() != "api-key" {
		t.Fatalf("admin whoami: %v %v", me, err)
	}
	k := newKey(t, ctx, h, "alice", 0)
	if !strings.HasPrefix(k.GetSecret(), auth.APIKeyPrefix+k.GetKeyId()+".") || k.GetName() != "users/alice/keys/"+k.GetKeyId() || k.GetCreator() != "users/admin" {
		t.Fatalf("created key: %v", k)
	}
	alice := authClient(h, t, k.GetSecret())
	me, err = alice.WhoAmI(ctx, &loomv1.WhoAmIRequest{})
	if err != nil || me.GetName() != "users/alice" || me.GetClusterAdmin() || me.GetKind() != loomv1.PrincipalKind_PRINCIPAL_KIND_USER {
		t.Fatalf("alice whoami: %v %v", me, err)
	}
	// Her own keys, paged; no secret is ever listed.
	var own []*loomv1.ApiKey
	for range 2 {
		k2, err := alice.CreateApiKey(ctx, &loomv1.CreateApiKeyRequest{Parent: "users/-"})
		if err != nil || k2.GetName() != "users/alice/keys/"+k2.GetKeyId() {
			t.Fatalf("alice creates her own key: %v %v", k2, err)
		}
		own = append(own, k2)
	}
	page, err := alice.ListApiKeys(ctx, &loomv1.ListApiKeysRequest{Parent: "users/-", PageSize: 2})
	if err != nil || len(page.GetKeys()) != 2 || page.GetNextPageToken() == "" {
		t.Fatalf("list page 1: %v %v", page, err)
	}
	rest, err := alice.ListApiKeys(ctx, &loomv1.ListApiKeysRequest{Parent: "users/-", PageSize: 2, PageToken: page.GetNextPageToken()})
	if err != nil || len(rest.GetKeys()) != 1 || rest.GetNextPageToken() != "" {
		t.Fatalf("list page 2: %v %v", rest, err)
	}
	for _, l := range append(page.GetKeys(), rest.GetKeys()...) {
		if l.GetSecret() != "" {
			t.Fatalf("a listed key shows its secret: %v", l)
		}
	}
	// Another user's keys do not exist for her.
	_, err = alice.CreateApiKey(ctx, &loomv1.CreateApiKeyRequest{Parent: "users/bob"})
	wantAuthCode(t, "alice creates bob's key", err, codes.NotFound, "users/bob")
	_, err = alice.ListApiKeys(ctx, &loomv1.ListApiKeysRequest{Parent: "users/admin"})
	wantAuthCode(t, "alice lists admin's keys", err, codes.NotFound, "")
	// Bounded, named fields.
	_, err = alice.CreateApiKey(ctx, &loomv1.CreateApiKeyRequest{Parent: "users/-", TtlSeconds: -1, Key: &loomv1.ApiKey{DisplayName: strings.Repeat("x", 129)}})
	wantAuthCode(t, "bad create", err, codes.InvalidArgument, "key.display_name: 129 bytes, longer than the limit of 128")
	wantAuthCode(t, "bad create", err, codes.InvalidArgument, "ttl_seconds")
	_, err = admin.CreateApiKey(ctx, &loomv1.CreateApiKeyRequest{Parent: "users/Alice@x"})
	wantAuthCode(t, "bad user", err, codes.InvalidArgument, "parent: user")

	// Revoked through this instance: refused at once.
	second := authClient(h, t, own[0].GetSecret())
	if _, err := second.WhoAmI(ctx, &loomv1.WhoAmIRequest{}); err != nil {
		t.Fatal(err)
	}
	if r, err := alice.RevokeApiKey(ctx, &loomv1.RevokeApiKeyRequest{Name: own[0].GetName()}); err != nil || r.GetRevokeTime() == nil {
		t.Fatalf("revoke: %v %v", r, err)
	}
	_, err = second.WhoAmI(ctx, &loomv1.WhoAmIRequest{})
	wantAuthCode(t, "key revoked through this instance", err, codes.Unauthenticated, "revoked")
	// Revoked through another instance (its record changed in Redis): the
	// cached key keeps working for at most 30 s.
	if _, err := alice.WhoAmI(ctx, &loomv1.WhoAmIRequest{}); err != nil {
		t.Fatal(err)
	}
	stored := h.redis.Get(ctx, "gateway:"+adapters.KeyAPIKeyPrefix+k.GetKeyId()).Val()
	var rec adapters.KeyRecord
	if err := json.Unmarshal([]byte(stored), &rec); err != nil {
		t.Fatalf("stored key %q: %v", stored, err)
	}
	if strings.Contains(stored, strings.SplitN(k.GetSecret(), ".", 2)[1]) || !strings.HasPrefix(rec.Hash, "sha256$") {
		t.Fatalf("the store holds the secret, not a hash: %s", stored)
	}
	rec.RevokeTime = clock.Now()
	raw, _ := json.Marshal(rec)
	h.redis.Set(ctx, "gateway:"+adapters.KeyAPIKeyPrefix+k.GetKeyId(), raw, 0)
	if _, err := alice.WhoAmI(ctx, &loomv1.WhoAmIRequest{}); err != nil {
		t.Fatalf("within the cache's 30 s: %v", err)
	}
	clock.Advance(30 * time.Second)
	_, err = alice.WhoAmI(ctx, &loomv1.WhoAmIRequest{})
	wantAuthCode(t, "revoked key after 30 s", err, codes.Unauthenticated, "revoked")

	// An expiring key ends at its expiry.
	short := newKey(t, ctx, h, "bob", 60)
	bob := authClient(h, t, short.GetSecret())
	if _, err := bob.WhoAmI(ctx, &loomv1.WhoAmIRequest{}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(61 * time.Second)
	_, err = bob.WhoAmI(ctx, &loomv1.WhoAmIRequest{})
	wantAuthCode(t, "expired key", err, codes.Unauthenticated, "expired")

	// A made-up key and a malformed header are refused, saying what to do.
	_, err = authClient(h, t, auth.APIKeyPrefix+"0123456789abcdef.secret").WhoAmI(ctx, &loomv1.WhoAmIRequest{})
	wantAuthCode(t, "unknown key", err, codes.Unauthenticated, "loom auth")
	_, err = authClient(h, t, "not-a-token").WhoAmI(ctx, &loomv1.WhoAmIRequest{})
	wantAuthCode(t, "garbage token", err, codes.Unauthenticated, "invalid token")
	// No credential: anonymous, which WhoAmI refuses.
	_, err = authClient(h, t, "").WhoAmI(ctx, &loomv1.WhoAmIRequest{})
	wantAuthCode(t, "anonymous", err, codes.Unauthenticated, "loom auth login")
}

func TestAuthTokensAndRefresh(t *testing.T) {
	t.Parallel()
	h, clock := fakeClockHarness(t)
	ctx := testkit.Context(t, wait)
	k := newKey(t, ctx, h, "alice", 0)
	tok, err := authClient(h, t, k.GetSecret()).CreateToken(ctx, &loomv1.CreateTokenRequest{})
	if err != nil || tok.GetAccessToken() == "" || tok.GetRefreshToken() == "" || tok.GetPrincipal().GetName() != "users/alice" {
		t.Fatalf("token: %v %v", tok, err)
	}
	if got := tok.GetExpireTime().AsTime().Sub(clock.Now()); got != auth.DefaultTokenLifetime {
		t.Fatalf("token lifetime %v, want %v", got, auth.DefaultTokenLifetime)
	}
	withTok := authClient(h, t, tok.GetAccessToken())
	me, err := withTok.WhoAmI(ctx, &loomv1.WhoAmIRequest{})
	if err != nil || me.GetName() != "users/alice" || me.GetHow() != "token" {
		t.Fatalf("whoami with token: %v %v", me, err)
	}
	// The lifetime may only shorten.
	_, err = withTok.CreateToken(ctx, &loomv1.CreateTokenRequest{LifetimeSeconds: 3600})
	wantAuthCode(t, "longer lifetime", err, codes.InvalidArgument, "lifetime_seconds: 3600 is longer than the default lifetime of 1800")
	short, err := withTok.CreateToken(ctx, &loomv1.CreateTokenRequest{LifetimeSeconds: 60})
	if err != nil || short.GetExpireTime().AsTime().Sub(clock.Now()) != time.Minute {
		t.Fatalf("short token: %v %v", short, err)
	}
	_, err = withTok.CreateToken(ctx, &loomv1.CreateTokenRequest{RefreshToken: "x", User: "bob"})
	wantAuthCode(t, "two at once", err, codes.InvalidArgument, "set at most one")

	// Expired: refused, saying how to get a new one.
	clock.Advance(auth.DefaultTokenLifetime + time.Second)
	_, err = withTok.WhoAmI(ctx, &loomv1.WhoAmIRequest{})
	wantAuthCode(t, "expired token", err, codes.Unauthenticated, "loom auth login")

	// The refresh token works once, with no other credential.
	anon := authClient(h, t, "")
	next, err := anon.CreateToken(ctx, &loomv1.CreateTokenRequest{RefreshToken: tok.GetRefreshToken()})
	if err != nil || next.GetPrincipal().GetName() != "users/alice" || next.GetRefreshToken() == tok.GetRefreshToken() {
		t.Fatalf("refresh: %v %v", next, err)
	}
	if _, err := authClient(h, t, next.GetAccessToken()).WhoAmI(ctx, &loomv1.WhoAmIRequest{}); err != nil {
		t.Fatalf("refreshed token: %v", err)
	}
	_, err = anon.CreateToken(ctx, &loomv1.CreateTokenRequest{RefreshToken: tok.GetRefreshToken()})
	wantAuthCode(t, "refresh twice", err, codes.Unauthenticated, "already used")
	// An access token is no refresh token.
	_, err = anon.CreateToken(ctx, &loomv1.CreateTokenRequest{RefreshToken: next.GetAccessToken()})
	wantAuthCode(t, "access as refresh", err, codes.Unauthenticated, "cannot be used as a refresh token")

	// A sign-out ends the refresh token: it gets nothing after, and
	// ending it again is no error; a token that is none is refused.
	if _, err := anon.RevokeToken(ctx, &loomv1.RevokeTokenRequest{RefreshToken: next.GetRefreshToken()}); err != nil {
		t.Fatalf("revoke the refresh token: %v", err)
	}
	_, err = anon.CreateToken(ctx, &loomv1.CreateTokenRequest{RefreshToken: next.GetRefreshToken()})
	wantAuthCode(t, "refresh after the revocation", err, codes.Unauthenticated, "already used")
	if _, err := anon.RevokeToken(ctx, &loomv1.RevokeTokenRequest{RefreshToken: next.GetRefreshToken()}); err != nil {
		t.Fatalf("revoke it again: %v", err)
	}
	_, err = anon.RevokeToken(ctx, &loomv1.RevokeTokenRequest{RefreshToken: next.GetAccessToken()})
	wantAuthCode(t, "revoke an access token", err, codes.Unauthenticated, "cannot be used as a refresh token")
	_, err = anon.RevokeToken(ctx, &loomv1.RevokeTokenRequest{})
	wantAuthCode(t, "revoke nothing", err, codes.InvalidArgument, "refresh_token")
}

// TestAuthSessionEndsWithItsKey: a session started from an API key (its
// tokens, their refreshes, and tokens made with its tokens) lives only
// while the key does: revoked, the session's access tokens and refresh
// tokens are refused at once, saying why; expired, its refresh is.
func TestAuthSessionEndsWithItsKey(t *testing.T) {
	t.Parallel()
	h, clock := fakeClockHarness(t)
	ctx := testkit.Context(t, wait)
	anon := authClient(h, t, "")
	k := newKey(t, ctx, h, "alice", 3600)
	tok, err := authClient(h, t, k.GetSecret()).CreateToken(ctx, &loomv1.CreateTokenRequest{})
	if err != nil {
		t.Fatal(err)
	}
	next, err := anon.CreateToken(ctx, &loomv1.CreateTokenRequest{RefreshToken: tok.GetRefreshToken()})
	if err != nil {
		t.Fatalf("refresh while the key lives: %v", err)
	}
	// A token made with the session's token is of the same session.
	derived, err := authClient(h, t, next.GetAccessToken()).CreateToken(ctx, &loomv1.CreateTokenRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := authClient(h, t, derived.GetAccessToken()).WhoAmI(ctx, &loomv1.WhoAmIRequest{}); err != nil {
		t.Fatalf("the derived token before the revocation: %v", err)
	}
	if _, err := authClient(h, t, h.adminKey).RevokeApiKey(ctx, &loomv1.RevokeApiKeyRequest{Name: k.GetName()}); err != nil {
		t.Fatal(err)
	}
	for what, access := range map[string]string{"refreshed": next.GetAccessToken(), "derived": derived.GetAccessToken()} {
		_, err = authClient(h, t, access).WhoAmI(ctx, &loomv1.WhoAmIRequest{})
		wantAuthCode(t, "the "+what+" access token after the key's revocation", err, codes.Unauthenticated, "was revoked")
	}
	for what, refresh := range map[string]string{"refreshed": next.GetRefreshToken(), "derived": derived.GetRefreshToken()} {
		_, err = anon.CreateToken(ctx, &loomv1.CreateTokenRequest{RefreshToken: refresh})
		wantAuthCode(t, "the "+what+" refresh after the key's revocation", err, codes.Unauthenticated, "which was revoked; log in again")
	}

	// Expired: the session's refresh is refused from then on.
	k2 := newKey(t, ctx, h, "alice", 3600)
	tok2, err := authClient(h, t, k2.GetSecret()).CreateToken(ctx, &loomv1.CreateTokenRequest{})
	if err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Hour)
	_, err = anon.CreateToken(ctx, &loomv1.CreateTokenRequest{RefreshToken: tok2.GetRefreshToken()})
	wantAuthCode(t, "a refresh after the key expired", err, codes.Unauthenticated, "which expired at")

	// A session whose key lives (no expiry) goes on refreshing.
	k3 := newKey(t, ctx, h, "alice", 0)
	tok3, err := authClient(h, t, k3.GetSecret()).CreateToken(ctx, &loomv1.CreateTokenRequest{})
	if err != nil {
		t.Fatal(err)
	}
	clock.Advance(23 * time.Hour)
	if _, err := anon.CreateToken(ctx, &loomv1.CreateTokenRequest{RefreshToken: tok3.GetRefreshToken()}); err != nil {
		t.Fatalf("a refresh of a session whose key lives: %v", err)
	}
}

// TestAuthLoginKeysSessionsEndWithIt: the sessions the login service
// started with its key, and the service's own tokens made with it, end
// when that key is revoked: a leaked login key (which can make a session
// for any user) is revoked with everything it made.
func TestAuthLoginKeysSessionsEndWithIt(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := testkit.Context(t, wait)
	loginKey := readKeyFile(t, h.cfg.Auth.LoginKeyFile)
	login := authClient(h, t, loginKey)
	carol, err := login.CreateToken(ctx, &loomv1.CreateTokenRequest{User: "carol"})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := login.CreateToken(ctx, &loomv1.CreateTokenRequest{})
	if err != nil || svc.GetAccessToken() == "" {
		t.Fatalf("the login service's own token: %v %v", svc, err)
	}
	if _, err := authClient(h, t, svc.GetAccessToken()).WhoAmI(ctx, &loomv1.WhoAmIRequest{}); err != nil {
		t.Fatalf("the service token before the revocation: %v", err)
	}
	id, _, err := auth.ParseAPIKey(loginKey)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := authClient(h, t, h.adminKey).RevokeApiKey(ctx, &loomv1.RevokeApiKeyRequest{Name: "services/login/keys/" + id}); err != nil {
		t.Fatal(err)
	}
	for what, tok := range map[string]string{"carol's session": carol.GetAccessToken(), "the service's token": svc.GetAccessToken()} {
		_, err := authClient(h, t, tok).WhoAmI(ctx, &loomv1.WhoAmIRequest{})
		wantAuthCode(t, what+" after the login key's revocation", err, codes.Unauthenticated, "was revoked")
	}
	_, err = authClient(h, t, "").CreateToken(ctx, &loomv1.CreateTokenRequest{RefreshToken: carol.GetRefreshToken()})
	wantAuthCode(t, "carol's refresh after the login key's revocation", err, codes.Unauthenticated, "was revoked")
}

func TestAuthLoginServiceAndMembers(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := testkit.Context(t, wait)
	raw, err := auth.LoadSecret(h.cfg.ServiceKeyFile)
	if err != nil || len(raw) != ed25519.SeedSize {
		t.Fatalf("service key file: %v", err)
	}
	loginKey := readKeyFile(t, h.cfg.Auth.LoginKeyFile)
	login := authClient(h, t, loginKey)
	tok, err := login.CreateToken(ctx, &loomv1.CreateTokenRequest{User: "carol"})
	if err != nil || tok.GetPrincipal().GetName() != "users/carol" {
		t.Fatalf("login service token for carol: %v %v", tok, err)
	}
	_, err = login.CreateToken(ctx, &loomv1.CreateTokenRequest{User: "root; rm"})
	wantAuthCode(t, "bad user", err, codes.InvalidArgument, "user: ")
	// A plain user may not.
	alice := authClient(h, t, newKey(t, ctx, h, "alice", 0).GetSecret())
	_, err = alice.CreateToken(ctx, &loomv1.CreateTokenRequest{User: "carol"})
	wantAuthCode(t, "alice's token for carol", err, codes.PermissionDenied, "login service")

	// Members: the admin makes alice admin of default; she manages its
	// members, not another project's, and not the cluster admins.
	admin := authClient(h, t, h.adminKey)
	if _, err := admin.SetMember(ctx, &loomv1.SetMemberRequest{Parent: project, User: "alice", Role: "admin"}); err != nil {
		t.Fatal(err)
	}
	me, err := alice.WhoAmI(ctx, &loomv1.WhoAmIRequest{})
	if err != nil || me.GetRoles()[project] != "admin" {
		t.Fatalf("alice's roles right after SetMember: %v %v", me, err)
	}
	if _, err := alice.SetMember(ctx, &loomv1.SetMemberRequest{Parent: project, User: "bob", Role: "viewer"}); err != nil {
		t.Fatalf("project admin sets a member: %v", err)
	}
	ms, err := alice.ListMembers(ctx, &loomv1.ListMembersRequest{Parent: project})
	// The harness's own test principals are members of the project too.
	roles := map[string]string{}
	for _, m := range ms.GetMembers() {
		roles[m.GetUser()] = m.GetRole()
	}
	if err != nil || roles["alice"] != "admin" || roles["bob"] != "viewer" ||
		!slices.IsSortedFunc(ms.GetMembers(), func(a, b *loomv1.Member) int { return strings.Compare(a.GetUser(), b.GetUser()) }) {
		t.Fatalf("members: %v %v", ms, err)
	}
	_, err = alice.SetMember(ctx, &loomv1.SetMemberRequest{Parent: "projects/other", User: "bob", Role: "admin"})
	wantAuthCode(t, "other project", err, codes.NotFound, "")
	_, err = alice.SetMember(ctx, &loomv1.SetMemberRequest{Parent: "global", User: "alice", Role: "cluster-admin"})
	wantAuthCode(t, "global by a project admin", err, codes.PermissionDenied, "")
	_, err = admin.SetMember(ctx, &loomv1.SetMemberRequest{Parent: project, User: "bob", Role: "owner"})
	wantAuthCode(t, "bad role", err, codes.InvalidArgument, "role: ")
	// A project admin lists and revokes the keys of the project's members,
	// unless they are members elsewhere too (the key reaches further than
	// her projects) or cluster administrators; she creates none for them (a
	// key acts as its user's OS account).
	bobKey := newKey(t, ctx, h, "bob", 0)
	if l, err := alice.ListApiKeys(ctx, &loomv1.ListApiKeysRequest{Parent: "users/bob"}); err != nil || len(l.GetKeys()) != 1 {
		t.Fatalf("project admin lists a member's keys: %v %v", l, err)
	}
	_, err = alice.CreateApiKey(ctx, &loomv1.CreateApiKeyRequest{Parent: "users/bob"})
	wantAuthCode(t, "project admin creates a member's key", err, codes.PermissionDenied, "only cluster administrators")
	if _, err := admin.SetMember(ctx, &loomv1.SetMemberRequest{Parent: "projects/other", User: "bob", Role: "viewer"}); err != nil {
		t.Fatal(err)
	}
	_, err = alice.RevokeApiKey(ctx, &loomv1.RevokeApiKeyRequest{Name: bobKey.GetName()})
	wantAuthCode(t, "key of a member of another project too", err, codes.NotFound, "users/bob")
	if _, err := alice.SetMember(ctx, &loomv1.SetMemberRequest{Parent: project, User: adminUser, Role: "viewer"}); err != nil {
		t.Fatal(err)
	}
	_, err = alice.ListApiKeys(ctx, &loomv1.ListApiKeysRequest{Parent: "users/" + adminUser})
	wantAuthCode(t, "keys of a cluster admin", err, codes.NotFound, "")
	// The admin removes her: her next call has no role there.
	if _, err := admin.SetMember(ctx, &loomv1.SetMemberRequest{Parent: project, User: "alice"}); err != nil {
		t.Fatal(err)
	}
	_, err = alice.ListMembers(ctx, &loomv1.ListMembersRequest{Parent: project})
	wantAuthCode(t, "removed admin", err, codes.NotFound, "")

	// REST carries the Authorization header to the same check.
	rest := func(cred string) (int, string) {
		req, _ := http.NewRequestWithContext(ctx, "GET", h.restBase+"/v1/auth:whoami", nil)
		if cred != "" {
			req.Header.Set("Authorization", "Bearer "+cred)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := rest(tok.GetAccessToken()); code != http.StatusOK || !strings.Contains(body, `"name":"users/carol"`) {
		t.Fatalf("REST whoami: %d %s", code, body)
	}
	if code, body := rest("lk_0123456789abcdef.nope"); code != http.StatusUnauthorized || !strings.Contains(body, "unknown API key") {
		t.Fatalf("REST with a bad key: %d %s", code, body)
	}
	if code, _ := rest(""); code != http.StatusUnauthorized {
		t.Fatalf("REST anonymous whoami: %d", code)
	}
}

// TestAuthProjectAdminCannotAdoptKeyHolders: a project admin manages the
// keys of users whose every membership is in her projects, so giving a
// user with no membership their first one would bring the keys they hold
// (made by a cluster admin or by them, outside any project of hers) under
// her: list them and revoke them. She may not give a first membership to a
// user who holds a usable key (PermissionDenied, saying who may); she may
// to one who holds none (a new user: the documented way to add a member),
// and a cluster administrator may to anyone.
func TestAuthProjectAdminCannotAdoptKeyHolders(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := testkit.Context(t, wait)
	admin := authClient(h, t, h.adminKey)
	alice := authClient(h, t, newKey(t, ctx, h, "alice", 0).GetSecret())
	if _, err := admin.SetMember(ctx, &loomv1.SetMemberRequest{Parent: project, User: "alice", Role: "admin"}); err != nil {
		t.Fatal(err)
	}
	// dana has a key and no membership.
	danaKey := newKey(t, ctx, h, "dana", 0)
	_, err := alice.SetMember(ctx, &loomv1.SetMemberRequest{Parent: project, User: "dana", Role: "viewer"})
	if err == nil {
		if l, lerr := alice.ListApiKeys(ctx, &loomv1.ListApiKeysRequest{Parent: "users/dana"}); lerr == nil {
			t.Fatalf("a project admin made key-holder dana a member and now lists her keys: %v", l.GetKeys())
		}
	}
	wantAuthCode(t, "first membership of a key holder by a project admin", err, codes.PermissionDenied,
		"users/dana has no membership and holds API keys: only a cluster administrator gives such a user a first membership")
	if n, err := h.redis.HLen(ctx, "gateway:"+adapters.KeyUserRolesPrefix+"dana").Result(); err != nil || n != 0 {
		t.Fatalf("dana's roles after the refusal: %d %v", n, err)
	}
	_, err = alice.RevokeApiKey(ctx, &loomv1.RevokeApiKeyRequest{Name: danaKey.GetName()})
	wantAuthCode(t, "revoke a non-member's key", err, codes.NotFound, "users/dana")

	// erin has no key: a new user, whom a project admin adds.
	if _, err := alice.SetMember(ctx, &loomv1.SetMemberRequest{Parent: project, User: "erin", Role: "user"}); err != nil {
		t.Fatalf("project admin adds a new user: %v", err)
	}
	// frank's only key is revoked: nothing to adopt.
	frankKey := newKey(t, ctx, h, "frank", 0)
	if _, err := admin.RevokeApiKey(ctx, &loomv1.RevokeApiKeyRequest{Name: frankKey.GetName()}); err != nil {
		t.Fatal(err)
	}
	if _, err := alice.SetMember(ctx, &loomv1.SetMemberRequest{Parent: project, User: "frank", Role: "user"}); err != nil {
		t.Fatalf("project admin adds a user whose keys are all revoked: %v", err)
	}
	// A cluster administrator gives dana her first membership; from then on
	// she is a member of alice's project only, whose keys alice manages, and
	// alice may change her role.
	if _, err := admin.SetMember(ctx, &loomv1.SetMemberRequest{Parent: project, User: "dana", Role: "viewer"}); err != nil {
		t.Fatal(err)
	}
	if _, err := alice.SetMember(ctx, &loomv1.SetMemberRequest{Parent: project, User: "dana", Role: "user"}); err != nil {
		t.Fatalf("project admin changes a member's role: %v", err)
	}
	if l, err := alice.ListApiKeys(ctx, &loomv1.ListApiKeysRequest{Parent: "users/dana"}); err != nil || len(l.GetKeys()) != 1 {
		t.Fatalf("project admin lists a member's keys: %v %v", l, err)
	}
}

func readKeyFile(t *testing.T, path string) string {
	t.Helper()
	raw, err := readFile0600(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(raw)
}

// bootstrapToken mints what the provisioner gives a node.
func bootstrapToken(t *testing.T, h *harness, clock clockwork.Clock, node, cluster, pool string) string {
	t.Helper()
	seed, err := auth.LoadSecret(h.cfg.ServiceKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	iss, err := auth.NewIssuer(auth.DeriveKey(seed, auth.PurposeBootstrap), "loom-bootstrap", clock.Now)
	if err != nil {
		t.Fatal(err)
	}
	tok, _, err := iss.Issue(auth.Claims{Use: auth.UseBootstrap, Kind: "node", Node: node, Cluster: cluster, Pool: pool,
		RegisteredClaims: auth.ForSubject(auth.NodeName(node))}, auth.DefaultBootstrapLifetime)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestAuthNodesAndWorkloads(t *testing.T) {
	t.Parallel()
	h, clock := fakeClockHarness(t)
	ctx := testkit.Context(t, wait)
	anon := authClient(h, t, "")
	pub, _, _ := ed25519.GenerateKey(rand.Reader)

	// A token for another pool than the node's is refused, and not used up.
	_, err := anon.RegisterNode(ctx, &loomv1.RegisterNodeRequest{BootstrapToken: bootstrapToken(t, h, clock, "gpu-0001", cluster1, "cpu"), PublicKey: pub})
	wantAuthCode(t, "wrong pool", err, codes.Unauthenticated, "not in pool cpu")
	_, err = anon.RegisterNode(ctx, &loomv1.RegisterNodeRequest{BootstrapToken: "x", PublicKey: pub[:5]})
	wantAuthCode(t, "bad request", err, codes.InvalidArgument, "public_key: 5 bytes")
	// Past its lifetime it is refused.
	late := bootstrapToken(t, h, clock, "gpu-0001", cluster1, "gpu")
	clock.Advance(auth.DefaultBootstrapLifetime + time.Second)
	_, err = anon.RegisterNode(ctx, &loomv1.RegisterNodeRequest{BootstrapToken: late, PublicKey: pub})
	wantAuthCode(t, "expired bootstrap token", err, codes.Unauthenticated, "expired")

	// Good once.
	boot := bootstrapToken(t, h, clock, "gpu-0001", cluster1, "gpu")
	id, err := anon.RegisterNode(ctx, &loomv1.RegisterNodeRequest{BootstrapToken: boot, Node: "gpu-0001", PublicKey: pub})
	if err != nil || id.GetNode() != "gpu-0001" || id.GetPool() != "gpu" || id.GetCluster() != cluster1 {
		t.Fatalf("register: %v %v", id, err)
	}
	cert, err := auth.VerifyNodeCert(id.GetServicePublicKey(), id.GetCertificate(), clock.Now())
	if err != nil || cert.Node != "gpu-0001" || !ed25519.PublicKey(cert.PublicKey).Equal(pub) {
		t.Fatalf("certificate: %+v %v", cert, err)
	}
	// The node's command key opens what is sealed for that node's
	// registration alone: the certificate names the registration, made now.
	if !auth.RegisteredAt(cert.Reg).Equal(clock.Now()) {
		t.Fatalf("certificate registration %q, want one made at %s", cert.Reg, clock.Now())
	}
	if want := auth.CommandKey(testkit.ServiceSecret(), "gpu-0001", cert.Reg); !bytes.Equal(id.GetCommandKey(), want) {
		t.Fatalf("register: command key %x, want the registration's %x", id.GetCommandKey(), want)
	}
	_, err = anon.RegisterNode(ctx, &loomv1.RegisterNodeRequest{BootstrapToken: boot, PublicKey: pub})
	wantAuthCode(t, "bootstrap token twice", err, codes.Unauthenticated, "already used")

	// The node renews its identity before it expires, with a new key.
	node := authClient(h, t, id.GetAccessToken())
	me, err := node.WhoAmI(ctx, &loomv1.WhoAmIRequest{})
	if err != nil || me.GetName() != "nodes/gpu-0001" || me.GetKind() != loomv1.PrincipalKind_PRINCIPAL_KIND_NODE {
		t.Fatalf("node whoami: %v %v", me, err)
	}
	clock.Advance(auth.DefaultNodeIdentityLifetime * 2 / 3)
	pub2, _, _ := ed25519.GenerateKey(rand.Reader)
	renewed, err := node.RenewNodeIdentity(ctx, &loomv1.RenewNodeIdentityRequest{PublicKey: pub2})
	if err != nil || !renewed.GetExpireTime().AsTime().After(id.GetExpireTime().AsTime()) {
		t.Fatalf("renew: %v %v", renewed, err)
	}
	if !bytes.Equal(renewed.GetCommandKey(), id.GetCommandKey()) || auth.CertRegistration(renewed.GetCertificate()) != cert.Reg {
		t.Fatalf("renew: command key %x of registration %q, want the node's %x of %q", renewed.GetCommandKey(),
			auth.CertRegistration(renewed.GetCertificate()), id.GetCommandKey(), cert.Reg)
	}
	clock.Advance(auth.DefaultNodeIdentityLifetime/3 + time.Second)
	_, err = node.WhoAmI(ctx, &loomv1.WhoAmIRequest{})
	wantAuthCode(t, "old identity", err, codes.Unauthenticated, "expired")
	node = authClient(h, t, renewed.GetAccessToken())

	// Workload tokens: only for a job whose current run holds the node.
	h.w.setJob(&loomv1.Job{Name: project + "/jobs/7", JobId: "7", Cluster: cluster1, User: "alice", State: loomv1.JobState_RUNNING,
		Runs: []*loomv1.JobRun{{Attempt: 1, State: loomv1.JobState_FAILED, Nodes: []string{"gpu-0009"}}, {Attempt: 2, State: loomv1.JobState_RUNNING, Nodes: []string{"gpu-0001"}}}})
	h.w.setJob(&loomv1.Job{Name: project + "/jobs/8", JobId: "8", Cluster: cluster1, User: "bob", State: loomv1.JobState_RUNNING,
		Runs: []*loomv1.JobRun{{Attempt: 1, State: loomv1.JobState_RUNNING, Nodes: []string{"gpu-0002"}}}})
	wl, err := node.CreateToken(ctx, &loomv1.CreateTokenRequest{Job: project + "/jobs/7"})
	if err != nil || wl.GetPrincipal().GetKind() != loomv1.PrincipalKind_PRINCIPAL_KIND_WORKLOAD || wl.GetPrincipal().GetUser() != "alice" ||
		wl.GetPrincipal().GetName() != "jobs/default/7" || wl.GetRefreshToken() != "" {
		t.Fatalf("workload token: %v %v", wl, err)
	}
	me, err = authClient(h, t, wl.GetAccessToken()).WhoAmI(ctx, &loomv1.WhoAmIRequest{})
	if err != nil || me.GetName() != "jobs/default/7" || me.GetUser() != "alice" {
		t.Fatalf("workload whoami: %v %v", me, err)
	}
	_, err = node.CreateToken(ctx, &loomv1.CreateTokenRequest{Job: project + "/jobs/8"})
	wantAuthCode(t, "another node's job", err, codes.PermissionDenied, "does not run")
	_, err = node.CreateToken(ctx, &loomv1.CreateTokenRequest{Job: project + "/jobs/99"})
	wantAuthCode(t, "unknown job", err, codes.PermissionDenied, "does not run")
	_, err = authClient(h, t, h.adminKey).CreateToken(ctx, &loomv1.CreateTokenRequest{Job: project + "/jobs/7"})
	wantAuthCode(t, "a user asks for a workload token", err, codes.PermissionDenied, "only the node")
	// A user cannot renew a node identity.
	_, err = authClient(h, t, h.adminKey).RenewNodeIdentity(ctx, &loomv1.RenewNodeIdentityRequest{PublicKey: pub})
	wantAuthCode(t, "user renews", err, codes.PermissionDenied, "")
}

// nodeRegistrar returns what registers gpu-0001 of cluster1 (pool gpu)
// with one key, pub, and a new bootstrap token at each call, as a reimaged
// or re-created machine's new agent does, failing the test on an error.
func nodeRegistrar(ctx context.Context, t *testing.T, h *harness, clock clockwork.Clock) (register func() *loomv1.NodeIdentity, pub ed25519.PublicKey) {
	anon := authClient(h, t, "")
	pub, _, _ = ed25519.GenerateKey(rand.Reader)
	return func() *loomv1.NodeIdentity {
		t.Helper()
		id, err := anon.RegisterNode(ctx, &loomv1.RegisterNodeRequest{BootstrapToken: bootstrapToken(t, h, clock, "gpu-0001", cluster1, "gpu"), PublicKey: pub})
		if err != nil {
			t.Fatal(err)
		}
		return id
	}, pub
}

// TestAuthNodeRegisteredAgainEndsTheOldIdentity: a node whose agent
// registers again (its machine reimaged or replaced: a new bootstrap
// token) ends the identities of the registration before, so that what
// the old image held can neither be used nor renewed for good; the new
// identity renews as before.
func TestAuthNodeRegisteredAgainEndsTheOldIdentity(t *testing.T) {
	t.Parallel()
	h, clock := fakeClockHarness(t)
	ctx := testkit.Context(t, wait)
	register, pub := nodeRegistrar(ctx, t, h, clock)
	before := register()
	old := authClient(h, t, before.GetAccessToken())
	if _, err := old.WhoAmI(ctx, &loomv1.WhoAmIRequest{}); err != nil {
		t.Fatalf("first identity: %v", err)
	}
	// The machine is reimaged; its new agent registers.
	clock.Advance(time.Second)
	after := register()
	// Its registration is a new one, the later, with a command key of its
	// own: what the old image kept opens nothing sealed for the new one.
	oldReg, newReg := auth.CertRegistration(before.GetCertificate()), auth.CertRegistration(after.GetCertificate())
	if oldReg == "" || !auth.SupersedesRegistration(newReg, oldReg) || auth.SupersedesRegistration(oldReg, newReg) {
		t.Fatalf("registrations %q then %q: want the second to supersede the first, never the other way", oldReg, newReg)
	}
	if want := auth.CommandKey(testkit.ServiceSecret(), "gpu-0001", newReg); !bytes.Equal(after.GetCommandKey(), want) {
		t.Fatalf("new registration's command key %x, want %x", after.GetCommandKey(), want)
	}
	sealed, err := envelope.SealCommand(after.GetCommandKey(), &eventsv1.StartStep{Job: "projects/p/jobs/1", Attempt: 1,
		Node: "gpu-0001", Registration: newReg, Script: "echo secret"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := envelope.OpenCommand(before.GetCommandKey(), sealed); envelope.ReasonOf(err) != envelope.ReasonBadSeal {
		t.Fatalf("the old image's command key on a command sealed for the new registration: %v, want %s", err, envelope.ReasonBadSeal)
	}
	if opened, err := envelope.OpenCommand(after.GetCommandKey(), sealed); err != nil || opened.(*eventsv1.StartStep).GetScript() != "echo secret" {
		t.Fatalf("the new registration's key: %v, %v", opened, err)
	}
	// Renewing the old identity is refused at once, cache or not.
	_, err = old.RenewNodeIdentity(ctx, &loomv1.RenewNodeIdentityRequest{PublicKey: pub})
	wantAuthCode(t, "the old identity renews", err, codes.Unauthenticated, "registered again")
	// Using it is refused once this instance's cache of it has expired.
	clock.Advance(authn.DefaultKeyCacheTTL + time.Second)
	_, err = old.WhoAmI(ctx, &loomv1.WhoAmIRequest{})
	wantAuthCode(t, "the old identity", err, codes.Unauthenticated, "registered again")
	// The new one works and renews, and its renewal is still the node's.
	node := authClient(h, t, after.GetAccessToken())
	renewed, err := node.RenewNodeIdentity(ctx, &loomv1.RenewNodeIdentityRequest{PublicKey: pub})
	if err != nil {
		t.Fatalf("the new identity renews: %v", err)
	}
	clock.Advance(authn.DefaultKeyCacheTTL + time.Second)
	if me, err := authClient(h, t, renewed.GetAccessToken()).WhoAmI(ctx, &loomv1.WhoAmIRequest{}); err != nil || me.GetName() != "nodes/gpu-0001" {
		t.Fatalf("renewed identity: %v, %v", me, err)
	}
}

// TestAuthNodeIdentityWithoutARegistration: an identity from before
// registrations were kept (no reg claim; or one a gateway of an earlier
// release renewed) keeps working and renews, bound now to a registration
// of its own, so that the node's next registration (a reimage) ends it as
// it ends any other, rather than it staying renewable for good.
// TestAuthNodeRegistrationsOrderPastAGatewayClockBehind: a node's
// registration made by a gateway whose clock is behind the one that made
// the registration before (gateway instances' clocks differ) is still the
// later one: the provisioner keeps the latest by the time a registration
// names, and one named earlier would leave the node's commands sealed for
// the old image's registration, every step of the new one reported lost.
func TestAuthNodeRegistrationsOrderPastAGatewayClockBehind(t *testing.T) {
	t.Parallel()
	h, clock := fakeClockHarness(t)
	ctx := testkit.Context(t, wait)
	anon := authClient(h, t, "")
	pub, _, _ := ed25519.GenerateKey(rand.Reader)
	register := func() string {
		t.Helper()
		id, err := anon.RegisterNode(ctx, &loomv1.RegisterNodeRequest{BootstrapToken: bootstrapToken(t, h, clock, "gpu-0001", cluster1, "gpu"), PublicKey: pub})
		if err != nil {
			t.Fatal(err)
		}
		return auth.CertRegistration(id.GetCertificate())
	}
	first := register()
	// The reimaged node's agent registers through a gateway whose clock
	// is five minutes behind the first's.
	clock.Advance(-5 * time.Minute)
	second := register()
	if !auth.SupersedesRegistration(second, first) || auth.SupersedesRegistration(first, second) {
		t.Fatalf("registrations %q then %q: want the second to supersede the first, never the other way", first, second)
	}
}

func TestAuthNodeIdentityWithoutARegistration(t *testing.T) {
	t.Parallel()
	h, clock := fakeClockHarness(t)
	ctx := testkit.Context(t, wait)
	key, err := auth.LoadSecret(h.cfg.Auth.TokenKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	iss, err := auth.NewIssuer(key, "loom", clock.Now)
	if err != nil {
		t.Fatal(err)
	}
	legacy, _, err := iss.Issue(auth.Claims{Use: auth.UseAccess, Kind: auth.KindNode.String(), Node: "gpu-0001", Cluster: cluster1, Pool: "gpu",
		RegisteredClaims: auth.ForSubject(auth.NodeName("gpu-0001"))}, auth.DefaultNodeIdentityLifetime)
	if err != nil {
		t.Fatal(err)
	}
	pub, _, _ := ed25519.GenerateKey(rand.Reader)
	renewed, err := authClient(h, t, legacy).RenewNodeIdentity(ctx, &loomv1.RenewNodeIdentityRequest{PublicKey: pub})
	if err != nil {
		t.Fatalf("an identity without a registration renews: %v", err)
	}
	c, err := iss.Verify(renewed.GetAccessToken(), auth.UseAccess)
	if err != nil || c.Reg == "" {
		t.Fatalf("renewed identity's claims %+v, %v; want a registration of its own", c, err)
	}
	// Another identity without one (renewed by a gateway of the earlier
	// release in a rolling upgrade) still works and renews, into the
	// registration the first adopted; a retry of the first renews too.
	legacy2, _, err := iss.Issue(auth.Claims{Use: auth.UseAccess, Kind: auth.KindNode.String(), Node: "gpu-0001", Cluster: cluster1, Pool: "gpu",
		RegisteredClaims: auth.ForSubject(auth.NodeName("gpu-0001"))}, auth.DefaultNodeIdentityLifetime)
	if err != nil {
		t.Fatal(err)
	}
	for i, tok := range []string{legacy2, legacy} {
		again, err := authClient(h, t, tok).RenewNodeIdentity(ctx, &loomv1.RenewNodeIdentityRequest{PublicKey: pub})
		if err != nil {
			t.Fatalf("identity %d without a registration, after another adopted one: %v", i, err)
		}
		if c2, err := iss.Verify(again.GetAccessToken(), auth.UseAccess); err != nil || c2.Reg != c.Reg {
			t.Fatalf("identity %d renewed into %+v, %v; want the adopted registration %q", i, c2, err, c.Reg)
		}
	}
	// The node is reimaged: its new agent registers, and the renewed
	// legacy identity ends.
	if _, err := authClient(h, t, "").RegisterNode(ctx, &loomv1.RegisterNodeRequest{BootstrapToken: bootstrapToken(t, h, clock, "gpu-0001", cluster1, "gpu"), PublicKey: pub}); err != nil {
		t.Fatal(err)
	}
	_, err = authClient(h, t, renewed.GetAccessToken()).RenewNodeIdentity(ctx, &loomv1.RenewNodeIdentityRequest{PublicKey: pub})
	wantAuthCode(t, "the renewed legacy identity after a registration", err, codes.Unauthenticated, "registered again")
	_, err = authClient(h, t, legacy).RenewNodeIdentity(ctx, &loomv1.RenewNodeIdentityRequest{PublicKey: pub})
	wantAuthCode(t, "the legacy identity after a registration", err, codes.Unauthenticated, "registered again")
}

func TestAuthOIDC(t *testing.T) {
	t.Parallel()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	var issuer string
	mux := http.NewServeMux()
	mux.HandleFunc("/.well-known/openid-configuration", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]any{"issuer": issuer, "jwks_uri": issuer + "/keys", "authorization_endpoint": issuer + "/auth",
			"token_endpoint": issuer + "/token", "id_token_signing_alg_values_supported": []string{"RS256"}})
	})
	mux.HandleFunc("/keys", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &key.PublicKey, KeyID: "k1", Algorithm: "RS256", Use: "sig"}}})
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	issuer = srv.URL
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: key}, (&jose.SignerOptions{}).WithHeader("kid", "k1").WithType("JWT"))
	if err != nil {
		t.Fatal(err)
	}
	h, clock := fakeClockHarness(t, func(c *Config) { c.Auth.OIDCIssuer, c.Auth.OIDCClientID = issuer, "loom" })
	idTokenOf := func(aud, sub, user string) string {
		claims, _ := json.Marshal(map[string]any{"iss": issuer, "aud": aud, "sub": sub, "preferred_username": user,
			"iat": clock.Now().Unix(), "exp": clock.Now().Add(5 * time.Minute).Unix()})
		obj, err := signer.Sign(claims)
		if err != nil {
			t.Fatal(err)
		}
		s, err := obj.CompactSerialize()
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	idToken := func(aud, user string) string { return idTokenOf(aud, "id-123", user) }
	ctx := testkit.Context(t, wait)
	anon := authClient(h, t, "")
	tok, err := anon.CreateToken(ctx, &loomv1.CreateTokenRequest{OidcIdToken: idToken("loom", "dana")})
	if err != nil || tok.GetPrincipal().GetName() != "users/dana" || tok.GetPrincipal().GetHow() != "oidc" {
		t.Fatalf("OIDC token: %v %v", tok, err)
	}
	if me, err := authClient(h, t, tok.GetAccessToken()).WhoAmI(ctx, &loomv1.WhoAmIRequest{}); err != nil || me.GetName() != "users/dana" {
		t.Fatalf("whoami with the OIDC user's token: %v %v", me, err)
	}
	_, err = anon.CreateToken(ctx, &loomv1.CreateTokenRequest{OidcIdToken: idToken("other-client", "dana")})
	wantAuthCode(t, "wrong audience", err, codes.Unauthenticated, "OIDC")
	_, err = anon.CreateToken(ctx, &loomv1.CreateTokenRequest{OidcIdToken: idToken("loom", "dana@example.com")})
	wantAuthCode(t, "not an OS user name", err, codes.PermissionDenied, "not a valid OS account name")

	// The first sign-in bound dana to subject id-123: another identity
	// whose preferred_username says dana is refused.
	_, err = anon.CreateToken(ctx, &loomv1.CreateTokenRequest{OidcIdToken: idTokenOf("loom", "id-999", "dana")})
	wantAuthCode(t, "another identity claiming dana", err, codes.PermissionDenied, "dana is bound to another identity of the OIDC provider, and this one may not sign in as dana")
	if strings.Contains(status.Convert(err).Message(), "id-123") {
		t.Errorf("the refusal names the bound subject: %v", err)
	}
	danaTok := tok.GetAccessToken()
	if b, err := authClient(h, t, danaTok).GetOidcBinding(ctx, &loomv1.GetOidcBindingRequest{Name: "users/-/oidcBinding"}); err != nil ||
		b.GetName() != "users/dana/oidcBinding" || b.GetIssuer() != issuer || b.GetSubject() != "id-123" {
		t.Fatalf("dana's own binding: %v, %v", b, err)
	}
	_, err = authClient(h, t, danaTok).DeleteOidcBinding(ctx, &loomv1.DeleteOidcBindingRequest{Name: "users/dana/oidcBinding"})
	wantAuthCode(t, "dana releases her own binding", err, codes.PermissionDenied, "only a cluster administrator")

	// root and cluster administrators are not claimed by a sign-in:
	// linked only by a caller already authenticated as them.
	_, err = anon.CreateToken(ctx, &loomv1.CreateTokenRequest{OidcIdToken: idTokenOf("loom", "id-evil", "root")})
	wantAuthCode(t, "an OIDC sign-in as root", err, codes.PermissionDenied, "root may not be claimed by an OIDC sign-in until it is linked")
	_, err = anon.CreateToken(ctx, &loomv1.CreateTokenRequest{OidcIdToken: idTokenOf("loom", "id-evil", adminUser)})
	wantAuthCode(t, "an OIDC sign-in as a cluster administrator", err, codes.PermissionDenied, adminUser+" may not be claimed")
	admin := authClient(h, t, h.adminKey)
	_, err = admin.GetOidcBinding(ctx, &loomv1.GetOidcBindingRequest{Name: "users/" + adminUser + "/oidcBinding"})
	wantAuthCode(t, "the refused sign-ins bound nothing", err, codes.NotFound, "no OIDC binding")
	linked, err := admin.CreateToken(ctx, &loomv1.CreateTokenRequest{OidcIdToken: idTokenOf("loom", "id-admin", adminUser)})
	if err != nil || linked.GetPrincipal().GetName() != "users/"+adminUser || !linked.GetPrincipal().GetClusterAdmin() {
		t.Fatalf("the administrator links its identity: %v, %v", linked, err)
	}
	if _, err := anon.CreateToken(ctx, &loomv1.CreateTokenRequest{OidcIdToken: idTokenOf("loom", "id-admin", adminUser)}); err != nil {
		t.Fatalf("the linked administrator signs in by OIDC: %v", err)
	}

	// Only the user and cluster administrators see a binding; an
	// administrator releases one, and the next sign-in binds again.
	_, err = authClient(h, t, h.cred("bob")).GetOidcBinding(ctx, &loomv1.GetOidcBindingRequest{Name: "users/dana/oidcBinding"})
	wantAuthCode(t, "bob reads dana's binding", err, codes.NotFound, "")
	clock.Advance(time.Second)
	if b, err := admin.DeleteOidcBinding(ctx, &loomv1.DeleteOidcBindingRequest{Name: "users/dana/oidcBinding"}); err != nil || b.GetSubject() != "id-123" {
		t.Fatalf("the administrator releases dana's binding: %v, %v", b, err)
	}
	// The release ends the sessions of the identity it held.
	_, err = anon.CreateToken(ctx, &loomv1.CreateTokenRequest{RefreshToken: tok.GetRefreshToken()})
	wantAuthCode(t, "a refresh of the released identity's session", err, codes.Unauthenticated, "this session was ended")
	_, err = admin.DeleteOidcBinding(ctx, &loomv1.DeleteOidcBindingRequest{Name: "users/dana/oidcBinding"})
	wantAuthCode(t, "a second release", err, codes.NotFound, "no OIDC binding")
	clock.Advance(time.Second)
	danaAgain, err := anon.CreateToken(ctx, &loomv1.CreateTokenRequest{OidcIdToken: idTokenOf("loom", "id-999", "dana")})
	if err != nil {
		t.Fatalf("a sign-in as dana after the release: %v", err)
	}
	if b, err := admin.GetOidcBinding(ctx, &loomv1.GetOidcBindingRequest{Name: "users/dana/oidcBinding"}); err != nil || b.GetSubject() != "id-999" {
		t.Fatalf("dana's binding after the release and a new sign-in: %v, %v", b, err)
	}

	// Made a cluster administrator later, dana's sign-in binding no longer
	// signs her in: her identity must be linked, and only an API key links
	// (a token, even the OIDC sign-in's own, proves no more than it).
	if _, err := admin.SetMember(ctx, &loomv1.SetMemberRequest{Parent: "global", User: "dana", Role: "cluster-admin"}); err != nil {
		t.Fatal(err)
	}
	_, err = anon.CreateToken(ctx, &loomv1.CreateTokenRequest{OidcIdToken: idTokenOf("loom", "id-999", "dana")})
	wantAuthCode(t, "a promoted user's sign-in binding", err, codes.PermissionDenied, "bound by an OIDC sign-in, not linked")
	_, err = authClient(h, t, danaAgain.GetAccessToken()).CreateToken(ctx, &loomv1.CreateTokenRequest{OidcIdToken: idTokenOf("loom", "id-999", "dana")})
	wantAuthCode(t, "a link with an OIDC-made token", err, codes.PermissionDenied, "not linked")
	danaKey := newKey(t, ctx, h, "dana", 0)
	if _, err := authClient(h, t, danaKey.GetSecret()).CreateToken(ctx, &loomv1.CreateTokenRequest{OidcIdToken: idTokenOf("loom", "id-999", "dana")}); err != nil {
		t.Fatalf("dana links with her API key: %v", err)
	}
	if tok, err := anon.CreateToken(ctx, &loomv1.CreateTokenRequest{OidcIdToken: idTokenOf("loom", "id-999", "dana")}); err != nil || !tok.GetPrincipal().GetClusterAdmin() {
		t.Fatalf("the linked administrator dana signs in: %v, %v", tok, err)
	}

	stale := idToken("loom", "dana")
	clock.Advance(6 * time.Minute)
	_, err = anon.CreateToken(ctx, &loomv1.CreateTokenRequest{OidcIdToken: stale})
	wantAuthCode(t, "expired ID token", err, codes.Unauthenticated, "expired")
}

func TestAuthOff(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *Config) { c.Auth = AuthConfig{Mode: "off"} })
	ctx := testkit.Context(t, wait)
	me, err := authClient(h, t, "").WhoAmI(ctx, &loomv1.WhoAmIRequest{})
	if err != nil || me.GetName() != "users/dev" || !me.GetClusterAdmin() || me.GetHow() != "dev" {
		t.Fatalf("whoami with authentication off: %v %v", me, err)
	}
	// And the rest of the API works as before.
	if _, err := h.jobs().SubmitJob(ctx, validJob()); err != nil {
		t.Fatal(err)
	}
	// users/dev holds no stored membership, and manages members all the same.
	if _, err := authClient(h, t, "").SetMember(ctx, &loomv1.SetMemberRequest{Parent: project, User: "zed", Role: "viewer"}); err != nil {
		t.Fatalf("SetMember with authentication off: %v", err)
	}

	// Every caller is an administrator, so the REST port answers only its
	// own site: a web page's cross-site request, a name rebound to this
	// address, and a body that is not JSON (what a page may send without
	// asking) are refused before anything is decoded; the port's own
	// clients are not.
	body := `{"cluster":"` + cluster1 + `","script":"echo pwned","node_count":2,"gpus_per_node":8}`
	rest := func(mutate func(*http.Request)) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.restBase+"/v1/"+project+"/jobs", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		mutate(req)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for name, tc := range map[string]struct {
		mutate func(*http.Request)
		says   string
	}{
		"a text/plain body":   {func(r *http.Request) { r.Header.Set("Content-Type", "text/plain") }, `must be sent as application/json, not \"text/plain\"`},
		"another site's page": {func(r *http.Request) { r.Header.Set("Origin", "https://evil.example") }, `Origin \"https://evil.example\" is another site`},
		"a rebound name":      {func(r *http.Request) { r.Host = "rebind.evil.example" }, `Host \"rebind.evil.example\" is not an IP address or localhost`},
		"a cross-site fetch":  {func(r *http.Request) { r.Header.Set("Sec-Fetch-Site", "cross-site") }, `Sec-Fetch-Site \"cross-site\"`},
	} {
		if code, got := rest(tc.mutate); code != http.StatusForbidden || !strings.Contains(got, tc.says) {
			t.Errorf("%s: HTTP %d %s; want 403 saying %s", name, code, got, tc.says)
		}
	}
	if code, got := rest(func(r *http.Request) { r.Header.Set("Origin", "http://"+r.Host) }); code != http.StatusOK {
		t.Errorf("a same-site JSON submit: HTTP %d %s; want 200", code, got)
	}
	pwned := func(e envelope.Event) bool {
		c, ok := e.Payload.(*eventsv1.SubmitJob)
		return ok && c.GetJob().GetScript() == "echo pwned"
	}
	testkit.WaitEvent(t, h.broker, topics.JobCommands, wait, pwned)
	// The refused requests came first, on the same key: had one passed,
	// its command would be on the topic before this one.
	n := 0
	for _, e := range testkit.Events(t, h.broker, topics.JobCommands) {
		if pwned(e) {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d commands of the script, want 1 (the allowed request's)", n)
	}
}

// readFile0600 reads a key file the gateway wrote, which must be 0600.
func readFile0600(path string) (string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	if st.Mode().Perm() != 0o600 {
		return "", fmt.Errorf("%s has mode %v, want 0600", path, st.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	return string(b), err
}

// TestAuthRemovedNodesIdentityIsRevoked: once the provisioner removed a node
// (and revoked its identities: auth.RevokedNodesKey), the node's identity is
// refused at once, though this gateway has its token cached, and cannot be
// renewed; the node made again with the same name registers, named after
// the revocation even where the provisioner's clock is ahead of the
// gateway's, and its identity works and renews.
func TestAuthRemovedNodesIdentityIsRevoked(t *testing.T) {
	t.Parallel()
	h, clock := fakeClockHarness(t)
	ctx := testkit.Context(t, wait)
	register, pub := nodeRegistrar(ctx, t, h, clock)
	before := register()
	old := authClient(h, t, before.GetAccessToken())
	if _, err := old.WhoAmI(ctx, &loomv1.WhoAmIRequest{}); err != nil {
		t.Fatalf("the identity before the removal: %v", err)
	}
	// The provisioner removes the node; its clock is a minute ahead.
	rev := auth.RevocationFor(time.Now().Add(time.Minute), "", time.Hour)
	b, err := auth.EncodeNodeRevocation(rev)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.redis.HSet(ctx, auth.RevokedNodesKey, "gpu-0001", b).Err(); err != nil {
		t.Fatal(err)
	}
	_, err = old.WhoAmI(ctx, &loomv1.WhoAmIRequest{})
	wantAuthCode(t, "the removed node's identity (cached)", err, codes.Unauthenticated, "was removed")
	_, err = old.RenewNodeIdentity(ctx, &loomv1.RenewNodeIdentityRequest{PublicKey: pub})
	wantAuthCode(t, "the removed node's identity renews", err, codes.Unauthenticated, "was removed")

	// The node made again with the same name registers.
	after := register()
	if reg := auth.CertRegistration(after.GetCertificate()); rev.Revokes(reg) {
		t.Fatalf("the new registration %q falls under the revocation up to %q", reg, rev.Before)
	}
	node := authClient(h, t, after.GetAccessToken())
	if me, err := node.WhoAmI(ctx, &loomv1.WhoAmIRequest{}); err != nil || me.GetName() != "nodes/gpu-0001" {
		t.Fatalf("the node made again: %v, %v", me, err)
	}
	renewed, err := node.RenewNodeIdentity(ctx, &loomv1.RenewNodeIdentityRequest{PublicKey: pub})
	if err != nil {
		t.Fatalf("the node made again renews: %v", err)
	}
	if _, err := authClient(h, t, renewed.GetAccessToken()).WhoAmI(ctx, &loomv1.WhoAmIRequest{}); err != nil {
		t.Fatalf("the renewed identity: %v", err)
	}
	_, err = old.WhoAmI(ctx, &loomv1.WhoAmIRequest{})
	wantAuthCode(t, "the removed node's identity, after the new one registered", err, codes.Unauthenticated, "")
}
