package app

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/loom-ml/loom/services/agent/internal/domain"
)

// TestJobFilesOnlyTheOwnersOwn: the agent reads a job's progress file,
// metrics file and TensorBoard event files as root, in directories the
// job's owner writes, so each of the three readers takes only the owner's
// own regular file: not someone else's file (the progress and metrics
// readers took it), not through a symlink, not a file with a second name
// (the TensorBoard reader took it), not a FIFO, whose read must not block.
// Each file is real, made as a job would make it.
func TestJobFilesOnlyTheOwnersOwn(t *testing.T) {
	t.Parallel()
	uid := uint32(os.Getuid())
	// A real event file's bytes, for the TensorBoard reader.
	eventFile := lossEventFile(t, t.TempDir(), 7)
	event, err := os.ReadFile(eventFile)
	if err != nil {
		t.Fatal(err)
	}
	readers := []struct {
		name, file, content string
		// read reports whether the reader took the content of dir's file.
		read func(a *App, dir string) bool
	}{
		{"progress", "progress.json", `{"step": 7}`, func(_ *App, dir string) bool {
			return readProgress(filepath.Join(dir, "progress.json"), domain.ProgressReport{}).Step == 7
		}},
		{"metrics", "metrics.jsonl", hypertuneLine(7), func(a *App, dir string) bool {
			return len(takeSteps(a, newTail("j", 1, filepath.Join(dir, "metrics.jsonl"), tailPos{}), true)) > 0
		}},
		{"tensorboard", filepath.Base(eventFile), string(event), func(a *App, dir string) bool {
			tl := newTail("j", 1, filepath.Join(dir, "none.jsonl"), tailPos{TBDir: dir, TBUID: uid})
			return len(takeTB(a, tl, tbPollBytes)["loss"]) > 0
		}},
	}
	write := func(t *testing.T, path, content string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name string
		// make puts the file at path, content in it (where it has any).
		make     func(t *testing.T, path, content string)
		want     bool
		needRoot bool
	}{
		{"the owner's own file", write, true, false},
		{"someone else's file", func(t *testing.T, path, content string) {
			write(t, path, content)
			if err := os.Chown(path, int(uid)+4242, -1); err != nil {
				t.Fatal(err)
			}
		}, false, true},
		{"a symlink to the owner's own file", func(t *testing.T, path, content string) {
			other := filepath.Join(filepath.Dir(path), "other")
			write(t, other, content)
			if err := os.Symlink(other, path); err != nil {
				t.Fatal(err)
			}
		}, false, false},
		{"a second name", func(t *testing.T, path, content string) {
			other := filepath.Join(filepath.Dir(path), "other")
			write(t, other, content)
			if err := os.Link(other, path); err != nil {
				t.Fatal(err)
			}
		}, false, false},
		{"a FIFO", func(t *testing.T, path, _ string) {
			if err := syscall.Mkfifo(path, 0o600); err != nil {
				t.Fatal(err)
			}
		}, false, false},
	}
	for _, r := range readers {
		for _, c := range cases {
			t.Run(r.name+"/"+c.name, func(t *testing.T) {
				t.Parallel()
				if c.needRoot && os.Geteuid() != 0 {
					t.Skip("giving a file to someone else needs root")
				}
				dir := t.TempDir()
				c.make(t, filepath.Join(dir, r.file), r.content)
				done := make(chan bool, 1)
				go func() { done <- r.read(tailApp(), dir) }()
				select {
				case got := <-done:
					if got != c.want {
						t.Fatalf("%s read %s: %v, want %v", r.name, c.name, got, c.want)
					}
				case <-time.After(10 * time.Second):
					t.Fatalf("%s: reading %s blocked", r.name, c.name)
				}
			})
		}
	}
}

// TestRunFileNeedsItsDirectory: a run's progress and metrics files are
// read only in a directory (its owner is the job's): not through a link
// to one.
func TestRunFileNeedsItsDirectory(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "progress.json"), []byte(`{"step": 7}`), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "run")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	if got := readProgress(filepath.Join(link, "progress.json"), domain.ProgressReport{}); got.Step != 0 {
		t.Fatalf("read through a linked directory: %+v", got)
	}
	if got := readProgress(filepath.Join(dir, "progress.json"), domain.ProgressReport{}); got.Step != 7 {
		t.Fatalf("the run's own directory: %+v", got)
	}
}
