package scan

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// ringDone acts on a finished ring: a failed ring starts its bisection, a
// finished pair moves its bisection on.
func (s *State) ringDone(c *Change, now time.Time, sc *Scan, ring *Ring) {
	if ring.Pair && ring.Root != "" {
		root := sc.Rings[ring.Root]
		if root == nil || root.Bisect == nil || root.Bisect.Done {
			return
		}
		if sk := skippedMembers(sc, ring); len(sk) > 0 {
			// A node that turned busy refused its pair: the pair says
			// nothing; the busy node is left out of this bisection.
			root.Bisect.Pending = removeStr(root.Bisect.Pending, ring.ID)
			for _, m := range sk {
				root.Bisect.Skipped[m] = true
			}
		} else {
			s.pairDone(root.Bisect, ring)
		}
		s.nextRound(c, now, sc, root)
		return
	}
	if ring.OK || len(ring.Members) < 2 {
		return
	}
	if len(ring.Members) == 2 {
		// A pair on its own has nobody to compare with: it cannot say
		// which of the two is at fault, so it blames neither.
		check := AllReduce
		if ring.Pair {
			check = AllReducePair // asked for as pairs (planRing)
		}
		for _, m := range ring.Members {
			s.verdict(c, now, sc, m, loomv1.CheckOutcome_CHECK_WARN, check,
				fmt.Sprintf("the all-reduce of 2 nodes (%s) failed; a pair alone cannot tell which node or the link is at fault", s.hosts(c, ring.Members)))
		}
		return
	}
	ring.Bisect = &Bisection{Good: map[string]bool{}, Bad: map[string]bool{}, Failed: map[string][]string{}, Skipped: map[string]bool{}}
	for _, m := range skippedMembers(sc, ring) {
		ring.Bisect.Skipped[m] = true
	}
	s.nextRound(c, now, sc, ring)
}

// skippedMembers are the ring's members whose run was CHECK_SKIPPED (the
// node was busy with jobs).
func skippedMembers(sc *Scan, ring *Ring) []string {
	var out []string
	for i, id := range ring.Runs {
		if r := sc.Runs[id]; r != nil && r.Outcome == loomv1.CheckOutcome_CHECK_SKIPPED {
			out = append(out, ring.Members[i])
		}
	}
	return out
}

// pairDone records a pair's outcome in its bisection.
func (s *State) pairDone(b *Bisection, pair *Ring) {
	b.Pending = removeStr(b.Pending, pair.ID)
	x, y := pair.Members[0], pair.Members[1]
	switch {
	case pair.OK:
		b.Good[x], b.Good[y] = true, true
	case b.Good[x] && !b.Good[y]:
		b.Bad[y] = true
	case b.Good[y] && !b.Good[x]:
		b.Bad[x] = true
	}
	if !pair.OK {
		b.Failed[x] = append(b.Failed[x], y)
		b.Failed[y] = append(b.Failed[y], x)
	}
}

func removeStr(list []string, s string) []string {
	out := list[:0]
	for _, x := range list {
		if x != s {
			out = append(out, x)
		}
	}
	return out
}

// nextRound starts the bisection's next round of pairs once the current
// one is done, or ends it with its verdicts.
func (s *State) nextRound(c *Change, now time.Time, sc *Scan, root *Ring) {
	b := root.Bisect
	if len(b.Pending) > 0 || b.Done {
		return
	}
	var suspects, members []string
	for _, m := range root.Members {
		if b.Skipped[m] {
			continue
		}
		members = append(members, m)
		if !b.Good[m] && !b.Bad[m] {
			suspects = append(suspects, m)
		}
	}
	var pairs [][2]string
	switch {
	case len(suspects) == 0:
	case b.Round == 0:
		// Round 1: the members in ring order, two by two; an odd one out
		// waits for a node known good.
		for i := 0; i+1 < len(members); i += 2 {
			pairs = append(pairs, [2]string{members[i], members[i+1]})
		}
	case len(b.Good) > 0:
		// Each suspect with a node known good, one pair per node a round.
		goods := slices.Sorted(maps.Keys(b.Good))
		for i, sus := range suspects {
			if i == len(goods) {
				break
			}
			pairs = append(pairs, [2]string{goods[i], sus})
		}
	case !b.Crossed && len(suspects) >= 3:
		// Nobody passed: pair the suspects crosswise once.
		b.Crossed = true
		rot := append(append([]string{}, suspects[1:]...), suspects[0])
		for i := 0; i+1 < len(rot); i += 2 {
			pairs = append(pairs, [2]string{rot[i], rot[i+1]})
		}
	}
	if len(pairs) == 0 {
		s.endBisection(c, now, sc, root, suspects)
		return
	}
	b.Round++
	for _, p := range pairs {
		sc.Seq++
		id := fmt.Sprintf("%s-p%d", root.ID, sc.Seq)
		b.Pending = append(b.Pending, id)
		s.startRing(c, now, sc, id, []string{p[0], p[1]}, true, root.ID)
	}
}

