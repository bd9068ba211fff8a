// Package procruntime is the agent's process runtime (ports.Runtime): each
// step or task runs as a process group of the agent's own children, on the
// node itself, through libs/proc. It is the agent's first runtime and its
// default; the agent's tests run their steps on it.
package procruntime

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/loom-ml/loom/libs/proc"
	"github.com/loom-ml/loom/services/agent/internal/ports"
)

// Name is the process runtime's name in the agent's configuration
// (LOOM_AGENT_RUNTIME).
const Name = "process"

// Runtime runs processes as process groups of the agent's children. The
// zero value is ready to use.
type Runtime struct{}

var _ ports.Runtime = Runtime{}

// New returns the process runtime.
func New() Runtime { return Runtime{} }

// Start starts spec's process in a process group of its own (its pid is the
// group's id), niced spec.Nice below the agent from its first instruction.
// A script is handed over as an in-memory file (fd 3) and executed by its
// path, so the kernel runs the interpreter its "#!" line names.
func (Runtime) Start(spec ports.Spec) (ports.Process, error) {
	var c *exec.Cmd
	if spec.Script != "" {
		f, err := scriptFD(spec.Script)
		if err != nil {
			return nil, fmt.Errorf("batch script: %w", err)
		}
		defer f.Close() // the child has its own copy
		c = exec.Command(scriptPath)
		c.ExtraFiles = []*os.File{f}
	} else {
		if len(spec.Argv) == 0 || spec.Argv[0] == "" {
			return nil, errors.New("no program to run")
		}
		// Found on the job's PATH, not the agent's (exec.Command's).
		path, err := proc.LookPath(spec.Argv[0], envValue(spec.Env, "PATH"), spec.Dir)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", spec.Argv[0], err)
		}
		c = exec.Command(path, spec.Argv[1:]...)
		c.Args[0] = spec.Argv[0]
	}
	c.Dir = spec.Dir
	c.Env = spec.Env
	if c.Env == nil {
		c.Env = []string{} // nil would be the agent's own
	}
	c.Stdout, c.Stderr = spec.Stdout, spec.Stderr
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := startNiced(c, spec.Nice); err != nil {
		if spec.Script != "" {
			first, _, _ := strings.Cut(spec.Script, "\n")
			return nil, fmt.Errorf("run the batch script with its interpreter line %q: %w", first, err)
		}
		return nil, fmt.Errorf("start %q: %w", spec.Argv[0], err)
	}
	pid := c.Process.Pid
	start, _ := proc.StartTime(pid)
	return &process{c: c, g: ports.Group{PID: pid, Start: start}}, nil
}

// envValue is the value of key in env ("" when it has none).
func envValue(env []string, key string) string {
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok && k == key {
			return v
		}
	}
	return ""
}

// process is a started group leader, the agent's child.
type process struct {
	c *exec.Cmd
	g ports.Group
}

// Group names the process's group.
func (p *process) Group() ports.Group { return p.g }

// Wait learns of the exit from a pidfd through Go's network poller, then
// reaps (proc.Wait): no OS thread sits blocked in waitid for the process's
// life.
func (p *process) Wait() ports.Exit {
	_ = proc.Wait(p.c)
	code, sig := proc.ExitCode(p.c.ProcessState)
	return ports.Exit{Code: code, Signal: sig}
}

// Signal sends sig to g's process group.
func (Runtime) Signal(g ports.Group, sig syscall.Signal) error {
	return proc.KillGroup(g.PID, sig)
}

// SignalLeader sends sig to g's leader alone.
func (Runtime) SignalLeader(g ports.Group, sig syscall.Signal) error {
	if g.PID <= 1 {
		return fmt.Errorf("signal %d: refusing to signal a pid <= 1", g.PID)
	}
	if err := syscall.Kill(g.PID, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signal %d with %v: %w", g.PID, sig, err)
	}
	return nil
}

// Kill sends SIGKILL to g's process group.
func (Runtime) Kill(g ports.Group) error { return proc.KillGroup(g.PID, syscall.SIGKILL) }

// Alive reports whether g's leader runs (not a zombie) and, when g.Start is
// set, started then.
func (Runtime) Alive(g ports.Group) bool { return proc.Alive(g.PID, g.Start) }

// Adopt finds the processes whose environment, as they started with it,
// holds marker (reading /proc; nothing where it is missing), and returns
// their process groups, in order.
func (Runtime) Adopt(marker string) []ports.Group {
	var out []ports.Group
	for _, pid := range proc.FindByEnv(marker) {
		pgid, err := syscall.Getpgid(pid)
		if err != nil || pgid <= 1 || slices.ContainsFunc(out, func(g ports.Group) bool { return g.PID == pgid }) {
			continue
		}
		start, _ := proc.StartTime(pgid)
		out = append(out, ports.Group{PID: pgid, Start: start})
	}
	slices.SortFunc(out, func(a, b ports.Group) int { return a.PID - b.PID })
	return out
}

// WaitGone polls, every 20 ms, whether any process of g's group is left.
func (Runtime) WaitGone(g ports.Group, d time.Duration) bool {
	return proc.WaitGone(d, func() bool { return !proc.GroupAlive(g.PID) })
}
