package gateway

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/bus"
	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/paging"
	"github.com/loom-ml/loom/libs/store"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/gateway/internal/adapters"
)

// TestListAndCancelOperations lists a project's operations page by page and
// with filters, cancels a cluster create (which answers CANCELLED and
// deletes the cluster through a new delete operation), refuses to cancel a
// delete, and checks who may call both, over gRPC and REST.
func TestListAndCancelOperations(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := testkit.Context(t, 2*wait)

	var creates []*loomv1.Operation
	for _, id := range []string{"l1", "l2", "l3"} {
		op, err := h.clusters().CreateCluster(ctx, validCluster(id))
		if err != nil {
			t.Fatalf("CreateCluster %s: %v", id, err)
		}
		creates = append(creates, op)
	}
	del, err := h.clusters().DeleteCluster(ctx, &loomv1.DeleteClusterRequest{Name: cluster1})
	if err != nil {
		t.Fatalf("DeleteCluster: %v", err)
	}
	started := append(append([]*loomv1.Operation{}, creates...), del)

	// Pages of 2: every operation once, in the order they were started.
	var names []string
	tok := ""
	for range 5 {
		resp, err := h.ops().ListOperations(ctx, &loomv1.ListOperationsRequest{Parent: project, PageSize: 2, PageToken: tok})
		if err != nil {
			t.Fatalf("ListOperations: %v", err)
		}
		if len(resp.GetOperations()) > 2 {
			t.Fatalf("page of %d, want at most 2", len(resp.GetOperations()))
		}
		for _, op := range resp.GetOperations() {
			names = append(names, op.GetName())
		}
		if tok = resp.GetNextPageToken(); tok == "" {
			break
		}
	}
	var want []string
	for _, op := range started {
		want = append(want, op.GetName())
	}
	if strings.Join(names, " ") != strings.Join(want, " ") {
		t.Fatalf("listed %q, want %q", names, want)
	}

	// Filters.
	count := func(filter string) int {
		t.Helper()
		resp, err := h.ops().ListOperations(ctx, &loomv1.ListOperationsRequest{Parent: project, Filter: filter})
		if err != nil {
			t.Fatalf("ListOperations filter %q: %v", filter, err)
		}
		return len(resp.GetOperations())
	}
	if n := count("verb=create"); n != 3 {
		t.Errorf("verb=create: %d operations, want 3", n)
	}
	if n := count("verb=delete AND done=false"); n != 1 {
		t.Errorf("verb=delete AND done=false: %d operations, want 1", n)
	}
	if n := count(`target="projects/default/clusters/l2"`); n != 1 {
		t.Errorf("target=l2: %d operations, want 1", n)
	}
	_, err = h.ops().ListOperations(ctx, &loomv1.ListOperationsRequest{Parent: project, Filter: "verb=(("})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "filter") {
		t.Errorf("bad filter: %v, want InvalidArgument naming filter", err)
	}
	// A filter that could only match nothing is refused, naming what it
	// may filter on: an unknown key, done other than true or false.
	for f, want := range map[string]string{"state=DONE": `unknown field "state": filter on done, verb, target`, "done=yes": "yes"} {
		_, err = h.ops().ListOperations(ctx, &loomv1.ListOperationsRequest{Parent: project, Filter: f})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), want) {
			t.Errorf("filter %s: %v, want InvalidArgument saying %q", f, err, want)
		}
	}
	first, err := h.ops().ListOperations(ctx, &loomv1.ListOperationsRequest{Parent: project, PageSize: 1})
	if err != nil || first.GetNextPageToken() == "" {
		t.Fatalf("first page: %v %v, want a next page", first, err)
	}
	_, err = h.ops().ListOperations(ctx, &loomv1.ListOperationsRequest{Parent: project, PageSize: 1, PageToken: first.GetNextPageToken(), Filter: "done=true"})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "page_token") {
		t.Errorf("token with another filter: %v, want InvalidArgument naming page_token", err)
	}

	// A delete cannot be cancelled; the answer says what to do instead.
	_, err = h.ops().CancelOperation(ctx, &loomv1.CancelOperationRequest{Name: del.GetName()})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "cannot be cancelled") {
		t.Errorf("cancel a delete: %v, want FailedPrecondition", err)
	}

	// Viewers list but may not cancel; another project's admin does neither.
	if _, err := h.ops().ListOperations(ctx, &loomv1.ListOperationsRequest{Parent: project}, h.call("vic")); err != nil {
		t.Errorf("ListOperations as a viewer: %v", err)
	}
	if _, err := h.ops().CancelOperation(ctx, &loomv1.CancelOperationRequest{Name: creates[0].GetName()}, h.call("vic")); status.Code(err) != codes.PermissionDenied {
		t.Errorf("CancelOperation as a viewer: %v, want PermissionDenied", err)
	}
	if _, err := h.ops().ListOperations(ctx, &loomv1.ListOperationsRequest{Parent: project}, h.call("oz")); err == nil {
		t.Error("ListOperations by another project's admin succeeded")
	}

	// Cancel a create: CANCELLED, and the cluster is deleted through a
	// new delete operation.
	l1 := "projects/default/clusters/l1"
	cancelled, err := h.ops().CancelOperation(ctx, &loomv1.CancelOperationRequest{Name: creates[0].GetName()}, h.call("pat"))
	if err != nil {
		t.Fatalf("CancelOperation: %v", err)
	}
	if !cancelled.GetDone() || cancelled.GetError().GetCode() != int32(codes.Canceled) || cancelled.GetMetadata().GetEndTime() == nil {
		t.Fatalf("cancelled operation: %v", cancelled)
	}
	cmd := testkit.WaitEvent(t, h.broker, topics.ClusterCommands, wait, func(e envelope.Event) bool {
		c, ok := e.Payload.(*eventsv1.DeleteCluster)
		return ok && c.GetCluster() == l1
	})
	delOp := cmd.Payload.(*eventsv1.DeleteCluster).GetOperation()
	if cmd.Key != l1 || !strings.Contains(cancelled.GetError().GetMessage(), delOp) {
		t.Fatalf("DeleteCluster command %v (key %s); the cancelled operation's message %q should name %s", cmd.Payload, cmd.Key, cancelled.GetError().GetMessage(), delOp)
	}
	again, err := h.ops().CancelOperation(ctx, &loomv1.CancelOperationRequest{Name: creates[0].GetName()})
	if err != nil || !proto.Equal(again, cancelled) {
		t.Fatalf("second cancel: %v %v, want the cancelled operation again", again, err)
	}

	// The provisioner then fails the create (Aborted) and finishes the
	// delete: the create stays CANCELLED, the delete is done.
	prod := bus.NewProducer([]string{h.broker})
	prod.SetSigner(testkit.SignerAs("provisioner"))
	t.Cleanup(func() { _ = prod.Close() })
	for _, p := range []proto.Message{
		&eventsv1.ClusterOperationFailed{Operation: creates[0].GetName(), Cluster: l1, Code: int32(codes.Aborted), Message: "deleted before the operation ended"},
		&eventsv1.ClusterDeleted{Operation: delOp, Cluster: l1},
	} {
		if err := prod.Publish(ctx, envelope.New(topics.ClusterEvents, l1, "loom/provisioner", p)); err != nil {
			t.Fatalf("publish: %v", err)
		}
	}
	deleted, err := h.ops().WaitOperation(ctx, &loomv1.WaitOperationRequest{Name: delOp, TimeoutSeconds: 30})
	if err != nil || !deleted.GetDone() || deleted.GetCluster().GetStatus().GetState() != loomv1.Cluster_DELETED {
		t.Fatalf("delete operation: %v %v, want done", deleted, err)
	}
	after, err := h.ops().GetOperation(ctx, &loomv1.GetOperationRequest{Name: creates[0].GetName()})
	if err != nil || after.GetError().GetCode() != int32(codes.Canceled) {
		t.Fatalf("create after the provisioner's failure: %v %v, want still CANCELLED", after, err)
	}
	if _, err := h.ops().CancelOperation(ctx, &loomv1.CancelOperationRequest{Name: delOp}); status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "already done") ||
		strings.Count(status.Convert(err).Message(), delOp) != 1 {
		t.Errorf("cancel a done delete: %v, want FailedPrecondition", err)
	}

	// REST: the list and the cancel.
	rest := func(method, path string) (int, map[string]any) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, method, h.restBase+path, strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := h.http.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("%s %s: %s: %v", method, path, b, err)
		}
		return resp.StatusCode, m
	}
	code, m := rest(http.MethodGet, "/v1/projects/default/operations?pageSize=2&filter=verb%3Dcreate")
	if ops, _ := m["operations"].([]any); code != http.StatusOK || len(ops) != 2 || m["nextPageToken"] == "" {
		t.Errorf("GET operations: %d %v, want 2 operations and a next page", code, m)
	}
	code, m = rest(http.MethodPost, "/v1/"+creates[1].GetName()+":cancel")
	if e, _ := m["error"].(map[string]any); code != http.StatusOK || m["done"] != true || e["code"] != float64(codes.Canceled) {
		t.Errorf("POST :cancel: %d %v, want the operation done with code 1", code, m)
	}
	code, _ = rest(http.MethodPost, "/v1/"+del.GetName()+":cancel")
	if code != http.StatusBadRequest {
		t.Errorf("POST :cancel of a delete: %d, want 400 (FailedPrecondition)", code)
	}
}

