package procruntime

import (
	"bytes"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/loom-ml/loom/libs/gpu"
	"github.com/loom-ml/loom/libs/proc"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/services/agent/internal/ports"
)

// wait bounds every wait on a process in these tests.
const wait = 20 * time.Second

// outputs returns a stdout and a stderr file in dir, closed at the test's end.
func outputs(t *testing.T, dir string) (stdout, stderr *os.File) {
	t.Helper()
	var err error
	if stdout, err = os.Create(filepath.Join(dir, "out")); err != nil {
		t.Fatal(err)
	}
	if stderr, err = os.Create(filepath.Join(dir, "err")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdout.Close(); stderr.Close() })
	return stdout, stderr
}

// read returns the content of path.
func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// start starts spec, and kills its group at the test's end.
func start(t *testing.T, rt Runtime, spec ports.Spec) ports.Process {
	t.Helper()
	p, err := rt.Start(spec)
	if err != nil {
		t.Fatalf("Start(%v): %v", spec.Argv, err)
	}
	t.Cleanup(func() { _ = rt.Kill(p.Group()) })
	return p
}

// waitExit waits for p to exit, within wait.
// noUsage is e without its usage, which no test can predict.
func noUsage(e ports.Exit) ports.Exit {
	e.Usage = ports.Rusage{}
	return e
}

func waitExit(t *testing.T, p ports.Process) ports.Exit {
	t.Helper()
	ch := make(chan ports.Exit, 1)
	go func() { ch <- p.Wait() }()
	select {
	case e := <-ch:
		return e
	case <-time.After(wait):
		t.Fatalf("process %d did not exit within %s", p.Group().PID, wait)
		return ports.Exit{}
	}
}

// waitFile waits until path holds a line, and returns it.
func waitFile(t *testing.T, path string) string {
	t.Helper()
	var s string
	testkit.WaitFor(t, wait, "a line in "+path, func() (bool, error) {
		b, err := os.ReadFile(path)
		s = strings.TrimSpace(string(b))
		return err == nil && strings.HasSuffix(string(b), "\n"), nil
	})
	return s
}

