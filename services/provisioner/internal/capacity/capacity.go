// Package capacity is the provisioner's model of where nodes can come from:
// pools of (zone, machine type, capacity type[, reservation]) with a total,
// and the configuration syntax for the non-reserved ones.
//
// Configuration is a comma-separated list of ZONE/MACHINE_TYPE/TYPE=COUNT
// rules, TYPE one of ON_DEMAND, SPOT, FLEX_START, and ZONE or MACHINE_TYPE
// possibly "*":
//
//	us-central1-a/a3-ultragpu-8g/SPOT=8,*/*/ON_DEMAND=64
//
// A rule gives COUNT nodes to every (zone, machine type) it matches — a
// wildcard rule is a per-combination default, not a total shared by all of
// them. The most specific rule wins: exact zone and machine type, then any
// zone with that machine type, then that zone with any machine type, then
// */*. A combination no rule matches has no capacity of that type.
package capacity

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/loom-ml/loom/libs/errs"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// Any is the wildcard zone or machine type of a rule.
const Any = "*"

// Default is the configuration used when none is given: generous on-demand,
// spot and flex-start capacity for any machine type in any zone, so that a
// local or simulated stack is limited by its own settings, not by this.
const Default = "*/*/ON_DEMAND=4096,*/*/SPOT=4096,*/*/FLEX_START=4096"

// Key names one pool of capacity.
type Key struct {
	Zone        string
	MachineType string
	Type        loomv1.CapacitySource_Type
	// Reservation is the reservation's full name for RESERVATION pools, "" otherwise.
	Reservation string
}

// String describes the pool for people: "a3-ultragpu-8g in us-central1-a
// (SPOT)"; a wildcard reads "any machine type", "any zone".
func (k Key) String() string {
	t := k.Type.String()
	if k.Reservation != "" {
		t += " " + k.Reservation
	}
	mt, z := k.MachineType, k.Zone
	if mt == Any {
		mt = "any machine type"
	}
	if z == Any {
		z = "any zone"
	}
	return fmt.Sprintf("%s in %s (%s)", mt, z, t)
}

// Less orders keys by zone, machine type, type and reservation.
func (k Key) Less(o Key) bool {
	if k.Zone != o.Zone {
		return k.Zone < o.Zone
	}
	if k.MachineType != o.MachineType {
		return k.MachineType < o.MachineType
	}
	if k.Type != o.Type {
		return k.Type < o.Type
	}
	return k.Reservation < o.Reservation
}

// Rule is one configured ZONE/MACHINE_TYPE/TYPE=COUNT.
type Rule struct {
	Zone, MachineType string
	Type              loomv1.CapacitySource_Type
	Count             int32
}

// Config is the capacity configuration: rules in the order given.
type Config []Rule

// types are the capacity types a rule may configure (reservations are
// resources, not configuration).
var types = map[string]loomv1.CapacitySource_Type{
	"ON_DEMAND":  loomv1.CapacitySource_ON_DEMAND,
	"SPOT":       loomv1.CapacitySource_SPOT,
	"FLEX_START": loomv1.CapacitySource_FLEX_START,
}

