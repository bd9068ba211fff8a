//go:build !loom_no_s3

package blobstore

import (
	"context"
	"testing"
)

// An s3:// URL opens without touching the network (credentials and the
// bucket are first used on the first call), and keeps its prefix and the
// driver's parameters in URL().
func TestOpenS3URL(t *testing.T) {
	t.Parallel()
	const u = "s3://my-bucket/loom/artifacts?region=us-east-1"
	b, err := Open(context.Background(), u)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if b.URL() != u || b.prefix != "loom/artifacts/" {
		t.Errorf("URL() = %q, prefix %q", b.URL(), b.prefix)
	}
	sub, err := b.Sub("projects/p1")
	if err != nil {
		t.Fatal(err)
	}
	if want := "s3://my-bucket/loom/artifacts/projects/p1?region=us-east-1"; sub.URL() != want {
		t.Errorf("Sub URL() = %q, want %q", sub.URL(), want)
	}
}
