package slurmcli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLinkCommands(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "bin")
	for _, exe := range []string{"/opt/loom-1/loom", "/opt/loom-2/loom"} { // the second start replaces the first's links
		if err := LinkCommands(dir, exe); err != nil {
			t.Fatal(err)
		}
		for _, name := range append([]string{"loom"}, Commands...) {
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