// Parse parses the configuration syntax (see the package doc). An empty
// string is an empty configuration (no capacity at all). Every bad rule is
// reported, as an errs.InvalidError naming capacity[i].
func Parse(s string) (Config, error) {
	var v errs.Validator
	var c Config
	seen := map[[3]string]bool{}
	for i, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		f := fmt.Sprintf("capacity[%d]", i)
		spec, count, ok := strings.Cut(part, "=")
		fields := strings.Split(spec, "/")
		if !ok || len(fields) != 3 {
			v.Add(f, "must be ZONE/MACHINE_TYPE/TYPE=COUNT, got %q", part)
			continue
		}
		zone, mt, ts := strings.TrimSpace(fields[0]), strings.TrimSpace(fields[1]), strings.TrimSpace(fields[2])
		t, okType := types[strings.ToUpper(ts)]
		n, err := strconv.ParseInt(strings.TrimSpace(count), 10, 32)
		switch {
		case zone == "" || mt == "":
			v.Add(f, "zone and machine type must be names or *, got %q", part)
		case !okType:
			v.Add(f, "type must be ON_DEMAND, SPOT or FLEX_START, got %q", ts)
		case err != nil || n < 0:
			v.Add(f, "count must be a number >= 0, got %q", count)
		case seen[[3]string{zone, mt, t.String()}]:
			v.Add(f, "duplicate rule for %s/%s/%s", zone, mt, t)
		default:
			seen[[3]string{zone, mt, t.String()}] = true
			c = append(c, Rule{Zone: zone, MachineType: mt, Type: t, Count: int32(n)})
		}
	}
	if err := v.Err(); err != nil {
		return nil, err
	}
	return c, nil
}

// MustParse is Parse for configurations known to be valid (tests, defaults).
func MustParse(s string) Config {
	c, err := Parse(s)
	if err != nil {
		panic(err)
	}
	return c
}

// String renders the configuration in the syntax Parse reads.
func (c Config) String() string {
	parts := make([]string, len(c))
	for i, r := range c {
		parts[i] = fmt.Sprintf("%s/%s/%s=%d", r.Zone, r.MachineType, r.Type, r.Count)
	}
	return strings.Join(parts, ",")
}

// Match returns the rule that gives (zone, machine type) capacity of type t:
// the most specific one (see the package doc), and false when none does.
func (c Config) Match(zone, machineType string, t loomv1.CapacitySource_Type) (Rule, bool) {
	best, bestRank := Rule{}, -1
	for _, r := range c {
		if r.Type != t || (r.Zone != Any && r.Zone != zone) || (r.MachineType != Any && r.MachineType != machineType) {
			continue
		}
		rank := 0
		if r.MachineType != Any {
			rank += 2
		}
		if r.Zone != Any {
			rank++
		}
		if rank > bestRank {
			best, bestRank = r, rank
		}
	}
	return best, bestRank >= 0
}

// Total returns how many nodes of machine type in zone the configuration
// gives of type t (0 when no rule matches).
func (c Config) Total(zone, machineType string, t loomv1.CapacitySource_Type) int32 {
	r, _ := c.Match(zone, machineType, t)
	return r.Count
}

// Pools lists the configured pools with what is in use: one per rule (the
// wildcard ones keep their "*"), and one per key in use that only a wildcard
// rule covers, so that every claimed combination is listed with its own
// numbers. inUse holds the claims by key (RESERVATION keys are ignored).
func (c Config) Pools(inUse map[Key]int32) []*loomv1.CapacityPool {
	var out []*loomv1.CapacityPool
	listed := map[Key]bool{}
	for _, r := range c {
		k := Key{Zone: r.Zone, MachineType: r.MachineType, Type: r.Type}
		listed[k] = true
		used := int32(0)
		if r.Zone != Any && r.MachineType != Any {
			used = inUse[k]
		}
		out = append(out, pool(k, r.Count, used))
	}
	for k, used := range inUse {
		if k.Type == loomv1.CapacitySource_RESERVATION || listed[k] {
			continue
		}
		out = append(out, pool(k, c.Total(k.Zone, k.MachineType, k.Type), used))
	}
	sort.SliceStable(out, func(i, j int) bool { return keyOf(out[i]).Less(keyOf(out[j])) })
	return out
}

func pool(k Key, total, used int32) *loomv1.CapacityPool {
	return &loomv1.CapacityPool{Zone: k.Zone, MachineType: k.MachineType, Type: k.Type, Reservation: k.Reservation,
		Total: total, InUse: used, Free: max(total-used, 0)}
}

func keyOf(p *loomv1.CapacityPool) Key {
	return Key{Zone: p.GetZone(), MachineType: p.GetMachineType(), Type: p.GetType(), Reservation: p.GetReservation()}
}
