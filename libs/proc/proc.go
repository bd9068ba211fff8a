// Package proc inspects and signals processes and process groups on Unix. On
// Linux it reads /proc so that a recycled pid is never mistaken for the
// process it once named; elsewhere it falls back to signal 0.
package proc

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// hasProc reports whether /proc describes processes here.
var hasProc = func() bool {
	_, err := os.Stat("/proc/self/stat")
	return err == nil
}()

// StartTime returns when pid started (clock ticks since boot on Linux, 0
// where that is not known) and whether it is running. A zombie is not running.
func StartTime(pid int) (uint64, bool) {
	if pid <= 0 {
		return 0, false
	}
	if !hasProc {
		err := syscall.Kill(pid, 0)
		return 0, err == nil || errors.Is(err, syscall.EPERM)
	}
	return startOf(statFields(pid))
}

// startOf is StartTime from a process's stat fields (statFields).
func startOf(f []string, ok bool) (uint64, bool) {
	// f[0] is field 3 (state), so field 22 (starttime) is f[19].
	if !ok || len(f) < 20 || f[0] == "Z" || f[0] == "X" {
		return 0, false
	}
	st, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return 0, false
	}
	return st, true
}

// Parent returns pid's parent process id (0 when unknown: no such process,
// or no /proc).
func Parent(pid int) int {
	f, ok := statFields(pid)
	// f[1] is field 4 (ppid).
	if !ok || len(f) < 2 {
		return 0
	}
	n, _ := strconv.Atoi(f[1])
	return n
}

// Descendants returns the processes under pid: its children, theirs, and
// so on, from one look at /proc (nil without /proc). A process that exits
// or is reparented meanwhile may be missed or listed.
func Descendants(pid int) []int {
	if pid <= 0 || !hasProc {
		return nil
	}
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	for _, d := range dirs {
		p, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		if pp := Parent(p); pp > 0 {
			children[pp] = append(children[pp], p)
		}
	}
	var out []int
	seen := map[int]bool{pid: true}
	for queue := children[pid]; len(queue) > 0; {
		p := queue[0]
		queue = queue[1:]
		if seen[p] {
			continue
		}
		seen[p] = true
		out = append(out, p)
		queue = append(queue, children[p]...)
	}
	return out
}

// statFields returns the fields of /proc/<pid>/stat from field 3 (state)
// on. The command name (field 2) may hold spaces and parentheses: the
// fields follow the last ')'.
func statFields(pid int) ([]string, bool) {
	if pid <= 0 || !hasProc {
		return nil, false
	}
	b, err := readStat(pid)
	if err != nil {
		return nil, false
	}
	return parseStat(b)
}

// parseStat is statFields of a stat file's text.
func parseStat(b []byte) ([]string, bool) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil, false
	}
	return strings.Fields(string(b[i+1:])), true
}

