package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWriteSection(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "REPORT.md")
	if err := os.WriteFile(path, []byte("<!-- other:begin -->\nkeep\n<!-- other:end -->"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writeSection(path, "schedsim", "first\n"); err != nil {
		t.Fatal(err)
	}
	if err := writeSection(path, "schedsim", "second"); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := "<!-- other:begin -->\nkeep\n<!-- other:end -->\n\n<!-- schedsim:begin -->\nsecond\n<!-- schedsim:end -->\n"
	if string(got) != want {
		t.Fatalf("file:\n%s\nwant:\n%s", got, want)
	}
	if err := os.WriteFile(path, []byte("<!-- schedsim:begin -->\nno end"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writeSection(path, "schedsim", "x"); err == nil || !strings.Contains(err.Error(), "only one of") {
		t.Errorf("half a section: %v", err)
	}
}

func TestRunSmall(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	swf := filepath.Join(dir, "pwa-swf")
	if err := os.MkdirAll(swf, 0o755); err != nil {
		t.Fatal(err)
	}
	log := "; MaxNodes: 2\n; MaxProcs: 2\n 1 0 -1 100 2 -1 -1 2 200 -1 1 1 1 -1 -1 -1 -1 -1\n 2 10 -1 50 1 -1 -1 1 100 -1 1 2 1 -1 -1 -1 -1 -1\n"
	if err := os.WriteFile(filepath.Join(swf, "NASA-iPSC-1993-3.1-cln.swf.gz"), gz(t, log), 0o644); err != nil {
		t.Fatal(err)
	}
	report := filepath.Join(dir, "REPORT.md")
	var out, errb bytes.Buffer
	err := run(context.Background(), []string{"-only", "sim", "-traces", "nasa", "-policies", "fifo", "-data", dir, "-report", report}, &out, &errb)
	if err != nil {
		t.Fatalf("%v\n%s", err, errb.String())
	}
	got, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"<!-- schedsim:begin -->", "| mean wait | 45s |", "Arrivals ×2 (submit times divided by 2)", "<!-- schedsim:end -->", "go run ./services/scheduler/cmd/schedsim"} {
		if !strings.Contains(string(got), want) {
			t.Errorf("report lacks %q:\n%s", want, got)
		}
	}
	err = run(context.Background(), []string{"-only", "cycle", "-sizes", "8x40,16x40", "-cycle-policies", "easy,loom", "-repeat", "1", "-report", report}, &out, &errb)
	if err != nil {
		t.Fatalf("%v\n%s", err, errb.String())
	}
	got, err = os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"<!-- schedsim:begin -->", "<!-- schedcycle:begin -->", "| 8 | 64 | 40 |", "| 16 | 128 | 40 |", "| loom |", "<!-- schedcycle:end -->"} {
		if !strings.Contains(string(got), want) {
			t.Errorf("report lacks %q:\n%s", want, got)
		}
	}
	if strings.Count(string(got), "| easy |") != 2 {
		t.Errorf("want one easy row per size:\n%s", got)
	}
	for _, bad := range [][]string{{"-only", "x"}, {"-traces", "google"}, {"-policies", "sjf"}, {"-limit", "-2"}, {"-sizes", "10k"}, {"-cycle-policies", "x"}} {
		if err := run(context.Background(), bad, &out, &errb); err == nil {
			t.Errorf("schedsim %v: no error", bad)
		}
	}
}

func gz(t *testing.T, s string) []byte {
	t.Helper()
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	if _, err := w.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}
