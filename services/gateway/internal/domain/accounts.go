package domain

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/resname"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// Slurm accounts and associations (sacctmgr): an account groups users for
// fair share and limits; an association is one user in one account, with
// Slurm's per-user limits (MaxJobs, MaxSubmitJobs). Both belong to a
// project: a Loom project plays the part of Slurm's cluster in the
// accounting database.

// RootAccount is the account every project has, at the top of its tree
// (Slurm's root): it is never stored and cannot be created.
const RootAccount = "root"

// Bounds on what one project may hold and on the values of an association:
// refusals name the limit (ResourceExhausted for counts, InvalidArgument
// for values).
const (
	// MaxAccountsPerProject bounds a project's accounts (root not counted).
	MaxAccountsPerProject = 1000
	// MaxAssociationsPerProject bounds a project's associations.
	MaxAssociationsPerProject = 10000
	// MaxAssocJobs bounds MaxJobs and MaxSubmitJobs (Slurm's own ceiling
	// is far above any real use; one past it is a typo).
	MaxAssocJobs = 1_000_000
	// MaxFairshare bounds an account's or association's fair-share shares.
	MaxFairshare = 1_000_000
	// MaxAccountTextBytes bounds an account's description and organization.
	MaxAccountTextBytes = 256
)

// MsgSubmitLimit is Slurm's reason for refusing a submission past the
// association's MaxSubmitJobs (sbatch prints it after "Batch job submission
// failed: ").
const MsgSubmitLimit = "Job violates accounting/QOS policy (job submit limit, user's size and/or time limits)"

