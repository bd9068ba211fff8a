package adapters

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/loom-ml/loom/libs/osuser"
)

// checkDir fails t unless path is a directory of uid with mode perm.
func checkDir(t *testing.T, path string, uid uint32, perm os.FileMode) {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || st.Uid != uid || fi.Mode().Perm() != perm {
		t.Errorf("%s: %v uid %d, want a directory of uid %d mode %v", path, fi.Mode(), st.Uid, uid, perm)
	}
}

// TestLogDirsMakeTheUsersDirectory: the log directory and a project's are
// the service's (0755), the user's own is the user's alone (0700): no
// other user can make or replace a directory on the path the agent opens
// the output file on as the owner. Made again, it is left as it is.
func TestLogDirsMakeTheUsersDirectory(t *testing.T) {
	t.Parallel()
	root := filepath.Join(t.TempDir(), "training", "logs")
	self := osuser.Self()
	l := LogDirs{Root: root}
	dir, err := l.Make("p", self.Name)
	if err != nil {
		t.Fatal(err)
	}
	if dir != filepath.Join(root, "p", self.Name) {
		t.Fatalf("made %s", dir)
	}
	checkDir(t, root, self.UID, 0o755)
	checkDir(t, filepath.Join(root, "p"), self.UID, 0o755)
	checkDir(t, dir, self.UID, 0o700)
	if fi, err := os.Lstat(filepath.Join(root, LogDirMarker)); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("the log directory it made is not marked as its own: %v", err)
	}
	if again, err := l.Make("p", self.Name); err != nil || again != dir {
		t.Fatalf("made again: %s, %v", again, err)
	}

	// As root, another user's directory is given to them.
	if os.Geteuid() != 0 {
		return
	}
	nobody, err := osuser.Lookup("nobody")
	if err != nil {
		t.Skipf("no user nobody: %v", err)
	}
	d, err := l.Make("p", "nobody")
	if err != nil {
		t.Fatal(err)
	}
	checkDir(t, d, nobody.UID, 0o700)
}

// TestLogDirsMakeAgain: an owner's log directory an operator deleted
// (alone, or with the whole log directory) is made again as Make made it,
// the log directory marked again as the service's; one under another log
// directory than Root (a job taken under another -log-dir) stays there. A
// link in its place is refused and left alone, never followed, and so is
// a path that is not a user's log directory.
func TestLogDirsMakeAgain(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	root := filepath.Join(base, "logs")
	self := osuser.Self()
	dir, err := LogDirs{Root: root}.Make("p", self.Name)
	if err != nil {
		t.Fatal(err)
	}
	now := LogDirs{Root: filepath.Join(base, "other")} // -log-dir changed since
	for _, gone := range []string{dir, root} {
		if err := os.RemoveAll(gone); err != nil {
			t.Fatal(err)
		}
		if err := now.MakeAgain(dir, self.Name); err != nil {
			t.Fatalf("%s deleted: %v", gone, err)
		}
		checkDir(t, dir, self.UID, 0o700)
		checkDir(t, filepath.Join(root, "p"), self.UID, 0o755)
		if fi, err := os.Lstat(filepath.Join(root, LogDirMarker)); err != nil || !fi.Mode().IsRegular() {
			t.Errorf("%s deleted: the log directory made again is not marked: %v", gone, err)
		}
	}
	if _, err := os.Lstat(now.Root); !os.IsNotExist(err) {
		t.Errorf("made under the current -log-dir: %v", err)
	}

	elsewhere := filepath.Join(base, "elsewhere")
	if err := os.Mkdir(elsewhere, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(elsewhere, dir); err != nil {
		t.Fatal(err)
	}
	if err := now.MakeAgain(dir, self.Name); err == nil || !strings.Contains(err.Error(), "not a directory of") {
		t.Errorf("a link in its place: %v, want it refused", err)
	}
	if fi, err := os.Lstat(dir); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the link was not left alone: %v", err)
	}
	for _, bad := range []string{"p/" + self.Name, filepath.Join(root, "p", "someone-else"), root + "/p/../p/" + self.Name} {
		if err := now.MakeAgain(bad, self.Name); err == nil || !strings.Contains(err.Error(), "not a log directory") {
			t.Errorf("MakeAgain(%q): %v, want it refused", bad, err)
		}
	}
}

