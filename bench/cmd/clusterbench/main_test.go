package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestClusterbenchSmall runs the whole benchmark on small clusters, through
// the gateway, and checks the report it writes.
func TestClusterbenchSmall(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts the embedded stack")
	}
	report := filepath.Join(t.TempDir(), "REPORT.md")
	other := "# Loom benchmark report\n\n<!-- pathbench:begin -->\nkeep me\n<!-- pathbench:end -->\n"
	if err := os.WriteFile(report, []byte(other), 0o644); err != nil {
		t.Fatal(err)
	}
	o := options{nodes: 6, pools: 3, latency: 50 * time.Millisecond, sigma: 0.1, hb: time.Second,
		via: "gateway", timeout: time.Minute, report: report, logLevel: "error"}
	for range 2 { // the second run replaces the first's section
		if err := run(o); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	got := string(b)
	if !strings.HasPrefix(got, other) {
		t.Errorf("the other section was not kept:\n%s", got)
	}
	if n := strings.Count(got, "<!-- clusterbench:begin -->"); n != 1 || !strings.HasSuffix(got, "<!-- clusterbench:end -->\n") {
		t.Errorf("%d clusterbench sections, or not at the end:\n%s", n, got)
	}
	for _, want := range []string{"| one pool | 6 |", "| 3 pools | 6 |", "control-plane overhead", "go run ./bench/cmd/clusterbench -nodes 6 -pools 3"} {
		if !strings.Contains(got, want) {
			t.Errorf("report lacks %q:\n%s", want, got)
		}
	}
}

// TestClusterbenchOnTheBus runs the benchmark with its commands written
// straight on the bus: signed as the gateway it stands in for, they are
// carried out (another service's cluster command is refused as
// wrong-sender, and the run would time out).
func TestClusterbenchOnTheBus(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts the embedded stack")
	}
	o := options{nodes: 2, pools: 1, latency: 50 * time.Millisecond, sigma: 0.1, hb: time.Second,
		via: "bus", timeout: 30 * time.Second, logLevel: "error"}
	if err := run(o); err != nil {
		t.Fatal(err)
	}
}

func TestRunRejectsBadOptions(t *testing.T) {
	t.Parallel()
	for _, o := range []options{
		{nodes: 10, pools: 2, via: "carrier-pigeon"},
		{nodes: 0, pools: 1, via: "bus"},
		{nodes: 2, pools: 3, via: "bus"},
	} {
		if err := run(o); err == nil {
			t.Errorf("run(%+v) succeeded", o)
		}
	}
}
