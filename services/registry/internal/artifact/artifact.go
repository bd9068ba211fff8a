// Package artifact checks that a model's artifact directory is complete
// before the registry registers it: the directory holds a MANIFEST, and
// every file the MANIFEST lists is there, inside the directory, with the
// listed SHA-256.
//
// MANIFEST is sha256sum's format: one line per file,
// "<64 hex digits>  <path relative to the directory>" (" *" in place of the
// second space is accepted, as `sha256sum -b` writes); blank lines are
// skipped. A path may not leave the directory: absolute paths, ".."
// segments and symbolic links that resolve outside it are refused. The
// directory itself may be reached through symbolic links, but not through
// /proc's links to a process's descriptors, cwd or root (osuser.OpenRoot).
package artifact

import (
	"bufio"
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
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/loom-ml/loom/libs/osuser"
)

// Manifest is the name of the manifest file in an artifact directory.
const Manifest = "MANIFEST"

// Limits of a MANIFEST: a larger one is refused.
const (
	// MaxManifestBytes bounds the MANIFEST's size.
	MaxManifestBytes = 4 << 20
	// MaxFiles bounds the files one MANIFEST lists.
	MaxFiles = 10000
	// MaxEntries bounds the entries of every kind (files, directories,
	// links, anything else) Record walks in a directory it lists: the
	// directory is its owner's to fill, and what is not a regular file is
	// walked without being listed.
	MaxEntries = 2 * MaxFiles
)

// chunk is how much is hashed between two looks at the context.
const chunk = 1 << 20

// Verify checks the artifact directory dir (absolute): it exists, holds
// MANIFEST, and every listed file is a regular file inside dir whose SHA-256
// is the listed one. A nil error means complete, and manifest is the
// SHA-256 (hex) of the MANIFEST checked: the registry records it with the
// version, so that an export can tell the MANIFEST it copies from another.
// Otherwise, when ctx ended the error is ctx's (the check did not finish:
// try again); any other error is the reason the directory is refused,
// naming the file at fault.
func Verify(ctx context.Context, dir string) (manifest string, err error) {
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("artifact directory %s does not exist", dir)
	case err != nil:
		return "", fmt.Errorf("artifact directory %s: %v", dir, pathless(err))
	case !fi.IsDir():
		return "", fmt.Errorf("artifact %s is not a directory", dir)
	}
	// Every file is opened through the root: a path or symbolic link that
	// would leave dir fails to open, whatever the MANIFEST says.
	root, err := openDir(dir)
	if err != nil {
		return "", err
	}
	defer root.Close()
	raw, err := readManifest(root, dir)
	if err != nil {
		return "", err
	}
	entries, err := parseManifest(raw)
	if err != nil {
		return "", err
	}
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return "", err
		}
		if err := checkFile(ctx, root, e); err != nil {
			return "", err
		}
	}
	return sumOf(raw), nil
}

// openDir opens the artifact directory dir as a root every file is opened
// through, refusing one reached through a /proc link (osuser.OpenRoot).
func openDir(dir string) (*os.Root, error) {
	root, err := osuser.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("artifact directory %s: %v", dir, pathless(err))
	}
	return root, nil
}

// sumOf is the SHA-256 of b in hex, as MANIFEST lines and
// blobstore.Object write it.
func sumOf(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// entry is one MANIFEST line.
type entry struct {
	sum  [sha256.Size]byte
	path string
	line int
}

// readManifest reads dir's MANIFEST (at most MaxManifestBytes).
func readManifest(root *os.Root, dir string) ([]byte, error) {
	// Never waiting on the open: a FIFO named MANIFEST held the registry's
	// one consumer, and every project's uploads with it (and the command,
	// never committed, again after a restart).
	f, err := root.OpenFile(Manifest, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("artifact directory %s has no %s (the model is incomplete)", dir, Manifest)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %v", Manifest, pathless(err))
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s in %s is not a regular file", Manifest, dir)
	}
	raw, err := io.ReadAll(io.LimitReader(f, MaxManifestBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %v", Manifest, pathless(err))
	}
	if len(raw) > MaxManifestBytes {
		return nil, fmt.Errorf("%s: larger than %d bytes", Manifest, MaxManifestBytes)
	}
	return raw, nil
}

// parseManifest parses a MANIFEST's bytes (at most MaxManifestBytes): the
// entries in order, or the reason the MANIFEST is refused.
func parseManifest(raw []byte) ([]entry, error) {
	var out []entry
	seen := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 0, 64<<10), MaxManifestBytes)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSuffix(sc.Text(), "\r")
		if strings.TrimSpace(line) == "" {
			continue
		}
		e, err := parseLine(line)
		if err != nil {
			return nil, fmt.Errorf("%s line %d: %v", Manifest, n, err)
		}
		if first, dup := seen[e.path]; dup {
			return nil, fmt.Errorf("%s line %d: %q is listed twice (first on line %d)", Manifest, n, e.path, first)
		}
		seen[e.path] = n
		e.line = n
		out = append(out, e)
		if len(out) > MaxFiles {
			return nil, fmt.Errorf("%s: lists more than %d files", Manifest, MaxFiles)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %v", Manifest, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s lists no files", Manifest)
	}
	return out, nil
}

