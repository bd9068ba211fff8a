package proc

import (
	"bytes"
	"errors"
	"os"
	"strconv"
	"syscall"
	"time"
)

// Usage is what the live processes of one process group use at one instant,
// summed over them, as Slurm's jobacct_gather/linux reads it from /proc.
type Usage struct {
	// Processes is how many processes were counted.
	Processes int
	// UserCPU and SystemCPU are the processes' CPU time, with that of the
	// children they waited for (cutime, cstime): a child reaped by a
	// process of the group is counted once, by its parent.
	UserCPU, SystemCPU time.Duration
	// RSS and VMSize are resident and virtual memory, in bytes. PSS is the
	// proportional set size: each page shared with other processes counted
	// as its share (/proc/PID/smaps_rollup; RSS where that cannot be read,
	// or not in time: see Unread), so that forked workers sharing their
	// parent's pages are not counted again for each.
	RSS, VMSize, PSS int64
	// ReadBytes and WriteBytes are what the processes caused to be read
	// from and written to storage (/proc/PID/io; 0 where it cannot be read,
	// or not in time).
	ReadBytes, WriteBytes int64
	// Unread is how many of the processes counted had their smaps_rollup
	// or io not read in time, or not tried (GroupUsage): their PSS is
	// their RSS, and their I/O counts are missing from this sample.
	Unread int
}

// clockTick is the unit of /proc's CPU times: USER_HZ, 100 on every Linux
// ABI Go supports (sysconf(_SC_CLK_TCK) returns the same constant).
const clockTick = 10 * time.Millisecond

// pageSize is the unit of /proc's RSS.
var pageSize = int64(os.Getpagesize())

// GroupUsage samples, in one walk of /proc, every live process whose
// process group is in groups (or whose session is: a group's leader that
// leads a session keeps what moved to other groups of it), and returns their usage summed by group
// (groups with no live process are absent). Without leaders a group's
// leader (the process whose pid is the group's id: a shim that runs the
// job under it) is not counted. A process that exits during the walk is
// skipped. Where /proc is absent it returns nothing.
//
// A sample ends within lookBound for each real uid among its processes,
// whatever they do (a uid's stalled processes spend its own: waits).
// A read of /proc/PID/smaps_rollup waits on the process's memory map lock,
// which the process can have held without end (as for its environment:
// LookByEnvOf, docs/security.md; stat does not take it, which
// TestGroupUsageGivesUpAStalledRead shows). /proc/PID/io does not take it
// either, but waits on the process's exec lock (exec_update_lock), which
// its own execve holds while it swaps memory maps: it is bounded too,
// at no cost, rather than rely on no kernel letting that wait on the old
// map's lock. Both go through readBounded, each given up after readWait,
// the sample's reads of one uid's processes after lookBound in all (that
// uid's, not another's: TestStalledUIDSpendsOnlyItsOwnWait), and not tried while a read of the
// process given up before is still blocked, nor while its real uid's
// processes have maxStuckPerUID reads in flight (another uid's are read
// as usual: readBounded). A process whose reads were given up, or not
// tried, is still counted, from its stat (made without either lock): its
// CPU time, RSS and virtual size, its PSS taken to be its RSS (an upper
// bound, which the process cannot lower by holding its lock: the memory
// limit is judged by PSS, and leaving the process out, or keeping its last
// PSS, would hide from it what the process touches from then on), and no
// I/O counts, so that its group's counters (kept at their highest:
// acct.Usage) keep their last value. Unread counts such processes. One
// left unread for its uid's spent budget alone is counted the same way: it
// is that uid's, whose processes hold the reads, and which would otherwise
// hide what its next processes touch by stalling the reads first; the
// cost (PSS judged as RSS, shared pages counted in each process) falls on
// that uid alone, until the whole program's maxStuckReads is reached.
func GroupUsage(groups map[int]bool, leaders bool) map[int]Usage {
	if !hasProc || len(groups) == 0 {
		return nil
	}
	w := waits{}
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	defer d.Close()
	out := map[int]Usage{}
	for {
		names, err := d.Readdirnames(512)
		for _, name := range names {
			pid, err := strconv.Atoi(name)
			if err != nil || pid <= 0 {
				continue
			}
			s, ok := sampleStat(pid)
			if !ok {
				continue
			}
			// A group's leader may lead a session too (a step with a
			// terminal): what left the group for a group of its own in
			// that session (a shell's jobs) is still the group's.
			g := s.pgrp
			if !groups[g] && groups[s.session] {
				g = s.session
			}
			if !groups[g] || (!leaders && pid == g) {
				continue
			}
			u := out[g]
			u.Processes++
			u.UserCPU += s.user
			u.SystemCPU += s.system
			u.RSS += s.rss
			u.VMSize += s.vsize
			pss, r, w, ok := sampleReads(pid, s, w)
			u.PSS += pss
			u.ReadBytes += r
			u.WriteBytes += w
			if !ok {
				u.Unread++
			}
			out[g] = u
		}
		if err != nil || len(names) == 0 {
			break
		}
	}
	return out
}

