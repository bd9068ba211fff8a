//go:build !loom_no_gcs

package blobstore

// Google Cloud Storage (gcsblob) uses its cloud's standard credential chain (see
// docs/registry.md, "Credentials") and fails at first use where a site has
// none. Build with -tags loom_no_gcs to leave it out.
import _ "gocloud.dev/blob/gcsblob"
