package auth

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/loom-ml/loom/libs/errs"
)

// UseService is the use of a token one service presents to another's
// internal gRPC API.
const UseService = "service"

// ServiceTokenIssuerName is the iss of service tokens.
const ServiceTokenIssuerName = "loom-service"

// DefaultServiceTokenLifetime is a service token's lifetime: short, as the
// caller mints a new one well before it ends.
const DefaultServiceTokenLifetime = 5 * time.Minute

// NewServiceTokenIssuer returns the Issuer of service tokens, keyed by
// DeriveKey(serviceSecret, PurposeService). now is the clock (nil:
// time.Now).
func NewServiceTokenIssuer(serviceSecret []byte, now func() time.Time) (*Issuer, error) {
	return NewIssuer(DeriveKey(serviceSecret, PurposeService), ServiceTokenIssuerName, now)
}

// ServiceTokenSource is the per-RPC credential of service (its name
// without "services/"): a service token minted with iss, minted again when
// a third of its life is left, so that no call carries one about to end.
func ServiceTokenSource(iss *Issuer, service string) TokenSource {
	var mu sync.Mutex
	var tok string
	var renewAt time.Time
	return func(context.Context) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		if tok != "" && iss.now().Before(renewAt) {
			return tok, nil
		}
		t, exp, err := iss.Issue(Claims{Use: UseService, Kind: KindService.String(), RegisteredClaims: ForSubject(ServiceName(service))},
			DefaultServiceTokenLifetime)
		if err != nil {
			return "", err
		}
		tok, renewAt = t, exp.Add(-DefaultServiceTokenLifetime/3)
		return tok, nil
	}
}

// VerifyServiceToken checks a service token and returns its service
// principal. Every failure wraps errs.Unauthenticated.
func VerifyServiceToken(iss *Issuer, tok string) (*Principal, error) {
	c, err := iss.Verify(tok, UseService)
	if err != nil {
		return nil, err
	}
	if c.Kind != KindService.String() || !strings.HasPrefix(c.Subject, "services/") {
		return nil, fmt.Errorf("%w: not a service token", errs.Unauthenticated)
	}
	return &Principal{Name: c.Subject, Kind: KindService, How: "service-token"}, nil
}
