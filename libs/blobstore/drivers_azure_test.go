//go:build !loom_no_azure

package blobstore

import (
	"context"
	"testing"
)

// No Azure Blob Storage emulator exists in Go (Azurite is Node.js), so
// azblob:// is tested only this far: the driver is linked, a URL with the
// account in its query opens without touching the network, and URL()
// keeps the prefix and the driver's parameters (docs/registry.md, "What
// is tested against what").
func TestOpenAzblobURL(t *testing.T) {
	t.Parallel()
	const u = "azblob://models/loom/artifacts?domain=127.0.0.1:10000&localemu=true&protocol=http&storage_account=devstoreaccount1"
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
	if want := "azblob://models/loom/artifacts/projects/p1?domain=127.0.0.1:10000&localemu=true&protocol=http&storage_account=devstoreaccount1"; sub.URL() != want {
		t.Errorf("Sub URL() = %q, want %q", sub.URL(), want)
	}
}