// TestLogDirsRefuse: where the owner's directory cannot be made safely,
// Make says why and makes nothing for them: a user with no account, a name
// that is not one directory, a log directory under a directory others may
// write (they could move the user's away and put their own in its place),
// and, as root, a user's directory someone else made first.
func TestLogDirsRefuse(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	l := LogDirs{Root: filepath.Join(base, "logs")}
	for _, c := range []struct{ project, user, want string }{
		{"p", "no-such-user-m4", "no-such-user-m4"},
		{"p", "..", "cannot name a directory"},
		{"p", "a/b", "cannot name a directory"},
		{"p", "a%b", "cannot name a directory"},
		{"../p", osuser.Self().Name, "cannot name a directory"},
	} {
		if dir, err := l.Make(c.project, c.user); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Make(%q, %q) = %q, %v; want an error saying %q", c.project, c.user, dir, err, c.want)
		}
	}
	if _, err := os.Stat(filepath.Join(base, "logs")); !os.IsNotExist(err) {
		t.Errorf("a refused make left the log directory: %v", err)
	}

	open := filepath.Join(base, "open")
	if err := os.Mkdir(open, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil { // past the umask
		t.Fatal(err)
	}
	bad := LogDirs{Root: filepath.Join(open, "logs")}
	if dir, err := bad.Make("p", osuser.Self().Name); err == nil || !strings.Contains(err.Error(), "writable by its group or others") {
		t.Errorf("under a world-writable directory: %q, %v", dir, err)
	}
	if _, err := os.Stat(filepath.Join(open, "logs", "p", osuser.Self().Name)); !os.IsNotExist(err) {
		t.Errorf("the user's directory was made under a world-writable one: %v", err)
	}

	if os.Geteuid() != 0 {
		return
	}
	if _, err := osuser.Lookup("nobody"); err != nil {
		return
	}
	// Someone (here root) made nobody's directory first: it is not theirs.
	first := filepath.Join(l.Root, "q", "nobody")
	if err := os.MkdirAll(first, 0o755); err != nil {
		t.Fatal(err)
	}
	if dir, err := l.Make("q", "nobody"); err == nil || !strings.Contains(err.Error(), "not a directory of nobody") {
		t.Errorf("a directory someone else made first: %q, %v", dir, err)
	}
}

