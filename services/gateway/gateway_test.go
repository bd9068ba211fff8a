package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/bus"
	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/store"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/gateway/internal/adapters"
)

const wait = 30 * time.Second

// TestValidation checks that each rule answers InvalidArgument naming the
// field (and the existence checks their codes), and that none of the
// rejected calls emitted a command or used a job id.
func TestValidation(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := testkit.Context(t, wait)

	type call struct {
		name  string
		do    func() error
		code  codes.Code
		field string
	}
	create := func(mut func(*loomv1.CreateClusterRequest)) func() error {
		return func() error {
			r := validCluster("c2")
			mut(r)
			_, err := h.clusters().CreateCluster(ctx, r)
			return err
		}
	}
	submit := func(mut func(*loomv1.SubmitJobRequest)) func() error {
		return func() error {
			r := validJob()
			mut(r)
			_, err := h.jobs().SubmitJob(ctx, r)
			return err
		}
	}
	for _, c := range []call{
		{"parent required", create(func(r *loomv1.CreateClusterRequest) { r.Parent = "" }), codes.InvalidArgument, "parent"},
		{"bad cluster id", create(func(r *loomv1.CreateClusterRequest) { r.ClusterId = "Bad_Id" }), codes.InvalidArgument, "cluster_id"},
		{"no node pools", create(func(r *loomv1.CreateClusterRequest) { r.Cluster.Compute = nil }), codes.InvalidArgument, "cluster.compute.node_pools"},
		{"pool id", create(func(r *loomv1.CreateClusterRequest) { r.Cluster.Compute.NodePools[0].Id = "" }), codes.InvalidArgument, "cluster.compute.node_pools[0].id"},
		{"duplicate pool", create(func(r *loomv1.CreateClusterRequest) {
			r.Cluster.Compute.NodePools = append(r.Cluster.Compute.NodePools, proto.Clone(r.Cluster.Compute.NodePools[0]).(*loomv1.NodePool))
		}), codes.InvalidArgument, "cluster.compute.node_pools[1].id"},
		{"node count", create(func(r *loomv1.CreateClusterRequest) { r.Cluster.Compute.NodePools[0].NodeCount = 0 }), codes.InvalidArgument, "cluster.compute.node_pools[0].node_count"},
		{"accelerators", create(func(r *loomv1.CreateClusterRequest) { r.Cluster.Compute.NodePools[0].AcceleratorCount = 17 }), codes.InvalidArgument, "cluster.compute.node_pools[0].accelerator_count"},
		{"cluster exists", create(func(r *loomv1.CreateClusterRequest) { r.ClusterId = "c1" }), codes.AlreadyExists, "c1"},
		{"delete unknown", func() error {
			_, err := h.clusters().DeleteCluster(ctx, &loomv1.DeleteClusterRequest{Name: "projects/default/clusters/nope"})
			return err
		}, codes.NotFound, "nope"},
		{"delete bad name", func() error {
			_, err := h.clusters().DeleteCluster(ctx, &loomv1.DeleteClusterRequest{Name: "c1"})
			return err
		}, codes.InvalidArgument, "name"},
		{"job parent", submit(func(r *loomv1.SubmitJobRequest) { r.Parent = "" }), codes.InvalidArgument, "parent"},
		{"job cluster required", submit(func(r *loomv1.SubmitJobRequest) { r.Job.Cluster = "" }), codes.InvalidArgument, "job.cluster"},
		{"job cluster unknown", submit(func(r *loomv1.SubmitJobRequest) { r.Job.Cluster = "projects/default/clusters/nope" }), codes.InvalidArgument, "job.cluster"},
		{"job command and script", submit(func(r *loomv1.SubmitJobRequest) { r.Job.Command = []string{"true"} }), codes.InvalidArgument, "job.command"},
		{"job without command", submit(func(r *loomv1.SubmitJobRequest) { r.Job.Script = "" }), codes.InvalidArgument, "job.command"},
		{"job too many nodes", submit(func(r *loomv1.SubmitJobRequest) { r.Job.NodeCount = 3 }), codes.InvalidArgument, "job.node_count"},
		{"job too many gpus", submit(func(r *loomv1.SubmitJobRequest) { r.Job.GpusPerNode = 9 }), codes.InvalidArgument, "job.gpus_per_node"},
		{"job model id", submit(func(r *loomv1.SubmitJobRequest) { r.Job.ModelOutput = &loomv1.ModelOutput{ModelId: "Bad!"} }), codes.InvalidArgument, "job.model_output.model_id"},
		{"get job bad name", func() error {
			_, err := h.jobs().GetJob(ctx, &loomv1.GetJobRequest{Name: "projects/default/jobs/abc"})
			return err
		}, codes.InvalidArgument, "name"},
		{"get unknown job", func() error {
			_, err := h.jobs().GetJob(ctx, &loomv1.GetJobRequest{Name: "projects/default/jobs/999"})
			return err
		}, codes.NotFound, "999"},
		{"cancel unknown job", func() error {
			_, err := h.jobs().CancelJob(ctx, &loomv1.CancelJobRequest{Name: "projects/default/jobs/999"})
			return err
		}, codes.NotFound, "999"},
		{"unknown operation", func() error {
			_, err := h.ops().GetOperation(ctx, &loomv1.GetOperationRequest{Name: "projects/default/operations/x"})
			return err
		}, codes.NotFound, "x"},
	} {
		err := c.do()
		if status.Code(err) != c.code || !strings.Contains(status.Convert(err).Message(), c.field) {
			t.Errorf("%s: got %v, want %s naming %q", c.name, err, c.code, c.field)
		}
	}

	// Valid calls now, then nothing but them may be on the command topics:
	// the outbox publishes in order, so a rejected call's command would
	// come before them.
	op, err := h.clusters().CreateCluster(ctx, validCluster("c2"))
	if err != nil {
		t.Fatalf("valid CreateCluster: %v", err)
	}
	job, err := h.jobs().SubmitJob(ctx, validJob())
	if err != nil {
		t.Fatalf("valid SubmitJob: %v", err)
	}
	if job.GetJobId() != "1" || job.GetName() != "projects/default/jobs/1" {
		t.Fatalf("first accepted job is %s (%s), want job 1: rejected calls used ids", job.GetName(), job.GetJobId())
	}
	testkit.WaitEvent(t, h.broker, topics.JobCommands, wait, func(e envelope.Event) bool {
		return e.Subject == cluster1 && e.Type == "loom.events.v1.SubmitJob"
	})
	testkit.WaitEvent(t, h.broker, topics.ClusterCommands, wait, func(e envelope.Event) bool {
		c, ok := e.Payload.(*eventsv1.CreateCluster)
		return ok && c.GetOperation() == op.GetName()
	})
	if evs := testkit.Events(t, h.broker, topics.ClusterCommands); len(evs) != 1 {
		t.Errorf("cluster commands: %d events, want only the valid CreateCluster", len(evs))
	}
	if evs := testkit.Events(t, h.broker, topics.JobCommands); len(evs) != 1 {
		t.Errorf("job commands: %d events, want only the valid SubmitJob", len(evs))
	}
}

