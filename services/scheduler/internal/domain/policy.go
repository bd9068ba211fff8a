package domain

import (
	"strconv"

	"github.com/loom-ml/loom/services/scheduler/internal/domain/place"
)

// Order is how a policy orders the pending jobs of a cluster.
type Order int

const (
	// OrderPriority: partition PriorityTier (higher first), then the
	// multifactor priority (higher first), then job id.
	OrderPriority Order = iota
	// OrderFCFS: job id, that is submission order.
	OrderFCFS
)

// Policy is how the scheduler orders its queue, decides where a job fits and
// what it may do for a job that does not.
type Policy struct {
	// Name names the policy in logs and reports ("fifo", "easy", "loom").
	Name string
	// Order orders the queue (ignored when Less is set).
	Order Order
	// Less, when set, orders the queue instead of Order (slower: it cannot
	// precompute keys).
	Less func(a, b *Job) bool
	// Backfill: after the first job that cannot start (which gets a
	// reservation at the earliest time enough resources free up), lower
	// jobs still start when they fit and do not delay it (EASY). Without
	// it, a job that cannot start blocks the later jobs of its partition
	// and keeps that partition's nodes from the others' (slurmctld's
	// failed_parts: see blockFIFO).
	Backfill bool
	// Preempt: a pending job whose QOS may preempt others, or whose
	// partition has a higher PriorityTier, may requeue running jobs to start.
	Preempt bool
	// Checks are the feasibility tests a node must pass to take part of a
	// job, in order; the first that fails names why the node was filtered.
	Checks []place.Check
	// Rankers order the nodes that passed every check, in order: each
	// breaks the ties of the ones before it (lower scores first).
	Rankers []place.Ranker
}

// FIFOPolicy is first come, first served: submission order, and a job that
// cannot start blocks the rest of its partition.
func FIFOPolicy() Policy {
	return Policy{Name: "fifo", Order: OrderFCFS, Checks: place.DefaultChecks(), Rankers: place.DefaultRankers()}
}

// EASYPolicy is submission order with EASY backfill.
func EASYPolicy() Policy {
	return Policy{Name: "easy", Order: OrderFCFS, Backfill: true, Checks: place.DefaultChecks(), Rankers: place.DefaultRankers()}
}

// DefaultPolicy is Loom's: multifactor priority with partition tiers, EASY
// backfill and preemption by QOS and partition tier.
func DefaultPolicy() Policy {
	return Policy{Name: "loom", Order: OrderPriority, Backfill: true, Preempt: true, Checks: place.DefaultChecks(), Rankers: place.DefaultRankers()}
}

// PolicyByName returns the policy named name: "fifo", "easy" or "loom".
func PolicyByName(name string) (Policy, bool) {
	switch name {
	case "fifo":
		return FIFOPolicy(), true
	case "easy", "backfill":
		return EASYPolicy(), true
	case "loom", "default", "":
		return DefaultPolicy(), true
	}
	return Policy{}, false
}

// FCFS orders jobs by submission: numeric job id (the gateway assigns ids in
// submission order), then name for ids that are not numbers.
func FCFS(a, b *Job) bool {
	ia, ea := strconv.ParseInt(a.Job.GetJobId(), 10, 64)
	ib, eb := strconv.ParseInt(b.Job.GetJobId(), 10, 64)
	switch {
	case ea == nil && eb == nil && ia != ib:
		return ia < ib
	case ea == nil && eb != nil:
		return true
	case ea != nil && eb == nil:
		return false
	}
	if ta, tb := a.Job.GetSubmitTime().AsTime(), b.Job.GetSubmitTime().AsTime(); !ta.Equal(tb) {
		return ta.Before(tb)
	}
	return a.Name() < b.Name()
}
