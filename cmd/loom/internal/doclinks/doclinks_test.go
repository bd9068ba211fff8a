// Package doclinks holds the checks that the repository's Markdown says
// only what can be followed: every relative link reaches a file (and, with
// an anchor, a heading of it), and every test a page names exists. The
// operators' pages (docs/health.md, the services' READMEs) cite files,
// sections and tests as their evidence; a rename left them pointing at
// nothing, which no reader could tell from a claim that was true.
package doclinks

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// root is the repository's root, from this package's directory.
var root = filepath.Join("..", "..", "..", "..")

// markdownFiles is every Markdown file of the repository but test data and
// hidden or build directories, relative to root.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules" || name == "bin") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(name, ".md") {
			rel, err := filepath.Rel(root, path)
			if err != nil {
				return err
			}
			out = append(out, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 {
		t.Fatal("no Markdown file found under the repository root")
	}
	return out
}

// proseLine is one line of a Markdown file outside its fenced code blocks,
// with its inline code spans removed: a link or a test name in code is an
// example, not a reference.
type proseLine struct {
	n    int
	text string
}

var codeSpan = regexp.MustCompile("`[^`]*`")

// prose reads a Markdown file's lines outside fenced code blocks. With
// keepCode the inline code spans stay (test names are cited in them).
func prose(t *testing.T, rel string, keepCode bool) []proseLine {
	t.Helper()
	f, err := os.Open(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []proseLine
	fenced := false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if trimmed := strings.TrimSpace(line); strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		if !keepCode {
			line = codeSpan.ReplaceAllString(line, "")
		}
		out = append(out, proseLine{n, line})
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("%s: %v", rel, err)
	}
	return out
}

var (
	heading    = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
	headLink   = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
	inlineLink = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
)

// slug is the anchor GitHub gives a heading: lower case, every character
// but letters, digits, '-', '_' and spaces dropped, spaces made '-'.
func slug(h string) string {
	h = headLink.ReplaceAllString(h, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(h)) {
		switch {
		case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}

// anchors are a Markdown file's heading anchors, the second of a name
// suffixed "-1" and so on, as GitHub numbers them.
func anchors(t *testing.T, rel string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	seen := map[string]int{}
	for _, l := range prose(t, rel, true) {
		m := heading.FindStringSubmatch(l.text)
		if m == nil {
			continue
		}
		s := slug(strings.ReplaceAll(m[1], "`", ""))
		if n := seen[s]; n > 0 {
			out[s+"-"+strconv.Itoa(n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

func TestSlug(t *testing.T) {
	t.Parallel()
	for h, want := range map[string]string{
		"Job accounting (sacct and sstat)":     "job-accounting-sacct-and-sstat",
		"Slurm's reserved names":               "slurms-reserved-names",
		"loom nodes drain, resume, quarantine": "loom-nodes-drain-resume-quarantine",
		"A [link](x.md) in `code`":             "a-link-in-code",
		"Node states":                          "node-states",
	} {
		if got := slug(strings.ReplaceAll(h, "`", "")); got != want {
			t.Errorf("slug(%q) = %q, want %q", h, got, want)
		}
	}
}

// TestMarkdownLinksResolve: every relative link of the repository's
// Markdown (docs/*.md, the READMEs) names a file or directory that exists,
// and an anchor names a heading of the Markdown file it points into.
func TestMarkdownLinksResolve(t *testing.T) {
	t.Parallel()
	cache := map[string]map[string]bool{}
	links, withAnchor := 0, 0
	for _, rel := range markdownFiles(t) {
		for _, l := range prose(t, rel, false) {
			for _, m := range inlineLink.FindAllStringSubmatch(l.text, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				links++
				path, anchor, _ := strings.Cut(target, "#")
				dest := rel
				if path != "" {
					dest = filepath.Join(filepath.Dir(rel), filepath.FromSlash(path))
				}
				if _, err := os.Stat(filepath.Join(root, dest)); err != nil {
					t.Errorf("%s:%d: link %q: no file %s", rel, l.n, target, dest)
					continue
				}
				if anchor == "" || !strings.HasSuffix(dest, ".md") {
					continue
				}
				withAnchor++
				if cache[dest] == nil {
					cache[dest] = anchors(t, dest)
				}
				if !cache[dest][anchor] {
					t.Errorf("%s:%d: link %q: %s has no heading with anchor #%s", rel, l.n, target, dest, anchor)
				}
			}
		}
	}
	if links == 0 || withAnchor == 0 {
		t.Fatalf("found %d relative links, %d with an anchor: the link pattern no longer matches the docs", links, withAnchor)
	}
}

var (
	testName = regexp.MustCompile(`\bTest[A-Z][A-Za-z0-9_]*`)
	testFunc = regexp.MustCompile(`(?m)^func (Test[A-Z][A-Za-z0-9_]*)\(`)
)

// external are the tests a page names that are not this repository's:
// go-cloud's blob/drivertest cases, which docs/registry.md names as the
// conformance suite skips them.
var external = map[string]bool{"TestAttributes": true, "TestSignedURL": true, "TestNonexistentBucket": true}

// prefixOfATest reports whether name begins some test's name: a page may
// give a -run pattern ("-run 'TestTrain'") rather than one test.
func prefixOfATest(tests map[string]bool, name string) bool {
	for t := range tests {
		if strings.HasPrefix(t, name) {
			return true
		}
	}
	return false
}

// TestDocsNameTestsThatExist: every Go test a Markdown page names (as its
// evidence for a claim: "tested in TestX") is a test function of the
// repository. docs/health.md named TestLastProgressOfAStepEndedWhileTheAgentWasDown
// after the test had become TestLastProgressOfWhatEndedWhileTheAgentWasDown.
func TestDocsNameTestsThatExist(t *testing.T) {
	t.Parallel()
	tests := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(d.Name(), "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range testFunc.FindAllStringSubmatch(string(b), -1) {
			tests[m[1]] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !tests["TestDocsNameTestsThatExist"] {
		t.Fatal("the walk found no test functions: the pattern no longer matches")
	}
	named := 0
	for _, rel := range markdownFiles(t) {
		for _, l := range prose(t, rel, true) {
			for _, name := range testName.FindAllString(l.text, -1) {
				named++
				if !tests[name] && !external[name] && !prefixOfATest(tests, name) {
					t.Errorf("%s:%d: names %s, which is no test function of the repository", rel, l.n, name)
				}
			}
		}
	}
	if named == 0 {
		t.Fatal("no Markdown page names a test: the pattern no longer matches the docs")
	}
}