// TestREST checks the REST/JSON mapping: errors as HTTP codes whose body names
// the field, reads proxied to the owners, and streams as newline-delimited JSON.
func TestREST(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := testkit.Context(t, wait)

	do := func(method, path, body string) (int, string) {
		t.Helper()
		return h.rest(t, ctx, method, path, body)
	}

	code, body := do("POST", "/v1/projects/default/clusters?cluster_id=c2",
		`{"compute": {"node_pools": [{"id": "gpu", "node_count": 0}]}}`)
	if code != http.StatusBadRequest || !strings.Contains(body, "cluster.compute.node_pools[0].node_count") {
		t.Errorf("bad cluster: HTTP %d %s, want 400 naming cluster.compute.node_pools[0].node_count", code, body)
	}
	code, body = do("POST", "/v1/projects/default/clusters?cluster_id=c1",
		`{"compute": {"node_pools": [{"id": "gpu", "machine_type": "a2-highgpu-1g", "node_count": 1}]}}`)
	if code != http.StatusConflict {
		t.Errorf("existing cluster: HTTP %d %s, want 409", code, body)
	}

	code, body = do("GET", "/v1/projects/default/clusters/c1", "")
	var got struct {
		Name   string `json:"name"`
		Status struct {
			State      string `json:"state"`
			TotalNodes int    `json:"total_nodes"`
		} `json:"status"`
	}
	if err := json.Unmarshal([]byte(body), &got); err != nil || code != http.StatusOK {
		t.Fatalf("GET cluster: HTTP %d %s (%v)", code, body, err)
	}
	if got.Name != cluster1 || got.Status.State != "RUNNING" || got.Status.TotalNodes != 3 {
		t.Errorf("GET cluster: %+v", got)
	}
	if code, body = do("GET", "/v1/projects/default/clusters/nope", ""); code != http.StatusNotFound {
		t.Errorf("GET unknown cluster: HTTP %d %s, want 404", code, body)
	}
	if code, body = do("GET", "/v1/projects/default/clusters/c1/nodes", ""); code != http.StatusOK || !strings.Contains(body, "gpu-0001") {
		t.Errorf("list nodes: HTTP %d %s", code, body)
	}
	if code, body = do("GET", "/v1/projects/default/models/m1", ""); code != http.StatusOK || !strings.Contains(body, `"latest_version":"3"`) {
		t.Errorf("get model: HTTP %d %s", code, body)
	}

	// A job submitted over REST, then watched: the scheduler says it ended,
	// so the stream is one JSON line and ends.
	code, body = do("POST", "/v1/projects/default/jobs", `{"cluster": "c1", "command": ["true"]}`)
	if code != http.StatusOK || !strings.Contains(body, `"name":"projects/default/jobs/1"`) || !strings.Contains(body, `"state":"PENDING"`) {
		t.Fatalf("submit job: HTTP %d %s", code, body)
	}
	h.w.setJob(&loomv1.Job{Name: "projects/default/jobs/1", JobId: "1", Cluster: cluster1, State: loomv1.JobState_COMPLETED})
	req, _ := http.NewRequestWithContext(ctx, "GET", h.restBase+"/v1/projects/default/jobs/1:watch", nil)
	resp, err := h.http.Do(req)
	if err != nil {
		t.Fatalf("watch: %v", err)
	}
	defer resp.Body.Close()
	var lines []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) != "" {
			lines = append(lines, sc.Text())
		}
	}
	if len(lines) != 1 || !strings.Contains(lines[0], `"result"`) || !strings.Contains(lines[0], "COMPLETED") {
		t.Errorf("watch stream: %q, want one COMPLETED line", lines)
	}
}

