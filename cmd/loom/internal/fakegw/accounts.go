package fakegw

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/paging"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// AccountService as the gateway serves it: root is always there; an
// account's defaults (description and organization its id, parent root,
// fair share 1) are filled in; a user's first association is their
// default account.

// changedMeanwhile is the Aborted an account write answers while
// AbortAccountWrites is above 0 (counting it down), after running
// Meanwhile, the write that won the race; the caller holds g.mu.
func (g *Gateway) changedMeanwhile() error {
	if g.AbortAccountWrites <= 0 {
		return nil
	}
	g.AbortAccountWrites--
	if g.Meanwhile != nil {
		g.Meanwhile(g)
	}
	return status.Error(codes.Aborted, "changed meanwhile (another call wrote it); nothing was written: read again and retry: aborted")
}

// project is the id of a "projects/{id}" parent.
func project(parent string) string { return strings.TrimPrefix(parent, "projects/") }

// CreateAccount adds r's account (AlreadyExists for root or one there).
func (g *Gateway) CreateAccount(_ context.Context, r *loomv1.CreateAccountRequest) (*loomv1.Account, error) {
	defer g.lock(r)()
	if err := g.changedMeanwhile(); err != nil {
		return nil, err
	}
	p := project(r.GetParent())
	a := proto.Clone(r.GetAccount()).(*loomv1.Account)
	id := shortName(a.GetName())
	a.Name = "projects/" + p + "/accounts/" + id
	if id == "root" || g.account(a.GetName()) != nil {
		return nil, status.Errorf(codes.AlreadyExists, "account %s: already exists", a.GetName())
	}
	if a.ParentAccount == "" {
		a.ParentAccount = "root"
	}
	if a.ParentAccount != "root" && g.account("projects/"+p+"/accounts/"+a.ParentAccount) == nil {
		return nil, errs.ToStatus(errs.Invalid("account.parent_account", "no account %q in project %s", a.ParentAccount, p))
	}
	if a.Description == "" {
		a.Description = id
	}
	if a.Organization == "" {
		a.Organization = id
		if a.ParentAccount != "root" {
			a.Organization = a.ParentAccount
		}
	}
	if a.Fairshare == 0 {
		a.Fairshare = 1
	}
	g.Accounts = append(g.Accounts, a)
	return proto.Clone(a).(*loomv1.Account), nil
}

func (g *Gateway) account(name string) *loomv1.Account {
	for _, a := range g.Accounts {
		if a.GetName() == name {
			return a
		}
	}
	return nil
}

// ListAccounts lists root and the project's accounts, by name, paged.
func (g *Gateway) ListAccounts(_ context.Context, r *loomv1.ListAccountsRequest) (*loomv1.ListAccountsResponse, error) {
	defer g.lock(r)()
	p := project(r.GetParent())
	out := []*loomv1.Account{{Name: "projects/" + p + "/accounts/root", Description: "default root account", Organization: "root"}}
	for _, a := range under(g.Accounts, r.GetParent(), "accounts") {
		out = append(out, proto.Clone(a).(*loomv1.Account))
	}
	page, next, err := paging.List(r, out, (*loomv1.Account).GetName)
	return &loomv1.ListAccountsResponse{Accounts: page, NextPageToken: next}, errs.ToStatus(err)
}

