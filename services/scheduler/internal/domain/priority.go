package domain

import (
	"math"
	"strings"
	"time"

	"github.com/loom-ml/loom/libs/clusterspec"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"

	"github.com/loom-ml/loom/services/scheduler/internal/domain/place"
)

// Multifactor priority, as Slurm's priority/multifactor plugin computes it:
//
//	priority = W_age·age + W_fairshare·fairshare + W_jobsize·size + W_partition·tier + W_qos·qos − nice
//
// with every factor between 0 and 1:
//
//   - age = min(time eligible / MaxAge, 1), eligible from submit (or --begin);
//   - fairshare = 2^−((u_a/s_a + u_u/s_u)/2): u_a is the account's share of the
//     cluster's decayed usage, s_a its share of the shares (divided down the
//     account tree by raw shares, sacctmgr Fairshare=, among the accounts
//     and users with jobs or usage: shares.go), u_u and s_u the same for the
//     user among the cluster's usage and its account's users (so a user alone
//     in an account gets Slurm's classic 2^−(usage/shares));
//   - size = the job's GPUs over the partition's (nodes over nodes for jobs
//     without GPUs): larger jobs first, as Slurm's default;
//   - tier = the partition's PriorityTier over the cluster's highest;
//   - qos = the QOS's priority over the QOS table's highest.
//
// Usage is GPU-seconds (CPU-seconds for jobs without GPUs) decayed with
// HalfLife: ended runs are charged when they end, running ones count as they
// go. A held job's priority is 0, as in Slurm.

type assocKey struct{ account, user string }

// prioCtx is what priorities of one cluster's jobs need, computed once per pass.
type prioCtx struct {
	now       int64 // unix nanoseconds
	cfg       *Config
	cluster   *Cluster
	partGPUs  []int64 // total GPUs per partition index
	partNodes []int64
	partTier  []int32
	maxTier   int32
	maxQOS    int64
	qosFactor []float64 // per QOS table index
	// fsByID is the fair-share factor per interned association id;
	// fsOther that of associations not interned.
	fsByID  []float64
	fsOther map[assocKey]float64
	// shares is the standing fair share was computed from (sshare's rows),
	// kept only when the txn wants it (Shares).
	shares []*loomv1.Share
	// The weighted factors that do not depend on the job itself, rounded
	// once per pass (see sum): per interned association, per partition
	// (tier, and size by GPUs up to sizeGPUs), per QOS.
	fsW            []int64
	fsDefault      int64
	partW          []int64
	sizeW          [][]int64
	qosW           []int64
	wAge, maxAgeNs float64
}

// sizeGPUs bounds the GPU counts whose size factor sum takes from a table.
const sizeGPUs = 64

// roundHalfAway is a weighted factor as the integer a priority adds: the
// nearest one, halves away from zero (math.Round's rule; not the even one,
// not a truncation). Every factor is rounded here, so the
// per-pass tables (weigh, sumIn) and the per-job sums (sum, priority) give
// the same integers from the same expressions.
func roundHalfAway(x float64) int64 {
	return int64(math.Round(x))
}

// decay returns the factor usage decays by over d.
func decay(d, halfLife time.Duration) float64 {
	if d <= 0 {
		return 1
	}
	return math.Exp2(-float64(d) / float64(halfLife))
}

// runRate is what a run is charged per second: its GPUs, else its CPUs,
// else its node count.
func runRate(r *Run) float64 {
	if g := r.gpuCount(); g > 0 {
		return float64(g)
	}
	if c := r.cpuCount(); c > 0 {
		return float64(c)
	}
	return float64(len(r.Nodes))
}

// accrued is the decayed usage, as of now, of running at rate from start to
// now: the integral of rate·2^−(now−t)/H over [start, now].
func accrued(rate float64, start, now time.Time, halfLife time.Duration) float64 {
	d := now.Sub(start)
	if d <= 0 {
		return 0
	}
	h := halfLife.Seconds()
	return rate * h / math.Ln2 * (1 - math.Exp2(-d.Seconds()/h))
}

