package ports

import (
	"context"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/gateway/internal/app"
)

// accounts serves AccountService (Slurm accounts and associations, sacctmgr).
type accounts struct {
	loomv1.UnimplementedAccountServiceServer
	g *app.Gateway
}

func (s accounts) CreateAccount(ctx context.Context, r *loomv1.CreateAccountRequest) (*loomv1.Account, error) {
	return unary(s.g.CreateAccount(ctx, r))
}

func (s accounts) ListAccounts(ctx context.Context, r *loomv1.ListAccountsRequest) (*loomv1.ListAccountsResponse, error) {
	return unary(s.g.ListAccounts(ctx, r))
}

func (s accounts) UpdateAccount(ctx context.Context, r *loomv1.UpdateAccountRequest) (*loomv1.Account, error) {
	return unary(s.g.UpdateAccount(ctx, r))
}

func (s accounts) DeleteAccount(ctx context.Context, r *loomv1.DeleteAccountRequest) (*loomv1.Account, error) {
	return unary(s.g.DeleteAccount(ctx, r))
}

func (s accounts) DeleteAssociation(ctx context.Context, r *loomv1.DeleteAssociationRequest) (*loomv1.Association, error) {
	return unary(s.g.DeleteAssociation(ctx, r))
}

func (s accounts) SetAssociation(ctx context.Context, r *loomv1.SetAssociationRequest) (*loomv1.Association, error) {
	return unary(s.g.SetAssociation(ctx, r))
}

func (s accounts) ListAssociations(ctx context.Context, r *loomv1.ListAssociationsRequest) (*loomv1.ListAssociationsResponse, error) {
	return unary(s.g.ListAssociations(ctx, r))
}
