package scan

import (
	"errors"
	"strings"
	"testing"

	"github.com/loom-ml/loom/libs/errs"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
)

// TestCheckAddr: only host:port, at most 255 bytes, a port from 1 to
// 65535, no control or space characters, is a check endpoint.
func TestCheckAddr(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"10.0.0.1:7000", "[fd00::1]:7000", "gpu-0001.cluster.internal:1", "127.0.0.1:65535"} {
		if err := CheckAddr(ok); err != nil {
			t.Errorf("CheckAddr(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", "10.0.0.1", ":7000", "10.0.0.1:0", "10.0.0.1:65536", "10.0.0.1:-1", "10.0.0.1:07000",
		"10.0.0.1:http", "10.0.0.1:7000\n", "evil\x1b[2J:7000", "a b:7000", "fd00::1:7000", "http://10.0.0.1:7000",
		strings.Repeat("a", 250) + ".b:7000"} {
		var inv *errs.InvalidError
		if err := CheckAddr(bad); !errors.As(err, &inv) || !strings.Contains(err.Error(), "check_addr") {
			t.Errorf("CheckAddr(%q) = %v, want InvalidError naming check_addr", bad, err)
		}
	}
}

// TestBadCheckAddrIsRefused: a registration whose check_addr is not an
// address is taken as advertising none, and said so (Change.BadCheckAddr):
// the node is not put in a ring, so no neighbour connects there, and no
// RunHealthCheck carries the value. An empty one (-check-addr off) is no
// refusal.
func TestBadCheckAddrIsRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t, DefaultConfig(), "n1", "n2", "n3", "n4")
	huge := "10.0.0.9:" + strings.Repeat("9", 1<<20)
	for _, bad := range []string{"169.254.169.254:80\r\nHost: x", huge} {
		c, err := f.s.Handle(f.now, "bad", &eventsv1.AgentRegistered{Node: nodeName("n2"), Cluster: cluster, Hostname: "n2", CheckAddr: bad})
		if err != nil {
			t.Fatal(err)
		}
		if c.BadCheckAddr == "" || len(c.BadCheckAddr) > 300 {
			t.Fatalf("check_addr %.40q: BadCheckAddr %.80q", bad, c.BadCheckAddr)
		}
		f.apply(c)
		if got := f.s.Node(nodeName("n2")).CheckAddr; got != "" {
			t.Fatalf("stored check_addr %.40q", got)
		}
	}
	c, err := f.s.Handle(f.now, "off", &eventsv1.AgentRegistered{Node: nodeName("n3"), Cluster: cluster, Hostname: "n3"})
	if err != nil || c.BadCheckAddr != "" {
		t.Fatalf("no check_addr: %v, BadCheckAddr %q", err, c.BadCheckAddr)
	}
	f.apply(c)
	f.handle(&eventsv1.ScanNodes{Cluster: cluster, ScanId: "s1", Checks: []string{AllReduce}})
	cmds := f.take()
	if len(cmds) == 0 {
		t.Fatal("no all-reduce planned")
	}
	for _, cmd := range cmds {
		if cmd.GetNode() == nodeName("n2") || cmd.GetNode() == nodeName("n3") {
			t.Fatalf("%s, with no check endpoint, in a ring: %v", cmd.GetNode(), cmd)
		}
		for _, a := range cmd.GetPeers() {
			if strings.Contains(a, "169.254") || len(a) > MaxCheckAddrBytes {
				t.Fatalf("a RunHealthCheck carries the refused address: %.60q", a)
			}
		}
	}
}