// accruals is accrued for the runs of one pass (one now and half-life),
// with the decayed fraction 1 − 2^−d/H kept per running time d: runs
// started together (by one pass, or at one second) share it, and its
// math.Exp2 was most of fair share's cost per run. The value is accrued's
// to the bit: the same operations on the same operands, in its order.
type accruals struct {
	now      time.Time
	halfLife time.Duration
	h        float64
	// ds and fracs: a direct-mapped table by d (0: empty; only d > 0 is
	// kept), a slot overwritten by the next d that maps to it.
	ds    [accrualSlots]time.Duration
	fracs [accrualSlots]float64
}

// accrualBits sizes accruals' table: more slots than the distinct running
// times of most clusters' runs (the cycle benchmark's 25,000 runs have
// ~3,600), 128 KB in all.
const (
	accrualBits  = 13
	accrualSlots = 1 << accrualBits
)

// accruals returns the table for a pass's fair share: the scratch's for a
// writer (kept, not allocated again each pass), else nil (a read's pass
// computes each run's accrued usage: no 128 KB table per read).
func (t *txn) accruals() *accruals {
	if t.scratch == nil {
		return nil
	}
	if t.scratch.accruals == nil {
		t.scratch.accruals = new(accruals)
	}
	return t.scratch.accruals
}

// reset prepares a for a pass at now with halfLife, its table empty.
func (a *accruals) reset(now time.Time, halfLife time.Duration) {
	a.now, a.halfLife, a.h = now, halfLife, halfLife.Seconds()
	clear(a.ds[:])
}

// of is accrued(rate, start, a.now, a.halfLife).
func (a *accruals) of(rate float64, start time.Time) float64 {
	d := a.now.Sub(start)
	if d <= 0 {
		return 0
	}
	k := uint64(d) * 0x9E3779B97F4A7C15 >> (64 - accrualBits) // Fibonacci hashing
	if a.ds[k] != d {
		a.ds[k], a.fracs[k] = d, 1-math.Exp2(-d.Seconds()/a.h)
	}
	return rate * a.h / math.Ln2 * a.fracs[k]
}

