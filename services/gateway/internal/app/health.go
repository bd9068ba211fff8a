package app

import (
	"context"
	"fmt"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/clusterspec"
	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/paging"
	"github.com/loom-ml/loom/libs/resname"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/gateway/internal/domain"
)

// Hardware resilience (HealthService, GoodputService): reads go to the
// health service's and the scheduler's internal gRPC; writes are
// validated here (every field, the nodes against the provisioner's) and
// become commands on loom.health.commands.v1 with the caller's principal.

// health is the health service's client, or an Unavailable error when the
// gateway was started without one.
func (g *Gateway) health() (loomv1.HealthServiceClient, error) {
	if g.own.Health == nil {
		return nil, fmt.Errorf("the gateway has no health service to ask (-health-addr): %w", errs.Unavailable)
	}
	return g.own.Health, nil
}

// fromHealth names the health service in an error it answered with, keeping
// its code (the CLI tells "cannot reach the gateway" from "the gateway
// cannot reach health" by the message).
func fromHealth(what string, err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return fmt.Errorf("%s: %w", what, err)
	}
	switch st.Code() {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Unimplemented:
		return status.Errorf(st.Code(), "%s: the health service did not answer (%s); check that it runs and that the gateway's -health-addr points at it", what, st.Message())
	}
	return err
}

// ListNodeHealth lists each node's health and remediation state, from the
// health service.
func (g *Gateway) ListNodeHealth(ctx context.Context, req *loomv1.ListNodeHealthRequest) (*loomv1.ListNodeHealthResponse, error) {
	hosts, err := checkNodeList(req.GetCluster(), req.GetPageSize(), req.GetHostnames())
	if err != nil {
		return nil, err
	}
	h, err := g.health()
	if err != nil {
		return nil, err
	}
	// Health filters on hostnames; it gets them expanded.
	if len(hosts) > 0 {
		req = proto.CloneOf(req)
		req.Hostnames = hosts
	}
	resp, err := h.ListNodeHealth(ctx, req)
	if err != nil {
		return nil, fromHealth("list node health of "+req.GetCluster(), err)
	}
	if err := g.emptyOrNotFound(ctx, req.GetCluster(), len(resp.GetNodes()) == 0, req.GetPageToken()); err != nil {
		return nil, err
	}
	return resp, nil
}

// checkNodeList checks a health list's cluster, page size and hostnames
// and returns the hostnames expanded (health filters on names, not
// hostlists).
func checkNodeList(cluster string, pageSize int32, hostnames []string) ([]string, error) {
	var v errs.Validator
	domain.CheckCluster(&v, "cluster", cluster)
	paging.CheckSize(&v, pageSize)
	hosts := domain.ExpandHostnames(&v, "hostnames", hostnames)
	return hosts, v.Err()
}

// ListNodeHealthEvents lists what health decided about the cluster's
// nodes, newest first, from the health service.
func (g *Gateway) ListNodeHealthEvents(ctx context.Context, req *loomv1.ListNodeHealthEventsRequest) (*loomv1.ListNodeHealthEventsResponse, error) {
	hosts, err := checkNodeList(req.GetCluster(), req.GetPageSize(), req.GetHostnames())
	if err != nil {
		return nil, err
	}
	h, err := g.health()
	if err != nil {
		return nil, err
	}
	if len(hosts) > 0 {
		req = proto.CloneOf(req)
		req.Hostnames = hosts
	}
	resp, err := h.ListNodeHealthEvents(ctx, req)
	if err != nil {
		return nil, fromHealth("list node health events of "+req.GetCluster(), err)
	}
	if err := g.emptyOrNotFound(ctx, req.GetCluster(), len(resp.GetEvents()) == 0, req.GetPageToken()); err != nil {
		return nil, err
	}
	return resp, nil
}

// GetHealthPolicy returns the policy health applies to the cluster's nodes,
// from the health service.
func (g *Gateway) GetHealthPolicy(ctx context.Context, req *loomv1.GetHealthPolicyRequest) (*loomv1.HealthPolicy, error) {
	var v errs.Validator
	domain.CheckCluster(&v, "cluster", req.GetCluster())
	if err := v.Err(); err != nil {
		return nil, err
	}
	if err := g.clusterExists(ctx, req.GetCluster()); err != nil {
		return nil, err
	}
	h, err := g.health()
	if err != nil {
		return nil, err
	}
	p, err := h.GetHealthPolicy(ctx, req)
	if err != nil {
		return nil, fromHealth("get the health policy of "+req.GetCluster(), err)
	}
	return p, nil
}

