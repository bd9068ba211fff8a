package domain

import (
	"strconv"
	"testing"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// TestExclusiveUserSharesWithTheSameUser follows Slurm 22.05 beside
// two nodes (two OS users): an --exclusive=user job holds its
// tasks' CPUs only (NumCPUs=1), the same user's jobs join its node, another
// user's wait for Resources; and an --exclusive=user job waits while
// another user's job runs on the node it needs, but joins its own user's.
func TestExclusiveUserSharesWithTheSameUser(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.cpuNode("cpu-a") // n2-standard-8: 8 CPUs
	h.cpuNode("cpu-b")
	sub := func(id int, user string, exclUser bool, host string) *Change {
		j := &loomv1.Job{Name: jobName(id), JobId: strconv.Itoa(id), Cluster: cl, NodeCount: 1, Ntasks: 1,
			User: user, ExclusiveUser: exclUser, Command: []string{"/bin/x"}}
		if host != "" {
			j.Nodelist = []string{host}
		}
		return h.submitJob(j)
	}
	sub(1, "alice", true, "cpu-a")
	h.wantState(1, loomv1.JobState_RUNNING, "")
	if r := h.s.Run(jobName(1), 1); r == nil || len(r.CPUs) != 1 || r.CPUs[0] != 1 || !r.ExclusiveUser {
		t.Fatalf("alice's --exclusive=user run: %+v, want 1 CPU held, ExclusiveUser", r)
	}
	sub(2, "alice", false, "cpu-a")
	h.wantState(2, loomv1.JobState_RUNNING, "")
	// Anywhere, with bob's job on cpu-b: only cpu-a, where alice alone runs.
	sub(6, "bob", false, "cpu-b")
	h.wantState(6, loomv1.JobState_RUNNING, "")
	sub(7, "alice", true, "")
	h.wantState(7, loomv1.JobState_RUNNING, "")
	if r := h.s.Run(jobName(7), 1); r == nil || r.Hostnames[0] != "cpu-a" {
		t.Fatalf("alice's second --exclusive=user job: %+v, want it on cpu-a", r)
	}
	c := sub(3, "bob", false, "cpu-a")
	h.wantState(3, loomv1.JobState_PENDING, ReasonResources)
	if d := decision(c, 3); d == nil || d.Filtered["OtherUser"] != 1 {
		t.Fatalf("bob's job beside alice's --exclusive=user: want cpu-a filtered as OtherUser, got %+v", d)
	}
	sub(4, "bob", false, "cpu-b")
	h.wantState(4, loomv1.JobState_RUNNING, "")
	// Behind bob's blocked job 3 Loom says Priority (its rule for a job
	// behind a blocked one; Slurm said Resources): the filter is the point.
	c = sub(5, "alice", true, "cpu-b")
	h.wantState(5, loomv1.JobState_PENDING, ReasonPriority)
	if d := decision(c, 5); d == nil || d.Filtered["OtherUser"] != 1 {
		t.Fatalf("alice's --exclusive=user beside bob's job: want cpu-b filtered as OtherUser, got %+v", d)
	}
	// Alice's jobs end: bob's waiting job takes cpu-a.
	for _, id := range []int{1, 2, 7} {
		h.finish(id, 0)
	}
	h.tick(0)
	h.wantState(3, loomv1.JobState_RUNNING, "")
	checkInvariants(t, h.s)
}

// TestDefaultChecksKeepTheQuickCount: every policy's default capacity
// checks (CheckUser among them) are what defaultCapacity knows, so that
// fittingNow counts the shape's candidates instead of scanning the
// partition's nodes for every preemptor.
func TestDefaultChecksKeepTheQuickCount(t *testing.T) {
	t.Parallel()
	for _, pol := range []Policy{FIFOPolicy(), EASYPolicy(), DefaultPolicy()} {
		s, now := benchCluster(4, 4, 0.5, 1)
		s.cfg.Policy = pol
		tx := writerTxn(s, now)
		if p := tx.newPass(cl, tx.cluster(cl)); !p.defaultCapacity() {
			t.Errorf("policy %s: its default checks are not defaultCapacity's", pol.Name)
		}
	}
}
