//go:build !loom_no_azure

package blobstore

import "testing"

// No Azure Blob Storage emulator exists in Go (Azurite is Node.js), so
// azblob:// is tested only this far: the driver is linked, a URL with the
// account in its query opens without touching the network, and URL()
// keeps the prefix and the driver's parameters (docs/registry.md, "What
// is tested against what").
func TestOpenAzblobURL(t *testing.T) {
	t.Parallel()
	checkURLKept(t,
		"azblob://models/loom/artifacts?domain=127.0.0.1:10000&localemu=true&protocol=http&storage_account=devstoreaccount1",
		"azblob://models/loom/artifacts/projects/p1?domain=127.0.0.1:10000&localemu=true&protocol=http&storage_account=devstoreaccount1")
}
