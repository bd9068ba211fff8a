package capacity

import (
	"strconv"
	"strings"
	"testing"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

const (
	spot     = loomv1.CapacitySource_SPOT
	onDemand = loomv1.CapacitySource_ON_DEMAND
	flex     = loomv1.CapacitySource_FLEX_START
)

func TestParse(t *testing.T) {
	t.Parallel()
	c, err := Parse(" us-central1-a/a3-ultragpu-8g/SPOT=8, */*/on_demand=64,,*/a3-ultragpu-8g/FLEX_START=2 ")
	if err != nil {
		t.Fatal(err)
	}
	if got := c.String(); got != "us-central1-a/a3-ultragpu-8g/SPOT=8,*/*/ON_DEMAND=64,*/a3-ultragpu-8g/FLEX_START=2" {
		t.Fatalf("String() = %s", got)
	}
	if again, err := Parse(c.String()); err != nil || again.String() != c.String() {
		t.Fatalf("round trip = %v, %v", again, err)
	}
	if c, err := Parse(""); err != nil || len(c) != 0 {
		t.Fatalf("empty = %v, %v", c, err)
	}
	if _, err := Parse(Default); err != nil {
		t.Fatalf("Default does not parse: %v", err)
	}
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"a/b=1", "capacity[0]: must be ZONE/MACHINE_TYPE/TYPE=COUNT"},
		{"a/b/SPOT", "capacity[0]: must be ZONE/MACHINE_TYPE/TYPE=COUNT"},
		{"a/b/RESERVATION=1", "type must be ON_DEMAND, SPOT or FLEX_START"},
		{"a/b/SPOT=-1", "count must be a number >= 0"},
		{"a/b/SPOT=x", "count must be a number >= 0"},
		{"/b/SPOT=1", "zone and machine type must be names or *"},
		{"a/b/SPOT=1,a/b/spot=2", "capacity[1]: duplicate rule for a/b/SPOT"},
	} {
		if _, err := Parse(tc.in); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q) = %v, want %q", tc.in, err, tc.want)
		}
	}
	// Every bad rule is reported at once.
	if _, err := Parse("x,y/SPOT=1"); err == nil || !strings.Contains(err.Error(), "capacity[0]") || !strings.Contains(err.Error(), "capacity[1]") {
		t.Errorf("two bad rules: %v", err)
	}
}

func TestMatchMostSpecificWins(t *testing.T) {
	t.Parallel()
	c := MustParse("*/*/SPOT=1,z1/*/SPOT=2,*/m1/SPOT=3,z1/m1/SPOT=4,*/*/ON_DEMAND=9")
	for _, tc := range []struct {
		zone, mt string
		typ      loomv1.CapacitySource_Type
		want     int32
	}{
		{"z1", "m1", spot, 4},
		{"z2", "m1", spot, 3},
		{"z1", "m2", spot, 2},
		{"z2", "m2", spot, 1},
		{"z2", "m2", onDemand, 9},
		{"z1", "m1", flex, 0},
	} {
		if got := c.Total(tc.zone, tc.mt, tc.typ); got != tc.want {
			t.Errorf("Total(%s, %s, %v) = %d, want %d", tc.zone, tc.mt, tc.typ, got, tc.want)
		}
	}
	if _, ok := c.Match("z", "m", flex); ok {
		t.Error("Match found a rule for a type no rule has")
	}
}

func TestPools(t *testing.T) {
	t.Parallel()
	c := MustParse("z1/m1/SPOT=4,*/*/ON_DEMAND=10")
	used := map[Key]int32{
		{Zone: "z1", MachineType: "m1", Type: spot}:                                                3,
		{Zone: "z2", MachineType: "m2", Type: onDemand}:                                            12, // over: free is 0, not negative
		{Zone: "z1", MachineType: "m1", Type: loomv1.CapacitySource_RESERVATION, Reservation: "r"}: 1,
	}
	pools := c.Pools(used)
	var got []string
	for _, p := range pools {
		got = append(got, Key{p.GetZone(), p.GetMachineType(), p.GetType(), p.GetReservation()}.String()+
			" total="+itoa(p.GetTotal())+" used="+itoa(p.GetInUse())+" free="+itoa(p.GetFree()))
	}
	want := []string{
		"any machine type in any zone (ON_DEMAND) total=10 used=0 free=10",
		"m1 in z1 (SPOT) total=4 used=3 free=1",
		"m2 in z2 (ON_DEMAND) total=10 used=12 free=0",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("pools:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func itoa(n int32) string { return strconv.Itoa(int(n)) }
