package blobstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"slices"
	"strings"

	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/osuser"
)

// Default export bounds. An artifact set past them is refused before
// anything is written, with an error naming the option to raise.
const (
	DefaultMaxExportObjects       = 100_000
	DefaultMaxExportBytes   int64 = 1 << 40 // 1 TiB
)

// ExportOptions tunes Export.
type ExportOptions struct {
	// Progress, when set, is called after each object is copied or skipped.
	Progress func(done, total int, key string)
	// MaxObjects bounds how many objects src may hold (0:
	// DefaultMaxExportObjects).
	MaxObjects int
	// MaxBytes bounds src's total size (0: DefaultMaxExportBytes).
	MaxBytes int64
	// Keys, when not nil, are the only objects of src copied (a model's
	// MANIFEST and the files it lists): anything else under src's prefix
	// is left behind. Each must be in src, else the export fails, before
	// writing anything, naming the first missing one (FailedPrecondition).
	Keys []string
	// Want, when not nil, is the SHA-256 (hex) that objects must have, by
	// key (a model's MANIFEST lines: the files as they were registered).
	// Each is checked on the bytes as they are copied: an object of src
	// whose bytes hash to anything else is never published to dst (what
	// dst held under its name stays), and the export stops there with an
	// ErrNotWanted error naming the key and both sums. Keys it does not
	// name are copied unchecked.
	Want map[string]string
}

// ErrNotWanted marks an export stopped by ExportOptions.Want: an object of
// the source is not the one wanted (changed since it was listed). Its
// errors are FailedPrecondition too.
var ErrNotWanted = errors.New("not the object wanted")

// ExportResult says what an export did.
type ExportResult struct {
	Copied  int   // objects written
	Skipped int   // objects already present with the same SHA-256
	Bytes   int64 // bytes written
	Objects []Object
}

// copyChunk is how much of an object Export holds in memory at once.
const copyChunk = 256 << 10

// exportHook, when set (by a test only), is called as each chunk of key
// has been handed to dst's writer: written bytes so far.
var exportHook func(key string, written int64)

// Export copies every object of src to dst byte for byte, comparing
// SHA-256 checksums after each copy. It is idempotent (an object already in
// dst with the same checksum is skipped, so a second export writes nothing)
// and resumable (a kill midway leaves only whole objects, and the next
// export copies the rest).
//
// Before writing anything it lists src and refuses, whole: an empty src
// (FailedPrecondition: a wrong or deleted location), more than
// MaxObjects objects or MaxBytes bytes (ResourceExhausted, naming the
// option), and any object whose name CleanKey refuses (InvalidArgument, so
// a foreign file in a job's artifact directory cannot be carried into dst
// under a name dst might interpret). Objects are copied in key order; each
// is read from src once while it is written, then read back from dst and
// its SHA-256 compared with what was read. Result.Objects lists every
// object of src with its checksum.
func Export(ctx context.Context, src, dst *Bucket, opts ExportOptions) (ExportResult, error) {
	maxObjects, maxBytes := opts.MaxObjects, opts.MaxBytes
	var v errs.Validator
	v.Check(maxObjects >= 0, "max_objects", "must not be negative (0 means %d)", DefaultMaxExportObjects)
	v.Check(maxBytes >= 0, "max_bytes", "must not be negative (0 means %d)", DefaultMaxExportBytes)
	if err := v.Err(); err != nil {
		return ExportResult{}, err
	}
	if maxObjects == 0 {
		maxObjects = DefaultMaxExportObjects
	}
	if maxBytes == 0 {
		maxBytes = DefaultMaxExportBytes
	}
	objs, err := src.list(ctx, maxObjects, "ExportOptions.MaxObjects")
	if err != nil {
		return ExportResult{}, err
	}
	if opts.Keys != nil {
		if objs, err = only(objs, opts.Keys, src.url); err != nil {
			return ExportResult{}, err
		}
	}
	if len(objs) == 0 {
		// Most likely a wrong or deleted artifact location: an empty
		// "success" would hide it.
		return ExportResult{}, fmt.Errorf("%w: export: %s holds no objects; check the artifact location", errs.FailedPrecondition, src.url)
	}
	var total int64
	for _, o := range objs {
		total += o.Size
	}
	if total > maxBytes {
		return ExportResult{}, fmt.Errorf("%w: export: %s holds %d bytes in %d objects, over the limit of %d (ExportOptions.MaxBytes)",
			errs.ResourceExhausted, src.url, total, len(objs), maxBytes)
	}
	bad := 0
	for _, o := range objs {
		if err := dst.checkWriteKey("object", o.Key); err != nil {
			if bad++; bad <= 10 {
				v.Add(fmt.Sprintf("objects[%s]", quote(o.Key)), "%v", err)
			}
		}
	}
	if bad > 10 {
		v.Add("objects", "and %d more objects with names that cannot be exported", bad-10)
	}
	if err := v.Err(); err != nil {
		return ExportResult{}, err
	}

	res := ExportResult{Objects: make([]Object, 0, len(objs))}
	for i, o := range objs {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		sum, copied, n, err := exportOne(ctx, src, dst, o, opts.Want[o.Key])
		if err != nil {
			return res, err
		}
		o.SHA256 = sum
		res.Objects = append(res.Objects, o)
		if copied {
			res.Copied++
			res.Bytes += n
		} else {
			res.Skipped++
		}
		if opts.Progress != nil {
			opts.Progress(i+1, len(objs), o.Key)
		}
	}
	return res, nil
}

