package app

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/paging"
	"github.com/loom-ml/loom/libs/resname"
	"github.com/loom-ml/loom/libs/slurmspec"
	"github.com/loom-ml/loom/libs/store"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/gateway/internal/adapters"
	"github.com/loom-ml/loom/services/gateway/internal/authz"
	"github.com/loom-ml/loom/services/gateway/internal/domain"
)

// AccountService: Slurm accounts and associations (sacctmgr), stored in the
// gateway's Redis per project. CreateAccount and SetAssociation also tell
// the scheduler (AccountChanged, AssociationChanged on loom.job.commands.v1,
// key the project), which divides fair-share shares down the account tree
// and enforces MaxJobs, GrpTRES, MaxTRESPerJob and MaxWall; the gateway
// enforces MaxSubmitJobs at SubmitJob.

// projectOf parses parent and returns the project id. Who may call is the
// authorization table's (package authz: admins write, viewers list), as
// for every other service.
func projectOf(parent string) (string, error) {
	p, err := resname.ParseProject(parent)
	if err != nil {
		return "", errs.Invalid("parent", "%v", err)
	}
	return p.ID, nil
}

// CreateAccount adds an account to a project (sacctmgr add account) and
// emits AccountChanged (key: the project) in the same Apply; the caller
// must be an admin of the project. InvalidArgument naming the field
// for a bad id, parent or value; AlreadyExists for an account the project
// has (root always); ResourceExhausted past domain.MaxAccountsPerProject.
func (g *Gateway) CreateAccount(ctx context.Context, req *loomv1.CreateAccountRequest) (*loomv1.Account, error) {
	if _, err := projectOf(req.GetParent()); err != nil {
		return nil, err
	}
	project, acct, err := domain.AcceptAccount(req)
	if err != nil {
		return nil, err
	}
	id, _ := domain.AccountID(project, acct.GetName())
	if id == domain.RootAccount {
		return nil, fmt.Errorf("account %s: %w", acct.GetName(), errs.AlreadyExists)
	}
	switch _, err := g.repo.Account(ctx, project, id); {
	case err == nil:
		return nil, fmt.Errorf("account %s: %w", acct.GetName(), errs.AlreadyExists)
	case !errors.Is(err, errs.NotFound):
		return nil, err
	}
	tx := &store.Tx{}
	// Made once: two creates racing, the second finds it (AlreadyExists,
	// below). Not an inbox id, whose mark would outlive a delete of the
	// account and refuse making it again for store.InboxTTL.
	adapters.ExpectAccount(tx, project, id, nil)
	if parent := acct.GetParentAccount(); parent != domain.RootAccount {
		_, raw, err := g.repo.AccountAsStored(ctx, project, parent)
		if errors.Is(err, errs.NotFound) {
			return nil, errs.Invalid("account.parent_account", "no account %q in project %s", parent, project)
		} else if err != nil {
			return nil, err
		}
		// Written only while the parent is as read, and telling a delete
		// of the parent decided meanwhile that it has a sub-account now:
		// one of the two writes nothing.
		adapters.ExpectAccount(tx, project, parent, raw)
		adapters.ReferAccount(tx, project, parent)
	}
	n, err := g.repo.CountAccounts(ctx, project)
	if err != nil {
		return nil, err
	}
	if n >= domain.MaxAccountsPerProject {
		return nil, fmt.Errorf("project %s holds %d accounts, the limit (accounts per project: %d): %w",
			project, n, domain.MaxAccountsPerProject, errs.ResourceExhausted)
	}
	if err := adapters.PutAccount(tx, project, acct); err != nil {
		return nil, err
	}
	// The scheduler divides fair-share shares down the account tree: it
	// learns the account, its parent and its shares in the same Apply.
	cmd, err := route(ctx, resname.Project{ID: project}.String(), &eventsv1.AccountChanged{Project: project, Account: acct})
	if err != nil {
		return nil, err
	}
	tx.Emit(cmd)
	if _, err := g.repo.Apply(ctx, "", tx); err != nil {
		if errors.Is(err, store.ErrConflict) {
			if _, err := g.repo.Account(ctx, project, id); err == nil {
				return nil, fmt.Errorf("account %s: %w", acct.GetName(), errs.AlreadyExists)
			}
		}
		return nil, changedMeanwhile("create account "+id, "its parent account "+acct.GetParentAccount(), err)
	}
	g.opt.Log.InfoContext(ctx, "account created", "account", acct.GetName())
	return acct, nil
}

