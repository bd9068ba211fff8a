package clusterspec

import "testing"

// TestHomeName: the shared dir's own entries are no user's home.
func TestHomeName(t *testing.T) {
	t.Parallel()
	for user, want := range map[string]bool{"alice": true, "models": false, "checkpoints": false, ".loom": false, "": false} {
		if got := HomeName(user); got != want {
			t.Errorf("HomeName(%q) = %v, want %v", user, got, want)
		}
	}
}
