package osuser_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/loom-ml/loom/libs/osuser"
	"github.com/loom-ml/loom/libs/testkit"
)

func TestLookupUnknownUser(t *testing.T) {
	t.Parallel()
	_, err := osuser.Lookup("no-such-user-xq7")
	if !errors.Is(err, osuser.ErrNoAccount) {
		t.Fatalf("Lookup of an unknown user: %v, want ErrNoAccount", err)
	}
	if _, err := osuser.Lookup(""); !errors.Is(err, osuser.ErrNoAccount) {
		t.Fatalf("Lookup(\"\"): %v, want ErrNoAccount", err)
	}
}

func TestSelfIsSelf(t *testing.T) {
	t.Parallel()
	me := osuser.Self()
	if me.UID != uint32(os.Geteuid()) || me.GID != uint32(os.Getegid()) || !osuser.IsSelf(me) {
		t.Fatalf("Self() = %+v, want the process's ids", me)
	}
	ran := false
	if err := osuser.As(me, func() error { ran = true; return nil }); err != nil || !ran {
		t.Fatalf("As(Self) = %v (ran %v)", err, ran)
	}
}

// owner returns the uid and gid of path.
func owner(t *testing.T, path string) (uint32, uint32, os.FileMode) {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	return st.Uid, st.Gid, fi.Mode()
}

