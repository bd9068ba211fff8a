package adapters

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sort"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/store"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// Redis keys of Slurm accounts and associations (sacctmgr), relative to the
// store's prefix; one hash of each per project, so that a project's reads
// never scan another's.
const (
	// KeyAccountsPrefix + project is a hash: account id → loom.v1.Account.
	KeyAccountsPrefix = "accounts:"
	// KeyAssocsPrefix + project is a hash: AssocField(user, account) →
	// loom.v1.Association (default_account is not stored: see
	// KeyAssocDefaultPrefix).
	KeyAssocsPrefix = "assocs:"
	// KeyAssocDefaultPrefix + project is a hash: user → their default
	// account, what a submission without --account is charged to.
	KeyAssocDefaultPrefix = "assocdefault:"
	// KeyAccountRefsPrefix + project is a hash: account id → a token that
	// every write pointing something at the account (a sub-account made or
	// moved under it, a user added to it) sets anew (ReferAccount), and
	// that DeleteAccount's write is conditioned on (ExpectAccountRefs), so
	// that the two never both pass.
	KeyAccountRefsPrefix = "accountrefs:"
	// KeyAssocUsersPrefix + project is a hash: user → a token that every
	// write adding an association of the user sets anew (ReferUser), and
	// that a delete of what it read as the user's last association is
	// conditioned on (ExpectUserRefs), so that the user never keeps an
	// association added meanwhile without a default account.
	KeyAssocUsersPrefix = "assocusers:"
)

// AssocField is an association's field in its project's hash. Neither a
// login name nor an account id holds a '/'.
func AssocField(user, account string) string { return user + "/" + account }

// Account returns a stored account of project; errs.NotFound when unknown.
func (r *Repo) Account(ctx context.Context, project, id string) (*loomv1.Account, error) {
	a, _, err := r.AccountAsStored(ctx, project, id)
	return a, err
}

// AccountAsStored is Account with the account's bytes as stored, for a
// write conditioned on them (ExpectAccount).
func (r *Repo) AccountAsStored(ctx context.Context, project, id string) (*loomv1.Account, []byte, error) {
	a := &loomv1.Account{}
	b, err := r.hgetAsStored(ctx, KeyAccountsPrefix+project, id, a)
	if err != nil {
		return nil, nil, fmt.Errorf("account %s of project %s: %w", id, project, err)
	}
	return a, b, nil
}

// ExpectAccount makes tx apply only while the account id of project is
// stored as stored (the bytes AccountAsStored returned): Apply then fails
// with an error wrapping store.ErrConflict, writing nothing, when another
// write changed or removed it in between.
func ExpectAccount(tx *store.Tx, project, id string, stored []byte) {
	tx.IfHField(KeyAccountsPrefix+project, id, stored)
}

// AccountRefs returns the token of the account id of project that
// ReferAccount last set (nil: none since it was made), for DeleteAccount's
// write to be conditioned on (ExpectAccountRefs).
func (r *Repo) AccountRefs(ctx context.Context, project, id string) ([]byte, error) {
	b, err := r.st.HGet(ctx, KeyAccountRefsPrefix+project, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("references to account %s of project %s: %w: %w", id, project, errs.Unavailable, err)
	}
	return b, nil
}

// ReferAccount records in tx that tx points something at the account id
// of project (a sub-account, an association): a new token, which a delete
// of the account decided before tx (ExpectAccountRefs) no longer finds.
// The writer conditions tx on the account itself (ExpectAccount), which
// a delete decided after it removes.
func ReferAccount(tx *store.Tx, project, id string) {
	tx.HSet(KeyAccountRefsPrefix+project, id, []byte(rand.Text()))
}

// ExpectAccountRefs makes tx apply only while the account id's token is
// refs (what AccountRefs returned; nil: none), and removes the token with
// the account: a delete of the account writes nothing (store.ErrConflict)
// when something was pointed at it since it checked that nothing was.
func ExpectAccountRefs(tx *store.Tx, project, id string, refs []byte) {
	tx.IfHField(KeyAccountRefsPrefix+project, id, refs)
	tx.HDel(KeyAccountRefsPrefix+project, id)
}

