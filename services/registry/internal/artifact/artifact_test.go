package artifact

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// sum is the hex SHA-256 of s.
func sum(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// model writes a complete artifact directory under a new temporary
// directory: files, and a MANIFEST listing them.
func model(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "model")
	var manifest strings.Builder
	for name, data := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		manifest.WriteString(sum(data) + "  " + name + "\n")
	}
	writeManifest(t, dir, manifest.String())
	return dir
}

func writeManifest(t *testing.T, dir, text string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, Manifest), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestWriteManifest: what WriteManifest writes, Verify accepts; a later
// change of a file is caught.
func TestWriteManifest(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for name, data := range map[string]string{"model.json": "{}", "ckpt/step-1": "abc"} {
		p := filepath.Join(dir, name)
		_ = os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := WriteManifest(dir); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(filepath.Join(dir, Manifest))
	if want := sum("abc") + "  ckpt/step-1\n" + sum("{}") + "  model.json\n"; string(raw) != want {
		t.Fatalf("MANIFEST:\n%s\nwant:\n%s", raw, want)
	}
	if got, err := Verify(context.Background(), dir); err != nil || got != sum(string(raw)) {
		t.Fatalf("Verify of a written MANIFEST = %s, %v; want its SHA-256 %s", got, err, sum(string(raw)))
	}
	_ = os.WriteFile(filepath.Join(dir, "model.json"), []byte("{ }"), 0o644)
	if _, err := Verify(context.Background(), dir); err == nil || !strings.Contains(err.Error(), "model.json: sha256") {
		t.Fatalf("Verify after a change = %v, want a checksum refusal", err)
	}
}

func TestCompleteDirectory(t *testing.T) {
	t.Parallel()
	dir := model(t, map[string]string{"model.json": `{"w":[1,2]}`, "sub/weights.bin": strings.Repeat("x", 3*chunk+5), "empty": ""})
	if _, err := Verify(context.Background(), dir); err != nil {
		t.Fatalf("complete directory refused: %v", err)
	}
	// sha256sum -b's marker, CRLF line ends and blank lines are accepted;
	// so is a symbolic link that stays inside the directory.
	if err := os.Symlink("model.json", filepath.Join(dir, "alias.json")); err != nil {
		t.Fatal(err)
	}
	writeManifest(t, dir, sum(`{"w":[1,2]}`)+" *model.json\r\n\n"+sum(`{"w":[1,2]}`)+"  alias.json\n")
	if _, err := Verify(context.Background(), dir); err != nil {
		t.Fatalf("binary marker, CRLF, inner symlink refused: %v", err)
	}
}

// TestRefusals: each incomplete or escaping directory is refused with a
// reason that says what is wrong, naming the file at fault.
func TestRefusals(t *testing.T) {
	t.Parallel()
	outside := t.TempDir()
	secret := filepath.Join(outside, "secret")
	if err := os.WriteFile(secret, []byte("s"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		setup func(t *testing.T) string
		want  string
	}{
		"missing dir": {func(t *testing.T) string { return filepath.Join(t.TempDir(), "nope") }, "does not exist"},
		"not a dir": {func(t *testing.T) string {
			p := filepath.Join(t.TempDir(), "f")
			_ = os.WriteFile(p, nil, 0o644)
			return p
		}, "is not a directory"},
		"no MANIFEST": {func(t *testing.T) string {
			d := model(t, map[string]string{"a": "1"})
			_ = os.Remove(filepath.Join(d, Manifest))
			return d
		}, "has no MANIFEST"},
		"MANIFEST a directory": {func(t *testing.T) string {
			d := filepath.Join(t.TempDir(), "m")
			_ = os.MkdirAll(filepath.Join(d, Manifest), 0o755)
			return d
		}, "not a regular file"},
		// A FIFO is refused at once, not waited on (it held the registry's
		// one consumer).
		"MANIFEST a FIFO": {func(t *testing.T) string {
			d := filepath.Join(t.TempDir(), "m")
			_ = os.MkdirAll(d, 0o755)
			_ = syscall.Mkfifo(filepath.Join(d, Manifest), 0o644)
			return d
		}, "not a regular file"},
		"empty MANIFEST": {func(t *testing.T) string {
			d := t.TempDir()
			writeManifest(t, d, "\n\n")
			return d
		}, "lists no files"},
		"malformed line": {func(t *testing.T) string {
			d := model(t, map[string]string{"a": "1"})
			writeManifest(t, d, "abc a\n")
			return d
		}, "MANIFEST line 1: want"},
		"bad hex": {func(t *testing.T) string {
			d := model(t, map[string]string{"a": "1"})
			writeManifest(t, d, strings.Repeat("z", 64)+"  a\n")
			return d
		}, "not a SHA-256"},
		"wrong checksum": {func(t *testing.T) string {
			d := model(t, map[string]string{"a": "1", "b": "2"})
			_ = os.WriteFile(filepath.Join(d, "b"), []byte("changed"), 0o644)
			return d
		}, "b: sha256 " + sum("changed")},
		"missing file": {func(t *testing.T) string {
			d := model(t, map[string]string{"a": "1", "b": "2"})
			_ = os.Remove(filepath.Join(d, "b"))
			return d
		}, "b is missing"},
		"dotdot": {func(t *testing.T) string {
			d := model(t, map[string]string{"a": "1"})
			writeManifest(t, d, sum("s")+"  ../"+filepath.Base(outside)+"/secret\n")
			return d
		}, "leaves the artifact directory"},
		"inner dotdot": {func(t *testing.T) string {
			d := model(t, map[string]string{"sub/a": "1"})
			writeManifest(t, d, sum("1")+"  sub/../sub/a\n")
			return d
		}, "leaves the artifact directory"},
		"absolute": {func(t *testing.T) string {
			d := model(t, map[string]string{"a": "1"})
			writeManifest(t, d, sum("s")+"  "+secret+"\n")
			return d
		}, "leaves the artifact directory"},
		"symlink out": {func(t *testing.T) string {
			d := model(t, map[string]string{"a": "1"})
			_ = os.Symlink(secret, filepath.Join(d, "link"))
			writeManifest(t, d, sum("s")+"  link\n")
			return d
		}, "link leaves the artifact directory"},
		"relative symlink out": {func(t *testing.T) string {
			d := model(t, map[string]string{"a": "1"})
			_ = os.Symlink("../../"+filepath.Base(outside), filepath.Join(d, "up"))
			writeManifest(t, d, sum("s")+"  up/secret\n")
			return d
		}, "leaves the artifact directory"},
		"listed twice": {func(t *testing.T) string {
			d := model(t, map[string]string{"a": "1"})
			writeManifest(t, d, sum("1")+"  a\n"+sum("1")+"  a\n")
			return d
		}, "listed twice"},
		"a fifo": {func(t *testing.T) string {
			d := model(t, map[string]string{"a": "1"})
			if err := syscall.Mkfifo(filepath.Join(d, "pipe"), 0o644); err != nil {
				t.Skip("mkfifo:", err)
			}
			writeManifest(t, d, sum("")+"  pipe\n")
			return d
		}, "pipe is not a regular file"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := Verify(context.Background(), tc.setup(t))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Verify = %v, want a refusal containing %q", err, tc.want)
			}
		})
	}
}

