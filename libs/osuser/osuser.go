// Package osuser finds a Loom user's operating-system account on this
// machine and does file work as that account. An agent that runs as root
// (as slurmd does) starts each job's processes as the job's owner and opens
// the job's output files as the owner; the gateway reads a job's log as its
// owner. What the owner may not do on the machine, Loom does not do for
// them.
package osuser

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
)

// ErrNoAccount is returned (wrapped) for a user name this machine has no
// account for.
var ErrNoAccount = errors.New("no account")

// ErrNotPermitted is returned (wrapped) when this process would have to
// become another user and cannot: it does not run as root.
var ErrNotPermitted = errors.New("not permitted")

// Account is an operating-system account: who a job's processes run as.
type Account struct {
	// Name is the login name ("" for an account known only by its ids).
	Name string
	// UID and GID are the user id and primary group id.
	UID, GID uint32
	// Groups are the supplementary group ids, the primary one included.
	Groups []uint32
	// Home is the account's home directory ("" when unknown).
	Home string
}

// String names the account for messages: "alice (uid 1001)".
func (a Account) String() string {
	if a.Name == "" {
		return fmt.Sprintf("uid %d", a.UID)
	}
	return fmt.Sprintf("%s (uid %d)", a.Name, a.UID)
}

// Root reports whether the account is the superuser's (uid 0, whatever
// its name).
func (a Account) Root() bool { return a.UID == 0 }

// Credential is what syscall.SysProcAttr.Credential needs to start a
// process as the account: its uid, gid and supplementary groups.
func (a Account) Credential() *syscall.Credential {
	return &syscall.Credential{Uid: a.UID, Gid: a.GID, Groups: slices.Clone(a.Groups)}
}

