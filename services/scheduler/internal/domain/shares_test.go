package domain

import (
	"fmt"
	"math"
	"testing"
	"time"

	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/scheduler/internal/domain/views"
)

// TestShares: sshare's rows are the standing the priorities are computed
// from: accounts share equally, users equally within their account, usage
// decays and counts running jobs, and each user's factor is the one their
// pending job's FAIRSHARE is weighted from.
func TestShares(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.node("gpu-0001", 8)
	h.submitJob(job(1, 1, 8, user("busy", "acct-a")))
	h.wantState(1, loomv1.JobState_RUNNING, "")
	h.tick(time.Hour)
	h.finish(1, 0)
	h.submitJob(job(2, 1, 8, user("busy", "acct-a")))
	h.submitJob(job(3, 1, 8, user("idle", "acct-a")))
	h.submitJob(job(4, 1, 8, user("fresh", "acct-b")))
	h.submitJob(job(5, 1, 8, user("busy", "acct-a")))
	h.wantState(2, loomv1.JobState_RUNNING, "") // 3, 4 and 5 wait for its GPUs

	rows := h.s.Shares(cl, h.now)
	type row struct{ account, user string }
	got := map[row]*loomv1.Share{}
	var order []row
	for _, r := range rows {
		k := row{r.GetAccount(), r.GetUser()}
		got[k] = r
		order = append(order, k)
	}
	want := []row{{"root", ""}, {"acct-a", ""}, {"acct-a", "busy"}, {"acct-a", "idle"}, {"acct-b", ""}, {"acct-b", "fresh"}}
	if len(order) != len(want) {
		t.Fatalf("rows %v, want %v", order, want)
	}
	for i := range want {
		if order[i] != want[i] {
			t.Fatalf("rows %v, want %v", order, want)
		}
	}
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	a, busy, idle, fresh := got[row{"acct-a", ""}], got[row{"acct-a", "busy"}], got[row{"acct-a", "idle"}], got[row{"acct-b", "fresh"}]
	if !near(a.GetNormShares(), 0.5) || !near(busy.GetNormShares(), 0.25) || !near(fresh.GetNormShares(), 0.5) {
		t.Errorf("shares: acct-a %v, busy %v, fresh %v; want 0.5, 0.25, 0.5", a.GetNormShares(), busy.GetNormShares(), fresh.GetNormShares())
	}
	// An hour on 8 GPUs, a little decayed (half-life 7 days by default).
	if u := busy.GetRawUsage(); u < 8*3600*0.99 || u > 8*3600 || !near(a.GetRawUsage(), u) || !near(busy.GetEffectiveUsage(), 1) {
		t.Errorf("busy's usage %v (account %v), effective %v", u, a.GetRawUsage(), busy.GetEffectiveUsage())
	}
	if r := got[row{"root", ""}]; !near(r.GetRawUsage(), a.GetRawUsage()) || r.GetEffectiveUsage() != 1 || r.GetNormShares() != 1 {
		t.Errorf("root's row %v: want the cluster's usage, effective 1, share 1", r)
	}
	if idle.GetRawUsage() != 0 || fresh.GetFairShare() != 1 || !(busy.GetFairShare() < idle.GetFairShare() && idle.GetFairShare() < fresh.GetFairShare()) {
		t.Errorf("fair share: busy %v < idle %v < fresh %v = 1, want that order", busy.GetFairShare(), idle.GetFairShare(), fresh.GetFairShare())
	}
	// One computation: the pending jobs' FAIRSHARE factors are these,
	// weighted.
	w := float64(h.s.Config().Weights.FairShare)
	for id, r := range map[int]*loomv1.Share{5: busy, 3: idle, 4: fresh} {
		if f := views.Job(h.s, jobName(id), h.now).GetPriorityFactors().GetFairshare(); f != int64(math.Round(w*r.GetFairShare())) {
			t.Errorf("job %d's FAIRSHARE %d, want %v × %v", id, f, w, r.GetFairShare())
		}
	}
	if h.s.Shares("projects/p/clusters/nope", h.now) != nil {
		t.Error("shares of a cluster the state does not have")
	}
	// A cluster with no jobs and no usage: none, but not nil (it exists).
	h2 := newHarness(t)
	if rows := h2.s.Shares(cl, h2.now); rows == nil || len(rows) != 0 {
		t.Errorf("shares of an idle cluster: %v, want empty", rows)
	}
}

