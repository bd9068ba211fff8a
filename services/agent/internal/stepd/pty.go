package stepd

import (
	"fmt"
	"os"
	"os/user"
	"strconv"
	"syscall"
	"time"
	"unsafe"
)

// Default terminal size, as a terminal emulator's first window.
const (
	DefaultRows = 24
	DefaultCols = 80
)

// openPTY opens a new pseudo-terminal pair: the master, and the slave,
// given to owner (uid, gid; nil: left as it is, the shim's own) so that
// the job can reopen it as /dev/tty, sized rows × cols, and the controlling
// terminal of the caller's session (the caller leads a session that has
// none): the job inherits the session, and with it the terminal.
func openPTY(rows, cols uint16, owner *syscall.Credential) (master, slave *os.File, err error) {
	mfd, err := syscall.Open("/dev/ptmx", syscall.O_RDWR|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("open /dev/ptmx: %w", err)
	}
	master = os.NewFile(uintptr(mfd), "/dev/ptmx")
	fail := func(what string, err error) (*os.File, *os.File, error) {
		master.Close()
		return nil, nil, fmt.Errorf("%s: %w", what, err)
	}
	var n uint32
	if err := ioctl(mfd, syscall.TIOCGPTN, unsafe.Pointer(&n)); err != nil {
		return fail("pty number", err)
	}
	var unlock int32
	if err := ioctl(mfd, syscall.TIOCSPTLCK, unsafe.Pointer(&unlock)); err != nil {
		return fail("unlock pty", err)
	}
	name := "/dev/pts/" + strconv.FormatUint(uint64(n), 10)
	if owner != nil {
		gid, mode := ttyGroup(int(owner.Gid))
		if err := os.Chown(name, int(owner.Uid), gid); err != nil {
			return fail("give the terminal to the job's owner", err)
		}
		if err := os.Chmod(name, mode); err != nil {
			return fail("terminal mode", err)
		}
	}
	sfd, err := syscall.Open(name, syscall.O_RDWR|syscall.O_CLOEXEC, 0)
	if err != nil {
		return fail("open "+name, err)
	}
	slave = os.NewFile(uintptr(sfd), name)
	if err := ioctl(sfd, syscall.TIOCSCTTY, nil); err != nil {
		slave.Close()
		return fail("make "+name+" the session's terminal", err)
	}
	if rows == 0 || cols == 0 {
		rows, cols = DefaultRows, DefaultCols
	}
	if err := setWinsize(sfd, rows, cols); err != nil {
		slave.Close()
		return fail("terminal size", err)
	}
	return master, slave, nil
}

// ttyGroup is the group and mode of a job's terminal, as grantpt(3) makes
// them: group tty, writable by it (write(1) and wall(1) are setgid tty),
// 0620; without a tty group, the owner's own group, 0600. Never the owner's
// primary group writable: at a site where every user's is "users", any of
// them could write into the terminal, and through srun into its user's.
func ttyGroup(ownerGID int) (int, os.FileMode) {
	if g, err := user.LookupGroup("tty"); err == nil {
		if gid, err := strconv.Atoi(g.Gid); err == nil {
			return gid, 0o620
		}
	}
	return ownerGID, 0o600
}

// setWinsize sizes the terminal of fd (either end) rows × cols; its
// foreground jobs get SIGWINCH.
func setWinsize(fd int, rows, cols uint16) error {
	ws := struct{ Row, Col, X, Y uint16 }{Row: rows, Col: cols}
	return ioctl(fd, syscall.TIOCSWINSZ, unsafe.Pointer(&ws))
}

func ioctl(fd int, req uintptr, arg unsafe.Pointer) error {
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), req, uintptr(arg)); e != 0 {
		return e
	}
	return nil
}

// ptyInput writes a step's input to its terminal; its Close, at the
// input's end, types the end-of-file character (^D) rather than closing
// the master, which would hang the terminal up while the job still writes.
type ptyInput struct{ master *os.File }

func (p ptyInput) Write(b []byte) (int, error) { return p.master.Write(b) }
func (p ptyInput) Close() error {
	_, err := p.master.Write([]byte{4})
	return err
}

// WinsizePoll is how often a terminal's shim looks for a new window size.
const WinsizePoll = 250 * time.Millisecond

// followWinsize sizes the terminal master as the file path (srun's, in the
// step's directory: "ROWS COLS") says, each time it changes, until done
// is closed. The file is the job's owner's (owner; nil: anyone's): one
// that is not a regular file of theirs, alone, is ignored, so that a link
// cannot make the shim read another file.
func followWinsize(master *os.File, path string, owner *syscall.Credential, done <-chan struct{}) {
	// srun replaces the file at each resize (a new inode), and a
	// filesystem's times may be coarse: either tells a new size.
	var last time.Time
	var lastIno uint64
	for {
		select {
		case <-done:
			return
		case <-time.After(WinsizePoll):
		}
		st, err := os.Lstat(path)
		if err != nil || !st.Mode().IsRegular() || st.Size() > 64 {
			continue
		}
		ino := uint64(0)
		if sys, ok := st.Sys().(*syscall.Stat_t); ok {
			ino = sys.Ino
		}
		if st.ModTime().Equal(last) && ino == lastIno {
			continue
		}
		last, lastIno = st.ModTime(), ino
		fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
		if err != nil {
			continue
		}
		f := os.NewFile(uintptr(fd), path)
		var fst syscall.Stat_t
		buf := make([]byte, 64)
		n := 0
		if syscall.Fstat(fd, &fst) == nil && fst.Mode&syscall.S_IFMT == syscall.S_IFREG && fst.Nlink == 1 &&
			(owner == nil || fst.Uid == owner.Uid) {
			n, _ = f.Read(buf)
		}
		f.Close()
		var rows, cols int
		if _, err := fmt.Sscanf(string(buf[:n]), "%d %d", &rows, &cols); err != nil ||
			rows < 1 || cols < 1 || rows > MaxTermSize || cols > MaxTermSize {
			continue
		}
		_ = setWinsize(int(master.Fd()), uint16(rows), uint16(cols))
	}
}

// MaxTermSize bounds a window size read from the step's directory, as
// the gateway bounds the first (slurmspec.MaxTermSize, repeated: this
// package imports the standard library only).
const MaxTermSize = 10000
