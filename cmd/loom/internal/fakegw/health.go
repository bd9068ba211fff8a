package fakegw

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/clusterspec"
	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/hostlist"
	"github.com/loom-ml/loom/libs/paging"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// HealthService and GoodputService, over Gateway's NodeHealth,
// HealthResults, ScanOutcomes and Goodputs. Writes are recorded (Requests)
// and answered as the gateway answers them; they change nothing but the
// scans' results.

// clusterNode is the node hostname of cluster among g.Nodes (else its
// Slurm nodes); the caller holds g.mu.
func (g *Gateway) clusterNode(cluster, hostname string) *loomv1.Node {
	for _, n := range g.Nodes {
		if n.GetCluster() == cluster && n.GetHostname() == hostname {
			return n
		}
	}
	// A fixture of Slurm nodes only (the Slurm commands' tests): those are
	// the cluster's nodes too.
	for _, n := range g.slurmNodes(cluster) {
		if n.GetHostname() == hostname {
			return &loomv1.Node{Name: cluster + "/nodes/" + hostname, Cluster: cluster, Hostname: hostname, Gpus: n.GetGpus()}
		}
	}
	return nil
}

// checkHosts expands hostlists and refuses names that are not nodes of
// cluster (InvalidArgument naming the entry, as the gateway does); the
// caller holds g.mu.
func (g *Gateway) checkHosts(cluster string, exprs []string) ([]string, error) {
	return expandHosts(exprs, func(host string) error {
		if g.clusterNode(cluster, host) == nil {
			return fmt.Errorf("%s is not a node of %s", host, cluster)
		}
		return nil
	})
}

// expandHosts expands hostlists, each host once, in order, refusing one
// that check (when not nil) refuses: InvalidArgument naming its entry, as
// the gateway's.
func expandHosts(exprs []string, check func(host string) error) ([]string, error) {
	var out []string
	for i, e := range exprs {
		names, err := hostlist.Expand(e)
		for _, n := range names {
			if err == nil && check != nil {
				err = check(n)
			}
			if err == nil && !slices.Contains(out, n) {
				out = append(out, n)
			}
		}
		if err != nil {
			return nil, errs.ToStatus(errs.Invalid(fmt.Sprintf("hostnames[%d]", i), "%v", err))
		}
	}
	return out, nil
}

// ScanNodes answers a scan id "scan-N" and the nodes asked for (every
// compute node of the cluster when none). The scan's results (one per node
// and check, default gpu_diag and disk; outcome from ScanOutcomes, PASS
// when absent) are released one per ListHealthResults call that asks for
// the scan, so that a waiting client sees them come.
func (g *Gateway) ScanNodes(_ context.Context, r *loomv1.ScanNodesRequest) (*loomv1.ScanNodesResponse, error) {
	defer g.lock(r)()
	if g.cluster(r.GetCluster()) == nil {
		return nil, clusterNotFound(r.GetCluster())
	}
	hosts, err := g.checkHosts(r.GetCluster(), r.GetHostnames())
	if err != nil {
		return nil, err
	}
	if len(hosts) == 0 {
		for _, n := range g.Nodes {
			if n.GetCluster() == r.GetCluster() && n.GetRole() != clusterspec.RoleLogin {
				hosts = append(hosts, n.GetHostname())
			}
		}
	}
	g.scans++
	id := fmt.Sprintf("scan-%d", g.scans)
	checks := r.GetChecks()
	if len(checks) == 0 {
		checks = []string{"gpu_diag", "disk"}
	}
	for _, h := range hosts {
		for _, c := range checks {
			o := g.ScanOutcomes[h]
			if o == loomv1.CheckOutcome_CHECK_OUTCOME_UNSPECIFIED {
				o = loomv1.CheckOutcome_CHECK_PASS
			}
			summary := "ok"
			if o == loomv1.CheckOutcome_CHECK_FAIL {
				summary = c + " failed on " + h
			}
			level := int32(0)
			if c == "gpu_diag" {
				level = max(r.GetLevel(), 1)
			}
			g.pendingResults = append(g.pendingResults, &loomv1.HealthCheckResult{
				Name: fmt.Sprintf("%s/healthResults/%s-%s-%s", r.GetCluster(), id, h, c), Hostname: h, Check: c, Level: level,
				Outcome: o, Summary: summary, Trigger: "scan", ScanId: id, Gpu: -1,
				StartTime: Ago(0), EndTime: Ago(0),
			})
		}
	}
	return &loomv1.ScanNodesResponse{ScanId: id, Hostnames: hosts}, nil
}

