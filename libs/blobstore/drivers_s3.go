//go:build !loom_no_s3

package blobstore

// S3 (s3blob) uses its cloud's standard credential chain (see
// docs/registry.md, "Credentials") and fails at first use where a site has
// none. Build with -tags loom_no_s3 to leave it out.
import _ "gocloud.dev/blob/s3blob"
