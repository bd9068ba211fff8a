package auth

import (
	"context"
	"fmt"
	"strings"

	"google.golang.org/grpc/metadata"

	"github.com/loom-ml/loom/libs/errs"
)

// MetadataKey is the gRPC metadata key (HTTP header) carrying a call's
// credential: "Bearer <token or API key>". grpc-gateway passes the REST
// Authorization header on under the same key.
const MetadataKey = "authorization"

// Bearer is a gRPC per-RPC credential: a static token or API key sent as
// "authorization: Bearer <it>" on every call. Loom's clients dial loopback
// or a TLS endpoint; RequireTransportSecurity is false so that the
// embedded default on loopback needs no certificate.
type Bearer string

// GetRequestMetadata implements credentials.PerRPCCredentials.
func (b Bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{MetadataKey: "Bearer " + string(b)}, nil
}

// RequireTransportSecurity implements credentials.PerRPCCredentials.
func (Bearer) RequireTransportSecurity() bool { return false }

// TokenSource is a per-RPC credential whose value may change (a token that
// is refreshed before it expires): Token is called on each call.
type TokenSource func(ctx context.Context) (string, error)

// GetRequestMetadata implements credentials.PerRPCCredentials.
func (s TokenSource) GetRequestMetadata(ctx context.Context, _ ...string) (map[string]string, error) {
	t, err := s(ctx)
	if err != nil {
		return nil, err
	}
	return map[string]string{MetadataKey: "Bearer " + t}, nil
}

// RequireTransportSecurity implements credentials.PerRPCCredentials.
func (TokenSource) RequireTransportSecurity() bool { return false }

// CredentialFromContext returns the bearer credential of an incoming call:
// "" with no error when the call carries none (anonymous); an
// errs.Unauthenticated error when it carries a malformed one or several.
func CredentialFromContext(ctx context.Context) (string, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get(MetadataKey)
	switch len(vals) {
	case 0:
		return "", nil
	case 1:
	default:
		return "", fmt.Errorf("%w: %d authorization headers; send one", errs.Unauthenticated, len(vals))
	}
	v := vals[0]
	if len(v) > MaxTokenBytes+16 {
		return "", fmt.Errorf("%w: authorization header of %d bytes is longer than the limit of %d", errs.Unauthenticated, len(v), MaxTokenBytes)
	}
	scheme, cred, ok := strings.Cut(v, " ")
	if !ok || !strings.EqualFold(scheme, "bearer") || strings.TrimSpace(cred) == "" {
		return "", fmt.Errorf("%w: authorization header must be \"Bearer <token or API key>\"", errs.Unauthenticated)
	}
	return strings.TrimSpace(cred), nil
}
