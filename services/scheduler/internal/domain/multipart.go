package domain

import (
	"strings"

	"github.com/loom-ml/loom/libs/slurmspec"
)

// A job may name several partitions (sbatch -p a,b): Slurm's "the one
// offering earliest initiation will be used ... (although higher priority
// partitions will be considered first)". While it is pending its
// Job.partition is the list; the pass considers it in each partition of
// the list the cluster has, higher PriorityTier first (the list's order
// among equal tiers), and starts it in the first where it passes the
// gates and fits now (backfill reservation and all, as a job of that
// partition). When none can start it, it is decided as a job of the first
// of them (by tier) whose gates it passes — else of the first — : its
// reason, preemption and backfill reservation are that partition's (not
// the one where it would start soonest). Its queue position and priority
// are those of its highest tier partition (the largest partition factor).
// Started, Job.partition is the partition used and JobRecord.Partitions the
// list, which a requeue puts back. A job that names one partition never
// comes here: its queue entry has no qMulti flag.

// multiFirst is the index in p.parts of e's partition of highest tier
// (first named among equals), or -1 when the cluster has none of them.
func (p *pass) multiFirst(e *pendEntry) int {
	return firstByTier(p.parts, e.part)
}

// firstByTier is the index in parts of the partition of list of highest
// PriorityTier (the first named among equals), or -1 when parts has none
// of them.
func firstByTier(parts []Partition, list string) int {
	best := -1
	for name := range strings.SplitSeq(list, ",") {
		for i := range parts {
			if parts[i].Name == name && i < 64 && (best < 0 || parts[i].Tier > parts[best].Tier) {
				best = i
			}
		}
	}
	return best
}

// partsByTier returns the indexes in parts of list's partitions, higher
// PriorityTier first, the list's order among equals; only the first 64
// partitions (the pass's bit sets) count.
func partsByTier(parts []Partition, list string) []int {
	names, _ := slurmspec.ParsePartitions(list)
	out := make([]int, 0, len(names))
	for _, name := range names {
		for i := range parts {
			if parts[i].Name == name && i < 64 {
				out = append(out, i)
			}
		}
	}
	// Insertion sort: stable, on a list of at most MaxJobPartitions.
	for i := 1; i < len(out); i++ {
		for k := i; k > 0 && parts[out[k]].Tier > parts[out[k-1]].Tier; k-- {
			out[k], out[k-1] = out[k-1], out[k]
		}
	}
	return out
}

// startMulti considers q, a job that names several partitions, in each of
// them in turn and starts it in the first where it passes the gates and
// fits now; it reports whether it did. Otherwise it sets q.part to the
// partition consider decides it in (see above).
func (p *pass) startMulti(q *queued) bool {
	parts := partsByTier(p.parts, q.e.part)
	if len(parts) == 0 {
		q.part = -1 // PartitionConfig
		return false
	}
	fallback := -1
	t, j := p.t, q.j
	for _, pi := range parts {
		q.part = int32(pi)
		if p.gateReason(q) != "" {
			continue
		}
		if fallback < 0 {
			fallback = pi
		}
		if q.shape >= 0 {
			p.req = t.s.shapeReqs[q.shape]
			p.req.Partition = pi
		} else {
			p.req = p.request(j, &q.e.jobAttrs, pi)
		}
		req := &p.req
		if p.resv != nil {
			req.AvoidReserved = p.avoidsReserved(p.limitIn(q.limit, pi))
		}
		if res := p.place(req, q.shape); res.ok {
			p.start(j, p.parts[pi], req, res.nodes, p.prioOf(q), len(res.shape.Cand))
			return true
		}
	}
	if fallback < 0 {
		fallback = parts[0]
	}
	q.part = int32(fallback)
	return false
}

// gateReason is the reason the first of the pass's gates that stops q
// gives, or "" when every gate lets it through (consider's gates, without
// the decision).
func (p *pass) gateReason(q *queued) string {
	for _, g := range p.gates {
		if g.only != 0 && q.flags&g.only == 0 {
			continue
		}
		if reason, _ := g.check(p, q); reason != "" {
			return reason
		}
	}
	return ""
}

// hasPartitions reports whether c has the partition list names (one
// name, or several comma-separated: every one of them).
func hasPartitions(c *Cluster, list string) bool {
	if !slurmspec.IsPartitionList(list) {
		_, i := c.Partition(list)
		return i >= 0
	}
	for name := range strings.SplitSeq(list, ",") {
		if _, i := c.Partition(name); name == "" || i < 0 {
			return false
		}
	}
	return true
}

// allGone reports whether every partition of list (one name, or a pending
// job's a,b) is in gone: a job that names several partitions keeps
// waiting while one of them remains (the pass ignores the others), as
// slurmctld keeps it in the partitions that remain.
func allGone(gone map[string]bool, list string) bool {
	if !slurmspec.IsPartitionList(list) {
		return gone[list]
	}
	for name := range strings.SplitSeq(list, ",") {
		if !gone[name] {
			return false
		}
	}
	return true
}

// usedFirst returns list with used, the partition a job started in, moved
// to the front ("a,b" started in b is "b,a"): slurmctld's
// rebuild_job_part_list, so a requeued job shows (and, among partitions of
// equal tier, tries first) the one it ran in.
func usedFirst(list, used string) string {
	out := used
	for name := range strings.SplitSeq(list, ",") {
		if name != used {
			out += "," + name
		}
	}
	return out
}

// withoutGone returns list less the partitions in gone, in order ("" when
// none remains): slurmctld drops a removed partition from the list of a
// job that names several.
func withoutGone(list string, gone map[string]bool) string {
	var keep []string
	for name := range strings.SplitSeq(list, ",") {
		if !gone[name] {
			keep = append(keep, name)
		}
	}
	return strings.Join(keep, ",")
}

// anyGone reports whether a partition of list is in gone.
func anyGone(gone map[string]bool, list string) bool {
	for name := range strings.SplitSeq(list, ",") {
		if gone[name] {
			return true
		}
	}
	return false
}

// mostSeconds is the largest MaxTime, in seconds, of the partitions of list
// (one name or several) that c has: the longest a job of the list may run
// in one of them. 0: one of them is unlimited, or c has none of them.
func mostSeconds(c *Cluster, list string) int64 {
	most := int64(0)
	for name := range strings.SplitSeq(list, ",") {
		p, i := c.Partition(name)
		if i < 0 {
			continue
		}
		if p.MaxSeconds == 0 {
			return 0
		}
		most = max(most, p.MaxSeconds)
	}
	return most
}