// ListAccounts lists a project's accounts, root included, by name; the
// caller must be a viewer of the project.
func (g *Gateway) ListAccounts(ctx context.Context, req *loomv1.ListAccountsRequest) (*loomv1.ListAccountsResponse, error) {
	project, err := projectOf(req.GetParent())
	if err != nil {
		return nil, err
	}
	accts, err := g.repo.Accounts(ctx, project)
	if err != nil {
		return nil, err
	}
	accts = append(accts, domain.DefaultRootAccount(project))
	page, next, err := paging.List(req, accts, (*loomv1.Account).GetName)
	if err != nil {
		return nil, err
	}
	return &loomv1.ListAccountsResponse{Accounts: page, NextPageToken: next}, nil
}

// UpdateAccount changes the fields update_mask names of one of the
// project's accounts (sacctmgr modify account); the caller must be an
// admin of the project. A new parent must exist (or be root) and not be
// the account or under it: InvalidArgument naming account.parent_account.
// It stores the account and emits AccountChanged (key: the project) in one
// Apply, and returns the account as stored; NotFound for an account the
// project does not have.
func (g *Gateway) UpdateAccount(ctx context.Context, req *loomv1.UpdateAccountRequest) (*loomv1.Account, error) {
	project, id, parent, apply, err := domain.AcceptAccountUpdate(req)
	if err != nil {
		return nil, err
	}
	cur, raw, err := g.repo.AccountAsStored(ctx, project, id)
	if err != nil {
		return nil, err
	}
	// The write holds only while the account and every parent the walk
	// below reads are as read: two moves at once (a under b, b under a)
	// would each pass the walk and make a loop together, and two updates
	// of different fields would each write back the other's old value.
	tx := &store.Tx{}
	adapters.ExpectAccount(tx, project, id, raw)
	// Walk up from the new parent: meeting the account itself would make
	// a loop. The tree is at most MaxAccountsPerProject deep.
	for p, depth := parent, 0; p != "" && p != domain.RootAccount; depth++ {
		if p == id {
			return nil, errs.Invalid("account.parent_account", "%s is under %s: making it %s's parent would make a loop; move %s first",
				parent, id, id, parent)
		}
		a, raw, err := g.repo.AccountAsStored(ctx, project, p)
		if errors.Is(err, errs.NotFound) && p == parent {
			return nil, errs.Invalid("account.parent_account", "no account %q in project %s", parent, project)
		}
		if err != nil {
			return nil, err
		}
		if depth > domain.MaxAccountsPerProject {
			return nil, fmt.Errorf("account %s: its parents make a loop: %w", p, errs.FailedPrecondition)
		}
		adapters.ExpectAccount(tx, project, p, raw)
		p = a.GetParentAccount()
	}
	if parent != "" && parent != domain.RootAccount {
		// A delete of the new parent decided meanwhile writes nothing.
		adapters.ReferAccount(tx, project, parent)
	}
	next := apply(cur)
	if err := adapters.PutAccount(tx, project, next); err != nil {
		return nil, err
	}
	cmd, err := route(ctx, resname.Project{ID: project}.String(), &eventsv1.AccountChanged{Project: project, Account: next})
	if err != nil {
		return nil, err
	}
	tx.Emit(cmd)
	if _, err := g.repo.Apply(ctx, "", tx); err != nil {
		return nil, changedMeanwhile("update account "+id, "the account or one of its new parents", err)
	}
	g.opt.Log.InfoContext(ctx, "account updated", "account", next.GetName(), "parent", next.GetParentAccount(),
		"fairshare", next.GetFairshare(), "grp_tres", slurmspec.TRESFromProto(next.GetGrpTres()).String(), "update_mask", req.GetUpdateMask().GetPaths())
	return next, nil
}

// changedMeanwhile is the error of an Apply that wrote what (a call on
// accounts) conditioned on what it read: when one of the conditions no
// longer held (store.ErrConflict: what, the things read, changed between
// the read and the write), Aborted telling the caller to read again and
// retry, nothing having been written; any other error as it is.
func changedMeanwhile(write, read string, err error) error {
	if errors.Is(err, store.ErrConflict) {
		return fmt.Errorf("%s: %s changed meanwhile (another call wrote it); nothing was written: read again and retry: %w", write, read, errs.Aborted)
	}
	return fmt.Errorf("%s: %w", write, err)
}

