package app

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/loom-ml/loom/libs/tbevents"
	"github.com/loom-ml/loom/libs/testkit"
)

// tbFile is the event file TensorFlow 2 wrote (tensor-valued scalars).
const tbFile = "/work/shared/data/tensorboard/events.out.tfevents.1585499054.v2"

// takeTB reads tl's TensorBoard directory and returns the points' values
// by name, and empties pending.
func takeTB(a *App, tl *tail, budget int64) map[string][]float64 {
	a.readTensorBoard("s", tl, budget)
	out := map[string][]float64{}
	for _, p := range tl.pending {
		for k, v := range p.Values {
			out[k] = append(out[k], v)
		}
	}
	tl.pending = nil
	return out
}

// TestTailTensorBoard: TensorFlow's file in a subdirectory (its tag gets
// the prefix) and a file being written (a record cut short waits for its
// end) are read once each; an oversized record is skipped by its length; a
// restarted tail goes on from its stored position; files of another user
// and links are not read.
func TestTailTensorBoard(t *testing.T) {
	t.Parallel()
	tf, err := os.ReadFile(tbFile)
	if err != nil {
		t.Skipf("TensorFlow's event file is not here: %v", err)
	}
	a := tailApp()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "validation"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "validation", filepath.Base(tbFile)), tf, 0o600); err != nil {
		t.Fatal(err)
	}
	// A link to it is passed over.
	if err := os.Symlink(filepath.Join(dir, "validation", filepath.Base(tbFile)), filepath.Join(dir, "events.out.tfevents.1.link")); err != nil {
		t.Fatal(err)
	}
	w, err := tbevents.Create(dir, "host", time.Unix(1700000000, 0))
	if err != nil {
		t.Fatal(err)
	}
	for s := 1; s <= 3; s++ {
		_ = w.AddScalar("loss", int64(s), time.Unix(1700000000+int64(s), 0), float64(s))
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	// Half of a fourth record: not yet.
	rec := tbRecord(t, "loss", 4, 4)
	ours := filepath.Join(dir, tbevents.FileName(time.Unix(1700000000, 0), "host"))
	appendTo(t, ours, string(rec[:10]))

	uid := uint32(os.Getuid())
	tl := newTail("j", 1, filepath.Join(dir, "none.jsonl"), tailPos{TBDir: dir, TBUID: uid})
	got := takeTB(a, tl, tbPollBytes)
	if !slices.Equal(got["loss"], []float64{1, 2, 3}) || len(got["validation/my_metric"]) != 100 || got["validation/my_metric"][99] != 49.5 {
		t.Fatalf("first read: loss %v, validation/my_metric %d values", got["loss"], len(got["validation/my_metric"]))
	}
	if len(got) != 2 {
		t.Errorf("names %v: the link must not be read", got)
	}
	// The rest of the fourth record, then one larger than a record may be
	// (skipped), then a fifth.
	appendTo(t, ours, string(rec[10:]))
	big := make([]byte, tbMaxRecord+1)
	appendTo(t, ours, string(tbevents.AppendRecord(nil, big)))
	appendTo(t, ours, string(tbRecord(t, "loss", 5, 5)))
	pos, _ := json.Marshal(tl.pos)
	if got := takeTB(a, tl, tbPollBytes); !slices.Equal(got["loss"], []float64{4, 5}) || len(got) != 1 {
		t.Fatalf("second read: %v, want loss 4 and 5 only", got)
	}
	// A tail restarted from the position stored before the second read
	// reads the same again, and nothing of the first.
	var p tailPos
	if err := json.Unmarshal(pos, &p); err != nil {
		t.Fatal(err)
	}
	if got := takeTB(a, newTail("j", 1, tl.path, p), tbPollBytes); !slices.Equal(got["loss"], []float64{4, 5}) {
		t.Fatalf("restarted: %v, want loss 4 and 5", got)
	}
	// The budget bounds one read: a small one reads part, the rest later.
	fresh := newTail("j", 1, tl.path, tailPos{TBDir: dir, TBUID: uid})
	part := takeTB(a, fresh, 200)
	if n := len(part["validation/my_metric"]) + len(part["loss"]); n == 0 || n >= 105 {
		t.Errorf("a 200-byte budget read %d values", n)
	}
	// Another user's files are not read.
	other := newTail("j", 1, tl.path, tailPos{TBDir: dir, TBUID: uid + 1})
	if got := takeTB(a, other, tbPollBytes); len(got) != 0 {
		t.Errorf("another user's files read: %v", got)
	}
}

