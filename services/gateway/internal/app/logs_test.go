package app

import (
	"errors"
	"fmt"
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

// TestJobLogsOwnerWithoutAccount: a job whose owner has no account on the
// gateway's machine is refused in words that end with their kind, once (the
// CLI drops that suffix, as it does for every service's message), and say
// what to do. The kind was wrapped mid-message: `loom jobs logs` printed
// "FailedPrecondition: open job output: failed precondition: the job's
// owner ...".
func TestJobLogsOwnerWithoutAccount(t *testing.T) {
	t.Parallel()
	p := filepath.Join(t.TempDir(), "out")
	if err := os.WriteFile(p, []byte("secret\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var got strings.Builder
	tl := &tail{owner: "nosuchuser-q9", send: func(b []byte) error { got.Write(b); return nil }}
	defer tl.close()
	err := tl.drain(p)
	want := "open job output: the job's owner nosuchuser-q9 has no account on the gateway's machine to read its output as (add the account there, as on the nodes: the gateway reads a job's output with its owner's rights): failed precondition"
	if !errors.Is(err, errs.FailedPrecondition) || err.Error() != want || got.Len() != 0 {
		t.Fatalf("drain = %q (%v), sent %q; want nothing and\n%q", err, err, got.String(), want)
	}
}

// TestTailLines: a tail starts at the file's last n lines, found reading
// backwards across read blocks (a block of 7 bytes here, so that lines
// straddle blocks); a last line without a newline counts; a file with
// fewer lines, or an empty one, is read whole.
func TestTailLines(t *testing.T) {
	t.Parallel()
	var long strings.Builder
	for i := range 1000 {
		fmt.Fprintf(&long, "line %04d\n", i)
	}
	for _, c := range []struct {
		what, text string
		n          int
		want       string
	}{
		{"two of three", "a\nbb\nccc\n", 2, "bb\nccc\n"},
		{"one", "a\nbb\nccc\n", 1, "ccc\n"},
		{"more than there are", "a\nbb\nccc\n", 5, "a\nbb\nccc\n"},
		{"all there are", "a\nbb\nccc\n", 3, "a\nbb\nccc\n"},
		{"no final newline", "a\nbb\nccc", 1, "ccc"},
		{"no final newline, two", "a\nbb\nccc", 2, "bb\nccc"},
		{"empty lines", "a\n\n\n", 2, "\n\n"},
		{"one line, no newline", "abc", 1, "abc"},
		{"empty file", "", 3, ""},
		{"across many blocks", long.String(), 3, "line 0997\nline 0998\nline 0999\n"},
	} {
		p := filepath.Join(t.TempDir(), "out")
		if err := os.WriteFile(p, []byte(c.text), 0o644); err != nil {
			t.Fatal(err)
		}
		var got strings.Builder
		tl := &tail{lines: c.n, send: func(b []byte) error { got.Write(b); return nil }}
		err := tl.drain(p)
		if err == nil {
			// Again from where it is, with a block of 7 bytes.
			got.Reset()
			if err = seekLastLines(tl.f, c.n, make([]byte, 7)); err == nil {
				err = tl.drain(p)
			}
		}
		tl.close()
		if err != nil || got.String() != c.want {
			t.Errorf("%s: tail -n %d of %q = %q, %v; want %q", c.what, c.n, c.text, got.String(), err, c.want)
		}
	}
}
