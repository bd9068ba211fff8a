// Package blobstore is Loom's one way to read and write artifacts: a
// gocloud.dev/blob bucket (file:// by default; s3://, gs://, azblob:// and
// mem:// where a site has them) confined to a prefix, so that no model or
// artifact name can reach outside its project's part of the bucket.
//
// Two layers keep names inside. CleanKey refuses, with an InvalidArgument
// error, every name that is not a plain relative path (see its doc); every
// method that takes a name checks it first. Under that, the bucket itself
// is a confining go-cloud driver (confined) that encodes whatever key it is
// given so that the base store never sees a "..", an empty segment or a
// character it could interpret: even a name that got past CleanKey could
// only ever land under the prefix.
//
// The registry service calls only Open, Sub, URL, Close, CleanKey, List,
// NewReader, WriteFile and Export (the seam of issue 16).
package blobstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"syscall"

	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"

	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/osuser"
)

// ErrUnimplemented was returned by the seam's placeholder bodies; nothing
// returns it now. It stays so that code written against the seam builds.
var ErrUnimplemented = errors.New("blobstore: not implemented yet")

// MaxListObjects bounds List: a prefix holding more objects than this is a
// ResourceExhausted error rather than an unbounded slice.
const MaxListObjects = 100_000

// Bucket is a bucket confined to a prefix: every key a caller passes is
// relative to that prefix and is checked by CleanKey first.
type Bucket struct {
	url    string
	prefix string // "" or a clean key ending in "/"

	bkt  *blob.Bucket // blob.NewBucket(&confined{base, prefix})
	base *blob.Bucket // the store as opened, shared with every Sub
	// fileRoot is the directory of a file:// bucket ("" otherwise); URL()
	// of a Sub is that directory joined with the prefix.
	fileRoot string
	// scheme, host and query rebuild the URL of other stores.
	scheme, host, query string
	// hideTemp: fileblob writes its temporary files beside the objects
	// (no_tmp_dir), so List and Export must not take a leftover one, from
	// a writer killed midway, for an object.
	hideTemp bool
	// readAs, when set, is the account a file:// bucket opens files as
	// (ReadAs).
	readAs *osuser.Account
	// writeAs, when set, is the account a file:// bucket's exports are
	// written as (WriteAs).
	writeAs *osuser.Account
}

// fileblobTemp matches the temporary file fileblob makes for NAME:
// NAME.<nanoseconds in hex>.tmp.
var fileblobTemp = regexp.MustCompile(`\.[0-9a-f]{1,16}\.tmp$`)

// Open opens the bucket at url ("file:///abs/dir", "mem://", "s3://b",
// "gs://b", "azblob://c"; a bare absolute path means file://). The result
// is confined to the URL's path prefix, if any.
//
// For file:// the path is the directory that confines (it is created when
// missing); it must be absolute and clean: no ".", ".." or empty segments,
// after percent-decoding. For the other schemes the host is the bucket
// (or container), the path is the prefix (checked like a key), and the
// query is the driver's own (s3's region=, endpoint=, ...; see
// docs/registry.md). A URL with a fragment ('#'), or with go-cloud's
// prefix= parameter (say the prefix in the path instead), is refused.
// Every refusal is an InvalidArgument error on field "url".
func Open(ctx context.Context, rawURL string) (*Bucket, error) {
	if strings.HasPrefix(rawURL, "/") {
		rawURL = (&url.URL{Scheme: "file", Path: rawURL}).String()
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, errs.Invalid("url", "is not a URL: %v", err)
	}
	if u.Fragment != "" || strings.Contains(rawURL, "#") {
		return nil, errs.Invalid("url", "must not contain '#' (got %s)", quote(rawURL))
	}
	q := u.Query()
	if q.Has("prefix") {
		return nil, errs.Invalid("url", "must not use the prefix= parameter; put the prefix in the path (s3://bucket/some/prefix)")
	}
	if u.Scheme == "" || u.Opaque != "" {
		return nil, errs.Invalid("url", "must be scheme://bucket/prefix or an absolute path (got %s)", quote(rawURL))
	}
	if u.Scheme == "file" {
		return openFile(ctx, u)
	}
	b := &Bucket{scheme: u.Scheme, host: u.Host, query: u.RawQuery}
	if p := strings.Trim(u.Path, "/"); p != "" {
		if _, err := CleanKey("url", p); err != nil {
			return nil, err
		}
		if u.Path != "/"+p && u.Path != "/"+p+"/" {
			return nil, errs.Invalid("url", "prefix %s must not contain empty segments", quote(u.Path))
		}
		b.prefix = p + "/"
	}
	baseURL := (&url.URL{Scheme: u.Scheme, Host: u.Host, RawQuery: u.RawQuery}).String()
	base, err := blob.OpenBucket(ctx, baseURL)
	if err != nil {
		return nil, openError(rawURL, err)
	}
	b.base = base
	return b.init(true), nil
}