// readStat reads /proc/<pid>/stat in one read into a stack buffer: an agent
// reads it for every process it starts, and os.ReadFile's stat and second
// read double the system calls.
func readStat(pid int) ([]byte, error) {
	var buf [1024]byte // a stat line is ~300 bytes; the comm field is at most 64
	fd, err := syscall.Open("/proc/"+strconv.Itoa(pid)+"/stat", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer syscall.Close(fd)
	n, err := syscall.Read(fd, buf[:])
	if err != nil {
		return nil, err
	}
	if n == len(buf) {
		return os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat") // longer than any we know: read it all
	}
	return buf[:n], nil
}

// Wait waits for c's process to exit and reaps it (c.Wait), learning of the
// exit first with AwaitExit, so that no thread sits blocked in waitid for
// the process's whole life. Where AwaitExit cannot wait, c.Wait does.
func Wait(c *exec.Cmd) error {
	_ = AwaitExit(c.Process.Pid)
	return c.Wait()
}

// Alive reports whether pid runs and, when start is not 0, is the process
// that started at start.
func Alive(pid int, start uint64) bool {
	st, ok := StartTime(pid)
	return ok && (start == 0 || st == 0 || st == start)
}

// KillGroup sends sig to the process group pgid, and, when its leader leads
// a session or is gone, to the session's other processes; a group that is
// gone is not an error.
func KillGroup(pgid int, sig syscall.Signal) error {
	if pgid <= 1 {
		return fmt.Errorf("kill group %d: refusing to signal a pgid <= 1", pgid)
	}
	// A session outlives its leader: the agent kills a step's group once it
	// has reaped the leader (a terminal's shell that exited), and what the
	// shell left in groups of their own (sleep &) still has the leader's
	// pid as its session id. A leader that lives and leads no session has
	// no such session.
	_, alive := statFields(pgid)
	leads := !alive || leadsSession(pgid)
	if err := syscall.Kill(-pgid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("kill group %d with %v: %w", pgid, sig, err)
	}
	if leads {
		// Its session's other groups too (a terminal's shell puts each
		// job in a group of its own): they are the unit's.
		for _, pid := range sessionMembers(pgid) {
			_ = syscall.Kill(pid, sig)
		}
	}
	return nil
}

// KillDescendants sends sig to the processes under pid that KillGroup(pid)
// does not reach: those outside pid's group and, when pid leads a session,
// outside its session too (what a job detached with setsid or a double
// fork, and that a subreaper such as loom-stepd keeps under it). Zombies
// get it too (harmlessly: one whose main thread exited may still run
// other threads). It returns how many of them were not zombies.
//
// A process is signalled only if it is still under pid as the signal goes
// (stillUnder): the look at /proc comes first, and a process seen then may
// since have died and its pid gone to someone else's.
func KillDescendants(pid int, sig syscall.Signal) int { return killDescendants(pid, sig, nil) }

// killDescendants is KillDescendants, calling looked (when not nil)
// between its look at the processes under pid and the signals.
func killDescendants(pid int, sig syscall.Signal, looked func()) int {
	if pid <= 1 {
		return 0
	}
	self, session := strconv.Itoa(pid), leadsSession(pid)
	ds := Descendants(pid)
	under := stillUnder(pid, ds)
	if looked != nil {
		looked()
	}
	n := 0
	for _, d := range ds {
		f := signalStill(d, sig, func(f []string) bool {
			return f[2] != self && !(session && f[3] == self) && under(f)
		})
		if f != nil && f[0] != "Z" {
			n++
		}
	}
	return n
}

// stillUnder returns a test of a process's stat fields (statFields: state,
// ppid, pgrp, session, ...) that passes when its parent is pid or one of
// ds, the processes a look found under pid: it is still under pid. A
// process that was under pid and whose parent has died since is under the
// nearest subreaper: pid, for a shim, else it has left.
func stillUnder(pid int, ds []int) func(f []string) bool {
	set := make(map[int]bool, len(ds)+1)
	set[pid] = true
	for _, d := range ds {
		set[d] = true
	}
	return func(f []string) bool {
		pp, err := strconv.Atoi(f[1])
		return err == nil && set[pp]
	}
}

// KillUnder sends sig to every process under pid (its children, theirs,
// ...), whatever their group or session, and to the other processes of
// pid's group and, when pid leads a session, of its session (those an
// orphan's re-parenting took from under it, where pid is no subreaper),
// but not to pid: what a subreaper such as loom-stepd keeps under it, ended
// while the subreaper lives on to reap it (and to receive what they fork
// meanwhile). It returns how many of them were not zombies.
//
// A process is signalled only if, as the signal goes, it is still under
// pid (stillUnder) or in its group or session: the agent calls this as
// root, and a process the look at /proc found under pid may since have
// died and its pid gone to another user's process.
func KillUnder(pid int, sig syscall.Signal) int { return killUnder(pid, sig, nil) }

// killUnder is KillUnder, calling looked (when not nil) between its look
// at the processes under pid and the signals.
func killUnder(pid int, sig syscall.Signal, looked func()) int {
	if pid <= 1 {
		return 0
	}
	self := strconv.Itoa(pid)
	ds := Descendants(pid)
	under := stillUnder(pid, ds)
	if looked != nil {
		looked()
	}
	ours := func(f []string) bool { return f[2] == self || f[3] == self || under(f) }
	n := 0
	kill := func(d int) {
		if f := signalStill(d, sig, ours); f != nil && f[0] != "Z" {
			n++
		}
	}
	seen := make(map[int]bool, len(ds))
	for _, d := range ds {
		seen[d] = true
		kill(d)
	}
	names, _ := readDirNames("/proc")
	for _, name := range names {
		d, err := strconv.Atoi(name)
		if err != nil || d <= 1 || d == pid || seen[d] {
			continue
		}
		kill(d)
	}
	return n
}

// readDirNames lists dir's names, unsorted: a walk of /proc needs no
// order, and os.ReadDir would sort every pid's name for nothing.
func readDirNames(dir string) ([]string, error) {
	d, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return d.Readdirnames(-1)
}

// leadsSession reports whether pid leads a session (its session id is its
// own pid).
func leadsSession(pid int) bool {
	f, ok := statFields(pid)
	return ok && len(f) > 3 && f[3] == strconv.Itoa(pid)
}

// sessionMembers lists the processes of session sid outside its leader's
// group, by a walk of /proc.
func sessionMembers(sid int) []int {
	names, _ := readDirNames("/proc")
	var out []int
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil || pid <= 1 {
			continue
		}
		if f, ok := statFields(pid); ok && len(f) > 3 && f[3] == strconv.Itoa(sid) && f[2] != strconv.Itoa(sid) {
			out = append(out, pid)
		}
	}
	return out
}