// UpdateAccount sets the fields r's mask names on an account of the
// project (NotFound for one it does not have; InvalidArgument for root, an
// unknown path or a parent that is not there).
func (g *Gateway) UpdateAccount(_ context.Context, r *loomv1.UpdateAccountRequest) (*loomv1.Account, error) {
	defer g.lock(r)()
	if err := g.changedMeanwhile(); err != nil {
		return nil, err
	}
	in := r.GetAccount()
	a := g.account(in.GetName())
	switch {
	case shortName(in.GetName()) == "root":
		return nil, errs.ToStatus(errs.Invalid("account.name", "root is the top of every project's tree and is not changed"))
	case a == nil:
		return nil, status.Errorf(codes.NotFound, "account %s: not found", in.GetName())
	case len(r.GetUpdateMask().GetPaths()) == 0:
		return nil, errs.ToStatus(errs.Invalid("update_mask", "name at least one of description, organization, parent_account, fairshare"))
	}
	p := strings.TrimSuffix(in.GetName(), "/"+shortName(in.GetName()))
	for _, path := range r.GetUpdateMask().GetPaths() {
		switch path {
		case "description":
			a.Description = in.GetDescription()
		case "organization":
			a.Organization = in.GetOrganization()
		case "parent_account":
			if in.GetParentAccount() != "root" && g.account(p+"/"+in.GetParentAccount()) == nil {
				return nil, errs.ToStatus(errs.Invalid("account.parent_account", "no account %q", in.GetParentAccount()))
			}
			a.ParentAccount = in.GetParentAccount()
		case "fairshare":
			a.Fairshare = max(in.GetFairshare(), 1)
		case "grp_tres", "grp_tres.cpu", "grp_tres.mem_mb", "grp_tres.node", "grp_tres.gpu":
			// As the gateway's mask: one TRES, or all of them.
			t := proto.Clone(a.GetGrpTres()).(*loomv1.Tres)
			if t == nil {
				t = &loomv1.Tres{}
			}
			all := path == "grp_tres"
			// An absent value clears that TRES; 0 is a limit of 0.
			set := proto.Clone(in.GetGrpTres()).(*loomv1.Tres)
			if set == nil {
				set = &loomv1.Tres{}
			}
			if all || path == "grp_tres.cpu" {
				t.Cpu = set.Cpu
			}
			if all || path == "grp_tres.mem_mb" {
				t.MemMb = set.MemMb
			}
			if all || path == "grp_tres.node" {
				t.Node = set.Node
			}
			if all || path == "grp_tres.gpu" {
				t.Gpu = set.Gpu
			}
			a.GrpTres = t
			if proto.Equal(t, &loomv1.Tres{}) {
				a.GrpTres = nil
			}
		default:
			return nil, errs.ToStatus(errs.Invalid("update_mask.paths", "%q cannot be updated", path))
		}
	}
	return proto.Clone(a).(*loomv1.Account), nil
}

// DeleteAccount removes an account without sub-accounts or users
// (FailedPrecondition otherwise, NotFound for one it does not have).
func (g *Gateway) DeleteAccount(_ context.Context, r *loomv1.DeleteAccountRequest) (*loomv1.Account, error) {
	defer g.lock(r)()
	if err := g.changedMeanwhile(); err != nil {
		return nil, err
	}
	a := g.account(r.GetName())
	if a == nil {
		return nil, status.Errorf(codes.NotFound, "account %s: not found", r.GetName())
	}
	id := shortName(a.GetName())
	for _, o := range g.Accounts {
		if o.GetParentAccount() == id {
			return nil, status.Errorf(codes.FailedPrecondition, "account %s has sub-accounts (%s)", id, shortName(o.GetName()))
		}
	}
	for _, o := range g.Associations {
		if o.GetAccount() == id {
			return nil, status.Errorf(codes.FailedPrecondition, "account %s has users (%s)", id, o.GetUser())
		}
	}
	g.Accounts = slices.DeleteFunc(g.Accounts, func(o *loomv1.Account) bool { return o == a })
	return proto.Clone(a).(*loomv1.Account), nil
}

// DeleteAssociation removes r's association (NotFound for one it does not
// have; Aborted when r's etag is set and is not the association's;
// FailedPrecondition for a default account while the user has others).
func (g *Gateway) DeleteAssociation(_ context.Context, r *loomv1.DeleteAssociationRequest) (*loomv1.Association, error) {
	defer g.lock(r)()
	if err := g.changedMeanwhile(); err != nil {
		return nil, err
	}
	var found *loomv1.Association
	others := 0
	for _, o := range g.Associations {
		switch {
		case o.GetUser() == r.GetUser() && o.GetAccount() == r.GetAccount():
			found = o
		case o.GetUser() == r.GetUser():
			others++
		}
	}
	switch {
	case found == nil:
		return nil, status.Errorf(codes.NotFound, "association user=%s account=%s: not found", r.GetUser(), r.GetAccount())
	case r.GetEtag() != "" && assocEtag(found) != r.GetEtag():
		return nil, status.Error(codes.Aborted, "the association changed meanwhile (another call wrote it); nothing was deleted: read it again and decide again: aborted")
	case found.GetDefaultAccount() && others > 0:
		return nil, status.Errorf(codes.FailedPrecondition, "account %s is user %s's default account; make another one the default first", r.GetAccount(), r.GetUser())
	}
	g.Associations = slices.DeleteFunc(g.Associations, func(o *loomv1.Association) bool { return o == found })
	return proto.Clone(found).(*loomv1.Association), nil
}

