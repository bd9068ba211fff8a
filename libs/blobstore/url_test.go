package blobstore

import (
	"context"
	"testing"
)

// checkURLKept opens u (a driver URL whose bucket is first used on the
// first call, so no network is touched), and checks that URL() gives u
// back with the prefix "loom/artifacts/", and that Sub("projects/p1")
// gives wantSub: a driver's query parameters must survive both.
func checkURLKept(t *testing.T, u, wantSub string) {
	t.Helper()
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
	if sub.URL() != wantSub {
		t.Errorf("Sub URL() = %q, want %q", sub.URL(), wantSub)
	}
}