// TestAsChecksTheUsersRights: files opened through As are checked against
// the user's rights (not root's), files made are the user's, group
// membership counts, and the calling process is root again afterwards.
func TestAsChecksTheUsersRights(t *testing.T) {
	t.Parallel()
	u := testkit.OSUsers(t, 1)[0]
	if len(u.Groups) < 2 || !slices.Contains(u.Groups, u.GID) || u.GroupID == 0 {
		t.Fatalf("account %+v: want its user group and its supplementary group", u)
	}
	root := testkit.ReachableDir(t) // root's, 0755
	open := filepath.Join(root, "open")
	if err := os.MkdirAll(open, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}

	// Not in a directory only root may write.
	if _, err := osuser.OpenFile(u.Account, filepath.Join(root, "x"), os.O_CREATE|os.O_WRONLY, 0o600); !errors.Is(err, os.ErrPermission) {
		t.Fatalf("create in root's directory as %s: %v, want permission denied", u.Name, err)
	}
	if _, err := os.Stat(filepath.Join(root, "x")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the refused file exists: %v", err)
	}
	// Not a root file of mode 0600, though root may.
	secret := filepath.Join(root, "secret")
	if err := os.WriteFile(secret, []byte("s"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := osuser.OpenFile(u.Account, secret, os.O_RDONLY, 0); !errors.Is(err, os.ErrPermission) {
		t.Fatalf("read root's 0600 file as %s: %v, want permission denied", u.Name, err)
	}
	// A file of the user's supplementary group, mode 0640: yes.
	shared := filepath.Join(root, "shared")
	if err := os.WriteFile(shared, []byte("g"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(shared, 0, int(u.GroupID)); err != nil {
		t.Fatal(err)
	}
	f, err := osuser.OpenFile(u.Account, shared, os.O_RDONLY, 0)
	if err != nil {
		t.Fatalf("read a 0640 file of %s's group %s: %v", u.Name, u.Group, err)
	}
	f.Close()
	// A new file and directory are the user's.
	made := filepath.Join(open, "a", "b")
	if err := osuser.MkdirAll(u.Account, made, 0o700); err != nil {
		t.Fatal(err)
	}
	if uid, gid, mode := owner(t, made); uid != u.UID || gid != u.GID || mode.Perm() != 0o700 {
		t.Fatalf("directory made as %s: uid %d gid %d mode %v", u.Name, uid, gid, mode)
	}
	f, err = osuser.OpenFile(u.Account, filepath.Join(made, "out"), os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if uid, gid, mode := owner(t, filepath.Join(made, "out")); uid != u.UID || gid != u.GID || mode.Perm() != 0o600 {
		t.Fatalf("file made as %s: uid %d gid %d mode %v", u.Name, uid, gid, mode)
	}
	// This process is root again (and every thread: try a few).
	for range 8 {
		f, err := os.Open(secret)
		if err != nil {
			t.Fatalf("after As, root cannot read its own file: %v", err)
		}
		f.Close()
	}
}

// TestMakeDirFor: a directory made for a user under root's parents is the
// user's, 0700; one that another user made first is refused.
func TestMakeDirFor(t *testing.T) {
	t.Parallel()
	us := testkit.OSUsers(t, 2)
	a, b := us[0], us[1]
	base := testkit.ReachableDir(t)
	dir := filepath.Join(base, "spool", "steps", "7.0")
	if err := osuser.MakeDirFor(a.Account, dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if uid, gid, mode := owner(t, dir); uid != a.UID || gid != a.GID || mode.Perm() != 0o700 || !mode.IsDir() {
		t.Fatalf("MakeDirFor: uid %d gid %d mode %v, want %s's directory 0700", uid, gid, mode, a.Name)
	}
	if _, _, mode := owner(t, filepath.Dir(dir)); mode.Perm() != 0o755 {
		t.Fatalf("parent mode %v, want 0755", mode)
	}
	if err := osuser.MakeDirFor(a.Account, dir, 0o755); err != nil {
		t.Fatalf("again for its owner: %v", err)
	}
	if err := osuser.MakeDirFor(b.Account, dir, 0o755); err == nil {
		t.Fatalf("MakeDirFor %s of %s's directory succeeded", b.Name, a.Name)
	}
	link := filepath.Join(base, "spool", "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	if err := osuser.MakeDirFor(a.Account, link, 0o755); err == nil {
		t.Fatal("MakeDirFor accepted a symlink")
	}
}

// TestMakeDirForRefusesParentsOthersCanChange: a parent another user made
// first (a .loom made in a shared directory before the agent's first job),
// or one writable by others and not sticky, would let that user move or
// replace what is made under it: MakeDirFor refuses, making nothing. A
// sticky, world-writable parent (as /tmp) and a link to a good parent are
// fine.
func TestMakeDirForRefusesParentsOthersCanChange(t *testing.T) {
	t.Parallel()
	us := testkit.OSUsers(t, 2)
	a, b := us[0], us[1]
	base := testkit.ReachableDir(t)

	theirs := filepath.Join(base, "theirs")
	if err := os.Mkdir(theirs, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(theirs, int(b.UID), int(b.GID)); err != nil {
		t.Fatal(err)
	}
	open := filepath.Join(base, "open")
	if err := os.Mkdir(open, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	for _, parent := range []string{theirs, filepath.Join(theirs, "steps"), open} {
		dir := filepath.Join(parent, "7.0")
		err := osuser.MakeDirFor(a.Account, dir, 0o755)
		if err == nil || !strings.Contains(err.Error(), "only uid") {
			t.Errorf("MakeDirFor under %s: %v, want refused naming who may change it", parent, err)
		}
		if _, err := os.Lstat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s was made: %v", dir, err)
		}
	}

	sticky := filepath.Join(base, "sticky")
	if err := os.Mkdir(sticky, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(sticky, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	if err := osuser.MakeDirFor(a.Account, filepath.Join(sticky, "7.0"), 0o755); err != nil {
		t.Errorf("under a sticky parent: %v", err)
	}
	good := filepath.Join(base, "good")
	if err := os.Mkdir(good, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(good, filepath.Join(base, "via")); err != nil {
		t.Fatal(err)
	}
	if err := osuser.MakeDirFor(a.Account, filepath.Join(base, "via", "7.0"), 0o755); err != nil {
		t.Errorf("under a link to a good parent: %v", err)
	}
}

// TestMakeDirForAtOnce: many makers of one directory at once (every node's
// agent of a job step, on a shared file system) all succeed and see it the
// user's: none sees it half made.
func TestMakeDirForAtOnce(t *testing.T) {
	t.Parallel()
	a := testkit.OSUsers(t, 1)[0]
	base := testkit.ReachableDir(t)
	for i := range 20 {
		dir := filepath.Join(base, "steps", strconv.Itoa(i))
		errc := make(chan error, 8)
		for range 8 {
			go func() { errc <- osuser.MakeDirFor(a.Account, dir, 0o755) }()
		}
		for range 8 {
			if err := <-errc; err != nil {
				t.Fatalf("a concurrent MakeDirFor: %v", err)
			}
		}
		if uid, _, mode := owner(t, dir); uid != a.UID || mode.Perm() != 0o700 {
			t.Fatalf("dir: uid %d mode %v", uid, mode)
		}
	}
	if ents, _ := os.ReadDir(filepath.Join(base, "steps")); len(ents) != 20 {
		t.Fatalf("%d entries, want the 20 directories and no temporary one left", len(ents))
	}
}

// TestNotThroughProc: As changes a thread's identity, not its process, and
// the kernel lets a process follow its own /proc/self/fd/N whoever it acts
// as. A path a user names (a job's --output, read back by the gateway as
// its owner; an artifact directory) through such a link reached a file or
// directory the service held open that the user may not reach: here one
// under root's 0700 directory. OpenFile and OpenRoot refuse it.
func TestNotThroughProc(t *testing.T) {
	t.Parallel()
	u := testkit.OSUsers(t, 1)[0]
	secret := filepath.Join(t.TempDir(), "secret") // t.TempDir: root's, 0700
	if err := os.Mkdir(secret, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(secret, "log"), []byte("root's"), 0o644); err != nil {
		t.Fatal(err)
	}
	file, err := os.Open(filepath.Join(secret, "log"))
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	dir, err := os.Open(secret)
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	if f, err := osuser.OpenFile(u.Account, filepath.Join(secret, "log"), os.O_RDONLY, 0); err == nil {
		f.Close()
		t.Fatalf("%s opened a file under root's 0700 directory by its path", u.Name)
	}
	through := fmt.Sprintf("/proc/self/fd/%d", file.Fd())
	if f, err := osuser.OpenFile(u.Account, through, os.O_RDONLY, 0); err == nil || !errors.Is(err, osuser.ErrThroughProc) {
		if f != nil {
			f.Close()
		}
		t.Errorf("OpenFile as %s of %s: %v; want ErrThroughProc", u.Name, through, err)
	}
	through = fmt.Sprintf("/proc/self/fd/%d", dir.Fd())
	err = osuser.As(u.Account, func() error {
		r, err := osuser.OpenRoot(through)
		if err == nil {
			r.Close()
		}
		return err
	})
	if !errors.Is(err, osuser.ErrThroughProc) {
		t.Errorf("OpenRoot as %s of %s: %v; want ErrThroughProc", u.Name, through, err)
	}
	// A path with no /proc link opens as before, a perm with nothing to
	// create ignored, and a file made is the user's, with perm.
	if f, err := osuser.OpenFile(u.Account, "/etc/passwd", os.O_RDONLY, 0o644); err != nil {
		t.Errorf("OpenFile(/etc/passwd) as %s: %v", u.Name, err)
	} else {
		f.Close()
	}
	own := filepath.Join(testkit.ReachableDir(t), "own")
	if err := os.Mkdir(own, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(own, int(u.UID), int(u.GID)); err != nil {
		t.Fatal(err)
	}
	f, err := osuser.OpenFile(u.Account, filepath.Join(own, "log"), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o640)
	if err != nil {
		t.Fatalf("OpenFile(O_CREATE) as %s: %v", u.Name, err)
	}
	f.Close()
	if fi, err := os.Stat(filepath.Join(own, "log")); err != nil || fi.Mode().Perm() != 0o640 || fi.Sys().(*syscall.Stat_t).Uid != u.UID {
		t.Errorf("the file OpenFile made as %s: %v, %v; want theirs, mode 0640", u.Name, fi.Mode(), err)
	}
}