// newPrioCtx gathers the usage of the cluster's accounts and users (stored,
// plus what running runs accrued) and the accounts and users with pending
// jobs, and computes every association's fair-share factor.
func (t *txn) newPrioCtx(cluster string, c *Cluster, views []place.NodeView, pend []*pendEntry) *prioCtx {
	s := t.s
	cfg := &s.cfg
	p := &prioCtx{now: t.now.UnixNano(), cfg: cfg, cluster: c, maxQOS: cfg.maxQOSPriority()}
	parts := c.EffectivePartitions()
	p.partGPUs = make([]int64, len(parts))
	p.partNodes = make([]int64, len(parts))
	p.partTier = make([]int32, len(parts))
	for i, pt := range parts {
		p.partTier[i] = pt.Tier
		p.maxTier = max(p.maxTier, pt.Tier)
	}
	// One walk of the views for every partition (integer sums: the same
	// in any order).
	for v := range views {
		if views[v].Node.Role == clusterspec.RoleLogin {
			continue
		}
		for i := range parts {
			if views[v].InPartition(i) {
				p.partGPUs[i] += int64(views[v].Node.GPUs)
				p.partNodes[i]++
			}
		}
	}
	p.qosFactor = make([]float64, len(cfg.QOS))
	for i, q := range cfg.QOS {
		p.qosFactor[i] = float64(q.Priority) / float64(p.maxQOS)
	}

	// Usage: stored records (decayed to now) plus what running runs accrued.
	nIDs := len(s.assocList)
	userUse := make([]float64, nIDs)
	present := make([]bool, nIDs)
	otherUse := map[assocKey]float64{}
	otherPresent := map[assocKey]bool{}
	acctUse := map[string]float64{}
	total := 0.0
	mark := func(a *assoc, v float64) {
		if a.id >= 0 {
			userUse[a.id] += v
			present[a.id] = true
		} else {
			k := assocKey{a.account, a.user}
			otherUse[k] += v
			otherPresent[k] = true
		}
	}
	prefix := cluster + "|"
	seen := func(key string, u *Usage) {
		if u == nil || !strings.HasPrefix(key, prefix) {
			return
		}
		account, user, isUser := strings.Cut(key[len(prefix):], "|")
		v := u.Value * decay(t.now.Sub(u.At), cfg.HalfLife)
		if isUser {
			mark(s.lookupAssoc(account, user), v)
		} else {
			acctUse[account] += v
			total += v
		}
	}
	for key := range s.usage {
		seen(key, t.usage(key))
	}
	for key, u := range t.c.Usage {
		if _, old := s.usage[key]; !old {
			seen(key, u)
		}
	}
	// The runs as eachClusterRun visits them (the same order, so the same
	// float sums), the state's from their contiguous copies.
	ci := s.byCluster[cluster]
	// The runs' usage goes to their accounts' sums through a slot per
	// account (an interned association's by its id), not a map look-up
	// per run: each account's sum gets the same additions in the same
	// order, so the same float. Written back after the runs.
	slots := make(map[string]int32, len(acctUse))
	var sums []float64
	var touched []bool
	slotOf := func(account string) int32 {
		k, ok := slots[account]
		if !ok {
			k = int32(len(sums))
			slots[account] = k
			v, had := acctUse[account]
			sums, touched = append(sums, v), append(touched, had)
		}
		return k
	}
	acctSlot := make([]int32, nIDs)
	for id, a := range s.assocList {
		acctSlot[id] = slotOf(a.account)
	}
	acc := t.accruals()
	if acc != nil {
		acc.reset(t.now, cfg.HalfLife)
	}
	run := func(ended bool, start time.Time, rate float64, account string, a *assoc) {
		if ended || start.IsZero() {
			return
		}
		var v float64
		if acc != nil {
			v = acc.of(rate, start)
		} else {
			v = accrued(rate, start, t.now, cfg.HalfLife)
		}
		var k int32
		if a != nil && a.id >= 0 && int(a.id) < nIDs && a.account == account {
			k = acctSlot[a.id]
		} else {
			k = slotOf(account)
		}
		sums[k] += v
		touched[k] = true
		total += v
		mark(a, v)
	}
	if ci != nil {
		overRuns := len(t.c.Runs) > 0
		for i := range ci.usage {
			u := &ci.usage[i]
			if overRuns {
				if _, over := t.c.Runs[u.key]; over {
					continue
				}
			}
			rate := u.rate
			if rate == 0 {
				rate = runRate(ci.active[i])
			}
			a := u.assoc
			if a == nil {
				a = s.runAssoc(ci.active[i])
			}
			run(u.ended, u.start, rate, u.account, a)
		}
	}
	for _, r := range t.c.Runs {
		if r != nil && !r.Released && r.Cluster == cluster {
			rate := r.rate
			if rate == 0 {
				rate = runRate(r)
			}
			run(r.Ended(), r.Start, rate, r.Account, s.runAssoc(r))
		}
	}
	for account, k := range slots {
		if touched[k] {
			acctUse[account] = sums[k]
		}
	}
	// Who has pending jobs: the state's count per association when the
	// change edits no job (pend is then the state's queue), else pend.
	if ci != nil && len(t.c.Jobs) == 0 && len(pend) == len(ci.pending) {
		for id, n := range ci.pendAssoc {
			if n > 0 && id < nIDs {
				present[id] = true
			}
		}
	} else {
		for _, e := range pend {
			mark(e.assoc, 0)
		}
	}

	// Shares: divided down the account tree (shares.go) among the accounts
	// and users with jobs or usage.
	project := projectOf(cluster)
	raws := t.rawShares(project)
	usersW := map[string]int64{}
	for id, ok := range present {
		if ok {
			a := s.assocList[id]
			usersW[a.account] += raws(a.account, a.user)
		}
	}
	for k := range otherPresent {
		usersW[k.account] += raws(k.account, k.user)
	}
	for a := range acctUse {
		if _, ok := usersW[a]; !ok {
			usersW[a] = 0
		}
	}
	tree := newShareTree(usersW, func(account string) (int64, string) {
		return raws(account, ""), t.accountParent(project, account)
	})
	p.fsByID = make([]float64, nIDs)
	for id, ok := range present {
		if ok {
			a := s.assocList[id]
			p.fsByID[id] = tree.factor(acctUse, total, a.account, raws(a.account, a.user), userUse[id])
		}
	}
	p.fsOther = make(map[assocKey]float64, len(otherPresent))
	for k := range otherPresent {
		p.fsOther[k] = tree.factor(acctUse, total, k.account, raws(k.account, k.user), otherUse[k])
	}
	if t.wantShares {
		var users []shareUser
		for id, ok := range present {
			if ok {
				a := s.assocList[id]
				users = append(users, shareUser{a.account, a.user, raws(a.account, a.user), userUse[id]})
			}
		}
		for k := range otherPresent {
			users = append(users, shareUser{k.account, k.user, raws(k.account, k.user), otherUse[k]})
		}
		p.shares = tree.shareRows(acctUse, total, users)
	}
	p.weigh()
	return p
}

