//go:build !loom_no_s3 && !loom_no_gcs

package blobstore

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"google.golang.org/grpc/codes"

	"github.com/loom-ml/loom/libs/blobstore/blobtest"
	"github.com/loom-ml/loom/libs/errs"
)

// store is one place a test can put a bucket: a fresh, empty one per call.
type store struct {
	name string
	// make returns the bucket's URL and, for an object store, its live
	// request counters (nil for file://).
	make func(t *testing.T) (string, *blobtest.Stats)
}

var stores = []store{
	{"file", func(t *testing.T) (string, *blobtest.Stats) {
		return "file://" + filepath.Join(t.TempDir(), "store"), nil
	}},
	{"s3", func(t *testing.T) (string, *blobtest.Stats) { s := blobtest.S3(t); return s.URL, s.Stats() }},
	{"gs", func(t *testing.T) (string, *blobtest.Stats) { s := blobtest.GCS(t); return s.URL, s.Stats() }},
}

func storeNamed(t *testing.T, name string) store {
	for _, s := range stores {
		if s.name == name {
			return s
		}
	}
	t.Fatalf("no store %q", name)
	return store{}
}

func sub(t testing.TB, b *Bucket, prefix string) *Bucket {
	t.Helper()
	s, err := b.Sub(prefix)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// readAll reads every object of b back and fails unless b holds exactly
// want, byte for byte.
func checkBucketHolds(t testing.TB, b *Bucket, want map[string][]byte) {
	t.Helper()
	ctx := context.Background()
	objs, err := b.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != len(want) {
		t.Errorf("%s holds %d objects, want %d: %v", b.URL(), len(objs), len(want), objs)
	}
	for _, o := range objs {
		w, ok := want[o.Key]
		if !ok {
			t.Errorf("%s holds %q, which it should not", b.URL(), o.Key)
			continue
		}
		if o.SHA256 != sha(w) || o.Size != int64(len(w)) {
			t.Errorf("%s %s: listed %d bytes sha %s, want %d bytes sha %s", b.URL(), o.Key, o.Size, o.SHA256, len(w), sha(w))
		}
		r, err := b.NewReader(ctx, o.Key)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(r)
		r.Close()
		if err != nil || !bytes.Equal(got, w) {
			t.Errorf("%s %s: read %d bytes (%v), want the %d written", b.URL(), o.Key, len(got), err, len(w))
		}
	}
}

// TestObjectStoreURLs: each store opens through Open's normal URL path;
// URL() of the bucket and of a Sub keeps the driver's parameters and
// reopens the same place; a missing key is NotFound; what one tenant
// writes another does not see.
func TestObjectStoreURLs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, st := range stores[1:] {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			u, _ := st.make(t)
			b := open(t, u)
			if b.URL() != u {
				t.Errorf("URL() = %q, want %q", b.URL(), u)
			}
			p1 := sub(t, b, "projects/p1/models/m1")
			scheme, rest, _ := strings.Cut(u, "://")
			bucket, query, _ := strings.Cut(rest, "?")
			want := scheme + "://" + bucket + "/projects/p1/models/m1"
			if query != "" {
				want += "?" + query
			}
			if p1.URL() != want {
				t.Errorf("Sub URL() = %q, want %q", p1.URL(), want)
			}
			data := artifacts(t, p1, map[string]int{"MLmodel": 10, "model/w.bin": 70_000, "empty": 0})
			again := open(t, p1.URL())
			checkBucketHolds(t, again, data)
			if _, err := again.NewReader(ctx, "missing"); errs.Code(err) != codes.NotFound {
				t.Errorf("NewReader(missing) = %v, want NotFound", err)
			}
			if objs, err := sub(t, b, "projects/p2").List(ctx); err != nil || len(objs) != 0 {
				t.Errorf("another tenant lists %v, %v; want nothing", objs, err)
			}
			// The prefix in the URL confines like Sub does.
			if objs, err := open(t, strings.Replace(p1.URL(), "/projects/p1/models/m1", "/projects/p1", 1)).List(ctx); err != nil || len(objs) != 3 || objs[0].Key != "models/m1/MLmodel" {
				t.Errorf("bucket opened at projects/p1 lists %v, %v", objs, err)
			}
		})
	}
}

// TestExportAcrossSchemes runs checkExport from each store to another
// (azblob's pairs are in TestExportAzblob).
func TestExportAcrossSchemes(t *testing.T) {
	t.Parallel()
	for _, pair := range [][2]string{
		{"file", "s3"}, {"s3", "gs"}, {"gs", "file"}, {"gs", "s3"}, {"s3", "file"}, {"file", "gs"}, {"s3", "s3"},
	} {
		t.Run(pair[0]+"-to-"+pair[1], func(t *testing.T) {
			t.Parallel()
			checkExport(t, pair[0], pair[1])
		})
	}
}