// UserRefs returns the token of user in project that ReferUser last set
// (nil: none), for the delete of their last association to be conditioned
// on (ExpectUserRefs).
func (r *Repo) UserRefs(ctx context.Context, project, user string) ([]byte, error) {
	b, err := r.st.HGet(ctx, KeyAssocUsersPrefix+project, user)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("associations of user %s in project %s: %w: %w", user, project, errs.Unavailable, err)
	}
	return b, nil
}

// ReferUser records in tx that tx adds an association of user in project:
// a new token, which a delete of the user's last association decided
// before tx (ExpectUserRefs) no longer finds.
func ReferUser(tx *store.Tx, project, user string) {
	tx.HSet(KeyAssocUsersPrefix+project, user, []byte(rand.Text()))
}

// ExpectUserRefs makes tx apply only while user's token is refs (what
// UserRefs returned; nil: none), and removes the token: a delete of what
// it read as the user's last association (taking their default account
// with it) writes nothing (store.ErrConflict) when another association of
// the user was added since.
func ExpectUserRefs(tx *store.Tx, project, user string, refs []byte) {
	tx.IfHField(KeyAssocUsersPrefix+project, user, refs)
	tx.HDel(KeyAssocUsersPrefix+project, user)
}

// Accounts returns the stored accounts of project, by id.
func (r *Repo) Accounts(ctx context.Context, project string) ([]*loomv1.Account, error) {
	raw, err := r.st.HGetAll(ctx, KeyAccountsPrefix+project)
	if err != nil {
		return nil, fmt.Errorf("accounts of %s: %w: %w", project, errs.Unavailable, err)
	}
	out := make([]*loomv1.Account, 0, len(raw))
	for id, b := range raw {
		a := &loomv1.Account{}
		if err := proto.Unmarshal(b, a); err != nil {
			return nil, fmt.Errorf("decode account %s: %w", id, err)
		}
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetName() < out[j].GetName() })
	return out, nil
}

// CountAccounts and CountAssociations are how many accounts and
// associations project holds (HLEN).
func (r *Repo) CountAccounts(ctx context.Context, project string) (int64, error) {
	return r.hlen(ctx, KeyAccountsPrefix+project)
}

// CountAssociations: see CountAccounts.
func (r *Repo) CountAssociations(ctx context.Context, project string) (int64, error) {
	return r.hlen(ctx, KeyAssocsPrefix+project)
}

func (r *Repo) hlen(ctx context.Context, key string) (int64, error) {
	n, err := r.st.Client().HLen(ctx, r.st.Key(key)).Result()
	if err != nil {
		return 0, fmt.Errorf("%s: %w: %w", key, errs.Unavailable, err)
	}
	return n, nil
}

// Association returns user's association with account in project, with
// default_account set when account is their default; errs.NotFound when
// there is none.
func (r *Repo) Association(ctx context.Context, project, user, account string) (*loomv1.Association, error) {
	a := &loomv1.Association{}
	if err := r.hget(ctx, KeyAssocsPrefix+project, AssocField(user, account), a); err != nil {
		return nil, fmt.Errorf("association user=%s account=%s of project %s: %w", user, account, project, err)
	}
	def, err := r.DefaultAccount(ctx, project, user)
	if err != nil && !errors.Is(err, errs.NotFound) {
		return nil, err
	}
	a.DefaultAccount = def == account
	return a, nil
}

// AssociationAsStored returns user's association with account in project
// (default_account unset: see DefaultAccount) and its bytes as stored, for
// a write conditioned on them (ExpectAssociation); errs.NotFound when
// there is none.
func (r *Repo) AssociationAsStored(ctx context.Context, project, user, account string) (*loomv1.Association, []byte, error) {
	what := fmt.Sprintf("association user=%s account=%s of project %s", user, account, project)
	b, err := r.st.HGet(ctx, KeyAssocsPrefix+project, AssocField(user, account))
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil, fmt.Errorf("%s: %w", what, errs.NotFound)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w: %w", what, errs.Unavailable, err)
	}
	a := &loomv1.Association{}
	if err := proto.Unmarshal(b, a); err != nil {
		return nil, nil, fmt.Errorf("%s: decode: %w", what, err)
	}
	return a, b, nil
}

// ExpectAssociation makes tx apply only while user's association with
// account is stored as stored (the bytes AssociationAsStored returned;
// nil: absent): Apply then fails with an error wrapping
// store.ErrConflict, writing nothing, when another write set or removed it
// in between.
func ExpectAssociation(tx *store.Tx, project, user, account string, stored []byte) {
	tx.IfHField(KeyAssocsPrefix+project, AssocField(user, account), stored)
}

