package domain

import (
	"math"
	"testing"
	"time"

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
	want := []row{{"acct-a", ""}, {"acct-a", "busy"}, {"acct-a", "idle"}, {"acct-b", ""}, {"acct-b", "fresh"}}
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