func openFile(ctx context.Context, u *url.URL) (*Bucket, error) {
	if u.Host != "" && u.Host != "localhost" {
		return nil, errs.Invalid("url", "file:// URL must name a local absolute directory, not host %q (write file:///abs/dir)", u.Host)
	}
	dir := u.Path
	if dir == "" || !path.IsAbs(dir) {
		return nil, errs.Invalid("url", "file:// directory must be absolute (got %q)", dir)
	}
	if dir != "/" {
		dir = strings.TrimSuffix(dir, "/")
	}
	if path.Clean(dir) != dir {
		return nil, errs.Invalid("url", "file:// directory must be clean: no '.', '..' or empty segments (got %q)", u.Path)
	}
	q := u.Query()
	if !q.Has("create_dir") {
		q.Set("create_dir", "1")
	}
	if !q.Has("no_tmp_dir") && !sameDevice(dir, os.TempDir()) {
		// fileblob writes to a temporary file and renames it into place;
		// a rename across file systems fails, so write next to the object.
		q.Set("no_tmp_dir", "1")
	}
	hideTemp := q.Get("no_tmp_dir") != ""
	base, err := blob.OpenBucket(ctx, (&url.URL{Scheme: "file", Path: dir, RawQuery: q.Encode()}).String())
	if err != nil {
		return nil, openError(u.String(), err)
	}
	b := &Bucket{base: base, fileRoot: dir, scheme: "file", query: u.RawQuery, hideTemp: hideTemp}
	return b.init(true), nil
}

// sameDevice says whether a and b are on one file system. a may not exist
// yet: then its nearest existing parent stands for it.
func sameDevice(a, b string) bool {
	var sa, sb syscall.Stat_t
	for syscall.Stat(a, &sa) != nil {
		if a == "/" {
			return true
		}
		a = path.Dir(a)
	}
	if syscall.Stat(b, &sb) != nil {
		return true
	}
	return sa.Dev == sb.Dev
}

// urlMistakes are the messages with which a driver's URL opener refuses
// the URL itself (go-cloud gives them no error code): s3blob and gcsblob
// say "invalid query parameter"; azureblob "unknown query parameter" and,
// for a domain or protocol it does not allow, `domain "…"`, `protocol "…"`
// or "local emulator domain".
var urlMistakes = []string{"no driver registered", "invalid query parameter", "unknown query parameter",
	`domain "`, `protocol "`, "local emulator domain"}

func openError(rawURL string, err error) error {
	if gcerrors.Code(err) == gcerrors.InvalidArgument || slices.ContainsFunc(urlMistakes, func(m string) bool {
		return strings.Contains(err.Error(), m)
	}) {
		return errs.Invalid("url", "cannot open %s: %v", quote(rawURL), err)
	}
	return fmt.Errorf("blobstore: open %s: %w", quote(rawURL), err)
}

