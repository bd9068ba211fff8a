// Package stall starts, for a test, a real process whose environment cannot
// be read: a read of its /proc/<pid>/environ (or cmdline, smaps_rollup:
// any read that takes its memory map lock) blocks until the process is
// killed, as one of a hostile job's can make it (docs/security.md,
// "Finding a step's processes after a restart").
//
// The process (the helper) is the test binary again: Main, called first
// thing from the test's TestMain, takes that role. In a mount namespace of
// its own it serves a FUSE file system and maps a page of a file of it.
// A second process (the reader, the test binary again too) reads that
// page through /proc/<helper>/mem: the kernel takes the helper's memory
// map lock for reading, faults the page in without letting go of the lock
// (a remote get_user_pages), asks the helper for the page (FUSE_READ), and
// the helper never answers. A thread of the helper then asks for the lock
// for writing (mmap), and waits behind the reader; every read after it
// waits behind that writer: a read of the helper's environment or command
// line among them (the mmap_read_lock_killable of access_remote_vm). This
// is the hold a hostile job's process can keep on its own lock. Killing
// the helper ends its FUSE connection: the reader's read fails (EIO) and
// every waiter goes on.
//
// What does not work, on the kernel this was made on (6.18): a fault on a
// userfaultfd range, or a user fault on a FUSE page, lets go of the lock
// before it waits; the environment's own pages cannot be FUSE's (its read
// passes FOLL_ANON: a file page fails it at once) and a userfaultfd page
// there fails it too (no retry: SIGBUS).
//
// It needs root (a FUSE mount, in a mount namespace of its own) and
// /dev/fuse; Start skips the test, saying which, without them. It imports
// nothing of Loom's, so libs/proc's tests can use it.
package stall

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// dirEnv names, in the helper's environment, the directory it mounts on,
// and uidEnv the user it becomes once it has (StartAs); memEnv, in its
// reader's, the helper's pid and the address to read.
const (
	dirEnv = "LOOM_TESTKIT_STALL_DIR"
	uidEnv = "LOOM_TESTKIT_STALL_UID"
	memEnv = "LOOM_TESTKIT_STALL_MEM"
)

// Main is the helper's body when the test binary was started by Start, and
// returns at once otherwise: call it first in TestMain. It never returns in
// the helper.
func Main() {
	if target, ok := os.LookupEnv(memEnv); ok {
		// The reader: its read of the helper's memory, at the FUSE
		// page, waits for a FUSE read that is never answered, holding
		// the helper's memory map lock for reading all along.
		pid, addr, _ := strings.Cut(target, " ")
		a, _ := strconv.ParseInt(addr, 10, 64)
		if f, err := os.Open("/proc/" + pid + "/mem"); err == nil {
			_, _ = f.ReadAt(make([]byte, 1), a) // fails (EIO) once the helper is gone
		}
		os.Exit(0)
	}
	dir, ok := os.LookupEnv(dirEnv)
	if !ok {
		return
	}
	parent := os.Getppid() // the test binary, whose death kills this one
	uid := -1
	if v, ok := os.LookupEnv(uidEnv); ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			fmt.Printf("skip: %s=%q is not a uid\n", uidEnv, v)
			os.Exit(0)
		}
		uid = n
	}
	if err := serve(dir, uid, parent); err != nil {
		fmt.Printf("skip: %v\n", err)
		os.Exit(0)
	}
	os.Exit(0)
}

// Start starts the helper with env (entries "KEY=value", which a read of
// its environment never gets to) and returns its pid once a read of its
// environment blocks. It kills and reaps it when t ends; a test binary
// killed before (its cleanups not run) takes the helper with it. It skips
// t when the helper cannot be made here, saying why.
func Start(t testing.TB, env ...string) int {
	t.Helper()
	return start(t, -1, env)
}

// StartAs is Start with a helper whose user ids (real, effective, saved;
// its group ids too) are uid: a process of that user, as a job's is,
// whose reads another user's must not pay for. It mounts and maps its
// file as root first, then becomes uid, holding no capability after.
func StartAs(t testing.TB, uid uint32, env ...string) int {
	t.Helper()
	return start(t, int64(uid), env)
}