// SetAssociation adds a user to an account of the project, or replaces the
// limits of that association (sacctmgr add user / modify user); the caller
// must be an admin of the project. A user's first association becomes
// their default account, as does one set with default_account; a default
// is never unset (a user always has one). It stores the association and
// emits AssociationChanged (key: the project) in one Apply, and returns
// the association as stored, default_account as it now stands.
func (g *Gateway) SetAssociation(ctx context.Context, req *loomv1.SetAssociationRequest) (*loomv1.Association, error) {
	if _, err := projectOf(req.GetParent()); err != nil {
		return nil, err
	}
	project, a, err := domain.AcceptAssociation(req, g.opt.OpenQOS)
	if err != nil {
		return nil, err
	}
	tx := &store.Tx{}
	if a.GetAccount() != domain.RootAccount {
		_, raw, err := g.repo.AccountAsStored(ctx, project, a.GetAccount())
		if errors.Is(err, errs.NotFound) {
			return nil, errs.Invalid("association.account", "no account %q in project %s", a.GetAccount(), project)
		} else if err != nil {
			return nil, err
		}
		// As CreateAccount's parent: the account is still there when the
		// association is written, and a delete of it decided meanwhile
		// writes nothing.
		adapters.ExpectAccount(tx, project, a.GetAccount(), raw)
		adapters.ReferAccount(tx, project, a.GetAccount())
	}
	// Written only while the association and the user's default account
	// are as read (the association absent, for a new one): of two calls
	// setting one association at once, or one setting it while another
	// deletes it, the one that read before the other wrote writes nothing,
	// so that Redis and the scheduler (AssociationChanged, in the same
	// Apply) keep the same winner, and default_account as returned is as
	// stored.
	cur, raw, err := g.repo.AssociationAsStored(ctx, project, a.GetUser(), a.GetAccount())
	if err != nil && !errors.Is(err, errs.NotFound) {
		return nil, err
	}
	// The caller's etag, when sent, is checked against that same read:
	// what the caller's new values were made from is what is replaced.
	if err := checkAssociationEtag(req.GetAssociation().GetEtag(), cur, a); err != nil {
		return nil, err
	}
	if req.GetCreateOnly() && cur != nil {
		return nil, associationExists(a)
	}
	if cur == nil {
		n, err := g.repo.CountAssociations(ctx, project)
		if err != nil {
			return nil, err
		}
		if n >= domain.MaxAssociationsPerProject {
			return nil, assocLimitError(project, n)
		}
		// The count holds when the write does: adds racing for the last
		// places write nothing past the limit.
		adapters.BoundAssociations(tx, project, domain.MaxAssociationsPerProject)
		// A delete of what it read as the user's last association (and
		// their default account with it) writes nothing after this add.
		adapters.ReferUser(tx, project, a.GetUser())
	}
	adapters.ExpectAssociation(tx, project, a.GetUser(), a.GetAccount(), raw)
	def, err := g.repo.DefaultAccount(ctx, project, a.GetUser())
	switch {
	case errors.Is(err, errs.NotFound):
		a.DefaultAccount = true // the user's first account
	case err != nil:
		return nil, err
	case def == a.GetAccount():
		a.DefaultAccount = true
	}
	adapters.ExpectDefaultAccount(tx, project, a.GetUser(), def)
	if err := adapters.PutAssociation(tx, project, a); err != nil {
		return nil, err
	}
	parent := resname.Project{ID: project}.String()
	cmd, err := route(ctx, parent, &eventsv1.AssociationChanged{Project: project, Association: a})
	if err != nil {
		return nil, err
	}
	tx.Emit(cmd)
	if _, err := g.repo.Apply(ctx, "", tx); err != nil {
		if errors.Is(err, store.ErrConflict) && raw == nil {
			// Refused by the bound, or by what it read: a full project
			// says so, as the check above would have, and so does an
			// association another call added meanwhile to a create_only.
			if n, cerr := g.repo.CountAssociations(ctx, project); cerr == nil && n >= domain.MaxAssociationsPerProject {
				return nil, assocLimitError(project, n)
			}
			if req.GetCreateOnly() {
				if now, _, rerr := g.repo.AssociationAsStored(ctx, project, a.GetUser(), a.GetAccount()); rerr == nil && now != nil {
					return nil, associationExists(a)
				}
			}
		}
		return nil, changedMeanwhile(fmt.Sprintf("set association user=%s account=%s", a.GetUser(), a.GetAccount()),
			fmt.Sprintf("the association, account %s or user %s's default account", a.GetAccount(), a.GetUser()), err)
	}
	g.opt.Log.InfoContext(ctx, "association set", "project", project, "user", a.GetUser(), "account", a.GetAccount(),
		"max_jobs", a.GetMaxJobs(), "max_submit_jobs", a.GetMaxSubmitJobs(), "qos", a.GetQos(), "default_qos", a.GetDefaultQos(),
		"grp_tres", slurmspec.TRESFromProto(a.GetGrpTres()).String(), "max_tres_per_job", slurmspec.TRESFromProto(a.GetMaxTresPerJob()).String(),
		"max_wall_minutes", maxWallLog(a))
	out := proto.Clone(a).(*loomv1.Association)
	out.Etag = domain.AssociationEtag(out)
	return out, nil
}