// TestCancelled: a check cut short returns the context's error, not a
// refusal, so that the caller retries instead of refusing a good model.
func TestCancelled(t *testing.T) {
	t.Parallel()
	dir := model(t, map[string]string{"w": strings.Repeat("x", 2*chunk)})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Verify(ctx, dir); !errors.Is(err, context.Canceled) {
		t.Fatalf("Verify with an ended context = %v, want context.Canceled", err)
	}
}

// BenchmarkVerify measures the check of a 64 MiB model: its cost is the
// SHA-256 of the bytes (b.SetBytes reports the rate).
func BenchmarkVerify(b *testing.B) {
	dir := b.TempDir()
	data := make([]byte, 64<<20)
	for i := range data {
		data[i] = byte(i * 7)
	}
	if err := os.WriteFile(filepath.Join(dir, "weights.bin"), data, 0o644); err != nil {
		b.Fatal(err)
	}
	if err := WriteManifest(dir); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := Verify(context.Background(), dir); err != nil {
			b.Fatal(err)
		}
	}
}

// TestRecord: a job's model directory with no MANIFEST gets one listing
// every regular file (a FIFO left out, never waited on) that Verify
// accepts; one that matches its files is kept byte for byte; a stale one
// (an earlier run's) is replaced; a directory with no file, or with a
// name a MANIFEST line cannot hold, is refused and given none.
func TestRecord(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "model")
	if err := os.MkdirAll(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]string{"model.json": "{}", "sub/w.bin": "weights"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "pipe"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := Record(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, Manifest))
	if err != nil {
		t.Fatal(err)
	}
	want := sum("{}") + "  model.json\n" + sum("weights") + "  sub/w.bin\n"
	if string(raw) != want || got != sum(want) {
		t.Fatalf("Record wrote %q (digest %s); want %q (%s)", raw, got, want, sum(want))
	}
	if v, err := Verify(ctx, dir); err != nil || v != got {
		t.Fatalf("Verify of the recorded directory: %s, %v", v, err)
	}
	// Kept as it is when it matches (even one Record would write otherwise).
	own := sum("weights") + " *sub/w.bin\n"
	if err := os.WriteFile(filepath.Join(dir, Manifest), []byte(own), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := Record(ctx, dir); err != nil || got != sum(own) {
		t.Fatalf("Record of a directory whose MANIFEST matches: %s, %v; want its own %s", got, err, sum(own))
	}
	// A stale one is replaced.
	if err := os.WriteFile(filepath.Join(dir, "model.json"), []byte("{\"v\":2}"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, Manifest), []byte(sum("{}")+"  model.json\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err = Record(ctx, dir)
	if v, verr := Verify(ctx, dir); err != nil || verr != nil || v != got {
		t.Fatalf("Record over a stale MANIFEST: %s, %v; Verify after: %s, %v", got, err, v, verr)
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".tmp") {
			t.Errorf("Record left %s behind", e.Name())
		}
	}

	empty := t.TempDir()
	if _, err := Record(ctx, empty); err == nil || !strings.Contains(err.Error(), "holds no file") {
		t.Errorf("Record of an empty directory: %v; want refused", err)
	}
	odd := t.TempDir()
	if err := os.WriteFile(filepath.Join(odd, "a\nb"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Record(ctx, odd); err == nil || !strings.Contains(err.Error(), "cannot hold") {
		t.Errorf("Record of a file named with a newline: %v; want refused", err)
	}
	for _, d := range []string{empty, odd} {
		if _, err := os.Stat(filepath.Join(d, Manifest)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("a refused Record left a MANIFEST in %s: %v", d, err)
		}
	}
}

// TestRecordBoundsEntries: a job's owner controls its model directory, and
// entries that are not regular files (directories, links, FIFOs) were
// walked without count, each directory read whole into memory: a tree of
// millions of them held the registry's job consumer and its memory, the
// MANIFEST's limits never reached. Every entry now counts against
// MaxEntries, and the walk stops there, naming the limit.
func TestRecordBoundsEntries(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "model.json"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	for i := range MaxEntries {
		if err := os.Symlink("model.json", filepath.Join(dir, fmt.Sprintf("l%05d", i))); err != nil {
			t.Fatal(err)
		}
	}
	_, err := Record(context.Background(), dir)
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("more than %d entries", MaxEntries)) {
		t.Fatalf("Record of a directory of %d links and a file: %v; want refused naming the limit of %d entries", MaxEntries, err, MaxEntries)
	}
	if _, err := os.Stat(filepath.Join(dir, Manifest)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused Record left a MANIFEST: %v", err)
	}
}

// TestRecordPastAStaleTemporary: a temporary MANIFEST left in the
// directory (a registry that stopped between writing and renaming it, or
// one the job's owner put there under the name it could guess: the pid is
// the same after a restart in a container) must not keep Record from
// writing the MANIFEST.
func TestRecordPastAStaleTemporary(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "model.json"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("model.json", filepath.Join(dir, fmt.Sprintf(".%s.%d.tmp", Manifest, os.Getpid()))); err != nil {
		t.Fatal(err)
	}
	got, err := Record(context.Background(), dir)
	if err != nil {
		t.Fatalf("Record past a stale temporary file: %v", err)
	}
	if v, err := Verify(context.Background(), dir); err != nil || v != got {
		t.Fatalf("Verify after: %s, %v; want %s", v, err, got)
	}
}

// TestNoMagicLinks: an artifact directory is read as its owner, but
// through /proc/self/fd/N (or a link to it: a job's owner may replace
// their model directory with one) the owner's thread reaches whatever
// directory the registry itself holds open, another tenant's being
// verified or exported included, past the directories above it that keep
// the owner out (the kernel lets a process follow its own descriptors).
// Verify and Record refuse a directory reached through such a link,
// reading nothing there.
func TestNoMagicLinks(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/proc/self/fd"); err != nil {
		t.Skip("no /proc")
	}
	victim := t.TempDir()
	if err := os.WriteFile(filepath.Join(victim, "model.json"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteManifest(victim); err != nil {
		t.Fatal(err)
	}
	held, err := os.Open(victim)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	magic := fmt.Sprintf("/proc/self/fd/%d", held.Fd())
	link := filepath.Join(t.TempDir(), "model")
	if err := os.Symlink(magic, link); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{magic, link} {
		if got, err := Verify(context.Background(), dir); err == nil || !strings.Contains(err.Error(), "/proc") {
			t.Errorf("Verify(%s): %s, %v; want refused, naming /proc", dir, got, err)
		}
		if got, err := Record(context.Background(), dir); err == nil || !strings.Contains(err.Error(), "/proc") {
			t.Errorf("Record(%s): %s, %v; want refused, naming /proc", dir, got, err)
		}
	}
	// An ordinary link to a directory is followed, as before.
	plain := filepath.Join(t.TempDir(), "model")
	if err := os.Symlink(victim, plain); err != nil {
		t.Fatal(err)
	}
	if _, err := Verify(context.Background(), plain); err != nil {
		t.Errorf("Verify through a plain link: %v", err)
	}
}
