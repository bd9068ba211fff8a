package slurmcli

import (
	osuser "os/user"
	"testing"
)

func TestUserName(t *testing.T) {
	t.Parallel()
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	if got := UserName(env(map[string]string{"LOOM_USER": "alice", "USER": "root"})); got != "alice" {
		t.Errorf("UserName with LOOM_USER = %q, want alice", got)
	}
	if got := UserName(env(map[string]string{"USER": "bob"})); got != "bob" {
		t.Errorf("UserName with USER = %q, want bob", got)
	}
	// Neither: the account this test runs as, which has a name here.
	u, err := osuser.Current()
	if err != nil {
		t.Skipf("no account name to compare with: %v", err)
	}
	if got := UserName(env(nil)); got == "" || got != u.Username {
		t.Errorf("UserName without LOOM_USER or USER = %q, want the account %q", got, u.Username)
	}
}