// TestOperationLifecycle drives operations with events a provisioner would
// publish, and checks WaitOperation, progress, failure and deletion, and
// request_id idempotency.
func TestOperationLifecycle(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := testkit.Context(t, 2*wait)
	prod := bus.NewProducer([]string{h.broker})
	prod.SetSigner(testkit.SignerAs("provisioner"))
	t.Cleanup(func() { _ = prod.Close() })
	publish := func(key string, payload proto.Message) {
		t.Helper()
		if err := prod.Publish(ctx, envelope.New(topics.ClusterEvents, key, "loom/provisioner", payload)); err != nil {
			t.Fatalf("publish: %v", err)
		}
	}
	const c2 = "projects/default/clusters/c2"

	req := validCluster("c2")
	req.RequestId = "req-create-c2"
	op, err := h.clusters().CreateCluster(ctx, req)
	if err != nil {
		t.Fatalf("CreateCluster: %v", err)
	}
	if op.GetDone() || op.GetMetadata().GetTarget() != c2 || !strings.HasPrefix(op.GetName(), "projects/default/operations/") {
		t.Fatalf("operation: %v", op)
	}
	again, err := h.clusters().CreateCluster(ctx, req)
	if err != nil || again.GetName() != op.GetName() {
		t.Fatalf("retry with the request id: %v %v, want %s", again, err, op.GetName())
	}
	// The same request_id for another cluster_id is refused: answered c2's
	// operation, the caller would wait for a cluster never created.
	c3 := validCluster("c3")
	c3.RequestId = req.RequestId
	_, err = h.clusters().CreateCluster(ctx, c3)
	wantCode(t, "req-create-c2 for c3", err, codes.InvalidArgument, "request_id", "different request")
	cmd := testkit.WaitEvent(t, h.broker, topics.ClusterCommands, wait, func(e envelope.Event) bool {
		c, ok := e.Payload.(*eventsv1.CreateCluster)
		return ok && c.GetOperation() == op.GetName()
	})
	if c := cmd.Payload.(*eventsv1.CreateCluster).GetCluster(); c.GetName() != c2 || cmd.Key != c2 || len(c.GetCompute().GetNodePools()) != 1 {
		t.Fatalf("CreateCluster command: %v (key %s)", c, cmd.Key)
	}

	// Not done yet: a short wait returns the operation as it is.
	if w, err := h.ops().WaitOperation(ctx, &loomv1.WaitOperationRequest{Name: op.GetName(), TimeoutSeconds: 1}); err != nil || w.GetDone() {
		t.Fatalf("short wait: %v %v, want not done", w, err)
	}

	creating := &loomv1.Cluster{Name: c2, Status: &loomv1.ClusterStatus{State: loomv1.Cluster_CREATING, ReadyNodes: 1, TotalNodes: 2}}
	publish(c2, &eventsv1.ClusterChanged{Operation: op.GetName(), Cluster: creating})
	testkit.WaitFor(t, wait, "operation progress", func() (bool, error) {
		o, err := h.ops().GetOperation(ctx, &loomv1.GetOperationRequest{Name: op.GetName()})
		return o.GetMetadata().GetProgress() == "1 of 2 nodes ready", err
	})

	waited := make(chan *loomv1.Operation, 1)
	waitErr := make(chan error, 1)
	go func() {
		o, err := h.ops().WaitOperation(ctx, &loomv1.WaitOperationRequest{Name: op.GetName(), TimeoutSeconds: 60})
		waited <- o
		waitErr <- err
	}()
	running := proto.Clone(creating).(*loomv1.Cluster)
	running.Status.State, running.Status.ReadyNodes = loomv1.Cluster_RUNNING, 2
	publish(c2, &eventsv1.ClusterChanged{Operation: op.GetName(), Cluster: running, OperationDone: true})
	var done *loomv1.Operation
	select {
	case done = <-waited:
		if err := <-waitErr; err != nil {
			t.Fatalf("WaitOperation: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("WaitOperation did not return")
	}
	if !done.GetDone() || !proto.Equal(done.GetCluster(), running) || done.GetMetadata().GetEndTime() == nil {
		t.Fatalf("done operation: %v", done)
	}

	// A create the provisioner refuses ends with its error code.
	op3, err := h.clusters().CreateCluster(ctx, validCluster("c3"))
	if err != nil {
		t.Fatalf("CreateCluster c3: %v", err)
	}
	publish("projects/default/clusters/c3", &eventsv1.ClusterOperationFailed{
		Operation: op3.GetName(), Cluster: "projects/default/clusters/c3", Code: int32(codes.AlreadyExists), Message: "exists",
	})
	failed, err := h.ops().WaitOperation(ctx, &loomv1.WaitOperationRequest{Name: op3.GetName(), TimeoutSeconds: 30})
	if err != nil || !failed.GetDone() || failed.GetError().GetCode() != int32(codes.AlreadyExists) {
		t.Fatalf("failed operation: %v %v", failed, err)
	}

	// A completion applied by another gateway instance (straight into the
	// shared Redis) is seen by a waiter here too.
	op4, err := h.clusters().CreateCluster(ctx, validCluster("c4"))
	if err != nil {
		t.Fatalf("CreateCluster c4: %v", err)
	}
	go func() {
		o, err := h.ops().WaitOperation(ctx, &loomv1.WaitOperationRequest{Name: op4.GetName(), TimeoutSeconds: 30})
		waited <- o
		waitErr <- err
	}()
	finished := proto.Clone(op4).(*loomv1.Operation)
	finished.Done = true
	finished.Result = &loomv1.Operation_Error{Error: &loomv1.OperationError{Code: 13, Message: "elsewhere"}}
	tx := &store.Tx{}
	if err := adapters.PutOperation(tx, finished); err != nil {
		t.Fatal(err)
	}
	if _, err := store.New(h.redis, "gateway:").Apply(ctx, "", tx); err != nil {
		t.Fatalf("apply as another instance: %v", err)
	}
	select {
	case o := <-waited:
		if err := <-waitErr; err != nil || !o.GetDone() || o.GetError().GetMessage() != "elsewhere" {
			t.Fatalf("WaitOperation after another instance finished it: %v %v", o, err)
		}
	case <-ctx.Done():
		t.Fatal("WaitOperation did not see a completion applied elsewhere")
	}

	// Delete.
	del, err := h.clusters().DeleteCluster(ctx, &loomv1.DeleteClusterRequest{Name: cluster1, RequestId: "del-1"})
	if err != nil {
		t.Fatalf("DeleteCluster: %v", err)
	}
	testkit.WaitEvent(t, h.broker, topics.ClusterCommands, wait, func(e envelope.Event) bool {
		d, ok := e.Payload.(*eventsv1.DeleteCluster)
		return ok && d.GetOperation() == del.GetName() && d.GetCluster() == cluster1
	})
	// While it is being deleted, another delete is refused at once (it
	// was accepted, then failed in the provisioner).
	h.w.mu.Lock()
	deleting := proto.Clone(h.w.clusters[cluster1]).(*loomv1.Cluster)
	if deleting.Status == nil {
		deleting.Status = &loomv1.ClusterStatus{}
	}
	deleting.Status.State = loomv1.Cluster_DELETING
	h.w.clusters[cluster1] = deleting
	h.w.mu.Unlock()
	_, err = h.clusters().DeleteCluster(ctx, &loomv1.DeleteClusterRequest{Name: cluster1})
	wantCode(t, "a second delete", err, codes.FailedPrecondition, "DELETING already")
	publish(cluster1, &eventsv1.ClusterDeleted{Operation: del.GetName(), Cluster: cluster1})
	gone, err := h.ops().WaitOperation(ctx, &loomv1.WaitOperationRequest{Name: del.GetName(), TimeoutSeconds: 30})
	if err != nil || !gone.GetDone() || gone.GetError() != nil {
		t.Fatalf("delete operation: %v %v", gone, err)
	}
	// The cluster is gone now, yet a retry still returns the first operation.
	h.w.mu.Lock()
	delete(h.w.clusters, cluster1)
	h.w.mu.Unlock()
	if again, err := h.clusters().DeleteCluster(ctx, &loomv1.DeleteClusterRequest{Name: cluster1, RequestId: "del-1"}); err != nil || again.GetName() != del.GetName() {
		t.Fatalf("delete retry: %v %v", again, err)
	}
	// The same request_id for another cluster is refused, naming it.
	_, err = h.clusters().DeleteCluster(ctx, &loomv1.DeleteClusterRequest{Name: project + "/clusters/another", RequestId: "del-1"})
	wantCode(t, "del-1 for another cluster", err, codes.InvalidArgument, "request_id", "different request")
}

// TestJobs checks SubmitJob idempotency, the accepted-record fallback,
// CancelJob, WatchJob fed from job.events, and ReadJobLogs.
func TestJobs(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := testkit.Context(t, 2*wait)

	req := validJob()
	req.RequestId = "submit-1"
	first, err := h.jobs().SubmitJob(ctx, req)
	if err != nil {
		t.Fatalf("SubmitJob: %v", err)
	}
	again, err := h.jobs().SubmitJob(ctx, req)
	if err != nil || again.GetName() != first.GetName() {
		t.Fatalf("retry: %v %v, want %s", again, err, first.GetName())
	}
	// Another job under the same request_id is refused, not answered
	// job 1 (its script would never run).
	changed := proto.Clone(req).(*loomv1.SubmitJobRequest)
	changed.Job.Script = "#!/bin/sh\necho another\n"
	_, err = h.jobs().SubmitJob(ctx, changed)
	wantCode(t, "submit-1 with another script", err, codes.InvalidArgument, "request_id", "different request")
	second, err := h.jobs().SubmitJob(ctx, validJob())
	if err != nil || second.GetJobId() != "2" {
		t.Fatalf("second job: %v %v, want job 2", second, err)
	}
	testkit.WaitEvent(t, h.broker, topics.JobCommands, wait, func(e envelope.Event) bool {
		s, ok := e.Payload.(*eventsv1.SubmitJob)
		return ok && s.GetJob().GetName() == second.GetName()
	})
	submits := 0
	for _, e := range testkit.Events(t, h.broker, topics.JobCommands) {
		if s, ok := e.Payload.(*eventsv1.SubmitJob); ok {
			submits++
			if s.GetJob().GetName() == first.GetName() && (s.GetJob().GetNodeCount() != 2 || s.GetJob().GetState() != loomv1.JobState_PENDING) {
				t.Errorf("SubmitJob command: %v", s.GetJob())
			}
		}
	}
	if submits != 2 {
		t.Fatalf("%d SubmitJob commands, want 2 (one per job)", submits)
	}

	// The scheduler does not know job 1 yet: the accepted record answers.
	got, err := h.jobs().GetJob(ctx, &loomv1.GetJobRequest{Name: first.GetName()})
	if err != nil || got.GetState() != loomv1.JobState_PENDING || got.GetSubmitTime() == nil {
		t.Fatalf("GetJob fallback: %v %v", got, err)
	}
	list, err := h.jobs().ListJobs(ctx, &loomv1.ListJobsRequest{Parent: project})
	if err != nil || len(list.GetJobs()) != 2 || list.GetJobs()[0].GetJobId() != "1" {
		t.Fatalf("ListJobs: %v %v", list, err)
	}

	cancelled, err := h.jobs().CancelJob(ctx, &loomv1.CancelJobRequest{Name: second.GetName()})
	if err != nil || cancelled.GetName() != second.GetName() {
		t.Fatalf("CancelJob: %v %v", cancelled, err)
	}
	testkit.WaitEvent(t, h.broker, topics.JobCommands, wait, func(e envelope.Event) bool {
		c, ok := e.Payload.(*eventsv1.CancelJob)
		return ok && c.GetJob() == second.GetName() && c.GetCluster() == cluster1 && e.Key == cluster1
	})

	t.Run("watch", func(t *testing.T) { testWatch(t, h, ctx, first) })
	t.Run("logs", func(t *testing.T) { testLogs(t, h, ctx) })
}

// testWatch watches job (PENDING at the scheduler) and feeds changes on
// job.events as the scheduler would.
func testWatch(t *testing.T, h *harness, ctx context.Context, job *loomv1.Job) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := h.jobs().WatchJob(wctx, &loomv1.WatchJobRequest{Name: job.GetName()})
	if err != nil {
		t.Fatalf("WatchJob: %v", err)
	}
	type recv struct {
		j   *loomv1.Job
		err error
	}
	got := make(chan recv, 16)
	go func() {
		for {
			j, err := stream.Recv()
			got <- recv{j, err}
			if err != nil {
				return
			}
		}
	}()
	next := func(d time.Duration) (recv, bool) {
		select {
		case r := <-got:
			return r, true
		case <-time.After(d):
			return recv{}, false
		}
	}
	r, ok := next(wait)
	if !ok || r.err != nil || r.j.GetState() != loomv1.JobState_PENDING {
		t.Fatalf("first message: %v %v, want the current PENDING job", r.j, r.err)
	}

	prod := bus.NewProducer([]string{h.broker})
	prod.SetSigner(testkit.SignerAs("scheduler"))
	defer prod.Close()
	change := func(s loomv1.JobState) {
		j := proto.Clone(job).(*loomv1.Job)
		j.State = s
		ev := envelope.New(topics.JobEvents, cluster1, "loom/scheduler", &eventsv1.JobChanged{Job: j, Attempt: 1})
		ev.Subject = j.GetName() // as the scheduler sends it: the feed reads the subject
		if err := prod.Publish(ctx, ev); err != nil {
			t.Fatalf("publish: %v", err)
		}
	}
	// The feed is reading before the watch sends its first message: the
	// first change after it arrives, once (the scheduler here still says
	// PENDING, so only the feed can bring RUNNING).
	change(loomv1.JobState_RUNNING)
	if r, ok = next(wait); !ok {
		t.Fatal("the change after the first message did not reach the watcher")
	}
	if r.err != nil || r.j.GetState() != loomv1.JobState_RUNNING {
		t.Fatalf("second message: %v %v, want RUNNING", r.j, r.err)
	}
	change(loomv1.JobState_COMPLETED)
	r, ok = next(wait)
	if !ok {
		t.Fatal("watch did not end after the terminal state")
	}
	if r.err != nil {
		t.Fatalf("stream error before the terminal state: %v", r.err)
	}
	if r.j.GetState() != loomv1.JobState_COMPLETED {
		t.Fatalf("got %s, want COMPLETED", r.j.GetState())
	}
	if r, ok = next(wait); !ok || !errors.Is(r.err, io.EOF) {
		t.Fatalf("after COMPLETED: %v %v, want the end of the stream", r.j, r.err)
	}
}

// testLogs reads a job's output file, once and following it to the end.
func testLogs(t *testing.T, h *harness, ctx context.Context) {
	out := filepath.Join(t.TempDir(), "slurm-7.out")
	if err := os.WriteFile(out, []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	job := &loomv1.Job{Name: "projects/default/jobs/7", JobId: "7", Cluster: cluster1, State: loomv1.JobState_RUNNING, OutputPath: out}
	h.w.setJob(job)
	readAll := func(stream grpc.ServerStreamingClient[loomv1.LogChunk]) (string, error) {
		var b strings.Builder
		for {
			c, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				return b.String(), nil
			}
			if err != nil {
				return b.String(), err
			}
			b.Write(c.GetData())
		}
	}
	s, err := h.jobs().ReadJobLogs(ctx, &loomv1.ReadJobLogsRequest{Name: job.GetName()})
	if err != nil {
		t.Fatal(err)
	}
	if text, err := readAll(s); err != nil || text != "hello\n" {
		t.Fatalf("logs: %q %v", text, err)
	}

	follow, err := h.jobs().ReadJobLogs(ctx, &loomv1.ReadJobLogsRequest{Name: job.GetName(), Follow: true})
	if err != nil {
		t.Fatal(err)
	}
	first, err := follow.Recv()
	if err != nil || string(first.GetData()) != "hello\n" {
		t.Fatalf("first chunk: %v %v", first, err)
	}
	f, err := os.OpenFile(out, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("world\n"); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	job.State = loomv1.JobState_COMPLETED
	h.w.setJob(job)
	rest, err := readAll(follow)
	if err != nil || rest != "world\n" {
		t.Fatalf("followed logs: %q %v, want the appended line then the end", rest, err)
	}

	// The last lines only (tail -n), and a negative count refused.
	s, err = h.jobs().ReadJobLogs(ctx, &loomv1.ReadJobLogsRequest{Name: job.GetName(), TailLines: 1})
	if err != nil {
		t.Fatal(err)
	}
	if text, err := readAll(s); err != nil || text != "world\n" {
		t.Fatalf("tail_lines 1: %q %v, want the last line", text, err)
	}
	s, err = h.jobs().ReadJobLogs(ctx, &loomv1.ReadJobLogsRequest{Name: job.GetName(), TailLines: -1})
	if err != nil {
		t.Fatal(err)
	}
	if text, err := readAll(s); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "tail_lines") || text != "" {
		t.Fatalf("tail_lines -1: %q %v, want InvalidArgument naming tail_lines", text, err)
	}

	// The output of a job that ran and ended, gone (its ephemeral cluster
	// deleted): NotFound saying so, not an empty log.
	if err := os.Remove(out); err != nil {
		t.Fatal(err)
	}
	job.StartTime = timestamppb.Now()
	h.w.setJob(job)
	s, err = h.jobs().ReadJobLogs(ctx, &loomv1.ReadJobLogsRequest{Name: job.GetName()})
	if err != nil {
		t.Fatal(err)
	}
	if text, err := readAll(s); status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), "no longer exists") || text != "" {
		t.Fatalf("logs of a removed output: %q %v, want NotFound", text, err)
	}
}

