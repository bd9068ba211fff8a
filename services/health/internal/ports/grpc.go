package ports

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/paging"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// NodeHealthLister lists health's view of a cluster's nodes (the app).
type NodeHealthLister interface {
	ListNodeHealth(cluster string) []*loomv1.NodeHealth
}

// EventLister lists a cluster's node health events, newest first, with
// each one's stream id (ids[i] is events[i]'s; a newer event's id sorts
// after an older one's as <milliseconds>-<sequence> numbers). The app is
// one; ListNodeHealthEvents is Unimplemented for a lister that is not.
type EventLister interface {
	NodeHealthEvents(ctx context.Context, cluster string) (events []*loomv1.NodeHealthEvent, ids []string, err error)
}

// PolicyReader reads the policy health applies to a cluster's nodes.
type PolicyReader interface {
	HealthPolicy(cluster string) *loomv1.HealthPolicy
}

// ResultLister lists stored check results and reads scans' progress (the
// scan orchestration's store).
type ResultLister interface {
	ListHealthResults(ctx context.Context, req *loomv1.ListHealthResultsRequest) (*loomv1.ListHealthResultsResponse, error)
	GetHealthScan(ctx context.Context, req *loomv1.GetHealthScanRequest) (*loomv1.HealthScan, error)
	ListHealthScans(ctx context.Context, req *loomv1.ListHealthScansRequest) (*loomv1.ListHealthScansResponse, error)
}

// HealthServer serves loom.v1.HealthService's reads on health's internal
// gRPC: ListNodeHealth from the app, ListHealthResults from a ResultLister
// (Unimplemented while there is none). The writes are the gateway's (they
// become commands on loom.health.commands.v1) and are Unimplemented here.
type HealthServer struct {
	loomv1.UnimplementedHealthServiceServer
	nodes   NodeHealthLister
	results ResultLister
	policy  PolicyReader
}

// NewHealthServer returns the server over nodes, results and policy
// (results and policy may be nil: their RPCs are then Unimplemented).
func NewHealthServer(nodes NodeHealthLister, results ResultLister, policy PolicyReader) *HealthServer {
	return &HealthServer{nodes: nodes, results: results, policy: policy}
}

// GetHealthPolicy returns the policy health applies to the cluster's nodes.
func (s *HealthServer) GetHealthPolicy(_ context.Context, req *loomv1.GetHealthPolicyRequest) (*loomv1.HealthPolicy, error) {
	if req.GetCluster() == "" {
		return nil, errs.Invalid("cluster", "required")
	}
	if s.policy == nil {
		return nil, status.Error(codes.Unimplemented, "this health service does not say its policy")
	}
	return s.policy.HealthPolicy(req.GetCluster()), nil
}

// ListNodeHealth lists each node of the cluster (those of hostnames, when
// given: the gateway expands them) with its health and remediation
// state, by node name, one page at a time.
func (s *HealthServer) ListNodeHealth(_ context.Context, req *loomv1.ListNodeHealthRequest) (*loomv1.ListNodeHealthResponse, error) {
	if req.GetCluster() == "" {
		return nil, errs.Invalid("cluster", "required")
	}
	nodes := ofHosts(s.nodes.ListNodeHealth(req.GetCluster()), req.GetHostnames())
	page, next, err := paging.List(req, nodes, func(n *loomv1.NodeHealth) string { return n.GetNode() })
	if err != nil {
		return nil, err
	}
	return &loomv1.ListNodeHealthResponse{Nodes: page, NextPageToken: next}, nil
}

// ListNodeHealthEvents lists the cluster's node health events (those of
// hostnames, when given: the gateway expands them), newest first, one page
// at a time.
func (s *HealthServer) ListNodeHealthEvents(ctx context.Context, req *loomv1.ListNodeHealthEventsRequest) (*loomv1.ListNodeHealthEventsResponse, error) {
	if req.GetCluster() == "" {
		return nil, errs.Invalid("cluster", "required")
	}
	el, ok := s.nodes.(EventLister)
	if !ok {
		return nil, status.Error(codes.Unimplemented, "node health events are not kept by this health service")
	}
	events, ids, err := el.NodeHealthEvents(ctx, req.GetCluster())
	if err != nil {
		return nil, err
	}
	keys := make(map[*loomv1.NodeHealthEvent]string, len(events))
	for i, e := range events {
		keys[e] = newestFirst(ids[i])
	}
	kept := ofHosts(events, req.GetHostnames())
	page, next, err := paging.List(req, kept, func(e *loomv1.NodeHealthEvent) string { return keys[e] })
	if err != nil {
		return nil, err
	}
	return &loomv1.ListNodeHealthEventsResponse{Events: page, NextPageToken: next}, nil
}

// ofHosts keeps the items of the hostnames given (all when none); it
// filters into a new slice, leaving items as they are.
func ofHosts[T interface{ GetHostname() string }](items []T, hostnames []string) []T {
	if len(hostnames) == 0 {
		return items
	}
	want := make(map[string]bool, len(hostnames))
	for _, h := range hostnames {
		want[h] = true
	}
	var kept []T
	for _, it := range items {
		if want[it.GetHostname()] {
			kept = append(kept, it)
		}
	}
	return kept
}

// newestFirst is a key that sorts stream ids ("<ms>-<seq>") newest first.
func newestFirst(id string) string {
	ms, seq, _ := strings.Cut(id, "-")
	a, _ := strconv.ParseUint(ms, 10, 64)
	b, _ := strconv.ParseUint(seq, 10, 64)
	return fmt.Sprintf("%020d-%020d", math.MaxUint64-a, math.MaxUint64-b)
}

// GetHealthScan delegates to the ResultLister.
func (s *HealthServer) GetHealthScan(ctx context.Context, req *loomv1.GetHealthScanRequest) (*loomv1.HealthScan, error) {
	if s.results == nil {
		return nil, status.Error(codes.Unimplemented, "scans are not kept by this health service")
	}
	if req.GetCluster() == "" || req.GetScanId() == "" {
		return nil, errs.Invalid("scan_id", "cluster and scan_id are required")
	}
	return s.results.GetHealthScan(ctx, req)
}

// ListHealthScans delegates to the ResultLister.
func (s *HealthServer) ListHealthScans(ctx context.Context, req *loomv1.ListHealthScansRequest) (*loomv1.ListHealthScansResponse, error) {
	if s.results == nil {
		return nil, status.Error(codes.Unimplemented, "scans are not kept by this health service")
	}
	return s.results.ListHealthScans(ctx, req)
}

// ListHealthResults delegates to the ResultLister.
func (s *HealthServer) ListHealthResults(ctx context.Context, req *loomv1.ListHealthResultsRequest) (*loomv1.ListHealthResultsResponse, error) {
	if s.results == nil {
		return nil, status.Error(codes.Unimplemented, "health results are not kept by this health service")
	}
	return s.results.ListHealthResults(ctx, req)
}
