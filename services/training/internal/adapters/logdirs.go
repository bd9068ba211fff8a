package adapters

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/loom-ml/loom/libs/osuser"
	"github.com/loom-ml/loom/libs/resname"
)

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
// change (see osuser.MakeDirFor).
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
	dir := filepath.Join(l.Root, project, user)
	if err := osuser.MakeDirFor(a, dir, 0o755); err != nil {
		return "", fmt.Errorf("make %s for %s: %w", dir, a, err)
	}
	return dir, nil
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
// keeps Vertex's. Only <Root>/<project>/<user>/job-*.out is looked at; a
// link is removed, never followed (a user's directory is theirs: a link
// they put there points where they like). Directories stay (a user's is
// made again by Make, never by the agent). Errors of single entries are
// joined; the walk goes on past them.
func (l LogDirs) Prune(now time.Time, retention time.Duration) (int, error) {
	cutoff := now.Add(-retention)
	projects, err := os.ReadDir(l.Root)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
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