// Lookup returns the account named name on this machine (the passwd and
// group databases, through the system's resolver where cgo has one). A
// name with no account is an error wrapping ErrNoAccount.
func Lookup(name string) (Account, error) {
	if name == "" {
		return Account{}, fmt.Errorf("no user name: %w", ErrNoAccount)
	}
	u, err := user.Lookup(name)
	if err != nil {
		var unknown user.UnknownUserError
		if errors.As(err, &unknown) {
			return Account{}, fmt.Errorf("user %s: %w", name, ErrNoAccount)
		}
		return Account{}, fmt.Errorf("look up user %s: %w", name, err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err := errors.Join(err1, err2); err != nil {
		return Account{}, fmt.Errorf("user %s: ids %q/%q: %w", name, u.Uid, u.Gid, err)
	}
	a := Account{Name: u.Username, UID: uint32(uid), GID: uint32(gid), Home: u.HomeDir}
	ids, err := u.GroupIds()
	if err != nil {
		return Account{}, fmt.Errorf("groups of user %s: %w", name, err)
	}
	for _, s := range ids {
		g, err := strconv.ParseUint(s, 10, 32)
		if err != nil {
			return Account{}, fmt.Errorf("groups of user %s: %q: %w", name, s, err)
		}
		if !slices.Contains(a.Groups, uint32(g)) {
			a.Groups = append(a.Groups, uint32(g))
		}
	}
	if !slices.Contains(a.Groups, a.GID) {
		a.Groups = append(a.Groups, a.GID)
	}
	slices.Sort(a.Groups)
	return a, nil
}

// Self returns the account this process runs as (its effective ids and
// groups; its name when the passwd database has one).
func Self() Account {
	a := Account{UID: uint32(os.Geteuid()), GID: uint32(os.Getegid())}
	if u, err := user.LookupId(strconv.Itoa(os.Geteuid())); err == nil {
		a.Name, a.Home = u.Username, u.HomeDir
	}
	if gs, err := os.Getgroups(); err == nil {
		for _, g := range gs {
			a.Groups = append(a.Groups, uint32(g))
		}
	}
	if !slices.Contains(a.Groups, a.GID) {
		a.Groups = append(a.Groups, a.GID)
	}
	slices.Sort(a.Groups)
	return a
}

// IsSelf reports whether a is who this process already acts as (same
// effective uid and gid): nothing to switch to.
func IsSelf(a Account) bool {
	return a.UID == uint32(os.Geteuid()) && a.GID == uint32(os.Getegid())
}

// OpenFile is os.OpenFile done as the account a (see As): the system
// checks a's rights, and a file it creates is a's, with perm. A path
// through a /proc link to a process's descriptors, cwd or root is refused
// (ErrThroughProc, on Linux 5.6 and later): through it a's thread would
// reach what this process holds open (another user's log being read for
// them), whatever a may reach by path (see OpenRoot).
func OpenFile(a Account, path string, flag int, perm os.FileMode) (*os.File, error) {
	var f *os.File
	err := As(a, func() error {
		var err error
		f, err = OpenNoProcLinks(path, flag, perm)
		return err
	})
	return f, err
}

// MkdirAll is os.MkdirAll done as the account a (see As): the directories
// it makes are a's, with perm.
func MkdirAll(a Account, path string, perm os.FileMode) error {
	return As(a, func() error { return os.MkdirAll(path, perm) })
}

// MakeDirFor makes dir for the account a where a may not make it: a
// directory this process keeps for a's files (a job step's task outputs,
// a model's files) under parents a cannot write. Its missing parents are
// made as this process, mode parentPerm; dir itself is made mode 0700 and
// given to a. Every parent, made here or found, must be one that only this
// process's user or root can change (safeParents), else it is an error and
// nothing is made: a parent another user made first (a `.loom` made in a
// shared directory before the agent's first job) would let that user move
// or replace what is made under it. So no other user can have made dir
// first; a dir that exists must be a directory (not a link) that a owns,
// else it is an error (and left alone).
//
// Several processes may make the same dir at once (every node's agent of a
// job step, on a shared file system): dir appears already a's, made under
// a temporary name, given away, then renamed into place without replacing
// what another made first, so none of them ever sees it half made.
func MakeDirFor(a Account, dir string, parentPerm os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(dir), parentPerm); err != nil {
		return err
	}
	if err := safeParents(dir); err != nil {
		return err
	}
	if _, err := os.Lstat(dir); errors.Is(err, os.ErrNotExist) {
		if err := makeGiven(a, dir); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || !ok || st.Uid != a.UID {
		return fmt.Errorf("%s exists and is not a directory of %s", dir, a)
	}
	return nil
}

// safeParents reports an error when a directory above dir could be changed
// by a user other than this process's or root: each parent up to /, on the
// path as written and on the path its links resolve to, must be a
// directory owned by this process's user or root, and writable by its
// group or others only when sticky (as /tmp is: no one may move or replace
// another's entry there). A link on the path as written is judged by its
// directory and its target.
func safeParents(dir string) error {
	parent := filepath.Dir(dir)
	real, err := filepath.EvalSymlinks(parent)
	if err != nil {
		return err
	}
	euid := uint32(os.Geteuid())
	for _, start := range []string{parent, real} {
		for p := start; ; p = filepath.Dir(p) {
			fi, err := os.Lstat(p)
			if err != nil {
				return err
			}
			st, ok := fi.Sys().(*syscall.Stat_t)
			switch {
			case !ok:
				return fmt.Errorf("%s: no owner to check", p)
			case fi.Mode()&os.ModeSymlink != 0:
				// Its target is walked from real.
			case !fi.IsDir():
				return fmt.Errorf("%s is not a directory", p)
			case st.Uid != euid && st.Uid != 0:
				return fmt.Errorf("%s belongs to uid %d: the directories made for users must lie under directories "+
					"only uid %d or root can change (make it theirs, or choose another directory)", p, st.Uid, euid)
			case fi.Mode().Perm()&0o022 != 0 && fi.Mode()&os.ModeSticky == 0:
				return fmt.Errorf("%s is writable by its group or others (mode %v): the directories made for users "+
					"must lie under directories only uid %d or root can change (chmod go-w it)", p, fi.Mode().Perm(), euid)
			}
			if up := filepath.Dir(p); up == p {
				break
			}
		}
	}
	return nil
}

// makeGiven makes dir, a's, mode 0700, in one step as others see it: an
// error wrapping os.ErrExist when another made it first.
func makeGiven(a Account, dir string) error {
	var b [8]byte
	_, _ = rand.Read(b[:])
	tmp := dir + ".tmp-" + hex.EncodeToString(b[:])
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return err
	}
	if !IsSelf(a) {
		// Mode 0700 and this process's until here: no one else can get
		// in between the make and the chown.
		if err := os.Lchown(tmp, int(a.UID), int(a.GID)); err != nil {
			_ = os.Remove(tmp)
			return err
		}
	}
	if err := renameNoReplace(tmp, dir); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return nil
}
