package domain

import (
	"fmt"
	"strings"

	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/slurmspec"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// Slurm association limits (sacctmgr add user / modify user): the gateway
// stores accounts and associations and tells the scheduler an
// association's limits with AssociationChanged; the scheduler keeps a
// user's extra jobs pending with AssocMaxJobsLimit while MaxJobs of theirs
// run in the association. As in Slurm, where an association belongs to
// one cluster, the limit holds on each cluster of the project: a pass
// counts the runs of its own cluster.

// ReasonAssocMaxJobsLimit is the pending reason of a job held back by its
// association's MaxJobs.
const ReasonAssocMaxJobsLimit = "AssocMaxJobsLimit"

// AssocLimit is an association's limits as the scheduler enforces them,
// or, with no User, an account's place in the account tree; stored
// (scheduler:assocs, AssocLimitKey → JSON) and loaded at start-up.
type AssocLimit struct {
	Project string `json:"project"`
	Account string `json:"account"`
	// User is the association's user; empty for an account's own record
	// (from AccountChanged).
	User string `json:"user"`
	// MaxJobs is how many of the user's jobs charged to the account may
	// run at once (on each cluster); 0 is no limit.
	MaxJobs int32 `json:"max_jobs,omitempty"`
	// Fairshare is the association's or account's raw shares (sacctmgr
	// Fairshare=); 0 counts as 1, Slurm's default (shares.go).
	Fairshare int32 `json:"fairshare,omitempty"`
	// Parent is an account's parent account ("" or "root": the top).
	Parent string `json:"parent,omitempty"`
	// GrpTRES caps what the association's running jobs, or for an
	// account's record those of the account and every account under it,
	// hold at once on each cluster; MaxTRESPerJob what one job of the
	// association asks for, MaxWallMinutes its time limit (assoctres.go).
	// Zero: no limit (a TRES limit of 0 is one: slurmspec.TRES.Zero).
	// MaxWallMinutes nil is no limit, and a pointer to 0 a limit no job
	// passes (Slurm's MaxWall=0); a record stored before 0 was a limit
	// never held 0 (omitempty), so it reads as before.
	GrpTRES        slurmspec.TRES `json:"grp_tres,omitzero"`
	MaxTRESPerJob  slurmspec.TRES `json:"max_tres_per_job,omitzero"`
	MaxWallMinutes *int32         `json:"max_wall_minutes,omitempty"`
}

// limitKey identifies an association across projects.
type limitKey struct{ project, account, user string }

// AssocLimitKey is the key of an association's limits in a Change and in
// the store: "project|account|user" (none of them holds a '|').
func AssocLimitKey(project, account, user string) string {
	return project + "|" + account + "|" + user
}

// LoadAssocLimits adds stored association limits, as at start-up.
func (s *State) LoadAssocLimits(limits []*AssocLimit) {
	for _, l := range limits {
		s.putAssocLimit(l)
	}
}

// AssocLimits returns the association limits the state enforces and the
// accounts it knows, copies.
func (s *State) AssocLimits() []*AssocLimit {
	out := make([]*AssocLimit, 0, len(s.limits)+len(s.accounts))
	for _, m := range []map[limitKey]*AssocLimit{s.limits, s.accounts} {
		for _, l := range m {
			ll := *l
			out = append(out, &ll)
		}
	}
	return out
}

// putAssocLimit stores an association's limits, or an account's record
// (no user) among the accounts.
func (s *State) putAssocLimit(l *AssocLimit) {
	m := &s.limits
	if l.User == "" {
		m = &s.accounts
	}
	if *m == nil {
		*m = map[limitKey]*AssocLimit{}
	}
	k := limitKey{l.Project, l.Account, l.User}
	s.countTRESLimits((*m)[k], l)
	(*m)[k] = l
}

// countTRESLimits keeps s.tresLimits, the records with a TRES limit or
// MaxWall, as record old is replaced by new (either nil).
func (s *State) countTRESLimits(old, new *AssocLimit) {
	if old.hasTRESLimits() {
		s.tresLimits--
	}
	if new.hasTRESLimits() {
		s.tresLimits++
	}
}

// commitAssocLimits applies the change's association limits and accounts
// to the state (Commit); a nil record removes its key's.
func (s *State) commitAssocLimits(c *Change) {
	for key, l := range c.Assocs {
		if l != nil {
			s.putAssocLimit(l)
		} else if p := strings.SplitN(key, "|", 3); len(p) == 3 {
			k := limitKey{p[0], p[1], p[2]}
			s.countTRESLimits(s.limits[k], nil)
			s.countTRESLimits(s.accounts[k], nil)
			delete(s.limits, k)
			delete(s.accounts, k)
		}
	}
}

// associationChanged records an association's limits, and has the
// project's clusters scheduled again: a raised limit lets waiting jobs start.
func (t *txn) associationChanged(ev *eventsv1.AssociationChanged) error {
	var v errs.Validator
	a := ev.GetAssociation()
	v.Check(ev.GetProject() != "" && !strings.ContainsAny(ev.GetProject(), "|/"), "project", "an id is required, got %q", ev.GetProject())
	v.Check(a.GetAccount() != "" && !strings.Contains(a.GetAccount(), "|"), "association.account", "an id is required, got %q", a.GetAccount())
	v.Check(a.GetUser() != "" && !strings.Contains(a.GetUser(), "|"), "association.user", "a login name is required, got %q", a.GetUser())
	v.Check(a.GetMaxJobs() >= 0, "association.max_jobs", "must not be negative, got %d", a.GetMaxJobs())
	v.Check(a.GetFairshare() >= 0, "association.fairshare", "must not be negative, got %d", a.GetFairshare())
	grp, perJob := tresLimit(&v, "association.grp_tres", a.GetGrpTres()), tresLimit(&v, "association.max_tres_per_job", a.GetMaxTresPerJob())
	v.Check(a.GetMaxWallMinutes() >= 0 && a.GetMaxWallMinutes() <= slurmspec.MaxWallMinutes, "association.max_wall_minutes",
		"%d is outside 0..%d (the limit)", a.GetMaxWallMinutes(), slurmspec.MaxWallMinutes)
	if err := v.Err(); err != nil {
		return fmt.Errorf("association changed: %w", err)
	}
	l := &AssocLimit{Project: ev.GetProject(), Account: a.GetAccount(), User: a.GetUser(),
		MaxJobs: a.GetMaxJobs(), Fairshare: a.GetFairshare(), GrpTRES: grp, MaxTRESPerJob: perJob}
	if a.MaxWallMinutes != nil {
		wall := a.GetMaxWallMinutes()
		l.MaxWallMinutes = &wall
	}
	if ev.GetDeleted() {
		l = nil
	}
	t.putAssoc(ev.GetProject(), a.GetAccount(), a.GetUser(), l)
	return nil
}

// accountChanged records an account's parent and shares, and has the
// project's clusters scheduled again: the shares weigh its jobs.
func (t *txn) accountChanged(ev *eventsv1.AccountChanged) error {
	var v errs.Validator
	a := ev.GetAccount()
	id := a.GetName()[strings.LastIndexByte(a.GetName(), '/')+1:]
	v.Check(ev.GetProject() != "" && !strings.ContainsAny(ev.GetProject(), "|/"), "project", "an id is required, got %q", ev.GetProject())
	v.Check(id != "" && !strings.Contains(id, "|"), "account.name", "an account name is required, got %q", a.GetName())
	v.Check(!strings.ContainsAny(a.GetParentAccount(), "|/"), "account.parent_account", "an account id is required, got %q", a.GetParentAccount())
	v.Check(a.GetParentAccount() != id, "account.parent_account", "an account is not its own parent (%q)", id)
	v.Check(a.GetFairshare() >= 0, "account.fairshare", "must not be negative, got %d", a.GetFairshare())
	grp := tresLimit(&v, "account.grp_tres", a.GetGrpTres())
	if err := v.Err(); err != nil {
		return fmt.Errorf("account changed: %w", err)
	}
	l := &AssocLimit{Project: ev.GetProject(), Account: id, Fairshare: a.GetFairshare(), Parent: a.GetParentAccount(), GrpTRES: grp}
	if ev.GetDeleted() {
		l = nil
	}
	t.putAssoc(ev.GetProject(), id, "", l)
	return nil
}

// tresLimit checks an event's TRES limit (slurmspec's bounds, the
// gateway's) and returns it.
func tresLimit(v *errs.Validator, field string, t *loomv1.Tres) slurmspec.TRES {
	tr := slurmspec.TRESFromProto(t)
	tr.Check(func(f, msg string) { v.Add(field+"."+f, "%s", msg) })
	return tr
}

// putAssoc puts an association's limits or an account's record (user "")
// in the change, nil to remove it, and has the project's clusters
// scheduled again.
func (t *txn) putAssoc(project, account, user string, l *AssocLimit) {
	if t.c.Assocs == nil {
		t.c.Assocs = map[string]*AssocLimit{}
	}
	t.c.Assocs[AssocLimitKey(project, account, user)] = l
	prefix := "projects/" + project + "/"
	for _, c := range t.s.Clusters() {
		if strings.HasPrefix(c, prefix) {
			t.dirty[c] = true
		}
	}
}

// assocRecord is the association's limits (an account's record for user
// ""), in project, as the change leaves them; nil when none.
func (t *txn) assocRecord(project, account, user string) *AssocLimit {
	if len(t.c.Assocs) > 0 {
		if l, ok := t.c.Assocs[AssocLimitKey(project, account, user)]; ok {
			return l
		}
	}
	if user == "" {
		return t.s.accounts[limitKey{project, account, user}]
	}
	return t.s.limits[limitKey{project, account, user}]
}

// assocMaxJobs is the MaxJobs of the association (account, user) in the
// project of cluster, as the change leaves it; 0 when none.
func (t *txn) assocMaxJobs(cluster, account, user string) int32 {
	if l := t.assocRecord(projectOf(cluster), account, user); l != nil {
		return l.MaxJobs
	}
	return 0
}

// rawShares returns the raw shares (Fairshare, 1 unless set) of an
// association, or of an account for user "", in project; every one is 1
// without a look-up when the state and the change hold no record.
func (t *txn) rawShares(project string) func(account, user string) int64 {
	if len(t.s.limits) == 0 && len(t.s.accounts) == 0 && len(t.c.Assocs) == 0 {
		return func(string, string) int64 { return 1 }
	}
	return func(account, user string) int64 {
		if l := t.assocRecord(project, account, user); l != nil && l.Fairshare > 0 {
			return int64(l.Fairshare)
		}
		return 1
	}
}

// accountParent is the parent of an account in project as the change
// leaves it; "" (the top) when the account is unknown.
func (t *txn) accountParent(project, account string) string {
	if l := t.assocRecord(project, account, ""); l != nil {
		return l.Parent
	}
	return ""
}

// projectOf is the project id of a resource name ("projects/p/...").
func projectOf(name string) string {
	rest, ok := strings.CutPrefix(name, "projects/")
	if !ok {
		return ""
	}
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		return rest[:i]
	}
	return rest
}

