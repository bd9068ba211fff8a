package blobstore

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/testkit"
)

// artifacts writes a model-shaped artifact set into b and returns it by key.
func artifacts(t testing.TB, b *Bucket, sizes map[string]int) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for k, n := range sizes {
		data := make([]byte, n)
		if _, err := rand.Read(data); err != nil {
			t.Fatal(err)
		}
		if err := b.WriteFile(context.Background(), k, data); err != nil {
			t.Fatal(err)
		}
		out[k] = data
	}
	return out
}

var modelSizes = map[string]int{
	"MLmodel":                          120,
	"empty.txt":                        0,
	"model/weights.safetensors":        3<<20 + 17,
	"model/config.json":                900,
	"checkpoints/step-100/optim.pt":    256 << 10,
	"checkpoints/step-100/ünïcödé.bin": 33,
}

func open(t testing.TB, url string) *Bucket {
	t.Helper()
	b, err := Open(context.Background(), url)
	if err != nil {
		t.Fatalf("Open(%q): %v", url, err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func sha(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

// checkHolds fails unless dst's directory holds exactly want, byte for byte.
func checkHolds(t testing.TB, dir string, want map[string][]byte) {
	t.Helper()
	seen := 0
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasSuffix(p, ".attrs") {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		w, ok := want[filepath.ToSlash(rel)]
		if !ok {
			t.Errorf("%s holds %q, which is not an exported object", dir, rel)
			return nil
		}
		got, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if !bytes.Equal(got, w) {
			t.Errorf("%s: %d bytes (sha %s), want %d bytes (sha %s)", rel, len(got), sha(got), len(w), sha(w))
		}
		seen++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen != len(want) {
		t.Errorf("%s holds %d objects, want %d", dir, seen, len(want))
	}
}

func TestExportCopiesByteForByte(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	root := t.TempDir()
	src := open(t, filepath.Join(root, "src"))
	model, err := src.Sub("projects/p1/models/m1/versions/1")
	if err != nil {
		t.Fatal(err)
	}
	want := artifacts(t, model, modelSizes)
	dstDir := filepath.Join(root, "export", "m1-v1")
	dst := open(t, "file://"+dstDir)

	var progress []string
	res, err := Export(ctx, model, dst, ExportOptions{Progress: func(done, total int, key string) {
		progress = append(progress, fmt.Sprintf("%d/%d %s", done, total, key))
	}})
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, d := range want {
		total += int64(len(d))
	}
	if res.Copied != len(want) || res.Skipped != 0 || res.Bytes != total || len(res.Objects) != len(want) {
		t.Fatalf("Export = copied %d skipped %d bytes %d objects %d; want %d, 0, %d, %d",
			res.Copied, res.Skipped, res.Bytes, len(res.Objects), len(want), total, len(want))
	}
	for i, o := range res.Objects {
		if o.SHA256 != sha(want[o.Key]) || o.Size != int64(len(want[o.Key])) {
			t.Errorf("Objects[%d] = %+v, want size %d sha %s", i, o, len(want[o.Key]), sha(want[o.Key]))
		}
		if i > 0 && res.Objects[i-1].Key >= o.Key {
			t.Errorf("Objects not in key order: %q before %q", res.Objects[i-1].Key, o.Key)
		}
	}
	if len(progress) != len(want) || progress[len(progress)-1] != fmt.Sprintf("%d/%d %s", len(want), len(want), res.Objects[len(want)-1].Key) {
		t.Errorf("progress = %q", progress)
	}
	checkHolds(t, dstDir, want)

	// List on the destination agrees, checksums included.
	objs, err := dst.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(objs) != fmt.Sprint(res.Objects) {
		t.Errorf("dst.List = %v\nwant %v", objs, res.Objects)
	}
}

// fileState is what a rewrite of a file would change: a rename makes a new
// inode, a write moves the modification time.
type fileState struct {
	ino   uint64
	mtime time.Time
	size  int64
}

func snapshot(t testing.TB, dir string) map[string]fileState {
	t.Helper()
	out := map[string]fileState{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		out[p] = fileState{ino: fi.Sys().(*syscall.Stat_t).Ino, mtime: fi.ModTime(), size: fi.Size()}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestExportIsIdempotent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	root := t.TempDir()
	src := open(t, "mem://")
	want := artifacts(t, src, modelSizes)
	dstDir := filepath.Join(root, "dst")
	dst := open(t, dstDir)
	if _, err := Export(ctx, src, dst, ExportOptions{}); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, dstDir)

	res, err := Export(ctx, src, dst, ExportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Copied != 0 || res.Skipped != len(want) || res.Bytes != 0 {
		t.Fatalf("second export: copied %d skipped %d bytes %d; want 0, %d, 0", res.Copied, res.Skipped, res.Bytes, len(want))
	}
	after := snapshot(t, dstDir)
	if len(before) != len(after) {
		t.Fatalf("second export changed the file count: %d -> %d", len(before), len(after))
	}
	for p, s := range before {
		if after[p] != s {
			t.Errorf("second export rewrote %s: %+v -> %+v", p, s, after[p])
		}
	}
	checkHolds(t, dstDir, want)
}

func TestExportReplacesADifferentObject(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	src, dst := open(t, "mem://"), open(t, filepath.Join(t.TempDir(), "dst"))
	if err := src.WriteFile(ctx, "w.bin", []byte("good bytes")); err != nil {
		t.Fatal(err)
	}
	if err := dst.WriteFile(ctx, "w.bin", []byte("evil bytes")); err != nil { // same size
		t.Fatal(err)
	}
	res, err := Export(ctx, src, dst, ExportOptions{})
	if err != nil || res.Copied != 1 || res.Skipped != 0 {
		t.Fatalf("Export = %+v, %v; want the changed object copied", res, err)
	}
	r, err := dst.NewReader(ctx, "w.bin")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if got, _ := io.ReadAll(r); string(got) != "good bytes" {
		t.Fatalf("dst holds %q", got)
	}
}

func TestExportLimits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	src := open(t, "mem://")
	artifacts(t, src, map[string]int{"a": 4, "b": 4, "c": 3})
	for _, tc := range []struct {
		opts ExportOptions
		code codes.Code
		says string
	}{
		{ExportOptions{MaxObjects: 2}, codes.ResourceExhausted, "more than 2 objects (the ExportOptions.MaxObjects limit)"},
		{ExportOptions{MaxBytes: 10}, codes.ResourceExhausted, "holds 11 bytes in 3 objects, over the limit of 10 (ExportOptions.MaxBytes)"},
		{ExportOptions{MaxObjects: -1}, codes.InvalidArgument, "max_objects: must not be negative"},
		{ExportOptions{MaxBytes: -1}, codes.InvalidArgument, "max_bytes: must not be negative"},
	} {
		dstDir := filepath.Join(t.TempDir(), "dst")
		dst := open(t, dstDir)
		_, err := Export(ctx, src, dst, tc.opts)
		if errs.Code(err) != tc.code || err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("Export(%+v) = %v; want %v saying %q", tc.opts, err, tc.code, tc.says)
		}
		if left := snapshot(t, dstDir); len(left) != 0 {
			t.Errorf("Export(%+v) refused but wrote %v", tc.opts, left)
		}
	}
	if _, err := Export(ctx, open(t, "mem://"), open(t, "mem://"), ExportOptions{}); errs.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "holds no objects") {
		t.Errorf("Export of an empty source = %v, want FailedPrecondition", err)
	}
	// At the limits exactly, it goes.
	if _, err := Export(ctx, src, open(t, "mem://"), ExportOptions{MaxObjects: 3, MaxBytes: 11}); err != nil {
		t.Errorf("Export at the limits: %v", err)
	}
}

// A job's artifact directory can hold files Loom did not write; one whose
// name is not clean refuses the whole export before anything is written.
func TestExportRefusesForeignNames(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	root := t.TempDir()
	srcDir := filepath.Join(root, "job-output")
	mustWrite(t, filepath.Join(srcDir, "model.bin"), "weights")
	mustWrite(t, filepath.Join(srcDir, "notes#1.txt"), "x")
	mustWrite(t, filepath.Join(srcDir, "100%.txt"), "y")
	src := open(t, srcDir)
	dstDir := filepath.Join(root, "dst")
	_, err := Export(ctx, src, open(t, dstDir), ExportOptions{})
	if errs.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), `objects["notes#1.txt"]`) || !strings.Contains(err.Error(), `objects["100%.txt"]`) {
		t.Fatalf("Export = %v; want InvalidArgument naming both foreign files", err)
	}
	if left := snapshot(t, dstDir); len(left) != 0 {
		t.Errorf("refused export wrote %v", left)
	}
}

func TestListReadWriteAndSub(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	root := t.TempDir()
	b := open(t, root)
	if b.URL() != "file://"+root {
		t.Errorf("URL() = %q", b.URL())
	}
	m, err := b.Sub("projects/p1/models/m1")
	if err != nil {
		t.Fatal(err)
	}
	if m.URL() != "file://"+root+"/projects/p1/models/m1" {
		t.Errorf("Sub URL() = %q", m.URL())
	}
	want := artifacts(t, m, map[string]int{"a.bin": 10, "d/b.bin": 20})
	if _, err := os.Stat(filepath.Join(root, "projects/p1/models/m1/d/b.bin")); err != nil {
		t.Errorf("object not at its path: %v", err)
	}
	// Reopening the Sub's URL confines to the same place.
	again := open(t, m.URL())
	objs, err := again.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 2 || objs[0].Key != "a.bin" || objs[1].Key != "d/b.bin" || objs[1].SHA256 != sha(want["d/b.bin"]) || objs[1].Size != 20 {
		t.Errorf("List = %+v", objs)
	}
	if _, err := m.NewReader(ctx, "missing"); !errors.Is(err, errs.NotFound) {
		t.Errorf("NewReader(missing) = %v, want NotFound", err)
	}
	if err := m.WriteFile(ctx, "x.attrs", nil); errs.Code(err) != codes.InvalidArgument {
		t.Errorf("WriteFile(x.attrs) = %v, want InvalidArgument", err)
	}
	if _, err := m.Sub(strings.Repeat("p/", 600)[:1023]); errs.Code(err) != codes.InvalidArgument {
		t.Errorf("Sub(1023-byte prefix) = %v, want InvalidArgument", err)
	}
	// Closing a Sub leaves the parent usable.
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.WriteFile(ctx, "still-open", []byte("y")); err != nil {
		t.Errorf("parent after Sub.Close: %v", err)
	}
}

func TestOpenURLForms(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	for _, tc := range []struct{ in, url string }{
		{dir + "/bare", "file://" + dir + "/bare"},
		{"file://localhost" + dir + "/lh", "file://" + dir + "/lh"},
		{"file://" + dir + "/slash/", "file://" + dir + "/slash"},
		{"mem://", "mem://"},
		{"mem:///models/m1/", "mem:///models/m1"},
	} {
		b, err := Open(ctx, tc.in)
		if err != nil {
			t.Errorf("Open(%q): %v", tc.in, err)
			continue
		}
		if b.URL() != tc.url {
			t.Errorf("Open(%q).URL() = %q, want %q", tc.in, b.URL(), tc.url)
		}
		if again, err := Open(ctx, b.URL()); err != nil || again.URL() != b.URL() {
			t.Errorf("Open(URL() = %q) = %v; want it to open the same place", b.URL(), err)
		} else {
			again.Close()
		}
		b.Close()
	}
}

const childEnv = "LOOM_BLOBSTORE_EXPORT_CHILD"

// killedExport says how to run an export in a child process (this test
// binary again, as TestExportChild) and kill it midway.
type killedExport struct {
	src, dst string   // bucket URLs
	pauseKey string   // the object the child pauses in
	pauseAt  int64    // once more than this much of pauseKey is read
	env      []string // added to the child's environment
	// ready, when set, must also hold before the kill (say, the store has
	// received part of the object).
	ready func() bool
}

// run starts the child, waits until it has paused mid-object (and ready
// holds), and kills it with SIGKILL there.
func (k killedExport) run(t *testing.T) {
	t.Helper()
	marker := filepath.Join(t.TempDir(), "paused")
	spec := strings.Join([]string{k.src, k.dst, k.pauseKey, marker, strconv.FormatInt(k.pauseAt, 10)}, "|")
	cmd := exec.Command(os.Args[0], "-test.run=^TestExportChild$", "-test.count=1", "-test.timeout=5m")
	cmd.Env = append(append(os.Environ(), childEnv+"="+spec), k.env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	testkit.WaitFor(t, 2*time.Minute, "the child export to pause mid-object", func() (bool, error) {
		select {
		case err := <-exited:
			return false, fmt.Errorf("child exited before pausing: %v\n%s", err, out.String())
		default:
		}
		_, err := os.Stat(marker)
		return err == nil && (k.ready == nil || k.ready()), nil
	})
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := <-exited; err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("child: %v, want killed\n%s", err, out.String())
	}
}

// checkResumed runs the export again after the kill: it skips the objects
// done before it and copies the rest, with the checksums of want.
func checkResumed(t *testing.T, src, dst *Bucket, want, done map[string][]byte) {
	t.Helper()
	res, err := Export(context.Background(), src, dst, ExportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Skipped != len(done) || res.Copied != len(want)-len(done) {
		t.Errorf("resumed export: copied %d skipped %d; want %d, %d", res.Copied, res.Skipped, len(want)-len(done), len(done))
	}
	for _, o := range res.Objects {
		if o.SHA256 != sha(want[o.Key]) {
			t.Errorf("%s: sha %s, want %s", o.Key, o.SHA256, sha(want[o.Key]))
		}
	}
}

// before returns the objects of want whose keys sort before key: those an
// export in key order finished before it paused in key.
func before(want map[string][]byte, key string) map[string][]byte {
	done := map[string][]byte{}
	for k, v := range want {
		if k < key {
			done[k] = v
		}
	}
	return done
}

// exportResumesOnFiles is the file:// case of TestExportResumesAfterKill:
// the kill leaves part of the object in fileblob's temporary file, and dst
// shows only the whole objects before it.
func exportResumesOnFiles(t *testing.T) {
	root := t.TempDir()
	srcDir, dstDir, tmpDir := filepath.Join(root, "src"), filepath.Join(root, "dst"), filepath.Join(root, "tmp")
	if err := os.Mkdir(tmpDir, 0o755); err != nil {
		t.Fatal(err)
	}
	src := open(t, srcDir)
	sizes := map[string]int{}
	for i := range 6 {
		sizes[fmt.Sprintf("shard-%d.bin", i)] = 3*copyChunk + i
	}
	want := artifacts(t, src, sizes)
	const pauseKey = "shard-3.bin"
	killedExport{src: src.URL(), dst: "file://" + dstDir, pauseKey: pauseKey, pauseAt: copyChunk, env: []string{"TMPDIR=" + tmpDir}}.run(t)

	// The kill came mid-object: its temporary file holds part of it...
	partial := false
	tmps, _ := os.ReadDir(tmpDir)
	for _, e := range tmps {
		if fi, err := e.Info(); err == nil && strings.HasPrefix(e.Name(), pauseKey) && fi.Size() > 0 && fi.Size() < int64(sizes[pauseKey]) {
			partial = true
		}
	}
	if !partial {
		t.Errorf("no partial temporary file of %s in %s: %v", pauseKey, tmpDir, tmps)
	}
	// ...and dst shows only the whole objects before it.
	done := before(want, pauseKey)
	checkHolds(t, dstDir, done)
	checkResumed(t, src, open(t, dstDir), want, done)
	checkHolds(t, dstDir, want)
}

// TestExportChild is the child of TestExportResumesAfterKill; alone it skips.
func TestExportChild(t *testing.T) {
	spec := os.Getenv(childEnv)
	if spec == "" {
		t.Skip("the child process of TestExportResumesAfterKill")
	}
	p := strings.Split(spec, "|")
	srcURL, dstURL, pauseKey, marker := p[0], p[1], p[2], p[3]
	pauseAt, err := strconv.ParseInt(p[4], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	exportHook = func(key string, written int64) {
		if key == pauseKey && written > pauseAt {
			if err := os.WriteFile(marker, nil, 0o644); err != nil {
				panic(err)
			}
			<-make(chan struct{}) // the injected pause: wait here for SIGKILL
		}
	}
	ctx := context.Background()
	src, dst := open(t, srcURL), open(t, dstURL)
	_, err = Export(ctx, src, dst, ExportOptions{})
	t.Fatalf("export returned (%v); it should have been killed mid-object", err)
}

// With no_tmp_dir (set by Open when the directory is on another file
// system than $TMPDIR) fileblob's temporary files sit beside the objects;
// one left by a killed writer is neither listed nor exported.
func TestNoTmpDirLeftoversAreNotObjects(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "src")
	src := open(t, "file://"+dir+"?no_tmp_dir=1")
	if err := src.WriteFile(ctx, "model.bin", []byte("whole")); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(dir, "model.bin.18ed75725ce7df1b.tmp"), "half")
	objs, err := src.List(ctx)
	if err != nil || len(objs) != 1 || objs[0].Key != "model.bin" {
		t.Fatalf("List = %+v, %v; want model.bin alone", objs, err)
	}
	dstDir := filepath.Join(t.TempDir(), "dst")
	res, err := Export(ctx, src, open(t, dstDir), ExportOptions{})
	if err != nil || res.Copied != 1 {
		t.Fatalf("Export = %+v, %v", res, err)
	}
	checkHolds(t, dstDir, map[string][]byte{"model.bin": []byte("whole")})
}

// TestExportTakesOnlyRegularFiles: from a file:// source, a link (to a
// file of the host's, the service's own credentials) and a FIFO are not
// objects: not exported, and no export waits on the FIFO.
func TestExportTakesOnlyRegularFiles(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, time.Minute)
	src, out, secret := t.TempDir(), t.TempDir(), filepath.Join(t.TempDir(), "credentials")
	for name, body := range map[string]string{"model.json": "{}", "weights/w.bin": "abc"} {
		p := filepath.Join(src, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(secret, []byte("aws_secret_access_key=s3cret"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, filepath.Join(src, "creds")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(src, "pipe"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Open(ctx, "file://"+src)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	d, err := Open(ctx, "file://"+out)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	res, err := Export(ctx, s, d, ExportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, o := range res.Objects {
		keys = append(keys, o.Key)
	}
	if !slices.Equal(keys, []string{"model.json", "weights/w.bin"}) {
		t.Fatalf("exported %v", keys)
	}
	for _, name := range []string{"creds", "pipe"} {
		if _, err := os.Lstat(filepath.Join(out, name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s exported: %v", name, err)
		}
	}
}

// TestExportOnlyKeys: with ExportOptions.Keys only the named objects are
// copied (a model's MANIFEST and its files, not whatever else lies in the
// directory), and a named object that src lacks fails the export before
// anything is written, naming it.
func TestExportOnlyKeys(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, time.Minute)
	src := open(t, "file://"+t.TempDir())
	all := artifacts(t, src, map[string]int{"MANIFEST": 10, "model/w.bin": 300, "model/other-projects-secret": 40})
	outDir := t.TempDir()
	out := open(t, "file://"+outDir+"?metadata=skip")
	res, err := Export(ctx, src, out, ExportOptions{Keys: []string{"model/w.bin", "MANIFEST", "model/w.bin"}})
	if err != nil || res.Copied != 2 {
		t.Fatalf("Export(Keys) = %+v, %v; want 2 objects copied", res, err)
	}
	checkHolds(t, outDir, map[string][]byte{"MANIFEST": all["MANIFEST"], "model/w.bin": all["model/w.bin"]})

	emptyDir := t.TempDir()
	_, err = Export(ctx, src, open(t, "file://"+emptyDir), ExportOptions{Keys: []string{"MANIFEST", "model/gone.bin"}})
	if errs.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), `has no object "model/gone.bin"`) {
		t.Fatalf("Export(Keys with a missing one) = %v; want FailedPrecondition naming model/gone.bin", err)
	}
	checkHolds(t, emptyDir, nil)
}

// TestExportWant: with ExportOptions.Want an object whose bytes are not the
// wanted ones (a model file changed after its MANIFEST was registered) is
// never published: not when copied, not over a good copy already there,
// and the export stops FailedPrecondition (ErrNotWanted) naming it; what
// is wanted is copied, and skipped when there.
func TestExportWant(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, time.Minute)
	src := open(t, "file://"+t.TempDir())
	all := artifacts(t, src, map[string]int{"a.bin": 300, "b.bin": 40})
	want := map[string]string{"a.bin": sha(all["a.bin"]), "b.bin": sha(all["b.bin"])}
	outDir := t.TempDir()
	out := open(t, "file://"+outDir+"?metadata=skip")
	if res, err := Export(ctx, src, out, ExportOptions{Want: want}); err != nil || res.Copied != 2 {
		t.Fatalf("Export(Want, as listed) = %+v, %v; want 2 copied", res, err)
	}
	// Changed after it was listed: refused, whether dst holds the good copy
	// (skip check) or nothing (copy).
	tampered := append(bytes.Clone(all["b.bin"]), "TAMPERED\n"...)
	if err := src.WriteFile(ctx, "b.bin", tampered); err != nil {
		t.Fatal(err)
	}
	for name, dir := range map[string]string{"over a good copy": outDir, "into an empty prefix": t.TempDir()} {
		before := map[string][]byte{}
		if dir == outDir {
			before = map[string][]byte{"a.bin": all["a.bin"], "b.bin": all["b.bin"]}
		}
		_, err := Export(ctx, src, open(t, "file://"+dir+"?metadata=skip"), ExportOptions{Keys: []string{"b.bin"}, Want: want})
		if errs.Code(err) != codes.FailedPrecondition || !errors.Is(err, ErrNotWanted) ||
			!strings.Contains(err.Error(), `"b.bin"`) || !strings.Contains(err.Error(), want["b.bin"]) || !strings.Contains(err.Error(), sha(tampered)) {
			t.Errorf("%s: Export of a changed object = %v; want FailedPrecondition ErrNotWanted naming b.bin and both sums", name, err)
		}
		checkHolds(t, dir, before)
	}
	// The same size as the good copy, so the skip check reads both.
	same := bytes.Clone(all["b.bin"])
	same[0] ^= 0xff
	if err := src.WriteFile(ctx, "b.bin", same); err != nil {
		t.Fatal(err)
	}
	if _, err := Export(ctx, src, out, ExportOptions{Want: want}); !errors.Is(err, ErrNotWanted) {
		t.Errorf("Export of a changed object of the same size = %v; want ErrNotWanted", err)
	}
	checkHolds(t, outDir, map[string][]byte{"a.bin": all["a.bin"], "b.bin": all["b.bin"]})
}

// TestReadAs: a file:// bucket told to read as an account opens each file
// as that account: one it may read is exported, one it may not (root's,
// mode 0600) is PermissionDenied naming the key and the account, through
// Export and NewReader alike; an object store has no files to open so.
func TestReadAs(t *testing.T) {
	t.Parallel()
	ana := testkit.OSUsers(t, 1)[0]
	ctx := testkit.Context(t, time.Minute)
	dir := t.TempDir()
	// The test's temporary directories are 0700, root's: open them to ana.
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, mode := range map[string]os.FileMode{"readable.bin": 0o644, "roots.bin": 0o600} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(name), mode); err != nil {
			t.Fatal(err)
		}
	}
	src := open(t, "file://"+dir)
	if err := src.ReadAs(ana.Account); err != nil {
		t.Fatal(err)
	}
	if res, err := Export(ctx, src, open(t, "file://"+t.TempDir()), ExportOptions{Keys: []string{"readable.bin"}}); err != nil || res.Copied != 1 {
		t.Fatalf("Export(a file %s may read) = %+v, %v; want it copied", ana.Name, res, err)
	}
	_, err := Export(ctx, src, open(t, "file://"+t.TempDir()), ExportOptions{})
	if errs.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), `"roots.bin"`) || !strings.Contains(err.Error(), ana.Name) {
		t.Fatalf("Export(a directory with root's 0600 file) = %v; want PermissionDenied naming roots.bin and %s", err, ana.Name)
	}
	if r, err := src.NewReader(ctx, "roots.bin"); errs.Code(err) != codes.PermissionDenied {
		if err == nil {
			r.Close()
		}
		t.Errorf("NewReader(roots.bin) = %v; want PermissionDenied", err)
	}
	if err := open(t, "mem://").ReadAs(ana.Account); errs.Code(err) != codes.InvalidArgument {
		t.Errorf("ReadAs on mem:// = %v; want InvalidArgument", err)
	}
}