// weigh rounds, once per pass, the weighted factors priority would round
// per job: the same expressions on the same values, so the same integers.
func (p *prioCtx) weigh() {
	w := p.cfg.Weights
	round := func(weight int64, f float64) int64 { return roundHalfAway(float64(weight) * f) }
	p.wAge, p.maxAgeNs = float64(w.Age), float64(p.cfg.MaxAge)
	p.fsDefault = round(w.FairShare, 1.0)
	p.fsW = make([]int64, len(p.fsByID))
	for id, fs := range p.fsByID {
		p.fsW[id] = round(w.FairShare, fs)
	}
	p.partW = make([]int64, len(p.partTier))
	p.sizeW = make([][]int64, len(p.partTier))
	for part := range p.partTier {
		if p.maxTier > 0 {
			p.partW[part] = round(w.Partition, float64(p.partTier[part])/float64(p.maxTier))
		}
		if p.partGPUs[part] > 0 {
			sz := make([]int64, sizeGPUs+1)
			for g := int64(1); g <= sizeGPUs; g++ {
				sz[g] = round(w.JobSize, min(float64(g)/float64(p.partGPUs[part]), 1))
			}
			p.sizeW[part] = sz
		}
	}
	p.qosW = make([]int64, len(p.qosFactor))
	for i, qf := range p.qosFactor {
		p.qosW[i] = round(w.QOS, qf)
	}
}

// sum is priority's result without its factors, from weigh's tables: what
// the queue's order needs of every job, at a few loads each.
func (p *prioCtx) sum(a *jobAttrs, part int) int64 {
	if a.hold {
		return 0
	}
	var v int64
	if d := p.now - a.eligible; d > 0 && a.eligible > 0 {
		v = roundHalfAway(p.wAge * min(float64(d)/p.maxAgeNs, 1))
	}
	switch id := a.assoc.id; {
	case id >= 0 && int(id) < len(p.fsW):
		v += p.fsW[id]
	case id >= 0:
		v += p.fsDefault
	default:
		fs := 1.0
		if f, ok := p.fsOther[assocKey{a.assoc.account, a.assoc.user}]; ok {
			fs = f
		}
		v += roundHalfAway(float64(p.cfg.Weights.FairShare) * fs)
	}
	if part >= 0 && part < len(p.partGPUs) {
		if sz := p.sizeW[part]; a.gpus > 0 && a.gpus <= sizeGPUs && sz != nil {
			v += sz[a.gpus]
		} else if a.gpus > 0 || p.partNodes[part] > 0 {
			_, f := p.priority(&jobAttrs{gpus: a.gpus, req: place.Request{Nodes: a.req.Nodes}, assoc: a.assoc}, part)
			v += f.jobSize
		}
		v += p.partW[part]
	}
	if a.qos >= 0 {
		v += p.qosW[a.qos]
	}
	return niced(v, a.nice)
}