// ListHealthResults lists stored check results, newest first, from the
// health service.
func (g *Gateway) ListHealthResults(ctx context.Context, req *loomv1.ListHealthResultsRequest) (*loomv1.ListHealthResultsResponse, error) {
	if err := domain.ValidateListHealthResults(req); err != nil {
		return nil, err
	}
	h, err := g.health()
	if err != nil {
		return nil, err
	}
	resp, err := h.ListHealthResults(ctx, req)
	if err != nil {
		return nil, fromHealth("list health results of "+req.GetCluster(), err)
	}
	if err := g.emptyOrNotFound(ctx, req.GetCluster(), len(resp.GetResults()) == 0, req.GetPageToken()); err != nil {
		return nil, err
	}
	return resp, nil
}

// GetHealthScan reads a scan's progress from the health service.
func (g *Gateway) GetHealthScan(ctx context.Context, req *loomv1.GetHealthScanRequest) (*loomv1.HealthScan, error) {
	if err := domain.ValidateGetHealthScan(req); err != nil {
		return nil, err
	}
	h, err := g.health()
	if err != nil {
		return nil, err
	}
	sc, err := h.GetHealthScan(ctx, req)
	if err != nil {
		err = fromHealth("get scan "+req.GetScanId()+" of "+req.GetCluster(), err)
		if isNotFound(err) {
			// A mistyped cluster says so, not that its scan is gone.
			if cerr := g.clusterExists(ctx, req.GetCluster()); cerr != nil {
				return nil, cerr
			}
		}
		return nil, err
	}
	return sc, nil
}

// ListHealthScans lists the cluster's scans health still keeps, newest
// first, from the health service.
func (g *Gateway) ListHealthScans(ctx context.Context, req *loomv1.ListHealthScansRequest) (*loomv1.ListHealthScansResponse, error) {
	if err := domain.ValidateListHealthScans(req); err != nil {
		return nil, err
	}
	h, err := g.health()
	if err != nil {
		return nil, err
	}
	resp, err := h.ListHealthScans(ctx, req)
	if err != nil {
		return nil, fromHealth("list health scans of "+req.GetCluster(), err)
	}
	if err := g.emptyOrNotFound(ctx, req.GetCluster(), len(resp.GetScans()) == 0, req.GetPageToken()); err != nil {
		return nil, err
	}
	return resp, nil
}

// clusterExists is nil for a cluster the provisioner has, NotFound for
// one it has not. Health answers for any name (it keeps what it heard of
// nodes, not clusters), so its answers about a name are checked here.
func (g *Gateway) clusterExists(ctx context.Context, cluster string) error {
	if _, err := g.own.Clusters.GetCluster(ctx, &loomv1.GetClusterRequest{Name: cluster}); err != nil {
		if isNotFound(err) {
			return fmt.Errorf("cluster %s: %w", cluster, errs.NotFound)
		}
		return fmt.Errorf("ask the provisioner for %s: %w", cluster, err)
	}
	return nil
}

// emptyOrNotFound is nil, or NotFound for a cluster that does not exist,
// when health answered a list's first page with nothing: a mistyped
// cluster says so instead of listing nothing. A list with entries, or a
// later page, costs no question to the provisioner.
func (g *Gateway) emptyOrNotFound(ctx context.Context, cluster string, empty bool, pageToken string) error {
	if !empty || pageToken != "" {
		return nil
	}
	return g.clusterExists(ctx, cluster)
}

