package domain

import (
	"cmp"
	"maps"
	"math"
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

// rootAccount is the top of every project's account tree (Slurm's root).
const rootAccount = "root"

// maxAccountDepth bounds a walk up the account tree: an account deeper
// than this (or on a loop, which the gateway never makes) counts as under
// root.
const maxAccountDepth = 64

// shareTree is how a pass divides a cluster's shares down the account tree
// (Slurm's NormShares): among the accounts and users that have jobs or
// usage, and the accounts above them, each node's share is its parent's
// times its raw shares over those of its parent's children (sub-accounts
// and users). Raw shares are integers, so every sum is exact whatever the
// order: the same shares on every pass and every replica.
type shareTree struct {
	// norm is each account's share of the cluster (root's is 1).
	norm map[string]float64
	// group is the part of an account's share its own users divide: the
	// account's share in the fair-share factor, set against its own users'
	// usage (all of it when it has no sub-accounts).
	group map[string]float64
	// usersW is the raw shares of each account's users, summed.
	usersW map[string]int64
	// parent is the account each account is counted under; kids the
	// accounts under each, by name.
	parent map[string]string
	kids   map[string][]string
	// raw is an account's raw shares.
	raw map[string]int64
}

// newShareTree builds the tree over the accounts of usersW (those with
// jobs or usage) and the accounts above them; acct tells an account's raw
// shares and parent ("" for the top).
func newShareTree(usersW map[string]int64, acct func(string) (int64, string)) *shareTree {
	st := &shareTree{norm: map[string]float64{rootAccount: 1}, group: map[string]float64{}, usersW: usersW,
		parent: map[string]string{}, kids: map[string][]string{}, raw: map[string]int64{}}
	var path []string
	for _, a := range slices.Sorted(maps.Keys(usersW)) {
		path = path[:0]
		for cur := a; cur != rootAccount; {
			if _, seen := st.parent[cur]; seen {
				break
			}
			w, p := acct(cur)
			if p == "" || len(path) >= maxAccountDepth || slices.Contains(path, p) || p == cur {
				p = rootAccount
			}
			path = append(path, cur)
			st.parent[cur], st.raw[cur] = p, w
			st.kids[p] = append(st.kids[p], cur)
			cur = p
		}
	}
	// Top down from root, kids by name: a parent's share is set before
	// its children's.
	queue := []string{rootAccount}
	for len(queue) > 0 {
		a := queue[0]
		queue = queue[1:]
		kids := st.kids[a]
		slices.Sort(kids)
		all := usersW[a]
		for _, k := range kids {
			all += st.raw[k]
		}
		for _, k := range kids {
			st.norm[k] = st.norm[a] * float64(st.raw[k]) / float64(all)
		}
		if len(kids) == 0 {
			st.group[a] = st.norm[a]
		} else {
			st.group[a] = st.norm[a] * float64(usersW[a]) / float64(all)
		}
		queue = append(queue, kids...)
	}
	return st
}

// user is a user's share of the cluster: its account's group share times
// its raw shares over those of the account's users.
func (st *shareTree) user(account string, raw int64) float64 {
	return st.group[account] * float64(raw) / float64(max(st.usersW[account], 1))
}

// factor is the fair-share factor of a user with raw shares and usage use:
// 2^−((u_a/s_a + u_u/s_u)/2), u_a the account's usage over the cluster's
// total, s_a its group share.
func (st *shareTree) factor(acctUse map[string]float64, total float64, account string, raw int64, use float64) float64 {
	if total <= 0 {
		return 1
	}
	return math.Exp2(-(acctUse[account]/total/st.group[account] + use/total/st.user(account, raw)) / 2)
}

// shareUser is a user with jobs or usage, for Shares' rows.
type shareUser struct {
	account, user string
	raw           int64
	use           float64
}

// shareRows are Shares' rows, the tree depth first from root's own row:
// an account's users by name, then each sub-account and what is under it.
// An account's usage is its subtree's, as Slurm's sshare shows it.
func (st *shareTree) shareRows(acctUse map[string]float64, total float64, users []shareUser) []*loomv1.Share {
	effective := func(use float64) float64 {
		if total <= 0 {
			return 0
		}
		return use / total
	}
	byAcct := map[string][]shareUser{}
	for _, u := range users {
		byAcct[u.account] = append(byAcct[u.account], u)
	}
	under := map[string]float64{}
	var sum func(a string) float64
	sum = func(a string) float64 {
		v := acctUse[a]
		for _, k := range st.kids[a] {
			v += sum(k)
		}
		under[a] = v
		return v
	}
	sum(rootAccount)
	if len(users) == 0 && len(st.kids[rootAccount]) == 0 {
		return []*loomv1.Share{} // not nil: the cluster exists (Shares)
	}
	out := []*loomv1.Share{{Account: rootAccount, NormShares: 1, RawShares: 1, RawUsage: under[rootAccount], EffectiveUsage: effective(under[rootAccount])}}
	var walk func(a string)
	walk = func(a string) {
		us := byAcct[a]
		slices.SortFunc(us, func(x, y shareUser) int { return cmp.Compare(x.user, y.user) })
		for _, u := range us {
			out = append(out, &loomv1.Share{Account: a, User: u.user, RawShares: int32(u.raw), NormShares: st.user(a, u.raw),
				RawUsage: u.use, EffectiveUsage: effective(u.use), FairShare: st.factor(acctUse, total, a, u.raw, u.use)})
		}
		for _, k := range st.kids[a] {
			out = append(out, &loomv1.Share{Account: k, ParentAccount: st.parent[k], RawShares: int32(st.raw[k]),
				NormShares: st.norm[k], RawUsage: under[k], EffectiveUsage: effective(under[k])})
			walk(k)
		}
	}
	walk(rootAccount)
	return out
}