// checkExport exports a model-shaped artifact set from a fresh bucket on
// store from to one on store to: the destination holds the same bytes
// (checksums compared on every object), and a second export skips every
// object and sends the destination store no write at all.
func checkExport(t *testing.T, from, to string) {
	t.Helper()
	ctx := context.Background()
	srcURL, _ := storeNamed(t, from).make(t)
	dstURL, stats := storeNamed(t, to).make(t)
	src := sub(t, open(t, srcURL), "projects/p1/models/m1/versions/1")
	want := artifacts(t, src, modelSizes)
	dst := sub(t, open(t, dstURL), "exports/m1-v1")

	res, err := Export(ctx, src, dst, ExportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Copied != len(want) || res.Skipped != 0 {
		t.Fatalf("Export: copied %d skipped %d, want %d, 0", res.Copied, res.Skipped, len(want))
	}
	for _, o := range res.Objects {
		if o.SHA256 != sha(want[o.Key]) {
			t.Errorf("%s: export says sha %s, want %s", o.Key, o.SHA256, sha(want[o.Key]))
		}
	}
	checkBucketHolds(t, open(t, dst.URL()), want)

	var writes int64
	var before map[string]fileState
	if stats != nil {
		writes = stats.Writes.Load()
	} else {
		before = snapshot(t, strings.TrimPrefix(dst.URL(), "file://"))
	}
	again, err := Export(ctx, src, dst, ExportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if again.Copied != 0 || again.Skipped != len(want) || again.Bytes != 0 {
		t.Errorf("second export: copied %d skipped %d bytes %d; want 0, %d, 0", again.Copied, again.Skipped, again.Bytes, len(want))
	}
	if stats != nil {
		if n := stats.Writes.Load() - writes; n != 0 {
			t.Errorf("second export sent %s %d write requests; want none", to, n)
		}
	} else if after := snapshot(t, strings.TrimPrefix(dst.URL(), "file://")); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("second export changed the files: %v -> %v", before, after)
	}
}

// TestMLflowCVEChainObjectStores is TestMLflowCVEChain on S3 and GCS:
// every payload is refused by the API, and, sent straight through the
// confining driver, lands under the tenant's prefix; the objects outside
// it (another tenant's, the bucket root's) are unchanged.
func TestMLflowCVEChainObjectStores(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, st := range stores[1:] {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			u, _ := st.make(t)
			root := open(t, u)
			outside := map[string][]byte{"etc/passwd": []byte("root:x:0:0"), "projects/p2/models/secret/MLmodel": []byte("p2's")}
			for k, v := range outside {
				if err := root.WriteFile(ctx, k, v); err != nil {
					t.Fatal(err)
				}
			}
			const inside = "projects/p1/models/"
			tenant := sub(t, root, strings.TrimSuffix(inside, "/"))
			for _, tc := range mlflowCVEs {
				if _, err := tenant.Sub(tc.payload); errs.Code(err) != codes.InvalidArgument {
					t.Errorf("%s: Sub(%q) = %v, want InvalidArgument", tc.cve, tc.payload, err)
				}
				if err := tenant.WriteFile(ctx, tc.payload, []byte("pwned")); errs.Code(err) != codes.InvalidArgument {
					t.Errorf("%s: WriteFile(%q) = %v, want InvalidArgument", tc.cve, tc.payload, err)
				}
				if _, err := tenant.NewReader(ctx, tc.payload); errs.Code(err) != codes.InvalidArgument {
					t.Errorf("%s: NewReader(%q) = %v, want InvalidArgument", tc.cve, tc.payload, err)
				}
				if !utf8.ValidString(tc.payload) {
					continue
				}
				// Below the API: the driver takes the payload as it is.
				if err := tenant.bkt.WriteAll(ctx, tc.payload, []byte("pwned"), nil); err != nil {
					t.Fatalf("%s: driver write %q: %v", tc.cve, tc.payload, err)
				}
				if got, err := tenant.bkt.ReadAll(ctx, tc.payload); err != nil || string(got) != "pwned" {
					t.Fatalf("%s: driver read back %q = %q, %v", tc.cve, tc.payload, got, err)
				}
			}
			// What the store itself holds, below Loom's encoding.
			it := root.base.List(nil)
			n := 0
			for {
				o, err := it.Next(ctx)
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				if _, ok := outside[o.Key]; ok {
					continue
				}
				n++
				if !strings.HasPrefix(o.Key, inside) {
					t.Errorf("the store holds %q, outside %q", o.Key, inside)
				}
			}
			if n == 0 {
				t.Error("no payload reached the store: the test checked nothing")
			}
			for k, v := range outside {
				if got, err := root.bkt.ReadAll(ctx, k); err != nil || !bytes.Equal(got, v) {
					t.Errorf("%s outside the tenant = %q, %v; want it unchanged", k, got, err)
				}
			}
		})
	}
}

