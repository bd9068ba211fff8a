package procruntime

// loom-stepd: the shim each step or task runs under when the runtime has a
// state directory (Options.StateDir), as a Slurm step runs under slurmstepd.
// It is the agent's own binary started again (/proc/self/exe) with
// StepdEnv set, so that every binary that runs an agent (cmd/agent, loom's
// in-process stack, the agent's tests) can be its shim without another file
// to install. It leads the process group, starts the job's process in it,
// waits for it and records how it ended in <state dir>/<name>.status, so
// that the end of a step is known even when the agent that started it is
// gone (killed, restarting): a restarted agent adopts a shim that still
// runs and reads the status of one that ended meanwhile.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/loom-ml/loom/libs/proc"
	"github.com/loom-ml/loom/services/agent/internal/ports"
)

// StepdEnv, in a process's environment, makes the agent's binary run as a
// step's shim (loom-stepd) instead of whatever its main would run: the
// package's init sees it first. Only the runtime sets it, and only in the
// shim's own environment (never a job's).
const StepdEnv = "LOOM_AGENT_STEPD"

// stepdArg0 is the shim's argv[0], what ps shows for it.
const stepdArg0 = "loom-stepd"

// The shim's file descriptors beyond stdin, stdout and stderr, as the
// runtime hands them over (exec.Cmd.ExtraFiles): the job's script (the
// memfd the job runs as /proc/self/fd/3, or closed), the shim's spec
// (a memfd of JSON), and the pipe the shim reports its start on.
const (
	shimScriptFD = 3
	shimSpecFD   = 4
	shimReportFD = 5
)

func init() {
	if os.Getenv(StepdEnv) == "" {
		return
	}
	os.Exit(stepd())
}

// shimSpec is what the runtime tells a shim to run (fd shimSpecFD).
type shimSpec struct {
	Path string   `json:"path"`
	Args []string `json:"args"`
	Env  []string `json:"env"`
	Dir  string   `json:"dir"`
	// Cred, when set, is who the job runs as (set in the child before it
	// enters Dir and executes, as the runtime's direct start does).
	Cred   *syscall.Credential `json:"cred,omitempty"`
	Script bool                `json:"script,omitempty"`
	// PIDFile and StatusFile are the shim's pidfile (libs/proc format,
	// removed when it ends) and where its job's end is recorded.
	PIDFile    string `json:"pid_file"`
	StatusFile string `json:"status_file"`
}

// shimReport is what a shim says of its start (fd shimReportFD): the job's
// pid and start time, or why it could not start.
type shimReport struct {
	PID   int    `json:"pid,omitempty"`
	Start uint64 `json:"start,omitempty"`
	Err   string `json:"err,omitempty"`
}

// shimStatus is how a job ended, as its shim records it.
type shimStatus struct {
	// Code is the exit status, 128+n when signal n ended it.
	Code int32 `json:"code"`
	// Signal names that signal ("" when it exited).
	Signal string `json:"signal,omitempty"`
}

// stepd runs the shim and returns its exit code: the job's (128+n for a
// signal), or 1 when the job could not start.
func stepd() int {
	var spec shimSpec
	specf := os.NewFile(shimSpecFD, "stepd-spec")
	err := json.NewDecoder(specf).Decode(&spec)
	specf.Close()
	report := os.NewFile(shimReportFD, "stepd-report")
	syscall.CloseOnExec(shimReportFD)
	say := func(r shimReport) {
		_ = json.NewEncoder(report).Encode(r)
		report.Close()
	}
	if err != nil {
		say(shimReport{Err: fmt.Sprintf("loom-stepd: read spec: %v", err)})
		return 1
	}
	// Signals sent to the step's group (a stop's SIGTERM, scancel --signal)
	// are the job's: the shim takes them without dying (caught, not
	// ignored: an ignored signal would stay ignored in the job).
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1,
		syscall.SIGUSR2, syscall.SIGALRM, syscall.SIGPIPE, syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU,
		syscall.SIGXCPU, syscall.SIGXFSZ, syscall.SIGVTALRM, syscall.SIGPROF, syscall.SIGWINCH, syscall.SIGURG)
	go func() {
		for range sigs {
		}
	}()
	self := os.Getpid()
	start, _ := proc.StartTime(self)
	if err := proc.WritePIDFile(spec.PIDFile, self, start); err != nil {
		say(shimReport{Err: fmt.Sprintf("loom-stepd: pidfile: %v", err)})
		return 1
	}
	c := exec.Command(spec.Path)
	c.Args, c.Env, c.Dir = spec.Args, spec.Env, spec.Dir
	if c.Env == nil {
		c.Env = []string{}
	}
	c.Stdin, c.Stdout, c.Stderr = os.Stdin, os.Stdout, os.Stderr
	if spec.Script {
		c.ExtraFiles = []*os.File{os.NewFile(shimScriptFD, "slurm_script")}
	}
	// In the shim's group: a signal to the group reaches the job, and
	// whoever kills the group (a stop, a reboot of the node) kills both.
	c.SysProcAttr = &syscall.SysProcAttr{Credential: spec.Cred}
	if err := c.Start(); err != nil {
		_ = os.Remove(spec.PIDFile)
		say(shimReport{Err: err.Error()})
		return 1
	}
	if spec.Script {
		c.ExtraFiles[0].Close()
	}
	jstart, _ := proc.StartTime(c.Process.Pid)
	say(shimReport{PID: c.Process.Pid, Start: jstart})
	_ = c.Wait()
	code, sig := proc.ExitCode(c.ProcessState)
	// Recorded before the pidfile goes: whoever finds no live shim finds
	// the status.
	if err := writeStatus(spec.StatusFile, shimStatus{Code: code, Signal: sig}); err != nil {
		fmt.Fprintf(os.Stderr, "loom-stepd: record the exit status: %v\n", err)
	}
	_ = os.Remove(spec.PIDFile)
	return int(code)
}

