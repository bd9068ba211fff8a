package app

import (
	"fmt"
	"os/exec"
	"runtime"
	"syscall"
)

// maxNice is the lowest priority Linux has.
const maxNice = 19

// niceOf returns the nice value of the calling thread.
func niceOf() (int, error) {
	// The raw system call answers 20 - nice (1..40), never a negative number.
	raw, err := syscall.Getpriority(syscall.PRIO_PROCESS, 0)
	if err != nil {
		return 0, err
	}
	return 20 - raw, nil
}

// startNiced starts c with a nice value incr above the agent's own (at most
// 19), from its first instruction: Linux keeps nice values per thread and a
// new process takes its forking thread's, so c is forked from a thread of
// its own, niced first, that ends with the start (the agent's other threads
// keep their priority). incr 0 is c.Start().
//
// Why steps run below the agent at all: a job that keeps every CPU busy (data
// loaders do) must not starve the agent's heartbeats, health checks and stop
// commands — a starved agent looks dead and gets its node's jobs requeued —
// nor, on a machine that also runs the control plane (loom up), the
// scheduler and gateway. Slurm reaches the same end with specialised cores
// (CoreSpecCount), Kubernetes with system-reserved CPU; a nice value needs
// no cgroup and no privilege, and costs the job nothing while nothing else
// wants the CPU.
func startNiced(c *exec.Cmd, incr int) error {
	if incr == 0 {
		return c.Start()
	}
	errc := make(chan error, 1)
	go func() {
		// Never unlocked: the runtime ends the thread, niced for good, with
		// this goroutine instead of handing it to other goroutines (the main
		// thread, which it cannot end, it parks for good).
		runtime.LockOSThread()
		cur, err := niceOf()
		if err != nil {
			errc <- fmt.Errorf("read nice value: %w", err)
			return
		}
		// 0 names the calling thread, not the whole process.
		if err := syscall.Setpriority(syscall.PRIO_PROCESS, 0, min(cur+incr, maxNice)); err != nil {
			errc <- fmt.Errorf("set nice value %d: %w", min(cur+incr, maxNice), err)
			return
		}
		errc <- c.Start()
	}()
	return <-errc
}
