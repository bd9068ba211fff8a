package stepd

import (
	"os/user"
	"strconv"
	"testing"
)

// TestTTYGroup: a job's terminal is writable by group tty alone (0620), as
// grantpt makes it, else by no group (0600): never by the owner's group.
func TestTTYGroup(t *testing.T) {
	t.Parallel()
	const ownerGID = 54321
	gid, mode := ttyGroup(ownerGID)
	g, err := user.LookupGroup("tty")
	switch {
	case err == nil:
		want, _ := strconv.Atoi(g.Gid)
		if gid != want || mode != 0o620 {
			t.Errorf("ttyGroup = %d, %o; want tty's %d, 0620", gid, mode, want)
		}
	case gid != ownerGID || mode != 0o600:
		t.Errorf("without a tty group: ttyGroup = %d, %o; want %d, 0600", gid, mode, ownerGID)
	}
}