// writeStatus writes st to path atomically (a reader sees all of it or
// nothing).
func writeStatus(path string, st shimStatus) error {
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// readStatus reads the status a shim recorded at path.
func readStatus(path string) (shimStatus, error) {
	var st shimStatus
	b, err := os.ReadFile(path)
	if err != nil {
		return st, err
	}
	return st, json.Unmarshal(b, &st)
}

// fileName is a unit's name made one safe path element (names are step
// keys, "projects/p/jobs/7#1"): escaped, so that two names never share a
// file.
func fileName(name string) string { return url.PathEscape(name) }

// PIDFile is where the shim of the unit name keeps its pidfile in stateDir
// (<state dir>/<name>.pid, libs/proc's format).
func PIDFile(stateDir, name string) string {
	return filepath.Join(stateDir, fileName(name)+".pid")
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
	ss := shimSpec{Path: c.Path, Args: c.Args, Env: c.Env, Dir: c.Dir, Cred: cred, Script: script != nil,
		PIDFile: PIDFile(r.opts.StateDir, spec.Name), StatusFile: r.statusFile(spec.Name)}
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
	shim.Args = []string{stepdArg0, spec.Name}
	// Only what the shim needs: the job's environment goes in the spec.
	shim.Env = []string{StepdEnv + "=1", "GOMAXPROCS=1"}
	shim.Dir = "/"
	shim.Stdout, shim.Stderr = spec.Stdout, spec.Stderr
	shim.ExtraFiles = []*os.File{script, specf, repw}
	shim.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = startNiced(shim, spec.Nice)
	repw.Close()
	if err != nil {
		return nil, fmt.Errorf("start loom-stepd: %w", err)
	}
	var got shimReport
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
		return nil, errors.New(got.Err)
	}
	pid := shim.Process.Pid
	start, _ := proc.StartTime(pid)
	return &process{c: shim, g: ports.Group{PID: pid, Start: start}, main: got.PID, status: ss.StatusFile}, nil
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
	if st, err := readStatus(r.statusFile(name)); err == nil {
		return nil, &ports.Exit{Code: st.Code, Signal: st.Signal}
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

// isShim reports whether pid runs a shim (its environment says so), so
// that a pid recycled for a process that happened to start at the same
// tick is not taken for one.
func isShim(pid int) bool {
	return proc.HasEnv(pid, StepdEnv+"=1")
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
	if st, err := readStatus(p.status); err == nil {
		return ports.Exit{Code: st.Code, Signal: st.Signal}
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

// mainOf returns the job's process under the shim pid (its one child), 0
// when there is none.
func mainOf(shim int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", shim, shim))
	if err == nil {
		if f := strings.Fields(string(b)); len(f) > 0 {
			pid, _ := strconv.Atoi(f[0])
			return pid
		}
		return 0
	}
	// Without CONFIG_PROC_CHILDREN: the process whose parent is the shim.
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil {
			continue
		}
		if ppid(pid) == shim {
			return pid
		}
	}
	return 0
}

// ppid returns pid's parent (0 when unknown).
func ppid(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0
	}
	n, _ := strconv.Atoi(f[1])
	return n
}