// GetHealthScan is a scan's progress from the results of that scan
// (HealthResults, done; pending results count as checks not answered);
// NotFound for a scan with neither.
func (g *Gateway) GetHealthScan(_ context.Context, r *loomv1.GetHealthScanRequest) (*loomv1.HealthScan, error) {
	defer g.lock(r)()
	if g.NoScanProgress {
		return nil, status.Error(codes.Unimplemented, "unknown method GetHealthScan")
	}
	if g.cluster(r.GetCluster()) == nil {
		return nil, clusterNotFound(r.GetCluster())
	}
	sc := g.scanProgress(r.GetCluster(), r.GetScanId())
	if sc.Checks == 0 {
		return nil, status.Errorf(codes.NotFound, "scan %s of %s: not found", r.GetScanId(), r.GetCluster())
	}
	return sc, nil
}

// ListHealthScans pages the scans that HealthResults and the pending
// results name, newest first (by their first result's end).
func (g *Gateway) ListHealthScans(_ context.Context, r *loomv1.ListHealthScansRequest) (*loomv1.ListHealthScansResponse, error) {
	defer g.lock(r)()
	if g.cluster(r.GetCluster()) == nil {
		return nil, clusterNotFound(r.GetCluster())
	}
	seen := map[string]bool{}
	var out []*loomv1.HealthScan
	for _, res := range slices.Concat(g.HealthResults, g.pendingResults) {
		if id := res.GetScanId(); id != "" && !seen[id] && strings.HasPrefix(res.GetName(), r.GetCluster()+"/") {
			seen[id] = true
			out = append(out, g.scanProgress(r.GetCluster(), id))
		}
	}
	slices.SortStableFunc(out, func(a, b *loomv1.HealthScan) int {
		return b.GetStartTime().AsTime().Compare(a.GetStartTime().AsTime())
	})
	page, next, err := paging.Ordered(r, out)
	if err != nil {
		return nil, errs.ToStatus(err)
	}
	return &loomv1.ListHealthScansResponse{Scans: page, NextPageToken: next}, nil
}

// scanProgress counts scan id's results of cluster; g is locked.
func (g *Gateway) scanProgress(cluster, id string) *loomv1.HealthScan {
	sc := &loomv1.HealthScan{Cluster: cluster, ScanId: id, Trigger: "scan", Done: true}
	for _, res := range g.HealthResults {
		if res.GetScanId() != id || !strings.HasPrefix(res.GetName(), cluster+"/") {
			continue
		}
		sc.Checks++
		sc.Answered++
		sc.Hostnames = append(sc.Hostnames, res.GetHostname())
		if sc.StartTime == nil || res.GetEndTime().AsTime().Before(sc.GetStartTime().AsTime()) {
			sc.StartTime = res.GetEndTime()
		}
		switch res.GetOutcome() {
		case loomv1.CheckOutcome_CHECK_PASS:
			sc.Passed++
		case loomv1.CheckOutcome_CHECK_WARN:
			sc.Warned++
		case loomv1.CheckOutcome_CHECK_FAIL:
			sc.Failed++
		case loomv1.CheckOutcome_CHECK_SKIPPED:
			sc.Skipped++
		default:
			sc.Errored++
		}
	}
	for _, p := range g.pendingResults {
		if p.GetScanId() == id && strings.HasPrefix(p.GetName(), cluster+"/") {
			sc.Checks++
			sc.Done = false
			sc.Hostnames = append(sc.Hostnames, p.GetHostname())
			if sc.StartTime == nil {
				sc.StartTime = p.GetStartTime()
			}
		}
	}
	slices.Sort(sc.Hostnames)
	sc.Hostnames = slices.Compact(sc.Hostnames)
	return sc
}

