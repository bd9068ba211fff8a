package app

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/jonboulle/clockwork"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/auth"
	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/osuser"
	"github.com/loom-ml/loom/libs/paging"
	"github.com/loom-ml/loom/libs/resname"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/gateway/internal/adapters"
	"github.com/loom-ml/loom/services/gateway/internal/authn"
)

// Limits of the AuthService's requests.
const (
	// MaxKeysPerOwner bounds the API keys one user or service holds (live
	// ones and those revoked or expired in the last KeyRetention).
	MaxKeysPerOwner = 100
	// KeyRetention is how long a revoked or expired key stays listed,
	// from when it first ended (revoked or expired, the earlier).
	KeyRetention = 7 * 24 * time.Hour
	// MaxKeyTTL is the longest ttl_seconds of an API key.
	MaxKeyTTL = 10 * 366 * 24 * time.Hour
	// MaxDisplayNameBytes bounds an API key's display_name.
	MaxDisplayNameBytes = 128
	// MaxMembers bounds the members of one project (or of global).
	MaxMembers = 10000
	// LoginService is the service principal that may get a token for any
	// user: the login daemon, which established the user's OS identity.
	LoginService = "login"
)

// AuthOptions configure the AuthService.
type AuthOptions struct {
	Store *adapters.AuthStore
	// Authn is told of revocations and membership changes, so that they
	// apply at once through this instance.
	Authn *authn.Authenticator
	// Issuer mints and verifies access and refresh tokens.
	Issuer *auth.Issuer
	// Bootstrap verifies node bootstrap tokens; nil without a service key
	// (RegisterNode then refuses).
	Bootstrap *auth.Issuer
	// ServiceKey signs node certificates; nil without a service key.
	ServiceKey ed25519.PrivateKey
	// OIDC, when its Issuer is set, accepts ID tokens of that issuer.
	OIDC OIDCConfig
	// Owners are the provisioner (node lookups) and scheduler (job lookups).
	Owners *adapters.Owners
	Clock  clockwork.Clock
	Log    *slog.Logger
}

// Auth is the AuthService: tokens, API keys, members and node identities.
type Auth struct {
	o    AuthOptions
	oidc *oidcVerifier
}