// endBisection gives the verdicts: FAIL on each node that failed with a
// node known good; WARN on both ends of a pair that failed while each
// passed with others (the link between them); WARN on the nodes left
// unresolved (every pair failed: nobody is drained on that).
func (s *State) endBisection(c *Change, now time.Time, sc *Scan, root *Ring, unresolved []string) {
	b := root.Bisect
	b.Done = true
	for _, m := range slices.Sorted(maps.Keys(b.Bad)) {
		s.verdict(c, now, sc, m, loomv1.CheckOutcome_CHECK_FAIL, AllReduce,
			fmt.Sprintf("all-reduce bisection of %s: %s fails in pairs with nodes that pass with others (failed with %s)",
				root.ID, s.host(c, m), s.hosts(c, uniq(b.Failed[m]))))
	}
	links := map[string]bool{}
	for _, m := range root.Members {
		if !b.Good[m] {
			continue
		}
		for _, p := range b.Failed[m] {
			if b.Good[p] {
				k := min(m, p) + "|" + max(m, p)
				links[k] = true
			}
		}
	}
	for _, k := range slices.Sorted(maps.Keys(links)) {
		x, y, _ := strings.Cut(k, "|")
		for _, m := range []string{x, y} {
			s.verdict(c, now, sc, m, loomv1.CheckOutcome_CHECK_WARN, AllReduce,
				fmt.Sprintf("all-reduce bisection of %s: the link %s↔%s fails while both nodes pass with others", root.ID, s.host(c, x), s.host(c, y)))
		}
	}
	for _, m := range slices.Sorted(maps.Keys(b.Skipped)) {
		s.verdict(c, now, sc, m, loomv1.CheckOutcome_CHECK_SKIPPED, AllReduce,
			fmt.Sprintf("all-reduce bisection of %s: %s turned busy with jobs and was left out", root.ID, s.host(c, m)))
	}
	for _, m := range unresolved {
		s.verdict(c, now, sc, m, loomv1.CheckOutcome_CHECK_WARN, AllReduce,
			fmt.Sprintf("all-reduce bisection of %s: every pair with %s failed and no node passed: a fabric-wide problem or a threshold too high; no node is blamed", root.ID, s.host(c, m)))
	}
}

func uniq(list []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, x := range list {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	sort.Strings(out)
	return out
}

func (s *State) host(c *Change, node string) string {
	if n := s.node(c, node); n != nil && n.Hostname != "" {
		return n.Hostname
	}
	return node
}

func (s *State) hosts(c *Change, nodes []string) string {
	var out []string
	for _, n := range nodes {
		out = append(out, s.host(c, n))
	}
	return strings.Join(out, ", ")
}

// verdict stores a result health decided itself and hands it to the
// remediation side.
func (s *State) verdict(c *Change, now time.Time, sc *Scan, node string, outcome loomv1.CheckOutcome, check, summary string) {
	host := s.host(c, node)
	r := &loomv1.HealthCheckResult{Name: sc.Cluster + "/healthResults/" + sc.ID + "-" + idPart(check) + "-verdict-" + idPart(host),
		Node: node, Hostname: host, Check: check, Outcome: outcome, Summary: summary, Trigger: sc.Trigger, ScanId: sc.ID, Gpu: -1}
	s.store(c, now, r)
	c.Verdicts = append(c.Verdicts, c.Results[r.Name])
}

// speedIfDone compares a scan's speed results with the fleet's median once
// every speed run of the scan is done: the median is over the newest valid
// speed result of each node of the cluster, and a node under
// StragglerRatio × median fails (its stored result becomes CHECK_FAIL and a
// verdict).
func (s *State) speedIfDone(c *Change, now time.Time, sc *Scan) {
	var mine []*Run
	for _, r := range sc.Runs {
		if r.Check != Speed {
			continue
		}
		if !r.Done {
			return
		}
		mine = append(mine, r)
	}
	if sc.Extra["speed_done"] != "" {
		return
	}
	if sc.Extra == nil {
		sc.Extra = map[string]string{}
	}
	sc.Extra["speed_done"] = "1"
	latest := map[string]*loomv1.HealthCheckResult{}
	consider := func(r *loomv1.HealthCheckResult) {
		if r == nil || r.GetCheck() != Speed || !strings.HasPrefix(r.GetName(), sc.Cluster+"/healthResults/") {
			return
		}
		if _, ok := r.GetMetrics()["throughput"]; !ok || !r.GetValidUntil().AsTime().After(now) {
			return
		}
		if old := latest[r.GetNode()]; old == nil || r.GetEndTime().AsTime().After(old.GetEndTime().AsTime()) {
			latest[r.GetNode()] = r
		}
	}
	for _, r := range s.results {
		consider(s.result(c, r.GetName()))
	}
	for _, r := range c.Results {
		consider(r)
	}
	var tps []float64
	for _, r := range latest {
		tps = append(tps, r.GetMetrics()["throughput"])
	}
	if len(tps) < 2 {
		return
	}
	med := Median(tps)
	sort.Slice(mine, func(a, b int) bool { return mine[a].ID < mine[b].ID })
	for _, run := range mine {
		r := s.result(c, sc.Cluster+"/healthResults/"+run.ID)
		if r == nil || r.GetOutcome() != loomv1.CheckOutcome_CHECK_PASS {
			continue
		}
		tp, ok := r.GetMetrics()["throughput"]
		if !ok || tp >= s.cfg.StragglerRatio*med {
			continue
		}
		f := proto.Clone(r).(*loomv1.HealthCheckResult)
		f.Outcome = loomv1.CheckOutcome_CHECK_FAIL
		f.Summary = fmt.Sprintf("straggler: throughput %s is %.2f× the fleet median %s (under %.2f×); %s",
			fmtNum(tp), tp/med, fmtNum(med), s.cfg.StragglerRatio, r.GetSummary())
		f.Metrics["fleet_median"] = med
		f.Metrics["ratio_to_median"] = tp / med
		s.store(c, now, f)
		c.Verdicts = append(c.Verdicts, c.Results[f.Name])
	}
}

func fmtNum(f float64) string { return strconv.FormatFloat(f, 'f', 2, 64) }

// Median is the middle of xs (the mean of the two middle ones for an even
// count); 0 for none. xs is not modified.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64{}, xs...)
	sort.Float64s(s)
	m := len(s) / 2
	if len(s)%2 == 1 {
		return s[m]
	}
	return (s[m-1] + s[m]) / 2
}