// maxWallLog is a's MaxWall for the log: its minutes, or "none" when
// absent (0 is a limit).
func maxWallLog(a *loomv1.Association) string {
	if a.MaxWallMinutes == nil {
		return "none"
	}
	return strconv.Itoa(int(a.GetMaxWallMinutes()))
}

// associationExists is a create_only SetAssociation's refusal of an
// association that exists.
func associationExists(a *loomv1.Association) error {
	return fmt.Errorf("association user=%s account=%s exists; nothing was written (create_only): change it with sacctmgr modify user, or SetAssociation without create_only: %w",
		a.GetUser(), a.GetAccount(), errs.AlreadyExists)
}

// checkAssociationEtag is SetAssociation's AIP-154 check of the etag it
// was sent (empty: none) against the association as the gateway read it
// (cur, nil when there is none), for the new values a: Aborted, with
// nothing written, when the association changed or was deleted since
// the caller read it. The write itself holds only while the association
// is as the gateway read it (ExpectAssociation), so that a write landing
// between this check and the Apply is caught too.
func checkAssociationEtag(sent string, cur, a *loomv1.Association) error {
	if sent == "" {
		return nil
	}
	what := fmt.Sprintf("set association user=%s account=%s", a.GetUser(), a.GetAccount())
	if cur == nil {
		return fmt.Errorf("%s: the association was deleted meanwhile (another call deleted it since it was read with etag %q); nothing was written: read again and retry: %w",
			what, sent, errs.Aborted)
	}
	if now := domain.AssociationEtag(cur); now != sent {
		return fmt.Errorf("%s: the association changed meanwhile (another call wrote it: etag %q as read, %q now); nothing was written: read again and retry: %w",
			what, sent, now, errs.Aborted)
	}
	return nil
}

// assocLimitError is SetAssociation's refusal of a new association in a
// project that holds n, the limit or more.
func assocLimitError(project string, n int64) error {
	return fmt.Errorf("project %s holds %d associations, the limit (associations per project: %d): %w",
		project, n, domain.MaxAssociationsPerProject, errs.ResourceExhausted)
}

// ListAssociations lists a project's associations by user then account,
// optionally one user's or one account's; the caller must be a viewer of
// the project.
func (g *Gateway) ListAssociations(ctx context.Context, req *loomv1.ListAssociationsRequest) (*loomv1.ListAssociationsResponse, error) {
	project, err := projectOf(req.GetParent())
	if err != nil {
		return nil, err
	}
	var v errs.Validator
	account := domain.CheckListAssociations(&v, project, req)
	if err := v.Err(); err != nil {
		return nil, err
	}
	all, err := g.repo.Associations(ctx, project)
	if err != nil {
		return nil, err
	}
	var out []*loomv1.Association
	for _, a := range all {
		if (req.GetUser() == "" || a.GetUser() == req.GetUser()) && (account == "" || a.GetAccount() == account) {
			a.Etag = domain.AssociationEtag(a)
			out = append(out, a)
		}
	}
	page, next, err := paging.List(req, out, func(a *loomv1.Association) string { return adapters.AssocField(a.GetUser(), a.GetAccount()) })
	if err != nil {
		return nil, err
	}
	return &loomv1.ListAssociationsResponse{Associations: page, NextPageToken: next, OpenQos: g.opt.OpenQOS}, nil
}

