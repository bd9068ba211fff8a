package gateway

import (
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// TestHealthCommands: each HealthService write becomes its command on
// loom.health.commands.v1, keyed by the cluster, with the caller's
// principal stamped on the envelope and its user in the payload (never a
// request field); a scan gets the id the gateway minted and its hostlist
// expanded.
func TestHealthCommands(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := testkit.Context(t, wait)
	hs := loomv1.NewHealthServiceClient(h.conn)

	scan, err := hs.ScanNodes(ctx, &loomv1.ScanNodesRequest{Cluster: cluster1, Hostnames: []string{"gpu-[0001]", "gpu-0001"},
		Checks: []string{"gpu_diag", "disk", "gpu_diag"}, Level: 2, AllowBusy: true, Timeout: durationpb.New(time.Minute),
		Params: map[string]string{"stress": "10s", "paths": "/,/scratch", "site_knob": "x y"}})
	if err != nil {
		t.Fatal(err)
	}
	if scan.GetScanId() == "" || len(scan.GetHostnames()) != 1 || scan.GetHostnames()[0] != "gpu-0001" {
		t.Fatalf("ScanNodes answered %v, want a scan id and [gpu-0001]", scan)
	}
	ev := testkit.WaitEvent(t, h.broker, topics.HealthCommands, wait, func(e envelope.Event) bool {
		c, ok := e.Payload.(*eventsv1.ScanNodes)
		return ok && c.GetScanId() == scan.GetScanId()
	})
	want := &eventsv1.ScanNodes{Cluster: cluster1, ScanId: scan.GetScanId(), Hostnames: []string{"gpu-0001"}, Checks: []string{"gpu_diag", "disk"},
		Level: 2, AllowBusy: true, Timeout: durationpb.New(time.Minute), Params: map[string]string{"stress": "10s", "paths": "/,/scratch", "site_knob": "x y"},
		User: "root"}
	if !proto.Equal(ev.Payload, want) || ev.Principal != "users/root" || ev.Key != cluster1 {
		t.Errorf("ScanNodes command %v by %q key %q, want %v by users/root key %s", ev.Payload, ev.Principal, ev.Key, want, cluster1)
	}
	// A scan of every node answers the cluster's compute nodes.
	all, err := hs.ScanNodes(ctx, &loomv1.ScanNodesRequest{Cluster: cluster1})
	if err != nil || strings.Join(all.GetHostnames(), ",") != "cpu-0001,gpu-0001" || all.GetScanId() == scan.GetScanId() {
		t.Errorf("ScanNodes of every node: %v %v", all, err)
	}

	// pat is only a project admin: operations on nodes need a cluster
	// administrator; ops is one.
	ops := loomv1.NewHealthServiceClient(h.as(t, "ops"))
	if _, err := ops.ReportFaultyNodes(ctx, &loomv1.ReportFaultyNodesRequest{Cluster: cluster1, Hostnames: []string{"gpu-0001"}, Reason: "ECC storm"}); err != nil {
		t.Fatal(err)
	}
	nh, err := ops.UpdateNodeRemediation(ctx, &loomv1.UpdateNodeRemediationRequest{Cluster: cluster1, Hostname: "gpu-0001",
		Action: loomv1.RemediationAction_ACTION_REBOOT, Reason: "stuck clocks"})
	if err != nil {
		t.Fatal(err)
	}
	if nh.GetHostname() != "gpu-0001" || nh.GetNextAction() != loomv1.RemediationAction_ACTION_REBOOT || nh.GetSetBy() != "ops" || nh.GetReason() != "stuck clocks" {
		t.Errorf("UpdateNodeRemediation answered %v", nh)
	}
	inj, err := ops.InjectFault(ctx, &loomv1.InjectFaultRequest{Cluster: cluster1, Hostname: "gpu-0001", Fault: &loomv1.Fault{Kind: loomv1.FaultKind_FAULT_XID, Gpu: 3, Xid: 79}})
	if err != nil || inj.GetFault().GetXid() != 79 {
		t.Fatalf("InjectFault: %v %v", inj, err)
	}
	// loom nodes resume ends a drain made with scontrol too: the
	// scheduler's RESUME goes with health's, in one Apply.
	if _, err := ops.UpdateNodeRemediation(ctx, &loomv1.UpdateNodeRemediationRequest{Cluster: cluster1, Hostname: "gpu-0001",
		Action: loomv1.RemediationAction_ACTION_RESUME}); err != nil {
		t.Fatal(err)
	}
	jobCommand(t, h, func(u *eventsv1.UpdateSlurmNode) bool {
		return u.GetHostname() == "gpu-0001" && u.GetState() == "RESUME" && u.GetUser() == "ops"
	})
	wantCmds := []proto.Message{
		&eventsv1.ReportFaultyNodes{Cluster: cluster1, Hostnames: []string{"gpu-0001"}, Reason: "ECC storm", User: "ops"},
		&eventsv1.UpdateNodeRemediation{Cluster: cluster1, Hostname: "gpu-0001", Action: loomv1.RemediationAction_ACTION_REBOOT, Reason: "stuck clocks", User: "ops"},
		&eventsv1.InjectFault{Cluster: cluster1, Hostname: "gpu-0001", Fault: &loomv1.Fault{Kind: loomv1.FaultKind_FAULT_XID, Gpu: 3, Xid: 79}, User: "ops"},
		&eventsv1.UpdateNodeRemediation{Cluster: cluster1, Hostname: "gpu-0001", Action: loomv1.RemediationAction_ACTION_RESUME, User: "ops"},
	}
	testkit.WaitEvent(t, h.broker, topics.HealthCommands, wait, func(e envelope.Event) bool {
		c, ok := e.Payload.(*eventsv1.UpdateNodeRemediation)
		return ok && c.GetAction() == loomv1.RemediationAction_ACTION_RESUME
	})
	var got []envelope.Event
	for _, e := range testkit.Events(t, h.broker, topics.HealthCommands) {
		if e.Principal == "users/ops" {
			got = append(got, e)
		}
	}
	if len(got) != len(wantCmds) {
		t.Fatalf("ops's health commands: %d, want %d", len(got), len(wantCmds))
	}
	for i, e := range got {
		if !proto.Equal(e.Payload, wantCmds[i]) || e.Key != cluster1 {
			t.Errorf("command %d: %v key %q, want %v", i, e.Payload, e.Key, wantCmds[i])
		}
	}
	// The audit trail names the cluster and its project; a project admin
	// reads it there.
	waitAudit(t, ctx, h, "pat", project, func(r *loomv1.AuditRecord) bool {
		return r.GetMethod() == "/loom.v1.HealthService/InjectFault" && r.GetPrincipal() == "users/ops" &&
			r.GetResource() == cluster1 && r.GetProject() == "default" && r.GetDecision() == "allowed"
	})
}

// TestHealthValidation: every refused write names the field and the limit,
// and writes nothing on the bus.
func TestHealthValidation(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := testkit.Context(t, wait)
	hs := loomv1.NewHealthServiceClient(h.conn)
	inject := func(host string, f *loomv1.Fault) error {
		_, err := hs.InjectFault(ctx, &loomv1.InjectFaultRequest{Cluster: cluster1, Hostname: host, Fault: f})
		return err
	}
	scan := func(r *loomv1.ScanNodesRequest) error {
		r.Cluster = cluster1
		_, err := hs.ScanNodes(ctx, r)
		return err
	}
	report := func(hosts []string, reason string) error {
		_, err := hs.ReportFaultyNodes(ctx, &loomv1.ReportFaultyNodesRequest{Cluster: cluster1, Hostnames: hosts, Reason: reason})
		return err
	}
	update := func(a loomv1.RemediationAction, reason string) error {
		_, err := hs.UpdateNodeRemediation(ctx, &loomv1.UpdateNodeRemediationRequest{Cluster: cluster1, Hostname: "gpu-0001", Action: a, Reason: reason})
		return err
	}
	xid := loomv1.FaultKind_FAULT_XID
	long := strings.Repeat("x", 1025)
	checks := make([]string, 17)
	for i := range checks {
		checks[i] = "disk"
	}
	params := map[string]string{}
	for i := range 17 {
		params[fmt.Sprintf("p%d", i)] = "1"
	}
	param := func(k, v string) *loomv1.ScanNodesRequest {
		return &loomv1.ScanNodesRequest{Params: map[string]string{k: v}}
	}
	for _, c := range []struct {
		what string
		err  error
		code codes.Code
		want []string
	}{
		{"xid 1000", inject("gpu-0001", &loomv1.Fault{Kind: xid, Gpu: 0, Xid: 1000}), codes.InvalidArgument, []string{"fault.xid", "1 to 999"}},
		{"xid 0", inject("gpu-0001", &loomv1.Fault{Kind: xid, Gpu: 0}), codes.InvalidArgument, []string{"fault.xid", "1 to 999"}},
		{"gpu 8 of 8", inject("gpu-0001", &loomv1.Fault{Kind: xid, Gpu: 8, Xid: 79}), codes.InvalidArgument, []string{"fault.gpu", "below the node's GPU count, 8"}},
		{"gpu -2", inject("gpu-0001", &loomv1.Fault{Kind: xid, Gpu: -2, Xid: 79}), codes.InvalidArgument, []string{"fault.gpu", "0 to 7"}},
		{"a GPU fault on a CPU node", inject("cpu-0001", &loomv1.Fault{Kind: loomv1.FaultKind_FAULT_THERMAL, Gpu: -1}), codes.InvalidArgument, []string{"fault.gpu", "no GPUs"}},
		{"NaN", inject("gpu-0001", &loomv1.Fault{Kind: loomv1.FaultKind_FAULT_NVLINK, Gpu: 0, Value: math.NaN()}), codes.InvalidArgument, []string{"fault.value", "finite"}},
		{"+Inf", inject("gpu-0001", &loomv1.Fault{Kind: loomv1.FaultKind_FAULT_NVLINK, Gpu: 0, Value: math.Inf(1)}), codes.InvalidArgument, []string{"fault.value", "finite"}},
		{"value 2e6", inject("gpu-0001", &loomv1.Fault{Kind: loomv1.FaultKind_FAULT_ECC_SBE, Gpu: 0, Value: 2e6}), codes.InvalidArgument, []string{"fault.value", "0 to 1e+06"}},
		{"slow factor 1", inject("gpu-0001", &loomv1.Fault{Kind: loomv1.FaultKind_FAULT_SLOW_GPU, Gpu: 0, Value: 1}), codes.InvalidArgument, []string{"fault.value", "above 1 and at most 1000"}},
		{"node-wide kind on a GPU", inject("gpu-0001", &loomv1.Fault{Kind: loomv1.FaultKind_FAULT_DISK_FULL, Gpu: 2}), codes.InvalidArgument, []string{"fault.gpu", "send -1"}},
		{"no heartbeat for two days", inject("gpu-0001", &loomv1.Fault{Kind: loomv1.FaultKind_FAULT_NO_HEARTBEAT, Gpu: -1, Value: 172800}), codes.InvalidArgument, []string{"fault.value", "limit of 86400"}},
		{"no kind", inject("gpu-0001", &loomv1.Fault{Gpu: 0}), codes.InvalidArgument, []string{"fault.kind"}},
		{"no fault", inject("gpu-0001", nil), codes.InvalidArgument, []string{"fault", "required"}},
		{"unknown node", inject("gpu-0099", &loomv1.Fault{Kind: xid, Gpu: 0, Xid: 79}), codes.NotFound, []string{"gpu-0099", "loom nodes list --cluster c1"}},
		{"bad hostname", inject("../etc", &loomv1.Fault{Kind: xid, Gpu: 0, Xid: 79}), codes.InvalidArgument, []string{"hostname"}},
		{"level 4", scan(&loomv1.ScanNodesRequest{Level: 4}), codes.InvalidArgument, []string{"level", "1 to 3"}},
		{"17 checks", scan(&loomv1.ScanNodesRequest{Checks: checks}), codes.InvalidArgument, []string{"checks", "limit of 16"}},
		{"a check path", scan(&loomv1.ScanNodesRequest{Checks: []string{"../bin/sh"}}), codes.InvalidArgument, []string{"checks[0]", "not a check name"}},
		{"bad hostlist", scan(&loomv1.ScanNodesRequest{Hostnames: []string{"gpu-[0001-"}}), codes.InvalidArgument, []string{"hostnames[0]"}},
		{"unknown hosts", scan(&loomv1.ScanNodesRequest{Hostnames: []string{"gpu-[0001-0003]"}}), codes.InvalidArgument, []string{"hostnames[1]", `"gpu-0002" is not a node of`, "hostnames[2]"}},
		{"timeout 2h", scan(&loomv1.ScanNodesRequest{Timeout: durationpb.New(2 * time.Hour)}), codes.InvalidArgument, []string{"timeout", "1h0m0s"}},
		{"17 params", scan(&loomv1.ScanNodesRequest{Params: params}), codes.InvalidArgument, []string{"params", "17 parameters, more than the limit of 16"}},
		{"an upper-case param", scan(param("Iters", "5")), codes.InvalidArgument, []string{"params[Iters]", "not a parameter name", "a-z, 0-9 and _", "LOOM_CHECK_PARAM_"}},
		{"a dashed param", scan(param("min-free", "5")), codes.InvalidArgument, []string{"params[min-free]", "not a parameter name"}},
		{"an empty param name", scan(param("", "5")), codes.InvalidArgument, []string{"params[]", "1 to 64"}},
		{"a 65-byte param name", scan(param(strings.Repeat("k", 65), "5")), codes.InvalidArgument, []string{"not a parameter name: 1 to 64"}},
		{"a long param value", scan(param("site_knob", strings.Repeat("v", 257))), codes.InvalidArgument, []string{"params[site_knob]", "257 bytes, longer than the limit of 256"}},
		{"a control character", scan(param("site_knob", "a\x1b[2Jb")), codes.InvalidArgument, []string{"params[site_knob]", "control character U+001B"}},
		{"iters not a number", scan(param("iters", "many")), codes.InvalidArgument, []string{"params[iters]", `"many"`, "1 to 1000"}},
		{"bad sizes", scan(param("sizes", "1M,2T")), codes.InvalidArgument, []string{"params[sizes]", `size "2T"`, "1 to 1G"}},
		{"ring is health's", scan(param("ring", "mine")), codes.InvalidArgument, []string{"params[ring]", "set by health"}},
		{"dcgmi false", scan(param("dcgmi", "false")), codes.InvalidArgument, []string{"params[dcgmi]", "auto", "off"}},
		{"report without reason", report([]string{"gpu-0001"}, " "), codes.InvalidArgument, []string{"reason", "required"}},
		{"report a long reason", report([]string{"gpu-0001"}, long), codes.InvalidArgument, []string{"reason", "1025 bytes, longer than the limit of 1024"}},
		{"report nobody", report(nil, "why"), codes.InvalidArgument, []string{"hostnames", "required"}},
		{"drain without reason", update(loomv1.RemediationAction_ACTION_DRAIN, ""), codes.InvalidArgument, []string{"reason", "required"}},
		{"restart job by hand", update(loomv1.RemediationAction_ACTION_RESTART_JOB, "x"), codes.InvalidArgument, []string{"action", "ACTION_DRAIN"}},
	} {
		wantCode(t, c.what, c.err, c.code, c.want...)
	}
	// Over REST too: 400 naming the field and the limit.
	code, body := restCall(ctx, t, h.http, h.restBase, "POST", "/v1/"+cluster1+"/nodes/gpu-0001:injectFault", `{"fault":{"kind":"FAULT_XID","gpu":3,"xid":1000}}`)
	if code != 400 || !strings.Contains(body, "fault.xid") || !strings.Contains(body, "1 to 999") {
		t.Errorf("REST xid 1000: HTTP %d %s", code, body)
	}
	code, body = restCall(ctx, t, h.http, h.restBase, "POST", "/v1/"+cluster1+"/health:scan", `{"params":{"min_free_gb":"-1"}}`)
	if code != 400 || !strings.Contains(body, "params[min_free_gb]") || !strings.Contains(body, "from 0 up") {
		t.Errorf("REST min_free_gb -1: HTTP %d %s", code, body)
	}
	// Another cluster of the project does not exist.
	_, err := hs.ReportFaultyNodes(ctx, &loomv1.ReportFaultyNodesRequest{Cluster: project + "/clusters/nope", Hostnames: []string{"gpu-0001"}, Reason: "x"})
	wantCode(t, "a missing cluster", err, codes.NotFound, "clusters/nope")

	// A marker: once it is on the bus, nothing refused came before it.
	if err := update(loomv1.RemediationAction_ACTION_RESUME, ""); err != nil {
		t.Fatal(err)
	}
	testkit.WaitEvent(t, h.broker, topics.HealthCommands, wait, func(e envelope.Event) bool {
		_, ok := e.Payload.(*eventsv1.UpdateNodeRemediation)
		return ok
	})
	if evs := testkit.Events(t, h.broker, topics.HealthCommands); len(evs) != 1 {
		t.Errorf("%d health commands, want only the marker: %v", len(evs), evs)
	}
}

// TestHealthReads: ListNodeHealth and ListHealthResults answer the health
// service's data with the request's filters passed on; a node health
// knows to have real GPUs is refused a fault (FailedPrecondition); with
// health down the reads say so (Unavailable naming the health service).
func TestHealthReads(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := testkit.Context(t, wait)
	h.w.mu.Lock()
	h.w.nodeHealth = []*loomv1.NodeHealth{{Node: cluster1 + "/nodes/gpu-0001", Hostname: "gpu-0001", Cluster: cluster1, State: loomv1.RemediationState_NODE_DRAINING,
		Reason: "Xid 79: GPU has fallen off the bus", SetBy: "loom-health", StateTime: timestamppb.New(time.Now()),
		Gpus: []*loomv1.GpuSample{{Index: 0, TemperatureC: 40}}, Simulated: false}}
	h.w.healthResults = []*loomv1.HealthCheckResult{
		{Name: cluster1 + "/healthResults/1", Hostname: "gpu-0001", Check: "disk", Outcome: loomv1.CheckOutcome_CHECK_PASS, ScanId: "s1"},
		{Name: cluster1 + "/healthResults/2", Hostname: "gpu-0001", Check: "gpu_diag", Outcome: loomv1.CheckOutcome_CHECK_FAIL, ScanId: "s1"},
	}
	h.w.mu.Unlock()
	hs := loomv1.NewHealthServiceClient(h.as(t, "vic"))
	nodes, err := hs.ListNodeHealth(ctx, &loomv1.ListNodeHealthRequest{Cluster: cluster1})
	if err != nil || len(nodes.GetNodes()) != 1 || nodes.GetNodes()[0].GetState() != loomv1.RemediationState_NODE_DRAINING {
		t.Fatalf("ListNodeHealth: %v %v", nodes, err)
	}
	// Hostlists reach health expanded; a bad one is refused naming it.
	if _, err := hs.ListNodeHealth(ctx, &loomv1.ListNodeHealthRequest{Cluster: cluster1, Hostnames: []string{"gpu-[0001-0002]"}}); err != nil {
		t.Fatal(err)
	}
	h.w.mu.Lock()
	asked := h.w.nodeHealthHosts[len(h.w.nodeHealthHosts)-1]
	h.w.mu.Unlock()
	if !slices.Equal(asked, []string{"gpu-0001", "gpu-0002"}) {
		t.Fatalf("health was asked for hostnames %v", asked)
	}
	_, err = hs.ListNodeHealth(ctx, &loomv1.ListNodeHealthRequest{Cluster: cluster1, Hostnames: []string{"gpu-[1-"}})
	wantCode(t, "a bad hostlist", err, codes.InvalidArgument, "hostnames[0]")
	// The events: passed on with the hostlist expanded, refused as the list.
	evs, err := hs.ListNodeHealthEvents(ctx, &loomv1.ListNodeHealthEventsRequest{Cluster: cluster1, Hostnames: []string{"gpu-000[1-2]"}})
	if err != nil || len(evs.GetEvents()) != 1 || !evs.GetEvents()[0].GetRepaired() {
		t.Fatalf("ListNodeHealthEvents: %v %v", evs, err)
	}
	h.w.mu.Lock()
	asked = h.w.nodeHealthHosts[len(h.w.nodeHealthHosts)-1]
	h.w.mu.Unlock()
	if !slices.Equal(asked, []string{"gpu-0001", "gpu-0002"}) {
		t.Fatalf("health was asked for the events of %v", asked)
	}
	_, err = hs.ListNodeHealthEvents(ctx, &loomv1.ListNodeHealthEventsRequest{Cluster: "clusters/x"})
	wantCode(t, "a bad cluster name", err, codes.InvalidArgument, "cluster")
	_, err = hs.ListNodeHealthEvents(ctx, &loomv1.ListNodeHealthEventsRequest{Cluster: cluster1, PageSize: -1})
	wantCode(t, "a negative page size", err, codes.InvalidArgument, "page_size")
	_, err = hs.ListNodeHealthEvents(ctx, &loomv1.ListNodeHealthEventsRequest{Cluster: cluster1, Hostnames: []string{"gpu-[00001-99999]"}})
	wantCode(t, "a hostlist past the limit", err, codes.InvalidArgument, "more than the limit of 4096")
	res, err := hs.ListHealthResults(ctx, &loomv1.ListHealthResultsRequest{Cluster: cluster1, Check: "gpu_diag", ScanId: "s1"})
	if err != nil || len(res.GetResults()) != 1 || res.GetResults()[0].GetOutcome() != loomv1.CheckOutcome_CHECK_FAIL {
		t.Fatalf("ListHealthResults: %v %v", res, err)
	}
	// A cluster that does not exist is NotFound in each list (health
	// answers for any name, with nothing); one that does, with nothing to
	// list, answers an empty list.
	nope := project + "/clusters/nope"
	_, err = hs.ListNodeHealth(ctx, &loomv1.ListNodeHealthRequest{Cluster: nope})
	wantCode(t, "the node health of no cluster", err, codes.NotFound, "nope")
	_, err = hs.ListNodeHealthEvents(ctx, &loomv1.ListNodeHealthEventsRequest{Cluster: nope})
	wantCode(t, "the health events of no cluster", err, codes.NotFound, "nope")
	_, err = hs.ListHealthResults(ctx, &loomv1.ListHealthResultsRequest{Cluster: nope})
	wantCode(t, "the health results of no cluster", err, codes.NotFound, "nope")
	// So are its nodes (the provisioner lists nothing under any name), and
	// the project's every cluster ("-") is a list, whatever it holds.
	nsc := loomv1.NewNodeServiceClient(h.as(t, "vic"))
	_, err = nsc.ListNodes(ctx, &loomv1.ListNodesRequest{Parent: nope})
	wantCode(t, "the nodes of no cluster", err, codes.NotFound, "nope")
	if _, err := nsc.ListNodes(ctx, &loomv1.ListNodesRequest{Parent: project + "/clusters/-"}); err != nil {
		t.Fatalf("the nodes of every cluster: %v", err)
	}
	if ns, err := nsc.ListNodes(ctx, &loomv1.ListNodesRequest{Parent: cluster1}); err != nil || len(ns.GetNodes()) == 0 {
		t.Fatalf("the nodes of %s: %v %v", cluster1, ns, err)
	}
	// Every project's nodes: a cluster administrator's list (loom nodes
	// list --all-projects); anyone else is refused, saying what it takes.
	_, err = nsc.ListNodes(ctx, &loomv1.ListNodesRequest{Parent: "projects/-/clusters/-"})
	wantCode(t, "every project's nodes, as a viewer", err, codes.PermissionDenied, "needs a cluster administrator")
	all, err := loomv1.NewNodeServiceClient(h.as(t, "ops")).ListNodes(ctx, &loomv1.ListNodesRequest{Parent: "projects/-/clusters/-"})
	if err != nil || len(all.GetNodes()) == 0 || !slices.ContainsFunc(all.GetNodes(), func(n *loomv1.Node) bool { return n.GetCluster() == cluster1 }) {
		t.Fatalf("every project's nodes, as a cluster administrator: %v %v", all, err)
	}
	_, err = loomv1.NewNodeServiceClient(h.as(t, "ops")).ListNodes(ctx, &loomv1.ListNodesRequest{Parent: "projects/-/clusters/" + strings.TrimPrefix(cluster1, project+"/clusters/")})
	wantCode(t, "one cluster id in every project", err, codes.InvalidArgument, "parent")
	// And its jobs (squeue with a mistyped cluster): an empty queue of a
	// cluster that exists is still a list.
	jsc := loomv1.NewJobServiceClient(h.as(t, "vic"))
	_, err = jsc.ListJobs(ctx, &loomv1.ListJobsRequest{Parent: project, Cluster: nope, ActiveOnly: true})
	wantCode(t, "the jobs of no cluster", err, codes.NotFound, "nope")
	if js, err := jsc.ListJobs(ctx, &loomv1.ListJobsRequest{Parent: project, Cluster: cluster1, Users: []string{"nobody"}}); err != nil || len(js.GetJobs()) != 0 {
		t.Fatalf("no jobs of user nobody on %s: %v %v", cluster1, js, err)
	}
	if code, body := h.rest(t, ctx, "GET", "/v1/"+nope+"/nodeHealth", ""); code != http.StatusNotFound {
		t.Errorf("GET nodeHealth of no cluster: HTTP %d %s", code, body)
	}
	if res, err := hs.ListHealthResults(ctx, &loomv1.ListHealthResultsRequest{Cluster: cluster1, Check: "nccl"}); err != nil || len(res.GetResults()) != 0 {
		t.Fatalf("ListHealthResults of a check never run: %v %v", res, err)
	}
	_, err = hs.ListHealthResults(ctx, &loomv1.ListHealthResultsRequest{Cluster: cluster1, Check: "a/b"})
	wantCode(t, "a check name with a slash", err, codes.InvalidArgument, "check")
	// A scan's progress: health's answer; a scan it does not have is
	// NotFound, and so is one of a cluster that does not exist, saying
	// it is the cluster; no scan id is refused. Over REST too.
	if sc, err := hs.GetHealthScan(ctx, &loomv1.GetHealthScanRequest{Cluster: cluster1, ScanId: "s1"}); err != nil || !sc.GetDone() || sc.GetPassed() != 2 {
		t.Fatalf("GetHealthScan: %v %v", sc, err)
	}
	_, err = hs.GetHealthScan(ctx, &loomv1.GetHealthScanRequest{Cluster: cluster1, ScanId: "s9"})
	wantCode(t, "a scan health does not have", err, codes.NotFound, "scan s9")
	_, err = hs.GetHealthScan(ctx, &loomv1.GetHealthScanRequest{Cluster: nope, ScanId: "s9"})
	wantCode(t, "a scan of no cluster", err, codes.NotFound, "cluster "+nope)
	_, err = hs.GetHealthScan(ctx, &loomv1.GetHealthScanRequest{Cluster: cluster1})
	wantCode(t, "no scan id", err, codes.InvalidArgument, "scan_id")
	_, err = hs.GetHealthScan(ctx, &loomv1.GetHealthScanRequest{Cluster: cluster1, ScanId: strings.Repeat("s", 129)})
	wantCode(t, "a scan id past its bound", err, codes.InvalidArgument, "scan_id: 129 bytes, longer than the limit of 128")
	if code, body := h.rest(t, ctx, "GET", "/v1/"+cluster1+"/healthScans/s1", ""); code != http.StatusOK || !strings.Contains(body, `"done":true`) {
		t.Errorf("GET healthScans/s1: HTTP %d %s", code, body)
	}
	// The scans still kept: health's list; a cluster that does not exist
	// is NotFound; a negative page size is refused. Over REST too.
	if l, err := hs.ListHealthScans(ctx, &loomv1.ListHealthScansRequest{Cluster: cluster1}); err != nil || len(l.GetScans()) != 1 || l.GetScans()[0].GetScanId() != "s1" {
		t.Fatalf("ListHealthScans: %v %v", l, err)
	}
	_, err = hs.ListHealthScans(ctx, &loomv1.ListHealthScansRequest{Cluster: nope})
	wantCode(t, "the scans of no cluster", err, codes.NotFound, "cluster "+nope)
	_, err = hs.ListHealthScans(ctx, &loomv1.ListHealthScansRequest{Cluster: cluster1, PageSize: -1})
	wantCode(t, "a negative page size", err, codes.InvalidArgument, "page_size")
	_, err = hs.ListHealthScans(ctx, &loomv1.ListHealthScansRequest{Cluster: project + "/clusters/" + strings.Repeat("c", 300)})
	wantCode(t, "a cluster name past its bound", err, codes.InvalidArgument, "cluster")
	if l, err := hs.ListHealthScans(ctx, &loomv1.ListHealthScansRequest{Cluster: cluster1, PageSize: 1 << 30}); err != nil || len(l.GetScans()) != 1 {
		t.Fatalf("a page size past the maximum is taken as the maximum: %v %v", l, err)
	}
	if code, body := h.rest(t, ctx, "GET", "/v1/"+cluster1+"/healthScans", ""); code != http.StatusOK || !strings.Contains(body, `"scan_id":"s1"`) {
		t.Errorf("GET healthScans: HTTP %d %s", code, body)
	}
	// The policy: a viewer reads it; a cluster that does not exist is
	// NotFound (health answers for any name); a bad name is refused.
	if p, err := hs.GetHealthPolicy(ctx, &loomv1.GetHealthPolicyRequest{Cluster: cluster1}); err != nil || p.GetRemediation() != "dry-run" {
		t.Fatalf("GetHealthPolicy: %v %v", p, err)
	}
	_, err = hs.GetHealthPolicy(ctx, &loomv1.GetHealthPolicyRequest{Cluster: project + "/clusters/nope"})
	wantCode(t, "the policy of no cluster", err, codes.NotFound, "nope")
	_, err = hs.GetHealthPolicy(ctx, &loomv1.GetHealthPolicyRequest{Cluster: "clusters/x"})
	wantCode(t, "a bad cluster name", err, codes.InvalidArgument, "cluster")
	if code, body := h.rest(t, ctx, "GET", "/v1/"+cluster1+"/healthPolicy", ""); code != http.StatusOK || !strings.Contains(body, `"remediation":"dry-run"`) {
		t.Errorf("GET healthPolicy: HTTP %d %s", code, body)
	}

	_, err = loomv1.NewHealthServiceClient(h.conn).InjectFault(ctx, &loomv1.InjectFaultRequest{Cluster: cluster1, Hostname: "gpu-0001",
		Fault: &loomv1.Fault{Kind: loomv1.FaultKind_FAULT_XID, Gpu: 0, Xid: 79}})
	wantCode(t, "a fault into real GPUs", err, codes.FailedPrecondition, "real GPUs", "simulated")

	down := newHarness(t, func(c *Config) { c.HealthAddr = "127.0.0.1:1" })
	_, err = loomv1.NewHealthServiceClient(down.conn).ListNodeHealth(ctx, &loomv1.ListNodeHealthRequest{Cluster: cluster1})
	wantCode(t, "health down", err, codes.Unavailable, "health service", "-health-addr")
	// Writes do not need health: the command waits on the bus.
	if _, err := loomv1.NewHealthServiceClient(down.conn).ReportFaultyNodes(ctx, &loomv1.ReportFaultyNodesRequest{Cluster: cluster1,
		Hostnames: []string{"gpu-0001"}, Reason: "x"}); err != nil {
		t.Errorf("ReportFaultyNodes with health down: %v", err)
	}
}

// TestGoodput: a job's goodput for who may see the job (with PrivateData,
// another user's job is NotFound as a missing one), a cluster's for its
// viewers; both from the scheduler.
func TestGoodput(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *Config) { c.PrivateData = "jobs" })
	matrixWorld(t, h)
	ctx := testkit.Context(t, wait)
	gp, err := loomv1.NewGoodputServiceClient(h.as(t, "ana")).GetJobGoodput(ctx, &loomv1.GetJobGoodputRequest{Name: matrixJob})
	if err != nil || gp.GetGoodput() != 0.9 || gp.GetName() != matrixJob {
		t.Fatalf("ana's job goodput: %v %v", gp, err)
	}
	bob := loomv1.NewGoodputServiceClient(h.as(t, "bob"))
	_, err = bob.GetJobGoodput(ctx, &loomv1.GetJobGoodputRequest{Name: matrixJob})
	wantCode(t, "bob's view of ana's hidden job", err, codes.NotFound, "job "+matrixJob+": not found")
	c, err := bob.GetClusterGoodput(ctx, &loomv1.GetClusterGoodputRequest{Name: cluster1})
	if err != nil || c.GetName() != cluster1 {
		t.Fatalf("cluster goodput: %v %v", c, err)
	}
	_, err = bob.GetClusterGoodput(ctx, &loomv1.GetClusterGoodputRequest{Name: cluster1, Since: timestamppb.New(time.Now().Add(time.Hour))})
	wantCode(t, "since in the future", err, codes.InvalidArgument, "since", "future")
}
