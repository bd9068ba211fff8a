package cli

import (
	"os"
	"path/filepath"
	"testing"
)

// TestExportRootReachable: loom up's export root is 0755 (each caller's
// exports are written as that caller, under it), one made 0700 by an
// older loom up is opened up, and a parent closed to other users is named
// so that the banner can say only root can export there.
func TestExportRootReachable(t *testing.T) {
	t.Parallel()
	base := t.TempDir() // 0700: closed to others
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	fresh := filepath.Join(base, "data", "exports")
	if err := exportRootDir(fresh); err != nil {
		t.Fatal(err)
	}
	old := filepath.Join(base, "old")
	if err := os.Mkdir(old, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := exportRootDir(old); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{fresh, old} {
		if fi, err := os.Stat(d); err != nil || fi.Mode().Perm() != 0o755 {
			t.Errorf("%s: %v %v, want mode 0755", d, fi.Mode(), err)
		}
	}
	if got := untraversable(fresh); got != "" && got != filepath.Dir(base) && !isClosed(got) {
		t.Errorf("untraversable(%s) = %q", fresh, got)
	}
	closed := filepath.Join(base, "closed")
	if err := os.Mkdir(closed, 0o700); err != nil {
		t.Fatal(err)
	}
	inner := filepath.Join(closed, "exports")
	if err := exportRootDir(inner); err != nil {
		t.Fatal(err)
	}
	if got := untraversable(inner); got != closed && !isClosed(got) {
		t.Errorf("untraversable(%s) = %q, want %s (0700)", inner, got, closed)
	}
}

// isClosed reports whether p is a directory other users may not pass
// through: the temporary dir's own parents may be so on a test machine.
func isClosed(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().Perm()&0o001 == 0
}
