// Package procruntime is the agent's process runtime (ports.Runtime): each
// step or task runs as a process group of the agent's own children, on the
// node itself, through libs/proc. It is the agent's first runtime and its
// default; the agent's tests run their steps on it.
package procruntime

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/loom-ml/loom/libs/osuser"
	"github.com/loom-ml/loom/libs/proc"
	"github.com/loom-ml/loom/services/agent/internal/ports"
	"github.com/loom-ml/loom/services/agent/internal/stepd"
)

// Name is the process runtime's name in the agent's configuration
// (LOOM_AGENT_RUNTIME).
const Name = "process"

// Runtime runs processes as process groups of the agent's children, each
// as its job's owner. The zero value runs no job as root and names no node
// in its messages; New sets both.
type Runtime struct {
	opts Options
	// oomWarned says whether a shim's failure to lower its oom_score_adj
	// has been logged: every shim of this runtime runs with the same
	// rights, and once says it of all of them.
	oomWarned *sync.Once
}

// Options configure the process runtime.
type Options struct {
	// AllowRoot lets processes run as root (uid 0): a job of root, or a
	// job with no owner on an agent that runs as root. A site allows it
	// where the node's administrators are its only users (the agent's
	// -allow-root-jobs; `loom up` sets it for its local agents).
	AllowRoot bool
	// Node is the node's hostname, for messages ("user bob has no account
	// on node gpu-0001").
	Node string
	// StateDir, when set, makes every unit run under a shim, loom-stepd
	// (stepd.go), that outlives the agent as slurmstepd outlives slurmd:
	// it leads the unit's process group, keeps <StateDir>/<name>.pid
	// (libs/proc's pidfile) while it runs and records the job's exit in
	// <StateDir>/<name>.status, so that a restarted agent adopts what
	// still runs and learns how the rest ended (Recover). The agent's is
	// <work dir>/steps. Empty: units are the agent's direct children, and
	// Recover finds nothing.
	StateDir string
	// Log takes what the runtime says of itself (nil: slog.Default()): a
	// shim left open to the OOM killer, once (startShim).
	Log *slog.Logger
}

var _ ports.Runtime = Runtime{}

// New returns the process runtime.
func New(opts Options) Runtime {
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	return Runtime{opts: opts, oomWarned: new(sync.Once)}
}

// node names the node in messages.
func (r Runtime) node() string {
	if r.opts.Node == "" {
		return "this node"
	}
	return "node " + r.opts.Node
}

// account resolves user ("" is the agent's own account) to the account its
// processes run as, refusing what may not run here: a user with no account
// on the node, root unless allowed, and any other user than the agent's
// own when the agent is not root (it cannot become them).
func (r Runtime) account(user string) (osuser.Account, error) {
	var a osuser.Account
	if user == "" {
		a = osuser.Self()
	} else {
		var err error
		if a, err = osuser.Lookup(user); errors.Is(err, osuser.ErrNoAccount) {
			return a, fmt.Errorf("user %s has no account on %s", user, r.node())
		} else if err != nil {
			return a, fmt.Errorf("%s: %w", r.node(), err)
		}
	}
	who := user
	if who == "" {
		who = "the agent's own user " + a.String() + " (the job names no owner)"
	}
	switch {
	case a.Root() && !r.opts.AllowRoot:
		return a, fmt.Errorf("%s does not run jobs as root: %s is uid 0 and the agent's -allow-root-jobs (LOOM_AGENT_ALLOW_ROOT_JOBS) is off", r.node(), who)
	case !osuser.IsSelf(a) && os.Geteuid() != 0:
		return a, fmt.Errorf("the agent on %s runs as %s, not root, and runs only that user's jobs, not %s's", r.node(), osuser.Self(), who)
	}
	return a, nil
}

// Account returns who user's processes run as here, or why they may not
// run here.
func (r Runtime) Account(user string) (ports.Account, error) {
	a, err := r.account(user)
	if err != nil {
		return ports.Account{}, err
	}
	return ports.Account{Name: a.Name, UID: a.UID, GID: a.GID}, nil
}