// clusterNodes returns the cluster's nodes by hostname, as the provisioner
// lists them; NotFound when there is no such cluster.
func (g *Gateway) clusterNodes(ctx context.Context, cluster string) (map[string]*loomv1.Node, error) {
	if err := g.clusterExists(ctx, cluster); err != nil {
		return nil, err
	}
	nodes := map[string]*loomv1.Node{}
	err := paging.Each(func(token string) (string, error) {
		page, err := g.own.Nodes.ListNodes(ctx, &loomv1.ListNodesRequest{Parent: cluster, PageSize: paging.MaxSize, PageToken: token})
		for _, n := range page.GetNodes() {
			nodes[n.GetHostname()] = n
		}
		return page.GetNextPageToken(), err
	})
	if err != nil {
		return nil, fmt.Errorf("ask the provisioner for the nodes of %s: %w", cluster, err)
	}
	return nodes, nil
}

// oneNode returns the node hostname of cluster, NotFound when there is none.
func (g *Gateway) oneNode(ctx context.Context, cluster, hostname string) (*loomv1.Node, error) {
	nodes, err := g.clusterNodes(ctx, cluster)
	if err != nil {
		return nil, err
	}
	n, ok := nodes[hostname]
	if !ok {
		return nil, fmt.Errorf("node %s in %s: %w (see loom nodes list --cluster %s)", hostname, cluster, errs.NotFound, domain.ShortID(cluster))
	}
	return n, nil
}

// actor is who a command says set a node's state (NodeHealth.set_by, sinfo
// -R's USER): the principal's user, else its name. Never a request field.
func actor(ctx context.Context, cluster string) (user, principal string) {
	cl, _ := resname.ParseCluster(cluster)
	by := callerIn(ctx, cl.Project)
	user = by.User
	if user == "" {
		user = by.Name
	}
	return user, by.Name
}

// ScanNodes validates a scan (its nodes must be the cluster's), mints its
// scan id and writes the ScanNodes command. The answer names the nodes
// asked for (every node of the cluster when none were named); which were
// skipped because they were busy shows in the scan's results
// (CHECK_SKIPPED), since only the health service knows.
func (g *Gateway) ScanNodes(ctx context.Context, req *loomv1.ScanNodesRequest) (*loomv1.ScanNodesResponse, error) {
	hosts, checks, err := domain.ValidateScanNodes(req)
	if err != nil {
		return nil, err
	}
	nodes, err := g.clusterNodes(ctx, req.GetCluster())
	if err != nil {
		return nil, err
	}
	if err := domain.CheckHealthNodes(nodes, req.GetCluster(), "hostnames", hosts); err != nil {
		return nil, err
	}
	scanned := hosts
	if len(scanned) == 0 {
		for h, n := range nodes {
			if n.GetRole() != clusterspec.RoleLogin {
				scanned = append(scanned, h)
			}
		}
		slices.Sort(scanned)
	}
	user, by := actor(ctx, req.GetCluster())
	id := envelope.NewID()
	cmd := &eventsv1.ScanNodes{Cluster: req.GetCluster(), ScanId: id, Hostnames: hosts, Checks: checks, Level: req.GetLevel(),
		AllowBusy: req.GetAllowBusy(), Timeout: req.GetTimeout(), Params: req.GetParams(), User: user}
	if err := g.emitCommands(ctx, req.GetCluster(), cmd); err != nil {
		return nil, fmt.Errorf("scan nodes of %s: %w", req.GetCluster(), err)
	}
	g.opt.Log.InfoContext(ctx, "health scan requested", "cluster", req.GetCluster(), "scan", id, "nodes", len(scanned), "checks", checks, "by", by)
	return &loomv1.ScanNodesResponse{ScanId: id, Hostnames: scanned}, nil
}

// ReportFaultyNodes validates the report (its nodes must be the cluster's,
// a reason is required) and writes the ReportFaultyNodes command.
func (g *Gateway) ReportFaultyNodes(ctx context.Context, req *loomv1.ReportFaultyNodesRequest) (*loomv1.ReportFaultyNodesResponse, error) {
	hosts, err := domain.ValidateReportFaultyNodes(req)
	if err != nil {
		return nil, err
	}
	nodes, err := g.clusterNodes(ctx, req.GetCluster())
	if err != nil {
		return nil, err
	}
	if err := domain.CheckHealthNodes(nodes, req.GetCluster(), "hostnames", hosts); err != nil {
		return nil, err
	}
	user, by := actor(ctx, req.GetCluster())
	cmd := &eventsv1.ReportFaultyNodes{Cluster: req.GetCluster(), Hostnames: hosts, Reason: req.GetReason(), User: user}
	if err := g.emitCommands(ctx, req.GetCluster(), cmd); err != nil {
		return nil, fmt.Errorf("report faulty nodes of %s: %w", req.GetCluster(), err)
	}
	g.opt.Log.InfoContext(ctx, "nodes reported faulty", "cluster", req.GetCluster(), "nodes", hosts, "reason", req.GetReason(), "by", by)
	return &loomv1.ReportFaultyNodesResponse{Hostnames: hosts}, nil
}