// tbRecord is one scalar event, framed.
func tbRecord(t *testing.T, tag string, step int64, v float64) []byte {
	t.Helper()
	var b writerBuf
	w, err := tbevents.NewWriter(&b, time.Unix(1700000000, 0))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	b.data = nil // drop the file_version record
	if err := w.AddScalar(tag, step, time.Unix(1700000000+step, 0), v); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	return b.data
}

type writerBuf struct{ data []byte }

func (w *writerBuf) Write(p []byte) (int, error) { w.data = append(w.data, p...); return len(p), nil }

// TestTailTensorBoardRotates: a program that makes more event files than
// a tail follows has its newest read, and the stored position stays
// bounded.
func TestTailTensorBoardRotates(t *testing.T) {
	t.Parallel()
	a := tailApp()
	dir := t.TempDir()
	tl := newTail("j", 1, filepath.Join(dir, "none.jsonl"), tailPos{TBDir: dir, TBUID: uint32(os.Getuid())})
	var last map[string][]float64
	for i := 0; i < tbMaxFiles+20; i++ {
		w, err := tbevents.Create(dir, "h", time.Unix(1700000000+int64(i), 0))
		if err != nil {
			t.Fatal(err)
		}
		_ = w.AddScalar("loss", int64(i), time.Unix(1700000000, 0), float64(i))
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		last = takeTB(a, tl, tbPollBytes)
	}
	if !slices.Equal(last["loss"], []float64{tbMaxFiles + 19}) {
		t.Errorf("newest file's values %v, want %d", last["loss"], tbMaxFiles+19)
	}
	if n := len(tl.pos.TB); n > tbMaxFiles {
		t.Errorf("%d files in the position, bound %d", n, tbMaxFiles)
	}
}

