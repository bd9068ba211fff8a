package adapters

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/loom-ml/loom/libs/osuser"
	"github.com/loom-ml/loom/libs/resname"
)

// LogDirMarker is the file Make puts in the log directory when it makes
// it. Prune deletes nothing in a log directory without one: an operator
// who points -log-dir at a directory that was already there (a shared
// /projects whose <project>/<user>/ are the users' own, say) would
// otherwise have the service, as root, delete every old job-*.out there,
// files it never wrote. Such a directory is adopted by creating the file.
const LogDirMarker = ".loom-training-logs"

// LogDirs is the training service's log directory (-log-dir): the
// replicas' output of CustomJobs that would otherwise go with their
// ephemeral cluster, as <Root>/<project>/<user>/job-<job id>.out.
//
// The agent opens a job's output file as the job's owner and makes its
// missing directories as them, so a directory on that path that another
// user could make first would let them read or redirect the owner's
// output. Make therefore makes every directory on it as this service:
// Root and the project's directories are this process's user's (mode
// 0755), under parents only it or root can change; the user's own is
// theirs, mode 0700 (osuser.MakeDirFor). An agent never makes one of them.
type LogDirs struct {
	// Root is the log directory (an absolute path).
	Root string
}

// Make makes the owner's log directory of project's CustomJobs
// (<Root>/<project>/<user>) for them, if it is not there yet, and
// returns it. An error says why it cannot be: a name that cannot name a
// directory, a user with no account here, a process that may not give a
// directory to another user (not root), a parent another user could
// change (see osuser.MakeDirFor). When it makes Root itself it puts
// LogDirMarker there: Prune prunes only such a log directory.
func (l LogDirs) Make(project, user string) (string, error) {
	if !resname.ValidID(project) {
		return "", fmt.Errorf("project %q cannot name a directory", project)
	}
	if !pathComponent(user) {
		return "", fmt.Errorf("user name %q cannot name a directory", user)
	}
	a, err := osuser.Lookup(user)
	if err != nil {
		return "", err
	}
	_, err = os.Lstat(l.Root)
	fresh := errors.Is(err, fs.ErrNotExist)
	dir := filepath.Join(l.Root, project, user)
	if err := osuser.MakeDirFor(a, dir, 0o755); err != nil {
		if fresh {
			// Left as it was (only empty directories go), so that the
			// make that succeeds once the cause is mended finds it
			// fresh and marks it.
			_ = os.Remove(filepath.Join(l.Root, project))
			_ = os.Remove(l.Root)
		}
		return "", fmt.Errorf("make %s for %s: %w", dir, a, err)
	}
	if fresh {
		// Made here: its files are the service's to prune.
		if err := l.mark(); err != nil {
			return "", err
		}
	}
	return dir, nil
}

// MakeAgain makes the owner's log directory dir again, as Make made it
// when it took the create (dir is what Make returned then:
// <log dir>/<project>/<user>), if it is gone: an operator may delete it,
// or the whole log directory, while a tuning job still has trials to run,
// and the agent, which opens the output file as the owner, cannot make it
// under the service's directories. The log directory is dir's own, not
// Root: one taken under another -log-dir keeps its directory. The rules
// are Make's (osuser.MakeDirFor): a dir that is there must be user's own
// directory, never a link (another user's, followed, would take the
// output where they like); its parents may be changed by no other user.
func (l LogDirs) MakeAgain(dir, user string) error {
	if !filepath.IsAbs(dir) || filepath.Clean(dir) != dir || filepath.Base(dir) != user {
		return fmt.Errorf("%s is not a log directory of user %q", dir, user)
	}
	project := filepath.Dir(dir)
	made, err := LogDirs{Root: filepath.Dir(project)}.Make(filepath.Base(project), user)
	if err == nil && made != dir {
		err = fmt.Errorf("made %s, not %s", made, dir)
	}
	return err
}

// mark puts LogDirMarker in Root, once.
func (l LogDirs) mark() error {
	f, err := os.OpenFile(filepath.Join(l.Root, LogDirMarker), os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o644)
	if errors.Is(err, fs.ErrExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("mark %s as the training service's log directory: %w", l.Root, err)
	}
	_, err = f.WriteString("The Loom training service made this log directory and deletes its old job-*.out files (-log-retention).\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// pathComponent reports whether s names one directory entry of its own:
// not empty, ".", "..", nor with a separator, a NUL or a % (a % in an
// output pattern is a field, and Loom's own names have none).
func pathComponent(s string) bool {
	return s != "" && s != "." && s != ".." && len(s) <= 255 && !strings.ContainsAny(s, "/\\\x00%")
}

// Prune removes the output files (job-*.out) under Root whose last write
// is older than retention before now, and returns how many it removed:
// the log directory keeps a CustomJob's output as long as Cloud Logging
// keeps Vertex's. A job that has not ended keeps its file whatever its
// age: running (job-<id>.out of <project>) reports whether the job with
// that id in that project is one (nil: none is), so that a job that
// prints nothing for longer than the retention does not lose the file it
// still has open (its later output would go to an unlinked file, lost).
// Only <Root>/<project>/<user>/job-*.out is looked at; a
// link is removed, never followed (a user's directory is theirs: a link
// they put there points where they like). Directories stay (a user's is
// made again by Make, never by the agent). Nothing is removed from a log
// directory without LogDirMarker (one Make did not make): an error says
// so. Errors of single entries are joined; the walk goes on past them.
func (l LogDirs) Prune(now time.Time, retention time.Duration, running func(project string, id int64) bool) (int, error) {
	cutoff := now.Add(-retention)
	projects, err := os.ReadDir(l.Root)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	if fi, err := os.Lstat(filepath.Join(l.Root, LogDirMarker)); err != nil || !fi.Mode().IsRegular() {
		return 0, fmt.Errorf("%s has no file %s: the training service did not make it, so the files there are not its to delete; "+
			"create that file to have its job-*.out files pruned", l.Root, LogDirMarker)
	}
	var errs []error
	removed := 0
	for _, p := range projects {
		if !p.IsDir() { // a link's type is not a directory's
			continue
		}
		users, err := os.ReadDir(filepath.Join(l.Root, p.Name()))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, u := range users {
			if !u.IsDir() {
				continue
			}
			dir := filepath.Join(l.Root, p.Name(), u.Name())
			files, err := os.ReadDir(dir)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			for _, f := range files {
				if !strings.HasPrefix(f.Name(), "job-") || !strings.HasSuffix(f.Name(), ".out") || f.IsDir() {
					continue
				}
				path := filepath.Join(dir, f.Name())
				fi, err := os.Lstat(path)
				if err != nil || !fi.ModTime().Before(cutoff) {
					continue
				}
				// Asked last, of an old file only: a job that starts after
				// this is asked has a new file.
				id, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimPrefix(f.Name(), "job-"), ".out"), 10, 64)
				if err == nil && running != nil && running(p.Name(), id) {
					continue
				}
				if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
					errs = append(errs, err)
					continue
				}
				removed++
			}
		}
	}
	return removed, errors.Join(errs...)
}
