package domain

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/loom-ml/loom/libs/clusterspec"
	"github.com/loom-ml/loom/libs/resname"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/provisioner/internal/capacity"
)

// ReservationRef resolves a pool's capacity.reservation ("r1" or a full
// name) to the reservation's full name in the cluster's project.
func ReservationRef(cluster, ref string) string {
	if strings.Contains(ref, "/") {
		return ref
	}
	c, _ := clusterOf(cluster)
	return resname.Reservation{Project: c.Project, ID: ref}.String()
}

// PoolKey is the capacity a node pool of a cluster draws from.
func PoolKey(cluster string, np *loomv1.NodePool) capacity.Key {
	k := capacity.Key{Zone: np.GetZone(), MachineType: np.GetMachineType(), Type: np.GetCapacity().GetType()}
	if k.Type == loomv1.CapacitySource_TYPE_UNSPECIFIED {
		k.Type = loomv1.CapacitySource_ON_DEMAND
	}
	if k.Type == loomv1.CapacitySource_RESERVATION {
		k.Reservation = ReservationRef(cluster, np.GetCapacity().GetReservation())
	}
	return k
}

// loginKey is the capacity login nodes draw from (on-demand in the
// cluster's zone); ok is false when the cluster has no login machine type.
func loginKey(c *loomv1.Cluster) (capacity.Key, bool) {
	mt := c.GetOrchestrator().GetSlurm().GetLoginNodes().GetMachineType()
	if mt == "" {
		return capacity.Key{}, false
	}
	return capacity.Key{Zone: clusterspec.LoginZone(c), MachineType: mt, Type: loomv1.CapacitySource_ON_DEMAND}, true
}

// Claims is what a cluster holds, by capacity key: per pool the larger of
// its target and its nodes that are not FAILED (draining nodes hold their
// machines until they are removed), plus max_dynamic_node_count; retired
// pools their remaining nodes; login nodes their count. It is derived from
// the cluster's spec and nodes alone, so capacity cannot drift from them.
func Claims(c *Cluster, nodes []*loomv1.Node) map[capacity.Key]int32 {
	held := map[string]int32{}
	var login int32
	for _, n := range nodes {
		switch {
		case n.GetState() == loomv1.Node_FAILED:
		case n.GetRole() == clusterspec.RoleLogin:
			login++
		default:
			held[n.GetNodePool()]++
		}
	}
	out := map[capacity.Key]int32{}
	for _, np := range c.Cluster.GetCompute().GetNodePools() {
		out[PoolKey(c.Name(), np)] += max(np.GetNodeCount(), held[np.GetId()]) + np.GetMaxDynamicNodeCount()
	}
	for _, np := range c.Retired {
		out[PoolKey(c.Name(), np)] += held[np.GetId()]
	}
	if k, ok := loginKey(c.Cluster); ok {
		out[k] += max(c.Cluster.GetOrchestrator().GetSlurm().GetLoginNodes().GetCount(), login)
	}
	for k, v := range out {
		if v == 0 {
			delete(out, k)
		}
	}
	return out
}

// usage sums the claims of every cluster but exclude ("" for none).
func (e *edit) usage(exclude string) map[capacity.Key]int32 {
	out := map[capacity.Key]int32{}
	seen := map[string]bool{}
	add := func(name string) {
		if seen[name] || name == exclude {
			return
		}
		seen[name] = true
		c := e.cluster(name)
		if c == nil {
			return
		}
		for k, v := range Claims(c, e.clusterNodes(name)) {
			out[k] += v
		}
	}
	for name := range e.s.Clusters {
		add(name)
	}
	for _, name := range e.clOrder {
		add(name)
	}
	return out
}

// total is how many nodes a capacity pool has.
func (e *edit) total(k capacity.Key) int32 {
	if k.Type == loomv1.CapacitySource_RESERVATION {
		return e.reservation(k.Reservation).GetCount()
	}
	return e.p.Capacity.Total(k.Zone, k.MachineType, k.Type)
}

func (e *edit) reservation(name string) *loomv1.Reservation {
	for _, r := range e.resPut {
		if r.GetName() == name {
			return r
		}
	}
	return e.s.Reservations[name]
}

// checkReservations reports pools that draw from a reservation that does
// not exist or holds other machines.
func (e *edit) checkReservations(c *loomv1.Cluster, pools []*loomv1.NodePool) []string {
	var problems []string
	for _, np := range pools {
		k := PoolKey(c.GetName(), np)
		if k.Type != loomv1.CapacitySource_RESERVATION {
			continue
		}
		r := e.reservation(k.Reservation)
		switch {
		case r == nil:
			problems = append(problems, fmt.Sprintf("pool %s: reservation %s not found", np.GetId(), k.Reservation))
		case r.GetZone() != k.Zone || r.GetMachineType() != k.MachineType:
			problems = append(problems, fmt.Sprintf("pool %s: reservation %s holds %s in %s, not %s in %s", np.GetId(),
				k.Reservation, r.GetMachineType(), r.GetZone(), k.MachineType, k.Zone))
		}
	}
	return problems
}

