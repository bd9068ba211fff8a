// Package stepd is loom-stepd, the shim each step or task runs under when
// the process runtime has a state directory, as a Slurm step runs under
// slurmstepd: it leads the step's process group, starts the job's process
// in it, waits for it and records how it ended, so that the end of a step
// is known even when the agent that started it is gone (killed,
// restarting). A restarted agent adopts a shim that still runs and reads
// the status of one that ended meanwhile (procruntime.Runtime.Recover).
//
// The shim is the agent's own binary started again (/proc/self/exe) with
// Env set, so that every binary that runs an agent (cmd/agent, loom's
// in-process stack, the agent's tests) is its own shim without another file
// to install: this package's init sees Env and runs the shim instead of
// the program's main.
//
// It imports the standard library only, on purpose: Go initializes packages
// in import-path order as soon as their imports are, so a package with no
// other imports runs its init before the heavy ones of the agent's binary
// (protobuf, gRPC, Kafka's protocol tables), and a shim starts in about
// the time a small Go program does. Hence the few lines of libs/proc it
// repeats (the pidfile's format, a process's start time, an exit code and its
// rusage).
package stepd

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Env, in a process's environment, makes the agent's binary run as a step's
// shim. Only the process runtime sets it, and only in the shim's own
// environment (never a job's).
const Env = "LOOM_AGENT_STEPD"

// Arg0 is the shim's argv[0], what ps shows for it.
const Arg0 = "loom-stepd"

// The shim's file descriptors beyond stdin, stdout and stderr, as the
// runtime hands them over (exec.Cmd.ExtraFiles): the job's script (the
// memfd the job runs as /proc/self/fd/3, or closed), the shim's Spec (JSON
// in a memfd), the pipe the shim writes its Report to, and the step's
// input file (Spec.InputEOF set) or closed.
const (
	ScriptFD = 3
	SpecFD   = 4
	ReportFD = 5
	InputFD  = 6
)

func init() {
	if os.Getenv(Env) == "" {
		return
	}
	os.Exit(run())
}

// Spec is what the runtime tells a shim to run.
type Spec struct {
	Path string   `json:"path"`
	Args []string `json:"args"`
	Env  []string `json:"env"`
	Dir  string   `json:"dir"`
	// Cred, when set, is who the job runs as (set in the child before it
	// enters Dir and executes, as the runtime's direct start does).
	Cred *syscall.Credential `json:"cred,omitempty"`
	// Script is true when fd ScriptFD is the job's script, its fd 3.
	Script bool `json:"script,omitempty"`
	// PIDFile is the shim's pidfile (libs/proc's format: "pid start"),
	// written first and removed when the shim ends; StatusFile is where it
	// records its job's end.
	PIDFile    string `json:"pid_file"`
	StatusFile string `json:"status_file"`
	// GPUsFile, when set, holds GPUs (the job's CUDA_VISIBLE_DEVICES)
	// while the job runs: written before the pidfile, removed after it, so
	// that whoever finds the pidfile finds the list (the simulated GPUs'
	// busy test, gpu.StepsBusy).
	GPUsFile string `json:"gpus_file,omitempty"`
	GPUs     string `json:"gpus,omitempty"`
	// InputEOF, when set, says fd InputFD is the job's input, which the
	// shim feeds to the job's stdin as it grows until a file of this name
	// exists (Follow); else the job's stdin is the shim's.
	InputEOF string `json:"input_eof,omitempty"`
	// PTY runs the job in a pseudo-terminal of Rows × Cols (0: 24 × 80):
	// its stdin, stdout and stderr, and its session's controlling
	// terminal (the shim leads a session of its own then). What the job
	// writes to it goes to the shim's stdout; the input, if any, is typed
	// into it.
	PTY  bool   `json:"pty,omitempty"`
	Rows uint16 `json:"rows,omitempty"`
	Cols uint16 `json:"cols,omitempty"`
	// WinsizeFile, with PTY, is where srun writes the window's new size
	// ("ROWS COLS") when its own terminal is resized (followWinsize).
	WinsizeFile string `json:"winsize_file,omitempty"`
}

// Report is what a shim says of its start: the job's pid and start time,
// or why it could not start.
type Report struct {
	PID   int    `json:"pid,omitempty"`
	Start uint64 `json:"start,omitempty"`
	Err   string `json:"err,omitempty"`
	// Errno is the system error under Err (0: none), so that the agent's
	// error still says what it is (errors.Is(err, fs.ErrPermission)).
	Errno syscall.Errno `json:"errno,omitempty"`
	// OOMErr, when set, is why the shim keeps the OOM killer's default
	// regard (protectFromOOM): the agent says it once, not every step's
	// output.
	OOMErr string `json:"oom_err,omitempty"`
}

