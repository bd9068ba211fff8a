package fakegw

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/auth"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// Auth is a fake AuthService (set Gateway.Auth to serve it). It checks the
// bearer credential of every call it gets, as the gateway does: a call
// whose credential it does not know is Unauthenticated, and what a call
// does is done as the principal its credential proves. Tests fill the
// exported fields before the calls.
type Auth struct {
	loomv1.UnimplementedAuthServiceServer

	// Principals maps each credential it accepts (API keys, tokens) to
	// whom it proves. CreateToken and CreateApiKey add theirs.
	Principals map[string]*loomv1.Principal
	// LoginKey is the login daemon's key: the one credential that may
	// CreateToken for another user (CreateTokenRequest.user).
	LoginKey string
	// OIDC maps the ID tokens it accepts to their users.
	OIDC map[string]string
	// Keys are ListApiKeys' data (names "users/{user}/keys/{id}", without
	// secrets); CreateApiKey appends, RevokeApiKey sets revoke_time.
	Keys []*loomv1.ApiKey
	// Members are ListMembers' data, kept sorted by parent then user;
	// SetMember adds, changes and (role "") removes.
	Members []*loomv1.Member
	// OidcBindings are GetOidcBinding's answers by user: the caller's
	// ("users/-") or, for a cluster administrator, anyone's; NotFound for
	// a user with none.
	OidcBindings map[string]*loomv1.OidcBinding
	// TokenTTL is the access tokens' lifetime (default 30 minutes).
	TokenTTL time.Duration
	// Now is the clock (default TestNow).
	Now func() time.Time

	mu       sync.Mutex
	n        int
	refresh  map[string]*loomv1.Principal // refresh tokens, each used once
	keyCreds map[string]string            // key name -> whole key
	revoked  map[string]string            // whole key -> its id, once revoked
}

// Bearers returns the credential every call g was sent carried ("" for
// none), in the order they came: what a test checks the client sent.
func (g *Gateway) Bearers() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.bearers...)
}

// recordBearer is the server interceptor that records each call's bearer.
func (g *Gateway) recordBearer(ctx context.Context) {
	cred := ""
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get(auth.MetadataKey); len(v) > 0 {
			cred = strings.TrimPrefix(strings.Join(v, ","), "Bearer ")
		}
	}
	g.mu.Lock()
	g.bearers = append(g.bearers, cred)
	g.mu.Unlock()
}

// unaryBearer records each call's bearer, and AuthService's requests
// (the other services' handlers record their own) for Requests.
func (g *Gateway) unaryBearer(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	g.recordBearer(ctx)
	if m, ok := req.(proto.Message); ok && strings.HasPrefix(info.FullMethod, "/"+loomv1.AuthService_ServiceDesc.ServiceName+"/") {
		g.mu.Lock()
		g.record(m)
		g.mu.Unlock()
	}
	return h(ctx, req)
}

func (g *Gateway) streamBearer(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	g.recordBearer(ss.Context())
	return h(srv, ss)
}

func (a *Auth) now() time.Time {
	if a.Now != nil {
		return a.Now()
	}
	return TestNow
}

// caller is the principal the call's credential proves; "" credential is
// anonymous (nil, nil).
func (a *Auth) caller(ctx context.Context) (string, *loomv1.Principal, error) {
	cred, err := auth.CredentialFromContext(ctx)
	if err != nil {
		return "", nil, status.Error(codes.Unauthenticated, err.Error())
	}
	if cred == "" {
		return "", nil, nil
	}
	p := a.Principals[cred]
	if id, ok := a.revoked[cred]; ok && p == nil {
		// In the gateway's words (services/gateway/internal/authn), the
		// kind first, as libs/errs wraps it.
		return cred, nil, status.Errorf(codes.Unauthenticated, "unauthenticated: API key %s was revoked; create a new one with `loom auth keys create`", id)
	}
	if p == nil {
		return cred, nil, status.Error(codes.Unauthenticated, "unknown credential")
	}
	return cred, p, nil
}

// authenticated is caller for calls that need a principal.
func (a *Auth) authenticated(ctx context.Context) (*loomv1.Principal, error) {
	_, p, err := a.caller(ctx)
	if err == nil && p == nil {
		// The gateway's words (services/gateway/internal/app/auth.go),
		// which name `loom auth login` for any client.
		err = status.Error(codes.Unauthenticated, "unauthenticated: this call needs a credential; log in with `loom auth login` or set LOOM_TOKEN")
	}
	return p, err
}

