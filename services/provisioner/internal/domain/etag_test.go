package domain

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/clusterspec"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// Two updates made from the same read of a RUNNING cluster: the first moves
// no node and is done at once; the second, still carrying the spec as read
// (here the labels the first changed, as `loom clusters update -f` sends
// every field in which its file differs), is refused with ABORTED instead
// of undoing the first.
func TestRacingUpdatesFromOneReadSecondIsAborted(t *testing.T) {
	t.Parallel()
	s := running(t)
	read := proto.Clone(cluster(s)).(*loomv1.Cluster)
	if read.GetEtag() == "" {
		t.Fatal("a running cluster has no etag")
	}

	first := proto.Clone(read).(*loomv1.Cluster)
	first.Labels = map[string]string{"team": "vision"}
	ch := apply(s, s.UpdateCluster(p, &eventsv1.UpdateCluster{Operation: "up1", Cluster: first,
		UpdateMask: []string{"labels"}, Etag: read.GetEtag()}, t0.Add(time.Hour)))
	if cc := clusterChanged(t, ch); cc == nil || !cc.OperationDone || cc.Cluster.GetEtag() == read.GetEtag() {
		t.Fatalf("first update = %v, want done at once with a new etag", cc)
	}

	second := proto.Clone(read).(*loomv1.Cluster)
	second.Compute.NodePools[0].NodeCount = 3
	f := onlyFailure(t, s.UpdateCluster(p, &eventsv1.UpdateCluster{Operation: "up2", Cluster: second,
		UpdateMask: []string{"labels", "compute.node_pools"}, Etag: read.GetEtag()}, t0.Add(2*time.Hour)))
	if codes.Code(f.Code) != codes.Aborted || f.Operation != "up2" ||
		!strings.Contains(f.Message, read.GetEtag()) || !strings.Contains(f.Message, cluster(s).GetEtag()) ||
		!strings.Contains(f.Message, "read it again") {
		t.Fatalf("second update = %v, want ABORTED naming both etags and saying to read again", f)
	}
	if got := cluster(s); got.GetLabels()["team"] != "vision" || got.GetCompute().GetNodePools()[0].GetNodeCount() != 2 {
		t.Fatalf("after the refused update: labels %v, pool %v; want the first update's labels kept, nothing else changed",
			got.GetLabels(), got.GetCompute().GetNodePools()[0])
	}
}

func TestUpdateWithTheCurrentOrNoEtagApplies(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		etag func(*State) string
	}{
		{"current etag", func(s *State) string { return cluster(s).GetEtag() }},
		{"no etag", func(*State) string { return "" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := running(t)
			c := proto.Clone(cluster(s)).(*loomv1.Cluster)
			c.Labels = map[string]string{"team": "vision"}
			// An earlier update moved the etag on: the check compares with
			// the etag now, not the first one.
			apply(s, s.UpdateCluster(p, &eventsv1.UpdateCluster{Operation: "up0", Cluster: c, UpdateMask: []string{"labels"}}, t0.Add(time.Hour)))
			c = proto.Clone(cluster(s)).(*loomv1.Cluster)
			c.Compute.NodePools[0].NodeCount = 3
			ch := apply(s, s.UpdateCluster(p, &eventsv1.UpdateCluster{Operation: "up1", Cluster: c,
				UpdateMask: []string{"compute.node_pools"}, Etag: tc.etag(s)}, t0.Add(2*time.Hour)))
			if cc := clusterChanged(t, ch); cc == nil || cc.Cluster.GetStatus().GetState() != loomv1.Cluster_UPDATING {
				t.Fatalf("update = %v, want UPDATING", ch.Events)
			}
			if got := cluster(s); got.GetCompute().GetNodePools()[0].GetNodeCount() != 3 || got.GetLabels()["team"] != "vision" {
				t.Fatalf("after the update: %v", got)
			}
		})
	}
}

// The etag is of the spec: registrations, health and the operation
// finishing change the status and update_time, not the etag; it is set on
// what is emitted and stored, and a record loaded without one gets it.
func TestEtagIsStableAcrossStatusChanges(t *testing.T) {
	t.Parallel()
	s := created(t)
	etag := cluster(s).GetEtag()
	if etag == "" || etag != clusterspec.Etag(cluster(s)) {
		t.Fatalf("created cluster's etag = %q, want %q", etag, clusterspec.Etag(cluster(s)))
	}
	before := proto.Clone(cluster(s)).(*loomv1.Cluster)
	var last *eventsv1.ClusterChanged
	for i, n := range s.ClusterNodes(demo) {
		if cc := clusterChanged(t, register(s, n.GetHostname(), t0.Add(time.Duration(i+1)*time.Minute))); cc != nil {
			last = cc
		}
	}
	if cc := clusterChanged(t, health(s, "gpu-0001", eventsv1.NodeHealth_UNHEALTHY, "xid 79")); cc != nil {
		last = cc
	}
	after := cluster(s)
	if proto.Equal(before.GetStatus(), after.GetStatus()) {
		t.Fatal("the status did not change; the test shows nothing")
	}
	if after.GetEtag() != etag || last == nil || last.GetCluster().GetEtag() != etag {
		t.Fatalf("etag after status changes = %q (event %q), want %q unchanged", after.GetEtag(), last.GetCluster().GetEtag(), etag)
	}

	stored := &Cluster{Cluster: proto.Clone(after).(*loomv1.Cluster), Operation: s.Clusters[demo].Operation}
	stored.Cluster.Etag = ""
	if got := NewState([]*Cluster{stored}, nil, nil, nil).Clusters[demo].Cluster.GetEtag(); got != etag {
		t.Fatalf("etag of a loaded record without one = %q, want %q", got, etag)
	}
}

func TestDeleteWithAStaleEtagIsAborted(t *testing.T) {
	t.Parallel()
	s := running(t)
	stale := cluster(s).GetEtag()
	c := proto.Clone(cluster(s)).(*loomv1.Cluster)
	c.Description = "kept for the vision team"
	apply(s, s.UpdateCluster(p, &eventsv1.UpdateCluster{Operation: "up", Cluster: c, UpdateMask: []string{"description"}}, t0.Add(time.Hour)))
	before := proto.Clone(cluster(s)).(*loomv1.Cluster)

	f := onlyFailure(t, s.DeleteCluster(&eventsv1.DeleteCluster{Operation: "del1", Cluster: demo, Etag: stale}, t0.Add(2*time.Hour)))
	if codes.Code(f.Code) != codes.Aborted || !strings.Contains(f.Message, stale) || !strings.Contains(f.Message, before.GetEtag()) {
		t.Fatalf("delete with a stale etag = %v, want ABORTED naming both etags", f)
	}
	if !proto.Equal(before, cluster(s)) {
		t.Fatal("a refused delete changed the cluster")
	}
	ch := apply(s, s.DeleteCluster(&eventsv1.DeleteCluster{Operation: "del2", Cluster: demo, Etag: before.GetEtag()}, t0.Add(2*time.Hour)))
	if cc := clusterChanged(t, ch); cc == nil || cc.Cluster.GetStatus().GetState() != loomv1.Cluster_DELETING {
		t.Fatalf("delete with the current etag = %v, want DELETING", ch.Events)
	}
}
