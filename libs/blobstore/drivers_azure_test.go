//go:build !loom_no_azure

package blobstore

import (
	"testing"

	"github.com/loom-ml/loom/libs/blobstore/blobtest"
)

// An azblob:// URL with the account in its query opens without touching
// the network, and URL() keeps the prefix and the driver's parameters.
// (What the driver does against a store is TestConformanceAzblob and the
// azblob cases of objstore_azure_test.go, on blobtest's Azure fake.)
func TestOpenAzblobURL(t *testing.T) {
	t.Parallel()
	// The driver reads its credentials from the environment once, on the
	// process's first azblob:// open, which may be this one: set them
	// first, or a parallel test on the fake would find none.
	blobtest.AzureEnv(t)
	checkURLKept(t,
		"azblob://models/loom/artifacts?domain=127.0.0.1:10000&localemu=true&protocol=http&storage_account=devstoreaccount1",
		"azblob://models/loom/artifacts/projects/p1?domain=127.0.0.1:10000&localemu=true&protocol=http&storage_account=devstoreaccount1")
}