// ListHealthResults pages HealthResults of the cluster (newest first, as
// given), filtered by node, check and scan.
func (g *Gateway) ListHealthResults(_ context.Context, r *loomv1.ListHealthResultsRequest) (*loomv1.ListHealthResultsResponse, error) {
	defer g.lock(r)()
	if g.cluster(r.GetCluster()) == nil {
		return nil, clusterNotFound(r.GetCluster())
	}
	if r.GetScanId() != "" {
		for i, p := range g.pendingResults {
			if p.GetScanId() == r.GetScanId() {
				g.HealthResults = append(g.HealthResults, p)
				g.pendingResults = slices.Delete(g.pendingResults, i, i+1)
				break
			}
		}
	}
	var out []*loomv1.HealthCheckResult
	for _, res := range g.HealthResults {
		if !strings.HasPrefix(res.GetName(), r.GetCluster()+"/") ||
			(r.GetHostname() != "" && res.GetHostname() != r.GetHostname()) ||
			(r.GetCheck() != "" && res.GetCheck() != r.GetCheck()) ||
			(r.GetScanId() != "" && res.GetScanId() != r.GetScanId()) {
			continue
		}
		out = append(out, res)
	}
	page, next, err := paging.Ordered(r, out)
	if err != nil {
		return nil, errs.ToStatus(err)
	}
	return &loomv1.ListHealthResultsResponse{Results: page, NextPageToken: next}, nil
}

// ListNodeHealth pages NodeHealth of the cluster, in the order given.
func (g *Gateway) ListNodeHealth(_ context.Context, r *loomv1.ListNodeHealthRequest) (*loomv1.ListNodeHealthResponse, error) {
	defer g.lock(r)()
	if g.NodeHealthErr != nil {
		return nil, g.NodeHealthErr
	}
	if g.cluster(r.GetCluster()) == nil {
		return nil, clusterNotFound(r.GetCluster())
	}
	// As the gateway: expanded, not checked against the cluster's nodes
	// (one that is none has no health).
	hosts, err := expandHosts(r.GetHostnames(), nil)
	if err != nil {
		return nil, err
	}
	var out []*loomv1.NodeHealth
	for _, n := range g.NodeHealth {
		if n.GetCluster() == r.GetCluster() && (len(hosts) == 0 || slices.Contains(hosts, n.GetHostname())) {
			out = append(out, n)
		}
	}
	page, next, err := paging.Ordered(r, out)
	if err != nil {
		return nil, errs.ToStatus(err)
	}
	return &loomv1.ListNodeHealthResponse{Nodes: page, NextPageToken: next}, nil
}

// ListNodeHealthEvents pages the cluster's NodeHealthEvents, in the order
// given (newest first), filtered by hostnames as the gateway expands them.
func (g *Gateway) ListNodeHealthEvents(_ context.Context, r *loomv1.ListNodeHealthEventsRequest) (*loomv1.ListNodeHealthEventsResponse, error) {
	defer g.lock(r)()
	if g.cluster(r.GetCluster()) == nil {
		return nil, clusterNotFound(r.GetCluster())
	}
	hosts, err := expandHosts(r.GetHostnames(), nil)
	if err != nil {
		return nil, err
	}
	var out []*loomv1.NodeHealthEvent
	for _, e := range g.NodeHealthEvents {
		if strings.HasPrefix(e.GetNode(), r.GetCluster()+"/") && (len(hosts) == 0 || slices.Contains(hosts, e.GetHostname())) {
			out = append(out, e)
		}
	}
	page, next, err := paging.Ordered(r, out)
	if err != nil {
		return nil, errs.ToStatus(err)
	}
	return &loomv1.ListNodeHealthEventsResponse{Events: page, NextPageToken: next}, nil
}

// ReportFaultyNodes checks the nodes and the reason, as the gateway does.
func (g *Gateway) ReportFaultyNodes(_ context.Context, r *loomv1.ReportFaultyNodesRequest) (*loomv1.ReportFaultyNodesResponse, error) {
	defer g.lock(r)()
	if g.cluster(r.GetCluster()) == nil {
		return nil, clusterNotFound(r.GetCluster())
	}
	if strings.TrimSpace(r.GetReason()) == "" {
		return nil, errs.ToStatus(errs.Invalid("reason", "required"))
	}
	hosts, err := g.checkHosts(r.GetCluster(), r.GetHostnames())
	if err != nil {
		return nil, err
	}
	return &loomv1.ReportFaultyNodesResponse{Hostnames: hosts}, nil
}