// charge is what a submission is charged to: the account ("" when the
// user has no association in the project) and the QOS, lower-cased ("":
// the scheduler's default).
type charge struct{ account, qos string }

// submitAssociation finds the association a submission is charged to,
// checks the QOS it asks for and enforces the association's MaxSubmitJobs.
// A user with no association in the project is charged to no account,
// has no limits and may use the QOS open to every member (Options.OpenQOS).
//
// The account is job.account, else the user's default account. A user who
// has associations in the project may charge only their accounts
// (InvalidArgument naming job.account, Slurm's "Invalid account"). The QOS
// is job.qos, else the association's default_qos; it must be open to every
// member or granted by the association (InvalidArgument naming job.qos,
// Slurm's "Invalid qos specification"): a QOS that may preempt others or
// outranks them is a privilege an admin grants. With a MaxSubmitJobs, the
// user's pending and running jobs charged to that account are counted as
// the gateway's ListJobs sees them with active_only (the scheduler's
// active jobs, plus the jobs accepted here that it does not know yet; an
// array not yet split into tasks counts its task count), and the
// submission (its task count for an array) may not take them past the
// limit: ResourceExhausted with Slurm's reason and the limit. Two
// submissions racing through different gateways may both pass the count;
// the scheduler's MaxJobs still holds what runs.
func (g *Gateway) submitAssociation(ctx context.Context, req *loomv1.SubmitJobRequest) (charge, error) {
	job := req.GetJob()
	user := job.GetUser()
	qos := strings.ToLower(job.GetQos())
	open := g.opt.OpenQOS
	p, err := resname.ParseProject(req.GetParent())
	if user == "" || err != nil {
		return charge{qos: qos}, nil
	}
	def, err := g.repo.DefaultAccount(ctx, p.ID, user)
	if errors.Is(err, errs.NotFound) {
		// Not in the accounting database: no account and no limits, and
		// only the open QOS.
		if !domain.QOSAllowed(qos, open, nil) {
			return charge{}, domain.QOSError(user, "", qos, open, nil)
		}
		return charge{qos: qos}, nil
	}
	if err != nil {
		return charge{}, err
	}
	// Slurm keeps accounts in lower case: sbatch -A Physics charges physics.
	account := strings.ToLower(job.GetAccount())
	if account == "" {
		account = def
	}
	a, err := g.repo.Association(ctx, p.ID, user, account)
	if errors.Is(err, errs.NotFound) {
		return charge{}, errs.Invalid("job.account", "Invalid account or account/partition combination specified: user %s has no association with account %q in project %s",
			user, account, p.ID)
	}
	if err != nil {
		return charge{}, err
	}
	if qos == "" {
		qos = a.GetDefaultQos()
	}
	if !domain.QOSAllowed(qos, open, a.GetQos()) {
		return charge{}, domain.QOSError(user, account, qos, open, a.GetQos())
	}
	ch := charge{account: account, qos: qos}
	if err := g.checkMaxSubmitJobs(ctx, req.GetParent(), user, account, a, max(1, domain.ArrayTaskCount(job.GetArray())), false); err != nil {
		return charge{}, err
	}
	return ch, nil
}

// moving counts the jobs an account change of j moves into account: j
// (pending: a running job's account does not change), or, for a whole
// array (array), its pending tasks charged elsewhere, as the gateway's
// ListJobs sees them (an array not yet split into tasks counts its task
// count).
func (g *Gateway) moving(ctx context.Context, parent string, j *loomv1.Job, array bool, account string) (int, error) {
	switch {
	case j.GetArray() != "" && j.GetArrayJobId() == "":
		return max(1, domain.ArrayTaskCount(j.GetArray())), nil
	case !array || j.GetArrayJobId() == "":
		return 1, nil
	}
	n := 0
	err := paging.Each(func(token string) (string, error) {
		resp, err := g.listJobs(ctx, &loomv1.ListJobsRequest{Parent: parent, JobIds: []string{j.GetArrayJobId()},
			States: []loomv1.JobState{loomv1.JobState_PENDING}, PageSize: paging.MaxSize, PageToken: token}, true)
		for _, t := range resp.GetJobs() {
			if t.GetArrayJobId() == j.GetArrayJobId() && t.GetAccount() != account {
				n++
			}
		}
		return resp.GetNextPageToken(), err
	})
	if err != nil {
		return 0, fmt.Errorf("count the tasks of array %s: %w", j.GetArrayJobId(), err)
	}
	return n, nil
}

