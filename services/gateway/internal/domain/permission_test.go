package domain

import (
	"errors"
	"strings"
	"testing"

	"github.com/loom-ml/loom/libs/auth"
	"github.com/loom-ml/loom/libs/errs"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// principal is a user with role in project "default" (RoleNone: none).
func principal(user string, role auth.Role, clusterAdmin bool) *auth.Principal {
	p := &auth.Principal{Name: auth.UserName(user), Kind: auth.KindUser, User: user, ClusterAdmin: clusterAdmin}
	if role != auth.RoleNone {
		p.Roles = map[string]auth.Role{"default": role}
	}
	return p
}

func TestCallerAccess(t *testing.T) {
	t.Parallel()
	ana := principal("ana", auth.RoleUser, false)
	root := principal("root", auth.RoleNone, true)
	padmin := principal("pat", auth.RoleAdmin, false)
	bob := principal("bob", auth.RoleUser, false)
	otherAdmin := &auth.Principal{Name: "users/oz", Kind: auth.KindUser, User: "oz", Roles: map[string]auth.Role{"other": auth.RoleAdmin}}
	work := &auth.Principal{Name: "jobs/default/40", Kind: auth.KindWorkload, User: "ana", Project: "default", Job: "projects/default/jobs/40"}
	workOther := &auth.Principal{Name: "jobs/default/41", Kind: auth.KindWorkload, User: "ana", Project: "default", Job: "projects/default/jobs/41"}
	node := &auth.Principal{Name: "nodes/n1", Kind: auth.KindNode, User: "ana"}
	for _, c := range []struct {
		p     *auth.Principal
		admin bool
	}{{ana, false}, {root, true}, {padmin, true}, {bob, false}, {otherAdmin, false}, {nil, false}} {
		if got := CallerOf(c.p, "default").Admin; got != c.admin {
			t.Errorf("CallerOf(%v).Admin = %v", c.p, got)
		}
	}
	job := &loomv1.Job{Name: "projects/default/jobs/40", JobId: "40", User: "ana", Env: map[string]string{"A_TOKEN": "s3cret"}, Export: "ALL,A_TOKEN=s3cret"}
	for _, tc := range []struct {
		p  *auth.Principal
		ok bool
	}{{ana, true}, {root, true}, {padmin, true}, {work, true}, {bob, false}, {otherAdmin, false}, {workOther, false}, {node, false}, {nil, false}} {
		c := CallerOf(tc.p, "default")
		err := c.CheckAccess(job)
		if (err == nil) != tc.ok {
			t.Errorf("CheckAccess(%v): %v", tc.p, err)
		}
		// Slurm's words first (the Slurm commands' tests match them), then
		// whose job it is.
		want := MsgAccessDenied + ": job 40 is ana's; only its owner or an administrator of its project may act on it"
		if err != nil && (!errors.Is(err, errs.PermissionDenied) || err.Error() != want) {
			t.Errorf("CheckAccess(%v) = %v, want PermissionDenied %q", tc.p, err, want)
		}
		// Env goes to the owner and administrators only; the job is not changed.
		shown := c.Present(job)
		if got := shown.GetEnv()["A_TOKEN"] == "s3cret" && shown.GetExport() != ""; got != tc.ok {
			t.Errorf("Present(%v) env %v export %q, want shown=%v", tc.p, shown.GetEnv(), shown.GetExport(), tc.ok)
		}
		if job.GetEnv()["A_TOKEN"] != "s3cret" {
			t.Fatal("Present changed the job")
		}
		// PrivateData: others' jobs are hidden from users, not from admins.
		if got := c.Sees(job, true); got != tc.ok {
			t.Errorf("Sees(%v, private) = %v", tc.p, got)
		}
	}
	if !CallerOf(bob, "default").Sees(job, false) || CallerOf(workOther, "default").Sees(job, false) {
		t.Error("without PrivateData members see every job, workloads their own only")
	}
	// A job without owner is nobody's: only administrators act on it.
	if err := CallerOf(ana, "default").CheckAccess(&loomv1.Job{}); err == nil {
		t.Error("a job without owner is anyone's")
	}
	if err := CallerOf(root, "default").CheckAccess(&loomv1.Job{}); err != nil {
		t.Errorf("root refused a job without owner: %v", err)
	}
	held := &loomv1.Job{User: "ana", Hold: true, StateReason: "JobHeldAdmin"}
	if err := CallerOf(ana, "default").CheckRelease(held); !errors.Is(err, errs.PermissionDenied) {
		t.Errorf("ana released an admin hold: %v", err)
	}
	for _, p := range []*auth.Principal{root, padmin} {
		if err := CallerOf(p, "default").CheckRelease(held); err != nil {
			t.Errorf("%s refused: %v", p.Name, err)
		}
	}
}

func TestRedactEnv(t *testing.T) {
	t.Parallel()
	env := map[string]string{"LOOM_TOKEN": "t", "aws_secret_access_key": "s", "DB_PASSWORD": "p", "SSH_KEY": "k",
		"GCP_CREDENTIALS": "c", "PATH": "/bin", "EPOCHS": "3"}
	got := RedactEnv(env)
	for k, v := range got {
		want := env[k]
		if k != "PATH" && k != "EPOCHS" {
			want = Redacted
		}
		if v != want {
			t.Errorf("%s = %q, want %q", k, v, want)
		}
	}
	if env["LOOM_TOKEN"] != "t" || len(got) != len(env) {
		t.Error("RedactEnv changed its input or lost variables")
	}
}

func TestOlderOrdersAttemptsAndStates(t *testing.T) {
	t.Parallel()
	j := func(st loomv1.JobState, restarts int32) *loomv1.Job {
		return &loomv1.Job{State: st, RestartCount: restarts}
	}
	for _, tc := range []struct {
		next, last *loomv1.Job
		older      bool
	}{
		{j(loomv1.JobState_CONFIGURING, 0), j(loomv1.JobState_RUNNING, 0), true},
		{j(loomv1.JobState_RUNNING, 0), j(loomv1.JobState_COMPLETING, 0), true},
		{j(loomv1.JobState_COMPLETING, 0), j(loomv1.JobState_FAILED, 0), true},
		{j(loomv1.JobState_FAILED, 0), j(loomv1.JobState_COMPLETING, 0), false},
		{j(loomv1.JobState_RUNNING, 0), j(loomv1.JobState_CONFIGURING, 0), false},
		// A requeued job's PENDING is a new attempt: newer than its old run.
		{j(loomv1.JobState_PENDING, 1), j(loomv1.JobState_REQUEUED, 0), false},
		{j(loomv1.JobState_RUNNING, 0), j(loomv1.JobState_PENDING, 1), true},
	} {
		if got := Older(tc.next, tc.last); got != tc.older {
			t.Errorf("Older(%v/%d, %v/%d) = %v", tc.next.GetState(), tc.next.GetRestartCount(), tc.last.GetState(), tc.last.GetRestartCount(), got)
		}
	}
}

// TestCheckTimeLimit: only an administrator raises a job's time limit, as
// slurmctld's operator; anyone who may update the job lowers it, gives a
// job without a limit of its own one, or leaves it unchanged.
func TestCheckTimeLimit(t *testing.T) {
	t.Parallel()
	j := &loomv1.Job{JobId: "40", User: "ana", TimeLimitSeconds: 3600}
	ana, admin := Caller{User: "ana"}, Caller{User: "pat", Admin: true}
	free := &loomv1.Job{JobId: "41", User: "ana"} // no limit of its own
	for _, c := range []struct {
		who        Caller
		job        *loomv1.Job
		limit, max int64
		ok         bool
	}{
		{ana, j, 0, 0, true}, {ana, j, 60, 0, true}, {ana, j, 3600, 0, true}, {ana, j, 3601, 0, false}, {ana, j, 3601, 99999, false},
		{admin, j, 7200, 0, true}, {ana, free, 7200, 0, true}, {ana, free, 7200, 7200, true}, {ana, free, 7201, 7200, false},
		{admin, free, 7201, 7200, true},
	} {
		err := c.who.CheckTimeLimit(c.job, c.limit, c.max)
		if (err == nil) != c.ok || (err != nil && (!errors.Is(err, errs.PermissionDenied) || !strings.HasPrefix(err.Error(), MsgAccessDenied))) {
			t.Errorf("%+v raises job %s's %d s (partition %d s) to %d: %v, want allowed %v", c.who, c.job.GetJobId(), c.job.GetTimeLimitSeconds(), c.max, c.limit, err, c.ok)
		}
	}
}
