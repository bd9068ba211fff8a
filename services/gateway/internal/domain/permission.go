package domain

import (
	"fmt"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/auth"
	"github.com/loom-ml/loom/libs/errs"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// MsgAccessDenied is Slurm's refusal of an operation the caller may not do
// (another user's job, an admin hold released by a user); the
// Slurm-compatible commands print it.
const MsgAccessDenied = "Access/permission denied"

// Denied is a refusal for who the caller is: it maps to PermissionDenied
// with Msg as the whole message (Slurm's wording).
type Denied struct{ Msg string }

func (d *Denied) Error() string { return d.Msg }

// Is makes a Denied an errs.PermissionDenied.
func (d *Denied) Is(target error) bool { return target == errs.PermissionDenied }

// Caller is who asks, as the job rules see them: the call's authenticated
// principal in the project of the job it acts on. The zero Caller is
// anonymous: it owns nothing and administers nothing.
type Caller struct {
	// Name is the principal's name ("users/ana", "jobs/p/12"): what events
	// and logs record.
	Name string
	// User is the OS account the caller acts as: a user's own, a
	// workload's job owner.
	User string
	// Admin: a project administrator of the job's project or a cluster
	// administrator (Slurm's operators, administrators and account
	// coordinators): acts on any job of the project, and its holds are
	// admin holds.
	Admin bool
	// ClusterAdmin: a cluster administrator (Slurm's root: may submit as
	// another user, as sbatch --uid).
	ClusterAdmin bool
	// Workload is the job a workload principal is ("" for any other
	// principal): the only job it owns.
	Workload string
}

// CallerOf is p (nil: anonymous) as a caller in project (an id).
func CallerOf(p *auth.Principal, project string) Caller {
	if p == nil {
		return Caller{}
	}
	c := Caller{Name: p.Name, User: p.User, Admin: p.Role(project) == auth.RoleAdmin, ClusterAdmin: p.ClusterAdmin}
	switch p.Kind {
	case auth.KindUser:
	case auth.KindWorkload:
		c.Workload = p.Job
	default:
		// Nodes and services own no jobs.
		c.User = ""
	}
	return c
}

// Owns reports whether job is the caller's: a user's job (Job.user is
// theirs), or a workload's own job. A job without owner is nobody's.
func (c Caller) Owns(job *loomv1.Job) bool {
	if job.GetUser() == "" || c.User == "" {
		return false
	}
	if c.Workload != "" {
		return job.GetName() == c.Workload && job.GetUser() == c.User
	}
	return job.GetUser() == c.User
}

// CheckAccess refuses the caller an action on job (cancel, signal, hold,
// release, requeue, update, steps) unless the caller owns it or is an
// administrator. The refusal starts with Slurm's words and says whose job
// it is: the owner is no secret from a caller who may see the job.
func (c Caller) CheckAccess(job *loomv1.Job) error {
	if c.Admin || c.Owns(job) {
		return nil
	}
	return denyJob(job, "only its owner or an administrator of its project may act on it")
}

// denyJob refuses an action on job in Slurm's words, saying whose job it
// is (no secret from a caller who may see it) and who may.
func denyJob(job *loomv1.Job, who string) error {
	owner := "has no owner"
	if u := job.GetUser(); u != "" {
		owner = "is " + u + "'s"
	}
	return &Denied{Msg: MsgAccessDenied + ": job " + job.GetJobId() + " " + owner + "; " + who}
}

// CheckRelease refuses a user (not an administrator) the release of an
// admin hold, as Slurm does, and a hold of their own in its place.
func (c Caller) CheckRelease(job *loomv1.Job) error {
	if !c.Admin && job.GetHold() && job.GetStateReason() == "JobHeldAdmin" {
		return &Denied{Msg: MsgAccessDenied + ": job " + job.GetJobId() + " was held by an administrator; only an administrator may release it or change its hold"}
	}
	return nil
}

// CheckTimeLimit refuses a caller who is not an administrator a raise of
// job's time limit to limit (seconds; 0: unchanged), pending or running,
// as slurmctld does (only an operator raises a time limit; a user may
// lower it). A job without a limit of its own (0) has its partition's
// MaxTime, partitionMax (0: unlimited, which any limit lowers).
func (c Caller) CheckTimeLimit(job *loomv1.Job, limit, partitionMax int64) error {
	cur := job.GetTimeLimitSeconds()
	if cur == 0 {
		cur = partitionMax
	}
	if limit <= 0 || c.Admin || cur == 0 || limit <= cur {
		return nil
	}
	return &Denied{Msg: fmt.Sprintf("%s: job %s: only an administrator may raise a time limit (%d s now; a user may lower it)",
		MsgAccessDenied, job.GetJobId(), cur)}
}

// Sees reports whether the caller may see job at all: a workload its own
// job only; with private (the gateway's PrivateData "jobs"), a user their
// own jobs unless they administer the project; else every job of the
// project (the table checked the caller's role in it).
func (c Caller) Sees(job *loomv1.Job, private bool) bool {
	if c.Workload != "" {
		return c.Owns(job)
	}
	return !private || c.Admin || c.Owns(job)
}

// SeesEnv reports whether the caller may see job's exported environment
// (Job.env, and Job.export, whose "ALL,VAR=x" holds values too) and its
// batch script (Job.script, as Slurm's scontrol write batch_script): its
// owner and administrators only. Scripts hold secrets as often as
// environments do (export TOKEN=...).
func (c Caller) SeesEnv(job *loomv1.Job) bool { return c.Admin || c.Owns(job) }

// Present returns job as the caller may see it: without its environment
// (env and export) and batch script unless SeesEnv. job itself is not
// changed (a copy is made when something goes).
func (c Caller) Present(job *loomv1.Job) *loomv1.Job {
	if job == nil || (len(job.GetEnv()) == 0 && job.GetExport() == "" && job.GetScript() == "") || c.SeesEnv(job) {
		return job
	}
	out := proto.Clone(job).(*loomv1.Job)
	out.Env, out.Export, out.Script = nil, "", ""
	return out
}

// CheckRunAs refuses the caller a job step in job (srun --jobid) unless
// the caller owns the job or is a cluster administrator: a step runs as the
// job's owner, so a project administrator who could start one in any job
// of the project would run commands as any of its users (and, through their
// accounts, reach their files and other projects). Slurm likewise lets only
// the job's user and root create steps in a job.
func (c Caller) CheckRunAs(job *loomv1.Job) error {
	if c.Owns(job) || (c.ClusterAdmin && c.Workload == "") {
		return nil
	}
	return denyJob(job, "a step runs as the job's owner: only its owner or a cluster administrator may start one")
}

// secretWords mark a variable whose value is a secret: a name that
// contains one of them (in any case) is redacted by RedactEnv.
var secretWords = []string{"TOKEN", "SECRET", "PASSWORD", "PASSWD", "KEY", "CREDENTIAL", "AUTH", "COOKIE", "SESSION", "PRIVATE", "CERT"}

// Redacted replaces a secret's value where it could be shown or logged.
const Redacted = "[redacted]"

// LooksSecret reports whether an environment variable's name suggests a
// secret value (LOOM_TOKEN, AWS_SECRET_ACCESS_KEY, DB_PASSWORD, ...).
func LooksSecret(name string) bool {
	up := strings.ToUpper(name)
	for _, w := range secretWords {
		if strings.Contains(up, w) {
			return true
		}
	}
	return false
}

// RedactEnv returns env with the values of secret-looking variables
// replaced by Redacted: what may reach a log. env is not changed.
func RedactEnv(env map[string]string) map[string]string {
	if len(env) == 0 {
		return env
	}
	out := make(map[string]string, len(env))
	for k, v := range env {
		if LooksSecret(k) {
			v = Redacted
		}
		out[k] = v
	}
	return out
}