// parseLine parses "<sha256>  <path>" (or "<sha256> *<path>") and refuses a
// path that is not local to the directory.
func parseLine(line string) (entry, error) {
	var e entry
	if len(line) < 2*sha256.Size+3 || line[2*sha256.Size] != ' ' ||
		(line[2*sha256.Size+1] != ' ' && line[2*sha256.Size+1] != '*') {
		return e, errors.New(`want "<sha256>  <relative path>"`)
	}
	if _, err := hex.Decode(e.sum[:], []byte(line[:2*sha256.Size])); err != nil {
		return e, fmt.Errorf("%q is not a SHA-256 in hex", line[:2*sha256.Size])
	}
	p := line[2*sha256.Size+2:]
	// filepath.IsLocal refuses "", absolute paths and any ".." that climbs
	// out; ".." anywhere is refused too, as the rule says, not resolved.
	if !filepath.IsLocal(p) || strings.ContainsRune(p, 0) || hasDotDot(p) {
		return e, fmt.Errorf("path %q leaves the artifact directory (absolute, or with \"..\")", p)
	}
	e.path = p
	return e, nil
}

// hasDotDot reports whether a segment of p is "..".
func hasDotDot(p string) bool {
	for _, seg := range strings.Split(filepath.ToSlash(p), "/") {
		if seg == ".." {
			return true
		}
	}
	return false
}

// checkFile checks that e's file is a regular file inside the root with e's
// SHA-256.
func checkFile(ctx context.Context, root *os.Root, e entry) error {
	// Stat before Open: opening a FIFO listed in the MANIFEST would block.
	fi, err := root.Stat(e.path)
	if err != nil {
		return fileError(e, err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s line %d: %s is not a regular file", Manifest, e.line, e.path)
	}
	// Without waiting, and a regular file still once open: it may have been
	// replaced (by a FIFO) since the look above.
	f, err := root.OpenFile(e.path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return fileError(e, err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return fmt.Errorf("%s line %d: %s is not a regular file", Manifest, e.line, e.path)
	}
	h := sha256.New()
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		n, err := io.CopyN(h, f, chunk)
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("%s: read: %v", e.path, pathless(err))
		}
		if n < chunk {
			break
		}
	}
	var got [sha256.Size]byte
	h.Sum(got[:0])
	if got != e.sum {
		return fmt.Errorf("%s: sha256 %x, but %s line %d lists %x", e.path, got, Manifest, e.line, e.sum)
	}
	return nil
}

// fileError says why a listed file could not be opened.
func fileError(e entry, err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%s line %d: %s is missing", Manifest, e.line, e.path)
	case strings.Contains(pathless(err).Error(), "path escapes from parent"):
		// os.Root's refusal of a symbolic link that resolves outside it
		// (its error is not exported; the tests pin the text).
		return fmt.Errorf("%s line %d: %s leaves the artifact directory (a symbolic link out of it)", Manifest, e.line, e.path)
	}
	return fmt.Errorf("%s line %d: %s: %v", Manifest, e.line, e.path, pathless(err))
}

