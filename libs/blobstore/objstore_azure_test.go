//go:build !loom_no_azure && !loom_no_s3 && !loom_no_gcs

package blobstore

import (
	"context"
	"path/filepath"
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
	src := open(t, "file://"+filepath.Join(t.TempDir(), "src"))
	az := blobtest.Azure(t)
	dst := sub(t, open(t, az.URL), "exports/m1")
	// azureblob uploads in 8 MiB blocks (its default buffer size) once
	// an object is larger than one block.
	const pauseKey, block = "shard-3.bin", 8 << 20
	sizes := map[string]int{"shard-0.bin": 100, "shard-1.bin": 3*copyChunk + 1, "shard-2.bin": 0, pauseKey: 2*block + 4<<20 + 3, "shard-4.bin": 77, "shard-5.bin": copyChunk}
	want := artifacts(t, src, sizes)
	stats := az.Stats()
	killedExport{src: src.URL(), dst: dst.URL(), pauseKey: pauseKey, pauseAt: 2*block + copyChunk,
		ready: func() bool { return stats.Parts.Load() >= 1 }}.run(t)
	if n := stats.CompletedUploads.Load(); n != 0 {
		t.Fatalf("%d block lists were committed before the kill; want none", n)
	}
	done := before(want, pauseKey)
	checkBucketHolds(t, dst, done)
	checkResumed(t, src, dst, want, done)
	checkBucketHolds(t, dst, want)
	if n := stats.CompletedUploads.Load(); n != 1 {
		t.Errorf("the resumed export committed %d block lists; want 1 (%s)", n, pauseKey)
	}
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