// The program is found on the spec's PATH, relative to its directory, and
// runs there with exactly the spec's environment, in a group it leads, its
// streams in the spec's files; its exit code comes back.
func TestStartRunsTheSpec(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	// The program waits on a FIFO (gate) until the test has read its group:
	// a process that has already exited has no start time to read.
	if err := syscall.Mkfifo(filepath.Join(dir, "gate"), 0o600); err != nil {
		t.Fatal(err)
	}
	prog := "#!/bin/sh\nread x < gate\npwd\necho \"FOO=$FOO\"\necho \"args $*\"\ncut -d' ' -f5 /proc/$$/stat\nenv | sort > env.txt\necho oops >&2\nexit 3\n"
	testkit.WriteExecutable(t, filepath.Join(dir, "bin", "prog"), []byte(prog), 0o755)
	stdout, stderr := outputs(t, dir)
	rt := New(asAgent)
	// "bin" is relative: taken against Dir, as a shell started there would.
	env := []string{"PATH=bin:/usr/bin:/bin", "FOO=bar"}
	p := start(t, rt, ports.Spec{Argv: []string{"prog", "a", "b"}, Env: env, Dir: dir, Stdout: stdout, Stderr: stderr})
	g := p.Group()
	if g.PID <= 1 || g.Start == 0 {
		t.Fatalf("group = %+v, want the leader's pid and start time", g)
	}
	if err := os.WriteFile(filepath.Join(dir, "gate"), []byte("go\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e := waitExit(t, p)
	if noUsage(e) != (ports.Exit{Code: 3}) {
		t.Fatalf("exit = %+v, want code 3", e)
	}
	// The kernel's count of what it used comes with its exit; a small
	// program's peak is not told apart from this process's memory it
	// started as a copy of (proc.HighWater): unknown, 0.
	if e.Usage.UserCPU+e.Usage.SystemCPU <= 0 || (e.Usage.MaxRSS != 0 && e.Usage.MaxRSS <= proc.HighWater()) {
		t.Errorf("exit's usage = %+v, want its CPU time and no peak of this process's", e.Usage)
	}
	want := dir + "\nFOO=bar\nargs a b\n" + strconv.Itoa(g.PID) + "\n"
	if got := read(t, filepath.Join(dir, "out")); got != want {
		t.Errorf("stdout = %q, want %q (cwd, env, args, its own group)", got, want)
	}
	if got := read(t, filepath.Join(dir, "err")); got != "oops\n" {
		t.Errorf("stderr = %q, want oops", got)
	}
	// Nothing of the agent's environment leaks in (sh adds PWD, SHLVL, _).
	for _, kv := range strings.Split(strings.TrimSpace(read(t, filepath.Join(dir, "env.txt"))), "\n") {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "PATH", "FOO", "PWD", "SHLVL", "_":
		default:
			t.Errorf("the process's environment has %q, not in its spec", kv)
		}
	}
	if rt.Alive(g) {
		t.Error("Alive after the leader was reaped")
	}
}

// A start that cannot run says why.
func TestStartFailures(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	stdout, stderr := outputs(t, dir)
	rt := New(asAgent)
	if p, err := rt.Start(ports.Spec{Dir: dir, Stdout: stdout, Stderr: stderr}); err == nil || !strings.Contains(err.Error(), "no program to run") {
		if p != nil {
			_ = rt.Kill(p.Group())
		}
		t.Errorf("no argv: Start = %v, want an error containing %q", err, "no program to run")
	}
}

// A program the kernel will not execute is the task's exit, as under
// Slurm 22.05's slurmstepd (checked with scripts/slurm-local.sh: srun
// /nonexistent/prog exits 2, srun ./not-executable 13): the task starts,
// its error output says "slurmstepd-NODE: error: execve(): PATH: ERROR",
// and it exits with the error's number, so that srun reports "Exited with
// exit code 2" and the job's ExitCode is 2:0, not a launch that failed.
// The same with and without the shim.
func TestExecFailureIsTheTaskExit(t *testing.T) {
	t.Parallel()
	for name, opts := range map[string]func(t *testing.T) Options{
		"direct": func(*testing.T) Options { return Options{AllowRoot: true, Node: "n1"} },
		"shim":   func(t *testing.T) Options { return Options{AllowRoot: true, Node: "n1", StateDir: t.TempDir()} },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			rt := New(opts(t))
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "noexec.sh"), []byte("echo hi\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "garbage"), []byte("\x00\x01not a program\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			for _, tc := range []struct {
				name string
				spec ports.Spec
				code int32
				line string
			}{
				{"not on PATH", ports.Spec{Argv: []string{"no-such-program-xyz"}, Env: []string{"PATH=/usr/bin:/bin"}}, 2,
					"execve(): no-such-program-xyz: No such file or directory"},
				{"no such path", ports.Spec{Argv: []string{"/nonexistent/prog", "a"}}, 2, "execve(): /nonexistent/prog: No such file or directory"},
				{"relative", ports.Spec{Argv: []string{"./missing"}}, 2, "execve(): " + dir + "/./missing: No such file or directory"},
				{"not executable", ports.Spec{Argv: []string{"./noexec.sh"}}, 13, "execve(): " + dir + "/./noexec.sh: Permission denied"},
				{"a directory", ports.Spec{Argv: []string{"/tmp"}}, 13, "execve(): /tmp: Permission denied"},
				{"not a program", ports.Spec{Argv: []string{"./garbage"}}, 8, "execve(): " + dir + "/./garbage: Exec format error"},
				{"no interpreter", ports.Spec{Script: "#!/no/such/interpreter -x\necho hi\n"}, 2,
					"execve(): bad interpreter(/no/such/interpreter -x): No such file or directory"},
			} {
				sub := filepath.Join(t.TempDir(), "o")
				if err := os.Mkdir(sub, 0o755); err != nil {
					t.Fatal(err)
				}
				stdout, stderr := outputs(t, sub)
				tc.spec.Dir, tc.spec.Stdout, tc.spec.Stderr, tc.spec.Name = dir, stdout, stderr, "exec-"+strings.ReplaceAll(tc.name, " ", "-")
				p, err := rt.Start(tc.spec)
				if err != nil {
					t.Errorf("%s: Start = %v, want a task that exits %d", tc.name, err, tc.code)
					continue
				}
				if e := waitExit(t, p); e.Code != tc.code {
					t.Errorf("%s: exit %+v, want code %d", tc.name, e, tc.code)
				}
				if got, want := read(t, filepath.Join(sub, "err")), "slurmstepd-n1: error: "+tc.line+"\n"; got != want {
					t.Errorf("%s: stderr %q, want %q", tc.name, got, want)
				}
			}
		})
	}
}

