package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
	"time"

	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/osuser"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// logChunk is the most bytes one LogChunk carries.
const logChunk = 64 << 10

// ReadJobLogs streams the job's output file (output_path; the name may name
// an array task, "A_i"). Without follow it
// sends what the file holds now. With follow it keeps tailing the file until
// the job is terminal and the file is read to its end, waiting for the job to
// start and the file to appear. With tail_lines it starts at the file's last
// lines (seekLastLines) instead of its beginning.
//
// The file is read as the job's owner (job.user; see openLog): a path the
// owner may not read, or one that is not a regular file, is refused
// (FailedPrecondition) and nothing of it is sent. Only the job's owner (or
// its own workload) and administrators may read it: the file is read with
// the owner's rights, so a viewer of the project who could would read what
// the owner's file permissions keep from them; with PrivateData another's
// job is NotFound, as GetJob answers.
func (g *Gateway) ReadJobLogs(ctx context.Context, req *loomv1.ReadJobLogsRequest, send func([]byte) error) error {
	if n := req.GetTailLines(); n < 0 {
		return errs.Invalid("tail_lines", "must not be negative, got %d (0: the whole output)", n)
	}
	ref, err := g.resolveJob(ctx, req.GetName(), false)
	if err != nil {
		return err
	}
	job, caller, err := g.visibleJob(ctx, ref.name)
	if err != nil {
		return err
	}
	if err := caller.CheckAccess(job); err != nil {
		return err
	}
	t := &tail{send: send, owner: job.GetUser(), lines: int(req.GetTailLines())}
	defer t.close()
	if !req.GetFollow() {
		if err := t.drain(job.GetOutputPath()); err != nil {
			return err
		}
		return outputGone(t, job)
	}
	tick := time.NewTicker(g.opt.Poll)
	defer tick.Stop()
	for {
		ended := job.GetState().Terminal()
		if err := t.drain(job.GetOutputPath()); err != nil {
			return err
		}
		// The job's processes have exited once it is terminal, so the file
		// read to its end after that is complete.
		if ended {
			return nil
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return ctx.Err()
		case <-g.stop:
			return ErrStopping
		}
		if job, err = g.job(ctx, ref.name); err != nil {
			return err
		}
	}
}

// outputGone refuses, after a drain that found no file, a job that ran and
// ended: its output existed once and is gone (an ephemeral cluster's
// shared directory deleted with the cluster, a file removed), which an
// empty answer would pass off as a job that printed nothing. A job that
// never started, or is still running, has nothing yet and is not refused.
func outputGone(t *tail, job *loomv1.Job) error {
	if t.f != nil || job.GetOutputPath() == "" || job.GetStartTime() == nil || !job.GetState().Terminal() {
		return nil
	}
	return fmt.Errorf("job %s: its output file %s no longer exists (removed, or its cluster's shared directory was deleted with the cluster): %w",
		job.GetJobId(), job.GetOutputPath(), errs.NotFound)
}

// tail reads a growing file from where it left off.
type tail struct {
	send func([]byte) error
	// owner is the job's owner, whom the file is opened as ("": the
	// gateway's own user, for a job with no owner).
	owner string
	// lines, when positive, starts the read at the file's last lines
	// lines, once it is opened.
	lines int
	f     *os.File
	buf   []byte
}

// drain sends everything from the last position to the current end of path;
// a path that is empty or does not exist yet sends nothing.
func (t *tail) drain(path string) error {
	if t.f == nil {
		if path == "" {
			return nil
		}
		f, err := openLog(t.owner, path)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			// The kind last, as every service's message has it: the CLI
			// drops that suffix rather than say it twice.
			return fmt.Errorf("open job output: %v: %w", err, errs.FailedPrecondition)
		}
		t.f, t.buf = f, make([]byte, logChunk)
		if t.lines > 0 {
			if err := seekLastLines(t.f, t.lines, t.buf); err != nil {
				return fmt.Errorf("read job output: %w", err)
			}
		}
	}
	for {
		n, err := t.f.Read(t.buf)
		if n > 0 {
			// send may keep the slice; hand it a copy.
			if serr := t.send(append([]byte(nil), t.buf[:n]...)); serr != nil {
				return serr
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read job output: %w", err)
		}
	}
}

// seekLastLines moves f to the start of its last n lines (n > 0), reading
// backwards from its end in buf-sized blocks, so that a tail of a large
// output reads only that tail. A last line without a newline counts as a
// line; a file of n lines or fewer is read whole.
func seekLastLines(f *os.File, n int, buf []byte) error {
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	end := fi.Size()
	pos, start := end, int64(0)
	found := 0
	for pos > 0 && start == 0 {
		size := min(int64(len(buf)), pos)
		pos -= size
		if _, err := f.ReadAt(buf[:size], pos); err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		for i := size - 1; i >= 0; i-- {
			// The file's final newline ends its last line; it does not
			// start another.
			if buf[i] != '\n' || pos+i == end-1 {
				continue
			}
			if found++; found == n {
				start = pos + i + 1
				break
			}
		}
	}
	_, err = f.Seek(start, io.SeekStart)
	return err
}

func (t *tail) close() {
	if t.f != nil {
		_ = t.f.Close()
	}
}

// openLog opens path for reading as owner, the job's owner: on a thread
// that has taken on the owner's uid, gid and groups (osuser.As), so that
// the kernel checks the owner's rights, not the gateway's. The job's
// owner named the path (--output), and the gateway may run as root: read
// as itself, it would hand any file on its machine to whoever may read the
// job's log. This is what "reads as the owner" means here: a child process
// of the owner's would be checked the same, at a process start per read.
// Reading another user's file needs the gateway to run as root (one that
// does not reads its own user's jobs' logs only); the owner must have an
// account on the gateway's machine, as on the node that wrote the file.
// "" opens it as the gateway itself (a job with no owner, which ran as its
// agent's user). The open does not block (a FIFO named as output would
// hold the call), and what is opened must be a regular file (not a
// device, whose reads never end).
func openLog(owner, path string) (*os.File, error) {
	acct := osuser.Self()
	if owner != "" {
		var err error
		if acct, err = osuser.Lookup(owner); err != nil {
			if errors.Is(err, osuser.ErrNoAccount) {
				return nil, fmt.Errorf("the job's owner %s has no account on the gateway's machine to read its output as (add the account there, as on the nodes: the gateway reads a job's output with its owner's rights)", owner)
			}
			return nil, err
		}
	}
	f, err := osuser.OpenFile(acct, path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, err
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		_ = f.Close()
		if err == nil {
			err = fmt.Errorf("%s is not a regular file", path)
		}
		return nil, err
	}
	return f, nil
}