// start is Start, as uid where it is not -1 (StartAs).
func start(t testing.TB, uid int64, env []string) int {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("a process whose environment read blocks needs root (a FUSE mount in a mount namespace of its own)")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("a process whose environment read blocks needs FUSE: %v", err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append([]string{"PATH=/usr/bin:/bin", dirEnv + "=" + t.TempDir()}, env...)
	if uid >= 0 {
		cmd.Env = append(cmd.Env, uidEnv+"="+strconv.FormatInt(uid, 10))
	}
	// Killed with the test binary, whose cleanups do not run where it
	// is killed or panics (-timeout): a helper left would serve forever,
	// and keep its reader in an uninterruptible wait
	// (TestHelperOutlivesNoTest). serve sets it again once it changes
	// user, which clears it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Cloneflags: syscall.CLONE_NEWNS, Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Skipf("start the stalling helper in a mount namespace of its own: %v", err)
	}
	pid := cmd.Process.Pid
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(out).ReadString('\n')
		line <- strings.TrimSpace(s)
	}()
	var addr string
	select {
	case s := <-line:
		if why, ok := strings.CutPrefix(s, "skip: "); ok {
			t.Skipf("the stalling helper cannot run here: %s", why)
		}
		var ok bool
		if addr, ok = strings.CutPrefix(s, "ready "); !ok {
			t.Fatalf("stalling helper (pid %d) said %q, want ready", pid, s)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("stalling helper (pid %d) not ready after 30s", pid)
	}
	// The reader, a process of its own: the helper's exit (at cleanup)
	// ends the FUSE connection, and the reader's wait with it.
	reader := exec.Command(os.Args[0], "-test.run=^$")
	reader.Env = []string{"PATH=/usr/bin:/bin", memEnv + "=" + strconv.Itoa(pid) + " " + addr}
	reader.Stdout, reader.Stderr = os.Stderr, os.Stderr
	if err := reader.Start(); err != nil {
		t.Fatal(err)
	}
	// Run before the helper's own cleanup: the reader ends once the
	// helper is gone, not before (its wait on the FUSE read cannot be
	// killed).
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = reader.Wait() })
	// Ready once a thread of the helper waits to take its memory map
	// lock for writing.
	deadline := time.Now().Add(30 * time.Second)
	for !writerWaits(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("stalling helper (pid %d): no thread waits for its memory map lock after 30s", pid)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return pid
}

// writerWaits reports whether a thread of pid waits to take its memory
// map lock for writing: in mmap (its wchan vm_mmap_pgoff, where the lock's
// wait is inlined) or in the lock's wait itself.
func writerWaits(pid int) bool {
	tasks, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/wchan")
	for _, w := range tasks {
		if b, _ := os.ReadFile(w); strings.Contains(string(b), "mmap") || strings.Contains(string(b), "down_write") {
			return true
		}
	}
	return false
}

// serve mounts a FUSE file system on dir, maps its one file, becomes uid
// (when not -1), says "ready" and the mapping's address, and serves the
// file system until parent (the test binary) dies, answering no read: the
// first read asked for starts a writer on the memory map lock.
func serve(dir string, uid int, parent int) error {
	// Mounts made here must not reach the test's namespace.
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make / private in the helper's mount namespace: %w", err)
	}
	// Raw descriptors, here and for the file: an os.File would put them
	// in Go's poller, and registering the FUSE file there asks the file
	// system (FUSE_POLL), holding the poller's lock, which the server's
	// own wait on /dev/fuse may need.
	dev, err := syscall.Open("/dev/fuse", syscall.O_RDWR|syscall.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open /dev/fuse: %w", err)
	}
	opts := "fd=" + strconv.Itoa(dev) + ",rootmode=40000,user_id=0,group_id=0"
	if err := syscall.Mount("loomstall", dir, "fuse", syscall.MS_NOSUID|syscall.MS_NODEV, opts); err != nil {
		return fmt.Errorf("mount FUSE: %w", err)
	}
	go func() { _ = loop(dev) }()
	f, err := syscall.Open(filepath.Join(dir, "env"), syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open the FUSE file: %w", err)
	}
	m, err := syscall.Mmap(f, 0, pageSize, syscall.PROT_READ, syscall.MAP_PRIVATE)
	// Closed now, while the file system is served: a close at exit asks
	// it to flush the file, and would wait forever on this process's own
	// server, gone by then. The mapping keeps the file.
	syscall.Close(f)
	if err != nil {
		return fmt.Errorf("map the FUSE file: %w", err)
	}
	if uid >= 0 {
		// Every thread (Go's set-ID calls reach them all), groups first:
		// once the uid is not 0 the rest would be refused. The FUSE
		// descriptor, mount and mapping, made as root, stay.
		if err := syscall.Setgroups(nil); err != nil {
			return fmt.Errorf("drop supplementary groups: %w", err)
		}
		if err := syscall.Setresgid(uid, uid, uid); err != nil {
			return fmt.Errorf("become gid %d: %w", uid, err)
		}
		if err := syscall.Setresuid(uid, uid, uid); err != nil {
			return fmt.Errorf("become uid %d: %w", uid, err)
		}
		// A change of user clears every thread's parent-death signal
		// (Start's Pdeathsig): set it again, on a thread that lives as
		// long as this process (this goroutine never ends, and keeps it),
		// and end now if the parent died before.
		runtime.LockOSThread()
		if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_PDEATHSIG, uintptr(syscall.SIGKILL), 0); e != 0 {
			return fmt.Errorf("set the parent-death signal again: %w", e)
		}
		if os.Getppid() != parent {
			os.Exit(0)
		}
	}
	fmt.Printf("ready %d\n", uintptr(unsafe.Pointer(&m[0])))
	select {}
}

