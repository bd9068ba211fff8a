// Package report writes a benchmark's section into bench/REPORT.md: each
// program owns the part of the file between its markers,
// "<!-- NAME:begin -->" and "<!-- NAME:end -->", and leaves the rest (the
// other programs' sections and the hand-written notes) as it is.
package report

import (
	"fmt"
	"os"
	"strings"
)

// header starts a report file that does not exist yet.
const header = "# Loom benchmark report\n\nEvery number here was measured by a program in bench/; each section says how to rerun it.\n\n"

// WriteSection puts section (which starts with NAME's begin marker and ends
// with its end marker and a newline) into the file at path: in place of the
// old section when there is one, else appended after a blank line (the file
// is created, with a title, when missing).
func WriteSection(path, name, section string) error {
	begin, end := "<!-- "+name+":begin -->", "<!-- "+name+":end -->\n"
	if !strings.HasPrefix(section, begin) || !strings.HasSuffix(section, end) {
		return fmt.Errorf("report section %s: must start with %q and end with %q", name, begin, end)
	}
	old, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	s := string(old)
	if i, j := strings.Index(s, begin), strings.Index(s, end); i >= 0 && j > i {
		s = s[:i] + section + s[j+len(end):]
	} else {
		if s == "" {
			s = header
		} else if !strings.HasSuffix(s, "\n\n") {
			s = strings.TrimRight(s, "\n") + "\n\n"
		}
		s += section
	}
	return os.WriteFile(path, []byte(s), 0o644)
}