// UserPrincipal is the principal of a user who is a member of no project.
func UserPrincipal(user string) *loomv1.Principal {
	return &loomv1.Principal{Name: auth.UserName(user), Kind: loomv1.PrincipalKind_PRINCIPAL_KIND_USER, User: user, How: "token"}
}

// CreateToken issues "at-N" access tokens (and "rt-N" refresh tokens for
// OIDC and refresh logins) for the caller, a refresh token's principal,
// an OIDC user, or (the login key only) another user.
func (a *Auth) CreateToken(ctx context.Context, r *loomv1.CreateTokenRequest) (*loomv1.Token, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	cred, p, err := a.caller(ctx)
	if err != nil {
		return nil, err
	}
	withRefresh := false
	switch {
	case r.GetRefreshToken() != "":
		if p = a.refresh[r.GetRefreshToken()]; p == nil {
			return nil, status.Error(codes.Unauthenticated, "refresh token unknown or used")
		}
		delete(a.refresh, r.GetRefreshToken())
		withRefresh = true
	case r.GetOidcIdToken() != "":
		user, ok := a.OIDC[r.GetOidcIdToken()]
		if !ok {
			return nil, status.Error(codes.Unauthenticated, "invalid ID token")
		}
		p, withRefresh = UserPrincipal(user), true
		p.How = "oidc"
	case r.GetUser() != "":
		if cred == "" || cred != a.LoginKey {
			return nil, status.Error(codes.PermissionDenied, "only the login daemon may get a token for another user")
		}
		p = UserPrincipal(r.GetUser())
	case p == nil:
		return nil, status.Error(codes.Unauthenticated, "this call needs a credential")
	}
	ttl := a.TokenTTL
	if ttl <= 0 {
		ttl = auth.DefaultTokenLifetime
	}
	a.n++
	tok := &loomv1.Token{AccessToken: fmt.Sprintf("at-%d", a.n), ExpireTime: timestamppb.New(a.now().Add(ttl)),
		Principal: proto.Clone(p).(*loomv1.Principal)}
	tp := proto.Clone(p).(*loomv1.Principal)
	tp.How = "token"
	if a.Principals == nil {
		a.Principals = map[string]*loomv1.Principal{}
	}
	a.Principals[tok.AccessToken] = tp
	if withRefresh {
		tok.RefreshToken = fmt.Sprintf("rt-%d", a.n)
		if a.refresh == nil {
			a.refresh = map[string]*loomv1.Principal{}
		}
		a.refresh[tok.RefreshToken] = tp
	}
	return tok, nil
}

// WhoAmI answers the caller's principal.
func (a *Auth) WhoAmI(ctx context.Context, _ *loomv1.WhoAmIRequest) (*loomv1.Principal, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.authenticated(ctx)
}

// GetOidcBinding answers the named user's OIDC binding ("users/-": the
// caller's), with keyOwner's rule on who may read it.
func (a *Auth) GetOidcBinding(ctx context.Context, r *loomv1.GetOidcBindingRequest) (*loomv1.OidcBinding, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	p, err := a.authenticated(ctx)
	if err != nil {
		return nil, err
	}
	user, err := keyOwner(strings.TrimSuffix(r.GetName(), "/oidcBinding"), p)
	if err != nil {
		return nil, err
	}
	if b := a.OidcBindings[user]; b != nil {
		return b, nil
	}
	return nil, status.Errorf(codes.NotFound, "users/%s has no OIDC binding", user)
}

// keyOwner is the user of parent "users/{user}" ("users/-": the caller);
// only the user and cluster administrators may act on a user's keys.
func keyOwner(parent string, p *loomv1.Principal) (string, error) {
	user, ok := strings.CutPrefix(parent, "users/")
	if !ok || user == "" || strings.Contains(user, "/") {
		return "", status.Errorf(codes.InvalidArgument, "parent: want users/{user}, got %q", parent)
	}
	if user == "-" {
		user = p.GetUser()
	}
	if user != p.GetUser() && !p.GetClusterAdmin() {
		return "", status.Errorf(codes.PermissionDenied, "%s may not manage the keys of %s", p.GetName(), user)
	}
	return user, nil
}

