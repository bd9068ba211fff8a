// Package blobstore is Loom's one way to read and write artifacts: a
// gocloud.dev/blob bucket (file:// by default; s3://, gs://, azblob:// and
// mem:// where a site has them) confined to a prefix, so that no model or
// artifact name can reach outside its project's part of the bucket.
//
// SEAM (issue 16): the signatures below are the contract between the
// registry service and this package. The bodies are filled in by the
// blobstore work package; until then every call is Unimplemented.
package blobstore

import (
	"context"
	"errors"
	"io"
)

// ErrUnimplemented is returned by the seam's placeholder bodies.
var ErrUnimplemented = errors.New("blobstore: not implemented yet")

// Bucket is a bucket confined to a prefix: every key a caller passes is
// relative to that prefix and is checked by CleanKey first.
type Bucket struct {
	url    string
	prefix string
}

// Open opens the bucket at url ("file:///abs/dir", "mem://", "s3://b",
// "gs://b", "azblob://c"; a bare absolute path means file://). The result
// is confined to the URL's path prefix, if any.
func Open(ctx context.Context, url string) (*Bucket, error) { return nil, ErrUnimplemented }

// Sub returns b confined further to prefix (cleaned like a key; "" is b
// itself). An invalid prefix is an InvalidArgument error naming it.
func (b *Bucket) Sub(prefix string) (*Bucket, error) { return nil, ErrUnimplemented }

// URL is the bucket's URL including its prefix, as Open would accept it.
func (b *Bucket) URL() string { return b.url }

// Close releases the bucket.
func (b *Bucket) Close() error { return nil }

// CleanKey checks a relative object name: it refuses "", absolute paths,
// "..", ".", empty segments ("//"), "#", "?", "\\", NUL and control
// characters, and names over 1,024 bytes, with an InvalidArgument error
// naming field. It returns the name unchanged when it is valid.
func CleanKey(field, name string) (string, error) { return "", ErrUnimplemented }

// Object is one object's listing entry.
type Object struct {
	Key    string // relative to the bucket's prefix
	Size   int64
	SHA256 string // hex; computed by reading when the driver has no checksum
}

// List lists every object under the bucket's prefix, in key order.
func (b *Bucket) List(ctx context.Context) ([]Object, error) { return nil, ErrUnimplemented }

// NewReader opens key for reading.
func (b *Bucket) NewReader(ctx context.Context, key string) (io.ReadCloser, error) {
	return nil, ErrUnimplemented
}

// WriteFile writes data to key atomically (readers see all or nothing).
func (b *Bucket) WriteFile(ctx context.Context, key string, data []byte) error {
	return ErrUnimplemented
}

// ExportOptions tunes Export.
type ExportOptions struct {
	// Progress, when set, is called after each object is copied or skipped.
	Progress func(done, total int, key string)
}

// ExportResult says what an export did.
type ExportResult struct {
	Copied  int   // objects written
	Skipped int   // objects already present with the same SHA-256
	Bytes   int64 // bytes written
	Objects []Object
}

// Export copies every object of src to dst byte for byte, comparing
// SHA-256 checksums after each copy. It is idempotent (an object already in
// dst with the same checksum is skipped, so a second export writes nothing)
// and resumable (a kill midway leaves only whole objects, and the next
// export copies the rest).
func Export(ctx context.Context, src, dst *Bucket, opts ExportOptions) (ExportResult, error) {
	return ExportResult{}, ErrUnimplemented
}
