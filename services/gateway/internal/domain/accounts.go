package domain

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/resname"
	"github.com/loom-ml/loom/libs/slurmspec"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"google.golang.org/protobuf/proto"
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
	// MaxAssocQOS bounds the QOS one association grants (and -open-qos).
	MaxAssocQOS = 32
)

// DefaultOpenQOS is -open-qos's default: the QOS every member of a project
// may ask for without a grant. They are the scheduler's default table's
// low and normal; its high, which may preempt low, has to be granted
// (sacctmgr modify user NAME set QOS+=high), as under Slurm's
// AccountingStorageEnforce=qos.
const DefaultOpenQOS = "low,normal"

// MsgInvalidQOS is Slurm's reason for refusing a submission whose QOS the
// user may not use (sbatch prints it after "Batch job submission failed: ").
const MsgInvalidQOS = "Invalid qos specification"

// qosName is a QOS name as Slurm keeps it, lower-cased (its lookups ignore
// case): letters, digits, '_', '-' and '.', at most 64.
var qosName = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,63}$`)

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
	grp := CheckTRES(&v, "account.grp_tres", in.GetGrpTres())
	if err := v.Err(); err != nil {
		return "", nil, err
	}
	out := &loomv1.Account{Name: AccountName(p.ID, id), Description: in.GetDescription(),
		Organization: strings.ToLower(in.GetOrganization()), ParentAccount: parent, Fairshare: in.GetFairshare(), GrpTres: grp}
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

// accountPaths are the fields UpdateAccount may change, by the names a
// mask may give them (proto and JSON).
var accountPaths = map[string]string{
	"description": "description", "organization": "organization",
	"parent_account": "parent_account", "parentAccount": "parent_account", "fairshare": "fairshare",
	"grp_tres": "grp_tres", "grpTres": "grp_tres",
	"grp_tres.cpu": "grp_tres.cpu", "grpTres.cpu": "grp_tres.cpu",
	"grp_tres.mem_mb": "grp_tres.mem_mb", "grpTres.memMb": "grp_tres.mem_mb",
	"grp_tres.node": "grp_tres.node", "grpTres.node": "grp_tres.node",
	"grp_tres.gpu": "grp_tres.gpu", "grpTres.gpu": "grp_tres.gpu",
}

// accountPathList is accountPaths' canonical names, for messages.
const accountPathList = "description, organization, parent_account, fairshare, grp_tres, grp_tres.cpu, grp_tres.mem_mb, grp_tres.node, grp_tres.gpu"

// AcceptAccountUpdate checks an UpdateAccount request (every problem at
// once, InvalidArgument naming the field and the limit) and returns the
// project id, the account's id and the change: apply sets the named fields
// on the stored account (a copy), parent the new parent's id when the mask
// names parent_account ("" otherwise), for the caller to check it exists
// and is not under the account. root is never stored, so never updated.
func AcceptAccountUpdate(req *loomv1.UpdateAccountRequest) (project, id, parent string, apply func(*loomv1.Account) *loomv1.Account, err error) {
	var v errs.Validator
	in := req.GetAccount()
	pid, aid := parseAccountName(&v, "account.name", in.GetName())
	paths := map[string]bool{}
	mask := req.GetUpdateMask().GetPaths()
	if len(mask) == 0 {
		v.Add("update_mask", "name at least one of %s", accountPathList)
	}
	if len(mask) > len(accountPaths) {
		v.Add("update_mask", "%d paths, more than the limit of %d", len(mask), len(accountPaths))
		mask = nil
	}
	for i, p := range mask {
		canon, ok := accountPaths[p]
		if !ok {
			v.Add(fmt.Sprintf("update_mask.paths[%d]", i), "%s cannot be updated: one of %s", clip(p), accountPathList)
			continue
		}
		paths[canon] = true
	}
	if paths["description"] {
		checkText(&v, "account.description", in.GetDescription(), MaxAccountTextBytes)
	}
	if paths["organization"] {
		checkText(&v, "account.organization", in.GetOrganization(), MaxAccountTextBytes)
	}
	if paths["parent_account"] {
		parent = in.GetParentAccount()
		if parent == "" {
			parent = RootAccount
		}
		if p, ok := AccountID(pid, parent); !ok || !accountID.MatchString(p) {
			v.Add("account.parent_account", "%s is not an account id of projects/%s", clip(parent), pid)
		} else if parent = p; parent == aid {
			v.Add("account.parent_account", "an account cannot be its own parent (%s)", aid)
		}
	}
	if paths["fairshare"] {
		v.Check(in.GetFairshare() >= 0 && in.GetFairshare() <= MaxFairshare, "account.fairshare",
			"%d is outside 0..%d (the limit)", in.GetFairshare(), MaxFairshare)
	}
	grp := CheckTRES(&v, "account.grp_tres", in.GetGrpTres())
	if err := v.Err(); err != nil {
		return "", "", "", nil, err
	}
	apply = func(cur *loomv1.Account) *loomv1.Account {
		next := proto.Clone(cur).(*loomv1.Account)
		if paths["description"] {
			next.Description = cmp.Or(in.GetDescription(), aid)
		}
		if paths["organization"] {
			next.Organization = cmp.Or(strings.ToLower(in.GetOrganization()), aid)
		}
		if paths["parent_account"] {
			next.ParentAccount = parent
		}
		if paths["fairshare"] {
			next.Fairshare = max(in.GetFairshare(), 1) // 0: Slurm's default share
		}
		next.GrpTres = mergeTRES(next.GetGrpTres(), grp, paths)
		return next
	}
	return pid, aid, parent, apply, nil
}

// parseAccountName checks field, an account's full name other than root's
// (root is never stored, so never changed or deleted), and returns its
// project and id.
func parseAccountName(v *errs.Validator, field, name string) (project, id string) {
	rest, ok := strings.CutPrefix(name, "projects/")
	project, id, _ = strings.Cut(rest, "/accounts/")
	_, projErr := resname.ParseProject("projects/" + project)
	switch {
	case name == "":
		v.Add(field, "required: projects/{project}/accounts/{account}")
	case !ok || !strings.Contains(rest, "/accounts/"):
		v.Add(field, "%s is not projects/{project}/accounts/{account}", clip(name))
	case projErr != nil:
		v.Add(field, "%v", projErr)
	case !accountID.MatchString(id):
		v.Add(field, "%s is not an account id: lower-case letters, digits, '_', '-' and '.', starting with a letter or digit, at most 64", clip(id))
	case id == RootAccount:
		v.Add(field, "root is the top of every project's tree and is neither changed nor deleted")
	}
	return project, id
}

// AcceptAccountDelete checks a DeleteAccount request and returns the
// project id and the account's id.
func AcceptAccountDelete(req *loomv1.DeleteAccountRequest) (project, id string, err error) {
	var v errs.Validator
	project, id = parseAccountName(&v, "name", req.GetName())
	return project, id, v.Err()
}

// AcceptAssociationDelete checks a DeleteAssociation request (every
// problem at once) and returns the project id, the user and the account id.
func AcceptAssociationDelete(req *loomv1.DeleteAssociationRequest) (project, user, account string, err error) {
	var v errs.Validator
	p, perr := resname.ParseProject(req.GetParent())
	if perr != nil {
		v.Add("parent", "%v", perr)
	}
	user = req.GetUser()
	v.Check(userName.MatchString(user), "user", "%s is not a login name: lower-case letters, digits, '_', '-' and '.', at most 32", clip(user))
	account, ok := AccountID(p.ID, req.GetAccount())
	switch {
	case req.GetAccount() == "":
		v.Add("account", "required")
	case !ok || !accountID.MatchString(account):
		v.Add("account", "%s is not an account id of %s", clip(req.GetAccount()), req.GetParent())
	}
	checkText(&v, "etag", req.GetEtag(), MaxEtagBytes)
	return p.ID, user, account, v.Err()
}

// AcceptAssociation checks a SetAssociation request (every problem at
// once, InvalidArgument naming the field and the limit) and returns the
// project id and the association to store, its account an id and its QOS
// lower-cased and sorted. open are the QOS open to every member: a
// default_qos must be one of them or granted by the association.
func AcceptAssociation(req *loomv1.SetAssociationRequest, open []string) (string, *loomv1.Association, error) {
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
	checkText(&v, "association.etag", in.GetEtag(), MaxEtagBytes)
	grp := CheckTRES(&v, "association.grp_tres", in.GetGrpTres())
	perJob := CheckTRES(&v, "association.max_tres_per_job", in.GetMaxTresPerJob())
	v.Check(in.GetMaxWallMinutes() >= 0 && in.GetMaxWallMinutes() <= slurmspec.MaxWallMinutes, "association.max_wall_minutes",
		"%d is outside 0..%d (absent: no limit; 0: no job runs; %d minutes, 100 years, is the limit)", in.GetMaxWallMinutes(), slurmspec.MaxWallMinutes, slurmspec.MaxWallMinutes)
	qos := checkQOSList(&v, "association.qos", in.GetQos())
	defQOS := strings.ToLower(in.GetDefaultQos())
	if defQOS != "" && !QOSAllowed(defQOS, open, qos) {
		v.Add("association.default_qos", "%s is neither granted by the association (qos: %s) nor open to every member (%s)",
			clip(defQOS), listOrNone(qos), listOrNone(open))
	}
	if err := v.Err(); err != nil {
		return "", nil, err
	}
	out := &loomv1.Association{Account: id, User: in.GetUser(), MaxJobs: in.GetMaxJobs(),
		MaxSubmitJobs: in.GetMaxSubmitJobs(), Fairshare: in.GetFairshare(), DefaultAccount: in.GetDefaultAccount(),
		Qos: qos, DefaultQos: defQOS, GrpTres: grp, MaxTresPerJob: perJob}
	if in.MaxWallMinutes != nil {
		// Present, 0 included: 0 is a limit (Slurm's MaxWall=0).
		out.MaxWallMinutes = proto.Int32(in.GetMaxWallMinutes())
	}
	if out.Fairshare == 0 {
		out.Fairshare = 1
	}
	return p.ID, out, nil
}

// AssociationEtag returns the strong etag (AIP-154) of a's values: a hash
// of the deterministic encoding of every field but default_account (the
// user's default, kept apart from the association) and etag itself, so
// that a change of which account is the user's default leaves it alone
// while any change of its values changes it. a is
// not changed.
func AssociationEtag(a *loomv1.Association) string {
	vals := proto.Clone(a).(*loomv1.Association)
	vals.DefaultAccount, vals.Etag = false, ""
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(vals)
	if err != nil {
		// An association always encodes; an etag that matches nothing
		// refuses a conditional write rather than letting it by.
		return "unencodable"
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}

// CheckTRES checks a TRES limit (each value within slurmspec's bounds,
// InvalidArgument naming field.cpu and the like) and returns it to store:
// a copy, nil when it sets none.
func CheckTRES(v *errs.Validator, field string, t *loomv1.Tres) *loomv1.Tres {
	tr := slurmspec.TRESFromProto(t)
	ok := true
	tr.Check(func(f, msg string) { v.Add(field+"."+f, "%s", msg); ok = false })
	if !ok {
		return nil
	}
	return tr.Proto()
}

// mergeTRES is cur with the values of in that paths name (grp_tres: all
// of them; grp_tres.gpu: that one), nil when it sets none.
func mergeTRES(cur, in *loomv1.Tres, paths map[string]bool) *loomv1.Tres {
	all := paths["grp_tres"]
	out, set := slurmspec.TRESFromProto(cur), slurmspec.TRESFromProto(in)
	for i, f := range []string{"grp_tres.cpu", "grp_tres.mem_mb", "grp_tres.node", "grp_tres.gpu"} {
		if all || paths[f] {
			v, ok := set.Limit(i)
			out.SetLimit(i, v, ok)
		}
	}
	return out.Proto()
}

// ParseQOSList reads a comma-separated QOS list (-open-qos): lower-cased,
// sorted, without repeats, never nil; "none" is the empty list. InvalidArgument names
// option and the bad name or the limit.
func ParseQOSList(option, list string) ([]string, error) {
	if strings.TrimSpace(list) == "none" {
		return []string{}, nil
	}
	var v errs.Validator
	var names []string
	for _, n := range strings.Split(list, ",") {
		if n = strings.TrimSpace(n); n != "" {
			names = append(names, n)
		}
	}
	out := checkQOSList(&v, option, names)
	if out == nil {
		out = []string{}
	}
	return out, v.Err()
}

// checkQOSList checks a list of QOS names (at most MaxAssocQOS, each a
// QOS name) and returns it lower-cased, sorted and without repeats.
func checkQOSList(v *errs.Validator, field string, names []string) []string {
	if len(names) > MaxAssocQOS {
		v.Add(field, "%d QOS named, the limit is %d", len(names), MaxAssocQOS)
		return nil
	}
	var out []string
	for i, n := range names {
		n = strings.ToLower(n)
		if !qosName.MatchString(n) {
			v.Add(fmt.Sprintf("%s[%d]", field, i), "%s is not a QOS name: letters, digits, '_', '-' and '.', starting with a letter or digit, at most 64", clip(n))
			continue
		}
		out = append(out, n)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// QOSAllowed reports whether a job may ask for QOS q when open are the QOS
// open to every member and granted those its association grants ("" is
// always allowed: the scheduler's default QOS).
func QOSAllowed(q string, open, granted []string) bool {
	return q == "" || slices.Contains(open, q) || slices.Contains(granted, q)
}

// QOSError is the refusal of a submission asking for a QOS the user may not
// use: InvalidArgument naming job.qos, Slurm's reason first, then what the
// user may ask for and how an admin grants more.
func QOSError(user, account, q string, open, granted []string) error {
	return QOSFieldError("job.qos", user, account, q, open, granted)
}

// QOSFieldError is QOSError naming field (an update's "qos").
func QOSFieldError(field, user, account, q string, open, granted []string) error {
	if !qosName.MatchString(q) {
		return errs.Invalid(field, "%s: %s is not a QOS name: letters, digits, '_', '-' and '.', starting with a letter or digit, at most 64",
			MsgInvalidQOS, clip(q))
	}
	// The way to a grant: a user with an association gets one more QOS
	// on it; one without needs an association first (root's will do).
	where, grant := "", fmt.Sprintf("sacctmgr add user %s account=root QOS=%s", user, q)
	if account != "" {
		where = " account=" + account
		grant = fmt.Sprintf("sacctmgr modify user %s account=%s set QOS+=%s", user, account, q)
	}
	return errs.Invalid(field, "%s: user %s may not use QOS %s (open to every member: %s; granted to user=%s%s: %s); "+
		"a project admin grants it with: %s",
		MsgInvalidQOS, user, q, listOrNone(open), user, where, listOrNone(granted), grant)
}

// listOrNone writes a list as "a,b", or "none".
func listOrNone(l []string) string {
	if len(l) == 0 {
		return "none"
	}
	return strings.Join(l, ",")
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

// SubmitLimitError is the refusal of a submission (or, moved, of a move of
// jobs to the account) past the association's MaxSubmitJobs:
// ResourceExhausted, with Slurm's reason first and the limit, its value and
// what was counted after it.
func SubmitLimitError(user, account string, limit, active, adding int, moved bool) error {
	how := "submitted"
	if moved {
		how = "moved to it"
	}
	return fmt.Errorf("%s: MaxSubmitJobs=%d of association user=%s account=%s: %d pending or running, %d more %s: %w",
		MsgSubmitLimit, limit, user, account, active, adding, how, errs.ResourceExhausted)
}
