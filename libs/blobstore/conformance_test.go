package blobstore

import (
	"context"
	"net/http"
	"path/filepath"
	"testing"

	"gocloud.dev/blob"
	"gocloud.dev/blob/driver"
	"gocloud.dev/blob/drivertest"
	"gocloud.dev/blob/fileblob"
	"gocloud.dev/blob/memblob"
)

// confinedHarness runs go-cloud's driver conformance suite against the
// confining driver Loom's buckets are made of, over a real store. The
// suite writes "../foo/../bar/../../baz../", "foo//bar", backslashes and
// every ASCII character as keys; on fileblob the harness then checks that
// every file it left is under the prefix directory.
type confinedHarness struct {
	base   *blob.Bucket
	prefix string
	close  func()
}

func (h *confinedHarness) MakeDriver(context.Context) (driver.Bucket, error) {
	return &confined{base: h.base, prefix: h.prefix}, nil
}

// MakeDriverForNonexistentBucket: confinement has no bucket of its own;
// whether a bucket exists is the base driver's business (go-cloud's own
// tests cover it), so the suite skips the case, as it does for fileblob.
func (h *confinedHarness) MakeDriverForNonexistentBucket(context.Context) (driver.Bucket, error) {
	return nil, nil
}

func (h *confinedHarness) HTTPClient() *http.Client         { return nil }
func (h *confinedHarness) SupportsCopy() bool               { return true }
func (h *confinedHarness) SupportsNonSlashDelimiters() bool { return true }
func (h *confinedHarness) SkipDownloadAt() bool             { return false }
func (h *confinedHarness) Close()                           { h.close() }

const conformancePrefix = "projects/p1/models/m1/"

func TestConformanceFileblob(t *testing.T) {
	t.Parallel()
	drivertest.RunConformanceTests(t, func(ctx context.Context, t *testing.T) (drivertest.Harness, error) {
		root := t.TempDir()
		dir := filepath.Join(root, "store")
		base, err := fileblob.OpenBucket(dir, &fileblob.Options{CreateDir: true})
		if err != nil {
			return nil, err
		}
		return &confinedHarness{base: base, prefix: conformancePrefix, close: func() {
			base.Close()
			assertConfined(t, root, filepath.Join(dir, filepath.FromSlash(conformancePrefix[:len(conformancePrefix)-1])))
		}}, nil
	}, nil)
}

func TestConformanceMemblob(t *testing.T) {
	t.Parallel()
	drivertest.RunConformanceTests(t, func(ctx context.Context, t *testing.T) (drivertest.Harness, error) {
		base := memblob.OpenBucket(nil)
		return &confinedHarness{base: base, prefix: conformancePrefix, close: func() {
			// Everything the suite wrote is under the prefix.
			it := base.List(nil)
			for {
				o, err := it.Next(ctx)
				if err != nil {
					break
				}
				if len(o.Key) < len(conformancePrefix) || o.Key[:len(conformancePrefix)] != conformancePrefix {
					t.Errorf("memblob key %q is outside %q", o.Key, conformancePrefix)
				}
			}
			base.Close()
		}}, nil
	}, nil)
}