// TestReadAsNotThroughProc: osuser.As changes a thread's identity, not its
// process, and the kernel lets a process follow its own /proc/self/fd/N:
// a bucket read as ana through such a link (an artifact_uri she named, or
// her directory replaced by a link to one) reached a directory the service
// held open that ana may not reach (here under root's 0700 directory).
// Reading it as an account is refused, naming /proc.
func TestReadAsNotThroughProc(t *testing.T) {
	t.Parallel()
	ana := testkit.OSUsers(t, 1)[0]
	ctx := testkit.Context(t, time.Minute)
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.Mkdir(secret, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(secret, "weights.bin"), []byte("root's"), 0o644); err != nil {
		t.Fatal(err)
	}
	held, err := os.Open(secret)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	src := open(t, fmt.Sprintf("file:///proc/self/fd/%d", held.Fd()))
	if err := src.ReadAs(ana.Account); err != nil {
		t.Fatal(err)
	}
	r, err := src.NewReader(ctx, "weights.bin")
	if err == nil {
		r.Close()
	}
	if err == nil || !strings.Contains(err.Error(), "/proc") {
		t.Fatalf("NewReader as %s through /proc/self/fd: %v; want refused naming /proc", ana.Name, err)
	}
	if _, err := Export(ctx, src, open(t, "file://"+t.TempDir()), ExportOptions{}); err == nil || !strings.Contains(err.Error(), "/proc") {
		t.Fatalf("Export as %s through /proc/self/fd: %v; want refused naming /proc", ana.Name, err)
	}
}