// init builds the confined portable bucket and the URL of b.
func (b *Bucket) init(owns bool) *Bucket {
	b.bkt = blob.NewBucket(&confined{base: b.base, prefix: encodePrefix(b.prefix), owns: owns})
	p := strings.TrimSuffix(b.prefix, "/")
	switch {
	case b.fileRoot != "":
		// The directory the objects are in: a prefix "a../x" is the
		// directory "a.%2E/x" (encodeKey).
		u := url.URL{Scheme: "file", Path: path.Join(b.fileRoot, strings.TrimSuffix(encodePrefix(b.prefix), "/")), RawQuery: b.query}
		b.url = u.String()
	default:
		// Built by hand: url.URL writes "mem:" for an empty host and path,
		// which is not the form the docs show.
		u := b.scheme + "://" + b.host
		if p != "" {
			u += (&url.URL{Path: "/" + p}).EscapedPath()
		}
		if b.query != "" {
			u += "?" + b.query
		}
		b.url = u
	}
	return b
}

// Sub returns b confined further to prefix (cleaned like a key; "" is b
// itself). An invalid prefix is an InvalidArgument error naming it.
//
// The result shares b's store: closing it releases nothing of b's, and it
// must not be used after b is closed.
func (b *Bucket) Sub(prefix string) (*Bucket, error) {
	s := *b
	if prefix != "" {
		if _, err := CleanKey("prefix", prefix); err != nil {
			return nil, err
		}
		s.prefix = b.prefix + prefix + "/"
		// As stored (encodeKey): here a last segment "x.." gets a '/'
		// after it and becomes "x.%2E".
		if n := len(encodePrefix(s.prefix)); n > MaxKeyBytes {
			return nil, errs.Invalid("prefix", "makes the full prefix %d bytes as stored; at most %d are allowed", n, MaxKeyBytes)
		}
		if r := storedProblem(s.prefix + "x"); r != "" {
			return nil, errs.Invalid("prefix", "as the full prefix %s (got %s)", r, quote(prefix))
		}
	}
	return s.init(false), nil
}

// URL is the bucket's URL including its prefix, as Open would accept it.
func (b *Bucket) URL() string { return b.url }

// ReadAs makes every later read of b (and of a Sub of it made afterwards)
// open its file as the account a (libs/osuser.As): the kernel then checks
// a's permissions, on the file as opened, and a file a may not read is a
// PermissionDenied error naming the key. It is for a service that reads,
// with its own rights, a directory a caller named: it reads no more than
// the caller could. Only a file:// bucket has files to open so: for
// another it is an InvalidArgument error.
func (b *Bucket) ReadAs(a osuser.Account) error {
	if b.fileRoot == "" {
		return errs.Invalid("url", "%s is not a file:// bucket: it has no files to open as an OS account", quote(b.url))
	}
	b.readAs = &a
	return nil
}

// OpenAs opens the file:// bucket rawURL for an export written as the
// account a: its directory, when missing, is created as a (Open creates
// it), and the bucket then writes and reads as a (WriteAs). Another kind
// of store is an InvalidArgument error; a directory a may not create is
// PermissionDenied.
func OpenAs(ctx context.Context, rawURL string, a osuser.Account) (*Bucket, error) {
	var b *Bucket
	err := osuser.As(a, func() error {
		var err error
		b, err = Open(ctx, rawURL)
		return err
	})
	switch {
	case errors.Is(err, osuser.ErrNotPermitted):
		return nil, fmt.Errorf("%w: blobstore: open %s as %s: %v", errs.FailedPrecondition, quote(rawURL), a, err)
	case errors.Is(err, fs.ErrPermission):
		return nil, fmt.Errorf("%w: blobstore: open %s: %s may not create it", errs.PermissionDenied, quote(rawURL), a)
	case err != nil:
		return nil, err
	}
	if err := b.WriteAs(a); err != nil {
		b.Close()
		return nil, err
	}
	return b, nil
}

// WriteAs makes every later Export into b (and into a Sub of it made
// afterwards) create its directories and files as the account a, and read
// what is already there as a (ReadAs): the kernel checks a's permissions,
// so an export creates and replaces no more than a could, and what it
// creates is a's. A place a may not write is a PermissionDenied error
// naming the key. Only a file:// bucket has files to write so: for another
// it is an InvalidArgument error.
func (b *Bucket) WriteAs(a osuser.Account) error {
	if b.fileRoot == "" {
		return errs.Invalid("url", "%s is not a file:// bucket: it has no files to write as an OS account", quote(b.url))
	}
	b.writeAs, b.readAs = &a, &a
	return nil
}

