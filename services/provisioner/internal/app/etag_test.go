package app

import (
	"context"
	"testing"

	"google.golang.org/protobuf/proto"

	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// Two updates from one read through the app and its Redis store: the
// second, with the etag of that read, changes nothing; the etag the
// provisioner serves is the one it stored, and a restart serves the same.
func TestRacingUpdatesThroughTheStore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, st, c := createdOnRedis(t)
	registerAll(t, a)
	read, _ := a.Cluster(demo)
	read = proto.Clone(read).(*loomv1.Cluster)
	if read.GetStatus().GetState() != loomv1.Cluster_RUNNING || read.GetEtag() == "" {
		t.Fatalf("cluster = %v, want RUNNING with an etag", read)
	}

	labels := proto.Clone(read).(*loomv1.Cluster)
	labels.Labels = map[string]string{"team": "vision"}
	if err := a.UpdateCluster(ctx, "ev-up1", &eventsv1.UpdateCluster{Operation: "up1", Cluster: labels,
		UpdateMask: []string{"labels"}, Etag: read.GetEtag()}); err != nil {
		t.Fatal(err)
	}
	grow := proto.Clone(read).(*loomv1.Cluster)
	grow.Compute.NodePools[0].NodeCount = 3
	if err := a.UpdateCluster(ctx, "ev-up2", &eventsv1.UpdateCluster{Operation: "up2", Cluster: grow,
		UpdateMask: []string{"labels", "compute.node_pools"}, Etag: read.GetEtag()}); err != nil {
		t.Fatal(err)
	}
	got, _ := a.Cluster(demo)
	if got.GetLabels()["team"] != "vision" || got.GetCompute().GetNodePools()[0].GetNodeCount() != 2 ||
		got.GetStatus().GetState() != loomv1.Cluster_RUNNING || got.GetEtag() == read.GetEtag() {
		t.Fatalf("after the racing updates: %v; want the first's labels kept, 2 nodes, a new etag", got)
	}
	if again, _ := newApp(t, st, newFake(), c).Cluster(demo); again.GetEtag() != got.GetEtag() {
		t.Fatalf("etag after a restart = %q, want %q", again.GetEtag(), got.GetEtag())
	}
}
