package stepd

import (
	"errors"
	"io"
	"os"
	"time"
)

// InputPoll is how often Follow looks for more input once it has read all
// there is: the delay a line typed to srun may take to reach a task.
const InputPoll = 20 * time.Millisecond

// Follow copies in, a file another process appends to, to w as the file
// grows, until the file named eof exists and all of in was read, or stop is
// closed, or w is refused (its reader is gone: the task closed its stdin or
// ended). It closes w when done, so that the reader sees end of file.
//
// eof is only looked at (its existence), never opened: the file belongs to
// the job's owner, who may point it anywhere.
func Follow(in *os.File, eof string, w io.WriteCloser, stop <-chan struct{}) {
	defer w.Close()
	buf := make([]byte, 64<<10)
	for {
		n, err := in.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			continue
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return
		}
		// All there is, read: the end, when the writer said so. Checked
		// before one more read, so that what it wrote before saying so
		// is not lost.
		if _, err := os.Lstat(eof); err == nil {
			for {
				n, _ := in.Read(buf)
				if n == 0 {
					return
				}
				if _, werr := w.Write(buf[:n]); werr != nil {
					return
				}
			}
		}
		select {
		case <-stop:
			return
		case <-time.After(InputPoll):
		}
	}
}
