package proc

import (
	"os"
	"path/filepath"
	"testing"
)

func TestLookPath(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(p string, mode os.FileMode) {
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), mode); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(bin, "tool"), 0o755)
	write(filepath.Join(bin, "plain"), 0o644)
	write(filepath.Join(dir, "local"), 0o755)
	for _, c := range []struct {
		name, path, want, err string
	}{
		{name: "tool", path: "/nowhere:" + bin, want: filepath.Join(bin, "tool")},
		{name: "tool", path: "bin", want: filepath.Join(bin, "tool")}, // relative PATH entries are against dir
		{name: "plain", path: bin, err: "command not found"},          // not executable
		{name: "missing", path: bin, err: "command not found"},
		{name: "./local", path: "", want: filepath.Join(dir, "local")},
		{name: "./nope", path: bin, err: "No such file or directory"},
		{name: "bin", path: dir, err: "command not found"}, // a directory is no program
	} {
		got, err := LookPath(c.name, c.path, dir)
		switch {
		case c.err != "" && (err == nil || err.Error() != c.err):
			t.Errorf("LookPath(%q, %q) = %q, %v; want error %q", c.name, c.path, got, err, c.err)
		case c.err == "" && (err != nil || got != c.want):
			t.Errorf("LookPath(%q, %q) = %q, %v; want %q", c.name, c.path, got, err, c.want)
		}
	}
}
