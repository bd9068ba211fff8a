package domain

import (
	"errors"
	"testing"
	"time"

	"github.com/loom-ml/loom/libs/errs"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// TestAssocMaxJobs: after AssociationChanged gives ada's association with
// account a MaxJobs 2, her third job waits with AssocMaxJobsLimit while two
// run, though nodes are free; it starts when one of them ends. Other
// accounts and users are not held, and the limit survives a restart.
func TestAssocMaxJobs(t *testing.T) {
	t.Parallel()
	h := newSpecHarness(t, Config{})
	for _, host := range []string{"a3-0001", "a3-0002", "a3-0003", "a3-0004"} {
		h.gpuNode(host, "b1")
	}
	c := h.do(&eventsv1.AssociationChanged{Project: "default", Association: &loomv1.Association{Account: "a", User: "ada", MaxJobs: 2}})
	if l := c.Assocs[AssocLimitKey("default", "a", "ada")]; l == nil || l.MaxJobs != 2 {
		t.Fatalf("change's limits: %v", c.Assocs)
	}
	h.submitJob(job(1, 1, 1, user("ada", "a")))
	h.submitJob(job(2, 1, 1, user("ada", "a")))
	h.submitJob(job(3, 1, 1, user("ada", "a")))
	h.submitJob(job(4, 1, 1, user("ada", "b")))
	h.submitJob(job(5, 1, 1, user("bob", "a")))
	h.wantState(1, loomv1.JobState_RUNNING, "")
	h.wantState(2, loomv1.JobState_RUNNING, "")
	h.wantExact(3, loomv1.JobState_PENDING, ReasonAssocMaxJobsLimit)
	h.wantState(4, loomv1.JobState_RUNNING, "")
	h.wantState(5, loomv1.JobState_RUNNING, "")

	// A restarted scheduler loads the limit with the rest.
	restarted := NewState(h.s.Config())
	restarted.Restore(h.s.Snapshot())
	if got := restarted.AssocLimits(); len(got) != 1 || got[0].MaxJobs != 2 || got[0].User != "ada" {
		t.Fatalf("limits after a restore: %v", got)
	}

	h.finish(1, 0)
	h.wantState(3, loomv1.JobState_RUNNING, "")

	// Raising the limit schedules again at once: a fourth waits, then starts.
	h.submitJob(job(6, 1, 1, user("ada", "a")))
	h.wantExact(6, loomv1.JobState_PENDING, ReasonAssocMaxJobsLimit)
	h.do(&eventsv1.AssociationChanged{Project: "default", Association: &loomv1.Association{Account: "a", User: "ada", MaxJobs: 3}})
	h.wantState(6, loomv1.JobState_RUNNING, "")

	// The same association in another project does not limit this one's.
	h.do(&eventsv1.AssociationChanged{Project: "other", Association: &loomv1.Association{Account: "b", User: "ada", MaxJobs: 1}})
	h.submitJob(job(7, 0, 0, user("ada", "b")))
	h.wantState(7, loomv1.JobState_RUNNING, "")
}

func TestAssociationChangedRefusesBadEvents(t *testing.T) {
	t.Parallel()
	s := NewState(Config{})
	for _, ev := range []*eventsv1.AssociationChanged{
		{Association: &loomv1.Association{Account: "a", User: "ada"}},
		{Project: "default", Association: &loomv1.Association{User: "ada"}},
		{Project: "default", Association: &loomv1.Association{Account: "a"}},
		{Project: "default", Association: &loomv1.Association{Account: "a", User: "ada", MaxJobs: -1}},
		{Project: "default", Association: &loomv1.Association{Account: "a", User: "ada", Fairshare: -1}},
	} {
		var inv *errs.InvalidError
		if _, err := s.Handle(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC), ev); !errors.As(err, &inv) {
			t.Errorf("%v: got %v, want an InvalidError", ev, err)
		}
	}
	for _, ev := range []*eventsv1.AccountChanged{
		{Account: &loomv1.Account{Name: "projects/default/accounts/a"}},
		{Project: "default", Account: &loomv1.Account{Name: "projects/default/accounts/"}},
		{Project: "default", Account: &loomv1.Account{Name: "projects/default/accounts/a", ParentAccount: "a"}},
		{Project: "default", Account: &loomv1.Account{Name: "projects/default/accounts/a", ParentAccount: "x|y"}},
		{Project: "default", Account: &loomv1.Account{Name: "projects/default/accounts/a", Fairshare: -1}},
	} {
		var inv *errs.InvalidError
		if _, err := s.Handle(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC), ev); !errors.As(err, &inv) {
			t.Errorf("%v: got %v, want an InvalidError", ev, err)
		}
	}
}

// TestAssocMaxJobsInOneBatch: a limit and the jobs it holds back, handled
// in one batch, are judged together: the pass reads the change's limit.
func TestAssocMaxJobsInOneBatch(t *testing.T) {
	t.Parallel()
	h := newSpecHarness(t, Config{})
	h.gpuNode("a3-0001", "b1")
	h.gpuNode("a3-0002", "b1")
	h.batch(
		&eventsv1.AssociationChanged{Project: "default", Association: &loomv1.Association{Account: "a", User: "ada", MaxJobs: 1}},
		&eventsv1.SubmitJob{Job: job(1, 1, 1, user("ada", "a"))},
		&eventsv1.SubmitJob{Job: job(2, 1, 1, user("ada", "a"))},
	)
	h.wantState(1, loomv1.JobState_RUNNING, "")
	h.wantExact(2, loomv1.JobState_PENDING, ReasonAssocMaxJobsLimit)
}

// TestDeletedAssociationAndAccount: a deleted association's MaxJobs no
// longer holds its user's jobs back, and a deleted account's record leaves
// the state (and what a restarted scheduler loads).
func TestDeletedAssociationAndAccount(t *testing.T) {
	t.Parallel()
	h := newSpecHarness(t, Config{})
	h.gpuNode("a3-0001", "b1")
	h.gpuNode("a3-0002", "b1")
	ada := &loomv1.Association{Account: "a", User: "ada", MaxJobs: 1}
	h.do(&eventsv1.AssociationChanged{Project: "default", Association: ada})
	h.do(&eventsv1.AccountChanged{Project: "default", Account: &loomv1.Account{Name: "projects/default/accounts/a", Fairshare: 3}})
	h.submitJob(job(1, 1, 1, user("ada", "a")))
	h.submitJob(job(2, 1, 1, user("ada", "a")))
	h.wantState(1, loomv1.JobState_RUNNING, "")
	h.wantExact(2, loomv1.JobState_PENDING, ReasonAssocMaxJobsLimit)
	if got := h.s.AssocLimits(); len(got) != 2 {
		t.Fatalf("records before the deletes: %v", got)
	}

	c := h.do(&eventsv1.AssociationChanged{Project: "default", Association: ada, Deleted: true})
	if l, ok := c.Assocs[AssocLimitKey("default", "a", "ada")]; !ok || l != nil {
		t.Fatalf("change's records: %v, want ada's removed", c.Assocs)
	}
	h.wantState(2, loomv1.JobState_RUNNING, "")
	h.do(&eventsv1.AccountChanged{Project: "default", Account: &loomv1.Account{Name: "projects/default/accounts/a"}, Deleted: true})
	if got := h.s.AssocLimits(); len(got) != 0 {
		t.Fatalf("records after the deletes: %v", got)
	}
	restarted := NewState(h.s.Config())
	restarted.Restore(h.s.Snapshot())
	if got := restarted.AssocLimits(); len(got) != 0 {
		t.Fatalf("records after a restore: %v", got)
	}
}
