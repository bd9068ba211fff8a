package procruntime

// Starting units under loom-stepd (package stepd), the shim that outlives
// the agent, and finding them again after the agent restarted. The shim
// keeps <state dir>/<name>.pid while it runs (and <name>.gpus, the GPUs its
// job holds, when it holds some) and records its job's end in
// <state dir>/<name>.status.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/loom-ml/loom/libs/gpu"
	"github.com/loom-ml/loom/libs/proc"
	"github.com/loom-ml/loom/services/agent/internal/ports"
	"github.com/loom-ml/loom/services/agent/internal/stepd"
)

// fileName is a unit's name made one safe path element (names are step
// keys, "projects/p/jobs/7#1"): escaped, so that two names never share a
// file.
func fileName(name string) string { return url.PathEscape(name) }

// PIDFile is where the shim of the unit name keeps its pidfile in stateDir
// (<state dir>/<name>.pid, libs/proc's format).
func PIDFile(stateDir, name string) string {
	return filepath.Join(stateDir, fileName(name)+".pid")
}

// gpusFile is where a shim whose pidfile is pidFile lists its job's GPUs
// (gpu.StepGPUsSuffix).
func gpusFile(pidFile string) string {
	return strings.TrimSuffix(pidFile, ".pid") + gpu.StepGPUsSuffix
}

// statusFile is where the shim of name records its job's end.
func (r Runtime) statusFile(name string) string {
	return filepath.Join(r.opts.StateDir, fileName(name)+".status")
}

// startShim starts c's program through a shim (see the file's comment):
// the shim leads a new process group, reports the job's start, and the
// returned process is the shim. script, when set, is the job's fd 3.
func (r Runtime) startShim(c *exec.Cmd, spec ports.Spec, script *os.File, cred *syscall.Credential) (ports.Process, error) {
	if spec.Name == "" {
		return nil, errors.New("a unit run under a shim needs a name")
	}
	if err := os.MkdirAll(r.opts.StateDir, 0o755); err != nil {
		return nil, fmt.Errorf("state directory: %w", err)
	}
	ss := stepd.Spec{Path: c.Path, Args: c.Args, Env: c.Env, Dir: c.Dir, Cred: cred, Script: script != nil,
		PIDFile: PIDFile(r.opts.StateDir, spec.Name), StatusFile: r.statusFile(spec.Name)}
	if spec.Input != nil {
		ss.InputEOF = spec.InputEOF
	}
	if spec.PTY != nil {
		ss.PTY, ss.Rows, ss.Cols, ss.WinsizeFile = true, spec.PTY.Rows, spec.PTY.Cols, spec.PTY.WinsizeFile
	}
	if devs := envValue(c.Env, "CUDA_VISIBLE_DEVICES"); devs != "" {
		// The GPUs the step holds, beside its pidfile: the simulated
		// device shows those busy, not every GPU of the node.
		ss.GPUsFile, ss.GPUs = gpusFile(ss.PIDFile), devs
	}
	// A status left by an earlier unit of the same name is not this one's.
	_ = os.Remove(ss.StatusFile)
	b, err := json.Marshal(ss)
	if err != nil {
		return nil, err
	}
	specf, err := memFile("stepd_spec", string(b))
	if err != nil {
		return nil, err
	}
	defer specf.Close()
	rep, repw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer rep.Close()
	shim := exec.Command("/proc/self/exe")
	shim.Args = []string{stepd.Arg0, spec.Name}
	// Only what the shim needs: the job's environment goes in the spec.
	shim.Env = []string{stepd.Env + "=1", "GOMAXPROCS=1"}
	shim.Dir = "/"
	shim.Stdout, shim.Stderr = spec.Stdout, spec.Stderr
	shim.ExtraFiles = []*os.File{script, specf, repw}
	if spec.Input != nil {
		shim.ExtraFiles = append(shim.ExtraFiles, spec.Input) // stepd.InputFD
	}
	// A session of its own (its group is the session's first, with the
	// shim's pid as id), whose terminal the shim takes for a terminal's
	// step: the job cannot join another job's group or the agent's
	// (setpgid joins only a group of the caller's session; see unitAttr).
	shim.SysProcAttr = unitAttr()
	err = startNiced(shim, spec.Nice)
	repw.Close()
	if err != nil {
		return nil, fmt.Errorf("start loom-stepd: %w", err)
	}
	var got stepd.Report
	b, rerr := io.ReadAll(rep)
	if rerr == nil {
		rerr = json.Unmarshal(b, &got)
	}
	if rerr != nil || got.Err != "" {
		_ = shim.Process.Kill()
		_ = shim.Wait()
		if rerr != nil {
			return nil, fmt.Errorf("loom-stepd did not report its start: %v", rerr)
		}
		return nil, startError{got.Err, got.Errno}
	}
	if got.OOMErr != "" && r.oomWarned != nil {
		r.oomWarned.Do(func() {
			r.opts.Log.Warn("steps' shims stay open to the OOM killer: if one is chosen, what its job detached escapes the step (lowering its oom_score_adj needs CAP_SYS_RESOURCE, which root has unless its container drops it)",
				"err", got.OOMErr)
		})
	}
	pid := shim.Process.Pid
	start, _ := proc.StartTime(pid)
	return &process{c: shim, g: ports.Group{PID: pid, Start: start}, status: ss.StatusFile}, nil
}

