package app

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/testkit"
)

// TestJobLogsReadAsOwner: a job's log is read as its owner (real OS users;
// skipped when not root): the owner's own file is read; a file of root's
// or of another user's that the owner may not read, a FIFO and an owner
// with no account are refused, and nothing of the file is sent.
func TestJobLogsReadAsOwner(t *testing.T) {
	t.Parallel()
	us := testkit.OSUsers(t, 2)
	a, b := us[0], us[1]
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	file := func(name string, uid uint32, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(name+" secret\n"), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, int(uid), -1); err != nil {
			t.Fatal(err)
		}
		return p
	}
	read := func(owner, path string) (string, error) {
		var got strings.Builder
		tl := &tail{owner: owner, send: func(p []byte) error { got.Write(p); return nil }}
		defer tl.close()
		err := tl.drain(path)
		return got.String(), err
	}

	if got, err := read(a.Name, file("mine", a.UID, 0o600)); err != nil || got != "mine secret\n" {
		t.Fatalf("the owner's own log: %q, %v", got, err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o666); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ what, owner, path, want string }{
		{"root's 0600 file", a.Name, file("shadow", 0, 0o600), "permission denied"},
		{"another user's 0600 file", a.Name, file("theirs", b.UID, 0o600), "permission denied"},
		{"a FIFO", a.Name, fifo, "not a regular file"},
		{"an owner with no account", "nosuchuser-q9", file("any", 0, 0o644), "has no account"},
	} {
		got, err := read(c.owner, c.path)
		if !errors.Is(err, errs.FailedPrecondition) || !strings.Contains(err.Error(), c.want) || got != "" {
			t.Errorf("%s read as %s: %q, %v; want nothing and FailedPrecondition (%s)", c.what, c.owner, got, err, c.want)
		}
	}
}
