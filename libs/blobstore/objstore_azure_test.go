//go:build !loom_no_azure && !loom_no_s3 && !loom_no_gcs

package blobstore

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/loom-ml/loom/libs/blobstore/blobtest"
	"github.com/loom-ml/loom/libs/errs"
)

// azblob joins the object stores of objstore_test.go, so that
// TestObjectStoreURLs and TestMLflowCVEChainObjectStores run on it too,
// through Open and the real azureblob driver against blobtest's fake.
func init() {
	stores = append(stores, store{"azblob", func(t *testing.T) (string, *blobtest.Stats) {
		s := blobtest.Azure(t)
		return s.URL, s.Stats()
	}})
}

// TestExportAzblob is TestExportAcrossSchemes to and from azblob: every
// other store to it and back, and azblob to itself. Checksums are
// compared on every object, and a second export sends no write.
func TestExportAzblob(t *testing.T) {
	t.Parallel()
	for _, pair := range [][2]string{
		{"s3", "azblob"}, {"azblob", "s3"}, {"file", "azblob"}, {"azblob", "file"},
		{"gs", "azblob"}, {"azblob", "gs"}, {"azblob", "azblob"},
	} {
		t.Run(pair[0]+"-to-"+pair[1], func(t *testing.T) {
			t.Parallel()
			checkExport(t, pair[0], pair[1])
		})
	}
}

// TestExportResumesAfterKillAzblob is TestExportResumesAfterKill's
// multipart case on Azure: the child export is killed after the store has
// taken a block of a large object but before the block list was
// committed. The object must not appear, and the next export copies only
// the rest and commits it once.
func TestExportResumesAfterKillAzblob(t *testing.T) {
	t.Parallel()
	// azureblob uploads in 8 MiB blocks (its default buffer size) once
	// an object is larger than one block.
	exportResumesInParts(t, blobtest.Azure(t), "block lists committed")
}

// TestOpenAzblobRefusals: the URL checks Open makes hold on azblob:// too,
// and a parameter the driver does not know is the caller's mistake.
func TestOpenAzblobRefusals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	az := blobtest.Azure(t)
	for _, u := range []string{
		strings.Replace(az.URL, "?", "/%2e%2e/x?", 1),
		strings.Replace(az.URL, "?", "/a//b?", 1),
		az.URL + "&prefix=../",
		az.URL + "#/../../etc",
		az.URL + "&no_such_parameter=1",
		// localemu reaches loopback only; without it, Azure's domains only.
		strings.Replace(az.URL, "domain=127.0.0.1", "domain=10.0.0.1", 1),
		"azblob://c?domain=attacker.example&storage_account=a",
		"azblob://c?protocol=http&storage_account=a",
	} {
		if b, err := Open(ctx, u); errs.Code(err) != codes.InvalidArgument {
			if b != nil {
				b.Close()
			}
			t.Errorf("Open(%q) = %v, want InvalidArgument", u, err)
		}
	}
}
