package slurm

import (
	"os"
	"strconv"
	"strings"
	"syscall"
)

// daemonAttr puts a daemon in its own process group and has the kernel send
// it SIGTERM when this process dies, so that a crashed caller leaves no
// daemons behind.
func daemonAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
}

// isProcess reports whether pid is alive and runs the program name.
func isProcess(pid int, name string) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	return err == nil && strings.TrimSpace(string(b)) == name
}
