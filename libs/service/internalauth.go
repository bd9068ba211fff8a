package service

import (
	"context"
	"fmt"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/loom-ml/loom/libs/auth"
	"github.com/loom-ml/loom/libs/config"
	"github.com/loom-ml/loom/libs/errs"
)

// healthService is the standard health service's prefix: probes (the
// stack's readiness, load balancers) call it without a token.
const healthService = "/grpc.health.v1.Health/"

// InternalAuth returns the gRPC server options of a service whose API only
// other Loom services call (the provisioner, scheduler and registry, which
// the gateway reads): every call but health checks must carry a service
// token (auth.ServiceTokenSource, keyed from the services' secret in
// cfg.ServiceKeyFile); one without is errs.Unauthenticated. Pass them to
// New. With cfg.InsecureBus and no key file there is no check (development
// only; New warns).
func InternalAuth(cfg config.Common) ([]grpc.ServerOption, error) {
	iss, err := serviceIssuer(cfg)
	if err != nil || iss == nil {
		return nil, err
	}
	check := func(ctx context.Context, method string) (context.Context, error) {
		if strings.HasPrefix(method, healthService) {
			return ctx, nil
		}
		cred, err := auth.CredentialFromContext(ctx)
		if err != nil {
			return ctx, err
		}
		if cred == "" {
			return ctx, fmt.Errorf("%w: %s is an internal API: a Loom service's token is required", errs.Unauthenticated, method)
		}
		p, err := auth.VerifyServiceToken(iss, cred)
		if err != nil {
			return ctx, err
		}
		return auth.NewContext(ctx, p), nil
	}
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			ctx, err := check(ctx, info.FullMethod)
			if err != nil {
				return nil, err
			}
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			ctx, err := check(ss.Context(), info.FullMethod)
			if err != nil {
				return err
			}
			return h(srv, &ctxStream{ServerStream: ss, ctx: ctx})
		}),
	}, nil
}

// ServiceCredentials returns the per-RPC credentials service (its name)
// calls other services' internal APIs with: a service token re-minted
// before it ends. nil with cfg.InsecureBus and no key file.
func ServiceCredentials(cfg config.Common, service string) (credentials.PerRPCCredentials, error) {
	iss, err := serviceIssuer(cfg)
	if err != nil || iss == nil {
		return nil, err
	}
	return auth.ServiceTokenSource(iss, service), nil
}

// serviceIssuer is the service-token issuer of cfg's services' secret.
func serviceIssuer(cfg config.Common) (*auth.Issuer, error) {
	secret, err := loadServiceKey(cfg)
	if err != nil || secret == nil {
		return nil, err
	}
	return auth.NewServiceTokenIssuer(secret, nil)
}

// ctxStream is a server stream with another context.
type ctxStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *ctxStream) Context() context.Context { return s.ctx }
