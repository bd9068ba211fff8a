package testkit

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/loom-ml/loom/libs/osuser"
	"github.com/loom-ml/loom/libs/testkit/need"
)

// OSUser is a real operating-system account made for one test (OSUsers).
type OSUser struct {
	osuser.Account
	// Group is the name of the supplementary group made with it (the
	// account is a member), whose id Account.Groups holds besides GID.
	Group string
	// GroupID is that group's id.
	GroupID uint32
}

// usersMu serialises this process's useradd and userdel calls: they lock
// the passwd and group files, and a second caller fails instead of waiting.
var usersMu sync.Mutex

// OSUsers makes n real operating-system accounts for the test (useradd,
// groupadd), each with a user group of its own as its primary group and a
// supplementary group of its own, with no home directory and names unique
// to this call ("lt" and random hex); they are removed (userdel, groupdel)
// when the test ends. The test is skipped, saying why, when it does not
// run as root or the tools are missing: only root can make accounts, and
// only tests that run as different users can show what a job's owner may
// and may not do.
func OSUsers(t testing.TB, n int) []OSUser {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("testkit: needs root to make operating-system users (useradd); run the test as root to check jobs run as their owners")
	}
	// Missing tools fail the test where tools are required (CI): a skip
	// there would hide a missing install step.
	need.Tools(t, "apt-get install passwd", "useradd", "groupadd", "userdel", "groupdel")
	out := make([]OSUser, 0, n)
	for range n {
		var b [4]byte
		_, _ = rand.Read(b[:])
		name := "lt" + hex.EncodeToString(b[:])
		group := name + "g"
		admin(t, "groupadd", group)
		t.Cleanup(func() { adminQuiet("groupdel", group) })
		admin(t, "useradd", "-M", "-d", "/nonexistent", "-s", "/bin/sh", "-U", "-G", group, name)
		t.Cleanup(func() {
			adminQuiet("userdel", name)
			adminQuiet("groupdel", name) // the user group, where userdel left it
		})
		a, err := osuser.Lookup(name)
		if err != nil {
			t.Fatalf("testkit: the user just made: %v", err)
		}
		u := OSUser{Account: a, Group: group}
		for _, g := range a.Groups {
			if g != a.GID {
				u.GroupID = g
			}
		}
		out = append(out, u)
	}
	return out
}

// OSUserNamed returns the operating-system account name, making it for the
// test (useradd, with a user group of its own and no home directory) when
// it is missing and removing it when the test ends; an account that
// exists already is used as it is and kept. It skips the test, saying why,
// where OSUsers does. For suites whose users are named after their tests
// (so that each test sees only its own jobs) and whose jobs must run as
// those users.
func OSUserNamed(t testing.TB, name string) osuser.Account {
	t.Helper()
	if a, err := osuser.Lookup(name); err == nil {
		return a
	}
	if os.Geteuid() != 0 {
		t.Skipf("testkit: needs root to make the operating-system user %s its jobs run as (useradd)", name)
	}
	need.Tools(t, "apt-get install passwd", "useradd", "userdel")
	admin(t, "useradd", "-M", "-d", "/nonexistent", "-s", "/bin/sh", "-U", name)
	t.Cleanup(func() {
		adminQuiet("userdel", name)
		adminQuiet("groupdel", name)
	})
	a, err := osuser.Lookup(name)
	if err != nil {
		t.Fatalf("testkit: the user just made: %v", err)
	}
	return a
}

// admin runs an account tool, retrying while another process holds the
// passwd or group file lock (exit code 10), and fails the test otherwise.
func admin(t testing.TB, tool string, args ...string) {
	t.Helper()
	if err := adminRun(tool, args...); err != nil {
		t.Fatalf("testkit: %s %s: %v", tool, strings.Join(args, " "), err)
	}
}

// adminQuiet is admin for cleanups: failures are ignored (the account may
// be gone with another).
func adminQuiet(tool string, args ...string) { _ = adminRun(tool, args...) }

func adminRun(tool string, args ...string) error {
	usersMu.Lock()
	defer usersMu.Unlock()
	deadline := time.Now().Add(setupTimeout)
	delay := 10 * time.Millisecond
	for {
		out, err := exec.Command(tool, args...).CombinedOutput()
		var ee *exec.ExitError
		// 10: "cannot lock /etc/passwd; try again later" (another
		// process's useradd): back off and try again.
		if err == nil || !errors.As(err, &ee) || ee.ExitCode() != 10 || time.Now().After(deadline) {
			if err != nil {
				return errors.New(strings.TrimSpace(string(out)) + ": " + err.Error())
			}
			return nil
		}
		time.Sleep(delay)
		delay = min(2*delay, 200*time.Millisecond)
	}
}

// ReachableDir returns a temporary directory of the test's, mode 0755,
// under a parent other users can enter (t.TempDir's own parent is 0700):
// where a test's other OS users may look.
func ReachableDir(t testing.TB) string {
	t.Helper()
	d := t.TempDir()
	for _, p := range []string{filepath.Dir(d), d} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return d
}
