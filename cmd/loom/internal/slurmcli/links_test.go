package slurmcli

import (
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestUnsupportedCommandsSaySo: a Slurm command Loom does not provide
// refuses with what to use instead (exit 1), without asking the gateway.
func TestUnsupportedCommandsSaySo(t *testing.T) {
	t.Parallel()
	for name, instead := range Unsupported {
		var out, errOut strings.Builder
		if code := Main(t.Context(), name, []string{"-a"}, Env{}, &out, &errOut); code != 1 || out.Len() != 0 ||
			errOut.String() != name+": error: Loom does not provide "+name+"; "+instead+" (docs/slurm.md)\n" {
			t.Errorf("%s: exit %d, %q %q", name, code, out.String(), errOut.String())
		}
		if slices.Contains(Commands, name) {
			t.Errorf("%s is both provided and not", name)
		}
	}
	var errOut strings.Builder
	if code := Main(t.Context(), "sfoo", nil, Env{}, io.Discard, &errOut); code != 2 || !strings.Contains(errOut.String(), "is not a Slurm command Loom provides") {
		t.Errorf("an unknown name: exit %d, %q", code, errOut.String())
	}
}

func TestLinkCommands(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "bin")
	for _, exe := range []string{"/opt/loom-1/loom", "/opt/loom-2/loom"} { // the second start replaces the first's links
		if err := LinkCommands(dir, exe); err != nil {
			t.Fatal(err)
		}
		for _, name := range append([]string{"loom", "sattach"}, Commands...) {
			if got, err := os.Readlink(filepath.Join(dir, name)); err != nil || got != exe {
				t.Fatalf("%s links to %q (%v), want %q", name, got, err, exe)
			}
		}
	}
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := LinkCommands(file, "/opt/loom"); err == nil || !strings.Contains(err.Error(), "link the Slurm commands") {
		t.Fatalf("LinkCommands into a file = %v, want an error", err)
	}
}