// TestWriteAs: an export into a file:// bucket told to write as an account
// creates its directories and files as that account (the files are its),
// and where it may not write — another account's directory, root's — it
// is PermissionDenied naming the key and the account, nothing written; an
// object store has no files to write so.
func TestWriteAs(t *testing.T) {
	t.Parallel()
	users := testkit.OSUsers(t, 2)
	ana, bob := users[0], users[1]
	ctx := testkit.Context(t, time.Minute)
	src := open(t, "file://"+t.TempDir())
	if err := src.WriteFile(ctx, "model/weights.bin", []byte("weights")); err != nil {
		t.Fatal(err)
	}
	shared := t.TempDir()
	// A directory every account may create in, as /tmp: the test's own
	// temporary directories are root's, 0700.
	if err := os.Chmod(filepath.Dir(shared), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(shared, 0o1777); err != nil {
		t.Fatal(err)
	}
	as := func(u testkit.OSUser, dir string) *Bucket {
		t.Helper()
		b, err := OpenAs(ctx, "file://"+dir, u.Account)
		if err != nil {
			t.Fatalf("OpenAs(%s, %s): %v", dir, u.Name, err)
		}
		t.Cleanup(func() { b.Close() })
		return b
	}
	if res, err := Export(ctx, src, as(ana, filepath.Join(shared, "ana")), ExportOptions{}); err != nil || res.Copied != 1 {
		t.Fatalf("Export as %s into a directory she may create = %+v, %v", ana.Name, res, err)
	}
	for _, p := range []string{filepath.Join(shared, "ana"), filepath.Join(shared, "ana", "model", "weights.bin")} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if uid := fi.Sys().(*syscall.Stat_t).Uid; uid != ana.Account.UID {
			t.Errorf("%s is uid %d's, want %s's (%d)", p, uid, ana.Name, ana.Account.UID)
		}
	}
	// Bob may not create a directory in ana's, nor write into one of
	// hers, nor anyone into root's.
	if _, err := OpenAs(ctx, "file://"+filepath.Join(shared, "ana", "bob"), bob.Account); errs.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), bob.Name) {
		t.Fatalf("OpenAs(a directory in ana's, bob) = %v; want PermissionDenied naming bob", err)
	}
	roots := t.TempDir()
	_ = os.Chmod(filepath.Dir(roots), 0o755)
	_ = os.Chmod(roots, 0o755)
	// (Other weights: the same ones are skipped, nothing written.)
	other := open(t, "file://"+t.TempDir())
	if err := other.WriteFile(ctx, "model/weights.bin", []byte("other weights")); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		u   testkit.OSUser
		dir string
	}{{bob, filepath.Join(shared, "ana")}, {ana, roots}} {
		_, err := Export(ctx, other, as(c.u, c.dir), ExportOptions{})
		if errs.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), c.u.Name) || !strings.Contains(err.Error(), `"model/weights.bin"`) {
			t.Fatalf("Export as %s into %s = %v; want PermissionDenied naming the key and %s", c.u.Name, c.dir, err, c.u.Name)
		}
	}
	if fi, err := os.Stat(filepath.Join(roots, "model")); err == nil {
		t.Errorf("a refused export left %v in root's directory", fi.Name())
	}
	if err := open(t, "mem://").WriteAs(ana.Account); errs.Code(err) != codes.InvalidArgument {
		t.Errorf("WriteAs on mem:// = %v; want InvalidArgument", err)
	}
}

// TestExportLooksAtWhatIsThereWithoutOpeningIt: an export into a directory
// that holds an object of the same size compares it without opening
// anything else: a FIFO beside it named as go-cloud's attributes file would
// block a reader for ever; the export goes on.
func TestExportLooksAtWhatIsThereWithoutOpeningIt(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 20*time.Second)
	src := open(t, "file://"+t.TempDir())
	if err := src.WriteFile(ctx, "w.bin", []byte("new")); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "w.bin"), []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "w.bin.attrs"), 0o600); err != nil {
		t.Fatal(err)
	}
	res, err := Export(ctx, src, open(t, "file://"+dir), ExportOptions{})
	if err != nil || res.Copied != 1 {
		t.Fatalf("Export over a same-size object beside a FIFO = %+v, %v; want it copied", res, err)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "w.bin")); string(got) != "new" {
		t.Fatalf("w.bin = %q, want the new object", got)
	}
}