// statSample is what GroupUsage reads of one /proc/PID/stat.
type statSample struct {
	pgrp, session int
	user, system  time.Duration
	vsize, rss    int64
	start         uint64
}

// sampleStat reads pid's stat line: its group, CPU times (its own and its
// waited-for children's), virtual and resident size. A zombie is skipped:
// its parent's wait will count it.
func sampleStat(pid int) (statSample, bool) {
	f, ok := statFields(pid)
	// f[0] is field 3 (state): field n is f[n-3]. pgrp 5, session 6, utime 14, stime
	// 15, cutime 16, cstime 17, vsize 23, rss 24 (pages).
	if !ok || len(f) < 22 || f[0] == "Z" || f[0] == "X" {
		return statSample{}, false
	}
	num := func(i int) int64 {
		n, _ := strconv.ParseInt(f[i], 10, 64)
		return max(n, 0)
	}
	return statSample{
		pgrp:    int(num(2)),
		session: int(num(3)),
		user:    time.Duration(num(11)+num(13)) * clockTick,
		system:  time.Duration(num(12)+num(14)) * clockTick,
		start:   uint64(num(19)),
		vsize:   num(20),
		rss:     num(21) * pageSize,
	}, true
}

// sampleReads reads pid's smaps_rollup and io (s its stat sample), each
// through readBounded (see GroupUsage), and returns its proportional set
// size (s.rss where smaps_rollup cannot be read, or not in time) and bytes
// read and written (0 where io cannot be read); ok is false where a read
// was given up. The process is keyed by the start time of s: a read of it
// given up stays blocked until it lets its lock go, and is not tried again
// meanwhile.
func sampleReads(pid int, s statSample, w waits) (pss, read, write int64, ok bool) {
	dir, err := os.OpenRoot("/proc/" + strconv.Itoa(pid))
	if err != nil {
		return s.rss, 0, 0, true // gone
	}
	defer dir.Close()
	key, uid := stuckKey{pid, s.start}, ownerIn(dir)
	b, err := w.read(dir, "smaps_rollup", key, uid)
	if errors.Is(err, errUnread) {
		return s.rss, 0, 0, false
	}
	pss = parsePSS(b, err, s.rss)
	b, err = w.read(dir, "io", key, uid)
	if errors.Is(err, errUnread) {
		return pss, 0, 0, false
	}
	read, write = parseIO(b, err)
	return pss, read, write, true
}

// parsePSS returns the proportional set size, in bytes, of a process whose
// /proc/PID/smaps_rollup read returned b and err; rss where it could not be
// read (an old kernel, another user's process to an agent that is not
// root).
func parsePSS(b []byte, err error, rss int64) int64 {
	if err != nil {
		return rss
	}
	for line := range bytes.SplitSeq(b, []byte{'\n'}) {
		if v, ok := bytes.CutPrefix(line, []byte("Pss:")); ok {
			kb, err := strconv.ParseInt(string(bytes.TrimSpace(bytes.TrimSuffix(bytes.TrimSpace(v), []byte("kB")))), 10, 64)
			if err != nil || kb < 0 {
				return rss
			}
			return kb << 10
		}
	}
	return rss
}

// parseIO returns the read_bytes and write_bytes of a process whose
// /proc/PID/io read returned b and err (0, 0 where it could not be read:
// another user's process to an agent that is not root).
func parseIO(b []byte, err error) (read, write int64) {
	if err != nil {
		return 0, 0
	}
	for line := range bytes.SplitSeq(b, []byte{'\n'}) {
		k, v, ok := bytes.Cut(line, []byte(": "))
		if !ok {
			continue
		}
		n, _ := strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64)
		switch string(k) {
		case "read_bytes":
			read = max(n, 0)
		case "write_bytes":
			write = max(n, 0)
		}
	}
	return read, write
}

// HighWater returns this process's peak resident size in bytes (VmHWM of
// /proc/self/status); 0 where it is not known. A child started from Go
// shares this process's memory until it execs, and the kernel counts that
// memory's peak in the child's ru_maxrss: a child's maxRSS (Rusage) no
// higher than its parent's high water says nothing of the child.
func HighWater() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range bytes.SplitSeq(b, []byte{'\n'}) {
		if v, ok := bytes.CutPrefix(line, []byte("VmHWM:")); ok {
			kb, _ := strconv.ParseInt(string(bytes.TrimSpace(bytes.TrimSuffix(bytes.TrimSpace(v), []byte("kB")))), 10, 64)
			return max(kb, 0) << 10
		}
	}
	return 0
}

// Rusage returns what a finished process and the children it waited for
// used, as wait4 reported it: CPU time, and the largest resident set one of
// them reached, in bytes. Zero where it is not known.
func Rusage(ps *os.ProcessState) (user, system time.Duration, maxRSS int64) {
	if ps == nil {
		return 0, 0, 0
	}
	ru, ok := ps.SysUsage().(*syscall.Rusage)
	if !ok || ru == nil {
		return 0, 0, 0
	}
	// Linux counts ru_maxrss in kilobytes.
	return time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano()), max(int64(ru.Maxrss), 0) * 1024
}