// TestLogDirsPrune: output files whose last write is older than the
// retention go; newer ones, other files and the directories stay; a link
// is removed, not followed.
func TestLogDirsPrune(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	// The link's own time is when it is made: 60 days before now.
	now := time.Now().Add(60 * 24 * time.Hour)
	dir := filepath.Join(root, "p", "alice")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(t.TempDir(), "precious")
	if err := os.WriteFile(filepath.Join(root, LogDirMarker), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	write := func(path string, age time.Duration) {
		t.Helper()
		if err := os.WriteFile(path, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		at := now.Add(-age)
		if err := os.Chtimes(path, at, at); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(dir, "job-1.out"), 31*24*time.Hour)
	write(filepath.Join(dir, "job-2.out"), 29*24*time.Hour)
	write(filepath.Join(dir, "notes.txt"), 90*24*time.Hour)
	write(outside, 90*24*time.Hour)
	link := filepath.Join(dir, "job-3.out")
	if err := os.Symlink(outside, link); err != nil {
		t.Fatal(err)
	}
	n, err := LogDirs{Root: root}.Prune(now, 30*24*time.Hour, nil)
	if err != nil || n != 2 {
		t.Fatalf("pruned %d, %v; want 2 (job-1.out, the link)", n, err)
	}
	for path, kept := range map[string]bool{filepath.Join(dir, "job-1.out"): false, link: false,
		filepath.Join(dir, "job-2.out"): true, filepath.Join(dir, "notes.txt"): true, outside: true, dir: true} {
		if _, err := os.Lstat(path); (err == nil) != kept {
			t.Errorf("%s: kept %v, want %v", path, err == nil, kept)
		}
	}
	if n, err := (LogDirs{Root: filepath.Join(root, "none")}).Prune(now, time.Hour, nil); n != 0 || err != nil {
		t.Errorf("a log directory not made yet: %d, %v", n, err)
	}
}

// TestLogDirsPruneKeepsARunningJobsOutput: the output of a job that has
// not ended stays whatever its age (a job that printed nothing for longer
// than the retention still has the file open); an ended job's, as old,
// goes, and so does one of the same id in another project.
func TestLogDirsPruneKeepsARunningJobsOutput(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, LogDirMarker), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	old := now.Add(-31 * 24 * time.Hour)
	path := func(project string, id int) string {
		return filepath.Join(root, project, "alice", fmt.Sprintf("job-%d.out", id))
	}
	for _, f := range []string{path("p", 7), path("p", 8), path("q", 7)} {
		if err := os.MkdirAll(filepath.Dir(f), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(f, old, old); err != nil {
			t.Fatal(err)
		}
	}
	var asked []string
	running := func(project string, id int64) bool {
		asked = append(asked, fmt.Sprintf("%s/%d", project, id))
		return project == "p" && id == 7
	}
	n, err := LogDirs{Root: root}.Prune(now, 30*24*time.Hour, running)
	if err != nil || n != 2 {
		t.Errorf("pruned %d, %v; want 2 (p's job 8, q's job 7); asked %v", n, err, asked)
	}
	for f, kept := range map[string]bool{path("p", 7): true, path("p", 8): false, path("q", 7): false} {
		if _, err := os.Lstat(f); (err == nil) != kept {
			t.Errorf("%s: kept %v, want %v", f, err == nil, kept)
		}
	}
}

// TestLogDirsPruneOnlyWhatItMade: a log directory Make did not make (one
// that was there, whose <project>/<user>/ directories are the users'
// own) has nothing pruned, and Prune says why; once Make marks a log
// directory it made, Prune prunes it. A make refused for a parent
// others may write leaves no log directory behind, so that the one that
// succeeds later still marks it.
func TestLogDirsPruneOnlyWhatItMade(t *testing.T) {
	t.Parallel()
	now := time.Now()
	old := now.Add(-90 * 24 * time.Hour)
	oldFile := func(path string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(path, old, old); err != nil {
			t.Fatal(err)
		}
	}
	theirs := t.TempDir()
	own := filepath.Join(theirs, "projects", "p", "alice", "job-1.out")
	oldFile(own)
	n, err := LogDirs{Root: filepath.Join(theirs, "projects")}.Prune(now, 30*24*time.Hour, nil)
	if n != 0 || err == nil || !strings.Contains(err.Error(), LogDirMarker) {
		t.Errorf("a log directory it did not make: pruned %d, %v; want none, and an error naming %s", n, err, LogDirMarker)
	}
	if _, err := os.Stat(own); err != nil {
		t.Errorf("a user's own file in a directory it did not make: %v", err)
	}

	base := t.TempDir()
	open := filepath.Join(base, "open")
	if err := os.Mkdir(open, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil { // past the umask
		t.Fatal(err)
	}
	l := LogDirs{Root: filepath.Join(open, "logs")}
	if _, err := l.Make("p", osuser.Self().Name); err == nil {
		t.Fatal("made under a world-writable directory")
	}
	if _, err := os.Lstat(l.Root); !os.IsNotExist(err) {
		t.Errorf("a refused make left the log directory it made: %v", err)
	}
	if err := os.Chmod(open, 0o755); err != nil { // mended
		t.Fatal(err)
	}
	dir, err := l.Make("p", osuser.Self().Name)
	if err != nil {
		t.Fatal(err)
	}
	made := filepath.Join(dir, "job-2.out")
	oldFile(made)
	if n, err := l.Prune(now, 30*24*time.Hour, nil); n != 1 || err != nil {
		t.Errorf("the log directory it made: pruned %d, %v; want 1", n, err)
	}
	if _, err := os.Stat(made); !os.IsNotExist(err) {
		t.Errorf("an old output file in the log directory it made: %v", err)
	}
}