// Status is how a job ended, as its shim records it.
type Status struct {
	// Code is the exit status, 128+n when signal n ended it.
	Code int32 `json:"code"`
	// Signal names that signal ("" when it exited).
	Signal string `json:"signal,omitempty"`
	// UserCPU, SystemCPU and MaxRSS are what the job and the children it
	// waited for used, as the kernel counted it (proc.Rusage).
	UserCPU   time.Duration `json:"user_cpu,omitempty"`
	SystemCPU time.Duration `json:"system_cpu,omitempty"`
	MaxRSS    int64         `json:"max_rss,omitempty"`
}

// caught are the signals the shim takes without dying when they are sent
// to the step's group (a stop's SIGTERM, scancel --signal): they are the
// job's. Caught, not ignored: an ignored signal would stay ignored in the
// job it starts.
var caught = []os.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1,
	syscall.SIGUSR2, syscall.SIGALRM, syscall.SIGPIPE, syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU,
	syscall.SIGXCPU, syscall.SIGXFSZ, syscall.SIGVTALRM, syscall.SIGPROF, syscall.SIGWINCH, syscall.SIGURG}

// run is the shim; it returns its exit code: the job's (128+n for a
// signal), or 1 when the job could not start.
func run() int {
	var spec Spec
	specf := os.NewFile(SpecFD, "stepd-spec")
	err := json.NewDecoder(specf).Decode(&spec)
	specf.Close()
	syscall.CloseOnExec(ReportFD)
	// The input is the shim's to feed, never the job's to inherit (an
	// error when there is none).
	syscall.CloseOnExec(InputFD)
	report := os.NewFile(ReportFD, "stepd-report")
	say := func(r Report) {
		_ = json.NewEncoder(report).Encode(r)
		report.Close()
	}
	if err != nil {
		say(Report{Err: fmt.Sprintf("loom-stepd: read spec: %v", err)})
		return 1
	}
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, caught...)
	go func() {
		for range sigs {
		}
	}()
	// Without it (a kernel before 3.4) what the job detaches escapes it,
	// as it did before: the step still runs.
	_ = becomeSubreaper()
	self := os.Getpid()
	if spec.GPUsFile != "" {
		if err := writeFile(spec.GPUsFile, []byte(spec.GPUs+"\n")); err != nil {
			say(Report{Err: fmt.Sprintf("loom-stepd: GPUs file: %v", err)})
			return 1
		}
		defer os.Remove(spec.GPUsFile) // after the pidfile's removal, below
	}
	if err := writePIDFile(spec.PIDFile, self, startTime(self)); err != nil {
		say(Report{Err: fmt.Sprintf("loom-stepd: pidfile: %v", err)})
		return 1
	}
	c := exec.Command(spec.Path)
	c.Args, c.Env, c.Dir = spec.Args, spec.Env, spec.Dir
	if c.Env == nil {
		c.Env = []string{}
	}
	c.Stdin, c.Stdout, c.Stderr = os.Stdin, os.Stdout, os.Stderr
	if spec.Script {
		c.ExtraFiles = []*os.File{os.NewFile(ScriptFD, "slurm_script")}
	}
	var feed func()
	var relayed chan struct{}
	if spec.PTY {
		master, slave, err := openPTY(spec.Rows, spec.Cols, spec.Cred)
		if err != nil {
			_ = os.Remove(spec.PIDFile)
			say(Report{Err: fmt.Sprintf("loom-stepd: terminal: %v", err)})
			return 1
		}
		c.Stdin, c.Stdout, c.Stderr = slave, slave, slave
		relayed = make(chan struct{})
		feed = func() {
			slave.Close() // the job's now: the master reads EIO once it is gone
			go func() {
				defer close(relayed)
				_, _ = io.Copy(os.Stdout, master)
			}()
			if spec.InputEOF != "" {
				go Follow(os.NewFile(InputFD, "stdin"), spec.InputEOF, ptyInput{master}, nil)
			}
			if spec.WinsizeFile != "" {
				go followWinsize(master, spec.WinsizeFile, spec.Cred, relayed)
			}
		}
	} else if spec.InputEOF != "" {
		in := os.NewFile(InputFD, "stdin")
		r, w, err := os.Pipe()
		if err != nil {
			_ = os.Remove(spec.PIDFile)
			say(Report{Err: fmt.Sprintf("loom-stepd: input pipe: %v", err)})
			return 1
		}
		c.Stdin = r
		// Started once the job is: the job's end closes the pipe's only
		// reader, and the feeder with it (a write fails, or the shim
		// exits while it waits for more).
		feed = func() {
			r.Close()
			go Follow(in, spec.InputEOF, w, nil)
		}
	}
	// In the shim's group: a signal to the group reaches the job, and
	// whoever kills the group (a stop, a reboot of the node) kills both.
	c.SysProcAttr = &syscall.SysProcAttr{Credential: spec.Cred}
	// The job starts as a copy of this process (Go clones with the
	// parent's memory until exec), and the kernel counts the peak of that
	// memory in the job's ru_maxrss: a peak no higher than the shim's own
	// is the shim's, not the job's (see exitOf).
	hwm := selfHWM()
	if err := c.Start(); err != nil {
		_ = os.Remove(spec.PIDFile)
		r := Report{Err: err.Error()}
		errors.As(err, &r.Errno)
		say(r)
		return 1
	}
	if spec.Script {
		c.ExtraFiles[0].Close()
	}
	if feed != nil {
		feed()
	}
	// Once the job has started, so that it (and all it forks) keeps the
	// regard it would have had without a shim; before the report, so that
	// the agent finds it done.
	started := Report{PID: c.Process.Pid, Start: startTime(c.Process.Pid)}
	if err := protectFromOOM(); err != nil {
		started.OOMErr = err.Error()
	}
	say(started)
	// Reaped here, not by c.Wait: the orphans the shim reaps meanwhile
	// would otherwise be zombies until the job's end.
	var extra usage
	ws, ru, werr := waitJob(c.Process.Pid, &extra)
	if left := sweep(&extra); left > 0 {
		fmt.Fprintf(os.Stderr, "loom-stepd: %d process(es) the job left behind did not die within %v of SIGKILL\n", left, sweepWait)
	}
	if relayed != nil {
		// What the job wrote last, unless what it left behind holds the
		// terminal open: then no longer than a moment.
		select {
		case <-relayed:
		case <-time.After(time.Second):
		}
	}
	st := exitOf(ws, ru, werr)
	st.UserCPU += extra.utime
	st.SystemCPU += extra.stime
	if st.MaxRSS <= hwm {
		st.MaxRSS = 0 // not known: the samples tell
	}
	// Recorded before the pidfile goes: whoever finds no live shim finds
	// the status.
	if err := WriteStatus(spec.StatusFile, st); err != nil {
		fmt.Fprintf(os.Stderr, "loom-stepd: record the exit status: %v\n", err)
	}
	_ = os.Remove(spec.PIDFile)
	return int(st.Code)
}