// nodeHealth is NodeHealth's entry for the node; the caller holds g.mu.
func (g *Gateway) nodeHealth(cluster, hostname string) *loomv1.NodeHealth {
	for _, n := range g.NodeHealth {
		if n.GetCluster() == cluster && n.GetHostname() == hostname {
			return n
		}
	}
	return nil
}

// UpdateNodeRemediation answers the node's NodeHealth (or a new one) with
// the action as its next_action and the caller "root" as set_by.
func (g *Gateway) UpdateNodeRemediation(_ context.Context, r *loomv1.UpdateNodeRemediationRequest) (*loomv1.NodeHealth, error) {
	defer g.lock(r)()
	n := g.clusterNode(r.GetCluster(), r.GetHostname())
	if n == nil {
		return nil, status.Errorf(codes.NotFound, "node %s in %s: not found", r.GetHostname(), r.GetCluster())
	}
	nh := &loomv1.NodeHealth{Node: n.GetName(), Hostname: n.GetHostname(), Cluster: r.GetCluster(), State: loomv1.RemediationState_NODE_HEALTHY}
	if cur := g.nodeHealth(r.GetCluster(), r.GetHostname()); cur != nil {
		nh = proto.Clone(cur).(*loomv1.NodeHealth)
	}
	nh.NextAction, nh.SetBy, nh.Reason = r.GetAction(), "root", r.GetReason()
	return nh, nil
}

// InjectFault refuses a node NodeHealth says has real GPUs
// (FailedPrecondition), and echoes the fault.
func (g *Gateway) InjectFault(_ context.Context, r *loomv1.InjectFaultRequest) (*loomv1.InjectFaultResponse, error) {
	defer g.lock(r)()
	if g.clusterNode(r.GetCluster(), r.GetHostname()) == nil {
		if g.cluster(r.GetCluster()) == nil && !slices.ContainsFunc(g.Nodes, func(n *loomv1.Node) bool { return n.GetCluster() == r.GetCluster() }) &&
			len(g.slurmNodes(r.GetCluster())) == 0 {
			return nil, clusterNotFound(r.GetCluster()) // as the gateway answers for a cluster it does not have
		}
		return nil, status.Errorf(codes.NotFound, "node %s in %s: not found", r.GetHostname(), r.GetCluster())
	}
	if nh := g.nodeHealth(r.GetCluster(), r.GetHostname()); nh != nil && len(nh.GetGpus()) > 0 && !nh.GetSimulated() {
		return nil, status.Errorf(codes.FailedPrecondition, "node %s has real GPUs: faults are injected only into simulated ones", r.GetHostname())
	}
	return &loomv1.InjectFaultResponse{Hostname: r.GetHostname(), Fault: r.GetFault()}, nil
}

// GetHealthPolicy answers HealthPolicies[cluster], NotFound when absent.
func (g *Gateway) GetHealthPolicy(_ context.Context, r *loomv1.GetHealthPolicyRequest) (*loomv1.HealthPolicy, error) {
	defer g.lock(r)()
	if p, ok := g.HealthPolicies[r.GetCluster()]; ok {
		return p, nil
	}
	return nil, clusterNotFound(r.GetCluster())
}

// GetJobGoodput answers Goodputs[name], NotFound when absent.
func (g *Gateway) GetJobGoodput(_ context.Context, r *loomv1.GetJobGoodputRequest) (*loomv1.Goodput, error) {
	defer g.lock(r)()
	if gp, ok := g.Goodputs[r.GetName()]; ok {
		return gp, nil
	}
	return nil, jobNotFound(r.GetName())
}

// GetClusterGoodput answers Goodputs[name], NotFound when absent.
func (g *Gateway) GetClusterGoodput(_ context.Context, r *loomv1.GetClusterGoodputRequest) (*loomv1.Goodput, error) {
	defer g.lock(r)()
	if gp, ok := g.Goodputs[r.GetName()]; ok {
		return gp, nil
	}
	return nil, clusterNotFound(r.GetName())
}
