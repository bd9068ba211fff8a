package app

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/loom-ml/loom/services/agent/internal/adapters/procruntime"
)

func TestOpenOutputs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// The files are the agent's own user's here (root allowed, as the tests
	// run as root); runtime tests show them opened as another owner.
	a := &App{rt: procruntime.New(procruntime.Options{AllowRoot: true})}
	openOutputs := func(dir, out, errPath string, keep bool) (*os.File, *os.File, error) {
		return a.openOutputs("", dir, out, errPath, keep)
	}
	write := func(out, errPath string, keep bool) {
		t.Helper()
		o, e, err := openOutputs(dir, out, errPath, keep)
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
	write("a/joined.out", "", true)                                    // relative, directory created
	write(filepath.Join(dir, "a", "joined.out"), "a/joined.out", true) // the same file twice: joined
	write("split.out", "b/split.err", false)
	if got := read("a/joined.out"); got != "out\nerr\nout\nerr\n" {
		t.Errorf("joined file = %q, want both streams, appended (keep)", got)
	}
	if got, gotErr := read("split.out"), read("b/split.err"); got != "out\n" || gotErr != "err\n" {
		t.Errorf("split files = %q and %q, want stdout and stderr apart", got, gotErr)
	}
	// Without keep (--open-mode=truncate, Slurm's default) a second start
	// empties both files first, the joined one once.
	write("split.out", "b/split.err", false)
	write(filepath.Join(dir, "a", "joined.out"), "a/joined.out", false)
	if got, gotErr, joined := read("split.out"), read("b/split.err"), read("a/joined.out"); got != "out\n" || gotErr != "err\n" || joined != "out\nerr\n" {
		t.Errorf("after a truncating start: %q, %q and joined %q; want only the new run's", got, gotErr, joined)
	}
	if _, _, err := openOutputs(dir, "split.out", "/proc/no-such-dir/x.err", true); err == nil {
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
