package domain

import (
	"errors"
	"testing"

	"github.com/loom-ml/loom/libs/errs"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

func TestAdminsAndAccess(t *testing.T) {
	t.Parallel()
	a := ParseAdmins(" root, slurm ,,ops")
	for u, want := range map[string]bool{"root": true, "slurm": true, "ops": true, "ana": false, "": false} {
		if a.Has(u) != want {
			t.Errorf("Has(%q) = %v", u, !want)
		}
	}
	job := &loomv1.Job{User: "ana"}
	for caller, ok := range map[string]bool{"ana": true, "root": true, "bob": false, "": false} {
		err := a.CheckAccess(caller, job)
		if (err == nil) != ok {
			t.Errorf("CheckAccess(%q): %v", caller, err)
		}
		if err != nil && (!errors.Is(err, errs.PermissionDenied) || err.Error() != MsgAccessDenied) {
			t.Errorf("CheckAccess(%q) = %v, want PermissionDenied %q", caller, err, MsgAccessDenied)
		}
	}
	if err := a.CheckAccess("", &loomv1.Job{}); err != nil {
		t.Errorf("a job without owner refused an anonymous caller: %v", err)
	}
	held := &loomv1.Job{User: "ana", Hold: true, StateReason: "JobHeldAdmin"}
	if err := a.CheckRelease("ana", held); !errors.Is(err, errs.PermissionDenied) {
		t.Errorf("ana released an admin hold: %v", err)
	}
	if err := a.CheckRelease("root", held); err != nil {
		t.Errorf("root refused: %v", err)
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
