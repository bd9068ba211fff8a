package cli

import (
	"testing"
	"unicode/utf8"
)

// TestCellText: a free-text cell is its first line, control characters as
// spaces, cut at n runes (never inside one) with "…" marking the cut.
func TestCellText(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   string
		n    int
		want string
	}{
		{"ok", 10, "ok"},
		{"  padded  ", 10, "padded"},
		{"exactly10!", 10, "exactly10!"},
		{"eleven runes", 10, "eleven ru…"},
		{"memory test: GPU 0 not found\n(detail follows)", 60, "memory test: GPU 0 not found"},
		{"a\x1b[31mred\x1b[0m\tb", 20, "a\ufffd[31mred\ufffd[0m b"},
		{"bidi \u202eevil", 20, "bidi \ufffdevil"},
		{"ééééééééééé", 5, "éééé…"},
		{"python3 -m trainer --lr=0.1 ∑∑", 30, "python3 -m trainer --lr=0.1 ∑∑"},
		{"python3 -m trainer --lr=0.1 ∑∑∑", 30, "python3 -m trainer --lr=0.1 ∑…"},
	} {
		got := cellText(c.in, c.n)
		if got != c.want || !utf8.ValidString(got) {
			t.Errorf("cellText(%q, %d) = %q, want %q", c.in, c.n, got, c.want)
		}
	}
}