// NewAuth returns the AuthService.
func NewAuth(o AuthOptions) *Auth {
	if o.Clock == nil {
		o.Clock = clockwork.NewRealClock()
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	a := &Auth{o: o}
	if o.OIDC.Issuer != "" {
		a.oidc = newOIDCVerifier(o.OIDC, o.Clock)
	}
	return a
}

func (a *Auth) now() time.Time { return a.o.Clock.Now().UTC() }

// caller is the call's principal; Unauthenticated when it has none.
func caller(ctx context.Context) (*auth.Principal, error) {
	p, ok := auth.FromContext(ctx)
	if !ok {
		return nil, fmt.Errorf("%w: this call needs a credential; log in with `loom auth login` or set LOOM_TOKEN", errs.Unauthenticated)
	}
	return p, nil
}

// PrincipalProto is p as the API shows it.
func PrincipalProto(p *auth.Principal) *loomv1.Principal {
	out := &loomv1.Principal{Name: p.Name, Kind: loomv1.PrincipalKind(p.Kind), User: p.User, ClusterAdmin: p.ClusterAdmin, How: p.How}
	if len(p.Roles) > 0 {
		out.Roles = make(map[string]string, len(p.Roles))
		for proj, r := range p.Roles {
			out.Roles["projects/"+proj] = r.String() // the project's resource name, as the API names projects
		}
	}
	return out
}

// WhoAmI describes the caller; with authentication off its how is "dev".
func (a *Auth) WhoAmI(ctx context.Context, _ *loomv1.WhoAmIRequest) (*loomv1.Principal, error) {
	p, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	return PrincipalProto(p), nil
}

// ---- tokens ----

// CreateToken issues an access token (and, for users, a refresh token) for
// what the request names; see the proto for the cases.
func (a *Auth) CreateToken(ctx context.Context, req *loomv1.CreateTokenRequest) (*loomv1.Token, error) {
	var v errs.Validator
	set := 0
	for _, f := range []struct{ name, val string }{
		{"refresh_token", req.GetRefreshToken()}, {"oidc_id_token", req.GetOidcIdToken()}, {"user", req.GetUser()}, {"job", req.GetJob()},
	} {
		if f.val != "" {
			set++
		}
	}
	if set > 1 {
		v.Add("refresh_token", "set at most one of refresh_token, oidc_id_token, user and job")
	}
	v.Check(len(req.GetRefreshToken()) <= auth.MaxTokenBytes, "refresh_token", "%d bytes, longer than the limit of %d", len(req.GetRefreshToken()), auth.MaxTokenBytes)
	v.Check(len(req.GetOidcIdToken()) <= maxOIDCTokenBytes, "oidc_id_token", "%d bytes, longer than the limit of %d", len(req.GetOidcIdToken()), maxOIDCTokenBytes)
	if u := req.GetUser(); u != "" {
		if err := auth.CheckUserName(u); err != nil {
			v.Add("user", "%v", err)
		}
	}
	var job resname.Job
	if req.GetJob() != "" {
		var err error
		if job, err = resname.ParseJob(req.GetJob()); err != nil {
			v.Add("job", "%v", err)
		}
	}
	ttl := auth.DefaultTokenLifetime
	switch l := req.GetLifetimeSeconds(); {
	case l < 0:
		v.Add("lifetime_seconds", "must not be negative, got %d", l)
	case l > int64(auth.DefaultTokenLifetime/time.Second):
		v.Add("lifetime_seconds", "%d is longer than the default lifetime of %d; it may only shorten it", l, int64(auth.DefaultTokenLifetime/time.Second))
	case l > 0:
		ttl = time.Duration(l) * time.Second
	}
	if err := v.Err(); err != nil {
		return nil, err
	}
	switch {
	case req.GetRefreshToken() != "":
		return a.refresh(ctx, req.GetRefreshToken(), ttl)
	case req.GetOidcIdToken() != "":
		if a.oidc == nil {
			return nil, fmt.Errorf("%w: this gateway accepts no OIDC ID tokens (it has no -oidc-issuer)", errs.FailedPrecondition)
		}
		user, id, err := a.oidc.verify(ctx, req.GetOidcIdToken())
		if err != nil {
			return nil, err
		}
		if err := a.bindOIDC(ctx, user, id); err != nil {
			return nil, err
		}
		return a.userToken(ctx, user, "oidc", "", ttl)
	}
	p, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	switch {
	case req.GetUser() != "":
		if p.Kind != auth.KindService || p.Name != auth.ServiceName(LoginService) {
			return nil, fmt.Errorf("%w: only the login service (%s) may get a token for another user; use `loom auth login`", errs.PermissionDenied, auth.ServiceName(LoginService))
		}
		// The session the login service starts for a user carries the
		// login key's id: revoking that key ends every session it made.
		return a.userToken(ctx, req.GetUser(), "token", p.KeyID, ttl)
	case req.GetJob() != "":
		return a.workloadToken(ctx, p, job, ttl)
	}
	switch p.Kind {
	case auth.KindUser:
		// A session started from an API key (or from a token of one)
		// carries the key's id: revoking the key ends it.
		return a.userToken(ctx, p.User, "token", p.KeyID, ttl)
	case auth.KindService:
		tok, exp, err := a.o.Issuer.Issue(auth.Claims{Use: auth.UseAccess, Kind: p.Kind.String(), Key: p.KeyID, RegisteredClaims: auth.ForSubject(p.Name)}, ttl)
		if err != nil {
			return nil, err
		}
		return &loomv1.Token{AccessToken: tok, ExpireTime: timestamppb.New(exp), Principal: PrincipalProto(p)}, nil
	}
	return nil, fmt.Errorf("%w: a %s principal gets its tokens otherwise (nodes: RenewNodeIdentity; workloads: from their node)", errs.PermissionDenied, p.Kind)
}

// bindOIDC lets identity id (an ID token's issuer and subject) sign in as
// user only if user is bound to it, binding them at the first sign-in. The
// user claim alone is not enough: preferred_username, the default, is
// one a provider may let its holder choose, and two identities may claim
// the same name. root (by name or uid 0) and cluster administrators sign
// in only through a linked binding: one made by a caller authenticated
// as the user with an API key presenting the ID token, so that a name
// chosen at the provider cannot take over the cluster, whether the claim
// came before the user was made an administrator or after. A binding is
// released by a cluster administrator (DeleteOidcBinding).
func (a *Auth) bindOIDC(ctx context.Context, user string, id adapters.OIDCBinding) error {
	held, err := a.o.Store.OIDCBindingOf(ctx, user)
	if err != nil {
		return err
	}
	// Linking: the caller proves the account by an API key (a token, even
	// one an OIDC sign-in gave, proves no more than that sign-in).
	p, _ := caller(ctx)
	linking := p != nil && p.Kind == auth.KindUser && p.User == user && p.How == "api-key"
	_, admin, err := a.o.Store.Roles(ctx, user)
	if err != nil {
		return err
	}
	privileged := admin || user == "root"
	if acct, err := osuser.Lookup(user); err == nil && acct.Root() {
		privileged = true
	}
	link := fmt.Sprintf("sign in as %s with an API key and present the ID token once (loom auth login --oidc-token-file FILE --link)", user)
	switch {
	case held == nil && privileged && !linking:
		return fmt.Errorf("%w: %s may not be claimed by an OIDC sign-in until it is linked to its identity: %s", errs.PermissionDenied, user, link)
	case held == nil:
		id.CreateTime, id.Linked = a.now(), linking
		if held, err = a.o.Store.BindOIDC(ctx, user, id); err != nil {
			return err
		}
	}
	if held.Issuer != id.Issuer || held.Subject != id.Subject {
		// Whose identity it is bound to is not told: anyone holding an ID
		// token for the name would learn it.
		return fmt.Errorf("%w: %s is bound to another identity of the OIDC provider, and this one may not sign in as %s; a cluster administrator releases the binding with `loom auth oidc-binding release %s`",
			errs.PermissionDenied, user, user, user)
	}
	if privileged && !held.Linked {
		if !linking {
			return fmt.Errorf("%w: %s was bound by an OIDC sign-in, not linked, and administrators sign in only through a linked identity: %s", errs.PermissionDenied, user, link)
		}
		held.Linked = true
		return a.o.Store.PutOIDC(ctx, user, *held)
	}
	return nil
}

// GetOidcBinding returns the identity bound to a user (the user or a
// cluster administrator; authz's SelfOrAdmin lets project admins through,
// who are refused here as NotFound).
func (a *Auth) GetOidcBinding(ctx context.Context, req *loomv1.GetOidcBindingRequest) (*loomv1.OidcBinding, error) {
	user, err := a.oidcBindingUser(ctx, req.GetName())
	if err != nil {
		return nil, err
	}
	b, err := a.o.Store.OIDCBindingOf(ctx, user)
	if err != nil {
		return nil, err
	}
	if b == nil {
		return nil, fmt.Errorf("%s has no OIDC binding: the first OIDC sign-in as them makes it: %w", auth.UserName(user), errs.NotFound)
	}
	return oidcBindingProto(user, b), nil
}

// DeleteOidcBinding releases a user's binding (cluster administrators).
func (a *Auth) DeleteOidcBinding(ctx context.Context, req *loomv1.DeleteOidcBindingRequest) (*loomv1.OidcBinding, error) {
	user, err := a.oidcBindingUser(ctx, req.GetName())
	if err != nil {
		return nil, err
	}
	if p, _ := caller(ctx); p == nil || !p.ClusterAdmin {
		return nil, fmt.Errorf("%w: only a cluster administrator releases an OIDC binding", errs.PermissionDenied)
	}
	b, err := a.o.Store.ReleaseOIDC(ctx, user, a.now())
	if err != nil {
		return nil, err
	}
	if b == nil {
		return nil, fmt.Errorf("%s has no OIDC binding: %w", auth.UserName(user), errs.NotFound)
	}
	return oidcBindingProto(user, b), nil
}

// oidcBindingUser parses "users/{user}/oidcBinding" ("users/-": the
// caller) and refuses a caller who is neither that user nor a cluster
// administrator (NotFound, so that bindings cannot be probed).
func (a *Auth) oidcBindingUser(ctx context.Context, name string) (string, error) {
	p, err := caller(ctx)
	if err != nil {
		return "", err
	}
	parent, ok := strings.CutSuffix(name, "/oidcBinding")
	if !ok {
		return "", errs.Invalid("name", "want users/{user}/oidcBinding, got %q", clipText(name))
	}
	owner, err := parseOwner(p, "name", parent)
	if err != nil {
		return "", err
	}
	user, ok := strings.CutPrefix(owner, "users/")
	if !ok {
		return "", errs.Invalid("name", "want users/{user}/oidcBinding, got %q", clipText(name))
	}
	if !p.ClusterAdmin && (p.Kind != auth.KindUser || p.User != user) {
		return "", errs.Hide(fmt.Errorf("%s: %w", name, errs.NotFound))
	}
	return user, nil
}

// oidcBindingProto is b as the API answers it.
func oidcBindingProto(user string, b *adapters.OIDCBinding) *loomv1.OidcBinding {
	return &loomv1.OidcBinding{Name: auth.UserName(user) + "/oidcBinding", Issuer: b.Issuer, Subject: b.Subject,
		CreateTime: timestamppb.New(b.CreateTime)}
}

// userToken issues an access token and a refresh token for user.
func (a *Auth) userToken(ctx context.Context, user, how, keyID string, ttl time.Duration) (*loomv1.Token, error) {
	claims := auth.Claims{Use: auth.UseAccess, Kind: auth.KindUser.String(), User: user, Key: keyID, RegisteredClaims: auth.ForSubject(auth.UserName(user))}
	tok, exp, err := a.o.Issuer.Issue(claims, ttl)
	if err != nil {
		return nil, err
	}
	claims.Use = auth.UseRefresh
	rtok, rexp, err := a.o.Issuer.Issue(claims, auth.DefaultRefreshLifetime)
	if err != nil {
		return nil, err
	}
	rc, err := a.o.Issuer.Verify(rtok, auth.UseRefresh)
	if err != nil {
		return nil, err
	}
	if err := a.o.Store.PutRefresh(ctx, rc.ID, rc.Subject, rexp, a.now()); err != nil {
		return nil, err
	}
	roles, admin, err := a.o.Store.Roles(ctx, user)
	if err != nil {
		return nil, err
	}
	p := &auth.Principal{Name: auth.UserName(user), Kind: auth.KindUser, User: user, Roles: roles, ClusterAdmin: admin, How: how}
	return &loomv1.Token{AccessToken: tok, ExpireTime: timestamppb.New(exp), RefreshToken: rtok, Principal: PrincipalProto(p)}, nil
}

// RevokeToken uses up a refresh token without issuing anything (a
// sign-out). A token that does not verify (past its time too) is
// Unauthenticated; one already used or revoked is answered as done.
func (a *Auth) RevokeToken(ctx context.Context, req *loomv1.RevokeTokenRequest) (*loomv1.RevokeTokenResponse, error) {
	rtok := req.GetRefreshToken()
	if rtok == "" {
		return nil, errs.Invalid("refresh_token", "required: the refresh token to end")
	}
	if len(rtok) > auth.MaxTokenBytes {
		return nil, errs.Invalid("refresh_token", "%d bytes, longer than the limit of %d", len(rtok), auth.MaxTokenBytes)
	}
	c, err := a.o.Issuer.Verify(rtok, auth.UseRefresh)
	if err != nil {
		return nil, err
	}
	if _, err := a.o.Store.TakeRefresh(ctx, c.ID); err != nil {
		return nil, err
	}
	return &loomv1.RevokeTokenResponse{}, nil
}

// refresh uses up a refresh token and issues a new pair for its user.
func (a *Auth) refresh(ctx context.Context, rtok string, ttl time.Duration) (*loomv1.Token, error) {
	c, err := a.o.Issuer.Verify(rtok, auth.UseRefresh)
	if err != nil {
		return nil, err
	}
	if c.Kind != auth.KindUser.String() || c.Subject != auth.UserName(c.User) || auth.CheckUserName(c.User) != nil {
		return nil, fmt.Errorf("%w: refresh token is not a user's", errs.Unauthenticated)
	}
	subject, err := a.o.Store.TakeRefresh(ctx, c.ID)
	if err != nil {
		return nil, err
	}
	if subject != c.Subject {
		return nil, fmt.Errorf("%w: refresh token was already used (each is good once); log in again with `loom auth login`", errs.Unauthenticated)
	}
	// A session ended since (its OIDC binding released) refreshes no more.
	nb, err := a.o.Store.RefreshNotBefore(ctx, c.User)
	if err != nil {
		return nil, err
	}
	if c.IssuedAt != nil && c.IssuedAt.Time.Before(nb) {
		return nil, fmt.Errorf("%w: this session was ended by an administrator; log in again with `loom auth login`", errs.Unauthenticated)
	}
	// A session started from an API key lives only while the key does.
	if c.Key != "" {
		if err := authn.CheckSessionKey(ctx, a.o.Store, c.Key, a.now()); err != nil {
			return nil, err
		}
	}
	return a.userToken(ctx, c.User, "token", c.Key, ttl)
}

// workloadToken issues the token of job's current attempt to the node
// that runs it.
func (a *Auth) workloadToken(ctx context.Context, p *auth.Principal, job resname.Job, ttl time.Duration) (*loomv1.Token, error) {
	if p.Kind != auth.KindNode {
		return nil, fmt.Errorf("%w: only the node that runs a job gets its workload token", errs.PermissionDenied)
	}
	j, err := a.o.Owners.Jobs.GetJob(ctx, &loomv1.GetJobRequest{Name: job.String()})
	if isNotFound(err) {
		return nil, fmt.Errorf("%w: node %s does not run job %s", errs.PermissionDenied, p.Node, job)
	}
	if err != nil {
		return nil, fmt.Errorf("ask the scheduler for %s: %w", job, err)
	}
	if !runsOn(j, p) {
		return nil, fmt.Errorf("%w: node %s does not run job %s", errs.PermissionDenied, p.Node, job)
	}
	claims := auth.Claims{Use: auth.UseAccess, Kind: auth.KindWorkload.String(), User: j.GetUser(), Project: job.Project, Job: j.GetName(),
		RegisteredClaims: auth.ForSubject(auth.WorkloadName(job.Project, job.ID))}
	tok, exp, err := a.o.Issuer.Issue(claims, ttl)
	if err != nil {
		return nil, err
	}
	wp := &auth.Principal{Name: claims.Subject, Kind: auth.KindWorkload, User: claims.User, Project: job.Project, Job: j.GetName(), How: "token"}
	return &loomv1.Token{AccessToken: tok, ExpireTime: timestamppb.New(exp), Principal: PrincipalProto(wp)}, nil
}

// runsOn reports whether node principal p holds a node of j's current
// attempt: j is in p's cluster, has not ended, and its last run (or, before
// the first run is recorded, its nodes) names p's host.
func runsOn(j *loomv1.Job, p *auth.Principal) bool {
	if j.GetCluster() != p.Cluster || j.GetState().Terminal() {
		return false
	}
	nodes := j.GetNodes()
	if runs := j.GetRuns(); len(runs) > 0 {
		last := runs[len(runs)-1]
		if last.GetState().Terminal() {
			return false
		}
		nodes = last.GetNodes()
	}
	return slices.Contains(nodes, hostOf(p.Node))
}

// hostOf is a node's host name, from a node name or a full node resource name.
func hostOf(node string) string {
	if i := strings.LastIndex(node, "/nodes/"); i >= 0 {
		return node[i+len("/nodes/"):]
	}
	return node
}

// ---- API keys ----

// parseOwner reads parent ("users/{user}", "users/-" the calling user, or
// "services/{service}") as a key owner.
func parseOwner(p *auth.Principal, field, parent string) (owner string, err error) {
	if len(parent) > 128 {
		return "", errs.Invalid(field, "%d bytes, longer than the limit of 128", len(parent))
	}
	if parent == "users/-" {
		if p.Kind != auth.KindUser {
			return "", errs.Invalid(field, "users/- is the calling user, and a %s principal is not one", p.Kind)
		}
		return auth.UserName(p.User), nil
	}
	if u, ok := strings.CutPrefix(parent, "users/"); ok {
		if err := auth.CheckUserName(u); err != nil {
			return "", errs.Invalid(field, "user %v", err)
		}
		return parent, nil
	}
	if s, ok := strings.CutPrefix(parent, "services/"); ok && s == LoginService {
		return parent, nil
	}
	return "", errs.Invalid(field, "want users/{user} or users/- (the caller), got %q", parent)
}

// mayManageKeys refuses a caller that may not manage owner's keys: users
// manage their own; cluster administrators everyone's; a project admin the
// keys of a user whose every membership is in projects the caller
// administers (and who is no cluster administrator), so that a key made by
// a project admin reaches no further than the caller's own projects.
// Another user's keys are NotFound to the rest, so that names cannot be
// probed.
func (a *Auth) mayManageKeys(ctx context.Context, p *auth.Principal, owner string) error {
	if p.ClusterAdmin || (p.Kind == auth.KindUser && owner == auth.UserName(p.User)) {
		return nil
	}
	if p.Kind == auth.KindUser {
		if u, ok := strings.CutPrefix(owner, "users/"); ok {
			roles, admin, err := a.o.Store.Roles(ctx, u)
			if err != nil {
				return err
			}
			within := len(roles) > 0 && !admin
			for proj := range roles {
				within = within && p.Role(proj) == auth.RoleAdmin
			}
			if within {
				return nil
			}
		}
	}
	return errs.Hide(fmt.Errorf("%s: %w", owner, errs.NotFound))
}

// KeyProto is k as the API shows it (without its secret).
func KeyProto(k *adapters.KeyRecord) *loomv1.ApiKey {
	out := &loomv1.ApiKey{Name: k.Owner + "/keys/" + k.ID, KeyId: k.ID, DisplayName: k.DisplayName, CreateTime: timestamppb.New(k.CreateTime), Creator: k.Creator}
	if !k.ExpireTime.IsZero() {
		out.ExpireTime = timestamppb.New(k.ExpireTime)
	}
	if !k.RevokeTime.IsZero() {
		out.RevokeTime = timestamppb.New(k.RevokeTime)
	}
	return out
}

// checkDisplay checks a display name: bounded, printable.
func checkDisplay(v *errs.Validator, field, s string) {
	if len(s) > MaxDisplayNameBytes {
		v.Add(field, "%d bytes, longer than the limit of %d", len(s), MaxDisplayNameBytes)
		return
	}
	if !utf8.ValidString(s) {
		v.Add(field, "is not valid UTF-8")
		return
	}
	for _, r := range s {
		if unicode.IsControl(r) || (r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069) {
			v.Add(field, "holds the control character %U", r)
			return
		}
	}
}

// CreateApiKey makes a key for the parent's user (see mayManageKeys).
func (a *Auth) CreateApiKey(ctx context.Context, req *loomv1.CreateApiKeyRequest) (*loomv1.ApiKey, error) {
	p, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	var v errs.Validator
	owner, err := parseOwner(p, "parent", req.GetParent())
	if err != nil {
		var inv *errs.InvalidError
		errors.As(err, &inv)
		for _, f := range inv.Violations {
			v.Add(f.Field, "%s", f.Reason)
		}
	}
	checkDisplay(&v, "key.display_name", req.GetKey().GetDisplayName())
	maxTTL := int64(MaxKeyTTL / time.Second)
	v.Check(req.GetTtlSeconds() >= 0 && req.GetTtlSeconds() <= maxTTL, "ttl_seconds", "%d: must be between 0 (no expiry) and %d (10 years)", req.GetTtlSeconds(), maxTTL)
	if err := v.Err(); err != nil {
		return nil, err
	}
	if err := a.mayManageKeys(ctx, p, owner); err != nil {
		return nil, err
	}
	// A key acts as its user, whose OS account their jobs run as: a project
	// admin who could make one for any user they add to their project could
	// run jobs as any account (root included). So project admins list and
	// revoke their members' keys, and only cluster administrators make keys
	// for others.
	if !p.ClusterAdmin && owner != auth.UserName(p.User) {
		return nil, fmt.Errorf("%w: only cluster administrators create API keys for other users (%s acts as that user's OS account); ask %s to run `loom auth keys create`",
			errs.PermissionDenied, owner, owner)
	}
	return a.createKey(ctx, owner, p.Name, req.GetKey().GetDisplayName(), time.Duration(req.GetTtlSeconds())*time.Second)
}

// createKey stores a new key for owner and returns it with its secret.
func (a *Auth) createKey(ctx context.Context, owner, creator, display string, ttl time.Duration) (*loomv1.ApiKey, error) {
	now := a.now()
	existing, err := a.o.Store.APIKeys(ctx, owner)
	if err != nil {
		return nil, err
	}
	kept := 0
	for _, k := range existing {
		// Kept KeyRetention from when it first ended: a key revoked
		// after it expired is not kept longer for it.
		ended := k.Ended(now)
		if !ended.IsZero() && now.Sub(ended) > KeyRetention {
			if err := a.o.Store.DeleteAPIKey(ctx, owner, k.ID); err != nil {
				return nil, err
			}
			continue
		}
		kept++
	}
	if kept >= MaxKeysPerOwner {
		return nil, fmt.Errorf("%w: %s holds %d API keys, the limit is %d; revoke some with `loom auth keys revoke`", errs.ResourceExhausted, owner, kept, MaxKeysPerOwner)
	}
	id, whole, err := auth.NewAPIKey()
	if err != nil {
		return nil, err
	}
	_, secret, err := auth.ParseAPIKey(whole)
	if err != nil {
		return nil, err
	}
	hash, err := auth.HashSecret(secret)
	if err != nil {
		return nil, err
	}
	rec := &adapters.KeyRecord{ID: id, Owner: owner, DisplayName: display, Hash: hash, Creator: creator, CreateTime: now}
	if ttl > 0 {
		rec.ExpireTime = now.Add(ttl)
	}
	// Counted again as it is stored: the count above is a read, and
	// concurrent creates would all pass it.
	if err := a.o.Store.PutNewAPIKey(ctx, rec, MaxKeysPerOwner); err != nil {
		return nil, err
	}
	out := KeyProto(rec)
	out.Secret = whole
	return out, nil
}

// ListApiKeys lists the parent's keys (without secrets), by id (AIP-158).
func (a *Auth) ListApiKeys(ctx context.Context, req *loomv1.ListApiKeysRequest) (*loomv1.ListApiKeysResponse, error) {
	p, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	owner, err := parseOwner(p, "parent", req.GetParent())
	if err != nil {
		return nil, err
	}
	if _, _, err := paging.Parse(req); err != nil {
		return nil, err
	}
	if err := a.mayManageKeys(ctx, p, owner); err != nil {
		return nil, err
	}
	recs, err := a.o.Store.APIKeys(ctx, owner)
	if err != nil {
		return nil, err
	}
	keys := make([]*loomv1.ApiKey, len(recs))
	for i, k := range recs {
		keys[i] = KeyProto(k)
	}
	page, next, err := paging.List(req, keys, (*loomv1.ApiKey).GetName)
	if err != nil {
		return nil, err
	}
	return &loomv1.ListApiKeysResponse{Keys: page, NextPageToken: next}, nil
}

// RevokeApiKey ends a key: this instance refuses it at once, every other
// within authn.DefaultKeyCacheTTL. Revoking a revoked key returns it as it is;
// one the retention sweep removed meanwhile is NotFound.
func (a *Auth) RevokeApiKey(ctx context.Context, req *loomv1.RevokeApiKeyRequest) (*loomv1.ApiKey, error) {
	p, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	name := req.GetName()
	i := strings.LastIndex(name, "/keys/")
	if i < 0 || len(name) > 256 {
		return nil, errs.Invalid("name", "want users/{user}/keys/{key_id}, got %q", clipText(name))
	}
	owner, err := parseOwner(p, "name", name[:i])
	if err != nil {
		return nil, err
	}
	id := name[i+len("/keys/"):]
	if _, _, err := auth.ParseAPIKey(auth.APIKeyPrefix + id + ".x"); err != nil {
		return nil, errs.Invalid("name", "key id %q is not one (16 hex digits)", clipText(id))
	}
	if err := a.mayManageKeys(ctx, p, owner); err != nil {
		return nil, err
	}
	var k *adapters.KeyRecord
	for try := 0; ; try++ {
		var raw []byte
		if k, raw, err = a.o.Store.APIKeyAsStored(ctx, id); err != nil {
			return nil, err
		}
		if k.Owner != owner {
			// Another owner's key, named under this one: not there for
			// the caller, in the words of a key id no key has (before,
			// "users/u/keys/ID: not found" told an existing key of
			// someone else's from a missing one).
			return nil, errs.Hide(adapters.KeyNotFound(id))
		}
		if !k.RevokeTime.IsZero() {
			break
		}
		// Written only over the record as read: one the retention sweep
		// removed meanwhile does not come back (revoked, and counted
		// against its owner's MaxKeysPerOwner); read again, it is
		// NotFound, or revoked by a concurrent call.
		k.RevokeTime = a.now()
		replaced, err := a.o.Store.ReplaceAPIKey(ctx, k, raw)
		if err != nil {
			return nil, err
		}
		if replaced {
			break
		}
		if try == 2 {
			return nil, fmt.Errorf("%s changed meanwhile, 3 times in a row; read it again and retry: %w", name, errs.Aborted)
		}
	}
	if a.o.Authn != nil {
		a.o.Authn.ForgetKey(id)
	}
	return KeyProto(k), nil
}

// clipText cuts s to 64 bytes for an error message.
func clipText(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// ---- members ----

// parseMemberParent reads "projects/{project}" or "global".
func parseMemberParent(parent string) (string, error) {
	if parent == adapters.GlobalParent {
		return parent, nil
	}
	pr, err := resname.ParseProject(parent)
	if err != nil {
		// resname's own message, widened to what this field takes: one
		// "want", the name clipped once.
		var re *resname.Error
		if errors.As(err, &re) {
			wide := *re
			wide.Form = "projects/{project} or " + adapters.GlobalParent
			return "", errs.Invalid("parent", "%s", wide.Error())
		}
		return "", errs.Invalid("parent", "want projects/{project} or global: %v", err)
	}
	return pr.String(), nil
}

// mayAdminister refuses a caller that may not manage parent's members:
// cluster administrators everywhere, project admins in their project. A
// project the caller is no member of is NotFound.
func mayAdminister(p *auth.Principal, parent string) error {
	if p.ClusterAdmin {
		return nil
	}
	switch r := p.Role(strings.TrimPrefix(parent, "projects/")); {
	case parent == adapters.GlobalParent:
		return fmt.Errorf("%w: only cluster administrators manage the global (cluster-admin) members", errs.PermissionDenied)
	case r == auth.RoleAdmin:
		return nil
	case r != auth.RoleNone:
		return fmt.Errorf("%w: managing %s's members needs its admin role; you are %s", errs.PermissionDenied, parent, r)
	}
	return errs.Hide(fmt.Errorf("%s: %w", parent, errs.NotFound))
}

// mayGiveFirstMembership refuses a project admin's SetMember that would
// give user, who has no membership anywhere, a first one while they hold a
// usable API key: a project admin manages the keys of users whose every
// membership is in their projects (mayManageKeys), so that membership would
// bring keys made outside any of their projects (by a cluster administrator,
// or by the user) under them, to list and revoke. A user with no usable key
// is a new user, whom a project admin adds as before (keys made for them
// afterwards are made for a member of the project); a user who already has
// a membership, a role change or a removal, is no first membership; a
// cluster administrator may give any.
func (a *Auth) mayGiveFirstMembership(ctx context.Context, p *auth.Principal, parent, user, role string) error {
	if p.ClusterAdmin || role == "" {
		return nil
	}
	roles, admin, err := a.o.Store.Roles(ctx, user)
	if err != nil || len(roles) > 0 || admin {
		return err
	}
	keys, err := a.o.Store.APIKeys(ctx, auth.UserName(user))
	if err != nil {
		return err
	}
	now := a.now()
	if !slices.ContainsFunc(keys, func(k *adapters.KeyRecord) bool { return k.Usable(now) }) {
		return nil
	}
	return fmt.Errorf("%w: %s has no membership and holds API keys: only a cluster administrator gives such a user a first membership "+
		"(a project admin manages the keys of users who are only in their projects, and these were made outside them); "+
		"ask one to run `loom auth members set %s %s --project %s`", errs.PermissionDenied, auth.UserName(user), user, role, strings.TrimPrefix(parent, "projects/"))
}

// SetMember gives a user a role in a project, or cluster-admin under global.
func (a *Auth) SetMember(ctx context.Context, req *loomv1.SetMemberRequest) (*loomv1.Member, error) {
	p, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	var v errs.Validator
	parent, err := parseMemberParent(req.GetParent())
	if err != nil {
		v.Add("parent", "%v", strings.TrimPrefix(err.Error(), "parent: "))
	}
	if err := auth.CheckUserName(req.GetUser()); err != nil {
		v.Add("user", "%v", err)
	}
	role := strings.TrimSpace(req.GetRole())
	if parent == adapters.GlobalParent {
		v.Check(role == "" || role == adapters.RoleClusterAdmin, "role", "under global the role is %q or \"\" (remove), got %q", adapters.RoleClusterAdmin, clipText(role))
	} else if _, err := auth.ParseRole(role); err != nil {
		v.Add("role", "%s; \"\" removes the member", clipText(err.Error()))
	}
	if err := v.Err(); err != nil {
		return nil, err
	}
	if err := mayAdminister(p, parent); err != nil {
		return nil, err
	}
	if err := a.mayGiveFirstMembership(ctx, p, parent, req.GetUser(), role); err != nil {
		return nil, err
	}
	// The caller's right, checked above from their principal (read when
	// the call began), is checked again by the write itself, against their
	// memberships as they are then: two admins removing each other at once
	// must not both succeed, leaving the project (or the cluster) with none.
	by := p.User
	if a.o.Authn != nil && a.o.Authn.Disabled() {
		by = "" // authentication off: the dev principal holds no membership
	}
	if err := a.o.Store.SetMemberBy(ctx, by, parent, req.GetUser(), role, MaxMembers); err != nil {
		return nil, err
	}
	if a.o.Authn != nil {
		a.o.Authn.ForgetUser(req.GetUser())
	}
	return &loomv1.Member{Parent: parent, User: req.GetUser(), Role: role}, nil
}

// ListMembers lists a project's members (or global's), by user (AIP-158).
func (a *Auth) ListMembers(ctx context.Context, req *loomv1.ListMembersRequest) (*loomv1.ListMembersResponse, error) {
	p, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	parent, err := parseMemberParent(req.GetParent())
	if err != nil {
		return nil, err
	}
	if _, _, err := paging.Parse(req); err != nil {
		return nil, err
	}
	if err := mayAdminister(p, parent); err != nil {
		return nil, err
	}
	m, err := a.o.Store.Members(ctx, parent)
	if err != nil {
		return nil, err
	}
	members := make([]*loomv1.Member, 0, len(m))
	for u, r := range m {
		members = append(members, &loomv1.Member{Parent: parent, User: u, Role: r})
	}
	page, next, err := paging.List(req, members, (*loomv1.Member).GetUser)
	if err != nil {
		return nil, err
	}
	return &loomv1.ListMembersResponse{Members: page, NextPageToken: next}, nil
}

// ---- nodes ----

// RegisterNode exchanges a one-time bootstrap token for a node identity.
func (a *Auth) RegisterNode(ctx context.Context, req *loomv1.RegisterNodeRequest) (*loomv1.NodeIdentity, error) {
	var v errs.Validator
	v.Check(req.GetBootstrapToken() != "", "bootstrap_token", "is required: the one-time token the provisioner gave the node")
	v.Check(len(req.GetBootstrapToken()) <= auth.MaxTokenBytes, "bootstrap_token", "%d bytes, longer than the limit of %d", len(req.GetBootstrapToken()), auth.MaxTokenBytes)
	v.Check(len(req.GetNode()) <= 256, "node", "%d bytes, longer than the limit of 256", len(req.GetNode()))
	v.Check(len(req.GetPublicKey()) == ed25519.PublicKeySize, "public_key", "%d bytes, want a %d-byte Ed25519 public key", len(req.GetPublicKey()), ed25519.PublicKeySize)
	if err := v.Err(); err != nil {
		return nil, err
	}
	if a.o.Bootstrap == nil || a.o.ServiceKey == nil {
		return nil, fmt.Errorf("%w: this gateway has no service key (-service-key-file), so it cannot register nodes", errs.FailedPrecondition)
	}
	c, err := a.o.Bootstrap.Verify(req.GetBootstrapToken(), auth.UseBootstrap)
	if err != nil {
		return nil, err
	}
	if c.Kind != auth.KindNode.String() || c.Node == "" || c.Cluster == "" || c.Pool == "" || c.Subject != auth.NodeName(c.Node) {
		return nil, fmt.Errorf("%w: bootstrap token does not name a node, cluster and pool", errs.Unauthenticated)
	}
	if req.GetNode() != "" && req.GetNode() != c.Node {
		return nil, fmt.Errorf("%w: the bootstrap token is for node %s, not %s", errs.Unauthenticated, c.Node, clipText(req.GetNode()))
	}
	if err := a.checkNode(ctx, c.Node, c.Cluster, c.Pool); err != nil {
		return nil, err
	}
	first, err := a.o.Store.UseOnce(ctx, c.ID, c.ExpiresAt.Time, a.now())
	if err != nil {
		return nil, err
	}
	if !first {
		return nil, fmt.Errorf("%w: bootstrap token already used (each is good once); a node that must register again gets a new one from its provisioner", errs.Unauthenticated)
	}
	// This registration is now the node's: the identities of any earlier
	// one (the machine before a reimage) stop working. It is named with
	// the time it was made (auth.NewRegistration), so that whoever learns
	// a node's registrations from its certificates (the provisioner, and
	// from it the scheduler, which seals the node's commands with the
	// latest one's command key) knows the latest.
	// Never named before the node's current one: the gateway that made
	// that one may have a clock ahead of this one's, and a registration
	// named earlier would never supersede it where registrations are
	// ordered by the time they name.
	made := a.now()
	cur, err := a.o.Store.NodeRegistration(ctx, c.Cluster, c.Node)
	if err != nil {
		return nil, err
	}
	if prev := auth.RegisteredAt(cur); !prev.IsZero() && !made.After(prev) {
		made = prev.Add(time.Nanosecond)
	}
	// Nor at or before the revocation of the node's earlier identities
	// (a node removed and made again with the same name: a replacement, a
	// cluster made again), which the provisioner named on its own clock:
	// the new node's identities must not fall under it.
	rev, revoked, err := a.o.Store.NodeRevocation(ctx, c.Node)
	if err != nil {
		return nil, err
	}
	if before := auth.RegisteredAt(rev.Before); revoked && !made.After(before) {
		made = before.Add(time.Nanosecond)
	}
	reg := auth.NewRegistration(made, c.ID)
	if err := a.o.Store.SetNodeRegistration(ctx, c.Cluster, c.Node, reg, nodeRegistrationTTL); err != nil {
		return nil, err
	}
	a.o.Log.Info("node registered", "node", c.Node, "cluster", c.Cluster, "pool", c.Pool, "registration", reg)
	return a.nodeIdentity(c.Node, c.Cluster, c.Pool, reg, req.GetPublicKey())
}

// RenewNodeIdentity renews the calling node's identity, for public_key
// (the same key, or a new one).
func (a *Auth) RenewNodeIdentity(ctx context.Context, req *loomv1.RenewNodeIdentityRequest) (*loomv1.NodeIdentity, error) {
	p, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	if len(req.GetPublicKey()) != ed25519.PublicKeySize {
		return nil, errs.Invalid("public_key", "%d bytes, want a %d-byte Ed25519 public key", len(req.GetPublicKey()), ed25519.PublicKeySize)
	}
	if p.Kind != auth.KindNode {
		return nil, fmt.Errorf("%w: only a node renews a node identity; a %s principal is not one", errs.PermissionDenied, p.Kind)
	}
	if a.o.ServiceKey == nil {
		return nil, fmt.Errorf("%w: this gateway has no service key (-service-key-file)", errs.FailedPrecondition)
	}
	if err := a.checkNode(ctx, p.Node, p.Cluster, p.Pool); err != nil {
		return nil, err
	}
	// Read again, not from the cached principal: a renewal must not
	// outlive a newer registration by the cache's lifetime.
	current, err := authn.CheckNodeRegistration(ctx, a.o.Store, p.Cluster, p.Node, p.Registration)
	if err != nil {
		return nil, err
	}
	reg := p.Registration
	if reg == "" {
		// An identity from before registrations were kept (or renewed by
		// a gateway of an earlier release, in a rolling upgrade) gets one
		// — the one such an identity adopted before, or a new one, kept
		// only if the node has none — so that the node's next
		// registration ends it as it ends any other, rather than it
		// staying renewable for good.
		reg = current
		if !strings.HasPrefix(reg, authn.AdoptedPrefix) {
			reg = authn.AdoptedPrefix + envelope.NewID()
		}
	}
	// Kept only while it is still the node's, in one step: a
	// registration that landed since the check above stays.
	ok, err := a.o.Store.RenewNodeRegistration(ctx, p.Cluster, p.Node, reg, nodeRegistrationTTL)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, authn.RegisteredAgain(p.Node)
	}
	return a.nodeIdentity(p.Node, p.Cluster, p.Pool, reg, req.GetPublicKey())
}

// checkNode asks the provisioner whether node is in cluster's pool: a
// node removed (or replaced) gets no identity and bootstraps again.
func (a *Auth) checkNode(ctx context.Context, node, cluster, pool string) error {
	found := false
	err := paging.Each(func(tok string) (string, error) {
		resp, err := a.o.Owners.Nodes.ListNodes(ctx, &loomv1.ListNodesRequest{Parent: cluster, PageSize: paging.MaxSize, PageToken: tok})
		if err != nil {
			return "", err
		}
		for _, n := range resp.GetNodes() {
			if (n.GetName() == node || n.GetHostname() == hostOf(node)) && n.GetNodePool() == pool {
				found = true
				return "", nil
			}
		}
		return resp.GetNextPageToken(), nil
	})
	if err != nil {
		if isNotFound(err) {
			return fmt.Errorf("%w: cluster %s does not exist", errs.Unauthenticated, cluster)
		}
		return fmt.Errorf("ask the provisioner for the nodes of %s: %w", cluster, err)
	}
	if !found {
		return fmt.Errorf("%w: node %s is not in pool %s of %s; a replaced node bootstraps again", errs.Unauthenticated, node, pool, cluster)
	}
	return nil
}

// nodeIdentity issues node's access token and certificate of registration
// reg, with that registration's command key (what opens the step commands
// sealed for it: auth.CommandKey of the node and reg). Only RegisterNode
// (the node's one-time bootstrap token) and RenewNodeIdentity (the node's own
// principal) call it, for that node: no other caller gets a node's key.
func (a *Auth) nodeIdentity(node, cluster, pool, reg string, pub []byte) (*loomv1.NodeIdentity, error) {
	tok, exp, err := a.o.Issuer.Issue(auth.Claims{Use: auth.UseAccess, Kind: auth.KindNode.String(), Node: node, Cluster: cluster, Pool: pool, Reg: reg,
		RegisteredClaims: auth.ForSubject(auth.NodeName(node))}, auth.DefaultNodeIdentityLifetime)
	if err != nil {
		return nil, err
	}
	cert, err := auth.SignNodeCert(a.o.ServiceKey, auth.NodeCert{Node: node, Cluster: cluster, Pool: pool, PublicKey: pub, NotAfter: exp, Reg: reg})
	if err != nil {
		return nil, err
	}
	return &loomv1.NodeIdentity{Node: node, Cluster: cluster, Pool: pool, AccessToken: tok, Certificate: cert,
		ExpireTime: timestamppb.New(exp), ServicePublicKey: a.o.ServiceKey.Public().(ed25519.PublicKey),
		CommandKey: auth.CommandKey(a.o.ServiceKey.Seed(), node, reg)}, nil
}

// nodeRegistrationTTL is how long a node's registration is kept past its
// last identity: twice an identity's lifetime, so that it outlives every
// identity issued under it.
const nodeRegistrationTTL = 2 * auth.DefaultNodeIdentityLifetime

// ---- bootstrap ----

// Bootstrap runs at start: when adminKeyFile is set and does not exist,
// admin becomes a cluster administrator and gets an API key written there
// (mode 0600); when loginKeyFile is set and does not exist, the login
// service gets a key written there. An existing file is left alone.
func (a *Auth) Bootstrap(ctx context.Context, admin, adminKeyFile, loginKeyFile string) error {
	if adminKeyFile != "" {
		if err := auth.CheckUserName(admin); err != nil {
			return errs.Invalid("bootstrap-admin", "%v (required with -bootstrap-key-file)", err)
		}
		err := writeKeyFile(adminKeyFile, func() (string, error) {
			if err := a.o.Store.SetMember(ctx, adapters.GlobalParent, admin, adapters.RoleClusterAdmin); err != nil {
				return "", err
			}
			k, err := a.createKey(ctx, auth.UserName(admin), "services/gateway", "bootstrap admin key", 0)
			if err != nil {
				return "", err
			}
			return k.GetSecret(), nil
		})
		if err != nil {
			return fmt.Errorf("bootstrap admin key %s: %w", adminKeyFile, err)
		}
	}
	if loginKeyFile != "" {
		err := writeKeyFile(loginKeyFile, func() (string, error) {
			k, err := a.createKey(ctx, auth.ServiceName(LoginService), "services/gateway", "login service key", 0)
			if err != nil {
				return "", err
			}
			return k.GetSecret(), nil
		})
		if err != nil {
			return fmt.Errorf("login service key %s: %w", loginKeyFile, err)
		}
	}
	return nil
}