// UpdateNodeRemediation validates the operator's override and writes the
// UpdateNodeRemediation command. It answers the node as health last
// reported it (state, telemetry), with the requested action as its
// next_action and the caller as set_by: the health service applies the
// command asynchronously (loom health nodes shows when it has).
func (g *Gateway) UpdateNodeRemediation(ctx context.Context, req *loomv1.UpdateNodeRemediationRequest) (*loomv1.NodeHealth, error) {
	if err := domain.ValidateUpdateNodeRemediation(req); err != nil {
		return nil, err
	}
	node, err := g.oneNode(ctx, req.GetCluster(), req.GetHostname())
	if err != nil {
		return nil, err
	}
	if node.GetRole() == clusterspec.RoleLogin {
		return nil, errs.Invalid("hostname", "%s is the login node of %s: health checks and repairs only compute nodes", req.GetHostname(), domain.ShortID(req.GetCluster()))
	}
	user, by := actor(ctx, req.GetCluster())
	cmds := []proto.Message{&eventsv1.UpdateNodeRemediation{Cluster: req.GetCluster(), Hostname: req.GetHostname(), Action: req.GetAction(),
		Reason: req.GetReason(), User: user}}
	if req.GetAction() == loomv1.RemediationAction_ACTION_RESUME {
		// Resume means back in service: also the end of a drain made with
		// scontrol (the scheduler's own; it ignores a RESUME of a node it
		// has not drained), in the same Apply.
		cmds = append(cmds, &eventsv1.UpdateSlurmNode{Cluster: req.GetCluster(), Hostname: req.GetHostname(), State: "RESUME",
			User: user, Time: timestamppb.New(g.now())})
	}
	if err := g.emitCommands(ctx, req.GetCluster(), cmds...); err != nil {
		return nil, fmt.Errorf("update node %s: %w", req.GetHostname(), err)
	}
	g.opt.Log.InfoContext(ctx, "node remediation requested", "cluster", req.GetCluster(), "node", req.GetHostname(),
		"action", req.GetAction(), "reason", req.GetReason(), "by", by)
	nh := g.nodeHealth(ctx, req.GetCluster(), req.GetHostname())
	if nh == nil {
		nh = &loomv1.NodeHealth{Node: node.GetName(), Hostname: req.GetHostname(), Cluster: req.GetCluster()}
	}
	nh.NextAction, nh.SetBy = req.GetAction(), user
	if req.GetReason() != "" {
		nh.Reason = req.GetReason()
	}
	nh.StateTime = timestamppb.New(g.now())
	return nh, nil
}

// healthLookupTimeout bounds nodeHealth's read of the health service.
const healthLookupTimeout = 2 * time.Second

// nodeHealth is health's view of one node, or nil when health does not
// answer (within healthLookupTimeout) or does not know it: best effort, a
// write does not depend on it.
func (g *Gateway) nodeHealth(ctx context.Context, cluster, hostname string) *loomv1.NodeHealth {
	h, err := g.health()
	if err != nil {
		return nil
	}
	// Best effort, and bounded: a write never waits long on health.
	ctx, cancel := context.WithTimeout(ctx, healthLookupTimeout)
	defer cancel()
	var found *loomv1.NodeHealth
	_ = paging.Each(func(token string) (string, error) {
		page, err := h.ListNodeHealth(ctx, &loomv1.ListNodeHealthRequest{Cluster: cluster, PageSize: paging.MaxSize, PageToken: token})
		for _, n := range page.GetNodes() {
			if n.GetHostname() == hostname {
				found = n
			}
		}
		if found != nil {
			return "", err
		}
		return page.GetNextPageToken(), err
	})
	return found
}

