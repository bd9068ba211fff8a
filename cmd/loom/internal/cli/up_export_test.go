package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/loom-ml/loom/cmd/loom/stack"
)

// TestUpPassesExportEndpointsToTheRegistry: `loom up --export-endpoints`
// reaches the registry's -export-endpoints: a value the registry refuses
// stops `loom up` with the registry's error, naming the flag, its
// variable, the item and the value; a good one comes up.
func TestUpPassesExportEndpointsToTheRegistry(t *testing.T) {
	t.Parallel()
	a := newApp()
	a.upAddrs = func() stack.Addrs { return stack.Addrs{} }
	a.configDir = t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out, errOut syncBuffer
	code := a.execute(ctx, []string{"up", "--data-dir", t.TempDir(), "--log-level", "warn",
		"--export-endpoints", "http://127.0.0.1:9000,ceph.internal:7480"}, &out, &errOut)
	msg := errOut.String()
	for _, want := range []string{"-export-endpoints (LOOM_REGISTRY_EXPORT_ENDPOINTS)", "item 2", "ceph.internal:7480"} {
		if code != 1 || !strings.Contains(msg, want) {
			t.Fatalf("loom up --export-endpoints with a bad item: exit %d, %q; want 1 and the registry's refusal naming %q", code, msg, want)
		}
	}
	if strings.Contains(out.String(), "Loom is up") {
		t.Errorf("loom up said it was up with a refused setting:\n%s", out.String())
	}

	if got := upWithCluster(t, t.TempDir(), "--export-endpoints", "https://ceph.internal:7480,http://127.0.0.1:9000"); !strings.Contains(got, "Loom stopped.") {
		t.Errorf("loom up with good export endpoints:\n%s", got)
	}
}
