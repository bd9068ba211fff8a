package termtext

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestFirstSpoofing(t *testing.T) {
	t.Parallel()
	for s, want := range map[string]rune{"ok text": 0, "a\x1b[2Jb": 0x1b, "x\u202eevil": 0x202e, "del\x7f": 0x7f, "c1\u0085": 0x85, "iso\u2066": 0x2066} {
		r, bad := FirstSpoofing(s, "")
		if bad != (want != 0) || r != want {
			t.Errorf("FirstSpoofing(%q) = %U %v, want %U", s, r, bad, want)
		}
	}
	if _, bad := FirstSpoofing("line one\nline two\tx", "\n\t"); bad {
		t.Error("allowed newline and tab refused")
	}
}

func TestClean(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in    string
		limit int
		want  string
	}{
		{"exit 1", 64, "exit 1"},
		{"\x1b[2Joverwrite", 64, "\uFFFD[2Joverwrite"},
		{"bad \xff utf8", 64, "bad \uFFFD utf8"},
		{"rtl \u202e trick", 64, "rtl \uFFFD trick"},
		{"two\nlines", 64, "two\uFFFDlines"},
		// 20 bytes cut to 10: the mark takes 3, and an é is not split.
		{strings.Repeat("é", 10), 10, "ééé…"},
	} {
		if got := Clean(tc.in, tc.limit); got != tc.want {
			t.Errorf("Clean(%q, %d) = %q, want %q", tc.in, tc.limit, got, tc.want)
		}
	}
	if got := CleanAllowing("line\n\tindented\x1b[2J", 64, "\n\t"); got != "line\n\tindented\uFFFD[2J" {
		t.Errorf("CleanAllowing kept %q", got)
	}
	// Replacements are longer than what they replace: still at most the limit.
	for _, in := range []string{strings.Repeat("\xff", 5000), strings.Repeat("\x1b", 5000), strings.Repeat("é", 5000)} {
		if got := Clean(in, 1024); len(got) > 1024 || !utf8.ValidString(got) || !strings.HasSuffix(got, "…") {
			t.Errorf("Clean of %d bytes to 1024: %d bytes, valid %v", len(in), len(got), utf8.ValidString(got))
		}
	}
	long := strings.Repeat("a", 5000) + "\x1b"
	got := Clean(long, 1024)
	if len(got) > 1024 || !utf8.ValidString(got) || !strings.HasSuffix(got, "…") {
		t.Errorf("Clean of 5001 bytes to 1024: %d bytes, valid %v", len(got), utf8.ValidString(got))
	}
}

// TestWidth: a CJK character or an emoji takes two columns, a combining
// mark none, everything else one.
func TestWidth(t *testing.T) {
	t.Parallel()
	for s, want := range map[string]int{"": 0, "train": 5, "训练": 4, "é": 1, "e\u0301": 1, "🚀x": 3, "ｆｕｌｌ": 8, "a\u200db": 2} {
		if got := Width(s); got != want {
			t.Errorf("Width(%q) = %d, want %d", s, got, want)
		}
	}
}