// TestSharesFollowTheAccountTree: accounts' and associations' Fairshare
// (AccountChanged, AssociationChanged) divide the cluster down the account
// tree among those with jobs: research (3 shares) over ops (1), research's
// sub-accounts nlp (2) and vision (1), and within nlp dan (3) and bob (1).
// The rows come depth first, each account's users then its sub-accounts,
// and a restarted scheduler divides them the same.
func TestSharesFollowTheAccountTree(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.node("gpu-0001", 8)
	for _, a := range []*loomv1.Account{
		{Name: "projects/default/accounts/research", ParentAccount: "root", Fairshare: 3},
		{Name: "projects/default/accounts/ops", ParentAccount: "root", Fairshare: 1},
		{Name: "projects/default/accounts/nlp", ParentAccount: "research", Fairshare: 2},
		{Name: "projects/default/accounts/vision", ParentAccount: "research"}, // 0: Slurm's default, 1
	} {
		h.do(&eventsv1.AccountChanged{Project: "default", Account: a})
	}
	h.do(&eventsv1.AssociationChanged{Project: "default", Association: &loomv1.Association{Account: "nlp", User: "dan", Fairshare: 3}})
	// ann's small job runs an hour; jobs too big for the node keep the
	// others pending, so each has a pending job.
	h.submitJob(job(5, 1, 1, user("ann", "vision")))
	h.wantState(5, loomv1.JobState_RUNNING, "")
	h.tick(time.Hour)
	h.submitJob(job(1, 1, 16, user("ann", "vision")))
	h.submitJob(job(2, 1, 16, user("bob", "nlp")))
	h.submitJob(job(3, 1, 16, user("cat", "ops")))
	h.submitJob(job(4, 1, 16, user("dan", "nlp")))

	type row struct {
		account, user, parent string
		raw                   int32
		norm                  float64
	}
	want := []row{
		{"root", "", "", 1, 1},
		{"ops", "", "root", 1, 0.25},
		{"ops", "cat", "", 1, 0.25},
		{"research", "", "root", 3, 0.75},
		{"nlp", "", "research", 2, 0.5},
		{"nlp", "bob", "", 1, 0.125},
		{"nlp", "dan", "", 3, 0.375},
		{"vision", "", "research", 1, 0.25},
		{"vision", "ann", "", 1, 0.25},
	}
	check := func(name string, rows []*loomv1.Share) {
		t.Helper()
		// An account's usage is its subtree's: ann's hour is vision's,
		// research's and root's, not ops's or nlp's.
		use := map[string]float64{}
		for _, r := range rows {
			if r.GetUser() == "" {
				use[r.GetAccount()] = r.GetRawUsage()
			}
		}
		if u := use["vision"]; u < 3600*0.99 || use["research"] != u || use["root"] != u || use["ops"] != 0 || use["nlp"] != 0 {
			t.Errorf("%s: accounts' usage %v, want ann's hour on vision, research and root", name, use)
		}
		var got []row
		for _, r := range rows {
			got = append(got, row{r.GetAccount(), r.GetUser(), r.GetParentAccount(), r.GetRawShares(), r.GetNormShares()})
		}
		if len(got) != len(want) {
			t.Fatalf("%s: rows %v, want %v", name, got, want)
		}
		for i := range want {
			if g, w := got[i], want[i]; g.account != w.account || g.user != w.user || g.parent != w.parent ||
				g.raw != w.raw || math.Abs(g.norm-w.norm) > 1e-12 {
				t.Errorf("%s: row %d %+v, want %+v", name, i, g, w)
			}
		}
	}
	check("shares", h.s.Shares(cl, h.now))
	restarted := NewState(h.s.Config())
	restarted.Restore(h.s.Snapshot())
	check("after a restart", restarted.Shares(cl, h.now))
}

