package domain

import (
	"strings"

	"github.com/loom-ml/loom/libs/errs"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// MsgAccessDenied is Slurm's refusal of an operation the caller may not do
// (another user's job, an admin hold released by a user); the
// Slurm-compatible commands print it.
const MsgAccessDenied = "Access/permission denied"

// DefaultAdmins are the Slurm administrators when none are configured
// (LOOM_SLURM_ADMINS): Slurm's root and SlurmUser.
const DefaultAdmins = "root,slurm"

// Denied is a refusal for who the caller is: it maps to PermissionDenied
// with Msg as the whole message (Slurm's wording).
type Denied struct{ Msg string }

func (d *Denied) Error() string { return d.Msg }

// Is makes a Denied an errs.PermissionDenied.
func (d *Denied) Is(target error) bool { return target == errs.PermissionDenied }

// Admins is the set of users who administer jobs (Slurm's operators and
// administrators): they may act on any job, and their holds are admin
// holds. The zero value has none.
type Admins map[string]bool

// ParseAdmins reads a comma-separated list of user names (blanks ignored).
func ParseAdmins(list string) Admins {
	a := Admins{}
	for _, u := range strings.Split(list, ",") {
		if u = strings.TrimSpace(u); u != "" {
			a[u] = true
		}
	}
	return a
}

// Has reports whether user is an administrator ("" never is).
func (a Admins) Has(user string) bool { return user != "" && a[user] }

// CheckAccess refuses caller an action on job unless caller is an
// administrator or the job's owner. A job without an owner (submitted
// without a user, as REST clients may) is anyone's; an anonymous caller
// ("") owns nothing.
func (a Admins) CheckAccess(caller string, job *loomv1.Job) error {
	if a.Has(caller) || job.GetUser() == "" || job.GetUser() == caller {
		return nil
	}
	return &Denied{Msg: MsgAccessDenied}
}

// CheckRelease refuses a user (not an administrator) the release of an
// admin hold, as Slurm does.
func (a Admins) CheckRelease(caller string, job *loomv1.Job) error {
	if !a.Has(caller) && job.GetHold() && job.GetStateReason() == "JobHeldAdmin" {
		return &Denied{Msg: MsgAccessDenied}
	}
	return nil
}