// WriteStatus writes st to path atomically (a reader sees all of it or
// nothing).
func WriteStatus(path string, st Status) error {
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	return writeFile(path, b)
}

// writeFile writes b to path atomically.
func writeFile(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// ReadStatus reads the status a shim recorded at path.
func ReadStatus(path string) (Status, error) {
	var st Status
	b, err := os.ReadFile(path)
	if err != nil {
		return st, err
	}
	return st, json.Unmarshal(b, &st)
}

// writePIDFile writes libs/proc's pidfile ("pid start\n") atomically, as
// proc.WritePIDFile does.
func writePIDFile(path string, pid int, start uint64) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, fmt.Appendf(nil, "%d %d\n", pid, start), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// startTime is pid's start time in clock ticks since boot (field 22 of
// /proc/<pid>/stat), as proc.StartTime reads it; 0 when unknown.
func startTime(pid int) uint64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return 0
	}
	st, _ := strconv.ParseUint(f[19], 10, 64)
	return st
}

// selfHWM is this process's peak resident size in bytes (VmHWM), as
// proc.HighWater reads it (repeated: see the package comment); 0 when not
// known.
func selfHWM() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return max(kb, 0) << 10
		}
	}
	return 0
}

// exitOf is how a process ended, as proc.ExitCode says it, from its wait
// status and usage (err: it could not be waited for).
func exitOf(ws syscall.WaitStatus, ru *syscall.Rusage, err error) Status {
	if err != nil {
		return Status{Code: -1}
	}
	st := Status{Code: int32(ws.ExitStatus())}
	if ws.Signaled() {
		st = Status{Code: int32(128 + int(ws.Signal())), Signal: ws.Signal().String()}
	}
	// As proc.Rusage, repeated (see the package comment): Linux counts
	// ru_maxrss in kilobytes.
	if ru != nil {
		st.UserCPU, st.SystemCPU = time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())
		st.MaxRSS = max(int64(ru.Maxrss), 0) * 1024
	}
	return st
}
