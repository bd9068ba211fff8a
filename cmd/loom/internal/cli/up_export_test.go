package cli

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/loom-ml/loom/cmd/loom/stack"
	"github.com/loom-ml/loom/libs/testkit"
)

// TestUpPassesExportEndpointsToTheRegistry: `loom up --export-endpoints`
// reaches the registry's -export-endpoints: a value the registry refuses
// stops `loom up` with the registry's error, naming the flag, its
// variable, the item and the value; a good one comes up.
func TestUpPassesExportEndpointsToTheRegistry(t *testing.T) {
	t.Parallel()
	a := newApp()
	a.upAddrs = func(int) (stack.Addrs, error) { return stack.Addrs{}, nil }
	a.configDir = t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out, errOut testkit.Buffer
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

// TestUpExportsUnderItsDataDir: `loom up` lets `loom models export` write
// local copies under <data dir>/exports/<project> (and says so), nowhere
// else, not in another project's directory; with
// --export-root off it refuses local destinations, saying how to allow
// them.
func TestUpExportsUnderItsDataDir(t *testing.T) {
	t.Parallel()
	model := t.TempDir()
	weights := []byte("weights\n")
	if err := os.WriteFile(filepath.Join(model, "w.bin"), weights, 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(weights)
	if err := os.WriteFile(filepath.Join(model, "MANIFEST"), []byte(hex.EncodeToString(sum[:])+"  w.bin\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	upload := func(c liveCLI) {
		c.ok("models", "upload", model, "--model", "m")
	}

	dir := t.TempDir()
	root := filepath.Join(dir, "exports")
	out := upWhile(t, dir, func(c liveCLI) {
		upload(c)
		c.ok("models", "export", "m", "file://"+filepath.Join(root, "default", "m"))
		if got, err := os.ReadFile(filepath.Join(root, "default", "m", "w.bin")); err != nil || !bytes.Equal(got, weights) {
			t.Errorf("exported w.bin: %q, %v; want %q", got, err, weights)
		}
		for _, outside := range []string{"file://" + filepath.Join(dir, "elsewhere"), "file://" + filepath.Join(root, "other", "m")} {
			if _, errOut, code := c.run("models", "export", "m", outside); code == 0 || !strings.Contains(errOut, "outside project default's directory of the export root: export under "+root+"/default/") {
				t.Errorf("export to %s: exit %d, %q; want a refusal naming the project's directory of the export root", outside, code, errOut)
			}
		}
	})
	if want := "`loom models export` writes local copies under " + root + ", in a directory per project (file://" + root + "/PROJECT/NAME; a user other than root under PROJECT/USER/)"; !strings.Contains(out, want) {
		t.Errorf("loom up did not say %q:\n%s", want, out)
	}
	// 0755: each caller's export is written as that caller, under
	// PROJECT/USER/, which they must reach.
	if fi, err := os.Stat(root); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("export root %s: %v, %v; want a directory of mode 0755", root, fi, err)
	}

	dir = t.TempDir()
	out = upWhile(t, dir, func(c liveCLI) {
		upload(c)
		dst := "file://" + filepath.Join(dir, "exports", "default", "m")
		if _, errOut, code := c.run("models", "export", "m", dst); code == 0 || !strings.Contains(errOut, "local destinations are turned off") {
			t.Errorf("export with --export-root off: exit %d, %q; want the refusal", code, errOut)
		}
	}, "--export-root", "off")
	if strings.Contains(out, "writes local copies") {
		t.Errorf("loom up --export-root off still offers local exports:\n%s", out)
	}
}
