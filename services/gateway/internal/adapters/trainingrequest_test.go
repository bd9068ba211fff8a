package adapters

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/proto"

	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
)

// TestSplitTrainingRequest: a record with a fingerprint gives back the
// resource and the fingerprint; one written before fingerprints were kept
// (the resource's bytes alone) gives the resource and "", which matches
// any request.
func TestSplitTrainingRequest(t *testing.T) {
	t.Parallel()
	j := &trainingv1.CustomJob{Name: "projects/p/locations/l/customJobs/1", User: "ana"}
	b, err := proto.Marshal(j)
	if err != nil {
		t.Fatal(err)
	}
	rec := append([]byte(trainingRequestMark+"00ff\n"), b...)
	if got, fp := SplitTrainingRequest(rec); !bytes.Equal(got, b) || fp != "00ff" {
		t.Errorf("record with a fingerprint: %q, %q", got, fp)
	}
	if got, fp := SplitTrainingRequest(b); !bytes.Equal(got, b) || fp != "" {
		t.Errorf("record without one: %q, %q", got, fp)
	}
}