// TestAccountSharesWeighPriorities: two users with the same usage in
// accounts of 3 and 1 shares: the one whose account holds 3 gets the higher
// FAIRSHARE factor, 2^−(u/s) with u ≈ ½ and s = ¾ against ¼; with the
// accounts sharing equally (no AccountChanged) their factors are equal.
func TestAccountSharesWeighPriorities(t *testing.T) {
	t.Parallel()
	factors := func(shares bool) (big, small int64) {
		h := newHarness(t)
		h.node("gpu-0001", 8)
		h.node("gpu-0002", 8)
		if shares {
			h.do(&eventsv1.AccountChanged{Project: "default", Account: &loomv1.Account{Name: "projects/default/accounts/big", Fairshare: 3}})
			h.do(&eventsv1.AccountChanged{Project: "default", Account: &loomv1.Account{Name: "projects/default/accounts/small", Fairshare: 1}})
		}
		h.submitJob(job(1, 1, 8, user("ann", "big")))
		h.submitJob(job(2, 1, 8, user("bob", "small")))
		h.wantState(1, loomv1.JobState_RUNNING, "")
		h.wantState(2, loomv1.JobState_RUNNING, "")
		h.tick(time.Hour)
		h.submitJob(job(3, 1, 8, user("ann", "big")))
		h.submitJob(job(4, 1, 8, user("bob", "small")))
		f := func(id int) int64 { return views.Job(h.s, jobName(id), h.now).GetPriorityFactors().GetFairshare() }
		return f(3), f(4)
	}
	// The jobs started a few seconds apart, so the halves are nearly so.
	w := float64(NewState(Config{}).Config().Weights.FairShare)
	wantBig, wantSmall := w*math.Exp2(-0.5/0.75), w*math.Exp2(-0.5/0.25)
	if big, small := factors(true); math.Abs(float64(big)-wantBig) > 5 || math.Abs(float64(small)-wantSmall) > 5 {
		t.Errorf("FAIRSHARE with 3:1 shares: big %d, small %d; want about %.0f, %.0f", big, small, wantBig, wantSmall)
	}
	if big, small := factors(false); big != small {
		t.Errorf("FAIRSHARE with equal shares: %d and %d, want equal", big, small)
	}
}

// TestShareTreeSurvivesLoopsAndDepth: records that make a loop (a under b
// under a) or a chain deeper than maxAccountDepth, which the gateway never
// makes, still give every account a share and the shares still sum to 1.
func TestShareTreeSurvivesLoopsAndDepth(t *testing.T) {
	t.Parallel()
	parents := map[string]string{"a": "b", "b": "a", "c": "c"}
	for i := range 2 * maxAccountDepth {
		parents[fmt.Sprintf("d%03d", i)] = fmt.Sprintf("d%03d", i+1)
	}
	users := map[string]int64{"a": 1, "b": 2, "c": 1, "d000": 1, "(none)": 0}
	st := newShareTree(users, func(a string) (int64, string) { return 1, parents[a] })
	sum := 0.0
	for a := range users {
		if st.norm[a] <= 0 {
			t.Errorf("account %s: share %v", a, st.norm[a])
		}
		sum += st.group[a] * float64(min(users[a], 1)) // users' part, where they are
	}
	// The users' parts of the tree, plus the empty account's share, are all
	// of it: nothing lost on the loop or the cut chain.
	if total := sum + st.norm["(none)"]; math.Abs(total-1) > 1e-9 {
		t.Errorf("shares sum to %v, want 1", total)
	}
}