// niced is a priority less the job's --nice, as Slurm's: at least 1, so
// that a nice job is never taken for a held one (priority 0).
func niced(v int64, nice int32) int64 {
	if nice == 0 {
		return v
	}
	return max(v-int64(nice), 1)
}

// factors are a job's weighted priority factors, and its --nice.
type factors struct {
	age, fairShare, jobSize, partition, qos, nice int64
}

func (f factors) proto() *loomv1.PriorityFactors {
	return &loomv1.PriorityFactors{Age: f.age, Fairshare: f.fairShare, JobSize: f.jobSize, Partition: f.partition, Qos: f.qos, Nice: f.nice}
}

// priority computes a job's priority and its weighted factors (sprio's view).
// part is the index of its partition (-1: unknown).
func (p *prioCtx) priority(a *jobAttrs, part int) (int64, factors) {
	w := p.cfg.Weights
	if a.hold {
		return 0, factors{}
	}
	age := 0.0
	if d := p.now - a.eligible; d > 0 && a.eligible > 0 {
		age = min(float64(d)/float64(p.cfg.MaxAge), 1)
	}
	fs := 1.0
	switch {
	case a.assoc.id >= 0 && int(a.assoc.id) < len(p.fsByID):
		fs = p.fsByID[a.assoc.id]
	case a.assoc.id < 0:
		if v, ok := p.fsOther[assocKey{a.assoc.account, a.assoc.user}]; ok {
			fs = v
		}
	}
	size, tier := 0.0, 0.0
	if part >= 0 && part < len(p.partGPUs) {
		if a.gpus > 0 && p.partGPUs[part] > 0 {
			size = min(float64(a.gpus)/float64(p.partGPUs[part]), 1)
		} else if a.gpus == 0 && p.partNodes[part] > 0 {
			size = min(float64(a.req.Nodes)/float64(p.partNodes[part]), 1)
		}
		if p.maxTier > 0 {
			tier = float64(p.partTier[part]) / float64(p.maxTier)
		}
	}
	qf := 0.0
	if a.qos >= 0 {
		qf = p.qosFactor[a.qos]
	}
	f := factors{
		age:       roundHalfAway(float64(w.Age) * age),
		fairShare: roundHalfAway(float64(w.FairShare) * fs),
		jobSize:   roundHalfAway(float64(w.JobSize) * size),
		partition: roundHalfAway(float64(w.Partition) * tier),
		qos:       roundHalfAway(float64(w.QOS) * qf),
		nice:      int64(a.nice),
	}
	return niced(f.age+f.fairShare+f.jobSize+f.partition+f.qos, a.nice), f
}

// charge adds a finished run's usage to its account's and user's records.
func (t *txn) charge(r *Run) {
	if r.Start.IsZero() || r.Cluster == "" {
		return
	}
	v := accrued(runRate(r), r.Start, t.now, t.s.cfg.HalfLife)
	if v <= 0 {
		return
	}
	keys := []string{UsageKey(r.Cluster, r.Account, "")}
	if r.User != "" {
		keys = append(keys, UsageKey(r.Cluster, r.Account, r.User))
	}
	for _, key := range keys {
		u := &Usage{Key: key, At: t.now, Value: v}
		if old := t.usage(key); old != nil {
			u.Value += old.Value * decay(t.now.Sub(old.At), t.s.cfg.HalfLife)
		}
		t.c.Usage[key] = u
	}
}

