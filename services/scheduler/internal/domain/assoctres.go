package domain

import (
	"math"

	"github.com/loom-ml/loom/libs/slurmspec"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// Slurm's TRES limits on associations and accounts (sacctmgr GrpTRES=,
// MaxTRESPerJob=, MaxWall=): the gate assoc-tres keeps a job pending, with
// Slurm's reason, while starting it would take its association, or an
// account above it, past GrpTRES (the running jobs of the association, or
// of the account and every account under it), or while it asks for more
// than its association's MaxTRESPerJob or MaxWall (it then waits until
// the limit or the job is changed, as Slurm does without DenyOnLimit).
// As MaxJobs, the limits hold on each cluster of the project: a pass
// counts the runs of its own cluster, once (lazily, as the first job of an
// association with a limit is looked at), and adds each run it starts.
// The counts are the runs', which are stored: a restarted scheduler, or a
// follower taking over, counts the same.

// Slurm's reasons of a job held back by an association's TRES limits, by
// TRES (cpu, mem, node, gres/gpu: slurmspec.TRESNames' order, Slurm's).
const (
	ReasonAssocGrpCpuLimit                = "AssocGrpCpuLimit"
	ReasonAssocGrpMemLimit                = "AssocGrpMemLimit"
	ReasonAssocGrpNodeLimit               = "AssocGrpNodeLimit"
	ReasonAssocGrpGRES                    = "AssocGrpGRES"
	ReasonAssocMaxCpuPerJobLimit          = "AssocMaxCpuPerJobLimit"
	ReasonAssocMaxMemPerJob               = "AssocMaxMemPerJob"
	ReasonAssocMaxNodePerJobLimit         = "AssocMaxNodePerJobLimit"
	ReasonAssocMaxGRESPerJob              = "AssocMaxGRESPerJob"
	ReasonAssocMaxWallDurationPerJobLimit = "AssocMaxWallDurationPerJobLimit"
)

var (
	grpReasons    = [4]string{ReasonAssocGrpCpuLimit, ReasonAssocGrpMemLimit, ReasonAssocGrpNodeLimit, ReasonAssocGrpGRES}
	perJobReasons = [4]string{ReasonAssocMaxCpuPerJobLimit, ReasonAssocMaxMemPerJob, ReasonAssocMaxNodePerJobLimit, ReasonAssocMaxGRESPerJob}
	// tresReasons are the gate's reasons, for the chain.
	tresReasons = append(append([]string{ReasonAssocMaxWallDurationPerJobLimit}, grpReasons[:]...), perJobReasons[:]...)
)

// tres is what a job asks for or a set of runs holds, in slurmspec.TRES's
// order: cpu, mem (MB), node, gpu.
type tres [4]int64

// satTRES is what n nodes of perNode CPUs and memory hold, with gpus in
// all: each product saturates at math.MaxInt64 rather than wrapping, so
// that a request past every limit still reads as past it. A node's memory
// is bounded at the gateway (slurmspec.MaxMemMB), but a node whose
// memory is unknown takes any request, and the counts of many runs add
// up (addSat).
func satTRES(cpusPerNode, memPerNode, nodes, gpus int64) tres {
	return tres{slurmspec.MulSat(cpusPerNode, nodes), slurmspec.MulSat(memPerNode, nodes), nodes, gpus}
}

// addSat is a+b for a, b >= 0, math.MaxInt64 where that would wrap.
func addSat(a, b int64) int64 {
	if b > math.MaxInt64-a {
		return math.MaxInt64
	}
	return a + b
}

// tresOfLimit is a TRES limit as a tres, -1 for each TRES without one (0
// is a limit: none may use that TRES).
func tresOfLimit(t slurmspec.TRES) tres {
	var out tres
	for i := range out {
		v, ok := t.Limit(i)
		if !ok {
			v = -1
		}
		out[i] = v
	}
	return out
}

// hasTRESLimits reports whether l sets a TRES limit or MaxWall.
func (l *AssocLimit) hasTRESLimits() bool {
	return l != nil && (l.GrpTRES != slurmspec.TRES{} || l.MaxTRESPerJob != slurmspec.TRES{} || l.MaxWallMinutes != nil)
}

// over returns the index of the first TRES of limit that use plus req
// passes (limit -1: none; 0 holds back any job asking for that TRES), or
// -1.
func over(limit, use, req *tres) int {
	for i := range limit {
		// As a difference: use and req are never negative (satTRES),
		// and their sum could pass an int64.
		if limit[i] >= 0 && req[i] > limit[i]-use[i] {
			return i
		}
	}
	return -1
}

// idleAssocTRES: no association or account has a TRES limit or MaxWall,
// stored or in the change.
func idleAssocTRES(p *pass) bool {
	if p.t.s.tresLimits > 0 {
		return false
	}
	for _, l := range p.t.c.Assocs {
		if l.hasTRESLimits() {
			return false
		}
	}
	return true
}

// gateAssocTRES checks, in Slurm's order, the association's MaxWall, its
// GrpTRES and MaxTRESPerJob, then the GrpTRES of its account and of each
// account above it.
func gateAssocTRES(p *pass, q *queued) (string, string) {
	spec := q.j.Job
	project := projectOf(p.name)
	account, user := spec.GetAccount(), spec.GetUser()
	var req tres
	a := &q.e.jobAttrs
	nodes := int64(max(a.req.Nodes, 1))
	req = satTRES(int64(a.req.CPUsPerNode), a.req.MemMB, nodes, a.gpus)
	if l := p.t.assocRecord(project, account, user); l.hasTRESLimits() {
		// A job without --time runs within MaxWall whatever its
		// partition's MaxTime (wallDefault, start): only a --time past
		// MaxWall waits. MaxWall=0 lets no job run, one without --time
		// included: Slurm gives that one a limit of 0 minutes
		// (acct_policy_validate), which Loom cannot run; it waits with
		// the same reason until the limit is raised or cleared.
		if w := l.MaxWallMinutes; w != nil && (*w == 0 || q.limit > int64(*w)*60) {
			return ReasonAssocMaxWallDurationPerJobLimit, ""
		}
	}
	return p.tresOver(spec, &req), ""
}

// tresOver returns the reason a start of job spec holding req would be
// refused by TRES limits, in Slurm's order ("" for none): its
// association's GrpTRES and MaxTRESPerJob, then the GrpTRES of its account
// and of each account above it. The gate asks it of a job's minimum, and a
// node range (widen) of each wider start it considers.
func (p *pass) tresOver(spec *loomv1.Job, req *tres) string {
	project := projectOf(p.name)
	account, user := spec.GetAccount(), spec.GetUser()
	if l := p.t.assocRecord(project, account, user); l.hasTRESLimits() {
		if l.GrpTRES != (slurmspec.TRES{}) {
			limit := tresOfLimit(l.GrpTRES)
			if i := over(&limit, p.assocTRESUse(assocKey{account, user}), req); i >= 0 {
				return grpReasons[i]
			}
		}
		if l.MaxTRESPerJob != (slurmspec.TRES{}) {
			limit := tresOfLimit(l.MaxTRESPerJob)
			if i := over(&limit, &tres{}, req); i >= 0 {
				return perJobReasons[i]
			}
		}
	}
	for acct, depth := account, 0; acct != "" && acct != rootAccount && depth < maxAccountDepth; depth++ {
		l := p.t.assocRecord(project, acct, "")
		if l == nil {
			break
		}
		if l.GrpTRES != (slurmspec.TRES{}) {
			limit := tresOfLimit(l.GrpTRES)
			if i := over(&limit, p.accountTRESUse(acct), req); i >= 0 {
				return grpReasons[i]
			}
		}
		acct = l.Parent
	}
	return ""
}

// wallDefault is the time limit, in seconds, that a job setting none
// (no --time) gets from its association's MaxWall, as Slurm's
// acct_policy_validate gives it at submission (_set_time_limit): MaxWall,
// where the partition it runs in (maxSeconds: its MaxTime, 0 for none)
// would let it run longer; 0 where the job has a limit, its association
// no MaxWall, or the partition's MaxTime is within MaxWall (that one stays
// its limit).
func (t *txn) wallDefault(job *loomv1.Job, maxSeconds int64) int64 {
	if job.GetTimeLimitSeconds() > 0 {
		return 0
	}
	l := t.assocRecord(projectOf(job.GetName()), job.GetAccount(), job.GetUser())
	if l == nil || l.MaxWallMinutes == nil || *l.MaxWallMinutes <= 0 {
		return 0 // none; or 0, which holds the job (gateAssocTRES)
	}
	if wall := int64(*l.MaxWallMinutes) * 60; maxSeconds == 0 || maxSeconds > wall {
		return wall
	}
	return 0
}

// tresCounts are a pass's counts of what the cluster's running jobs hold:
// per association, and per account with every account under it.
type tresCounts struct {
	assocs   map[assocKey]*tres
	accounts map[string]*tres
	// up caches each account's chain: itself then its parents.
	up map[string][]string
}

// tresCount returns the pass's counts, counting the cluster's live runs
// the first time.
func (p *pass) tresCount() *tresCounts {
	if p.tresUse != nil {
		return p.tresUse
	}
	p.tresUse = &tresCounts{assocs: map[assocKey]*tres{}, accounts: map[string]*tres{}, up: map[string][]string{}}
	p.liveRuns(func(r *Run, j *Job) { p.addTRESUse(j, r) })
	return p.tresUse
}

// addTRESUse adds what run r of job j holds to the association's count
// and to those of its account and every account above it.
func (p *pass) addTRESUse(j *Job, r *Run) {
	c := p.tresUse
	n := int64(len(r.Nodes))
	use := tres{int64(r.cpuCount()), slurmspec.MulSat(r.MemMB, n), n, int64(r.gpuCount())}
	add := func(t *tres) {
		for i := range t {
			t[i] = addSat(t[i], use[i])
		}
	}
	k := assocKey{j.Job.GetAccount(), j.Job.GetUser()}
	if c.assocs[k] == nil {
		c.assocs[k] = &tres{}
	}
	add(c.assocs[k])
	for _, acct := range p.accountChain(k.account) {
		if c.accounts[acct] == nil {
			c.accounts[acct] = &tres{}
		}
		add(c.accounts[acct])
	}
}

// accountChain is account and the accounts above it, as the change
// leaves the tree (cached for the pass).
func (p *pass) accountChain(account string) []string {
	c := p.tresUse
	if up, ok := c.up[account]; ok {
		return up
	}
	var up []string
	project := projectOf(p.name)
	for acct, depth := account, 0; acct != "" && acct != rootAccount && depth < maxAccountDepth; depth++ {
		up = append(up, acct)
		acct = p.t.accountParent(project, acct)
	}
	c.up[account] = up
	return up
}

// assocTRESUse is what the association's running jobs hold on the cluster.
func (p *pass) assocTRESUse(k assocKey) *tres {
	if t := p.tresCount().assocs[k]; t != nil {
		return t
	}
	return &tres{}
}

// accountTRESUse is what the running jobs of account and of every account
// under it hold on the cluster.
func (p *pass) accountTRESUse(account string) *tres {
	if t := p.tresCount().accounts[account]; t != nil {
		return t
	}
	return &tres{}
}

// noteTRESStart counts a run the pass starts.
func (p *pass) noteTRESStart(j *Job, r *Run) {
	if p.tresUse != nil {
		p.addTRESUse(j, r)
	}
}