// checkMaxSubmitJobs checks that adding jobs (an array's tasks count each)
// to user's pending and running jobs charged to account, as the gateway's
// ListJobs sees them with active_only (an array not yet split into tasks
// counts its task count), stays within the association a's MaxSubmitJobs
// (none: no limit): ResourceExhausted with Slurm's reason and the limit.
func (g *Gateway) checkMaxSubmitJobs(ctx context.Context, parent, user, account string, a *loomv1.Association, adding int, moved bool) error {
	limit := int(a.GetMaxSubmitJobs())
	if limit == 0 || adding <= 0 {
		return nil
	}
	active := 0
	err := g.eachActiveJob(ctx, parent, []string{user}, func(j *loomv1.Job) bool {
		if j.GetAccount() != account {
			return true
		}
		if j.GetArray() != "" && j.GetArrayJobId() == "" {
			active += max(1, domain.ArrayTaskCount(j.GetArray()))
		} else {
			active++
		}
		return active+adding <= limit // past it: no need to count further
	})
	if err != nil {
		return fmt.Errorf("count the active jobs of user %s in account %s: %w", user, account, err)
	}
	if active+adding > limit {
		return domain.SubmitLimitError(user, account, limit, active, adding, moved)
	}
	return nil
}

// eachActiveJob calls fn with each pending or running job of the project
// (parent) as ListJobs with active_only sees it, of users only when users
// is not empty, until fn returns false.
func (g *Gateway) eachActiveJob(ctx context.Context, parent string, users []string, fn func(*loomv1.Job) bool) error {
	return paging.Each(func(token string) (string, error) {
		resp, err := g.listJobs(ctx, &loomv1.ListJobsRequest{Parent: parent, Users: users,
			ActiveOnly: true, PageSize: paging.MaxSize, PageToken: token}, true)
		for _, j := range resp.GetJobs() {
			if !fn(j) {
				return "", nil
			}
		}
		return resp.GetNextPageToken(), err
	})
}

// activeCharged counts the active jobs of the project charged to account
// (of user only, when user is not empty) and returns the first one's id,
// for a refusal to name.
func (g *Gateway) activeCharged(ctx context.Context, parent, user, account string) (n int, first string, err error) {
	var users []string
	if user != "" {
		users = []string{user}
	}
	err = g.eachActiveJob(ctx, parent, users, func(j *loomv1.Job) bool {
		if j.GetAccount() == account {
			if n++; first == "" {
				first = j.GetJobId()
			}
		}
		return true
	})
	return n, first, err
}

// DeleteAccount removes an account (sacctmgr delete account) and emits
// AccountChanged with deleted (key: the project) in one Apply; the caller
// must be an admin of the project. Refused (FailedPrecondition, saying
// what to do first) while it has sub-accounts, users or active jobs
// charged to it; NotFound for an account the project does not have.
func (g *Gateway) DeleteAccount(ctx context.Context, req *loomv1.DeleteAccountRequest) (*loomv1.Account, error) {
	project, id, err := domain.AcceptAccountDelete(req)
	if err != nil {
		return nil, err
	}
	acct, raw, err := g.repo.AccountAsStored(ctx, project, id)
	if err != nil {
		return nil, err
	}
	// Read before the checks below, and the delete conditioned on it and
	// on the account: a sub-account or user added after the checks read
	// (ReferAccount) makes the delete write nothing.
	refs, err := g.repo.AccountRefs(ctx, project, id)
	if err != nil {
		return nil, err
	}
	accts, err := g.repo.Accounts(ctx, project)
	if err != nil {
		return nil, err
	}
	var kids []string
	for _, a := range accts {
		if a.GetParentAccount() == id {
			kids = append(kids, a.GetName()[strings.LastIndexByte(a.GetName(), '/')+1:])
		}
	}
	if len(kids) > 0 {
		return nil, fmt.Errorf("account %s has sub-accounts (%s); delete them or move them first (sacctmgr modify account %s set parent=%s): %w",
			id, strings.Join(kids, ", "), kids[0], acct.GetParentAccount(), errs.FailedPrecondition)
	}
	assocs, err := g.repo.Associations(ctx, project)
	if err != nil {
		return nil, err
	}
	var users []string
	for _, a := range assocs {
		if a.GetAccount() == id {
			users = append(users, a.GetUser())
		}
	}
	if len(users) > 0 {
		return nil, fmt.Errorf("account %s has users (%s); remove them first (sacctmgr delete user %s account=%s): %w",
			id, strings.Join(users, ", "), users[0], id, errs.FailedPrecondition)
	}
	parent := resname.Project{ID: project}.String()
	if n, first, err := g.activeCharged(ctx, parent, "", id); err != nil {
		return nil, fmt.Errorf("count the active jobs charged to account %s: %w", id, err)
	} else if n > 0 {
		return nil, fmt.Errorf("Job(s) active, cancel job(s) before remove: %d pending or running job(s) charged to account %s (job %s first): %w",
			n, id, first, errs.FailedPrecondition)
	}
	tx := &store.Tx{}
	adapters.ExpectAccount(tx, project, id, raw)
	adapters.ExpectAccountRefs(tx, project, id, refs)
	adapters.DeleteAccount(tx, project, id)
	cmd, err := route(ctx, parent, &eventsv1.AccountChanged{Project: project, Account: acct, Deleted: true})
	if err != nil {
		return nil, err
	}
	tx.Emit(cmd)
	if _, err := g.repo.Apply(ctx, "", tx); err != nil {
		return nil, changedMeanwhile("delete account "+id, "the account, or what points at it (a sub-account, a user),", err)
	}
	g.opt.Log.InfoContext(ctx, "account deleted", "account", acct.GetName())
	return acct, nil
}

