package checks

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// maxOutput bounds the stdout a check program's result keeps.
const maxOutput = 64 << 10

// SiteOutput is what a site check may print on stdout as one JSON object
// to say more than its exit code: a summary, metrics, and "warn": true to
// turn a pass into CHECK_WARN. Anything else on stdout is kept as the
// result's detail.
type SiteOutput struct {
	Summary string             `json:"summary"`
	Metrics map[string]float64 `json:"metrics"`
	Warn    bool               `json:"warn"`
	GPU     *int32             `json:"gpu"`
}

// errNoSuchCheck marks a check name this node has no check of: neither a
// built-in nor a program in CheckDir. Run answers it CHECK_SKIPPED, not
// CHECK_ERROR: the node cannot run it, which says nothing of its hardware.
// As an error, a name mistyped in a scan (or a site check installed on some
// nodes only) made each node it reached SUSPECT, and the confirming run of
// the same name errored again and drained and rebooted it.
var errNoSuchCheck = errors.New("no such check")

// sitePath is the program a site check name runs: a plain file name of an
// executable in CheckDir (never a path: a name cannot reach outside it). A
// name with no entry in a CheckDir that is a directory, or no CheckDir at
// all, is errNoSuchCheck; any other failure to find the program is a plain
// error (CHECK_ERROR).
func (r *Runner) sitePath(name string) (string, error) {
	if r.cfg.CheckDir == "" {
		return "", fmt.Errorf("no check %q: not a built-in check, and the node's agent has no check directory (-check-dir, LOOM_AGENT_CHECK_DIR; `loom up` passes its environment on to the agents it starts): %w", name, errNoSuchCheck)
	}
	if strings.ContainsAny(name, `/\`) || strings.HasPrefix(name, ".") {
		return "", fmt.Errorf("no check %q: a site check is named by a file name in -check-dir", name)
	}
	path := filepath.Join(r.cfg.CheckDir, name)
	fi, err := os.Stat(path)
	if err != nil {
		// Only a name the node's readable check directory does not hold
		// says nothing of the node. A directory that is gone (a mount
		// that failed) or unreadable, a dangling link, an I/O error: the
		// node's own fault, CHECK_ERROR, so that health counts it and a
		// broken node cannot read as one without the check.
		if errors.Is(err, fs.ErrNotExist) {
			if d, derr := os.Stat(r.cfg.CheckDir); derr == nil && d.IsDir() {
				if _, lerr := os.Lstat(path); errors.Is(lerr, fs.ErrNotExist) {
					return "", fmt.Errorf("no check %q: not a built-in check, and not in %s: %w", name, r.cfg.CheckDir, errNoSuchCheck)
				}
			} else if derr != nil {
				return "", fmt.Errorf("check %q: the check directory: %v", name, derr)
			}
		}
		return "", fmt.Errorf("check %q: %v", name, err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return "", fmt.Errorf("check %q: %s is not an executable file", name, path)
	}
	return path, nil
}

// SiteChecks lists the site check programs in dir, by name.
func SiteChecks(dir string) []string {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		if fi, err := e.Info(); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 && !strings.HasPrefix(e.Name(), ".") {
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	return out
}

// site runs a site check program: exit 0 passes, 1 fails, anything else
// (a crash, a signal, being killed at the timeout) is CHECK_ERROR. It runs
// in a process group of its own, killed whole when the check ends, so that
// nothing it started outlives it. Its environment is the agent's plus
// LOOM_CHECK_NODE, LOOM_CHECK_HOSTNAME, LOOM_CHECK_LEVEL,
// LOOM_CHECK_TRIGGER and LOOM_CHECK_PARAM_<NAME> for each parameter.
func (r *Runner) site(ctx context.Context, path string, cmd *eventsv1.RunHealthCheck) verdict {
	c := exec.CommandContext(ctx, path)
	c.Dir = r.cfg.WorkDir
	c.Env = append(os.Environ(),
		"LOOM_CHECK_NODE="+r.cfg.Node, "LOOM_CHECK_HOSTNAME="+r.cfg.Hostname,
		"LOOM_CHECK_LEVEL="+strconv.Itoa(int(cmd.GetLevel())), "LOOM_CHECK_TRIGGER="+cmd.GetTrigger())
	for k, v := range cmd.GetParams() {
		c.Env = append(c.Env, "LOOM_CHECK_PARAM_"+strings.ToUpper(envName(k))+"="+v)
	}
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	c.Cancel = func() error { return syscall.Kill(-c.Process.Pid, syscall.SIGKILL) }
	// Output pipes held open by a stray child must not hold the check.
	c.WaitDelay = time.Second
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &limited{w: &out, n: maxOutput}, &limited{w: &errb, n: 4096}
	err := c.Start()
	if err != nil {
		return checkError("starting %s: %v", path, err)
	}
	err = c.Wait()
	_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL) // whatever it left behind
	if errors.Is(err, exec.ErrWaitDelay) {
		// It exited, but a child of it still held its stdout or stderr
		// (killed above with the group): its exit status decides, as for
		// any other program.
		err = nil
	}
	if ctx.Err() != nil {
		return checkError("%s: %v", filepath.Base(path), ctx.Err())
	}
	code := c.ProcessState.ExitCode()
	var v verdict
	switch {
	case err == nil && code == 0:
		v = pass("exit 0")
	case code == 1:
		v = fail(-1, "exit 1")
	default:
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			return checkError("%s: %v", filepath.Base(path), err)
		}
		v = checkError("%s ended with %s (0 passes, 1 fails): the check failed, not the node", filepath.Base(path), c.ProcessState)
	}
	v.detail = out.String()
	var so SiteOutput
	if json.Unmarshal(bytes.TrimSpace(out.Bytes()), &so) == nil {
		if so.Summary != "" {
			v.summary = so.Summary
		}
		v.metrics = so.Metrics
		if so.GPU != nil && v.outcome == loomv1.CheckOutcome_CHECK_FAIL {
			v.gpu = *so.GPU
		}
		if so.Warn && v.outcome == loomv1.CheckOutcome_CHECK_PASS {
			v.outcome = loomv1.CheckOutcome_CHECK_WARN
		}
	} else if line := lastLine(out.String()); line != "" && v.outcome != loomv1.CheckOutcome_CHECK_ERROR {
		v.summary += ": " + line
	}
	if e := lastLine(errb.String()); e != "" && v.outcome != loomv1.CheckOutcome_CHECK_PASS {
		v.summary += " (stderr: " + e + ")"
	}
	return v
}

func envName(k string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '_'
	}, k)
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	if len(s) > 200 {
		s = s[:200]
	}
	return s
}

// limited keeps the first n bytes written and discards the rest (without
// failing the writer, so that a chatty program is not killed by a full
// pipe).
type limited struct {
	w io.Writer
	n int
}

func (l *limited) Write(p []byte) (int, error) {
	if l.n > 0 {
		k := min(len(p), l.n)
		_, _ = l.w.Write(p[:k])
		l.n -= k
	}
	return len(p), nil
}