// SetAssociation adds or replaces r's association (InvalidArgument for an
// account the project does not have).
func (g *Gateway) SetAssociation(_ context.Context, r *loomv1.SetAssociationRequest) (*loomv1.Association, error) {
	defer g.lock(r)()
	if err := g.changedMeanwhile(); err != nil {
		return nil, err
	}
	p := project(r.GetParent())
	a := proto.Clone(r.GetAssociation()).(*loomv1.Association)
	if a.GetAccount() != "root" && g.account("projects/"+p+"/accounts/"+a.GetAccount()) == nil {
		return nil, errs.ToStatus(errs.Invalid("association.account", "no account %q in project %s", a.GetAccount(), p))
	}
	if sent := a.GetEtag(); sent != "" {
		i := slices.IndexFunc(g.Associations, func(o *loomv1.Association) bool {
			return o.GetUser() == a.GetUser() && o.GetAccount() == a.GetAccount()
		})
		if i < 0 || assocEtag(g.Associations[i]) != sent {
			return nil, status.Error(codes.Aborted, "the association changed meanwhile (another call wrote it); nothing was written: read again and retry: aborted")
		}
	}
	if r.GetCreateOnly() && slices.ContainsFunc(g.Associations, func(o *loomv1.Association) bool {
		return o.GetUser() == a.GetUser() && o.GetAccount() == a.GetAccount()
	}) {
		return nil, status.Error(codes.AlreadyExists, "association exists; nothing was written (create_only): already exists")
	}
	a.Etag = ""
	if a.Fairshare == 0 {
		a.Fairshare = 1
	}
	// As the gateway keeps them: sorted, once each.
	slices.Sort(a.Qos)
	a.Qos = slices.Compact(a.Qos)
	hasDefault, at := false, -1
	for i, o := range g.Associations {
		if o.GetUser() == a.GetUser() {
			hasDefault = hasDefault || o.GetDefaultAccount()
			if o.GetAccount() == a.GetAccount() {
				at = i
				a.DefaultAccount = a.DefaultAccount || o.GetDefaultAccount()
			}
		}
	}
	if !hasDefault {
		a.DefaultAccount = true
	}
	if a.DefaultAccount {
		for _, o := range g.Associations {
			if o.GetUser() == a.GetUser() {
				o.DefaultAccount = false
			}
		}
	}
	if at >= 0 {
		g.Associations[at] = a
	} else {
		g.Associations = append(g.Associations, a)
	}
	out := proto.Clone(a).(*loomv1.Association)
	out.Etag = assocEtag(a)
	return out, nil
}

// assocEtag is a's etag as the gateway's: a hash of its values but
// default_account and etag.
func assocEtag(a *loomv1.Association) string {
	vals := proto.Clone(a).(*loomv1.Association)
	vals.DefaultAccount, vals.Etag = false, ""
	b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(vals)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}

// ListAssociations lists the associations by user then account, filtered
// by r's user and account, paged.
func (g *Gateway) ListAssociations(_ context.Context, r *loomv1.ListAssociationsRequest) (*loomv1.ListAssociationsResponse, error) {
	defer g.lock(r)()
	var out []*loomv1.Association
	for _, a := range g.Associations {
		if (r.GetUser() == "" || a.GetUser() == r.GetUser()) && (r.GetAccount() == "" || a.GetAccount() == shortName(r.GetAccount())) {
			c := proto.Clone(a).(*loomv1.Association)
			c.Etag = assocEtag(a)
			out = append(out, c)
		}
	}
	page, next, err := paging.List(r, out, func(a *loomv1.Association) string { return a.GetUser() + "/" + a.GetAccount() })
	return &loomv1.ListAssociationsResponse{Associations: page, NextPageToken: next, OpenQos: []string{"low", "normal"}}, errs.ToStatus(err)
}