// InjectFault validates a fault against the node (its GPU count from the
// provisioner) and writes the InjectFault command, which health forwards
// to the node's agent. A node health knows to have real GPUs (it reported
// telemetry that was not simulated) is refused here (FailedPrecondition);
// for a node health has no telemetry of yet, the health service refuses
// it in turn.
func (g *Gateway) InjectFault(ctx context.Context, req *loomv1.InjectFaultRequest) (*loomv1.InjectFaultResponse, error) {
	var v errs.Validator
	domain.CheckCluster(&v, "cluster", req.GetCluster())
	domain.CheckHostname(&v, "hostname", req.GetHostname())
	if err := v.Err(); err != nil {
		return nil, err
	}
	node, err := g.oneNode(ctx, req.GetCluster(), req.GetHostname())
	if err != nil {
		return nil, err
	}
	if err := domain.ValidateInjectFault(req, node.GetGpus()); err != nil {
		return nil, err
	}
	if nh := g.nodeHealth(ctx, req.GetCluster(), req.GetHostname()); nh != nil && len(nh.GetGpus()) > 0 && !nh.GetSimulated() {
		return nil, fmt.Errorf("node %s has real GPUs: faults are injected only into simulated ones (an agent with -gpu-mode simulated): %w",
			req.GetHostname(), errs.FailedPrecondition)
	}
	user, by := actor(ctx, req.GetCluster())
	fault := proto.Clone(req.GetFault()).(*loomv1.Fault)
	cmd := &eventsv1.InjectFault{Cluster: req.GetCluster(), Hostname: req.GetHostname(), Fault: fault, User: user}
	if err := g.emitCommands(ctx, req.GetCluster(), cmd); err != nil {
		return nil, fmt.Errorf("inject a fault into %s: %w", req.GetHostname(), err)
	}
	g.opt.Log.InfoContext(ctx, "fault injection requested", "cluster", req.GetCluster(), "node", req.GetHostname(),
		"kind", fault.GetKind(), "gpu", fault.GetGpu(), "xid", fault.GetXid(), "value", fault.GetValue(), "by", by)
	return &loomv1.InjectFaultResponse{Hostname: req.GetHostname(), Fault: fault}, nil
}

// GetJobGoodput reads a job's goodput from the scheduler, for a caller who
// may see the job (as GetJob: PrivateData, another workload's job).
func (g *Gateway) GetJobGoodput(ctx context.Context, req *loomv1.GetJobGoodputRequest) (*loomv1.Goodput, error) {
	ref, err := g.resolveJob(ctx, req.GetName(), false)
	if err != nil {
		return nil, err
	}
	if _, _, err := g.visibleJob(ctx, ref.name); err != nil {
		return nil, err
	}
	gp, err := g.own.Goodput.GetJobGoodput(ctx, &loomv1.GetJobGoodputRequest{Name: ref.name})
	if err != nil {
		if isNotFound(err) {
			// The caller may see the job (visibleJob): pass on the
			// scheduler's reason (a record too old to hold goodput).
			return nil, err
		}
		return nil, fmt.Errorf("ask the scheduler for the goodput of %s: %w", ref.name, err)
	}
	return gp, nil
}

// GetClusterGoodput reads a cluster's goodput from the scheduler.
func (g *Gateway) GetClusterGoodput(ctx context.Context, req *loomv1.GetClusterGoodputRequest) (*loomv1.Goodput, error) {
	var v errs.Validator
	domain.CheckCluster(&v, "name", req.GetName())
	if s := req.GetSince(); s != nil {
		if err := s.CheckValid(); err != nil {
			v.Add("since", "%v", err)
		} else if s.AsTime().After(g.now()) {
			v.Add("since", "%s is in the future", s.AsTime().Format("2006-01-02T15:04:05Z07:00"))
		}
	}
	if err := v.Err(); err != nil {
		return nil, err
	}
	gp, err := g.own.Goodput.GetClusterGoodput(ctx, req)
	if err != nil {
		if isNotFound(err) {
			return nil, fmt.Errorf("cluster %s: %w", req.GetName(), errs.NotFound)
		}
		return nil, fmt.Errorf("ask the scheduler for the goodput of %s: %w", req.GetName(), err)
	}
	return gp, nil
}