// TestOpenObjectStoreRefusals: the URL checks Open makes hold on the
// object stores too.
func TestOpenObjectStoreRefusals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s3 := blobtest.S3(t)
	gs := blobtest.GCS(t)
	for _, u := range []string{
		strings.Replace(s3.URL, "?", "/%2e%2e/x?", 1),
		strings.Replace(s3.URL, "?", "/a//b?", 1),
		s3.URL + "&prefix=../",
		s3.URL + "#/../../etc",
		gs.URL + "/../x",
		gs.URL + "?prefix=other/",
		gs.URL + "?no_such_parameter=1",
	} {
		if b, err := Open(ctx, u); errs.Code(err) != codes.InvalidArgument {
			if b != nil {
				b.Close()
			}
			t.Errorf("Open(%q) = %v, want InvalidArgument", u, err)
		}
	}
}

// TestExportResumesAfterKill runs an export in a child process (this test
// binary again), which pauses halfway through writing one object; the
// parent kills it with SIGKILL there. The destination then holds only
// whole objects, and a second export copies the rest and skips what was
// done. On S3 the object is large enough for a multipart upload and the
// kill comes after the store has taken a part of it but before the upload
// was completed: the object must not appear.
func TestExportResumesAfterKill(t *testing.T) {
	t.Parallel()
	t.Run("file", func(t *testing.T) {
		t.Parallel()
		exportResumesOnFiles(t)
	})
	t.Run("file-to-s3-multipart", func(t *testing.T) {
		t.Parallel()
		// s3blob uploads in 8 MiB parts (its transfer manager's default)
		// and goes multipart past 16 MiB.
		exportResumesInParts(t, blobtest.S3(t), "multipart uploads completed")
	})
	t.Run("s3-to-gs", func(t *testing.T) {
		t.Parallel()
		src := sub(t, open(t, blobtest.S3(t).URL), "projects/p1/models/m1/versions/3")
		dst := sub(t, open(t, blobtest.GCS(t).URL), "exports/m1-v3")
		sizes := map[string]int{}
		for i := range 5 {
			sizes[fmt.Sprintf("shard-%d.bin", i)] = 3*copyChunk + i
		}
		want := artifacts(t, src, sizes)
		const pauseKey = "shard-2.bin"
		killedExport{src: src.URL(), dst: dst.URL(), pauseKey: pauseKey, pauseAt: copyChunk}.run(t)
		done := before(want, pauseKey)
		checkBucketHolds(t, dst, done)
		checkResumed(t, src, dst, want, done)
		checkBucketHolds(t, dst, want)
	})
}

// exportResumesInParts is the multipart case of an export killed midway,
// on a store (st) that uploads a large object in 8 MiB parts and makes it
// visible only once they are committed (what names that commit, for the
// messages): the child export is killed after the store has taken a part
// of the large object but before the commit. The object must not appear,
// and the next export copies only the rest and commits it once.
func exportResumesInParts(t *testing.T, st *blobtest.Store, what string) {
	src := open(t, "file://"+filepath.Join(t.TempDir(), "src"))
	dst := sub(t, open(t, st.URL), "exports/m1")
	const pauseKey, part = "shard-3.bin", 8 << 20
	sizes := map[string]int{"shard-0.bin": 100, "shard-1.bin": 3*copyChunk + 1, "shard-2.bin": 0, pauseKey: 2*part + 4<<20 + 3, "shard-4.bin": 77, "shard-5.bin": copyChunk}
	want := artifacts(t, src, sizes)
	stats := st.Stats()
	killedExport{src: src.URL(), dst: dst.URL(), pauseKey: pauseKey, pauseAt: 2*part + copyChunk,
		ready: func() bool { return stats.Parts.Load() >= 1 }}.run(t)
	if n := stats.CompletedUploads.Load(); n != 0 {
		t.Fatalf("%d %s before the kill; want none", n, what)
	}
	done := before(want, pauseKey)
	checkBucketHolds(t, dst, done)
	checkResumed(t, src, dst, want, done)
	checkBucketHolds(t, dst, want)
	if n := stats.CompletedUploads.Load(); n != 1 {
		t.Errorf("the resumed export: %d %s; want 1 (%s)", n, what, pauseKey)
	}
}