// gateAssocMaxJobs keeps a job pending while MaxJobs of its user's jobs
// charged to its account run on the pass's cluster (Slurm's
// AssocMaxJobsLimit). Without any limit it costs two map lengths.
func gateAssocMaxJobs(p *pass, q *queued) (string, string) {
	if len(p.t.s.limits) == 0 && len(p.t.c.Assocs) == 0 {
		return "", ""
	}
	spec := q.j.Job
	limit := p.t.assocMaxJobs(p.name, spec.GetAccount(), spec.GetUser())
	if limit <= 0 {
		return "", ""
	}
	if p.assocRunning == nil {
		p.countAssocJobs()
	}
	if p.assocRunning[assocKey{spec.GetAccount(), spec.GetUser()}] >= limit {
		return ReasonAssocMaxJobsLimit, ""
	}
	return "", ""
}

// countAssocJobs counts the running jobs of the pass's cluster per
// association (lazily, once a pass, as countQOS).
func (p *pass) countAssocJobs() {
	p.assocRunning = map[assocKey]int32{}
	p.liveRuns(func(_ *Run, j *Job) {
		p.assocRunning[assocKey{j.Job.GetAccount(), j.Job.GetUser()}]++
	})
}

// noteAssocStart counts a job the pass starts against its association.
func (p *pass) noteAssocStart(j *Job) {
	if p.assocRunning != nil {
		p.assocRunning[assocKey{j.Job.GetAccount(), j.Job.GetUser()}]++
	}
}
