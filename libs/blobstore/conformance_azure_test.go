//go:build !loom_no_azure

package blobstore

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"gocloud.dev/blob"
	"gocloud.dev/blob/drivertest"

	"github.com/loom-ml/loom/libs/blobstore/blobtest"
)

// blockBlobPUT adds the x-ms-blob-type header that Azure requires on a PUT
// through a signed URL and that a portable client does not send (see
// azureblob's package doc; go-cloud's own azureblob harness does the same).
type blockBlobPUT struct{}

func (blockBlobPUT) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodPut && r.Header.Get("x-ms-blob-type") == "" {
		r = r.Clone(r.Context())
		r.Header.Set("x-ms-blob-type", "BlockBlob")
	}
	return http.DefaultTransport.RoundTrip(r)
}

// TestConformanceAzblob runs go-cloud's driver conformance suite against
// Loom's confining driver over the real azureblob driver, talking HTTP to
// blobtest's Azure fake: a fresh fake and container per case, opened
// through go-cloud's URL opener as Open does. The fake checks every
// request's shared-key signature and every signed URL's SAS, so
// TestSignedURL runs in full. Afterwards every blob the suite left is
// under the prefix.
func TestConformanceAzblob(t *testing.T) {
	t.Parallel()
	client := &http.Client{Transport: blockBlobPUT{}}
	drivertest.RunConformanceTests(t, func(ctx context.Context, t *testing.T) (drivertest.Harness, error) {
		base, err := blob.OpenBucket(ctx, blobtest.Azure(t).URL)
		if err != nil {
			return nil, err
		}
		return &confinedHarness{base: base, prefix: conformancePrefix, client: client, close: func() {
			defer base.Close()
			it := base.List(nil)
			for {
				o, err := it.Next(ctx)
				if err != nil {
					break
				}
				if !strings.HasPrefix(o.Key, conformancePrefix) {
					t.Errorf("azblob key %q is outside %q", o.Key, conformancePrefix)
				}
			}
		}}, nil
	}, nil)
}
