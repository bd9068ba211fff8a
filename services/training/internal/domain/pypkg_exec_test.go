package domain

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/testkit/need"
	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
)

// runPythonPackage starts PythonPackageCommand's command for module (found
// on PYTHONPATH=lib) with TMPDIR=tmp, and returns the command and its output.
func runPythonPackage(t *testing.T, id int64, tmp, lib, module string, args ...string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	if err := exec.Command("python3", "-c", "import venv, ensurepip").Run(); err != nil {
		need.Missing(t, "python3 with venv and ensurepip (apt-get install python3-venv python3-pip): "+err.Error())
	}
	argv := PythonPackageCommand(id, &trainingv1.PythonPackageSpec{PythonModule: module, Args: args})
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp, "PYTHONPATH="+lib, "RANK=0")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, &out
}

// TestPythonPackageVenvRemoved runs the rendered python_package_spec
// command for real and checks that the per-job venv is gone once the
// program ended: after a success, after a failure (whose exit status is
// kept), and after a SIGTERM (a cancel), which reaches the program.
func TestPythonPackageVenvRemoved(t *testing.T) {
	t.Parallel()
	lib := t.TempDir()
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(lib, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("okmod.py", "import sys\nprint('prefix', sys.prefix, 'args', sys.argv[1:])\n")
	write("failmod.py", "import sys\nprint('prefix', sys.prefix)\nsys.exit(3)\n")
	write("sleepmod.py", `import signal, sys, time
def bye(*_):
    print("got SIGTERM", flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, bye)
open(sys.argv[1], "w").write(sys.prefix)
time.sleep(300)
`)
	// The venv is mktemp's: loom-cj-<id>-venv-<rank>.<random>.
	venvs := func(tmp string, id string) []string {
		m, err := filepath.Glob(filepath.Join(tmp, "loom-cj-"+id+"-venv-0.*"))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}

	t.Run("success", func(t *testing.T) {
		t.Parallel()
		tmp := t.TempDir()
		cmd, out := runPythonPackage(t, 7, tmp, lib, "okmod", "--x=1", "a b")
		if err := cmd.Wait(); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		if !strings.Contains(out.String(), "prefix "+filepath.Join(tmp, "loom-cj-7-venv-0.")) || !strings.Contains(out.String(), " args ['--x=1', 'a b']") {
			t.Fatalf("the program did not run in the venv:\n%s", out)
		}
		if left := venvs(tmp, "7"); len(left) != 0 {
			t.Fatalf("venv left after the job: %v", left)
		}
	})
	t.Run("failure keeps the exit status", func(t *testing.T) {
		t.Parallel()
		tmp := t.TempDir()
		// A directory at the name a venv once had (another user's, left
		// there to stop the job, or to be swapped in) changes nothing: the
		// venv's name is mktemp's.
		planted := filepath.Join(tmp, "loom-cj-8-venv-0")
		if err := os.MkdirAll(filepath.Join(planted, "bin"), 0o755); err != nil {
			t.Fatal(err)
		}
		cmd, out := runPythonPackage(t, 8, tmp, lib, "failmod")
		var ee *exec.ExitError
		if err := cmd.Wait(); !errors.As(err, &ee) || ee.ExitCode() != 3 {
			t.Fatalf("exit %v, want status 3\n%s", err, out)
		}
		if left := venvs(tmp, "8"); len(left) != 0 {
			t.Fatalf("venv left after a failed job: %v", left)
		}
		if _, err := os.Stat(filepath.Join(planted, "bin")); err != nil {
			t.Errorf("the planted directory was touched: %v", err)
		}
	})
	t.Run("SIGTERM", func(t *testing.T) {
		t.Parallel()
		tmp := t.TempDir()
		started := filepath.Join(t.TempDir(), "started")
		cmd, out := runPythonPackage(t, 9, tmp, lib, "sleepmod", started)
		testkit.WaitFor(t, 60*time.Second, "the program to start", func() (bool, error) {
			_, err := os.Stat(started)
			return err == nil, nil
		})
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		err := cmd.Wait()
		if !strings.Contains(out.String(), "got SIGTERM") {
			t.Fatalf("the program was not told (%v):\n%s", err, out)
		}
		if left := venvs(tmp, "9"); len(left) != 0 {
			t.Fatalf("venv left after a cancel: %v", left)
		}
	})
}
