package app

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func TestOpenOutputs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(out, errPath string) {
		t.Helper()
		o, e, err := openOutputs(dir, out, errPath)
		if err != nil {
			t.Fatalf("openOutputs(%q, %q): %v", out, errPath, err)
		}
		if _, err := o.WriteString("out\n"); err != nil {
			t.Fatal(err)
		}
		if _, err := e.WriteString("err\n"); err != nil {
			t.Fatal(err)
		}
		o.Close()
		e.Close()
	}
	read := func(p string) string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(dir, p))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	write("a/joined.out", "")                                    // relative, directory created
	write(filepath.Join(dir, "a", "joined.out"), "a/joined.out") // the same file twice: joined
	write("split.out", "b/split.err")
	if got := read("a/joined.out"); got != "out\nerr\nout\nerr\n" {
		t.Errorf("joined file = %q, want both streams, appended", got)
	}
	if got, gotErr := read("split.out"), read("b/split.err"); got != "out\n" || gotErr != "err\n" {
		t.Errorf("split files = %q and %q, want stdout and stderr apart", got, gotErr)
	}
	if _, _, err := openOutputs(dir, "split.out", "/proc/no-such-dir/x.err"); err == nil {
		t.Error("openOutputs with an error file that cannot be created succeeded")
	}
}

func TestSignalOf(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]syscall.Signal{"USR1": syscall.SIGUSR1, "sigterm": syscall.SIGTERM, "9": syscall.SIGKILL, "CONT": syscall.SIGCONT} {
		if got, err := signalOf(in); err != nil || got != want {
			t.Errorf("signalOf(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "FOO", "64"} {
		if got, err := signalOf(bad); err == nil {
			t.Errorf("signalOf(%q) = %v, want an error", bad, got)
		}
	}
}
