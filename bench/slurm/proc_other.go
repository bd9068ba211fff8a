//go:build !linux

package slurm

import "syscall"

// daemonAttr puts a daemon in its own process group.
func daemonAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

// isProcess reports whether pid is alive (the program is not checked here).
func isProcess(pid int, _ string) bool { return syscall.Kill(pid, 0) == nil }
