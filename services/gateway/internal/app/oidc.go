package app

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/coreos/go-oidc/v3/oidc"
	"github.com/jonboulle/clockwork"

	"github.com/loom-ml/loom/libs/auth"
	"github.com/loom-ml/loom/libs/errs"

	"github.com/loom-ml/loom/services/gateway/internal/adapters"
)

// maxOIDCTokenBytes bounds an ID token (RS256 tokens with many claims run
// to a few kilobytes).
const maxOIDCTokenBytes = 16 << 10

// DefaultOIDCUserClaim is the ID token claim that names the user.
const DefaultOIDCUserClaim = "preferred_username"

// OIDCConfig is the identity provider whose ID tokens CreateToken accepts.
type OIDCConfig struct {
	// Issuer is the provider's issuer URL (its discovery document is at
	// Issuer + "/.well-known/openid-configuration"); empty: no OIDC.
	Issuer string
	// ClientID is the audience the ID tokens must be issued for.
	ClientID string
	// UserClaim names the user (default DefaultOIDCUserClaim); its value
	// must be a valid OS account name, since the user's jobs run as it.
	UserClaim string
	// HTTPClient reaches the provider (default: 10 s timeout).
	HTTPClient *http.Client
}

// oidcVerifier checks ID tokens. The provider's discovery document is read
// on first use (and again after a failure), so the gateway starts while
// the provider is unreachable; its keys are fetched and cached by go-oidc.
type oidcVerifier struct {
	cfg   OIDCConfig
	clock clockwork.Clock

	mu sync.Mutex
	v  *oidc.IDTokenVerifier
}

func newOIDCVerifier(cfg OIDCConfig, clock clockwork.Clock) *oidcVerifier {
	if cfg.UserClaim == "" {
		cfg.UserClaim = DefaultOIDCUserClaim
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: 10 * time.Second}
	}
	return &oidcVerifier{cfg: cfg, clock: clock}
}

func (o *oidcVerifier) verifier(ctx context.Context) (*oidc.IDTokenVerifier, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.v != nil {
		return o.v, nil
	}
	// The provider keeps this context for fetching keys later: not the call's.
	pctx := oidc.ClientContext(context.WithoutCancel(ctx), o.cfg.HTTPClient)
	p, err := oidc.NewProvider(pctx, o.cfg.Issuer)
	if err != nil {
		return nil, fmt.Errorf("%w: OIDC issuer %s: %v", errs.Unavailable, o.cfg.Issuer, err)
	}
	o.v = p.Verifier(&oidc.Config{ClientID: o.cfg.ClientID, Now: o.clock.Now})
	return o.v, nil
}

// maxOIDCSubject bounds an ID token's subject, which a binding stores
// (OpenID Connect: at most 255 ASCII characters).
const maxOIDCSubject = 255

// verify checks an ID token and returns the OS user its user claim names
// and the identity that holds it: the issuer and subject, which, unlike
// the user claim (preferred_username may be the holder's to choose), the
// provider guarantees unique and stable.
func (o *oidcVerifier) verify(ctx context.Context, raw string) (user string, id adapters.OIDCBinding, err error) {
	v, err := o.verifier(ctx)
	if err != nil {
		return "", id, err
	}
	tok, err := v.Verify(oidc.ClientContext(ctx, o.cfg.HTTPClient), raw)
	if err != nil {
		return "", id, fmt.Errorf("%w: OIDC ID token: %v", errs.Unauthenticated, err)
	}
	var claims map[string]any
	if err := tok.Claims(&claims); err != nil {
		return "", id, fmt.Errorf("%w: OIDC ID token claims: %v", errs.Unauthenticated, err)
	}
	user, _ = claims[o.cfg.UserClaim].(string)
	if err := auth.CheckUserName(user); err != nil {
		return "", id, fmt.Errorf("%w: OIDC claim %s: %v; the gateway's -oidc-user-claim must name a claim holding the user's OS account name",
			errs.PermissionDenied, o.cfg.UserClaim, err)
	}
	if tok.Subject == "" || len(tok.Subject) > maxOIDCSubject || !utf8.ValidString(tok.Subject) {
		return "", id, fmt.Errorf("%w: OIDC ID token: its subject (sub) must be 1 to %d characters", errs.Unauthenticated, maxOIDCSubject)
	}
	return user, adapters.OIDCBinding{Issuer: tok.Issuer, Subject: tok.Subject}, nil
}