// A script runs as the kernel runs a "#!" file: its interpreter gets the
// in-memory script's path as $0, and no file is left.
func TestStartScript(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	stdout, stderr := outputs(t, dir)
	p := start(t, New(asAgent), ports.Spec{Script: "#!/bin/sh -e\necho \"$0\"\nfalse\necho not reached\n", Dir: dir, Stdout: stdout, Stderr: stderr})
	if e := waitExit(t, p); e.Code != 1 {
		t.Fatalf("exit = %+v, want 1 (sh -e stops at false)", e)
	}
	if got := read(t, filepath.Join(dir, "out")); got != scriptPath+"\n" {
		t.Fatalf("stdout = %q, want the script's path %s only", got, scriptPath)
	}
	if ents, err := os.ReadDir(dir); err != nil || len(ents) != 2 {
		t.Fatalf("directory holds %v (%v), want only out and err", ents, err)
	}
}

// Signal reaches every process of the group; SignalLeader only its leader
// (under a shim: the job's process, not the shim); Kill ends what ignores
// SIGTERM. Exits by signal read 128+n. The same with and without the shim.
func TestSignalLeaderGroupAndKill(t *testing.T) {
	t.Parallel()
	t.Run("direct", func(t *testing.T) {
		t.Parallel()
		testSignalLeaderGroupAndKill(t, New(asAgent))
	})
	t.Run("shim", func(t *testing.T) {
		t.Parallel()
		testSignalLeaderGroupAndKill(t, New(Options{AllowRoot: true, StateDir: t.TempDir()}))
	})
}

