package healthcheck

import (
	"strings"
	"testing"
)

func TestValidName(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"gpu_diag", "disk", "nccl", "site-fan.v2", "0check", strings.Repeat("a", MaxNameBytes)} {
		if !ValidName(ok) {
			t.Errorf("ValidName(%q) = false", ok)
		}
	}
	for _, bad := range []string{"", "-x", ".hidden", "a/b", "../x", "a b", "x\x1b", strings.Repeat("a", MaxNameBytes+1)} {
		if ValidName(bad) {
			t.Errorf("ValidName(%q) = true", bad)
		}
	}
}
