package blobstore

import (
	"context"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"gocloud.dev/blob"
	"gocloud.dev/blob/driver"
	"gocloud.dev/blob/drivertest"
	"gocloud.dev/blob/fileblob"
	"gocloud.dev/blob/memblob"
	"gocloud.dev/blob/s3blob"

	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/loom-ml/loom/libs/blobstore/blobtest"
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
	// client fetches signed URLs (nil: the suite does not check them).
	client *http.Client
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

func (h *confinedHarness) HTTPClient() *http.Client         { return h.client }
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

// fakeBugs are the conformance cases that fail on a fake object store
// because of the fake's own bug, not Loom's wrapper or go-cloud's driver;
// each is skipped with the bug named. Keys are t.Name() of the case.
var fakeBugs = func() map[string]string {
	const (
		s3Token  = "gofakes3 v1.2.0 bug: ListObjectsV2 sends a NextContinuationToken on the last page when it is exactly full, so a client asks for one more, empty page"
		s3Prefix = "gofakes3 v1.2.0 bug: s3mem resumes a delimited listing after the last key inside a common prefix rather than after the prefix, so the prefix comes again on the next page"
		s3Attrs  = "gofakes3 v1.2.0 bug: Cache-Control and Content-Language are not stored with an object, so they do not come back"
		s3Signed = "gofakes3 v1.2.0 bug: it checks no signature, so a signed URL used with another method than it was signed for succeeds"
		gsPage   = "fake-gcs-server v1.56.1 bug: objects.list ignores maxResults for prefixes (a delimited page holds every common prefix)"
		gsDelim  = "fake-gcs-server v1.56.1 bug: a common prefix is cut one byte after the delimiter's start, so a delimiter longer than one byte (Loom stores '\\' as %5C) gives wrong prefixes"
	)
	const s3, gs = "TestConformanceObjectStores/s3/", "TestConformanceObjectStores/gs/"
	return map[string]string{
		s3 + "TestList/by_1":                s3Token,
		s3 + "TestList/by_3":                s3Token,
		s3 + "TestListDelimiters/fwdslash":  s3Prefix,
		s3 + "TestListDelimiters/backslash": s3Prefix,
		s3 + "TestListDelimiters/abc":       s3Prefix,
		s3 + "TestAttributes":               s3Attrs,
		s3 + "TestSignedURL":                s3Signed,
		gs + "TestListDelimiters/fwdslash":  gsPage,
		gs + "TestListDelimiters/backslash": gsDelim,
		gs + "TestListDelimiters/abc":       gsDelim,
	}
}()

// TestConformanceObjectStores runs go-cloud's driver conformance suite
// against Loom's confining driver over the real s3blob and gcsblob
// drivers, each talking HTTP to an in-process fake (blobtest): a fresh
// bucket per case, opened through go-cloud's URL openers as Open does.
// Afterwards every object the suite left is under the prefix.
func TestConformanceObjectStores(t *testing.T) {
	t.Parallel()
	for _, st := range []struct {
		name string
		open func(context.Context, *testing.T) (*blob.Bucket, error)
	}{{"s3", openSigningS3}, {"gs", func(ctx context.Context, t *testing.T) (*blob.Bucket, error) {
		return blob.OpenBucket(ctx, blobtest.GCS(t).URL)
	}}} {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			drivertest.RunConformanceTests(t, func(ctx context.Context, t *testing.T) (drivertest.Harness, error) {
				if bug, ok := fakeBugs[t.Name()]; ok {
					t.Skip(bug)
				}
				base, err := st.open(ctx, t)
				if err != nil {
					return nil, err
				}
				return &confinedHarness{base: base, prefix: conformancePrefix, client: http.DefaultClient, close: func() {
					defer base.Close()
					it := base.List(nil)
					for {
						o, err := it.Next(ctx)
						if err != nil {
							break
						}
						if !strings.HasPrefix(o.Key, conformancePrefix) {
							t.Errorf("%s key %q is outside %q", st.name, o.Key, conformancePrefix)
						}
					}
				}}, nil
			}, nil)
		})
	}
}

// openSigningS3 opens a bucket on a fresh S3 fake through s3blob with
// static credentials. The fake's URL (blobtest.S3) sends unsigned
// requests (anonymous=true), and an unsigned client cannot make the
// signed URLs the suite checks; the credentials are the client's own, so
// no process-wide AWS_* variable is set.
func openSigningS3(ctx context.Context, t *testing.T) (*blob.Bucket, error) {
	s := blobtest.S3(t)
	u, err := url.Parse(s.URL)
	if err != nil {
		return nil, err
	}
	endpoint := u.Query().Get("endpoint")
	client := s3.New(s3.Options{
		Region:       blobtest.S3Region,
		BaseEndpoint: &endpoint,
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider("loom-test", "loom-test-secret", ""),
	})
	return s3blob.OpenBucket(ctx, client, s.Bucket, nil)
}
