package stack

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
)

// TestAddrsAtDerivesEveryPortFromTheBase: the default base gives the
// documented ports as they always were; another base moves every one by
// the same amount; bases 100 apart share no port; a base whose ports would
// be privileged or past 65535 is refused, naming the limits.
func TestAddrsAtDerivesEveryPortFromTheBase(t *testing.T) {
	t.Parallel()
	documented := Addrs{Broker: "127.0.0.1:7092", Redis: "127.0.0.1:7379", Gateway: "127.0.0.1:7070", GatewayREST: "127.0.0.1:7080",
		Provisioner: "127.0.0.1:7071", Scheduler: "127.0.0.1:7072", Health: "127.0.0.1:7073", Registry: "127.0.0.1:7074",
		GatewayHTTP: "127.0.0.1:9170", ProvisionerHTTP: "127.0.0.1:9171", SchedulerHTTP: "127.0.0.1:9172", HealthHTTP: "127.0.0.1:9173",
		RegistryHTTP: "127.0.0.1:9174", Training: "127.0.0.1:7075", TrainingHTTP: "127.0.0.1:9175", Bridge: "127.0.0.1:7076",
		BridgeHTTP: "127.0.0.1:9176", PubSub: "127.0.0.1:7085", PubSubREST: "127.0.0.1:7086"}
	if got := DefaultAddrs(); got != documented {
		t.Errorf("DefaultAddrs() = %+v, want the documented %+v", got, documented)
	}
	at8000, err := AddrsAt(8000)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{}
	for i, l := range at8000.Listeners() {
		def := documented.Listeners()[i]
		var port, defPort int
		fmt.Sscanf(strings.TrimPrefix(l.Addr, "127.0.0.1:"), "%d", &port)
		fmt.Sscanf(strings.TrimPrefix(def.Addr, "127.0.0.1:"), "%d", &defPort)
		if port != defPort+1000 {
			t.Errorf("%s at base 8000: %s, want port %d", l.Name, l.Addr, defPort+1000)
		}
		seen[def.Addr] = def.Name
	}
	at7100, _ := AddrsAt(7100)
	for _, l := range at7100.Listeners() {
		if other, ok := seen[l.Addr]; ok {
			t.Errorf("bases 7000 and 7100 share %s (%s and %s)", l.Addr, other, l.Name)
		}
	}
	if len(seen) != len(documented.Listeners()) {
		t.Errorf("the default ports are not all distinct: %d of %d", len(seen), len(documented.Listeners()))
	}
	for _, base := range []int{1023, 63360, 0, -1} {
		if _, err := AddrsAt(base); err == nil || !strings.Contains(err.Error(), "it must be from 1024 to 63359") {
			t.Errorf("AddrsAt(%d): %v, want the limits", base, err)
		}
	}
	if a, err := AddrsAt(MaxPortBase); err != nil || a.GatewayHTTP != "127.0.0.1:65529" || a.BridgeHTTP != "127.0.0.1:65535" {
		t.Errorf("AddrsAt(MaxPortBase): %+v, %v", a, err)
	}
}

// TestCheckFreeNamesTheTakenListener: a given address another process
// holds is named, with its listener, as a PortInUseError; picked ones are
// not checked; InUse finds the listener from that error and from a bind
// failure that names the address.
func TestCheckFreeNamesTheTakenListener(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	taken := ln.Addr().String()
	if err := CheckFree(Addrs{Gateway: "127.0.0.1:0"}); err != nil {
		t.Errorf("CheckFree of picked ports: %v", err)
	}
	a := Addrs{GatewayREST: taken}
	err = CheckFree(a)
	var pe *PortInUseError
	if !errors.As(err, &pe) || pe.Addr != taken || pe.Name != "the REST API and web console" {
		t.Fatalf("CheckFree with the REST address taken: %v, want a PortInUseError for it", err)
	}
	if l, ok := a.InUse(fmt.Errorf("start: %w", err)); !ok || l.Addr != taken {
		t.Errorf("InUse(CheckFree's error) = %+v, %v", l, ok)
	}
	bind := errors.New("start stack: gateway: listen REST on " + taken + ": listen tcp " + taken + ": bind: address already in use")
	if l, ok := a.InUse(bind); !ok || l.Name != "the REST API and web console" {
		t.Errorf("InUse(a bind failure) = %+v, %v", l, ok)
	}
	if _, ok := a.InUse(errors.New("start stack: gateway: boom " + taken)); ok {
		t.Error("InUse took an error that is not EADDRINUSE")
	}
	if _, ok := (Addrs{}).InUse(bind); ok {
		t.Error("InUse named a listener of picked addresses")
	}
}