// accountID is what Slurm accepts as an account name, lower-cased as
// Slurm's database keeps it: letters, digits, '_', '-' and '.', at most 64.
var accountID = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,63}$`)

// userName is a login name as useradd takes it (and sacctmgr shows it).
var userName = regexp.MustCompile(`^[a-z_][a-z0-9_.-]{0,31}\$?$`)

// AccountName is the account's resource name, "projects/{project}/accounts/{id}".
func AccountName(project, id string) string { return "projects/" + project + "/accounts/" + id }

// AccountID returns the id of an account given as a bare id or as a full
// name under project; ok is false when a full name names another project
// or another collection.
func AccountID(project, name string) (string, bool) {
	if !strings.Contains(name, "/") {
		return name, true
	}
	prefix := "projects/" + project + "/accounts/"
	if !strings.HasPrefix(name, prefix) {
		return "", false
	}
	return strings.TrimPrefix(name, prefix), true
}

// DefaultRootAccount is root as ListAccounts shows it (Slurm's "default
// root account").
func DefaultRootAccount(project string) *loomv1.Account {
	return &loomv1.Account{Name: AccountName(project, RootAccount), Description: "default root account", Organization: RootAccount}
}

// AcceptAccount checks a CreateAccount request (every problem at once,
// InvalidArgument naming the field) and returns the project id and the
// account to store: its name in full, the description defaulting to its
// id, the parent to root and the organization to the parent's (or its
// own id under root), as sacctmgr add account does.
func AcceptAccount(req *loomv1.CreateAccountRequest) (string, *loomv1.Account, error) {
	var v errs.Validator
	p, err := resname.ParseProject(req.GetParent())
	if err != nil {
		v.Add("parent", "%v", err)
	}
	in := req.GetAccount()
	if in == nil {
		v.Add("account", "required")
		return "", nil, v.Err()
	}
	id, ok := AccountID(p.ID, in.GetName())
	switch {
	case in.GetName() == "":
		v.Add("account.name", "required (an account id such as physics, or projects/%s/accounts/physics)", p.ID)
	case !ok:
		v.Add("account.name", "%s is not an account of %s", clip(in.GetName()), req.GetParent())
	case !accountID.MatchString(id):
		v.Add("account.name", "%s is not an account id: lower-case letters, digits, '_', '-' and '.', starting with a letter or digit, at most 64", clip(id))
	}
	parent := in.GetParentAccount()
	if parent == "" {
		parent = RootAccount
	}
	if pid, ok := AccountID(p.ID, parent); !ok || !accountID.MatchString(pid) {
		v.Add("account.parent_account", "%s is not an account id of %s", clip(parent), req.GetParent())
	} else {
		parent = pid
	}
	checkText(&v, "account.description", in.GetDescription(), MaxAccountTextBytes)
	checkText(&v, "account.organization", in.GetOrganization(), MaxAccountTextBytes)
	v.Check(in.GetFairshare() >= 0 && in.GetFairshare() <= MaxFairshare, "account.fairshare",
		"%d is outside 0..%d (the limit)", in.GetFairshare(), MaxFairshare)
	if err := v.Err(); err != nil {
		return "", nil, err
	}
	out := &loomv1.Account{Name: AccountName(p.ID, id), Description: in.GetDescription(),
		Organization: strings.ToLower(in.GetOrganization()), ParentAccount: parent, Fairshare: in.GetFairshare()}
	if out.Description == "" {
		out.Description = id
	}
	if out.Organization == "" {
		out.Organization = id
		if parent != RootAccount {
			out.Organization = parent
		}
	}
	if out.Fairshare == 0 {
		out.Fairshare = 1 // Slurm's default share
	}
	return p.ID, out, nil
}

// AcceptAssociation checks a SetAssociation request (every problem at
// once, InvalidArgument naming the field and the limit) and returns the
// project id and the association to store, its account an id.
func AcceptAssociation(req *loomv1.SetAssociationRequest) (string, *loomv1.Association, error) {
	var v errs.Validator
	p, err := resname.ParseProject(req.GetParent())
	if err != nil {
		v.Add("parent", "%v", err)
	}
	in := req.GetAssociation()
	if in == nil {
		v.Add("association", "required")
		return "", nil, v.Err()
	}
	id, ok := AccountID(p.ID, in.GetAccount())
	switch {
	case in.GetAccount() == "":
		v.Add("association.account", "required")
	case !ok || !accountID.MatchString(id):
		v.Add("association.account", "%s is not an account id of %s", clip(in.GetAccount()), req.GetParent())
	}
	switch {
	case in.GetUser() == "":
		v.Add("association.user", "required")
	case !userName.MatchString(in.GetUser()):
		v.Add("association.user", "%s is not a login name: lower-case letters, digits, '_', '-' and '.', at most 32", clip(in.GetUser()))
	}
	v.Check(in.GetMaxJobs() >= 0 && in.GetMaxJobs() <= MaxAssocJobs, "association.max_jobs",
		"%d is outside 0..%d (0: no limit; %d is the limit)", in.GetMaxJobs(), MaxAssocJobs, MaxAssocJobs)
	v.Check(in.GetMaxSubmitJobs() >= 0 && in.GetMaxSubmitJobs() <= MaxAssocJobs, "association.max_submit_jobs",
		"%d is outside 0..%d (0: no limit; %d is the limit)", in.GetMaxSubmitJobs(), MaxAssocJobs, MaxAssocJobs)
	v.Check(in.GetFairshare() >= 0 && in.GetFairshare() <= MaxFairshare, "association.fairshare",
		"%d is outside 0..%d (the limit)", in.GetFairshare(), MaxFairshare)
	if err := v.Err(); err != nil {
		return "", nil, err
	}
	out := &loomv1.Association{Account: id, User: in.GetUser(), MaxJobs: in.GetMaxJobs(),
		MaxSubmitJobs: in.GetMaxSubmitJobs(), Fairshare: in.GetFairshare(), DefaultAccount: in.GetDefaultAccount()}
	if out.Fairshare == 0 {
		out.Fairshare = 1
	}
	return p.ID, out, nil
}

// CheckListAssociations checks ListAssociations' filters.
func CheckListAssociations(v *errs.Validator, project string, req *loomv1.ListAssociationsRequest) string {
	if u := req.GetUser(); u != "" && !userName.MatchString(u) {
		v.Add("user", "%s is not a login name", clip(u))
	}
	acct := req.GetAccount()
	if acct != "" {
		id, ok := AccountID(project, acct)
		if !ok || !accountID.MatchString(id) {
			v.Add("account", "%s is not an account id of projects/%s", clip(acct), project)
		}
		acct = id
	}
	return acct
}

// SubmitLimitError is the refusal of a submission past the association's
// MaxSubmitJobs: ResourceExhausted, with Slurm's reason first and the
// limit, its value and what was counted after it.
func SubmitLimitError(user, account string, limit, active, adding int) error {
	return fmt.Errorf("%s: MaxSubmitJobs=%d of association user=%s account=%s: %d pending or running, %d more submitted: %w",
		MsgSubmitLimit, limit, user, account, active, adding, errs.ResourceExhausted)
}
