package authz

import (
	"os"
	"strings"
	"testing"
)

const (
	docPath  = "../../../../docs/security.md"
	docBegin = "<!-- authz.Table begin -->\n"
	docEnd   = "<!-- authz.Table end -->"
)

// TestSecurityDocTable: docs/security.md shows exactly Markdown(), between
// its markers. LOOM_UPDATE_DOCS=1 rewrites it.
func TestSecurityDocTable(t *testing.T) {
	b, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	i, j := strings.Index(doc, docBegin), strings.Index(doc, docEnd)
	if i < 0 || j < i {
		t.Fatalf("%s has no %q … %q markers", docPath, docBegin, docEnd)
	}
	want := Markdown()
	if got := doc[i+len(docBegin) : j]; got != want {
		if os.Getenv("LOOM_UPDATE_DOCS") == "1" {
			if err := os.WriteFile(docPath, []byte(doc[:i+len(docBegin)]+want+doc[j:]), 0o644); err != nil {
				t.Fatal(err)
			}
			return
		}
		t.Errorf("the table in %s differs from authz.Table; run LOOM_UPDATE_DOCS=1 go test -run TestSecurityDocTable ./internal/authz/\nwant:\n%s", docPath, want)
	}
}