// startError is why a shim could not start its job: its message, and the
// system error under it.
type startError struct {
	msg   string
	errno syscall.Errno
}

func (e startError) Error() string { return e.msg }

// Unwrap is the system error (nil when none), for errors.Is.
func (e startError) Unwrap() error {
	if e.errno == 0 {
		return nil
	}
	return e.errno
}

// Recover finds the unit a predecessor started as name: its shim, when it
// still runs (by the pidfile, checked by its start time), or the status it
// recorded when its job ended. See ports.Runtime.
func (r Runtime) Recover(name string, g ports.Group) (ports.Process, *ports.Exit) {
	if r.opts.StateDir == "" {
		return nil, nil
	}
	if g.PID == 0 {
		if pid, start, err := proc.ReadPIDFile(PIDFile(r.opts.StateDir, name)); err == nil {
			g = ports.Group{PID: pid, Start: start}
		}
	}
	if g.PID > 0 && g.Start != 0 && proc.Alive(g.PID, g.Start) && isShim(g.PID) {
		return &adopted{g: g, status: r.statusFile(name)}, nil
	}
	if st, err := stepd.ReadStatus(r.statusFile(name)); err == nil {
		e := statusExit(st)
		return nil, &e
	}
	return nil, nil
}

// Forget removes what the runtime keeps of the unit name once its end is
// recorded.
func (r Runtime) Forget(name string) {
	if r.opts.StateDir == "" {
		return
	}
	_ = os.Remove(r.statusFile(name))
}

// Sweep removes the recorded exits of units keep does not name, and the
// pidfiles of shims that are gone (killed with their group: they could
// not remove their own).
func (r Runtime) Sweep(keep func(name string) bool) {
	if r.opts.StateDir == "" {
		return
	}
	files, _ := filepath.Glob(filepath.Join(r.opts.StateDir, "*.status"))
	for _, f := range files {
		name, err := url.PathUnescape(strings.TrimSuffix(filepath.Base(f), ".status"))
		if err == nil && !keep(name) {
			_ = os.Remove(f)
		}
	}
	pids, _ := filepath.Glob(filepath.Join(r.opts.StateDir, "*.pid"))
	for _, f := range pids {
		pid, start, err := proc.ReadPIDFile(f)
		if err != nil || !proc.Alive(pid, start) || !isShim(pid) {
			_ = os.Remove(f)
		}
	}
	// A killed shim's GPU list outlives it; without its pidfile it says
	// nothing, and goes.
	lists, _ := filepath.Glob(filepath.Join(r.opts.StateDir, "*"+gpu.StepGPUsSuffix))
	for _, f := range lists {
		if _, err := os.Stat(strings.TrimSuffix(f, gpu.StepGPUsSuffix) + ".pid"); errors.Is(err, fs.ErrNotExist) {
			_ = os.Remove(f)
		}
	}
}

// isShim reports whether pid runs a shim (its environment says so), so
// that a pid recycled for a process that happened to start at the same
// tick is not taken for one.
func isShim(pid int) bool {
	return proc.HasEnv(pid, stepd.Env+"=1")
}

// adopted is a shim a predecessor of this agent started: not its child, so
// its end is learnt from a pidfd (or by polling) and its job's exit from the
// status the shim recorded.
type adopted struct {
	g      ports.Group
	status string
}

func (p *adopted) Group() ports.Group { return p.g }

// Wait waits until the shim is gone and returns the status it recorded;
// Unknown when it recorded none (it was killed).
func (p *adopted) Wait() ports.Exit {
	awaitGone(p.g)
	if st, err := stepd.ReadStatus(p.status); err == nil {
		return statusExit(st)
	}
	return ports.Exit{Code: -1, Unknown: true}
}

// awaitGone returns once g's leader, a process that is not this one's
// child, has exited: on a pidfd through the network poller (it becomes
// readable when the process ends), else by polling.
func awaitGone(g ports.Group) {
	alive := func() bool { return proc.Alive(g.PID, g.Start) }
	if fd, err := unix.PidfdOpen(g.PID, unix.PIDFD_NONBLOCK); err == nil {
		f := os.NewFile(uintptr(fd), "pidfd")
		defer f.Close()
		if rc, err := f.SyscallConn(); err == nil {
			// The pid may have been recycled between the check and the
			// open: alive (by start time) is asked on every wake.
			if rc.Read(func(uintptr) bool { return !alive() }) == nil {
				return
			}
		}
	}
	for alive() {
		time.Sleep(100 * time.Millisecond)
	}
}

// mainOf returns the job's process under the shim pid, 0 when there is
// none: of the shim's children, the one that started first, since the
// others are what the job detached, reparented to the shim (its child
// subreaper) after the job had started them.
func mainOf(shim int) int {
	main, first := 0, uint64(0)
	for _, pid := range proc.Descendants(shim) {
		if proc.Parent(pid) != shim {
			continue
		}
		if st, ok := proc.StartTime(pid); ok && (main == 0 || st < first || (st == first && pid < main)) {
			main, first = pid, st
		}
	}
	return main
}
