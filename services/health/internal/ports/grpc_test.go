package ports

import (
	"context"
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/loom-ml/loom/libs/errs"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

type lister []*loomv1.NodeHealth

func (l lister) ListNodeHealth(cluster string) []*loomv1.NodeHealth {
	var out []*loomv1.NodeHealth
	for _, n := range l {
		if n.GetCluster() == cluster {
			out = append(out, n)
		}
	}
	return out
}

type results struct {
	got *loomv1.ListHealthResultsRequest
}

func (r *results) ListHealthResults(_ context.Context, req *loomv1.ListHealthResultsRequest) (*loomv1.ListHealthResultsResponse, error) {
	r.got = req
	return &loomv1.ListHealthResultsResponse{Results: []*loomv1.HealthCheckResult{{Name: "r1"}}}, nil
}

func (r *results) GetHealthScan(_ context.Context, req *loomv1.GetHealthScanRequest) (*loomv1.HealthScan, error) {
	return &loomv1.HealthScan{Cluster: req.GetCluster(), ScanId: req.GetScanId(), Done: true}, nil
}

func (r *results) ListHealthScans(_ context.Context, req *loomv1.ListHealthScansRequest) (*loomv1.ListHealthScansResponse, error) {
	return &loomv1.ListHealthScansResponse{Scans: []*loomv1.HealthScan{{Cluster: req.GetCluster(), ScanId: "s1"}}}, nil
}

func TestListNodeHealthPages(t *testing.T) {
	t.Parallel()
	const c = "projects/p/clusters/c"
	nodes := lister{{Node: c + "/nodes/b", Cluster: c}, {Node: c + "/nodes/a", Cluster: c}, {Node: c + "/nodes/c", Cluster: c},
		{Node: "projects/p/clusters/d/nodes/x", Cluster: "projects/p/clusters/d"}}
	s := NewHealthServer(nodes, nil, nil)
	ctx := context.Background()
	var got []string
	token := ""
	for {
		resp, err := s.ListNodeHealth(ctx, &loomv1.ListNodeHealthRequest{Cluster: c, PageSize: 2, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range resp.GetNodes() {
			got = append(got, n.GetNode())
		}
		if token = resp.GetNextPageToken(); token == "" {
			break
		}
	}
	if len(got) != 3 || got[0] != c+"/nodes/a" || got[2] != c+"/nodes/c" {
		t.Fatalf("pages: %v", got)
	}
	// hostnames keeps those nodes only (the gateway expanded them).
	for i := range nodes {
		nodes[i].Hostname = nodes[i].GetNode()[len(nodes[i].GetNode())-1:]
	}
	byHost, err := s.ListNodeHealth(ctx, &loomv1.ListNodeHealthRequest{Cluster: c, Hostnames: []string{"c", "a", "x"}})
	if err != nil || len(byHost.GetNodes()) != 2 || byHost.GetNodes()[0].GetHostname() != "a" || byHost.GetNodes()[1].GetHostname() != "c" {
		t.Fatalf("hostnames a, c (and x, of another cluster): %v %v", byHost.GetNodes(), err)
	}
	var inv *errs.InvalidError
	if _, err := s.ListNodeHealth(ctx, &loomv1.ListNodeHealthRequest{}); !errors.As(err, &inv) {
		t.Fatalf("no cluster: %v", err)
	}
	if _, err := s.ListHealthResults(ctx, &loomv1.ListHealthResultsRequest{Cluster: c}); status.Code(err) != codes.Unimplemented {
		t.Fatalf("no result store: %v", err)
	}
	r := &results{}
	resp, err := NewHealthServer(nodes, r, nil).ListHealthResults(ctx, &loomv1.ListHealthResultsRequest{Cluster: c, Check: "disk"})
	if err != nil || len(resp.GetResults()) != 1 || r.got.GetCheck() != "disk" {
		t.Fatalf("delegated: %v %v %v", resp, err, r.got)
	}
	// GetHealthScan: delegated; both names required; Unimplemented with
	// no store.
	if sc, err := NewHealthServer(nodes, r, nil).GetHealthScan(ctx, &loomv1.GetHealthScanRequest{Cluster: c, ScanId: "s1"}); err != nil || sc.GetScanId() != "s1" || !sc.GetDone() {
		t.Fatalf("GetHealthScan delegated: %v %v", sc, err)
	}
	if _, err := NewHealthServer(nodes, r, nil).GetHealthScan(ctx, &loomv1.GetHealthScanRequest{Cluster: c}); !errors.As(err, &inv) {
		t.Fatalf("GetHealthScan without scan_id: %v", err)
	}
	if _, err := s.GetHealthScan(ctx, &loomv1.GetHealthScanRequest{Cluster: c, ScanId: "s1"}); status.Code(err) != codes.Unimplemented {
		t.Fatalf("GetHealthScan with no store: %v", err)
	}
	// ListHealthScans: delegated; Unimplemented with no store.
	if l, err := NewHealthServer(nodes, r, nil).ListHealthScans(ctx, &loomv1.ListHealthScansRequest{Cluster: c}); err != nil || len(l.GetScans()) != 1 || l.GetScans()[0].GetCluster() != c {
		t.Fatalf("ListHealthScans delegated: %v %v", l, err)
	}
	if _, err := s.ListHealthScans(ctx, &loomv1.ListHealthScansRequest{Cluster: c}); status.Code(err) != codes.Unimplemented {
		t.Fatalf("ListHealthScans with no store: %v", err)
	}
}

type policy struct{ asked string }

func (p *policy) HealthPolicy(cluster string) *loomv1.HealthPolicy {
	p.asked = cluster
	return &loomv1.HealthPolicy{Cluster: cluster, Remediation: "on"}
}

// TestGetHealthPolicy: the reader's policy for the cluster asked; no
// cluster is InvalidArgument, no reader Unimplemented.
func TestGetHealthPolicy(t *testing.T) {
	t.Parallel()
	const c = "projects/p/clusters/c"
	ctx := context.Background()
	p := &policy{}
	got, err := NewHealthServer(lister{}, nil, p).GetHealthPolicy(ctx, &loomv1.GetHealthPolicyRequest{Cluster: c})
	if err != nil || got.GetCluster() != c || got.GetRemediation() != "on" || p.asked != c {
		t.Fatalf("GetHealthPolicy: %v %v (asked %q)", got, err, p.asked)
	}
	var inv *errs.InvalidError
	if _, err := NewHealthServer(lister{}, nil, p).GetHealthPolicy(ctx, &loomv1.GetHealthPolicyRequest{}); !errors.As(err, &inv) {
		t.Errorf("no cluster: %v", err)
	}
	if _, err := NewHealthServer(lister{}, nil, nil).GetHealthPolicy(ctx, &loomv1.GetHealthPolicyRequest{Cluster: c}); status.Code(err) != codes.Unimplemented {
		t.Errorf("no policy reader: %v", err)
	}
}

// eventLister is a lister that also lists events (ports.EventLister).
type eventLister struct {
	lister
	events []*loomv1.NodeHealthEvent
	ids    []string
}

func (l eventLister) NodeHealthEvents(_ context.Context, cluster string) ([]*loomv1.NodeHealthEvent, []string, error) {
	return l.events, l.ids, nil
}

// Events come newest first, a page at a time, filtered by hostname; a
// stream id with more digits is newer, not smaller.
func TestListNodeHealthEventsPages(t *testing.T) {
	t.Parallel()
	const c = "projects/p/clusters/c"
	ev := func(host, reason string) *loomv1.NodeHealthEvent {
		return &loomv1.NodeHealthEvent{Node: c + "/nodes/" + host, Hostname: host, Reason: reason}
	}
	l := eventLister{
		events: []*loomv1.NodeHealthEvent{ev("a", "4"), ev("b", "3"), ev("a", "2"), ev("a", "1")},
		ids:    []string{"10000-0", "9999-1", "9999-0", "999-5"},
	}
	s := NewHealthServer(l, nil, nil)
	ctx := context.Background()
	var got []string
	token := ""
	for {
		resp, err := s.ListNodeHealthEvents(ctx, &loomv1.ListNodeHealthEventsRequest{Cluster: c, Hostnames: []string{"a"}, PageSize: 1, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range resp.GetEvents() {
			got = append(got, e.GetReason())
		}
		if token = resp.GetNextPageToken(); token == "" {
			break
		}
	}
	if strings.Join(got, ",") != "4,2,1" {
		t.Fatalf("a's events %v, want 4,2,1 (newest first)", got)
	}
	if _, err := s.ListNodeHealthEvents(ctx, &loomv1.ListNodeHealthEventsRequest{}); err == nil {
		t.Fatal("no cluster: accepted")
	}
	if _, err := NewHealthServer(lister{}, nil, nil).ListNodeHealthEvents(ctx, &loomv1.ListNodeHealthEventsRequest{Cluster: c}); status.Code(err) != codes.Unimplemented {
		t.Fatalf("a lister without events: %v, want Unimplemented", err)
	}
}
