package ports

import (
	"context"

	"google.golang.org/grpc"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/gateway/internal/app"
)

// RegisterAuth registers the AuthService of a on s. Each method's error
// goes through errs.ToStatus.
func RegisterAuth(s grpc.ServiceRegistrar, a *app.Auth) {
	loomv1.RegisterAuthServiceServer(s, authService{a: a})
}

type authService struct {
	loomv1.UnimplementedAuthServiceServer
	a *app.Auth
}

func (s authService) CreateToken(ctx context.Context, r *loomv1.CreateTokenRequest) (*loomv1.Token, error) {
	return unary(s.a.CreateToken(ctx, r))
}

func (s authService) WhoAmI(ctx context.Context, r *loomv1.WhoAmIRequest) (*loomv1.Principal, error) {
	return unary(s.a.WhoAmI(ctx, r))
}

func (s authService) CreateApiKey(ctx context.Context, r *loomv1.CreateApiKeyRequest) (*loomv1.ApiKey, error) {
	return unary(s.a.CreateApiKey(ctx, r))
}

func (s authService) ListApiKeys(ctx context.Context, r *loomv1.ListApiKeysRequest) (*loomv1.ListApiKeysResponse, error) {
	return unary(s.a.ListApiKeys(ctx, r))
}

func (s authService) RevokeApiKey(ctx context.Context, r *loomv1.RevokeApiKeyRequest) (*loomv1.ApiKey, error) {
	return unary(s.a.RevokeApiKey(ctx, r))
}

func (s authService) SetMember(ctx context.Context, r *loomv1.SetMemberRequest) (*loomv1.Member, error) {
	return unary(s.a.SetMember(ctx, r))
}

func (s authService) ListMembers(ctx context.Context, r *loomv1.ListMembersRequest) (*loomv1.ListMembersResponse, error) {
	return unary(s.a.ListMembers(ctx, r))
}

func (s authService) RegisterNode(ctx context.Context, r *loomv1.RegisterNodeRequest) (*loomv1.NodeIdentity, error) {
	return unary(s.a.RegisterNode(ctx, r))
}

func (s authService) GetOidcBinding(ctx context.Context, r *loomv1.GetOidcBindingRequest) (*loomv1.OidcBinding, error) {
	return unary(s.a.GetOidcBinding(ctx, r))
}

func (s authService) DeleteOidcBinding(ctx context.Context, r *loomv1.DeleteOidcBindingRequest) (*loomv1.OidcBinding, error) {
	return unary(s.a.DeleteOidcBinding(ctx, r))
}

func (s authService) RevokeToken(ctx context.Context, r *loomv1.RevokeTokenRequest) (*loomv1.RevokeTokenResponse, error) {
	return unary(s.a.RevokeToken(ctx, r))
}

func (s authService) RenewNodeIdentity(ctx context.Context, r *loomv1.RenewNodeIdentityRequest) (*loomv1.NodeIdentity, error) {
	return unary(s.a.RenewNodeIdentity(ctx, r))
}
