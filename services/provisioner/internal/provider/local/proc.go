package local

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// hasProc reports whether /proc describes processes here.
var hasProc = func() bool {
	_, err := os.Stat("/proc/self/stat")
	return err == nil
}()

// startTime returns when pid started (clock ticks since boot on Linux, 0
// where that is not known) and whether it runs. A zombie does not run.
func startTime(pid int) (uint64, bool) {
	if pid <= 0 {
		return 0, false
	}
	if !hasProc {
		err := syscall.Kill(pid, 0)
		return 0, err == nil || errors.Is(err, syscall.EPERM)
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	// The command name may hold spaces and parentheses: fields follow the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); field 22 (starttime) is f[19].
	if len(f) < 20 || f[0] == "Z" || f[0] == "X" {
		return 0, false
	}
	st, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return 0, false
	}
	return st, true
}

// alive reports whether pid runs and, when start is known, is the process
// that started then (not a recycled pid).
func alive(pid int, start uint64) bool {
	st, ok := startTime(pid)
	return ok && (start == 0 || st == 0 || st == start)
}

// killGroup signals the process group pgid; a gone group is not an error.
func killGroup(pgid int, sig syscall.Signal) error {
	if pgid <= 1 {
		return fmt.Errorf("kill group %d: refusing to signal a pgid <= 1", pgid)
	}
	if err := syscall.Kill(-pgid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("kill group %d with %v: %w", pgid, sig, err)
	}
	return nil
}

// waitUntil polls cond until it holds, d passes or done closes; it reports
// whether cond held.
func waitUntil(d time.Duration, done <-chan struct{}, cond func() bool) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if cond() {
			return true
		}
		select {
		case <-t.C:
			return cond()
		case <-done:
			return cond()
		case <-tick.C:
		}
	}
}
