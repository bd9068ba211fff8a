package blobstore

// The drivers Open can reach. file:// and mem:// need nothing; s3://, gs://
// and azblob:// use each cloud's standard credential chain (see
// docs/registry.md, "Artifact storage") and fail at first use where a site
// has none.
import (
	_ "gocloud.dev/blob/azureblob"
	_ "gocloud.dev/blob/fileblob"
	_ "gocloud.dev/blob/gcsblob"
	_ "gocloud.dev/blob/memblob"
	_ "gocloud.dev/blob/s3blob"
)