// Close releases the bucket.
func (b *Bucket) Close() error { return b.bkt.Close() }

// Object is one object's listing entry.
type Object struct {
	Key    string // relative to the bucket's prefix
	Size   int64
	SHA256 string // hex; computed by reading when the driver has no checksum
}

// List lists every object under the bucket's prefix, in key order. The
// checksums are computed by reading every object (no store keeps SHA-256
// for us, and a checksum kept beside an object can be stale), so List
// costs one full read of the prefix. More than MaxListObjects objects is a
// ResourceExhausted error.
func (b *Bucket) List(ctx context.Context) ([]Object, error) {
	objs, err := b.list(ctx, MaxListObjects, "List")
	if err != nil {
		return nil, err
	}
	for i := range objs {
		if objs[i].SHA256, _, err = b.sum(ctx, objs[i].Key); err != nil {
			return nil, err
		}
	}
	return objs, nil
}

// list lists keys and sizes, at most limit of them.
func (b *Bucket) list(ctx context.Context, limit int, what string) ([]Object, error) {
	var objs []Object
	it := b.bkt.List(nil)
	for {
		o, err := it.Next(ctx)
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, b.wrap("list", "", err)
		}
		if o.IsDir || b.hideTemp && fileblobTemp.MatchString(o.Key) {
			continue
		}
		if b.fileRoot != "" && cleanName(o.Key) && !b.regularFile(o.Key) {
			// A link (to a file of the host's: the service's own
			// credentials), a FIFO, a device: no object.
			continue
		}
		if len(objs) == limit {
			return nil, fmt.Errorf("%w: %s: %s holds more than %d objects (the %s limit)", errs.ResourceExhausted, what, b.url, limit, what)
		}
		objs = append(objs, Object{Key: o.Key, Size: o.Size})
	}
	sort.Slice(objs, func(i, j int) bool { return objs[i].Key < objs[j].Key })
	return objs, nil
}

// cleanName reports whether CleanKey takes key as it is: then a file://
// bucket keeps it as the file b.filePath(key) (fileblob escapes other
// names, which the API refuses to read anyway).
func cleanName(key string) bool {
	c, err := CleanKey("key", key)
	return err == nil && c == key
}

// filePath is where a file:// bucket keeps key (a cleanName), relative to
// its directory: the encoded name, which is the name itself unless it
// holds "__0x" or a segment ending in ".." before a '/' (see encodeKey).
func (b *Bucket) filePath(key string) string {
	return filepath.FromSlash(encodeKey(b.prefix + key))
}

// regularFile reports whether key (a cleanName) of a file:// bucket is a
// regular file (not followed if a link).
func (b *Bucket) regularFile(key string) bool {
	fi, err := os.Lstat(filepath.Join(b.fileRoot, b.filePath(key)))
	return err == nil && fi.Mode().IsRegular()
}

// openRead opens key to read it. A file:// bucket's is opened inside its
// directory (os.Root: no link out of it), without waiting (a FIFO), and
// must be a regular file once open: it may have been replaced since it was
// listed, and the reader is a service with files of its own on the host.
func (b *Bucket) openRead(ctx context.Context, key string) (io.ReadCloser, error) {
	if b.fileRoot == "" {
		r, err := b.bkt.NewReader(ctx, key, nil)
		if err != nil {
			return nil, b.wrap("read", key, err)
		}
		return r, nil
	}
	var f *os.File
	open := func() error {
		// Not through /proc's links: read as a caller's account, a
		// link to the service's own descriptors leads past what keeps
		// the account out (osuser.OpenRoot).
		root, err := osuser.OpenRoot(b.fileRoot)
		if err != nil {
			return err
		}
		defer root.Close()
		f, err = root.OpenFile(b.filePath(key), os.O_RDONLY|syscall.O_NONBLOCK, 0)
		return err
	}
	var err error
	if b.readAs != nil {
		err = osuser.As(*b.readAs, open)
	} else {
		err = open()
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("blobstore: read %s key %s: %w", b.url, quote(key), errs.NotFound)
	case errors.Is(err, fs.ErrPermission) && b.readAs != nil:
		return nil, fmt.Errorf("%w: blobstore: read %s: %s: %s may not read it", errs.PermissionDenied, quote(key), b.url, b.readAs)
	case errors.Is(err, osuser.ErrNotPermitted):
		// Not root: this process cannot take on another account.
		return nil, fmt.Errorf("%w: blobstore: read %s: %s: %v", errs.FailedPrecondition, quote(key), b.url, err)
	case err != nil:
		return nil, b.wrap("read", key, err)
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("blobstore: read %s: %s: not a regular file", quote(key), b.url)
	}
	return f, nil
}

