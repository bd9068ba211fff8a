package artifact

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/url"
	"path/filepath"
	"strings"

	"github.com/loom-ml/loom/libs/blobstore"
	"github.com/loom-ml/loom/libs/errs"
)

// VerifyURL checks the artifact set at uri, any location the registry
// accepts as a model's artifact_uri. A local directory ("/abs/dir" or
// "file:///abs/dir") is checked by Verify, through os.Root: that refuses
// symbolic links out of the directory and never creates a missing one
// (blobstore.Open would). Every other URL (s3://, gs://, azblob://, and
// mem:// in tests) is opened with blobstore.Open and checked by
// VerifyBucket. The contract (the MANIFEST's SHA-256, or why not) is
// Verify's.
func VerifyURL(ctx context.Context, uri string) (manifest string, err error) {
	if dir, ok := localDir(uri); ok {
		return Verify(ctx, dir)
	}
	b, err := blobstore.Open(ctx, uri)
	if err != nil {
		return "", fmt.Errorf("artifact location %s: %v", uri, err)
	}
	defer b.Close()
	return VerifyBucket(ctx, b)
}

// localDir returns the directory uri names when it is a local one.
func localDir(uri string) (string, bool) {
	if strings.HasPrefix(uri, "/") {
		return filepath.Clean(uri), true
	}
	if !strings.HasPrefix(uri, "file:") {
		return "", false
	}
	u, err := url.Parse(uri)
	if err != nil || (u.Host != "" && u.Host != "localhost") || !filepath.IsAbs(u.Path) {
		return "", false // blobstore.Open says what is wrong with it
	}
	return filepath.Clean(u.Path), true
}

// VerifyBucket checks the artifact set under b's prefix the way Verify
// checks a directory: it holds MANIFEST (at most MaxManifestBytes, listing
// at most MaxFiles files), every listed name is a plain relative key
// (blobstore.CleanKey: "../x" is refused, with the rule it breaks), and
// every listed object is there with the listed SHA-256. An empty prefix is
// refused as missing: a bucket has no directories, so nothing uploaded and
// a wrong location look the same. A nil error means complete, and manifest
// is the SHA-256 of the MANIFEST checked (as Verify's); when ctx ended the
// error is ctx's; any other error is the reason to refuse, naming the
// object at fault. It costs one read of every object under the prefix
// (blobstore's List; at most blobstore.MaxListObjects of them).
func VerifyBucket(ctx context.Context, b *blobstore.Bucket) (manifest string, err error) {
	loc := b.URL()
	objs, err := b.List(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		return "", fmt.Errorf("artifact location %s: %v", loc, err)
	}
	if len(objs) == 0 {
		return "", fmt.Errorf("artifact location %s holds no objects (missing, or nothing uploaded yet)", loc)
	}
	byKey := make(map[string]blobstore.Object, len(objs))
	for _, o := range objs {
		byKey[o.Key] = o
	}
	m, ok := byKey[Manifest]
	switch {
	case !ok:
		return "", fmt.Errorf("artifact location %s has no %s (the model is incomplete)", loc, Manifest)
	case m.Size > MaxManifestBytes:
		return "", fmt.Errorf("%s: larger than %d bytes", Manifest, MaxManifestBytes)
	}
	raw, err := readObject(ctx, b, Manifest, MaxManifestBytes)
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
		if _, err := blobstore.CleanKey("path", e.path); err != nil {
			return "", fmt.Errorf("%s line %d: %v", Manifest, e.line, err)
		}
		o, ok := byKey[e.path]
		if !ok {
			return "", fmt.Errorf("%s line %d: %s is missing", Manifest, e.line, e.path)
		}
		if want := fmt.Sprintf("%x", e.sum); o.SHA256 != want {
			return "", fmt.Errorf("%s: sha256 %s, but %s line %d lists %s", e.path, o.SHA256, Manifest, e.line, want)
		}
	}
	return sumOf(raw), nil
}

// readObject reads key whole, refusing more than limit bytes (the object
// may have grown since it was listed).
func readObject(ctx context.Context, b *blobstore.Bucket, key string, limit int64) ([]byte, error) {
	r, err := b.NewReader(ctx, key)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	defer r.Close()
	raw, err := io.ReadAll(io.LimitReader(r, limit+1))
	switch {
	case err != nil && ctx.Err() != nil:
		return nil, ctx.Err()
	case err != nil:
		return nil, fmt.Errorf("%s: %v", key, err)
	case int64(len(raw)) > limit:
		return nil, fmt.Errorf("%s: larger than %d bytes", key, limit)
	}
	return raw, nil
}

// Listing is what exporting an artifact set copies, as its MANIFEST says
// now: the files it lists and the MANIFEST itself, each with the SHA-256
// (hex) its bytes must have. Nothing else under the set's prefix is a model
// file: an export carries only these.
type Listing struct {
	// Manifest is the SHA-256 of the MANIFEST read: Verify's at
	// registration when the set is unchanged.
	Manifest string
	// Files are the keys the MANIFEST lists (plain relative keys), in its
	// order, MANIFEST itself never among them.
	Files []string
	// Want is every key's SHA-256, MANIFEST's included
	// (blobstore.ExportOptions.Want).
	Want map[string]string
}

// ReadListing reads b's MANIFEST now and returns what an export of the set
// copies. A MANIFEST that is missing, too large or does not parse, or that
// lists a name that is not a plain relative key, is an error saying so
// (FailedPrecondition: the set is no longer what was registered); one b
// may not read is PermissionDenied.
func ReadListing(ctx context.Context, b *blobstore.Bucket) (Listing, error) {
	raw, err := readObject(ctx, b, Manifest, MaxManifestBytes)
	if err != nil {
		if ctx.Err() != nil {
			return Listing{}, ctx.Err()
		}
		if errors.Is(err, errs.PermissionDenied) {
			return Listing{}, fmt.Errorf("artifact location %s: %w", b.URL(), err)
		}
		return Listing{}, fmt.Errorf("%w: artifact location %s: %v", errs.FailedPrecondition, b.URL(), err)
	}
	entries, err := parseManifest(raw)
	if err != nil {
		return Listing{}, fmt.Errorf("%w: artifact location %s: %v", errs.FailedPrecondition, b.URL(), err)
	}
	l := Listing{Manifest: sumOf(raw), Files: make([]string, 0, len(entries)), Want: make(map[string]string, len(entries)+1)}
	for _, e := range entries {
		if _, err := blobstore.CleanKey("path", e.path); err != nil {
			return Listing{}, fmt.Errorf("%w: artifact location %s: %s line %d: %v", errs.FailedPrecondition, b.URL(), Manifest, e.line, err)
		}
		if e.path == Manifest {
			// A line naming the MANIFEST (no set that passed Verify has
			// one: it cannot list its own digest) does not make it a file
			// of the set: it is still copied last, as its own bytes.
			continue
		}
		l.Files = append(l.Files, e.path)
		l.Want[e.path] = hex.EncodeToString(e.sum[:])
	}
	l.Want[Manifest] = l.Manifest
	return l, nil
}
