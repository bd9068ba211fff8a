package report

import (
	"os"
	"path/filepath"
	"testing"
)

func TestWriteSection(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "REPORT.md")
	a1 := "<!-- a:begin -->\none\n<!-- a:end -->\n"
	b := "<!-- b:begin -->\nbee\n<!-- b:end -->\n"
	a2 := "<!-- a:begin -->\ntwo\n<!-- a:end -->\n"
	for _, step := range []struct{ name, section string }{{"a", a1}, {"b", b}, {"a", a2}} {
		if err := WriteSection(path, step.name, step.section); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := header + a2 + "\n" + b; string(got) != want {
		t.Errorf("report:\n%s\nwant:\n%s", got, want)
	}
	if err := WriteSection(path, "a", "no markers"); err == nil {
		t.Error("a section without its markers was written")
	}
}
