package stepd

// What a job leaves behind. The shim is its job's child subreaper
// (PR_SET_CHILD_SUBREAPER): a process the job starts and abandons — one in
// the background when the script exits, one detached with setsid, a daemon
// that forked twice — becomes the shim's child instead of init's, so that
// nothing of the job's escapes its step. The shim reaps those orphans as
// they exit (their CPU time counts as the job's); the agent's signals reach
// them (procruntime's Signal: the shim cannot tell the agent's signal from
// a terminal's, which must not reach them); and when the job's process has
// ended the shim kills every process still under it, as Slurm's
// slurmstepd ends a step's leftovers (SIGKILL) with proctrack/cgroup: a
// job's stray process would otherwise hold the node's GPUs and memory
// from the next job, and run on as its owner after its job has ended.

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

// prSetChildSubreaper is prctl's PR_SET_CHILD_SUBREAPER (linux/prctl.h).
const prSetChildSubreaper = 36

// becomeSubreaper makes the calling process the reaper of its
// descendants' orphans.
func becomeSubreaper() error {
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); e != 0 {
		return e
	}
	return nil
}

// oomScoreAdjMin is the OOM killer's "never this one" (OOM_SCORE_ADJ_MIN,
// linux/oom.h).
const oomScoreAdjMin = -1000

// protectFromOOM takes the shim out of the OOM killer's choice: were it
// killed, everything its job detached would go to init, out of any step's
// reach (the sweep, the stop's signals), and the job's end unrecorded. The
// shim itself holds a few megabytes; the memory is its job's, which keeps
// its own regard. Lowering it needs CAP_SYS_RESOURCE (an agent that runs
// as root): otherwise it fails, and the shim runs on as before.
func protectFromOOM() error {
	if err := os.WriteFile("/proc/self/oom_score_adj", []byte(strconv.Itoa(oomScoreAdjMin)+"\n"), 0); err != nil {
		return fmt.Errorf("loom-stepd: oom_score_adj %d: %w", oomScoreAdjMin, err)
	}
	return nil
}

// procInfo is what /proc/<pid>/stat says of a process: its parent, and
// whether it is a zombie (ended, not yet reaped).
type procInfo struct {
	ppid   int
	zombie bool
}

// readProc reads pid's procInfo; ok false when it is gone.
func readProc(pid int) (procInfo, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procInfo{}, false
	}
	// The command name may hold spaces and parentheses: the fields
	// follow its last ')'. After it: state, ppid.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procInfo{}, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return procInfo{}, false
	}
	ppid, err := strconv.Atoi(f[1])
	return procInfo{ppid, f[0] == "Z"}, err == nil
}

// descendants returns the processes under pid (its children, theirs, ...),
// from one look at /proc.
func descendants(pid int) map[int]procInfo {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	infos := map[int]procInfo{}
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if info, ok := readProc(p); ok {
			children[info.ppid] = append(children[info.ppid], p)
			infos[p] = info
		}
	}
	out := map[int]procInfo{}
	queue := append([]int(nil), children[pid]...)
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if _, seen := out[p]; seen {
			continue
		}
		out[p] = infos[p]
		queue = append(queue, children[p]...)
	}
	return out
}

// usage sums the CPU time of the orphans the shim reaped.
type usage struct{ utime, stime time.Duration }

func (u *usage) add(ru *syscall.Rusage) {
	u.utime += time.Duration(ru.Utime.Nano())
	u.stime += time.Duration(ru.Stime.Nano())
}

// waitJob reaps the shim's children until job has ended, and returns how
// it ended; the orphans reaped meanwhile add to extra.
func waitJob(job int, extra *usage) (syscall.WaitStatus, *syscall.Rusage, error) {
	for {
		var ws syscall.WaitStatus
		var ru syscall.Rusage
		pid, err := syscall.Wait4(-1, &ws, 0, &ru)
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case err != nil:
			return 0, nil, err
		case pid == job:
			return ws, &ru, nil
		}
		extra.add(&ru)
	}
}

// sweepWait bounds how long the shim waits for its leftovers to die: a
// process in an uninterruptible wait (a hung file system) dies only when
// it leaves it, and the step's end must not wait for that.
const sweepWait = 5 * time.Second

// sweep kills every process still under the shim and reaps them (their
// CPU time adds to extra); it returns how many were still alive after
// sweepWait (0: none). Zombies get the SIGKILL too: one whose main thread
// exited may still run other threads, and /proc shows it a zombie.
func sweep(extra *usage) (left int) {
	self := os.Getpid()
	deadline := time.Now().Add(sweepWait)
	for {
		procs := descendants(self)
		left = 0
		for p, info := range procs {
			if !info.zombie {
				left++
			}
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
		for {
			var ru syscall.Rusage
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, &ru)
			if err != nil && errors.Is(err, syscall.EINTR) {
				continue
			}
			if err != nil || pid <= 0 {
				break
			}
			extra.add(&ru)
		}
		if len(procs) == 0 {
			return 0
		}
		if time.Now().After(deadline) {
			return left
		}
		time.Sleep(10 * time.Millisecond)
	}
}
