//go:build !loom_no_azure

package blobstore

// Azure Blob Storage (azureblob) uses its cloud's standard credential chain (see
// docs/registry.md, "Credentials") and fails at first use where a site has
// none. Build with -tags loom_no_azure to leave it out.
import _ "gocloud.dev/blob/azureblob"
