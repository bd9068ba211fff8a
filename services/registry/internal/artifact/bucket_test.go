package artifact

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/loom-ml/loom/libs/blobstore"
	"github.com/loom-ml/loom/libs/errs"
)

// openBucket opens uri with blobstore, closed at the end of the test.
func openBucket(t *testing.T, uri string) *blobstore.Bucket {
	t.Helper()
	b, err := blobstore.Open(context.Background(), uri)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// TestVerifyBucketFileURL: a complete artifact set on a file:// bucket URL
// passes, both through VerifyBucket (blobstore's file driver) and VerifyURL;
// an incomplete one is refused naming the missing file; a MANIFEST naming
// "../x", or a name CleanKey refuses, is refused with the reason.
func TestVerifyBucketFileURL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	files := map[string]string{"model.json": `{"w":[1]}`, "ckpt/step-1": "abc"}
	complete := model(t, files)
	raw, _ := os.ReadFile(filepath.Join(complete, Manifest))
	if got, err := VerifyBucket(ctx, openBucket(t, "file://"+complete)); err != nil || got != sum(string(raw)) {
		t.Fatalf("complete set on file:// bucket: %s, %v; want the MANIFEST's SHA-256 %s", got, err, sum(string(raw)))
	}
	if _, err := VerifyURL(ctx, "file://"+complete); err != nil {
		t.Fatalf("VerifyURL of a complete file:// set: %v", err)
	}

	incomplete := model(t, files)
	if err := os.Remove(filepath.Join(incomplete, "ckpt", "step-1")); err != nil {
		t.Fatal(err)
	}
	traversal := model(t, files)
	writeManifest(t, traversal, sum("x")+"  ../x\n")
	hash := model(t, files)
	writeManifest(t, hash, sum("x")+"  a#b\n")
	badSum := model(t, files)
	if err := os.WriteFile(filepath.Join(badSum, "model.json"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	noManifest := model(t, files)
	if err := os.Remove(filepath.Join(noManifest, Manifest)); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct{ dir, want string }{
		"incomplete":  {incomplete, ": ckpt/step-1 is missing"},
		"traversal":   {traversal, `MANIFEST line 1: path "../x" leaves the artifact directory`},
		"cleankey":    {hash, `MANIFEST line 1: path: `},
		"bad sum":     {badSum, "model.json: sha256 " + sum("{}")},
		"no MANIFEST": {noManifest, "has no MANIFEST (the model is incomplete)"},
	} {
		_, err := VerifyBucket(ctx, openBucket(t, "file://"+c.dir))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: VerifyBucket = %v, want %q", name, err, c.want)
		}
	}
	// CleanKey's rule, not only the local parser's, is what refuses "a#b".
	if _, err := VerifyBucket(ctx, openBucket(t, "file://"+hash)); err == nil || !strings.Contains(err.Error(), `"a#b"`) {
		t.Errorf("a#b: %v, want CleanKey's refusal naming it", err)
	}
}

// TestVerifyURLMissing: a missing file:// directory is refused as missing
// and not created; an empty bucket is refused as holding nothing; an
// unknown scheme is refused by blobstore.Open.
func TestVerifyURLMissing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	gone := filepath.Join(t.TempDir(), "gone")
	if _, err := VerifyURL(ctx, "file://"+gone); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("missing dir: %v, want does not exist", err)
	}
	if _, err := os.Stat(gone); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("VerifyURL created %s (%v)", gone, err)
	}
	if _, err := VerifyURL(ctx, "mem://"); err == nil || !strings.Contains(err.Error(), "holds no objects") {
		t.Errorf("empty bucket: %v, want holds no objects", err)
	}
	if _, err := VerifyURL(ctx, "nope://b/m"); err == nil || !strings.Contains(err.Error(), "artifact location nope://b/m") {
		t.Errorf("unknown scheme: %v", err)
	}
}

// TestVerifyBucketBounds: a MANIFEST over MaxManifestBytes, or listing
// more than MaxFiles files, is refused; a cancelled context is ctx's error.
func TestVerifyBucketBounds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	big := openBucket(t, "mem://")
	if err := big.WriteFile(ctx, Manifest, []byte(strings.Repeat("x", MaxManifestBytes+1))); err != nil {
		t.Fatal(err)
	}
	if _, err := VerifyBucket(ctx, big); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("larger than %d bytes", MaxManifestBytes)) {
		t.Errorf("big MANIFEST: %v", err)
	}
	many := openBucket(t, "mem://")
	var m strings.Builder
	for i := range MaxFiles + 1 {
		fmt.Fprintf(&m, "%s  f%d\n", sum("x"), i)
	}
	if err := many.WriteFile(ctx, Manifest, []byte(m.String())); err != nil {
		t.Fatal(err)
	}
	if _, err := VerifyBucket(ctx, many); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("lists more than %d files", MaxFiles)) {
		t.Errorf("many files: %v", err)
	}
	ok := openBucket(t, "mem://")
	if err := ok.WriteFile(ctx, "w", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := ok.WriteFile(ctx, Manifest, []byte(sum("x")+"  w\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := VerifyBucket(ctx, ok); err != nil {
		t.Fatalf("complete mem:// set: %v", err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := VerifyBucket(cancelled, ok); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v, want context.Canceled", err)
	}
}

// TestReadListing: what an export carries is MANIFEST and the files it
// lists, each with the SHA-256 it must have (the MANIFEST's line; the
// MANIFEST's own digest, which Verify answers at registration), nothing
// else of the location; a location without a MANIFEST, or with one naming
// a path out of it, is FailedPrecondition.
func TestReadListing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := model(t, map[string]string{"w.bin": "w", "sub/c.json": "{}"})
	if err := os.WriteFile(filepath.Join(dir, "stray.txt"), []byte("not the model's"), 0o644); err != nil {
		t.Fatal(err)
	}
	registered, err := Verify(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	b := openBucket(t, "file://"+dir)
	l, err := ReadListing(ctx, b)
	files := slices.Sorted(slices.Values(l.Files))
	if err != nil || !slices.Equal(files, []string{"sub/c.json", "w.bin"}) || l.Manifest != registered {
		t.Fatalf("ReadListing = %+v, %v; want its two files and the MANIFEST Verify checked (%s)", l, err, registered)
	}
	if want := map[string]string{"w.bin": sum("w"), "sub/c.json": sum("{}"), Manifest: registered}; !maps.Equal(l.Want, want) {
		t.Errorf("Want = %v, want %v", l.Want, want)
	}
	// A line naming the MANIFEST does not make it a file of the set: it is
	// wanted as its own bytes, and copied last.
	writeManifest(t, dir, sum("w")+"  w.bin\n"+sum("x")+"  MANIFEST\n")
	if l, err := ReadListing(ctx, b); err != nil || !slices.Equal(l.Files, []string{"w.bin"}) || l.Want[Manifest] != l.Manifest || l.Manifest == registered {
		t.Errorf("ReadListing(a MANIFEST listing itself) = %+v, %v", l, err)
	}
	writeManifest(t, dir, sum("x")+"  ../other/w.bin\n")
	if _, err := ReadListing(ctx, b); errs.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("ReadListing(a MANIFEST naming ../other) = %v; want FailedPrecondition naming line 1", err)
	}
	if _, err := ReadListing(ctx, openBucket(t, "file://"+t.TempDir())); errs.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), Manifest) {
		t.Errorf("ReadListing(no MANIFEST) = %v; want FailedPrecondition naming it", err)
	}
}