// pathless drops the path from a *fs.PathError: reasons name the file
// themselves, relative to the artifact directory.
func pathless(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// WriteManifest writes dir's MANIFEST: one line per regular file under dir
// (MANIFEST itself left out), in path order, in the format Verify reads. It
// is what a producer of an artifact directory runs last, once the files are
// complete; the registry's tests make their models with it.
func WriteManifest(dir string) error {
	var b strings.Builder
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == Manifest {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		h := sha256.New()
		if _, err := io.Copy(h, f); err != nil {
			return err
		}
		fmt.Fprintf(&b, "%x  %s\n", h.Sum(nil), filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		return fmt.Errorf("manifest of %s: %w", dir, err)
	}
	return os.WriteFile(filepath.Join(dir, Manifest), []byte(b.String()), 0o644)
}

// Record gives the artifact directory dir (absolute) of a completed job's
// model output a MANIFEST the registry can hold it to, and returns that
// MANIFEST's SHA-256 (hex), as Verify does. A job writes its model output
// with no check of the registry's, and most write no MANIFEST; without
// one the version would pin nothing, and a file changed in place would be
// seen only by a later registration of the same directory. So: a MANIFEST
// that Verify accepts (the job wrote one, complete) is kept; otherwise
// (none, or one that no longer matches the files: a stale one of an
// earlier run in the same directory) Record lists every regular file
// under dir (MANIFEST left out) with its SHA-256, in path order, in the
// format Verify reads, and puts that MANIFEST in place atomically (a
// temporary file renamed over it). Every file is opened through os.Root
// without following a link out of dir and without waiting (a FIFO is not
// a regular file and is left out). A directory that cannot be listed
// within the MANIFEST's limits (MaxFiles, MaxManifestBytes), whose tree
// holds more than MaxEntries entries of any kind, holds no file, or holds a name the format cannot carry (a newline) is refused
// with the reason; when ctx ended the error is ctx's.
func Record(ctx context.Context, dir string) (manifest string, err error) {
	if manifest, err = Verify(ctx, dir); err == nil || ctx.Err() != nil {
		return manifest, err
	}
	root, err := openDir(dir)
	if err != nil {
		return "", err
	}
	defer root.Close()
	var b bytes.Buffer
	files := 0
	err = walk(ctx, root, func(p string, d fs.DirEntry) error {
		if !d.Type().IsRegular() || p == Manifest {
			return nil
		}
		if strings.ContainsAny(p, "\n\r") || !filepath.IsLocal(p) {
			return fmt.Errorf("%q: a name a %s line cannot hold", p, Manifest)
		}
		if files++; files > MaxFiles {
			return fmt.Errorf("more than %d files, the limit of a %s", MaxFiles, Manifest)
		}
		sum, err := hashFile(ctx, root, p)
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%x  %s\n", sum, p)
		if b.Len() > MaxManifestBytes {
			return fmt.Errorf("its %s would be larger than %d bytes", Manifest, MaxManifestBytes)
		}
		return nil
	})
	switch {
	case ctx.Err() != nil:
		return "", ctx.Err()
	case err != nil:
		return "", fmt.Errorf("artifact directory %s: %v", dir, pathless(err))
	case files == 0:
		return "", fmt.Errorf("artifact directory %s holds no file", dir)
	}
	// A name no one can guess: one left by a registry stopped before the
	// rename (its pid the same after a restart in a container), or put
	// there by the owner, would otherwise fail every later Record here.
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	tmp := fmt.Sprintf(".%s.%x.tmp", Manifest, rnd)
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return "", fmt.Errorf("write %s in %s: %v", Manifest, dir, pathless(err))
	}
	_, err = f.Write(b.Bytes())
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = root.Rename(tmp, Manifest)
	}
	if err != nil {
		_ = root.Remove(tmp)
		return "", fmt.Errorf("write %s in %s: %v", Manifest, dir, pathless(err))
	}
	return sumOf(b.Bytes()), nil
}

// walk calls visit with every entry under root but its directories, in
// fs.WalkDir's order (depth first, names sorted in each directory), and
// stops at the first error. Unlike fs.WalkDir it reads a directory a batch
// at a time, counts every entry of every kind against MaxEntries and looks
// at ctx between entries: the tree is its owner's, and a million empty
// directories or links (never listed, so never counted against MaxFiles)
// must not hold the caller past its time nor fill its memory. A link is
// visited, never followed.
func walk(ctx context.Context, root *os.Root, visit func(p string, d fs.DirEntry) error) error {
	left := MaxEntries
	var dir func(p string) error
	dir = func(p string) error {
		f, err := root.Open(p)
		if err != nil {
			return fmt.Errorf("%s: %v", p, pathless(err))
		}
		var ents []fs.DirEntry
		for {
			batch, err := f.ReadDir(256)
			if left -= len(batch); left < 0 {
				f.Close()
				return fmt.Errorf("more than %d entries (files, directories, links)", MaxEntries)
			}
			ents = append(ents, batch...)
			if err == io.EOF {
				break
			}
			if err == nil {
				err = ctx.Err()
			}
			if err != nil {
				f.Close()
				return fmt.Errorf("%s: %v", p, pathless(err))
			}
		}
		f.Close()
		slices.SortFunc(ents, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
		for _, e := range ents {
			if err := ctx.Err(); err != nil {
				return err
			}
			ep := path.Join(p, e.Name())
			if e.IsDir() {
				err = dir(ep)
			} else {
				err = visit(ep, e)
			}
			if err != nil {
				return err
			}
		}
		return nil
	}
	return dir(".")
}

// hashFile is the SHA-256 of the regular file p inside root, read without
// waiting on the open (a FIFO put in its place is refused, not waited on),
// ctx looked at between chunks.
func hashFile(ctx context.Context, root *os.Root, p string) ([]byte, error) {
	f, err := root.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", p, pathless(err))
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", p)
	}
	h := sha256.New()
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		n, err := io.CopyN(h, f, chunk)
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: read: %v", p, pathless(err))
		}
		if n < chunk {
			break
		}
	}
	return h.Sum(nil), nil
}
