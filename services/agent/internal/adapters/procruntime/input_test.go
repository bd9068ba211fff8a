package procruntime

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/services/agent/internal/ports"
)

// A process given an input file reads it as it grows (what is appended
// reaches it before the end is said), and reads end of file once the end
// file exists; one that stops reading early ends without waiting for the
// end. With a shim (which feeds it, outliving the agent) and without.
func TestInputFollowsTheFile(t *testing.T) {
	t.Parallel()
	for name, opts := range map[string]func(t *testing.T) Options{
		"direct": func(*testing.T) Options { return asAgent },
		"shim":   func(t *testing.T) Options { return Options{AllowRoot: true, StateDir: t.TempDir()} },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			rt := New(opts(t))
			dir := t.TempDir()
			stdout, stderr := outputs(t, dir)
			inPath, eof := filepath.Join(dir, "stdin"), filepath.Join(dir, "stdin.eof")
			in, err := rt.OpenInput("", inPath)
			if err != nil {
				t.Fatal(err)
			}
			p := start(t, rt, ports.Spec{Argv: []string{"cat"}, Env: []string{"PATH=/usr/bin:/bin"}, Dir: dir,
				Stdout: stdout, Stderr: stderr, Input: in, InputEOF: eof, Name: "cat"})
			in.Close() // the feeder has its own
			appendTo(t, inPath, "one\n")
			testkit.WaitFor(t, wait, "the first line to reach cat", func() (bool, error) {
				return read(t, filepath.Join(dir, "out")) == "one\n", nil
			})
			appendTo(t, inPath, "two\n")
			if err := os.WriteFile(eof, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			if e := noUsage(waitExit(t, p)); e != (ports.Exit{}) {
				t.Fatalf("cat ended %+v, want 0 at the input's end", e)
			}
			if got := read(t, filepath.Join(dir, "out")); got != "one\ntwo\n" {
				t.Fatalf("cat wrote %q, want all its input", got)
			}

			// A reader that stops early: the input never ends.
			dir = t.TempDir()
			stdout, stderr = outputs(t, dir)
			inPath = filepath.Join(dir, "stdin")
			if in, err = rt.OpenInput("", inPath); err != nil {
				t.Fatal(err)
			}
			appendTo(t, inPath, "first\nsecond\n")
			p = start(t, rt, ports.Spec{Argv: []string{"head", "-1"}, Env: []string{"PATH=/usr/bin:/bin"}, Dir: dir,
				Stdout: stdout, Stderr: stderr, Input: in, InputEOF: filepath.Join(dir, "stdin.eof"), Name: "head"})
			in.Close()
			if e := noUsage(waitExit(t, p)); e != (ports.Exit{}) {
				t.Fatalf("head ended %+v", e)
			}
			if got := read(t, filepath.Join(dir, "out")); got != "first\n" {
				t.Fatalf("head wrote %q", got)
			}
		})
	}
}

// The input file is the job's owner's: what is in its place is opened as
// them, and a FIFO (which would hold the open) or a directory is refused.
func TestOpenInputRefusesWhatIsNoFile(t *testing.T) {
	t.Parallel()
	rt := New(asAgent)
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{fifo, dir} {
		if f, err := rt.OpenInput("", path); err == nil || !strings.Contains(err.Error(), "not a regular file") && !strings.Contains(err.Error(), "is a directory") {
			if f != nil {
				f.Close()
			}
			t.Errorf("OpenInput(%s) = %v, want refused", path, err)
		}
	}
	// Missing: made, empty, the owner's alone.
	f, err := rt.OpenInput("", filepath.Join(dir, "stdin"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || st.Size() != 0 || st.Mode().Perm() != 0o600 {
		t.Fatalf("made input: %v %v", st.Mode(), err)
	}
}

func appendTo(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
}
