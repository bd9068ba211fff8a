package registry

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/loom-ml/loom/libs/config"
	"github.com/loom-ml/loom/libs/testkit"
)

// TestExportEndpointsConfig: -export-endpoints and
// LOOM_REGISTRY_EXPORT_ENDPOINTS read a comma-separated allow-list (the
// flag winning, empty by default), and a bad endpoint, in either, stops the
// registry at start with a message naming the flag, the variable and the
// value, before it connects to anything. Not parallel: it sets a variable.
func TestExportEndpointsConfig(t *testing.T) {
	ctx := testkit.Context(t, 30*time.Second)
	cfg, err := config.ParseArgs("registry", nil, (*Config).RegisterFlags)
	if err != nil || len(cfg.ExportEndpoints) != 0 {
		t.Fatalf("default ExportEndpoints = %q, %v; want none", cfg.ExportEndpoints, err)
	}
	cfg, err = config.ParseArgs("registry", []string{"-export-endpoints", "http://127.0.0.1:9000, https://minio.example:9443;profile=minio-export,"}, (*Config).RegisterFlags)
	if want := []string{"http://127.0.0.1:9000", "https://minio.example:9443;profile=minio-export"}; err != nil || !slices.Equal(cfg.ExportEndpoints, want) {
		t.Fatalf("-export-endpoints parsed as %q, %v; want %q", cfg.ExportEndpoints, err, want)
	}
	if err := cfg.validate(); err != nil {
		t.Errorf("validate(good endpoints) = %v", err)
	}

	const named = "-export-endpoints (LOOM_REGISTRY_EXPORT_ENDPOINTS): "
	// The brokers and Redis point nowhere: the check must come first.
	nowhere := []string{"-brokers", "127.0.0.1:1", "-redis", "127.0.0.1:1"}
	for bad, says := range map[string]string{
		"minio:9000": "must be scheme://host:port", "http://minio": "must be scheme://host:port",
		"http://minio:9000/bucket": "must be scheme://host:port", "ftp://minio:21": "must be scheme://host:port",
		"http://u:p@minio:9000":            "must be scheme://host:port",
		"http://minio:9000;credentials=/x": "only ;profile=NAME may follow",
		"http://minio:9000;profile=a b":    "must be 1 to 64 letters",
	} {
		err := RunArgs(ctx, append([]string{"-export-endpoints", "http://127.0.0.1:9000," + bad}, nowhere...))
		if err == nil || !strings.Contains(err.Error(), named+"item 2: ") || !strings.Contains(err.Error(), says) || !strings.Contains(err.Error(), strings.SplitN(bad, ";", 2)[0]) {
			t.Errorf("registry with -export-endpoints ...,%s: %v; want it refused naming the flag, the item and the value", bad, err)
		}
	}

	t.Setenv("LOOM_REGISTRY_EXPORT_ENDPOINTS", "https://ceph.internal:7480")
	cfg, err = config.ParseArgs("registry", nil, (*Config).RegisterFlags)
	if err != nil || !slices.Equal(cfg.ExportEndpoints, []string{"https://ceph.internal:7480"}) {
		t.Fatalf("LOOM_REGISTRY_EXPORT_ENDPOINTS parsed as %q, %v", cfg.ExportEndpoints, err)
	}
	cfg, err = config.ParseArgs("registry", []string{"-export-endpoints", ""}, (*Config).RegisterFlags)
	if err != nil || len(cfg.ExportEndpoints) != 0 {
		t.Fatalf("an empty flag over the variable gave %q, %v; want none (the flag wins)", cfg.ExportEndpoints, err)
	}
	t.Setenv("LOOM_REGISTRY_EXPORT_ENDPOINTS", "ceph.internal:7480")
	if err := RunArgs(ctx, nowhere); err == nil || !strings.Contains(err.Error(), named+"item 1") || !strings.Contains(err.Error(), "ceph.internal:7480") {
		t.Errorf("registry with a bad LOOM_REGISTRY_EXPORT_ENDPOINTS: %v; want it refused naming the flag and the value", err)
	}
}
