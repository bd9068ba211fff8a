// Package termtext is the one rule for text that Loom's commands print in
// rows (squeue, sacct, sinfo -R, loom ... get): which characters would let
// a caller's text pass for something else on a terminal, and how text from
// a source that cannot be refused (a node's report) is made safe to print.
// It is pure: no I/O.
package termtext

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/width"
)

// Spoofing reports whether r would let text pass for something else on a
// terminal: a control character (C0, DEL, C1: an ANSI escape can rewrite
// other rows) or a bidirectional override or isolate.
func Spoofing(r rune) bool {
	return unicode.IsControl(r) || (r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069)
}

// FirstSpoofing returns the first character of s that Spoofing refuses,
// other than those in allow (a description's newlines, say).
func FirstSpoofing(s, allow string) (rune, bool) {
	for _, r := range s {
		if Spoofing(r) && !strings.ContainsRune(allow, r) {
			return r, true
		}
	}
	return 0, false
}

// Clean returns s safe to print, for text that is stored and shown but
// cannot be refused (what a node reports of a process's end): invalid
// UTF-8 and every spoofing character become U+FFFD, and what is past limit
// bytes (at least a few) is cut at a character boundary and marked with
// "…", so that the result is at most limit bytes.
func Clean(s string, limit int) string { return CleanAllowing(s, limit, "") }

// CleanAllowing is Clean keeping the control characters in allow (a
// multi-line report's newlines and tabs).
func CleanAllowing(s string, limit int, allow string) string {
	bad := func(r rune) bool { return Spoofing(r) && !strings.ContainsRune(allow, r) }
	clean := func(s string) string {
		if utf8.ValidString(s) && strings.IndexFunc(s, bad) < 0 {
			return s
		}
		var b strings.Builder
		for _, r := range s { // invalid UTF-8 ranges as RuneError
			if bad(r) {
				r = utf8.RuneError
			}
			b.WriteRune(r)
		}
		return b.String()
	}
	// Cleaned first, then cut: a replacement (3 bytes) is longer than the
	// byte it replaces. Only what can be kept is cleaned: at most limit
	// bytes of it.
	c := clean(s[:min(len(s), limit+1)])
	if len(c) <= limit && len(s) <= limit {
		return c
	}
	cut := max(limit-len("…"), 0)
	for cut > 0 && !utf8.RuneStart(c[cut]) {
		cut--
	}
	return c[:cut] + "…"
}

// Width is how many terminal columns s takes: two for a wide or
// fullwidth character (CJK, most emoji), none for a combining mark, a
// zero-width joiner or a variation selector, one for any other. Tables
// pad by it: counting runes (text/tabwriter) misaligns every column after
// a cell with a CJK display name.
func Width(s string) int {
	n := 0
	for _, r := range s {
		n += runeWidth(r)
	}
	return n
}

func runeWidth(r rune) int {
	switch {
	case unicode.In(r, unicode.Mn, unicode.Me, unicode.Cf) || (r >= 0xfe00 && r <= 0xfe0f):
		return 0
	}
	switch width.LookupRune(r).Kind() {
	case width.EastAsianWide, width.EastAsianFullwidth:
		return 2
	}
	return 1
}
