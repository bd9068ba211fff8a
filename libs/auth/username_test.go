package auth

import (
	"strings"
	"testing"
)

func TestCheckUserName(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"alice", "_svc", "a1-b_c", strings.Repeat("a", MaxUserNameBytes)} {
		if err := CheckUserName(ok); err != nil {
			t.Errorf("%q refused: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "Alice", "1abc", "-x", "a b", "alice@example.com", "../etc", "a\x00", strings.Repeat("a", MaxUserNameBytes+1), "é"} {
		if err := CheckUserName(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
