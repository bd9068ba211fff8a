package domain

import (
	"fmt"
	"strings"

	"github.com/loom-ml/loom/libs/errs"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
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
// stored (scheduler:assocs, AssocLimitKey → JSON) and loaded at start-up.
type AssocLimit struct {
	Project string `json:"project"`
	Account string `json:"account"`
	User    string `json:"user"`
	// MaxJobs is how many of the user's jobs charged to the account may
	// run at once (on each cluster); 0 is no limit.
	MaxJobs int32 `json:"max_jobs,omitempty"`
	// Fairshare is the association's shares (kept for fair share; not yet
	// read by the priority).
	Fairshare int32 `json:"fairshare,omitempty"`
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

// AssocLimits returns the association limits the state enforces.
func (s *State) AssocLimits() []*AssocLimit {
	out := make([]*AssocLimit, 0, len(s.limits))
	for _, l := range s.limits {
		ll := *l
		out = append(out, &ll)
	}
	return out
}

func (s *State) putAssocLimit(l *AssocLimit) {
	if s.limits == nil {
		s.limits = map[limitKey]*AssocLimit{}
	}
	s.limits[limitKey{l.Project, l.Account, l.User}] = l
}

// commitAssocLimits applies the change's association limits to the state
// (Commit).
func (s *State) commitAssocLimits(c *Change) {
	for _, l := range c.Assocs {
		s.putAssocLimit(l)
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
	if err := v.Err(); err != nil {
		return fmt.Errorf("association changed: %w", err)
	}
	l := &AssocLimit{Project: ev.GetProject(), Account: a.GetAccount(), User: a.GetUser(),
		MaxJobs: a.GetMaxJobs(), Fairshare: a.GetFairshare()}
	if t.c.Assocs == nil {
		t.c.Assocs = map[string]*AssocLimit{}
	}
	t.c.Assocs[AssocLimitKey(l.Project, l.Account, l.User)] = l
	prefix := "projects/" + l.Project + "/"
	for _, c := range t.s.Clusters() {
		if strings.HasPrefix(c, prefix) {
			t.dirty[c] = true
		}
	}
	return nil
}

// assocMaxJobs is the MaxJobs of the association (account, user) in the
// project of cluster, as the change leaves it; 0 when none.
func (t *txn) assocMaxJobs(cluster, account, user string) int32 {
	project := projectOf(cluster)
	if len(t.c.Assocs) > 0 {
		if l, ok := t.c.Assocs[AssocLimitKey(project, account, user)]; ok {
			return l.MaxJobs
		}
	}
	if l := t.s.limits[limitKey{project, account, user}]; l != nil {
		return l.MaxJobs
	}
	return 0
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
