package blobstore

// The drivers Open can always reach. The cloud drivers are in
// drivers_{s3,gcs,azure}.go, each behind a build tag that leaves it out
// (loom_no_s3, loom_no_gcs, loom_no_azure) for a site that wants a smaller
// binary: together they add about 60 MB to it (see docs/registry.md).
import (
	_ "gocloud.dev/blob/fileblob"
	_ "gocloud.dev/blob/memblob"
)