// BoundAssociations makes tx apply only while project holds fewer than
// limit associations (store.Tx.IfHLenBelow): a tx that adds one keeps the
// bound under racing adds, the later ones failing with store.ErrConflict.
func BoundAssociations(tx *store.Tx, project string, limit int64) {
	tx.IfHLenBelow(KeyAssocsPrefix+project, limit)
}

// ExpectDefaultAccount makes tx apply only while user's default account
// in project is def (what DefaultAccount returned; "": none), as
// ExpectAssociation.
func ExpectDefaultAccount(tx *store.Tx, project, user, def string) {
	var want []byte
	if def != "" {
		want = []byte(def)
	}
	tx.IfHField(KeyAssocDefaultPrefix+project, user, want)
}

// Associations returns project's associations, by user then account, each
// with default_account set as the user's default says.
func (r *Repo) Associations(ctx context.Context, project string) ([]*loomv1.Association, error) {
	raw, err := r.st.HGetAll(ctx, KeyAssocsPrefix+project)
	if err != nil {
		return nil, fmt.Errorf("associations of %s: %w: %w", project, errs.Unavailable, err)
	}
	defs, err := r.st.HGetAll(ctx, KeyAssocDefaultPrefix+project)
	if err != nil {
		return nil, fmt.Errorf("default accounts of %s: %w: %w", project, errs.Unavailable, err)
	}
	out := make([]*loomv1.Association, 0, len(raw))
	for field, b := range raw {
		a := &loomv1.Association{}
		if err := proto.Unmarshal(b, a); err != nil {
			return nil, fmt.Errorf("decode association %s: %w", field, err)
		}
		a.DefaultAccount = string(defs[a.GetUser()]) == a.GetAccount()
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool {
		return AssocField(out[i].GetUser(), out[i].GetAccount()) < AssocField(out[j].GetUser(), out[j].GetAccount())
	})
	return out, nil
}

// DefaultAccount returns user's default account in project; errs.NotFound
// when they have no association there.
func (r *Repo) DefaultAccount(ctx context.Context, project, user string) (string, error) {
	b, err := r.st.HGet(ctx, KeyAssocDefaultPrefix+project, user)
	if errors.Is(err, store.ErrNotFound) {
		return "", fmt.Errorf("default account of %s in %s: %w", user, project, errs.NotFound)
	}
	if err != nil {
		return "", fmt.Errorf("default account of %s in %s: %w: %w", user, project, errs.Unavailable, err)
	}
	return string(b), nil
}

// PutAccount adds the account (its id the last part of its name) to tx.
func PutAccount(tx *store.Tx, project string, a *loomv1.Account) error {
	b, err := proto.Marshal(a)
	if err != nil {
		return fmt.Errorf("encode account %s: %w", a.GetName(), err)
	}
	tx.HSet(KeyAccountsPrefix+project, a.GetName()[strings.LastIndex(a.GetName(), "/")+1:], b)
	return nil
}

// DeleteAccount removes the account id of project in tx.
func DeleteAccount(tx *store.Tx, project, id string) { tx.HDel(KeyAccountsPrefix+project, id) }

// DeleteAssociation removes user's association with account in tx; last
// removes the user's default account too (they have no other).
func DeleteAssociation(tx *store.Tx, project, user, account string, last bool) {
	tx.HDel(KeyAssocsPrefix+project, AssocField(user, account))
	if last {
		tx.HDel(KeyAssocDefaultPrefix+project, user)
	}
}

// PutAssociation adds the association to tx; with default_account set it
// also makes its account the user's default.
func PutAssociation(tx *store.Tx, project string, a *loomv1.Association) error {
	stored := proto.Clone(a).(*loomv1.Association)
	stored.DefaultAccount = false
	b, err := proto.Marshal(stored)
	if err != nil {
		return fmt.Errorf("encode association %s: %w", AssocField(a.GetUser(), a.GetAccount()), err)
	}
	tx.HSet(KeyAssocsPrefix+project, AssocField(a.GetUser(), a.GetAccount()), b)
	if a.GetDefaultAccount() {
		tx.HSet(KeyAssocDefaultPrefix+project, a.GetUser(), []byte(a.GetAccount()))
	}
	return nil
}