func testSignalLeaderGroupAndKill(t *testing.T, rt Runtime) {
	var n atomic.Int32
	// A leader with a child in the background that writes its pid.
	family := func(t *testing.T, trap string) (ports.Process, int) {
		dir := t.TempDir()
		stdout, stderr := outputs(t, dir)
		p := start(t, rt, ports.Spec{
			Argv: []string{"/bin/sh", "-c", trap + "sleep 60 & echo $! > child; wait"},
			Env:  []string{"PATH=/usr/bin:/bin"}, Dir: dir, Stdout: stdout, Stderr: stderr,
			Name: "unit-" + strconv.Itoa(int(n.Add(1))),
		})
		child, err := strconv.Atoi(waitFile(t, filepath.Join(dir, "child")))
		if err != nil {
			t.Fatal(err)
		}
		return p, child
	}

	t.Run("group", func(t *testing.T) {
		t.Parallel()
		p, child := family(t, "")
		if err := rt.Signal(p.Group(), syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if e := waitExit(t, p); noUsage(e) != (ports.Exit{Code: 128 + 15, Signal: syscall.SIGTERM.String()}) {
			t.Fatalf("exit = %+v, want 143 by SIGTERM", e)
		}
		testkit.WaitFor(t, wait, "the leader's child ended by the group's signal", func() (bool, error) {
			return !rt.Alive(ports.Group{PID: child}), nil
		})
	})

	t.Run("leader", func(t *testing.T) {
		t.Parallel()
		p, child := family(t, "")
		if err := rt.SignalLeader(p.Group(), syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if e := waitExit(t, p); e.Code != 143 {
			t.Fatalf("exit = %+v, want 143", e)
		}
		if rt.opts.StateDir != "" {
			// Under a shim the leader's end ends what it left, with
			// SIGKILL (TestShimEndsWhatItsJobLeaves); without one it
			// lives on until the agent's Kill, below.
			testkit.WaitFor(t, wait, "the leader's child ended with the leader", func() (bool, error) {
				return !rt.Alive(ports.Group{PID: child}), nil
			})
			return
		}
		if !rt.Alive(ports.Group{PID: child}) {
			t.Fatal("SignalLeader reached the leader's child")
		}
		if err := rt.SignalLeader(p.Group(), syscall.SIGTERM); err != nil {
			t.Fatalf("SignalLeader of a leader that is gone = %v, want nil", err)
		}
		// What the leader left is ended with Kill, as the agent does.
		if err := rt.Kill(p.Group()); err != nil {
			t.Fatal(err)
		}
		testkit.WaitFor(t, wait, "the child killed with its group", func() (bool, error) {
			return !rt.Alive(ports.Group{PID: child}), nil
		})
	})

	t.Run("kill", func(t *testing.T) {
		t.Parallel()
		p, _ := family(t, "trap '' TERM; ")
		if err := rt.Signal(p.Group(), syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if rt.WaitGone(p.Group(), 200*time.Millisecond) {
			t.Fatal("a group that ignores SIGTERM is gone after it")
		}
		if err := rt.Kill(p.Group()); err != nil {
			t.Fatal(err)
		}
		if e := waitExit(t, p); noUsage(e) != (ports.Exit{Code: 128 + 9, Signal: syscall.SIGKILL.String()}) {
			t.Fatalf("exit = %+v, want 137 by SIGKILL", e)
		}
		if !rt.WaitGone(p.Group(), wait) {
			t.Fatal("the group is not gone after Kill")
		}
		if err := rt.Signal(p.Group(), syscall.SIGTERM); err != nil {
			t.Fatalf("Signal of a group that is gone = %v, want nil", err)
		}
	})
}

// A restarted agent finds what its predecessor started by the marker in
// the processes' environment: a group whose leader runs (with its start
// time) and one whose leader is gone, leaving a process no one's child.
// Other markers are not adopted, and a recycled pid is not alive.
func TestAdoptAfterRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	stdout, stderr := outputs(t, dir)
	marker := "LOOM_STEP_ID=" + t.Name() + "#" + strconv.Itoa(os.Getpid())
	rt := New(asAgent)
	spec := func(env string, argv ...string) ports.Spec {
		return ports.Spec{Argv: argv, Env: []string{"PATH=/usr/bin:/bin", env}, Dir: dir, Stdout: stdout, Stderr: stderr}
	}
	live := start(t, rt, spec(marker, "sleep", "60"))
	// Its leader exits at once: its child runs on, reparented, in its group.
	orphaned := start(t, rt, spec(marker, "/bin/sh", "-c", "sleep 60 & echo $! > orphan"))
	other := start(t, rt, spec(marker+"0", "sleep", "60"))
	if e := waitExit(t, orphaned); e.Code != 0 {
		t.Fatalf("the orphan's leader exited %+v", e)
	}
	orphan, err := strconv.Atoi(waitFile(t, filepath.Join(dir, "orphan")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(orphan, syscall.SIGKILL) })
	// $! is written as soon as the shell forks; until the child has
	// exec'd sleep its /proc/PID/environ can read empty (the exec swaps
	// its memory), and CI once caught Adopt in that window.
	testkit.WaitFor(t, wait, "the orphan runs sleep", func() (bool, error) {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(orphan) + "/cmdline")
		return err == nil && strings.HasPrefix(string(b), "sleep\x00"), nil
	})

	// The new agent: a runtime that started nothing.
	rt2 := New(asAgent)
	self := "" // the agent's own user, who started them
	got := rt2.Adopt(marker, nil, &self)
	want := []ports.Group{live.Group(), {PID: orphaned.Group().PID}}
	if want[1].PID < want[0].PID {
		want[0], want[1] = want[1], want[0]
	}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("Adopt = %+v, want %+v (not %d, another marker's)", got, want, other.Group().PID)
	}
	if !rt2.Alive(live.Group()) || rt2.Alive(ports.Group{PID: live.Group().PID, Start: live.Group().Start + 1}) {
		t.Fatal("Alive does not tell the recorded process from another with its pid")
	}
	for _, g := range got {
		if err := rt2.Signal(g, syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
	}
	if e := waitExit(t, live); e.Code != 143 {
		t.Fatalf("the live leader exited %+v, want 143", e)
	}
	if !rt2.WaitGone(live.Group(), wait) {
		t.Fatal("the live group is not gone")
	}
	// The orphan's parent is whatever adopted it; it may never be reaped
	// here (a container's init), so it is watched by its state.
	testkit.WaitFor(t, wait, "the orphan ended by its group's signal", func() (bool, error) {
		return !rt2.Alive(ports.Group{PID: orphan}), nil
	})
	if got := rt2.Adopt(marker, nil, &self); len(got) != 0 {
		t.Fatalf("Adopt after the end = %+v, want none", got)
	}
	if !rt2.Alive(other.Group()) {
		t.Fatal("another marker's process was signalled")
	}
}

// asAgent is the runtime the tests that run as the agent's own user (root
// here) use: root jobs allowed, as `loom up` allows them.
var asAgent = Options{AllowRoot: true}

// Under a shim (Options.StateDir) a unit keeps a pidfile while it runs and
// records its exit, so that another runtime (a restarted agent's) adopts it
// while it runs and learns its exit after: Recover.
func TestShimOutlivesItsAgent(t *testing.T) {
	t.Parallel()
	state, dir := t.TempDir(), t.TempDir()
	rt := New(Options{AllowRoot: true, StateDir: state})
	stdout, stderr := outputs(t, dir)
	name := "projects/p/jobs/1#1"
	p := start(t, rt, ports.Spec{Argv: []string{"/bin/sh", "-c", `echo "$LOOM_AGENT_STEPD"; while [ ! -e go ]; do sleep 0.05; done; exit 3`},
		Env: []string{"PATH=/usr/bin:/bin", "CUDA_VISIBLE_DEVICES=2,5"}, Dir: dir, Stdout: stdout, Stderr: stderr, Name: name})
	pid, st, err := proc.ReadPIDFile(PIDFile(state, name))
	if err != nil || pid != p.Group().PID || st != p.Group().Start {
		t.Fatalf("pidfile = %d %d (%v), want the shim's %+v", pid, st, err, p.Group())
	}
	// The GPUs it holds, beside the pidfile, as the simulated device reads
	// them (gpu.StepsBusy): those two busy, not the node's every GPU.
	if all, some := gpu.StepsBusy(state); all || len(some) != 2 || !some[2] || !some[5] {
		t.Fatalf("StepsBusy of a running unit holding GPUs 2,5 = %v %v", all, some)
	}
	// Another runtime on the same state directory, as a restarted agent's.
	again := New(Options{AllowRoot: true, StateDir: state})
	adopted, exit := again.Recover(name, ports.Group{})
	if adopted == nil || exit != nil || adopted.Group() != p.Group() {
		t.Fatalf("Recover of a running unit = %v, %v; want it adopted", adopted, exit)
	}
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if e := waitExit(t, adopted); noUsage(e) != (ports.Exit{Code: 3}) {
		t.Fatalf("adopted unit's exit = %+v, want 3", e)
	}
	if e := waitExit(t, p); noUsage(e) != (ports.Exit{Code: 3}) {
		t.Fatalf("exit = %+v, want 3", e)
	}
	if got := read(t, filepath.Join(dir, "out")); got != "\n" {
		t.Fatalf("the job saw the shim's marker in its environment: %q", got)
	}
	if _, _, err := proc.ReadPIDFile(PIDFile(state, name)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the pidfile of an ended unit: %v, want it gone", err)
	}
	if _, err := os.Stat(gpusFile(PIDFile(state, name))); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the GPU list of an ended unit: %v, want it gone", err)
	}
	if p, exit := again.Recover(name, p.Group()); p != nil || exit == nil || noUsage(*exit) != (ports.Exit{Code: 3}) {
		t.Fatalf("Recover of an ended unit = %v, %v; want its exit 3", p, exit)
	}
	// Sweep keeps what it is told to, and forgets the rest.
	again.Sweep(func(n string) bool { return n == name })
	if _, exit := again.Recover(name, ports.Group{}); exit == nil {
		t.Fatal("Sweep forgot a unit it was told to keep")
	}
	// A shim killed with its group leaves its pidfile and GPU list: swept too.
	stale := PIDFile(state, "killed")
	if err := proc.WritePIDFile(stale, p.Group().PID, p.Group().Start); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(gpusFile(stale), []byte("0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	again.Sweep(func(string) bool { return false })
	if p, exit := again.Recover(name, ports.Group{}); p != nil || exit != nil {
		t.Fatalf("Recover of a swept unit = %v, %v; want nothing", p, exit)
	}
	if _, err := os.Stat(stale); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the pidfile of a shim that is gone survived Sweep: %v", err)
	}
	if _, err := os.Stat(gpusFile(stale)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the GPU list of a shim that is gone survived Sweep: %v", err)
	}
	// A job that cannot start (its directory is gone) leaves nothing, and
	// says why. (A missing interpreter is the job's exit: TestExecFailureIsTheTaskExit.)
	_, err = rt.Start(ports.Spec{Script: "#!/bin/sh\n", Dir: filepath.Join(dir, "gone"), Stdout: stdout, Stderr: stderr, Name: "bad"})
	if err == nil || !strings.Contains(err.Error(), "no such file or directory") {
		t.Fatalf("Start of a script in a directory that is gone = %v", err)
	}
	if ents, _ := os.ReadDir(state); len(ents) != 0 {
		t.Fatalf("state directory holds %v after a failed start, want nothing", ents)
	}
}

// TestShimEndsWhatItsJobLeaves: under a shim nothing the job starts
// outlives it, as under Slurm's proctrack/cgroup: a process detached with
// setsid and a daemon that forked away (both out of the job's group, so
// that no group signal reaches them) get the signals the step's group gets
// (a stop's SIGTERM), and are killed once the job's process has ended,
// before its end is reported.
func TestShimEndsWhatItsJobLeaves(t *testing.T) {
	t.Parallel()
	rt := New(Options{AllowRoot: true, StateDir: t.TempDir()})
	gone := func(pid int) bool { return syscall.Kill(pid, 0) == syscall.ESRCH }
	run := func(t *testing.T, name, script string) (ports.Process, string) {
		dir := t.TempDir()
		stdout, stderr := outputs(t, dir)
		return start(t, rt, ports.Spec{Argv: []string{"/bin/sh", "-c", script}, Env: []string{"PATH=/usr/bin:/bin"},
			Dir: dir, Stdout: stdout, Stderr: stderr, Name: name}), dir
	}
	t.Run("the job exits", func(t *testing.T) {
		t.Parallel()
		p, dir := run(t, "leaves", `setsid sh -c 'echo $$ > detached; exec sleep 300' &
sh -c 'sleep 300 & echo $! > daemon'
while [ ! -s detached ]; do sleep 0.01; done
exit 0`)
		if e := waitExit(t, p); e.Code != 0 {
			t.Fatalf("exit = %+v, want 0", e)
		}
		for _, f := range []string{"detached", "daemon"} {
			pid, err := strconv.Atoi(strings.TrimSpace(read(t, filepath.Join(dir, f))))
			if err != nil {
				t.Fatal(err)
			}
			// Gone when the job's end is known: the shim reaped it.
			if !gone(pid) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
				t.Errorf("the %s process %d outlived its job", f, pid)
			}
		}
	})
	t.Run("the job is stopped", func(t *testing.T) {
		t.Parallel()
		// The job's shell, stopped, waits until the detached process
		// says it got the signal too: it would wait for ever otherwise.
		p, dir := run(t, "stopped", `setsid sh -c 'trap "echo TERM > got; exit 0" TERM; echo $$ > detached; while :; do sleep 0.05; done' &
trap 'while [ ! -s got ]; do sleep 0.01; done; exit 143' TERM
while [ ! -s detached ]; do sleep 0.01; done
echo ready > ready
wait`)
		waitFile(t, filepath.Join(dir, "ready"))
		if err := rt.Signal(p.Group(), syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if e := waitExit(t, p); e.Code != 143 {
			t.Fatalf("exit = %+v, want 143 by SIGTERM", e)
		}
		if got := waitFile(t, filepath.Join(dir, "got")); got != "TERM" {
			t.Fatalf("the detached process got %q, want the stop's SIGTERM", got)
		}
	})
	t.Run("the step is killed", func(t *testing.T) {
		t.Parallel()
		// A detached process that ignores SIGTERM and forks all the
		// while: Kill ends it and every child it forked meanwhile.
		p, dir := run(t, "killed", `setsid sh -c 'trap "" TERM; while :; do sleep 30 & sleep 0.01; done' &
sleep 0.2
echo ready > ready
wait`)
		waitFile(t, filepath.Join(dir, "ready"))
		if err := rt.Kill(p.Group()); err != nil {
			t.Fatal(err)
		}
		waitExit(t, p)
		t.Cleanup(func() { // not left running, whatever the outcome
			for _, pid := range testkit.ProcessesIn(dir) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		})
		testkit.WaitFor(t, 5*time.Second, "no process of the killed step left", func() (bool, error) {
			return len(testkit.ProcessesIn(dir)) == 0, nil
		})
	})
	t.Run("the job detaches until it is killed", func(t *testing.T) {
		t.Parallel()
		// The job's own shell (in the step's group) detaches a process
		// that ignores SIGTERM (setsid, then a fork: a daemon's double
		// fork) over and over, as fast as it can, until it is killed.
		// Kill must not end the shim, their subreaper, before them: what
		// the shell detached between Kill's last look and the shim's end
		// would be re-parented to init, out of the step's reach.
		// Three at once: the race lost is one of timing.
		type step struct {
			p   ports.Process
			dir string
		}
		var steps []step
		for i := range 3 {
			p, dir := run(t, "detaches"+strconv.Itoa(i), `echo ready > ready
while :; do setsid sh -c '(trap "" TERM; exec sleep 300) &'; done`)
			steps = append(steps, step{p, dir})
			t.Cleanup(func() { // not left running, whatever the outcome
				for _, pid := range testkit.ProcessesIn(dir) {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			})
		}
		for _, s := range steps {
			waitFile(t, filepath.Join(s.dir, "ready"))
			// Until some have been detached.
			testkit.WaitFor(t, 5*time.Second, "the job detached a process", func() (bool, error) {
				return len(testkit.ProcessesIn(s.dir)) > 3, nil
			})
		}
		for _, s := range steps {
			if err := rt.Kill(s.p.Group()); err != nil {
				t.Fatal(err)
			}
		}
		for _, s := range steps {
			waitExit(t, s.p)
			// The shim reaped and killed them before the step's end was
			// known: nothing may be left now.
			if left := testkit.ProcessesIn(s.dir); len(left) != 0 {
				t.Errorf("processes %v of the killed step outlived it", left)
			}
		}
	})
}

// TestShimOutOfTheOOMKillersReach: the shim, its job's child subreaper,
// asks the OOM killer never to choose it (were it chosen, what its job
// detached would escape the step) where it may, and only once its job has
// started: the job, and what the job forks, keep the agent's own regard.
// Where it may not (no CAP_SYS_RESOURCE), the runtime says so, once.
func TestShimOutOfTheOOMKillersReach(t *testing.T) {
	t.Parallel()
	// Written only by Start, on this goroutine.
	var logged bytes.Buffer
	rt := New(Options{AllowRoot: true, StateDir: t.TempDir(), Log: slog.New(slog.NewTextHandler(&logged, nil))})
	agent := oomScoreAdj(t, os.Getpid())
	may := mayLowerOOMScoreAdj(t)
	for i := range 2 {
		dir := t.TempDir()
		stdout, stderr := outputs(t, dir)
		p := start(t, rt, ports.Spec{Argv: []string{"/bin/sh", "-c", "sleep 60 & echo $! > child; echo $$ > job; wait"},
			Env: []string{"PATH=/usr/bin:/bin"}, Dir: dir, Stdout: stdout, Stderr: stderr, Name: "oom" + strconv.Itoa(i)})
		want := agent // the shim may not lower it: it stays
		if may {
			want = -1000
		}
		if got := oomScoreAdj(t, p.Group().PID); got != want {
			t.Errorf("the shim's oom_score_adj = %d, want %d", got, want)
		}
		for _, f := range []string{"job", "child"} {
			pid, err := strconv.Atoi(waitFile(t, filepath.Join(dir, f)))
			if err != nil {
				t.Fatal(err)
			}
			if got := oomScoreAdj(t, pid); got != agent {
				t.Errorf("the %s process's oom_score_adj = %d, want the agent's %d", f, got, agent)
			}
		}
	}
	log := logged.String()
	warnings := strings.Count(log, "level=WARN")
	switch {
	case may && warnings != 0:
		t.Errorf("the shims lowered their oom_score_adj, yet the runtime logged:\n%s", log)
	case !may && (warnings != 1 || !strings.Contains(log, "permission denied")):
		t.Errorf("the shims could not lower their oom_score_adj: the runtime logged\n%s\nwant one warning that says why", log)
	}
}

// oomScoreAdj reads pid's oom_score_adj.
func oomScoreAdj(t *testing.T, pid int) int {
	t.Helper()
	n, err := strconv.Atoi(strings.TrimSpace(read(t, "/proc/"+strconv.Itoa(pid)+"/oom_score_adj")))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// mayLowerOOMScoreAdj reports whether this process, and so the shims it
// starts, holds CAP_SYS_RESOURCE, which lowering an oom_score_adj needs.
func mayLowerOOMScoreAdj(t *testing.T) bool {
	t.Helper()
	const capSysResource = 24 // linux/capability.h
	for _, line := range strings.Split(read(t, "/proc/self/status"), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			return caps&(1<<capSysResource) != 0
		}
	}
	t.Fatal("no CapEff in /proc/self/status")
	return false
}