const pageSize = 4096

// FUSE operation codes and reply sizes (include/uapi/linux/fuse.h).
const (
	opLookup    = 1
	opForget    = 2
	opGetattr   = 3
	opOpen      = 14
	opRead      = 15
	opRelease   = 18
	opFlush     = 25
	opInit      = 26
	opInterrupt = 36
	opBatchForg = 42
	inHeader    = 40
	attrSize    = 88
)

// loop answers the kernel's requests: a directory (node 1) holding one
// regular file (node 2) of pageSize bytes, whose reads are never answered.
func loop(dev int) error {
	buf := make([]byte, 1<<20)
	le := binary.LittleEndian
	var once sync.Once
	for {
		n, err := syscall.Read(dev, buf)
		if err != nil {
			if err == syscall.EINTR || err == syscall.ENOENT {
				continue
			}
			return err
		}
		if n < inHeader {
			continue
		}
		op, unique, node := le.Uint32(buf[4:]), le.Uint64(buf[8:]), le.Uint64(buf[16:])
		var body []byte
		errno := int32(0)
		switch op {
		case opInit:
			body = make([]byte, 64)
			le.PutUint32(body[0:], 7)     // major
			le.PutUint32(body[4:], 31)    // minor
			le.PutUint32(body[8:], 0)     // max_readahead
			le.PutUint32(body[20:], 4096) // max_write
			le.PutUint16(body[16:], 16)   // max_background
			le.PutUint16(body[18:], 12)   // congestion_threshold
		case opLookup:
			if string(buf[inHeader:n]) != "env\x00" {
				errno = -int32(syscall.ENOENT)
				break
			}
			body = make([]byte, 40+attrSize)
			le.PutUint64(body[0:], 2) // nodeid
			attr(body[40:], 2)
		case opGetattr:
			body = make([]byte, 16+attrSize)
			attr(body[16:], node)
		case opOpen:
			body = make([]byte, 16)
		case opRead:
			// Never answered: the reader waits, holding this process's
			// memory map lock for reading. A thread of this process now
			// asks for it for writing (any mmap does), and waits behind
			// the reader; every reader after it, every read of this
			// process's environment or command line, waits behind the
			// writer.
			once.Do(func() {
				go func() {
					_, _, _ = syscall.Syscall6(syscall.SYS_MMAP, 0, pageSize, syscall.PROT_READ,
						syscall.MAP_PRIVATE|syscall.MAP_ANONYMOUS, ^uintptr(0), 0)
				}()
			})
			continue
		case opForget, opBatchForg, opInterrupt:
			continue // no reply
		case opRelease, opFlush:
		default:
			errno = -int32(syscall.ENOSYS)
		}
		out := make([]byte, 16+len(body))
		le.PutUint32(out[0:], uint32(len(out)))
		le.PutUint32(out[4:], uint32(errno))
		le.PutUint64(out[8:], unique)
		copy(out[16:], body)
		if _, err := syscall.Write(dev, out); err != nil && err != syscall.ENOENT {
			return err
		}
	}
}

// attr fills a fuse_attr for node: 1 the root directory, else the file.
func attr(b []byte, node uint64) {
	le := binary.LittleEndian
	le.PutUint64(b[0:], node) // ino
	mode, size := uint32(syscall.S_IFREG|0o444), uint64(pageSize)
	if node == 1 {
		mode, size = syscall.S_IFDIR|0o555, 0
	}
	le.PutUint64(b[8:], size)
	le.PutUint64(b[16:], (size+511)/512) // blocks
	le.PutUint32(b[60:], mode)
	le.PutUint32(b[64:], 1)        // nlink
	le.PutUint32(b[80:], pageSize) // blksize
}