// prioIn is what sum reads of one pending job, copied apart from its entry
// (see pass.reorder): a pass that reorders the last pass's queue walks
// these, 24 bytes a job, instead of the entries.
type prioIn struct {
	eligible int64
	gpus     int32
	assoc    int32 // the interned association's id
	qos      int16 // the QOS's index (read only when not slow nor hold)
	// part is the partition's index in the pass (-1: none): made only by
	// passes of at most MaxInt16 partitions (see pass.order, victims).
	part int16
	// age is the weighted age factor the last pass found (-1: none yet),
	// which sumIn checks against the age steps before it reuses it (at
	// most maxAgeSteps+1: ageSteps makes no steps past it).
	age  int16
	hold bool
	// slow: sumIn cannot tell (an association not interned, a GPU count
	// past int32, a QOS index past int16): sum must read the entry.
	slow bool
}

// prioInOf copies what sum reads of a, in partition part (-1..MaxInt16).
func prioInOf(a *jobAttrs, part int32) prioIn {
	in := prioIn{eligible: a.eligible, part: int16(part), hold: a.hold, age: -1}
	switch {
	case a.hold:
	case a.assoc == nil || a.assoc.id < 0 || a.gpus < 0 || a.gpus > math.MaxInt32 || a.qos > math.MaxInt16:
		in.slow = true
	default:
		in.assoc, in.gpus, in.qos = a.assoc.id, int32(a.gpus), int16(a.qos)
	}
	return in
}

// sumIn is sum from a job's copied inputs, to the bit; false when only sum
// can tell (the job's size factor not in the tables, or in.slow). With
// steps (ageSteps of the pass's weight and MaxAge), the weighted age factor
// is in.age when the job's age is still between that value's steps (one
// comparison where the factor is a division and a rounding), else it is
// found from the steps and kept in in.age.
func (p *prioCtx) sumIn(in *prioIn, steps []int64) (int64, bool) {
	if in.slow {
		return 0, false
	}
	if in.hold {
		return 0, true
	}
	var v int64
	if d := p.now - in.eligible; d > 0 && in.eligible > 0 {
		if steps == nil {
			v = roundHalfAway(p.wAge * min(float64(d)/p.maxAgeNs, 1))
		} else {
			a := int32(in.age)
			if a < 0 || int(a) >= len(steps)-1 || d < steps[a] || d >= steps[a+1] {
				a = ageLevel(steps, d)
				in.age = int16(a) // at most maxAgeSteps+1
			}
			v = int64(a)
		}
	}
	if id := int(in.assoc); id < len(p.fsW) {
		v += p.fsW[id]
	} else {
		v += p.fsDefault
	}
	if part := int(in.part); part >= 0 && part < len(p.partGPUs) {
		switch sz := p.sizeW[part]; {
		case in.gpus > 0 && in.gpus <= sizeGPUs && sz != nil:
			v += sz[in.gpus]
		case in.gpus > 0 && p.partGPUs[part] > 0:
			// Past the table (a job of more than sizeGPUs GPUs): priority's
			// expression, from the same numbers.
			v += roundHalfAway(float64(p.cfg.Weights.JobSize) * min(float64(in.gpus)/float64(p.partGPUs[part]), 1))
		case in.gpus > 0:
			// A partition without GPUs: priority's size factor is 0.
		case p.partNodes[part] > 0:
			return 0, false // by nodes: sum reads the entry
		}
		v += p.partW[part]
	}
	if in.qos >= 0 {
		v += p.qosW[in.qos]
	}
	return v, true
}

// maxAgeSteps bounds the age weight ageSteps makes steps for (a table
// of weight+2 numbers, each found by a search of about 50 evaluations).
const maxAgeSteps = 1 << 14