// TestTensorBoardDirOnlyTheOwnersDirectory: the agent reads the job's
// TensorBoard directory as root, so only a directory of the owner's, never
// through a link, and never waiting on what it opens: a FIFO named as the
// directory is passed over at once (its open once stalled the metrics of
// every step of the node), a link to a directory of event files is not
// followed, a directory of another user's is not read.
func TestTensorBoardDirOnlyTheOwnersDirectory(t *testing.T) {
	t.Parallel()
	a := tailApp()
	dir := t.TempDir()
	w, err := tbevents.Create(dir, "host", time.Unix(1700000000, 0))
	if err != nil {
		t.Fatal(err)
	}
	_ = w.AddScalar("loss", 1, time.Unix(1700000001, 0), 1)
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	uid := uint32(os.Getuid())
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	for what, p := range map[string]tailPos{
		"a FIFO":         {TBDir: fifo, TBUID: uid},
		"a link":         {TBDir: link, TBUID: uid},
		"another user's": {TBDir: dir, TBUID: uid + 4242},
	} {
		done := make(chan map[string][]float64, 1)
		go func() { done <- takeTB(a, newTail("j", 1, filepath.Join(dir, "none.jsonl"), p), tbPollBytes) }()
		select {
		case got := <-done:
			if len(got) != 0 {
				t.Errorf("%s: read %v", what, got)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: reading blocked", what)
		}
	}
	if got := takeTB(a, newTail("j", 1, filepath.Join(dir, "none.jsonl"), tailPos{TBDir: dir, TBUID: uid}), tbPollBytes); len(got["loss"]) != 1 {
		t.Fatalf("the owner's own directory: %v", got)
	}
}

// TestRewrittenMetricsFileKeepsTensorBoardPositions: a program that
// rewrites its hypertune file (a new file renamed over it, or a shorter
// one) has that file read again from its start, but its TensorBoard
// directory's positions stay: the event files are not read again, sent
// twice, nor the directory forgotten by the stored position.
func TestRewrittenMetricsFileKeepsTensorBoardPositions(t *testing.T) {
	t.Parallel()
	a := tailApp()
	dir := t.TempDir()
	lossEventFile(t, dir, 1)
	path := filepath.Join(dir, "metrics.jsonl")
	appendTo(t, path, hypertuneLine(1)+hypertuneLine(2))
	uid := uint32(os.Getuid())
	tl := newTail("j", 1, path, tailPos{TBDir: dir, TBUID: uid})
	if steps := takeSteps(a, tl, false); !slices.Equal(steps, []int64{1, 2}) {
		t.Fatalf("hypertune steps %v", steps)
	}
	if got := takeTB(a, tl, tbPollBytes); !slices.Equal(got["loss"], []float64{1}) {
		t.Fatalf("first read: %v", got)
	}
	// Rewritten: a new file, renamed over the old one.
	tmp := filepath.Join(dir, "metrics.tmp")
	appendTo(t, tmp, hypertuneLine(3))
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	if steps := takeSteps(a, tl, false); !slices.Equal(steps, []int64{3}) {
		t.Fatalf("hypertune steps after the rewrite %v, want 3", steps)
	}
	if tl.pos.TBDir != dir || tl.pos.TBUID != uid {
		t.Errorf("position's TensorBoard directory %q (uid %d) after the rewrite, want %q (%d)", tl.pos.TBDir, tl.pos.TBUID, dir, uid)
	}
	if got := takeTB(a, tl, tbPollBytes); len(got) != 0 {
		t.Errorf("event file read again after the hypertune file was rewritten: %v", got)
	}
}

// TestTensorBoardSubdirSwappedForALink: the reader lists a subdirectory's
// event files, then opens each; a job that swaps the subdirectory for a
// link in between (to a directory of its own elsewhere, holding a file of
// the same name) has nothing read through the link: each component is
// opened relative to the one before, never following a link.
func TestTensorBoardSubdirSwappedForALink(t *testing.T) {
	t.Parallel()
	a := tailApp()
	uid := uint32(os.Getuid())
	dir := t.TempDir()
	sub := filepath.Join(dir, "train")
	if err := os.Mkdir(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	lossEventFile(t, sub, 1)
	pos := tailPos{TBDir: dir, TBUID: uid}
	// Before the swap, the file is read (with its subdirectory's prefix).
	if got := takeTB(a, newTail("j", 1, filepath.Join(dir, "none.jsonl"), pos), tbPollBytes); len(got["train/loss"]) != 1 {
		t.Fatalf("before the swap: %v, want train/loss", got)
	}
	tl := newTail("j", 1, filepath.Join(dir, "none.jsonl"), pos)
	tl.pos.TB = map[string]int64{}
	files := tl.tb.files()
	if len(files) != 1 {
		t.Fatalf("listed %v, want the one event file", files)
	}
	moved := filepath.Join(t.TempDir(), "train")
	if err := os.Rename(sub, moved); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(moved, sub); err != nil {
		t.Fatal(err)
	}
	if n := a.readEventFile("s", tl, files[0], tbPollBytes); n != 0 || len(tl.pending) != 0 {
		t.Fatalf("read %d bytes, %d points through the swapped link", n, len(tl.pending))
	}
	if _, ok := sizeIn("", dir, files[0], uid); ok {
		t.Fatalf("sized %s through the swapped link", files[0])
	}
}

// TestTensorBoardDirThroughALinkInItsPath: a job names its TensorBoard
// directory through a link of its own in a middle part of the path
// (<its dir>/via/tb, via leading into another user's private directory,
// which the job's owner cannot enter but the agent, root, can). Nothing is
// read through it: every component is opened from "/" down without
// following a link, not only the last. Without that, the event file there
// was read and published.
func TestTensorBoardDirThroughALinkInItsPath(t *testing.T) {
	t.Parallel()
	users := testkit.OSUsers(t, 2)
	owner, other := users[0].Account, users[1].Account
	a := tailApp()
	base := testkit.ReachableDir(t)
	private := filepath.Join(base, "other", "private")
	tb := filepath.Join(private, "tb")
	event := lossEventFile(t, tb, 1)
	// The event file and its directory are the job owner's (so that every
	// check but the path's passes); the directories above them the other
	// user's, closed to everyone else.
	for _, p := range []string{tb, event} {
		if err := os.Chown(p, int(owner.UID), int(owner.GID)); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{private, filepath.Dir(private)} {
		if err := os.Chown(p, int(other.UID), int(other.GID)); err != nil {
			t.Fatal(err)
		}
	}
	// The job owner's directory, with the owner's link in it.
	mine := filepath.Join(base, "mine")
	if err := os.Mkdir(mine, 0o700); err != nil {
		t.Fatal(err)
	}
	via := filepath.Join(mine, "via")
	if err := os.Symlink(private, via); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{mine, via} {
		if err := os.Lchown(p, int(owner.UID), int(owner.GID)); err != nil {
			t.Fatal(err)
		}
	}
	named := filepath.Join(via, "tb")
	tl := newTail("j", 1, filepath.Join(mine, "none.jsonl"), tailPos{TBDir: named, TBUID: owner.UID})
	tl.tb.root = base // a trusted root above the link does not make the link trusted
	if got := takeTB(a, tl, tbPollBytes); len(got) != 0 {
		t.Errorf("read %v through the owner's link into another user's directory", got)
	}
	if files := tl.tb.files(); len(files) != 0 {
		t.Errorf("listed %v through the link", files)
	}
	if _, ok := sizeIn(base, named, filepath.Base(event), owner.UID); ok {
		t.Errorf("sized the event file through the link")
	}
	for _, openat2 := range []bool{true, false} {
		if d, err := openPathBy(base, named, openat2); err == nil {
			d.Close()
			t.Errorf("opened %s through the link (openat2 %v)", named, openat2)
		}
	}
	// The same directory by its own path is read: the check is the path's.
	direct := newTail("j", 1, filepath.Join(mine, "none.jsonl"), tailPos{TBDir: tb, TBUID: owner.UID})
	if got := takeTB(a, direct, tbPollBytes); len(got["loss"]) != 1 {
		t.Fatalf("by its real path: %v, want loss", got)
	}
}

// TestOpenPathTrustedRoot: the walk starts at the agent's shared directory
// for a path in it, opened as configured (a link the operator made is
// followed), and refuses any link below it; a path outside it is walked
// from "/"; a relative or unclean path is refused. The same by openat2 and
// by the walk without it.
func TestOpenPathTrustedRoot(t *testing.T) {
	t.Parallel()
	real := t.TempDir()
	if err := os.MkdirAll(filepath.Join(real, "a", "b"), 0o700); err != nil {
		t.Fatal(err)
	}
	shared := filepath.Join(t.TempDir(), "shared")
	if err := os.Symlink(real, shared); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(real, "a"), filepath.Join(real, "link")); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		root, path string
		ok         bool
	}{
		{shared, filepath.Join(shared, "a", "b"), true},
		{shared, shared, true},
		{"", filepath.Join(real, "a", "b"), true},
		{"", filepath.Join(shared, "a", "b"), false},        // the operator's link, but no root names it
		{shared, filepath.Join(shared, "link", "b"), false}, // a link below the root
		{shared, filepath.Join(shared+"x", "a"), false},     // not in it: from "/"
		{"", "a/b", false},
		{"", filepath.Join(real, "a") + "/../a/b", false},
	} {
		for _, openat2 := range []bool{true, false} {
			d, err := openPathBy(c.root, c.path, openat2)
			if d != nil {
				d.Close()
			}
			if (err == nil) != c.ok {
				t.Errorf("openPath(%q, %q), openat2 %v: %v, want ok %v", c.root, c.path, openat2, err, c.ok)
			}
		}
	}
}

// lossEventFile writes in dir (made if need be) a closed event file of one
// scalar, loss 1 at step, as a job's trainer leaves one: its path.
func lossEventFile(t *testing.T, dir string, step int64) string {
	t.Helper()
	now := time.Unix(1700000000, 0)
	w, err := tbevents.Create(dir, "host", now)
	if err != nil {
		t.Fatal(err)
	}
	_ = w.AddScalar("loss", step, now.Add(time.Second), 1)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, tbevents.FileName(now, "host"))
}