// TestSubmitJobRetriesReplay checks the replay paths of SubmitJob's one-trip
// request check: a request recorded by an earlier version (in the requests
// hash) and a request that would be refused now (its cluster is gone) both
// answer the job they made, and job ids stay consecutive across retries.
func TestSubmitJobRetriesReplay(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := testkit.Context(t, 2*wait)

	req := validJob()
	req.RequestId = "first"
	first, err := h.jobs().SubmitJob(ctx, req)
	if err != nil {
		t.Fatalf("SubmitJob: %v", err)
	}
	// As an earlier gateway recorded requests: a field of the requests hash.
	if err := h.redis.HSet(ctx, "gateway:"+adapters.KeyRequests, adapters.RequestSubmitJob+":legacy", first.GetName()).Err(); err != nil {
		t.Fatal(err)
	}
	legacy := validJob()
	legacy.RequestId = "legacy"
	if j, err := h.jobs().SubmitJob(ctx, legacy); err != nil || j.GetName() != first.GetName() {
		t.Fatalf("retry of a request recorded in the hash: %v %v, want %s", j, err, first.GetName())
	}
	again, err := h.jobs().SubmitJob(ctx, req)
	if err != nil || again.GetName() != first.GetName() {
		t.Fatalf("retry: %v %v, want %s", again, err, first.GetName())
	}
	next, err := h.jobs().SubmitJob(ctx, validJob())
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprint(mustAtoi(t, first.GetJobId()) + 1); next.GetJobId() != want {
		t.Fatalf("next job id %s, want %s: retries must not use up ids", next.GetJobId(), want)
	}

	// The cluster goes away: a new submission to it is refused, a retry of
	// the accepted one still answers its job.
	h.w.mu.Lock()
	delete(h.w.clusters, cluster1)
	h.w.mu.Unlock()
	// (The gateway trusts a cluster it read for a second: wait for that.)
	testkit.WaitFor(t, wait, "submissions to the deleted cluster refused", func() (bool, error) {
		_, err := h.jobs().SubmitJob(ctx, validJob())
		return err != nil, nil
	})
	if j, err := h.jobs().SubmitJob(ctx, req); err != nil || j.GetName() != first.GetName() {
		t.Fatalf("retry after the cluster was deleted: %v %v, want %s", j, err, first.GetName())
	}
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("%q is not a number: %v", s, err)
	}
	return n
}

// TestPrivateDataSetting: -private-data takes "jobs" (blanks and empty
// items ignored) and refuses what it does not know, naming the flag.
func TestPrivateDataSetting(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]bool{"": false, "jobs": true, " jobs , ": true} {
		if got, err := privateJobs(in); err != nil || got != want {
			t.Errorf("privateJobs(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if _, err := privateJobs("jobs,usage"); err == nil || !strings.Contains(err.Error(), "private-data") {
		t.Errorf("an unknown PrivateData item: %v, want refused naming private-data", err)
	}
}