// CreateApiKey makes a key for the parent user; the answer has its secret.
func (a *Auth) CreateApiKey(ctx context.Context, r *loomv1.CreateApiKeyRequest) (*loomv1.ApiKey, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	p, err := a.authenticated(ctx)
	if err != nil {
		return nil, err
	}
	user, err := keyOwner(r.GetParent(), p)
	if err != nil {
		return nil, err
	}
	id, whole, err := auth.NewAPIKey()
	if err != nil {
		return nil, err
	}
	k := &loomv1.ApiKey{Name: "users/" + user + "/keys/" + id, KeyId: id, DisplayName: r.GetKey().GetDisplayName(),
		CreateTime: timestamppb.New(a.now()), Creator: p.GetName()}
	if r.GetTtlSeconds() > 0 {
		k.ExpireTime = timestamppb.New(a.now().Add(time.Duration(r.GetTtlSeconds()) * time.Second))
	}
	a.Keys = append(a.Keys, k)
	kp := UserPrincipal(user)
	kp.How = "api-key"
	if a.Principals == nil {
		a.Principals = map[string]*loomv1.Principal{}
	}
	a.Principals[whole] = kp
	if a.keyCreds == nil {
		a.keyCreds = map[string]string{}
	}
	a.keyCreds[k.Name] = whole
	out := proto.Clone(k).(*loomv1.ApiKey)
	out.Secret = whole
	return out, nil
}

// ListApiKeys answers the parent user's keys, unpaged, without secrets.
func (a *Auth) ListApiKeys(ctx context.Context, r *loomv1.ListApiKeysRequest) (*loomv1.ListApiKeysResponse, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	p, err := a.authenticated(ctx)
	if err != nil {
		return nil, err
	}
	user, err := keyOwner(r.GetParent(), p)
	if err != nil {
		return nil, err
	}
	resp := &loomv1.ListApiKeysResponse{}
	for _, k := range a.Keys {
		if strings.HasPrefix(k.GetName(), "users/"+user+"/keys/") {
			resp.Keys = append(resp.Keys, proto.Clone(k).(*loomv1.ApiKey))
		}
	}
	return resp, nil
}

// RevokeApiKey ends the key of that name: it stops authenticating.
func (a *Auth) RevokeApiKey(ctx context.Context, r *loomv1.RevokeApiKeyRequest) (*loomv1.ApiKey, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	p, err := a.authenticated(ctx)
	if err != nil {
		return nil, err
	}
	parent, id, ok := strings.Cut(strings.TrimPrefix(r.GetName(), "users/"), "/keys/")
	if !ok {
		return nil, status.Errorf(codes.InvalidArgument, "name: want users/{user}/keys/{key}, got %q", r.GetName())
	}
	user, err := keyOwner("users/"+parent, p)
	if err != nil {
		return nil, err
	}
	name := "users/" + user + "/keys/" + id
	for _, k := range a.Keys {
		if k.GetName() == name {
			if k.RevokeTime == nil {
				k.RevokeTime = timestamppb.New(a.now())
			}
			delete(a.Principals, a.keyCreds[name])
			if a.revoked == nil {
				a.revoked = map[string]string{}
			}
			a.revoked[a.keyCreds[name]] = id
			return proto.Clone(k).(*loomv1.ApiKey), nil
		}
	}
	return nil, status.Errorf(codes.NotFound, "key %s not found", name)
}

// SetMember sets (role "": removes) user's role under parent, as the
// gateway does for a cluster administrator; any other caller is refused.
func (a *Auth) SetMember(ctx context.Context, r *loomv1.SetMemberRequest) (*loomv1.Member, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	p, err := a.authenticated(ctx)
	if err != nil {
		return nil, err
	}
	if !p.GetClusterAdmin() {
		return nil, status.Errorf(codes.PermissionDenied, "Access/permission denied: %s may not set members", p.GetName())
	}
	switch r.GetRole() {
	case "", "viewer", "user", "admin", "cluster-admin":
	default:
		return nil, status.Errorf(codes.InvalidArgument, "role: unknown role %q (want viewer, user or admin)", r.GetRole())
	}
	m := &loomv1.Member{Parent: r.GetParent(), User: r.GetUser(), Role: r.GetRole()}
	a.Members = slices.DeleteFunc(a.Members, func(o *loomv1.Member) bool { return o.GetParent() == m.GetParent() && o.GetUser() == m.GetUser() })
	if m.GetRole() != "" {
		a.Members = append(a.Members, m)
		slices.SortFunc(a.Members, func(x, y *loomv1.Member) int {
			return cmp.Or(strings.Compare(x.GetParent(), y.GetParent()), strings.Compare(x.GetUser(), y.GetUser()))
		})
	}
	return m, nil
}

// ListMembers lists parent's members, in one page.
func (a *Auth) ListMembers(ctx context.Context, r *loomv1.ListMembersRequest) (*loomv1.ListMembersResponse, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, err := a.authenticated(ctx); err != nil {
		return nil, err
	}
	out := &loomv1.ListMembersResponse{}
	for _, m := range a.Members {
		if m.GetParent() == r.GetParent() {
			out.Members = append(out.Members, m)
		}
	}
	return out, nil
}
