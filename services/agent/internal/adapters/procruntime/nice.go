package procruntime

import (
	"fmt"
	"os/exec"
	"runtime"
	"sync"
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
// new process takes its forking thread's, so c is forked from a thread kept
// for that, niced once (the agent's other threads keep their priority).
// incr 0 is c.Start().
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
	s, err := spawnerFor(incr)
	if err != nil {
		return err
	}
	done := make(chan error, 1)
	s <- spawn{c, done}
	return <-done
}

// spawn asks a spawner to start c and answer on done.
type spawn struct {
	c    *exec.Cmd
	done chan<- error
}

var (
	spawnersMu sync.Mutex
	// spawners holds, by nice increment, the channel of the thread that
	// forks at that increment. The threads live as long as the process:
	// a thread made and ended per start cost more than the fork itself
	// (thread exit was 3 % of all CPU in a slurmbench run). Go forks one
	// process at a time anyway (syscall.ForkLock), so one thread loses
	// nothing.
	spawners = map[int]chan spawn{}
)

// spawnerFor returns the spawner for incr, starting it on first use.
func spawnerFor(incr int) (chan<- spawn, error) {
	spawnersMu.Lock()
	defer spawnersMu.Unlock()
	if s, ok := spawners[incr]; ok {
		return s, nil
	}
	s := make(chan spawn)
	ready := make(chan error, 1)
	go func() {
		// Never unlocked: the thread keeps its nice value and forks for
		// this increment only.
		runtime.LockOSThread()
		cur, err := niceOf()
		if err != nil {
			ready <- fmt.Errorf("read nice value: %w", err)
			return
		}
		// 0 names the calling thread, not the whole process.
		if err := syscall.Setpriority(syscall.PRIO_PROCESS, 0, min(cur+incr, maxNice)); err != nil {
			ready <- fmt.Errorf("set nice value %d: %w", min(cur+incr, maxNice), err)
			return
		}
		ready <- nil
		for r := range s {
			r.done <- r.c.Start()
		}
	}()
	if err := <-ready; err != nil {
		return nil, err
	}
	spawners[incr] = s
	return s, nil
}
