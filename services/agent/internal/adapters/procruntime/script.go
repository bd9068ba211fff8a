package procruntime

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// scriptPath is where a step's batch script is executed from: fd 3 of the
// step's own process (exec.Cmd.ExtraFiles[0]). The interpreter gets this
// path as its script argument ($0 in a shell), as Slurm's gets its spool
// file's, and opens it in the same process, where fd 3 is the script.
const scriptPath = "/proc/self/fd/3"

// scriptFD returns an anonymous in-memory file holding script, read from
// its start, for scriptPath.
func scriptFD(script string) (*os.File, error) { return memFile("slurm_script", script) }

// memFile returns an anonymous in-memory file named name holding data, read
// from its start.
func memFile(name, data string) (*os.File, error) {
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("memfd: %w", err)
	}
	f := os.NewFile(uintptr(fd), name)
	if _, err := f.WriteString(data); err != nil {
		f.Close()
		return nil, fmt.Errorf("write %s: %w", name, err)
	}
	if _, err := f.Seek(0, 0); err != nil {
		f.Close()
		return nil, fmt.Errorf("rewind %s: %w", name, err)
	}
	return f, nil
}
