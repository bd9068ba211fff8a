package domain

import (
	"fmt"
	"strings"

	"github.com/loom-ml/loom/libs/clusterspec"
	"github.com/loom-ml/loom/libs/errs"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// CapacityKey names one kind of capacity in one zone, as the provisioner's
// ListCapacity pools do.
type CapacityKey struct {
	Zone        string
	MachineType string
	Type        loomv1.CapacitySource_Type
	// Reservation is the reservation id, for RESERVATION capacity.
	Reservation string
}

func (k CapacityKey) String() string {
	src := k.Type.String()
	if k.Type == loomv1.CapacitySource_RESERVATION {
		src += " " + k.Reservation
	}
	return fmt.Sprintf("%s (%s) in %s", k.MachineType, src, k.Zone)
}

// claim is what a cluster takes from one kind of capacity, and which of its
// pools take it.
type claim struct {
	nodes int32
	pools []string
	login bool // the cluster's login nodes draw from it too
}

// subject names who needs a claim in a refusal: "pool gpu needs",
// "pools a, b need", "pool gpu and login nodes need", "login nodes need".
func (cl *claim) subject() string {
	var who string
	switch len(cl.pools) {
	case 0:
	case 1:
		who = "pool " + cl.pools[0]
	default:
		who = "pools " + strings.Join(cl.pools, ", ")
	}
	if cl.login {
		if who != "" {
			who += " and "
		}
		return who + "login nodes need"
	}
	if len(cl.pools) > 1 {
		return who + " need"
	}
	return who + " needs"
}

// claims returns, per kind of capacity, the nodes c holds: each pool's
// node_count plus max_dynamic_node_count (the provisioner claims both) and
// the login nodes (on-demand, in clusterspec.LoginZone, as the provisioner
// claims them), and the kinds in the order of c's pools, login last. A pool
// without a machine type is not counted: capacity is kept per machine type.
func claims(c *loomv1.Cluster) (map[CapacityKey]*claim, []CapacityKey) {
	out := map[CapacityKey]*claim{}
	var order []CapacityKey
	for _, p := range c.GetCompute().GetNodePools() {
		if p.GetMachineType() == "" {
			continue
		}
		k := CapacityKey{Zone: p.GetZone(), MachineType: p.GetMachineType(), Type: p.GetCapacity().GetType()}
		if k.Type == loomv1.CapacitySource_TYPE_UNSPECIFIED {
			k.Type = loomv1.CapacitySource_ON_DEMAND
		}
		if k.Type == loomv1.CapacitySource_RESERVATION {
			k.Reservation = ShortID(p.GetCapacity().GetReservation())
		}
		cl, ok := out[k]
		if !ok {
			cl = &claim{}
			out[k] = cl
			order = append(order, k)
		}
		cl.nodes += max(p.GetNodeCount(), 0) + max(p.GetMaxDynamicNodeCount(), 0)
		cl.pools = append(cl.pools, p.GetId())
	}
	if login := c.GetOrchestrator().GetSlurm().GetLoginNodes(); login.GetMachineType() != "" && login.GetCount() > 0 {
		k := CapacityKey{Zone: clusterspec.LoginZone(c), MachineType: login.GetMachineType(), Type: loomv1.CapacitySource_ON_DEMAND}
		cl, ok := out[k]
		if !ok {
			cl = &claim{}
			out[k] = cl
			order = append(order, k)
		}
		cl.nodes += login.GetCount()
		cl.login = true
	}
	return out, order
}

// CheckCapacity is the gateway's fast answer to "is there room": it
// compares what next claims beyond what current holds (current is nil for
// a new cluster) with the free nodes of the provisioner's capacity pools. A
// kind of capacity that ListCapacity does not list has no free nodes. The
// error wraps errs.FailedPrecondition and says, for each kind that is
// short, what is free where.
func CheckCapacity(current, next *loomv1.Cluster, pools []*loomv1.CapacityPool) error {
	want, order := claims(next)
	held, _ := claims(current)
	var short []string
	for _, k := range order {
		need := want[k].nodes
		if h, ok := held[k]; ok {
			need -= h.nodes
		}
		if need <= 0 {
			continue
		}
		free, why := freeFor(k, pools)
		if free >= need {
			continue
		}
		more := ""
		if current != nil {
			more = " more"
		}
		msg := fmt.Sprintf("%s %d%s × %s: %s", want[k].subject(), need, more, k, why)
		short = append(short, msg+"; "+elsewhere(k, pools))
	}
	if len(short) == 0 {
		return nil
	}
	return &capacityError{msg: strings.Join(short, "; ")}
}

// freeFor returns the free nodes of kind k, and says so ("2 free", or why
// there are none).
func freeFor(k CapacityKey, pools []*loomv1.CapacityPool) (int32, string) {
	var free int32
	found := false
	var other *loomv1.CapacityPool
	// Configured (non-reserved) pools may be rules with "*" for the zone or the
	// machine type: each is a per-combination default, and the most specific
	// one that matches gives the combination its capacity, as in the
	// provisioner's capacity package. A combination already claimed from is
	// listed with its own numbers, which then count as the exact match.
	var wildcard *loomv1.CapacityPool
	wildRank := 0
	for _, p := range pools {
		if p.GetType() != k.Type {
			continue
		}
		if k.Type == loomv1.CapacitySource_RESERVATION && ShortID(p.GetReservation()) != k.Reservation {
			continue
		}
		if p.GetZone() != k.Zone || p.GetMachineType() != k.MachineType {
			if k.Type == loomv1.CapacitySource_RESERVATION {
				other = p
				continue
			}
			if r := wildcardRank(p, k); r > wildRank {
				wildcard, wildRank = p, r
			}
			continue
		}
		found = true
		free += max(p.GetFree(), 0)
	}
	switch {
	case found:
		return free, fmt.Sprintf("%d free", free)
	case wildcard != nil:
		free = max(wildcard.GetFree(), 0)
		return free, fmt.Sprintf("%d free", free)
	case other != nil:
		return 0, fmt.Sprintf("reservation %s holds %s in %s", k.Reservation, other.GetMachineType(), other.GetZone())
	case k.Type == loomv1.CapacitySource_RESERVATION:
		return 0, fmt.Sprintf("there is no reservation %s", k.Reservation)
	}
	return 0, fmt.Sprintf("no %s capacity is configured there", capacityWord(k.Type))
}

// anyName is the wildcard zone or machine type of a configured capacity rule.
const anyName = "*"

// wildcardRank says how specifically a wildcard pool matches k: 3 for any zone
// with k's machine type, 2 for k's zone with any machine type, 1 for */*, and 0
// when it does not match.
func wildcardRank(p *loomv1.CapacityPool, k CapacityKey) int {
	zone, mt := p.GetZone(), p.GetMachineType()
	switch {
	case zone == anyName && mt == k.MachineType:
		return 3
	case zone == k.Zone && mt == anyName:
		return 2
	case zone == anyName && mt == anyName:
		return 1
	}
	return 0
}

// elsewhere lists the other free capacity of k's machine type.
func elsewhere(k CapacityKey, pools []*loomv1.CapacityPool) string {
	var parts []string
	for _, p := range pools {
		if p.GetMachineType() != k.MachineType || p.GetFree() <= 0 {
			continue
		}
		if p.GetType() == k.Type && p.GetZone() == k.Zone &&
			(k.Type != loomv1.CapacitySource_RESERVATION || ShortID(p.GetReservation()) == k.Reservation) {
			continue
		}
		src := capacityWord(p.GetType())
		if p.GetType() == loomv1.CapacitySource_RESERVATION {
			src += " " + ShortID(p.GetReservation())
		}
		parts = append(parts, fmt.Sprintf("%s %s: %d free in %s", src, p.GetMachineType(), p.GetFree(), p.GetZone()))
	}
	if len(parts) == 0 {
		return fmt.Sprintf("no other %s capacity is free", k.MachineType)
	}
	return strings.Join(parts, "; ")
}

// capacityWord is how a message names a capacity type: "on-demand", "spot".
func capacityWord(t loomv1.CapacitySource_Type) string {
	return strings.ReplaceAll(strings.ToLower(t.String()), "_", "-")
}

// capacityError is a capacity shortfall. Its message is only the shortfall
// (what a user reads), and it is an errs.FailedPrecondition.
type capacityError struct{ msg string }

func (e *capacityError) Error() string { return e.msg }

// Is makes the error match errs.FailedPrecondition.
func (e *capacityError) Is(target error) bool { return target == errs.FailedPrecondition }
