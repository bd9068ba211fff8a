package procruntime

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/loom-ml/loom/libs/osuser"
	"github.com/loom-ml/loom/libs/proc"
	"github.com/loom-ml/loom/services/agent/internal/ports"
)

// standIn is what runs in place of a program the kernel would not
// execute: it only exits with the error's number.
const standIn = "/bin/sh"

// execErrnos are the errors of execve(2) that say the program itself
// cannot be executed (as opposed to a start the node could not make).
var execErrnos = map[syscall.Errno]bool{
	syscall.ENOENT: true, syscall.EACCES: true, syscall.ENOEXEC: true, syscall.ENOTDIR: true,
	syscall.ELOOP: true, syscall.ETXTBSY: true, syscall.EISDIR: true, syscall.ENAMETOOLONG: true,
	syscall.E2BIG: true,
}

// execFailure is a program that cannot be executed, as slurmstepd's
// execve() reports it: what it tried (path, or the script's interpreter
// line) and the error.
type execFailure struct {
	what  string
	errno syscall.Errno
}

// strerror is errno's message as the C library words it ("No such file or
// directory").
func strerror(errno syscall.Errno) string {
	s := errno.Error()
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// line is slurmstepd's line for the failure on node ("" unknown).
func (f execFailure) line(node string) string {
	prefix := "slurmstepd"
	if node != "" {
		prefix += "-" + node
	}
	return fmt.Sprintf("%s: error: execve(): %s: %s\n", prefix, f.what, strerror(f.errno))
}

// notFound is the failure for argv0, which LookPath did not find as a in
// dir: the path execve would have been given (relative ones joined to
// dir as Slurm joins them to the working directory, a bare name as
// written, searched on PATH) and why.
func notFound(a osuser.Account, argv0, dir string) execFailure {
	if !strings.Contains(argv0, "/") {
		return execFailure{what: argv0, errno: syscall.ENOENT}
	}
	p := argv0
	if !filepath.IsAbs(p) {
		p = strings.TrimSuffix(dir, "/") + "/" + p
	}
	f := execFailure{what: p, errno: syscall.EACCES} // there, but not an executable file
	_ = osuser.As(a, func() error {
		if _, err := os.Stat(p); err != nil {
			var errno syscall.Errno
			if errors.As(err, &errno) {
				f.errno = errno
			} else {
				f.errno = syscall.ENOENT
			}
		}
		return nil
	})
	return f
}

// asExecFailure says whether err, from starting spec's process (c), was
// execve's refusal of the program rather than the node's failure to start
// it: an error of execErrnos while the working directory is still there
// for the user (the same errors would come from entering it).
func asExecFailure(a osuser.Account, c *exec.Cmd, spec ports.Spec, err error) (execFailure, bool) {
	var errno syscall.Errno
	if !errors.As(err, &errno) || !execErrnos[errno] {
		return execFailure{}, false
	}
	dirOK := false
	_ = osuser.As(a, func() error {
		if d, err := os.Open(c.Dir); err == nil {
			dirOK = d.Close() == nil
		}
		return nil
	})
	if !dirOK && c.Dir != "" {
		return execFailure{}, false
	}
	if spec.Script != "" {
		first, _, _ := strings.Cut(spec.Script, "\n")
		if interp, ok := strings.CutPrefix(first, "#!"); ok && errno == syscall.ENOENT {
			return execFailure{what: "bad interpreter(" + interp + ")", errno: errno}, true
		}
		return execFailure{what: scriptPath, errno: errno}, true
	}
	what := c.Path
	if argv0 := spec.Argv[0]; strings.Contains(argv0, "/") && !filepath.IsAbs(argv0) {
		what = strings.TrimSuffix(spec.Dir, "/") + "/" + argv0 // as written, as Slurm joins it
	}
	return execFailure{what: what, errno: errno}, true
}

// startExecFailure does what slurmstepd does when execve fails: the task
// has started, says why on its error output and exits with the error's
// number (2 for a program that does not exist, 13 for one that may not be
// executed), so that srun, sacct and the job's exit code read as Slurm's.
// The exit comes from a stand-in started as the program would have been;
// if even that cannot start, cause is the error.
func (r Runtime) startExecFailure(a osuser.Account, spec ports.Spec, f execFailure, cause error) (ports.Process, error) {
	node := r.opts.Node
	if node == "" {
		node = envValue(spec.Env, "SLURMD_NODENAME")
	}
	out := spec.Stderr
	if out == nil {
		out = spec.Stdout
	}
	if out != nil {
		_, _ = out.WriteString(f.line(node))
	}
	c := exec.Command(standIn, "-c", "exit "+strconv.Itoa(int(f.errno)))
	c.Dir, c.Env = "/", []string{}
	c.Stdout, c.Stderr = spec.Stdout, spec.Stderr
	c.SysProcAttr = unitAttr()
	if !osuser.IsSelf(a) {
		c.SysProcAttr.Credential = a.Credential()
	}
	stand := spec
	stand.Script, stand.Input, stand.InputEOF, stand.PTY = "", nil, "", nil
	var p ports.Process
	var err error
	if r.opts.StateDir != "" {
		p, err = r.startShim(c, stand, nil, c.SysProcAttr.Credential)
	} else if err = startNiced(c, spec.Nice); err == nil {
		pid := c.Process.Pid
		start, _ := proc.StartTime(pid)
		p = &process{c: c, g: ports.Group{PID: pid, Start: start}}
	}
	if err != nil {
		return nil, cause
	}
	return p, nil
}
