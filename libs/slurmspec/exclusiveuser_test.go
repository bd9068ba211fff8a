package slurmspec

import "testing"

// TestUserMayJoin: Slurm 22.05's OverSubscribe=USER as measured beside it
// with two OS users: an --exclusive=user job's node takes its user's jobs
// only, and such a job needs a node where only its user's jobs run (or
// none).
func TestUserMayJoin(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		user     string
		exclUser bool
		owner    string
		runs     int
		onlyUser string
		want     bool
	}{
		{"bob", false, "", 0, "", true},
		{"bob", false, "", 2, "", true},            // shared with several users
		{"bob", false, "alice", 1, "alice", false}, // alice's --exclusive=user node
		{"alice", false, "alice", 1, "alice", true},
		{"bob", true, "", 0, "", true},
		{"bob", true, "", 1, "alice", false}, // alice's job runs there
		{"bob", true, "", 2, "", false},      // several users' jobs
		{"bob", true, "", 2, "bob", true},
		{"bob", true, "bob", 1, "bob", true},
	} {
		if got := UserMayJoin(tc.user, tc.exclUser, tc.owner, tc.runs, tc.onlyUser); got != tc.want {
			t.Errorf("UserMayJoin(%q, %v, owner %q, %d runs, only %q) = %v, want %v",
				tc.user, tc.exclUser, tc.owner, tc.runs, tc.onlyUser, got, tc.want)
		}
	}
}
