package proc

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
)

// LookPath finds the program name as a shell started in dir with PATH
// pathEnv would: a name with a slash is taken relative to dir, any other is
// searched in pathEnv's directories (relative ones, and the empty one
// meaning ".", against dir). It looks at the job's PATH, not the caller's
// own, which is why exec.LookPath does not do. The errors read as a shell's:
// "No such file or directory" and "command not found".
func LookPath(name, pathEnv, dir string) (string, error) {
	if strings.Contains(name, "/") {
		p := name
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		if isExecutable(p) {
			return p, nil
		}
		return "", errors.New("No such file or directory")
	}
	for _, d := range filepath.SplitList(pathEnv) {
		if d == "" {
			d = "."
		}
		if !filepath.IsAbs(d) {
			d = filepath.Join(dir, d)
		}
		if p := filepath.Join(d, name); isExecutable(p) {
			return p, nil
		}
	}
	return "", errors.New("command not found")
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}
