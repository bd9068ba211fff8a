package procruntime

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

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

// A process with a terminal (srun --pty): its stdin and stdout are a tty of
// the asked size, resized as the size file says, its input is typed into
// it, what it writes (and the terminal's echo) reaches Stdout, and a job it
// puts in a group of its own
// (as a shell with job control does) dies with the unit. Only under a shim.
func TestPTY(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/dev/ptmx"); err != nil {
		t.Skip("no /dev/ptmx here")
	}
	rt := New(Options{AllowRoot: true, StateDir: t.TempDir()})
	dir := t.TempDir()
	stdout, stderr := outputs(t, dir)
	inPath, eof := filepath.Join(dir, "stdin"), filepath.Join(dir, "stdin.eof")
	in, err := rt.OpenInput("", inPath)
	if err != nil {
		t.Fatal(err)
	}
	prog := `set -m; [ -t 0 ] && [ -t 1 ] && echo "both ttys"; stty size; read line; echo "got:$line"; ` +
		`sleep 1000 & echo "bg:$!"; while read l; do stty size; done`
	p := start(t, rt, ports.Spec{Argv: []string{"sh", "-c", prog}, Env: []string{"PATH=/usr/bin:/bin"}, Dir: dir,
		Stdout: stdout, Stderr: stderr, Input: in, InputEOF: eof, Name: "pty",
		PTY: &ports.PTY{Rows: 30, Cols: 100, WinsizeFile: filepath.Join(dir, "winsize")}})
	in.Close()
	appendTo(t, inPath, "hello\n")
	var bg int
	testkit.WaitFor(t, wait, "the job's answer through its terminal", func() (bool, error) {
		out := read(t, filepath.Join(dir, "out"))
		if i := strings.Index(out, "bg:"); i >= 0 {
			if j := strings.Index(out[i:], "\r\n"); j > 0 {
				bg, _ = strconv.Atoi(out[i+3 : i+j])
			}
		}
		return bg > 0, nil
	})
	out := read(t, filepath.Join(dir, "out"))
	for _, want := range []string{"both ttys\r\n", "30 100\r\n", "hello\r\n", "got:hello\r\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("the terminal's output %q lacks %q", out, want)
		}
	}
	// The window resized: srun writes the new size beside, then renames.
	if err := os.WriteFile(filepath.Join(dir, "winsize.new"), []byte("50 132\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "winsize.new"), filepath.Join(dir, "winsize")); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, wait, "the terminal resized", func() (bool, error) {
		appendTo(t, inPath, "size?\n")
		return strings.Contains(read(t, filepath.Join(dir, "out")), "50 132\r\n"), nil
	})
	// With job control the background job has a group of its own, in the
	// unit's session: what a group kill alone would miss.
	if b, err := os.ReadFile("/proc/" + strconv.Itoa(bg) + "/stat"); err != nil {
		t.Fatal(err)
	} else if f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:])); f[2] == strconv.Itoa(p.Group().PID) ||
		f[3] != strconv.Itoa(p.Group().PID) {
		t.Fatalf("background job %d: group %s, session %s; want a group of its own in session %d", bg, f[2], f[3], p.Group().PID)
	}
	// Stopped as a step is: the whole group, and its session.
	if err := rt.Kill(p.Group()); err != nil {
		t.Fatal(err)
	}
	waitExit(t, p)
	testkit.WaitFor(t, wait, "the background job to die with its unit", func() (bool, error) {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(bg) + "/stat")
		return err != nil || strings.Contains(string(b), ") Z "), nil
	})
	// Without a shim: refused, saying why.
	if _, err := New(asAgent).Start(ports.Spec{Argv: []string{"true"}, Dir: dir, Stdout: stdout, Stderr: stderr,
		PTY: &ports.PTY{}}); err == nil || !strings.Contains(err.Error(), "a terminal needs the step daemon") {
		t.Fatalf("a terminal without a shim: %v", err)
	}
}

// TestOpenOutputRefusesAFIFO: an output file a job made a FIFO is refused
// at once, with or without a reader, instead of the open (or, with a
// reader that never reads, the agent's writes) stalling the agent for every
// job of the node; a device is taken (-o /dev/null), blocking as before.
func TestOpenOutputRefusesAFIFO(t *testing.T) {
	t.Parallel()
	rt := New(asAgent)
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	try := func(what string) {
		t.Helper()
		done := make(chan error, 1)
		go func() {
			f, err := rt.OpenOutput("", fifo, true)
			if f != nil {
				f.Close()
			}
			done <- err
		}()
		select {
		case err := <-done:
			if err == nil {
				t.Errorf("%s: a FIFO opened as an output", what)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: opening a FIFO as an output blocked", what)
		}
	}
	try("no reader")
	r, err := os.OpenFile(fifo, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	try("a reader")
	f, err := rt.OpenOutput("", os.DevNull, true)
	if err != nil {
		t.Fatalf("/dev/null: %v", err)
	}
	defer f.Close()
	var flags int
	rc, _ := f.SyscallConn()
	_ = rc.Control(func(fd uintptr) { flags, _ = unix.FcntlInt(fd, unix.F_GETFL, 0) })
	if flags&unix.O_NONBLOCK != 0 {
		t.Errorf("/dev/null left non-blocking for the job")
	}
}

// TestOutputAndInputRefuseTheAgentsDescriptors: a job's --output, --error
// or --input naming /proc/self/fd/N (or a link to it) is refused: opened
// by the agent's thread acting as the job's user, it would reach whatever
// the agent holds open (another job's output being written, a file under
// a directory the user cannot enter), past the directories that keep the
// user out.
func TestOutputAndInputRefuseTheAgentsDescriptors(t *testing.T) {
	t.Parallel()
	rt := New(asAgent)
	dir := t.TempDir()
	held, err := os.OpenFile(filepath.Join(dir, "held"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	link := filepath.Join(dir, "link")
	if err := os.Symlink("/proc/self/fd/"+strconv.Itoa(int(held.Fd())), link); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/proc/self/fd/" + strconv.Itoa(int(held.Fd())), link} {
		if f, err := rt.OpenOutput("", path, true); err == nil {
			f.Close()
			t.Errorf("OpenOutput(%s) opened the agent's own descriptor", path)
		}
		if f, err := rt.OpenInput("", path); err == nil {
			f.Close()
			t.Errorf("OpenInput(%s) opened the agent's own descriptor", path)
		}
	}
}