// ageSteps returns, for an age weight w and MaxAge maxAge, the ages at
// which the weighted age factor roundHalfAway(w·min(d/maxAge, 1)) (d in
// nanoseconds, d > 0) steps: steps[v] is the least d at which it is at
// least v (steps[0] the least int64, steps[w+1] the greatest), so it is v
// exactly where steps[v] ≤ d < steps[v+1]. Each step is found by evaluating
// that very expression, which never decreases as d grows (each operation
// rounds monotonically): the factor read from the steps is the expression's,
// to the bit. nil when w is not in 1..maxAgeSteps or maxAge is not positive.
func ageSteps(w int64, maxAge time.Duration) []int64 {
	if w < 1 || w > maxAgeSteps || maxAge <= 0 {
		return nil
	}
	wf, mf := float64(w), float64(maxAge)
	f := func(d int64) int64 { return roundHalfAway(wf * min(float64(d)/mf, 1)) }
	steps := make([]int64, w+2)
	steps[0], steps[w+1] = math.MinInt64, math.MaxInt64
	lo := int64(1)
	for v := int64(1); v <= w; v++ {
		// The least d in [lo, maxAge] with f(d) ≥ v: f(maxAge) is w.
		hi := int64(maxAge)
		for lo < hi {
			mid := lo + (hi-lo)/2
			if f(mid) >= v {
				hi = mid
			} else {
				lo = mid + 1
			}
		}
		steps[v] = lo
	}
	return steps
}

// ageStepsOf is ageSteps for cfg's age weight and MaxAge, made once and
// kept in sc.
func (sc *scratch) ageStepsOf(cfg *Config) []int64 {
	key := ageStepsKey{cfg.Weights.Age, cfg.MaxAge}
	if sc.ageStepsKey != key {
		sc.ageSteps, sc.ageStepsKey = ageSteps(key.w, key.maxAge), key
	}
	return sc.ageSteps
}

// ageStepsMade is ageStepsOf when sc already made them, else nil: a
// queue's build finds its jobs' steps (see pass.order) only where a
// reorder already needed the table, not on a first pass.
func (sc *scratch) ageStepsMade(cfg *Config) []int64 {
	if sc.ageStepsKey != (ageStepsKey{cfg.Weights.Age, cfg.MaxAge}) {
		return nil
	}
	return sc.ageSteps
}

// ageStepsKey is what ageSteps were made for.
type ageStepsKey struct {
	w      int64
	maxAge time.Duration
}

// ageLevel is the weighted age factor at age d > 0 from ageSteps' steps:
// the v with steps[v] ≤ d < steps[v+1].
func ageLevel(steps []int64, d int64) int32 {
	// The greatest v with steps[v] ≤ d (steps[0] ≤ every d). The steps
	// are nearly evenly spread (the factor is linear in the age up to
	// MaxAge): a guess from their spread, walked to the level, is a few
	// comparisons where the search is a dozen mispredicted branches; the
	// search when the guess is further off.
	if w := len(steps) - 2; w >= 2 && steps[w] > steps[1] {
		switch {
		case d < steps[1]:
			return 0
		case d >= steps[w]:
			return int32(w)
		}
		a := 1 + int(float64(d-steps[1])/float64(steps[w]-steps[1])*float64(w-1))
		a = min(max(a, 1), w)
		for range 4 {
			switch {
			case steps[a] > d:
				a--
			case steps[a+1] <= d:
				a++
			default:
				return int32(a)
			}
		}
	}
	lo, hi := 0, len(steps)-2
	for lo < hi {
		mid := lo + (hi-lo+1)/2
		if steps[mid] <= d {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return int32(lo)
}

// tierRanks is, per partition, its PriorityTier as a queue rank's high
// bits (see pass.queued).
func (p *prioCtx) tierRanks(parts []Partition) []int64 {
	out := make([]int64, len(parts))
	for i := range parts {
		out[i] = int64(parts[i].Tier) << 40
	}
	return out
}