// OpenOutput opens path for appending as user (osuser.As: the kernel
// checks the owner's rights), creating it (0600) and its missing
// directories (0700), emptied first unless keep.
func (r Runtime) OpenOutput(user, path string, keep bool) (*os.File, error) {
	a, err := r.account(user)
	if err != nil {
		return nil, err
	}
	var f *os.File
	err = osuser.As(a, func() error {
		f, err = openOutput(path, keep)
		return err
	})
	return f, err
}

// OpenInput opens path for reading as user (osuser.As), creating it
// empty (0600) when missing.
func (r Runtime) OpenInput(user, path string) (*os.File, error) {
	a, err := r.account(user)
	if err != nil {
		return nil, err
	}
	var f *os.File
	err = osuser.As(a, func() error {
		// Non-blocking: a FIFO put in its place would hold the open until
		// someone writes to it; it is refused below instead.
		f, err = osuser.OpenNoProcLinks(path, os.O_RDONLY|os.O_CREATE|syscall.O_NONBLOCK, outputMode)
		return err
	})
	if err != nil {
		return nil, err
	}
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%s: not a regular file", path)
	}
	return f, nil
}

// openOutput opens path for appending, creating it and its directory, and
// empties it first unless keep. The caller acts as the file's user; a path
// through a /proc link to the agent's own descriptors (--output=
// /proc/self/fd/N) is refused (osuser.OpenNoProcLinks): through it the
// user's thread would reach what the agent holds open. A FIFO
// or a socket is refused: the open would wait for a reader (and the agent's
// writes into it for the reader to read), stalling the agent for every job
// of the node (a job can put one where its output goes, and an agent
// restarting reopens the files of the steps it adopts); a device the owner
// may open (/dev/null) is taken.
func openOutput(path string, keep bool) (*os.File, error) {
	flags := os.O_CREATE | os.O_APPEND | os.O_WRONLY | syscall.O_NONBLOCK
	if !keep {
		flags |= os.O_TRUNC
	}
	f, err := osuser.OpenNoProcLinks(path, flags, outputMode)
	if errors.Is(err, os.ErrNotExist) {
		// Only a missing directory costs a second try; the common case is
		// one open.
		if err := os.MkdirAll(filepath.Dir(path), dirMode); err != nil {
			return nil, err
		}
		f, err = osuser.OpenNoProcLinks(path, flags, outputMode)
	}
	if errors.Is(err, syscall.ENXIO) {
		return nil, fmt.Errorf("%s: a FIFO, not a file", path)
	}
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err == nil && (st.Mode()&(os.ModeNamedPipe|os.ModeSocket) != 0 || st.IsDir()) {
		err = fmt.Errorf("%s: not a regular file or a device", path)
	}
	if err == nil {
		// Blocking again for the job's writes (a terminal's would fail
		// with EAGAIN): the flag was for the open alone.
		var rc syscall.RawConn
		if rc, err = f.SyscallConn(); err == nil {
			cerr := rc.Control(func(fd uintptr) { err = syscall.SetNonblock(int(fd), false) })
			if err == nil {
				err = cerr
			}
		}
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// outputMode and dirMode are the modes of the files and directories made
// for a job: its owner's alone (what other users of the node may read of a
// job's output is its owner's choice, by chmod, not Loom's).
const (
	outputMode os.FileMode = 0o600
	dirMode    os.FileMode = 0o700
)

// StatDir looks at dir as user (osuser.As: the kernel checks the owner's
// rights to reach it), not as the agent, which would tell any user what
// is there in directories they may not enter.
func (r Runtime) StatDir(user, dir string) error {
	a, err := r.account(user)
	if err != nil {
		return err
	}
	return osuser.As(a, func() error {
		fi, err := os.Stat(dir)
		if pe := (*fs.PathError)(nil); errors.As(err, &pe) {
			return pe.Err
		}
		if err == nil && !fi.IsDir() {
			return syscall.ENOTDIR
		}
		return err
	})
}

// MakeDir makes dir and its missing parents as user, mode 0700.
func (r Runtime) MakeDir(user, dir string) error {
	a, err := r.account(user)
	if err != nil {
		return err
	}
	return osuser.MkdirAll(a, dir, dirMode)
}

// GiveDir makes dir for user under parents the agent makes (0755): see
// osuser.MakeDirFor.
func (r Runtime) GiveDir(user, dir string) error {
	a, err := r.account(user)
	if err != nil {
		return err
	}
	return osuser.MakeDirFor(a, dir, 0o755)
}

// Start starts spec's process in a process group of its own (its pid is the
// group's id), niced spec.Nice below the agent from its first instruction,
// as spec.User (uid, gid and groups set in the child before it enters its
// directory and executes). A script is handed over as an in-memory file
// (fd 3) and executed by its path, so the kernel runs the interpreter its
// "#!" line names.
func (r Runtime) Start(spec ports.Spec) (ports.Process, error) {
	if spec.PTY != nil && r.opts.StateDir == "" {
		return nil, errors.New("a terminal needs the step daemon: this runtime has no state directory")
	}
	a, err := r.account(spec.User)
	if err != nil {
		return nil, err
	}
	var c *exec.Cmd
	var script *os.File
	if spec.Script != "" {
		f, err := scriptFD(spec.Script)
		if err != nil {
			return nil, fmt.Errorf("batch script: %w", err)
		}
		defer f.Close() // the child has its own copy
		c = exec.Command(scriptPath)
		c.ExtraFiles = []*os.File{f}
		script = f
	} else {
		if len(spec.Argv) == 0 || spec.Argv[0] == "" {
			return nil, errors.New("no program to run")
		}
		// Found on the job's PATH, not the agent's (exec.Command's), as
		// the job's owner finds it.
		var path string
		err := osuser.As(a, func() error {
			var err error
			path, err = proc.LookPath(spec.Argv[0], envValue(spec.Env, "PATH"), spec.Dir)
			return err
		})
		if err != nil {
			return r.startExecFailure(a, spec, notFound(a, spec.Argv[0], spec.Dir), fmt.Errorf("%s: %v", spec.Argv[0], err))
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
	c.SysProcAttr = unitAttr()
	if !osuser.IsSelf(a) {
		// The child sets its groups, gid and uid before it enters Dir and
		// executes: it never runs a job instruction as the agent.
		c.SysProcAttr.Credential = a.Credential()
	}
	if r.opts.StateDir != "" {
		p, err := r.startShim(c, spec, script, c.SysProcAttr.Credential)
		if f, ok := asExecFailure(a, c, spec, err); ok {
			return r.startExecFailure(a, spec, f, err)
		}
		if err != nil && spec.Script != "" {
			first, _, _ := strings.Cut(spec.Script, "\n")
			return nil, fmt.Errorf("run the batch script with its interpreter line %q: %w", first, err)
		} else if err != nil {
			return nil, fmt.Errorf("start %q: %w", spec.Argv[0], err)
		}
		return p, nil
	}
	// Without a shim, the agent feeds the input itself, until the
	// process is waited for.
	var stopInput chan struct{}
	var inputW *os.File
	if spec.Input != nil {
		pr, pw, err := os.Pipe()
		if err != nil {
			return nil, fmt.Errorf("input pipe: %w", err)
		}
		defer pr.Close() // the child has its own copy
		c.Stdin, inputW, stopInput = pr, pw, make(chan struct{})
	}
	if err := startNiced(c, spec.Nice); err != nil {
		if inputW != nil {
			inputW.Close()
		}
		if f, ok := asExecFailure(a, c, spec, err); ok {
			return r.startExecFailure(a, spec, f, err)
		}
		if spec.Script != "" {
			first, _, _ := strings.Cut(spec.Script, "\n")
			return nil, fmt.Errorf("run the batch script with its interpreter line %q: %w", first, err)
		}
		return nil, fmt.Errorf("start %q: %w", spec.Argv[0], err)
	}
	if inputW != nil {
		// A copy of the input: the caller closes its own.
		in, err := os.Open(fmt.Sprintf("/proc/self/fd/%d", spec.Input.Fd()))
		if err != nil {
			inputW.Close()
			_ = proc.KillGroup(c.Process.Pid, syscall.SIGKILL)
			_ = c.Wait()
			return nil, fmt.Errorf("input: %w", err)
		}
		go func() {
			stepd.Follow(in, spec.InputEOF, inputW, stopInput)
			in.Close()
		}()
	}
	pid := c.Process.Pid
	start, _ := proc.StartTime(pid)
	return &process{c: c, g: ports.Group{PID: pid, Start: start}, stopInput: stopInput}, nil
}

// unitAttr is how every unit's leader (the job's process, or its shim) is
// started: in a session of its own, which it leads, as Slurm's tasks are
// (slurmstepd calls setsid), so its process group is its own too. Not in
// the agent's session: setpgid lets a process join any group of its own
// session whoever owns it, so a job there could move into another user's
// running job's group (counted in its memory, killed at its -mem limit,
// signalled with it) or into the agent's. KillGroup reaches the session's
// other groups.
func unitAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setsid: true} }

// envValue is the value of key in env ("" when it has none).
func envValue(env []string, key string) string {
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok && k == key {
			return v
		}
	}
	return ""
}

// process is a started group leader, the agent's child: the job's process
// itself, or its shim (then status is where the shim records the job's
// exit).
type process struct {
	c      *exec.Cmd
	g      ports.Group
	status string
	// stopInput, when set, ends the feeding of the process's input (no
	// shim feeds it): closed once the process is waited for.
	stopInput chan struct{}
	stopOnce  sync.Once
}

// Group names the process's group.
func (p *process) Group() ports.Group { return p.g }

// Wait learns of the exit from a pidfd through Go's network poller, then
// reaps (proc.Wait): no OS thread sits blocked in waitid for the process's
// life.
//
// Under a shim the exit is the job's, as the shim recorded it; the shim's
// own when it recorded none (it was killed before its job ended: the
// group was, SIGKILL).
func (p *process) Wait() ports.Exit {
	_ = proc.Wait(p.c)
	if p.stopInput != nil {
		p.stopOnce.Do(func() { close(p.stopInput) })
	}
	if p.status != "" {
		if st, err := stepd.ReadStatus(p.status); err == nil {
			return statusExit(st)
		}
	}
	code, sig := proc.ExitCode(p.c.ProcessState)
	user, system, rss := proc.Rusage(p.c.ProcessState)
	// Started from this process, the leader's peak counts this process's
	// memory as it was at the start (proc.HighWater): not the job's.
	if rss <= proc.HighWater() {
		rss = 0
	}
	return ports.Exit{Code: code, Signal: sig, Usage: ports.Rusage{UserCPU: user, SystemCPU: system, MaxRSS: rss}}
}

// Usage samples the groups' processes from /proc (proc.GroupUsage). Under a
// shim (a state directory) the group's leader is the shim, not the job's,
// and is not counted: it is this binary again, whose tens of megabytes are
// Loom's, as slurmstepd's are not the job's.
func (r Runtime) Usage(gs []ports.Group) map[ports.Group]ports.Sample {
	pg := make(map[int]bool, len(gs))
	for _, g := range gs {
		pg[g.PID] = true
	}
	got := proc.GroupUsage(pg, r.opts.StateDir == "")
	out := make(map[ports.Group]ports.Sample, len(got))
	for _, g := range gs {
		if u, ok := got[g.PID]; ok {
			out[g] = ports.Sample{UserCPU: u.UserCPU, SystemCPU: u.SystemCPU, RSS: u.RSS, VMSize: u.VMSize,
				Read: u.ReadBytes, Write: u.WriteBytes, PSS: u.PSS, Unread: u.Unread}
		}
	}
	return out
}

// statusExit is the exit a shim recorded.
func statusExit(st stepd.Status) ports.Exit {
	return ports.Exit{Code: st.Code, Signal: st.Signal,
		Usage: ports.Rusage{UserCPU: st.UserCPU, SystemCPU: st.SystemCPU, MaxRSS: st.MaxRSS}}
}

// Signal sends sig to g's process group and, when g is a shim's, to what
// the job detached from it (proc.KillDescendants): a stop's SIGTERM and
// scancel --signal reach every process of the step, as Slurm's do through
// its cgroup.
func (Runtime) Signal(g ports.Group, sig syscall.Signal) error {
	err := proc.KillGroup(g.PID, sig)
	if g.PID > 1 && isShim(g.PID) {
		proc.KillDescendants(g.PID, sig)
	}
	return err
}

// SignalLeader sends sig to g's leader alone: under a shim, to the job's
// own process (the batch shell), not to the shim.
func (Runtime) SignalLeader(g ports.Group, sig syscall.Signal) error {
	if g.PID <= 1 {
		return fmt.Errorf("signal %d: refusing to signal a pid <= 1", g.PID)
	}
	pid := g.PID
	if isShim(pid) {
		if pid = mainOf(g.PID); pid <= 1 {
			return nil // the job's process is gone
		}
	}
	if err := syscall.Kill(pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signal %d with %v: %w", pid, sig, err)
	}
	return nil
}

// Kill sends SIGKILL to g's process group; when g is a shim's, to every
// process under the shim instead, again until a look finds none alive, and
// not to the shim itself. The shim is its job's child subreaper: what the
// job detached (setsid, a double fork) is its, and so is what the job's
// processes fork until they die, seen by the next look. The shim, left
// alive, reaps them, sweeps what is left (stepd's reap.go), records the
// exit and ends. A shim killed with its group would have let what the job
// detached between the last look and that kill go to init, out of any
// step's reach. Only a tree that does not die within killRounds looks (a
// process in an uninterruptible wait) gets its group, the shim included,
// killed as before.
func (Runtime) Kill(g ports.Group) error {
	if g.PID > 1 && isShim(g.PID) {
		for range killRounds {
			if proc.KillUnder(g.PID, syscall.SIGKILL) == 0 {
				return nil
			}
			time.Sleep(time.Millisecond)
		}
	}
	return proc.KillGroup(g.PID, syscall.SIGKILL)
}

// killRounds bounds Kill's looks for what a shim's job detached.
const killRounds = 100

// Alive reports whether g's leader runs (not a zombie) and, when g.Start is
// set, started then.
func (Runtime) Alive(g ports.Group) bool { return proc.Alive(g.PID, g.Start) }

// Adopt finds the processes whose environment, as they started with it,
// holds marker (reading /proc; nothing where it is missing), and returns
// their process groups, in order. With a uid, or else an owner, only the
// processes of that uid, or of the owner's, are read (proc.FindByEnvOf);
// neither, or an owner whose account is no longer known here, has every
// process read (FindByEnv). A process whose environment read blocks (on
// its memory map lock, which it can hold) is given up within the look's
// bound and taken for one without marker: its group is not returned, and
// it dies with the step only where the kill of the step's groups, or of
// what is under its shim, reaches it.
func (Runtime) Adopt(marker string, uid *uint32, owner *string) []ports.Group {
	var out []ports.Group
	for _, pid := range findByEnv(marker, uid, owner) {
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

// findByEnv is proc.FindByEnvOf among the processes of uid, else of
// owner's uid ("": this agent's own), or proc.FindByEnv where neither is
// known.
func findByEnv(marker string, uid *uint32, owner *string) []int {
	switch {
	case uid != nil:
		return proc.FindByEnvOf(marker, *uid)
	case owner == nil:
		return proc.FindByEnv(marker)
	case *owner == "":
		return proc.FindByEnvOf(marker, osuser.Self().UID)
	}
	a, err := osuser.Lookup(*owner)
	if err != nil {
		return proc.FindByEnv(marker)
	}
	return proc.FindByEnvOf(marker, a.UID)
}

// WaitGone polls, every 20 ms, whether any process of g's group is left.
func (Runtime) WaitGone(g ports.Group, d time.Duration) bool {
	return proc.WaitGone(d, func() bool { return !proc.GroupAlive(g.PID) })
}