// sum reads key and returns its SHA-256 (hex) and length.
func (b *Bucket) sum(ctx context.Context, key string) (string, int64, error) {
	r, err := b.openRead(ctx, key)
	if err != nil {
		return "", 0, err
	}
	defer r.Close()
	h := sha256.New()
	n, err := io.Copy(h, r)
	if err != nil {
		return "", 0, b.wrap("read", key, err)
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// NewReader opens key for reading. A missing key is a NotFound error. A
// file:// bucket's file is opened inside its directory (after ReadAs, as
// that account) and must be a regular file.
func (b *Bucket) NewReader(ctx context.Context, key string) (io.ReadCloser, error) {
	if _, err := CleanKey("key", key); err != nil {
		return nil, err
	}
	if b.fileRoot != "" && cleanName(key) {
		// Inside the directory, a regular file, and its owner checked.
		return b.openRead(ctx, key)
	}
	r, err := b.bkt.NewReader(ctx, key, nil)
	if err != nil {
		return nil, b.wrap("read", key, err)
	}
	return r, nil
}

// WriteFile writes data to key atomically (readers see all or nothing):
// go-cloud's writers publish an object only when it is closed whole (a
// temporary file renamed into place on file://, a single or completed
// multipart upload on the object stores).
func (b *Bucket) WriteFile(ctx context.Context, key string, data []byte) error {
	if err := b.checkWriteKey("key", key); err != nil {
		return err
	}
	if err := b.bkt.WriteAll(ctx, key, data, writeOpts()); err != nil {
		return b.wrap("write", key, err)
	}
	return nil
}

func (b *Bucket) checkWriteKey(field, key string) error {
	if _, err := CleanKey(field, key); err != nil {
		return err
	}
	if b.fileRoot != "" && strings.HasSuffix(key, ".attrs") {
		return errs.Invalid(field, "must not end in \".attrs\" on a file:// bucket (go-cloud keeps each object's attributes in NAME.attrs) (got %s)", quote(key))
	}
	if n := len(encodeKey(b.prefix + key)); n > MaxKeyBytes {
		return errs.Invalid(field, "with the bucket's prefix %s the object name is %d bytes as stored; at most %d are allowed", quote(b.prefix), n, MaxKeyBytes)
	}
	return nil
}

func writeOpts() *blob.WriterOptions {
	return &blob.WriterOptions{ContentType: "application/octet-stream"}
}

// wrap gives a store error Loom's kind (NotFound, PermissionDenied,
// InvalidArgument) and says which bucket and key it was about.
func (b *Bucket) wrap(op, key string, err error) error {
	where := b.url
	if key != "" {
		where += " key " + quote(key)
	}
	switch gcerrors.Code(err) {
	case gcerrors.NotFound:
		return fmt.Errorf("blobstore: %s %s: %w", op, where, errs.NotFound)
	case gcerrors.PermissionDenied:
		return fmt.Errorf("blobstore: %s %s: %w: %v", op, where, errs.PermissionDenied, err)
	case gcerrors.Canceled:
		return fmt.Errorf("blobstore: %s %s: %w", op, where, context.Canceled)
	case gcerrors.DeadlineExceeded:
		return fmt.Errorf("blobstore: %s %s: %w", op, where, context.DeadlineExceeded)
	}
	return fmt.Errorf("blobstore: %s %s: %w", op, where, err)
}