// DeleteAssociation removes user from account (sacctmgr delete user NAME
// account=A) and emits AssociationChanged with deleted (key: the project)
// in one Apply; the caller must be an admin of the project. Refused
// (FailedPrecondition, saying what to do first) while the user has active
// jobs charged to the account, or when it is their default account and
// they have others; the user's last association takes their default with
// it. NotFound for an association the project does not have.
func (g *Gateway) DeleteAssociation(ctx context.Context, req *loomv1.DeleteAssociationRequest) (*loomv1.Association, error) {
	project, user, account, err := domain.AcceptAssociationDelete(req)
	if err != nil {
		return nil, err
	}
	// The delete is written only while the association and the user's
	// default account are as read: a SetAssociation of it (new limits, or
	// making it the default) decided meanwhile is not lost under the delete,
	// nor does the user keep a default account that is gone.
	a, raw, err := g.repo.AssociationAsStored(ctx, project, user, account)
	if err != nil {
		return nil, err
	}
	// The caller's etag, when sent, is checked against that same read, and
	// the delete holds only while the association is still as read
	// (ExpectAssociation below, in the Apply): what is deleted is what the
	// caller saw, not values another admin set since.
	if sent := req.GetEtag(); sent != "" {
		if now := domain.AssociationEtag(a); now != sent {
			return nil, fmt.Errorf("delete association user=%s account=%s: the association changed meanwhile (another call wrote it: etag %q as read, %q now); nothing was deleted: read it again and decide again: %w",
				user, account, sent, now, errs.Aborted)
		}
	}
	// Read before the user's other associations: an association added
	// after that read sets a new token, and the delete of what was read as
	// the last one (which takes the default account) writes nothing.
	userRefs, err := g.repo.UserRefs(ctx, project, user)
	if err != nil {
		return nil, err
	}
	def, err := g.repo.DefaultAccount(ctx, project, user)
	if err != nil && !errors.Is(err, errs.NotFound) {
		return nil, err
	}
	a.DefaultAccount = def == account
	all, err := g.repo.Associations(ctx, project)
	if err != nil {
		return nil, err
	}
	var others []string
	for _, o := range all {
		if o.GetUser() == user && o.GetAccount() != account {
			others = append(others, o.GetAccount())
		}
	}
	if a.GetDefaultAccount() && len(others) > 0 {
		return nil, fmt.Errorf("account %s is user %s's default account; make another one the default first (sacctmgr modify user %s set DefaultAccount=%s): %w",
			account, user, user, others[0], errs.FailedPrecondition)
	}
	parent := resname.Project{ID: project}.String()
	if n, first, err := g.activeCharged(ctx, parent, user, account); err != nil {
		return nil, fmt.Errorf("count the active jobs of user %s in account %s: %w", user, account, err)
	} else if n > 0 {
		return nil, fmt.Errorf("Job(s) active, cancel job(s) before remove: user %s has %d pending or running job(s) charged to account %s (job %s first): %w",
			user, n, account, first, errs.FailedPrecondition)
	}
	tx := &store.Tx{}
	adapters.ExpectAssociation(tx, project, user, account, raw)
	adapters.ExpectDefaultAccount(tx, project, user, def)
	if len(others) == 0 {
		adapters.ExpectUserRefs(tx, project, user, userRefs)
	}
	adapters.DeleteAssociation(tx, project, user, account, len(others) == 0)
	cmd, err := route(ctx, parent, &eventsv1.AssociationChanged{Project: project, Association: a, Deleted: true})
	if err != nil {
		return nil, err
	}
	tx.Emit(cmd)
	if _, err := g.repo.Apply(ctx, "", tx); err != nil {
		return nil, changedMeanwhile(fmt.Sprintf("delete association user=%s account=%s", user, account),
			fmt.Sprintf("the association, user %s's default account or their other associations", user), err)
	}
	g.opt.Log.InfoContext(ctx, "association deleted", "project", project, "user", user, "account", account)
	a.Etag = domain.AssociationEtag(a)
	return a, nil
}

