//go:build !loom_no_s3

package blobstore

import "testing"

// An s3:// URL opens without touching the network (credentials and the
// bucket are first used on the first call), and keeps its prefix and the
// driver's parameters in URL().
func TestOpenS3URL(t *testing.T) {
	t.Parallel()
	checkURLKept(t, "s3://my-bucket/loom/artifacts?region=us-east-1",
		"s3://my-bucket/loom/artifacts/projects/p1?region=us-east-1")
}