// only is the objects of objs (sorted by key) that keys names, in key
// order; a key of keys that objs lacks is a FailedPrecondition error.
func only(objs []Object, keys []string, src string) ([]Object, error) {
	keep := make([]Object, 0, len(keys))
	for _, k := range slices.Sorted(slices.Values(keys)) {
		if len(keep) > 0 && keep[len(keep)-1].Key == k {
			continue
		}
		i, ok := slices.BinarySearchFunc(objs, k, func(o Object, k string) int { return strings.Compare(o.Key, k) })
		if !ok {
			return nil, fmt.Errorf("%w: export: %s has no object %s (or it is not a regular file); check the artifact location", errs.FailedPrecondition, src, quote(k))
		}
		keep = append(keep, objs[i])
	}
	return keep, nil
}

// exportOne makes dst hold o as src has it: skipped when dst already has
// the same bytes, else copied and checked. With want (hex SHA-256, "" for
// any) src's bytes must hash to it, or nothing is written (notWanted).
func exportOne(ctx context.Context, src, dst *Bucket, o Object, want string) (sum string, copied bool, n int64, err error) {
	if size, ok := dst.existingSize(ctx, o.Key); ok && size == o.Size {
		srcSum, _, err := src.sum(ctx, o.Key)
		if err != nil {
			return "", false, 0, err
		}
		if want != "" && srcSum != want {
			return "", false, 0, notWanted(src, o.Key, srcSum, want)
		}
		dstSum, _, err := dst.sum(ctx, o.Key)
		if err != nil {
			return "", false, 0, err
		}
		if srcSum == dstSum {
			return srcSum, false, 0, nil
		}
	}
	sum, n, err = copyObject(ctx, src, dst, o.Key, want)
	if err != nil {
		return "", false, 0, err
	}
	dstSum, dstN, err := dst.sum(ctx, o.Key)
	if err != nil {
		return "", false, 0, err
	}
	if dstSum != sum || dstN != n {
		return "", false, 0, fmt.Errorf("blobstore: export %s: %s holds %d bytes with SHA-256 %s after the copy, but %d bytes with SHA-256 %s were read from %s; run the export again",
			quote(o.Key), dst.url, dstN, dstSum, n, sum, src.url)
	}
	return sum, true, n, nil
}

