package gateway

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"

	"github.com/loom-ml/loom/libs/auth"
	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/service"
	"github.com/loom-ml/loom/services/gateway/internal/adapters"
	"github.com/loom-ml/loom/services/gateway/internal/app"
	"github.com/loom-ml/loom/services/gateway/internal/authn"
)

// authSecrets are the keys authentication needs, read before the service
// starts so that a bad key file stops it at once.
type authSecrets struct {
	// tokenKey signs access and refresh tokens.
	tokenKey []byte
	// ephemeral: tokenKey was made at start (no -token-key-file).
	ephemeral bool
	// serviceKey signs node certificates; bootstrapKey verifies bootstrap
	// tokens. Both nil without -service-key-file.
	serviceKey   ed25519.PrivateKey
	bootstrapKey []byte
}

func loadAuthSecrets(c AuthConfig, serviceKeyFile string) (authSecrets, error) {
	var s authSecrets
	if c.Mode != "on" && c.Mode != "off" {
		return s, errs.Invalid("auth", "want on or off, got %q", c.Mode)
	}
	if c.BootstrapKeyFile != "" {
		if err := auth.CheckUserName(c.BootstrapAdmin); err != nil {
			return s, errs.Invalid("bootstrap-admin", "%v (required with -bootstrap-key-file)", err)
		}
	}
	var err error
	if c.TokenKeyFile != "" {
		if s.tokenKey, err = auth.LoadOrCreateSecret(c.TokenKeyFile, auth.MinKeyBytes); err != nil {
			return s, fmt.Errorf("token key: %w", err)
		}
	} else {
		s.tokenKey, s.ephemeral = make([]byte, auth.MinKeyBytes), true
		if _, err := rand.Read(s.tokenKey); err != nil {
			return s, err
		}
	}
	if serviceKeyFile != "" {
		seed, err := auth.LoadOrCreateSecret(serviceKeyFile, ed25519.SeedSize)
		if err != nil {
			return s, fmt.Errorf("service key: %w", err)
		}
		if s.serviceKey, err = auth.ServiceKey(seed); err != nil {
			return s, err
		}
		s.bootstrapKey = auth.DeriveKey(seed, auth.PurposeBootstrap)
	}
	return s, nil
}

// newAuth builds the authenticator and the AuthService over the gateway's
// Redis, and makes the bootstrap keys the configuration asks for.
func newAuth(ctx context.Context, c AuthConfig, s authSecrets, base *service.Base, owners *adapters.Owners) (*app.Auth, *authn.Authenticator, error) {
	clock := base.Clock
	issuer, err := auth.NewIssuer(s.tokenKey, "loom", clock.Now)
	if err != nil {
		return nil, nil, err
	}
	var bootstrap *auth.Issuer
	if s.bootstrapKey != nil {
		if bootstrap, err = auth.NewIssuer(s.bootstrapKey, "loom-bootstrap", clock.Now); err != nil {
			return nil, nil, err
		}
	}
	store := adapters.NewAuthStore(base.Store)
	an := authn.New(authn.Options{Store: store, Issuer: issuer, Clock: clock, Log: base.Log, Disabled: c.Mode == "off"})
	if s.ephemeral && c.Mode == "on" {
		base.Log.Warn("no -token-key-file: tokens are signed with a key made at start; they end when this gateway stops and other instances refuse them")
	}
	a := app.NewAuth(app.AuthOptions{Store: store, Authn: an, Issuer: issuer, Bootstrap: bootstrap, ServiceKey: s.serviceKey,
		OIDC:   app.OIDCConfig{Issuer: c.OIDCIssuer, ClientID: c.OIDCClientID, UserClaim: c.OIDCUserClaim},
		Owners: owners, Clock: clock, Log: base.Log})
	if err := a.Bootstrap(ctx, c.BootstrapAdmin, c.BootstrapKeyFile, c.LoginKeyFile); err != nil {
		return nil, nil, err
	}
	return a, an, nil
}