// checkCapacity reports every key where want (a cluster's claims after the
// change) exceeds what is free of it beside the cluster's own claims, for
// keys whose claim grows over have (the claims before). A problem names the
// pools, what they need and what is free, here and elsewhere.
func (e *edit) checkCapacity(c *Cluster, want, have map[capacity.Key]int32) []string {
	others := e.usage(c.Name())
	keys := make([]capacity.Key, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].Less(keys[j]) })
	var problems []string
	for _, k := range keys {
		if want[k] <= have[k] {
			continue
		}
		free := max(e.total(k)-others[k], 0)
		if want[k] <= free {
			continue
		}
		var pools []string
		for _, np := range c.Cluster.GetCompute().GetNodePools() {
			if PoolKey(c.Name(), np) == k {
				pools = append(pools, np.GetId())
			}
		}
		who := "login nodes need"
		switch len(pools) {
		case 0:
		case 1:
			who = "pool " + pools[0] + " needs"
		default:
			who = "pools " + strings.Join(pools, ", ") + " need"
		}
		msg := fmt.Sprintf("%s %d × %s: %d free", who, want[k], k, free)
		if elsewhere := e.freeElsewhere(k, others); elsewhere != "" {
			msg += "; free elsewhere: " + elsewhere
		}
		problems = append(problems, msg)
	}
	return problems
}

// freeElsewhere lists other pools of the same machine type with free nodes.
func (e *edit) freeElsewhere(k capacity.Key, used map[capacity.Key]int32) string {
	var parts []string
	for _, p := range e.pools(used, "") {
		pk := capacity.Key{Zone: p.GetZone(), MachineType: p.GetMachineType(), Type: p.GetType(), Reservation: p.GetReservation()}
		if pk == k || p.GetFree() <= 0 || (p.GetMachineType() != k.MachineType && p.GetMachineType() != capacity.Any) {
			continue
		}
		if p.GetMachineType() == capacity.Any {
			pk.MachineType = k.MachineType
		}
		parts = append(parts, fmt.Sprintf("%s: %d", pk, p.GetFree()))
		if len(parts) == 5 {
			parts = append(parts, "…")
			break
		}
	}
	return strings.Join(parts, ", ")
}

// pools lists capacity with what used claims: the configured pools and the
// reservations of project ("" or "-": every project).
func (e *edit) pools(used map[capacity.Key]int32, project string) []*loomv1.CapacityPool {
	out := e.p.Capacity.Pools(used)
	names := make([]string, 0, len(e.s.Reservations))
	for name := range e.s.Reservations {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		r := e.s.Reservations[name]
		if r, _ := reservationOf(name); project != "" && project != resname.Wildcard && r.Project != project {
			continue
		}
		k := capacity.Key{Zone: r.GetZone(), MachineType: r.GetMachineType(), Type: loomv1.CapacitySource_RESERVATION, Reservation: name}
		out = append(out, &loomv1.CapacityPool{Zone: k.Zone, MachineType: k.MachineType, Type: k.Type, Reservation: name,
			Total: r.GetCount(), InUse: used[k], Free: max(r.GetCount()-used[k], 0)})
	}
	return out
}

// Capacity lists the capacity pools and what is free of them: configured
// pools (wildcard rules as "*", and each claimed combination they cover)
// and the reservations of project ("-": all).
func (s *State) Capacity(p Params, project string) []*loomv1.CapacityPool {
	e := s.edit(p, time.Time{})
	return e.pools(e.usage(""), project)
}

// Reservation returns a reservation with its in_use and consumers filled in
// from the clusters that claim it; nil when it does not exist.
func (s *State) Reservation(name string) *loomv1.Reservation {
	r := s.Reservations[name]
	if r == nil {
		return nil
	}
	out := &loomv1.Reservation{Name: r.GetName(), Zone: r.GetZone(), MachineType: r.GetMachineType(), Count: r.GetCount(),
		CreateTime: r.GetCreateTime()}
	names := make([]string, 0)
	for cname, c := range s.Clusters {
		for k, v := range Claims(c, s.ClusterNodes(cname)) {
			if k.Reservation == name {
				out.InUse += v
				names = append(names, cname)
				break
			}
		}
	}
	sort.Strings(names)
	out.Consumers = names
	return out
}
