package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"

	"github.com/loom-ml/loom/libs/errs"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// logChunk is the most bytes one LogChunk carries.
const logChunk = 64 << 10

// ReadJobLogs streams the job's output file (output_path; the name may name
// an array task, "A_i"). Without follow it
// sends what the file holds now. With follow it keeps tailing the file until
// the job is terminal and the file is read to its end, waiting for the job to
// start and the file to appear.
func (g *Gateway) ReadJobLogs(ctx context.Context, req *loomv1.ReadJobLogsRequest, send func([]byte) error) error {
	ref, err := g.resolveJob(ctx, req.GetName(), false)
	if err != nil {
		return err
	}
	job, err := g.job(ctx, ref.name)
	if err != nil {
		return err
	}
	t := &tail{send: send}
	defer t.close()
	if !req.GetFollow() {
		return t.drain(job.GetOutputPath())
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

// tail reads a growing file from where it left off.
type tail struct {
	send func([]byte) error
	f    *os.File
	buf  []byte
}

// drain sends everything from the last position to the current end of path;
// a path that is empty or does not exist yet sends nothing.
func (t *tail) drain(path string) error {
	if t.f == nil {
		if path == "" {
			return nil
		}
		f, err := os.Open(path)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("open job output: %w: %v", errs.FailedPrecondition, err)
		}
		t.f, t.buf = f, make([]byte, logChunk)
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

func (t *tail) close() {
	if t.f != nil {
		_ = t.f.Close()
	}
}