// updateCharge checks a pending job's new account and QOS (scontrol
// update Account= QOS=; nil: unchanged) as a submission's are checked
// (submitAssociation): the account one the job's user has an association
// with ("": their default), the QOS open to every member or granted by the
// association the job is then charged to ("": its default_qos), and a job
// moved to another account within that association's MaxSubmitJobs
// (ResourceExhausted, as a submission past it; array: the update names a
// whole array, j its first task, and every task it moves counts). It
// returns what to set (nil: unchanged); InvalidArgument naming account or
// qos.
func (g *Gateway) updateCharge(ctx context.Context, j *loomv1.Job, array bool, account, qos *string) (*string, *string, error) {
	if account == nil && qos == nil {
		return nil, nil, nil
	}
	open := g.opt.OpenQOS
	project, _ := authz.ProjectOf(j.GetName())
	user, acct, q := j.GetUser(), j.GetAccount(), j.GetQos()
	if account != nil {
		acct = strings.ToLower(*account)
	}
	if qos != nil {
		q = strings.ToLower(*qos)
	}
	var granted []string
	def, err := g.repo.DefaultAccount(ctx, project, user)
	switch {
	case errors.Is(err, errs.NotFound):
		// Not in the accounting database: charged to no account.
		if account != nil && acct != "" {
			return nil, nil, errs.Invalid("account", "Invalid account or account/partition combination specified: user %s has no association in project %s; "+
				"a project admin adds one with: sacctmgr add user %s account=%s", user, project, user, acct)
		}
	case err != nil:
		return nil, nil, err
	default:
		if acct == "" {
			acct = def
		}
		a, err := g.repo.Association(ctx, project, user, acct)
		switch {
		case errors.Is(err, errs.NotFound) && account != nil:
			return nil, nil, errs.Invalid("account", "Invalid account or account/partition combination specified: user %s has no association with account %q in project %s",
				user, acct, project)
		case err == nil:
			granted = a.GetQos()
			if qos != nil && q == "" {
				q = a.GetDefaultQos()
			}
			// A job moved to another account counts against that
			// association's MaxSubmitJobs, as slurmctld's update checks
			// the new association's submit limit
			// (acct_policy_validate): refused when it is full.
			// A whole array is looked at whatever its first task's account
			// (that one may have been moved alone before).
			if account != nil && (array || acct != j.GetAccount()) {
				adding, err := g.moving(ctx, "projects/"+project, j, array, acct)
				if err != nil {
					return nil, nil, err
				}
				if err := g.checkMaxSubmitJobs(ctx, "projects/"+project, user, acct, a, adding, true); err != nil {
					return nil, nil, err
				}
			}
		case !errors.Is(err, errs.NotFound):
			return nil, nil, err
		}
	}
	if !domain.QOSAllowed(q, open, granted) {
		field := "qos"
		if qos == nil {
			field = "account" // the new account does not grant the job's QOS
		}
		return nil, nil, domain.QOSFieldError(field, user, acct, q, open, granted)
	}
	var newAccount, newQOS *string
	if account != nil {
		newAccount = &acct
	}
	if qos != nil {
		newQOS = &q
	}
	return newAccount, newQOS, nil
}
