package domain

import (
	"cmp"
	"maps"
	"slices"
	"time"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// Shares is the cluster's fair-share standing now, as the next pass's
// priorities see it (sshare): each account with jobs or usage, then its
// users, by name; empty, not nil, for a cluster with none, and nil for a
// cluster the state does not have.
func (s *State) Shares(cluster string, now time.Time) []*loomv1.Share {
	c := s.clusters[cluster]
	if c == nil {
		return nil
	}
	t := newTxn(s, now)
	t.wantShares = true
	p := t.newPass(cluster, c)
	return t.newPrioCtx(cluster, c, p.views, t.pendingEntries(cluster)).shares
}

// shareRows are Shares' rows from what newPrioCtx computed: the accounts'
// usage and user counts, each user's usage, the cluster's total and the
// fair-share factor of an account's user with a usage.
func shareRows(acctUse map[string]float64, usersOf map[string]int, users map[assocKey]float64, total float64,
	fs func(account string, use float64) float64) []*loomv1.Share {
	nAcct := float64(max(len(usersOf), 1))
	effective := func(use float64) float64 {
		if total <= 0 {
			return 0
		}
		return use / total
	}
	out := []*loomv1.Share{} // not nil: the cluster exists (Shares)
	for _, a := range slices.Sorted(maps.Keys(usersOf)) {
		out = append(out, &loomv1.Share{Account: a, NormShares: 1 / nAcct, RawUsage: acctUse[a], EffectiveUsage: effective(acctUse[a])})
	}
	for k, use := range users {
		out = append(out, &loomv1.Share{Account: k.account, User: k.user, NormShares: 1 / nAcct / float64(max(usersOf[k.account], 1)),
			RawUsage: use, EffectiveUsage: effective(use), FairShare: fs(k.account, use)})
	}
	slices.SortFunc(out, func(a, b *loomv1.Share) int {
		return cmp.Or(cmp.Compare(a.GetAccount(), b.GetAccount()), cmp.Compare(a.GetUser(), b.GetUser()))
	})
	return out
}