// GroupAlive reports whether any process of group pgid exists.
func GroupAlive(pgid int) bool {
	if pgid <= 1 {
		return false
	}
	err := syscall.Kill(-pgid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// WaitGone polls until gone returns true or d passes, and reports whether it did.
func WaitGone(d time.Duration, gone func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if gone() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// FindByEnv returns the pids of running processes whose environment holds
// exactly the entry kv ("KEY=value"). It finds nothing where /proc is missing.
//
// It reads every process's environment, and a read of /proc/<pid>/environ
// waits for that process's memory map lock, which its process can have held
// for as long as it likes (docs/security.md): each read is given up after
// readWait, and the look's reads of each real uid's processes after
// lookBound (LookByEnvOf, waits), but a process that any user stalls is then
// not looked at. A caller that knows whose processes
// it looks for uses FindByEnvOf.
func FindByEnv(kv string) []int { return findByEnv(kv, -1).Found }

// FindByEnvOf is LookByEnvOf's Found.
func FindByEnvOf(kv string, uid uint32) []int { return LookByEnvOf(kv, uid).Found }

// EnvLook is what a look at the processes' environments found.
type EnvLook struct {
	// Found holds the pids of the running processes whose environment
	// holds the entry.
	Found []int
	// Unread holds the pids of the processes looked at whose environment
	// could not be read in time (readWait, lookBound, maxStuckPerUID,
	// maxStuckReads): a read blocked on the process's memory map lock, or
	// too many of its uid's. Whether they hold the entry is not known.
	Unread []int
}

// LookByEnvOf finds, among the processes of uid alone, those whose
// environment holds exactly the entry kv ("KEY=value"): one whose real user
// id (the first of the Uid line of /proc/<pid>/status, read without the
// process's memory map lock) is not uid is passed over before its
// environment is read, so that no other user's process can stall it.
//
// uid's own processes can hold the read of their environment (it waits on
// their memory map lock, which a process can have held without end), and
// the look does not wait for them without bound: each read runs on a
// goroutine of its own and is given up after readWait, the look's reads
// after lookBound in all; a process whose read was given up is in Unread.
// A read given up stays blocked, with its thread, until the lock is let go
// (the process is killed, or lets it go): at most maxStuckPerUID of them
// for the processes of one real uid, and maxStuckReads for the whole
// program; past either, and for a process whose read is still blocked from
// an earlier look, no read is tried and the process is in Unread at once.
// So a look ends within execWait + lookBound, whatever uid's processes do,
// a second look is not held up again by the same process, and one uid's
// stalled processes leave another's read (readBounded).
//
// The real uid alone, not the effective, saved or filesystem one: it is who
// started the process, and what a process started as uid keeps through a
// set-user-ID program it runs (its own, root's: passwd, sudo before it
// switches), so uid's processes are all found. A process that another user
// started and that merely holds uid in another slot (it runs a program of
// uid's that is set-user-ID, or it is a root daemon acting for uid with
// seteuid or setfsuid) is that user's, and is not read: neither whose
// environment is another user's to keep, nor whose memory map lock is
// another user's to hold.
//
// The uid check and the reads after it go through one descriptor of the
// process's /proc directory, so they are all of that process: one that
// took its pid between them is not read (findByEnvIn).
func LookByEnvOf(kv string, uid uint32) EnvLook { return findByEnv(kv, int64(uid)) }

// findByEnv is LookByEnvOf among the processes of uid, or of anyone for -1.
func findByEnv(kv string, uid int64) EnvLook {
	if !hasProc {
		return EnvLook{}
	}
	return findByEnvIn("/proc", kv, uid, nil)
}

// findByEnvIn is findByEnv reading the process directories under root (a
// test's stand-in for /proc), calling checked (when not nil) with each pid
// whose uid passed, before its environment is read.
//
// Each process's directory is opened once and all of it read through that
// descriptor (its status, then its environment, then its stat): a
// descriptor of /proc/<pid> stays the process it was opened for, and once
// that process is gone every file opened through it fails (ESRCH), where
// the path /proc/<pid> could by then name another process that took the
// pid, whose environment the uid check did not clear.
func findByEnvIn(root, kv string, uid int64, checked func(pid int)) EnvLook {
	dirs, err := filepath.Glob(filepath.Join(root, "[0-9]*"))
	if err != nil {
		return EnvLook{}
	}
	var out EnvLook
	b := budget{exec: time.Now().Add(execWait), reads: waits{}}
	for _, d := range dirs {
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil || pid == os.Getpid() {
			continue
		}
		dir, err := os.OpenRoot(d)
		if err != nil {
			continue // gone
		}
		switch found, err := hasEnvOf(dir, pid, kv, uid, b, checked); {
		case err != nil:
			out.Unread = append(out.Unread, pid)
		case found:
			out.Found = append(out.Found, pid)
		}
		dir.Close()
	}
	return out
}

// budget is how long a look may wait: for processes caught in execve (to
// exec), and for reads that block (reads, by uid).
type budget struct {
	exec  time.Time
	reads waits
}

// waits is what a look or a usage sample has spent on reads (readBounded),
// by the real uid of the processes read: each uid may spend lookBound, so
// that one uid's stalled processes, which can spend all of theirs, leave
// every other uid's read in the same look or sample.
type waits map[int64]time.Duration

// read is readBounded of uid's process within what uid has left of its
// lookBound, charging uid the time it took.
func (w waits) read(dir *os.Root, name string, key stuckKey, uid int64) ([]byte, error) {
	began := time.Now()
	b, err := readBounded(dir, name, key, uid, began.Add(lookBound-w[uid]))
	w[uid] += time.Since(began)
	return b, err
}

// hasEnvOf reports whether the process whose /proc directory is dir (pid)
// has real uid uid (any for -1), holds kv in its environment and runs; the
// error is errUnread where its environment could not be read in time.
func hasEnvOf(dir *os.Root, pid int, kv string, uid int64, b budget, checked func(int)) (bool, error) {
	owner := uid // the real uid its reads are charged to (readBounded)
	if uid >= 0 {
		st, err := dir.ReadFile("status")
		if err != nil || realUID(st) != uid {
			return false, nil
		}
	} else {
		owner = ownerIn(dir)
	}
	if checked != nil {
		checked(pid)
	}
	// The start time keys a read given up (stuckKey): read first, from
	// stat, which is made without the memory map lock.
	start, ok := startOf(statFieldsIn(dir))
	if !ok {
		return false, nil
	}
	found, err := hasEnvIn(dir, kv, stuckKey{pid, start}, owner, b)
	if err != nil || !found {
		return false, err
	}
	_, ok = startOf(statFieldsIn(dir))
	return ok, nil
}

// realUID returns the real user id in a /proc/<pid>/status file's text
// (the first field of its Uid line: real, effective, saved, filesystem),
// or -1 when it has none. The status file is made from the process's
// credentials and counters, without its memory map lock, so reading it
// cannot be stalled as reading its environment can.
func realUID(status []byte) int64 {
	for line := range bytes.SplitSeq(status, []byte{'\n'}) {
		ids, ok := bytes.CutPrefix(line, []byte("Uid:"))
		if !ok {
			continue
		}
		f := bytes.Fields(ids)
		if len(f) == 0 {
			return -1
		}
		n, err := strconv.ParseUint(string(f[0]), 10, 32)
		if err != nil {
			return -1
		}
		return int64(n)
	}
	return -1
}

// HasEnv reports whether pid's environment, as it started with it, holds
// exactly the entry kv ("KEY=value"): false where /proc is missing, the
// process is not ours to read, or its environment cannot be read in time
// (readWait: a read blocked on its memory map lock, see LookByEnvOf).
//
// A process caught inside execve is waited out (up to execWait): the
// kernel installs the new image before it sets where its environment lies,
// and reads in between find none. exec.Cmd.Start returns inside that
// window (once the close-on-exec descriptors are closed), so a process
// just started would otherwise be missed, by `loom up` looking for a node
// agent or an agent for a step's processes.
func HasEnv(pid int, kv string) bool {
	return hasEnvBy(pid, kv, budget{exec: time.Now().Add(execWait), reads: waits{}})
}

// hasEnvBy is HasEnv within b: FindByEnv shares one among every process
// it reads, so that processes made to look caught in execve (no arguments,
// no environment: any user can start them) cost it execWait in all, not
// each, and reads that block lookBound for each real uid (waits).
func hasEnvBy(pid int, kv string, b budget) bool {
	if !hasProc || pid <= 0 {
		return false
	}
	dir, err := os.OpenRoot("/proc/" + strconv.Itoa(pid))
	if err != nil {
		return false
	}
	defer dir.Close()
	start, ok := startOf(statFieldsIn(dir))
	if !ok {
		return false
	}
	found, err := hasEnvIn(dir, kv, stuckKey{pid, start}, ownerIn(dir), b)
	return err == nil && found
}

// hasEnvIn is hasEnvBy of the process whose /proc directory is dir (key,
// of real uid uid: its reads are charged to it, readBounded):
// each of its reads (environ, cmdline, stat) is of that process, never of
// another that took its pid meanwhile (see findByEnvIn). The reads of
// environ and cmdline, which wait on the process's memory map lock, go
// through readBounded; the error is errUnread where one was given up.
func hasEnvIn(dir *os.Root, kv string, key stuckKey, uid int64, b budget) (bool, error) {
	bytesOf, errOf := b.reads.read(dir, "environ", key, uid)
	if errors.Is(errOf, errUnread) {
		return false, errOf
	}
	for errOf == nil && len(bytesOf) == 0 && userProcessIn(dir) && time.Now().Before(b.exec) {
		// The kernel sets the command line's bounds, then the
		// environment's: once the first is seen, one more read after a
		// moment finds the environment if there is one.
		args, aerr := b.reads.read(dir, "cmdline", key, uid)
		if errors.Is(aerr, errUnread) {
			return false, aerr
		}
		time.Sleep(time.Millisecond)
		bytesOf, errOf = b.reads.read(dir, "environ", key, uid)
		if errors.Is(errOf, errUnread) {
			return false, errOf
		}
		if aerr != nil || len(args) > 0 {
			break
		}
	}
	if errOf != nil {
		return false, nil
	}
	want := []byte(kv)
	for _, e := range bytes.Split(bytesOf, []byte{0}) {
		if bytes.Equal(e, want) {
			return true, nil
		}
	}
	return false, nil
}

// errUnread is readBounded's error for a read not done in time.
var errUnread = errors.New("read given up: it waits on the process's memory map lock")

// stuckKey names a process across pid reuse: its pid and start time.
type stuckKey struct {
	pid   int
	start uint64
}

// stuck counts the reads in flight (started and not yet returned: those
// being waited for and those given up), for the whole program (n: at most
// maxStuckReads) and by the real uid of the process read (uids: at most
// maxStuckPerUID each), and the processes whose reads were given up and
// are still blocked (keys: how many of each). flight holds, for each
// process with a read in flight, a channel closed when that read returns:
// one read of a process at a time. capOf is a test's lower cap for a uid of
// its own (nil but in tests): a uid's cap, unlike the whole program's, can
// be lowered without touching other tests' reads.
var stuck struct {
	sync.Mutex
	n      int
	uids   map[int64]int
	keys   map[stuckKey]int
	flight map[stuckKey]chan struct{}
	capOf  map[int64]int
}

// readBounded reads the file name of dir (the /proc directory of the
// process key, whose real uid is uid: ownerIn) on a goroutine of its own,
// and waits for it readWait at most, and not past deadline: a read of
// environ, cmdline or smaps_rollup waits on the process's memory map lock,
// which the process can have held without end (io, on its exec lock:
// GroupUsage).
// A read not done by then is given up (errUnread) and left blocked, on its
// thread, until the lock is let go: the wait for the lock cannot be broken
// from here but by killing this program. So that such threads stay few,
// no read is tried (errUnread at once) while maxStuckPerUID reads of uid's
// processes are in flight, or maxStuckReads of anyone's, nor of a process
// whose read is still blocked from before, nor once deadline has passed.
// Nor is one tried while another read of the process is in flight (a
// concurrent look's or sample's, of any of its files): this one waits for
// that read's end, within its own wait, and then reads; where that read
// does not end in time this one is given up without a read of its own, so
// that concurrent looks leave one blocked thread per stalled process, not
// one each (TestConcurrentReadsOfAStalledProcessBlockOne).
//
// The cap is a uid's own, so that one user's processes, which can hold
// their locks for as long as they like, spend only their own: another
// user's processes are read as before (TestStalledUIDLeavesOthersRead).
// The real uid, as LookByEnvOf's, is who started the process and keeps it
// through a set-user-ID program; one who could stall a process with
// another real uid (ptrace, a root daemon's memory) can stall that uid's
// reads, as it could kill them.
func readBounded(dir *os.Root, name string, key stuckKey, uid int64, deadline time.Time) ([]byte, error) {
	end := time.Now().Add(min(readWait, time.Until(deadline)))
	stuck.Lock()
	for {
		limit := maxStuckPerUID
		if c, ok := stuck.capOf[uid]; ok {
			limit = c
		}
		if !time.Now().Before(end) || stuck.n >= maxStuckReads || stuck.uids[uid] >= limit || stuck.keys[key] > 0 {
			stuck.Unlock()
			return nil, errUnread
		}
		busy, ok := stuck.flight[key]
		if !ok {
			break
		}
		// Another read of the process is in flight: wait for it, then
		// look again (it may have been given up meanwhile: keys).
		stuck.Unlock()
		t := time.NewTimer(time.Until(end))
		select {
		case <-busy:
			t.Stop()
		case <-t.C:
			return nil, errUnread
		}
		stuck.Lock()
	}
	stuck.n++
	if stuck.uids == nil {
		stuck.uids = map[int64]int{}
	}
	stuck.uids[uid]++
	if stuck.flight == nil {
		stuck.flight = map[stuckKey]chan struct{}{}
	}
	busy := make(chan struct{})
	stuck.flight[key] = busy
	stuck.Unlock()
	type result struct {
		b   []byte
		err error
	}
	done := make(chan result, 1) // the read never waits on its reader
	abandoned := false           // under stuck's lock
	go func() {
		b, err := dir.ReadFile(name)
		done <- result{b, err}
		stuck.Lock()
		stuck.n--
		if stuck.uids[uid]--; stuck.uids[uid] <= 0 {
			delete(stuck.uids, uid)
		}
		delete(stuck.flight, key)
		close(busy)
		if abandoned {
			if stuck.keys[key]--; stuck.keys[key] <= 0 {
				delete(stuck.keys, key)
			}
		}
		stuck.Unlock()
	}()
	t := time.NewTimer(time.Until(end))
	defer t.Stop()
	select {
	case r := <-done:
		return r.b, r.err
	case <-t.C:
	}
	stuck.Lock()
	defer stuck.Unlock()
	select {
	case r := <-done: // done as the wait ended
		return r.b, r.err
	default:
	}
	abandoned = true
	if stuck.keys == nil {
		stuck.keys = map[stuckKey]int{}
	}
	stuck.keys[key]++
	return nil, errUnread
}

// ownerIn returns the real uid of the process whose /proc directory is dir
// (realUID of its status, made without its memory map lock), -1 where it
// cannot be read: the process is gone, and its reads fail at once. The
// uid readBounded charges a read to.
func ownerIn(dir *os.Root) int64 {
	st, err := dir.ReadFile("status")
	if err != nil {
		return -1
	}
	return realUID(st)
}

// readWait bounds the wait for one read of a process's environment or
// command line (or smaps_rollup, io: GroupUsage): one that is not blocked
// takes microseconds (a page or two copied), milliseconds on a starved
// machine. lookBound bounds a look's or a usage sample's waits on the
// reads of one real uid's processes (waits: LookByEnvOf, GroupUsage). maxStuckPerUID bounds how many
// reads of one uid's processes may be in flight, given up reads that stay
// blocked (each holding a thread) among them: with readWait, it makes
// lookBound reachable only by a process set on stalling them, and a uid
// that spends it has only its own processes left unread. maxStuckReads
// bounds them for the whole program, so that the threads stay few however
// many users stall reads: 256 blocked threads at worst (each a kernel
// stack and a Go thread's, some tens of KiB: a few MiB in all), reached
// only by 16 uids each holding 16 at once, and past which every process
// is unread until one lets go.
const (
	readWait       = 100 * time.Millisecond
	lookBound      = time.Second
	maxStuckPerUID = 16
	maxStuckReads  = 256
)

// execWait bounds how long HasEnv waits for a process inside execve to get
// its environment: the window is microseconds to a few milliseconds (the
// new image's pages read in), longer only on a starved machine. A process
// with neither arguments nor environment costs HasEnv this, once; one with
// arguments and no environment, a millisecond; FindByEnv, this in all
// (besides lookBound, for reads that block).
const execWait = 100 * time.Millisecond

// userProcessIn reports whether the process whose /proc directory is dir
// is a live user process: not a zombie (whose environment is gone), not a
// kernel thread (which never has one).
func userProcessIn(dir *os.Root) bool {
	f, ok := statFieldsIn(dir)
	// f[0] is field 3 (state); f[6] field 9 (flags).
	if !ok || len(f) < 7 || f[0] == "Z" || f[0] == "X" {
		return false
	}
	flags, err := strconv.ParseUint(f[6], 10, 64)
	return err == nil && flags&pfKthread == 0
}

// statFieldsIn is statFields of the process whose /proc directory is dir.
func statFieldsIn(dir *os.Root) ([]string, bool) {
	b, err := dir.ReadFile("stat")
	if err != nil {
		return nil, false
	}
	return parseStat(b)
}

// pfKthread is the kernel's PF_KTHREAD process flag (include/linux/sched.h):
// a kernel thread has no environment ever.
const pfKthread = 0x00200000

// ExitCode returns a finished process's exit code, 128+n when signal n ended
// it, and the signal's name ("" when it exited).
func ExitCode(ps *os.ProcessState) (int32, string) {
	if ps == nil {
		return -1, ""
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return int32(128 + int(ws.Signal())), ws.Signal().String()
	}
	return int32(ps.ExitCode()), ""
}
