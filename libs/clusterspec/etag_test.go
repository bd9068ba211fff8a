package clusterspec

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/errs"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

func TestEtagIsOfTheSpecOnly(t *testing.T) {
	t.Parallel()
	c := &loomv1.Cluster{Name: "projects/p/clusters/c", Labels: map[string]string{"a": "1", "b": "2", "c": "3", "d": "4"},
		Compute: &loomv1.ComputeResources{NodePools: []*loomv1.NodePool{{Id: "gpu", MachineType: "a3-highgpu-8g", NodeCount: 2}}}}
	e := Etag(c)
	if len(e) != 32 {
		t.Fatalf("etag %q, want 32 hex digits", e)
	}
	for i := 0; i < 20; i++ { // map order does not show
		if Etag(proto.Clone(c).(*loomv1.Cluster)) != e {
			t.Fatal("etag differs between copies of one spec")
		}
	}
	out := proto.Clone(c).(*loomv1.Cluster)
	out.Status = &loomv1.ClusterStatus{State: loomv1.Cluster_RUNNING, ReadyNodes: 2}
	out.CreateTime, out.UpdateTime, out.Etag = timestamppb.Now(), timestamppb.Now(), "whatever"
	if Etag(out) != e {
		t.Fatal("status, times or the etag itself changed the etag")
	}
	spec := proto.Clone(c).(*loomv1.Cluster)
	spec.Compute.NodePools[0].NodeCount = 3
	if Etag(spec) == e {
		t.Fatal("a node_count change kept the etag")
	}

	if err := CheckEtag("update", c.GetName(), "", e); err != nil {
		t.Fatalf("no etag: %v", err)
	}
	if err := CheckEtag("update", c.GetName(), e, e); err != nil {
		t.Fatalf("the current etag: %v", err)
	}
	err := CheckEtag("update", c.GetName(), "stale", e)
	if errs.Code(err).String() != "Aborted" || !strings.Contains(err.Error(), `"stale"`) || !strings.Contains(err.Error(), e) ||
		!strings.Contains(err.Error(), "loom clusters get c -o json") {
		t.Fatalf("stale etag: %v", err)
	}
}