// TestListOperationsPagesALargeHash lists a project's operations from a
// hash holding more than one HSCAN step of them (adapters.OperationScanChunk)
// and another project's: every one of the project's once, in name order,
// none of the other project's, pages of at most page_size.
func TestListOperationsPagesALargeHash(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := testkit.Context(t, 2*wait)
	const mine, theirs = 1234, 300
	tx := &store.Tx{}
	want := map[string]bool{}
	for i := range mine + theirs {
		p := "default"
		if i >= mine {
			p = "other"
		}
		op := &loomv1.Operation{Name: fmt.Sprintf("projects/%s/operations/%s", p, envelope.NewID()),
			Metadata: &loomv1.OperationMetadata{Verb: "create", Target: "projects/" + p + "/clusters/x"}}
		if p == "default" {
			want[op.GetName()] = true
		}
		if err := adapters.PutOperation(tx, op); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := store.New(h.redis, "gateway:").Apply(ctx, "", tx); err != nil {
		t.Fatal(err)
	}
	var names []string
	pages := 0
	err := paging.Each(func(tok string) (string, error) {
		resp, err := h.ops().ListOperations(ctx, &loomv1.ListOperationsRequest{Parent: project, PageSize: 500, PageToken: tok})
		if len(resp.GetOperations()) > 500 {
			t.Fatalf("page of %d, want at most 500", len(resp.GetOperations()))
		}
		pages++
		for _, op := range resp.GetOperations() {
			names = append(names, op.GetName())
		}
		return resp.GetNextPageToken(), err
	})
	if err != nil {
		t.Fatal(err)
	}
	if pages != 3 || len(names) != mine || !slices.IsSorted(names) {
		t.Fatalf("%d pages, %d operations (sorted: %v), want 3 pages of the %d in name order", pages, len(names), slices.IsSorted(names), mine)
	}
	for _, n := range names {
		if !want[n] {
			t.Fatalf("listed %s, not one of project default's, or twice", n)
		}
		delete(want, n)
	}
}