// copyObject streams key from src to dst through go-cloud's writer, which
// publishes the object only on a successful Close: an interrupted copy
// leaves dst without the object (or with its previous version), never
// with part of it. With want (hex SHA-256, "" for any) bytes that hash to
// anything else are abandoned the same way, before they are published.
func copyObject(ctx context.Context, src, dst *Bucket, key, want string) (string, int64, error) {
	r, err := src.openRead(ctx, key)
	if err != nil {
		return "", 0, err
	}
	defer r.Close()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	h := sha256.New()
	var n int64
	// The writer's directories, its temporary file, the copy and the
	// rename into place: all as dst's account when it has one (fileblob
	// does them on the calling goroutine, which osuser.As runs as it).
	write := func() error {
		w, err := dst.bkt.NewWriter(wctx, key, writeOpts())
		if err != nil {
			return dst.writeErr(key, err)
		}
		// Copy in fixed chunks (go-cloud's ReadFrom would read 1 MiB at a
		// time) so memory per export is one chunk and the hook sees each.
		n, err = io.CopyBuffer(struct{ io.Writer }{w}, &hashingReader{r: r, h: h, key: key}, make([]byte, copyChunk))
		if err != nil {
			cancel() // abandons the write: Close then discards the object
			_ = w.Close()
			return fmt.Errorf("blobstore: export %s from %s to %s: %w", quote(key), src.url, dst.url, err)
		}
		if got := hex.EncodeToString(h.Sum(nil)); want != "" && got != want {
			cancel() // the object read is not the one wanted: never published
			_ = w.Close()
			return notWanted(src, key, got, want)
		}
		if err := w.Close(); err != nil {
			return dst.writeErr(key, err)
		}
		return nil
	}
	if dst.writeAs != nil {
		err = osuser.As(*dst.writeAs, write)
		if errors.Is(err, osuser.ErrNotPermitted) {
			err = fmt.Errorf("%w: blobstore: write %s: %s: %v", errs.FailedPrecondition, quote(key), dst.url, err)
		}
	} else {
		err = write()
	}
	if err != nil {
		return "", 0, err
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// notWanted is the error of an export that read key from src with SHA-256
// got where ExportOptions.Want says want.
func notWanted(src *Bucket, key, got, want string) error {
	return fmt.Errorf("%w: blobstore: export %s: %s holds it with SHA-256 %s, not the wanted %s (%w); nothing of it was written",
		errs.FailedPrecondition, quote(key), src.url, got, want, ErrNotWanted)
}

// existingSize is the size of key in b when it holds it as an object (a
// regular file in a file:// bucket, looked at without following a link or
// opening anything, as b's reader's account); ok false otherwise.
func (b *Bucket) existingSize(ctx context.Context, key string) (int64, bool) {
	if b.fileRoot == "" {
		a, err := b.bkt.Attributes(ctx, key)
		if err != nil {
			return 0, false
		}
		return a.Size, true
	}
	var fi fs.FileInfo
	stat := func() error {
		// Not through /proc's links: read as a caller's account, a
		// link to the service's own descriptors leads past what keeps
		// the account out (osuser.OpenRoot).
		root, err := osuser.OpenRoot(b.fileRoot)
		if err != nil {
			return err
		}
		defer root.Close()
		fi, err = root.Lstat(b.filePath(key))
		return err
	}
	var err error
	if b.readAs != nil {
		err = osuser.As(*b.readAs, stat)
	} else {
		err = stat()
	}
	if err != nil || !fi.Mode().IsRegular() {
		return 0, false
	}
	return fi.Size(), true
}

// writeErr is a write of key that failed: PermissionDenied naming the
// account when the kernel refused WriteAs's account.
func (b *Bucket) writeErr(key string, err error) error {
	if errors.Is(err, fs.ErrPermission) && b.writeAs != nil {
		return fmt.Errorf("%w: blobstore: write %s: %s: %s may not write it", errs.PermissionDenied, quote(key), b.url, b.writeAs)
	}
	return b.wrap("write", key, err)
}

// hashingReader hashes what it reads and calls exportHook.
type hashingReader struct {
	r   io.Reader
	h   hash.Hash
	key string
	n   int64
}

func (hr *hashingReader) Read(p []byte) (int, error) {
	n, err := hr.r.Read(p)
	if n > 0 {
		hr.h.Write(p[:n])
		hr.n += int64(n)
		if exportHook != nil {
			exportHook(hr.key, hr.n)
		}
	}
	return n, err
}
