package proc

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// WritePIDFile writes "pid start" (start: StartTime's) to path atomically,
// so that a reader sees the old file or the new one, never half of one.
// Together pid and start name one process: Alive(ReadPIDFile(path)) is
// false once it has exited, even if its pid was given to another.
func WritePIDFile(path string, pid int, start uint64) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, fmt.Appendf(nil, "%d %d\n", pid, start), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// ReadPIDFile reads what WritePIDFile wrote. A missing file's error
// satisfies errors.Is(err, fs.ErrNotExist); a malformed one is an error.
func ReadPIDFile(path string) (pid int, start uint64, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, err
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, 0, fmt.Errorf("pidfile %s: malformed %q", path, b)
	}
	if pid, err = strconv.Atoi(f[0]); err != nil {
		return 0, 0, fmt.Errorf("pidfile %s: %w", path, err)
	}
	if start, err = strconv.ParseUint(f[1], 10, 64); err != nil {
		return 0, 0, fmt.Errorf("pidfile %s: %w", path, err)
	}
	return pid, start, nil
}
