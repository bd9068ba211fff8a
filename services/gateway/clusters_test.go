package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/gateway/internal/domain"
)

const (
	trainName = "projects/default/clusters/train"
	h200Res   = "projects/default/reservations/h200-res"
)

// trainSpec is a spec as a user writes it: a reservation GPU pool and a CPU pool.
func trainSpec() *loomv1.Cluster {
	return &loomv1.Cluster{
		DisplayName: "training",
		Compute: &loomv1.ComputeResources{NodePools: []*loomv1.NodePool{
			{Id: "gpu", MachineType: "a3-ultragpu-8g", NodeCount: 2,
				Capacity: &loomv1.CapacitySource{Type: loomv1.CapacitySource_RESERVATION, Reservation: "h200-res"}},
			{Id: "cpu", MachineType: "n2-standard-8", NodeCount: 1},
		}},
		Network: &loomv1.NetworkConfig{Zone: "us-central1-a"},
	}
}

// setTrain puts cluster "train" into the fake provisioner, RUNNING with its
// normalized spec, and capacity where it holds 2 of h200-res's 4 nodes.
func setTrain(h *harness) *loomv1.Cluster {
	c := domain.NormalizeSpec(trainSpec())
	c.Name = trainName
	c.Status = &loomv1.ClusterStatus{State: loomv1.Cluster_RUNNING, ReadyNodes: 3, TotalNodes: 3}
	h.w.setCluster(c)
	h.w.setReservation(&loomv1.Reservation{Name: h200Res, Zone: "us-central1-a", MachineType: "a3-ultragpu-8g",
		Count: 4, InUse: 2, Consumers: []string{trainName}})
	h.w.setCapacity(
		&loomv1.CapacityPool{Zone: "us-central1-a", MachineType: "a3-ultragpu-8g", Type: loomv1.CapacitySource_RESERVATION,
			Reservation: h200Res, Total: 4, InUse: 2, Free: 2},
		&loomv1.CapacityPool{Zone: "us-central1-a", MachineType: "a3-ultragpu-8g", Type: loomv1.CapacitySource_ON_DEMAND, Total: 16, Free: 16},
		&loomv1.CapacityPool{Zone: "us-central1-a", MachineType: "n2-standard-8", Type: loomv1.CapacitySource_ON_DEMAND, Total: 50, InUse: 1, Free: 49},
	)
	return c
}

// publishClusterEvent publishes payload on loom.cluster.events.v1 as the provisioner would.
func publishClusterEvent(t *testing.T, h *harness, key string, payload proto.Message) {
	t.Helper()
	testkit.PublishAs(t, h.broker, "provisioner", envelope.New(topics.ClusterEvents, key, "loom/provisioner", payload))
}

// wantCode fails the test unless err has code and its message contains each of want.
func wantCode(t *testing.T, what string, err error, code codes.Code, want ...string) {
	t.Helper()
	st := status.Convert(err)
	if st.Code() != code {
		t.Errorf("%s: got %v, want %s", what, err, code)
		return
	}
	for _, w := range want {
		if !strings.Contains(st.Message(), w) {
			t.Errorf("%s: message %q does not contain %q", what, st.Message(), w)
		}
	}
}

// waitDone waits for operation name to be done.
func waitDone(t *testing.T, h *harness, ctx context.Context, name string) *loomv1.Operation {
	t.Helper()
	op, err := h.ops().WaitOperation(ctx, &loomv1.WaitOperationRequest{Name: name, TimeoutSeconds: 30})
	if err != nil || !op.GetDone() {
		t.Fatalf("operation %s: %v %v, want done", name, op, err)
	}
	return op
}

// TestCreateClusterSpec checks that spec rules reach the client as
// InvalidArgument under "cluster.", that a create beyond free capacity is
// refused saying what is free where, that the command carries the
// normalized spec, and that refused creates emit nothing.
func TestCreateClusterSpec(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	setTrain(h)
	ctx := testkit.Context(t, wait)
	create := func(id string, mut func(*loomv1.Cluster)) error {
		c := trainSpec()
		mut(c)
		_, err := h.clusters().CreateCluster(ctx, &loomv1.CreateClusterRequest{Parent: project, ClusterId: id, Cluster: c})
		return err
	}

	wantCode(t, "unknown machine type", create("c2", func(c *loomv1.Cluster) {
		c.Compute.NodePools[0].MachineType = "a3-ultragpu-9g"
	}), codes.InvalidArgument, "cluster.compute.node_pools[0].machine_type")
	wantCode(t, "partition over a missing node set", create("c2", func(c *loomv1.Cluster) {
		c.Orchestrator = &loomv1.Orchestrator{Slurm: &loomv1.SlurmOrchestrator{
			NodeSets:   []*loomv1.SlurmNodeSet{{Id: "gpu-a", NodePoolId: "gpu"}},
			Partitions: []*loomv1.SlurmPartition{{Id: "batch", NodeSetIds: []string{"gpu-a"}}, {Id: "big", NodeSetIds: []string{"gpu-b"}}},
		}}
	}), codes.InvalidArgument, "cluster.orchestrator.slurm.partitions[1].node_set_ids[0]")
	wantCode(t, "every problem at once", create("Bad_Id", func(c *loomv1.Cluster) {
		c.Network.Mtu = 9500
		c.Compute.NodePools[1].NodeCount = 0
	}), codes.InvalidArgument, "cluster_id", "cluster.network.mtu", "cluster.compute.node_pools[1].node_count")
	wantCode(t, "more than the reservation has free", create("c2", func(c *loomv1.Cluster) {
		c.Compute.NodePools[0].NodeCount = 4
	}), codes.FailedPrecondition,
		"pool gpu needs 4 × a3-ultragpu-8g (RESERVATION h200-res) in us-central1-a: 2 free; on-demand a3-ultragpu-8g: 16 free in us-central1-a")
	wantCode(t, "an existing cluster", create("train", func(*loomv1.Cluster) {}), codes.AlreadyExists, trainName)

	op, err := h.clusters().CreateCluster(ctx, &loomv1.CreateClusterRequest{Parent: project, ClusterId: "c2", Cluster: trainSpec()})
	if err != nil {
		t.Fatalf("valid create: %v", err)
	}
	ev := testkit.WaitEvent(t, h.broker, topics.ClusterCommands, wait, func(e envelope.Event) bool {
		c, ok := e.Payload.(*eventsv1.CreateCluster)
		return ok && c.GetOperation() == op.GetName()
	})
	sent := ev.Payload.(*eventsv1.CreateCluster).GetCluster()
	want := domain.NormalizeSpec(trainSpec())
	want.Name = "projects/default/clusters/c2"
	if !proto.Equal(sent, want) || sent.GetNetwork().GetMtu() == 0 {
		t.Errorf("CreateCluster carries\n%v\nwant the normalized spec\n%v", sent, want)
	}
	if evs := testkit.Events(t, h.broker, topics.ClusterCommands); len(evs) != 1 {
		t.Errorf("cluster commands: %d events, want only the valid CreateCluster", len(evs))
	}
}

// TestUpdateCluster checks UpdateCluster: refusals (unknown, forbidden and
// frozen changes, capacity), the merged spec it emits, the operation's
// progress and end, request_id idempotency, and that refused or empty
// updates emit nothing.
func TestUpdateCluster(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	cur := setTrain(h)
	ctx := testkit.Context(t, 2*wait)
	// update sends the current spec with mut applied, masked to paths.
	update := func(mut func(*loomv1.Cluster), paths ...string) (*loomv1.UpdateClusterRequest, *loomv1.Operation, error) {
		c := proto.Clone(cur).(*loomv1.Cluster)
		c.Status = nil
		mut(c)
		req := &loomv1.UpdateClusterRequest{Cluster: c, UpdateMask: &fieldmaskpb.FieldMask{Paths: paths}}
		op, err := h.clusters().UpdateCluster(ctx, req)
		return req, op, err
	}
	growCPU := func(n int32) func(*loomv1.Cluster) {
		return func(c *loomv1.Cluster) { c.Compute.NodePools[1].NodeCount = n }
	}

	_, _, err := update(func(c *loomv1.Cluster) { c.Name = "projects/default/clusters/nope" }, "compute.node_pools")
	wantCode(t, "unknown cluster", err, codes.NotFound, "nope")
	_, _, err = update(func(c *loomv1.Cluster) { c.Name = "" }, "compute.node_pools")
	wantCode(t, "no name", err, codes.InvalidArgument, "cluster.name")
	_, _, err = update(growCPU(2), "compute.node_pools.node_count")
	wantCode(t, "bad mask path", err, codes.InvalidArgument, "update_mask.paths[0]")
	_, _, err = update(func(c *loomv1.Cluster) { c.Compute.NodePools[0].MachineType = "a3-megagpu-8g" }, "compute.node_pools")
	wantCode(t, "machine type change", err, codes.InvalidArgument, "cluster.compute.node_pools[0].machine_type")
	_, _, err = update(func(c *loomv1.Cluster) { c.Network.Mtu = 1500 }, "network.mtu")
	wantCode(t, "frozen field", err, codes.InvalidArgument, "cluster.network.mtu")
	_, _, err = update(func(c *loomv1.Cluster) { c.Compute.NodePools[0].NodeCount = 5 }, "compute.node_pools")
	wantCode(t, "growth beyond the reservation", err, codes.FailedPrecondition,
		"pool gpu needs 3 more × a3-ultragpu-8g (RESERVATION h200-res) in us-central1-a: 2 free")
	_, same, err := update(func(*loomv1.Cluster) {}, "compute.node_pools")
	if err != nil || !same.GetDone() || same.GetMetadata().GetProgress() != "no change" {
		t.Errorf("an update that changes nothing: %v %v, want a done operation", same, err)
	}

	// Grow the GPU pool within the reservation, with a request id.
	_, op, err := update(func(c *loomv1.Cluster) { c.Compute.NodePools[0].NodeCount = 4 }, "compute.node_pools")
	if err != nil {
		t.Fatalf("resize: %v", err)
	}
	ridReq := &loomv1.UpdateClusterRequest{Cluster: proto.Clone(cur).(*loomv1.Cluster), RequestId: "grow-cpu",
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"compute.node_pools"}}, DrainGraceSeconds: 30}
	ridReq.Cluster.Status = nil
	growCPU(3)(ridReq.Cluster)
	op2, err := h.clusters().UpdateCluster(ctx, ridReq)
	if err != nil {
		t.Fatalf("resize with a request id: %v", err)
	}
	if again, err := h.clusters().UpdateCluster(ctx, ridReq); err != nil || again.GetName() != op2.GetName() {
		t.Fatalf("retry: %v %v, want %s", again, err, op2.GetName())
	}
	// The same request_id with another request is refused, not answered
	// the first one's operation (the caller would think it was done).
	other := proto.Clone(ridReq).(*loomv1.UpdateClusterRequest)
	growCPU(5)(other.Cluster)
	_, err = h.clusters().UpdateCluster(ctx, other)
	wantCode(t, "the request_id of another update", err, codes.InvalidArgument, "request_id", "different request")
	if op.GetDone() || op.GetMetadata().GetVerb() != "update" || op.GetMetadata().GetTarget() != trainName {
		t.Fatalf("update operation: %v", op)
	}

	ev := testkit.WaitEvent(t, h.broker, topics.ClusterCommands, wait, func(e envelope.Event) bool {
		u, ok := e.Payload.(*eventsv1.UpdateCluster)
		return ok && u.GetOperation() == op.GetName()
	})
	up := ev.Payload.(*eventsv1.UpdateCluster)
	want := proto.Clone(cur).(*loomv1.Cluster)
	want.Status = nil
	want.Compute.NodePools[0].NodeCount = 4
	if ev.Key != trainName || !proto.Equal(up.GetCluster(), want) || !slices.Equal(up.GetUpdateMask(), []string{"compute.node_pools"}) ||
		up.GetDrainGraceSeconds() != 300 {
		t.Errorf("UpdateCluster (key %s):\n got %v\nwant cluster %v, mask [compute.node_pools], grace 300", ev.Key, up, want)
	}
	ev2 := testkit.WaitEvent(t, h.broker, topics.ClusterCommands, wait, func(e envelope.Event) bool {
		u, ok := e.Payload.(*eventsv1.UpdateCluster)
		return ok && u.GetOperation() == op2.GetName()
	})
	if u := ev2.Payload.(*eventsv1.UpdateCluster); u.GetDrainGraceSeconds() != 30 || u.GetCluster().GetCompute().GetNodePools()[1].GetNodeCount() != 3 {
		t.Errorf("second UpdateCluster: %v", u)
	}

	// Progress from the status message, then done with the cluster.
	updating := proto.Clone(want).(*loomv1.Cluster)
	updating.Status = &loomv1.ClusterStatus{State: loomv1.Cluster_UPDATING, Message: "3 of 4 gpu nodes ready", ReadyNodes: 4, TotalNodes: 5}
	publishClusterEvent(t, h, trainName, &eventsv1.ClusterChanged{Operation: op.GetName(), Cluster: updating})
	testkit.WaitFor(t, wait, "update progress", func() (bool, error) {
		o, err := h.ops().GetOperation(ctx, &loomv1.GetOperationRequest{Name: op.GetName()})
		return o.GetMetadata().GetProgress() == "3 of 4 gpu nodes ready" && !o.GetDone(), err
	})
	resized := proto.Clone(updating).(*loomv1.Cluster)
	resized.Status = &loomv1.ClusterStatus{State: loomv1.Cluster_RUNNING, ReadyNodes: 5, TotalNodes: 5}
	publishClusterEvent(t, h, trainName, &eventsv1.ClusterChanged{Operation: op.GetName(), Cluster: resized, OperationDone: true})
	if done := waitDone(t, h, ctx, op.GetName()); !proto.Equal(done.GetCluster(), resized) || done.GetError() != nil {
		t.Errorf("finished update: %v", done)
	}
	publishClusterEvent(t, h, trainName, &eventsv1.ClusterOperationFailed{Operation: op2.GetName(), Cluster: trainName,
		Code: int32(codes.FailedPrecondition), Message: "no capacity"})
	if failed := waitDone(t, h, ctx, op2.GetName()); failed.GetError().GetCode() != int32(codes.FailedPrecondition) {
		t.Errorf("failed update: %v", failed)
	}

	if evs := testkit.Events(t, h.broker, topics.ClusterCommands); len(evs) != 2 {
		t.Errorf("cluster commands: %d events, want only the two accepted updates", len(evs))
	}
}

// TestReservations checks the reservation API: validation, existence
// checks, the create and delete operations and their commands, the reads,
// and that refused calls emit nothing.
func TestReservations(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	setTrain(h)
	ctx := testkit.Context(t, 2*wait)
	rs := h.reservations()
	create := func(id string, mut func(*loomv1.Reservation)) (*loomv1.Operation, error) {
		r := &loomv1.Reservation{Zone: "us-central1-b", MachineType: "a4-highgpu-8g", Count: 8}
		mut(r)
		return rs.CreateReservation(ctx, &loomv1.CreateReservationRequest{Parent: project, ReservationId: id, Reservation: r, RequestId: "create-" + id})
	}
	none := func(*loomv1.Reservation) {}

	_, err := create("B200_res", none)
	wantCode(t, "bad id", err, codes.InvalidArgument, "reservation_id")
	_, err = create("b200", func(r *loomv1.Reservation) { r.Zone, r.MachineType, r.Count = "", "a4-highgpu-9g", 0 })
	wantCode(t, "every problem at once", err, codes.InvalidArgument, "reservation.zone", "reservation.machine_type", "reservation.count")
	_, err = create("h200-res", none)
	wantCode(t, "existing", err, codes.AlreadyExists, h200Res)
	_, err = rs.DeleteReservation(ctx, &loomv1.DeleteReservationRequest{Name: "projects/default/reservations/nope"})
	wantCode(t, "delete unknown", err, codes.NotFound, "nope")
	_, err = rs.DeleteReservation(ctx, &loomv1.DeleteReservationRequest{Name: h200Res})
	wantCode(t, "delete in use", err, codes.FailedPrecondition, trainName)

	op, err := create("b200", none)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if again, err := create("b200", none); err != nil || again.GetName() != op.GetName() {
		t.Fatalf("retry: %v %v, want %s", again, err, op.GetName())
	}
	const b200 = "projects/default/reservations/b200"
	ev := testkit.WaitEvent(t, h.broker, topics.ClusterCommands, wait, func(e envelope.Event) bool {
		c, ok := e.Payload.(*eventsv1.CreateReservation)
		return ok && c.GetOperation() == op.GetName()
	})
	if r := ev.Payload.(*eventsv1.CreateReservation).GetReservation(); ev.Key != b200 || r.GetName() != b200 || r.GetCount() != 8 || r.GetZone() != "us-central1-b" {
		t.Fatalf("CreateReservation (key %s): %v", ev.Key, r)
	}
	made := &loomv1.Reservation{Name: b200, Zone: "us-central1-b", MachineType: "a4-highgpu-8g", Count: 8}
	publishClusterEvent(t, h, b200, &eventsv1.ReservationChanged{Operation: op.GetName(), Reservation: made, OperationDone: true})
	if done := waitDone(t, h, ctx, op.GetName()); !proto.Equal(done.GetReservation(), made) {
		t.Errorf("finished create: %v", done)
	}
	h.w.setReservation(made)

	failing, err := create("spare", none)
	if err != nil {
		t.Fatalf("create spare: %v", err)
	}
	publishClusterEvent(t, h, "projects/default/reservations/spare", &eventsv1.ClusterOperationFailed{
		Operation: failing.GetName(), Cluster: "projects/default/reservations/spare", Code: int32(codes.AlreadyExists), Message: "exists"})
	if f := waitDone(t, h, ctx, failing.GetName()); f.GetError().GetCode() != int32(codes.AlreadyExists) {
		t.Errorf("failed create: %v", f)
	}

	del, err := rs.DeleteReservation(ctx, &loomv1.DeleteReservationRequest{Name: b200})
	if err != nil {
		t.Fatalf("delete: %v", err)
	}
	testkit.WaitEvent(t, h.broker, topics.ClusterCommands, wait, func(e envelope.Event) bool {
		d, ok := e.Payload.(*eventsv1.DeleteReservation)
		return ok && d.GetOperation() == del.GetName() && d.GetReservation() == b200 && e.Key == b200
	})
	publishClusterEvent(t, h, b200, &eventsv1.ReservationDeleted{Operation: del.GetName(), Reservation: b200})
	if gone := waitDone(t, h, ctx, del.GetName()); gone.GetError() != nil || gone.GetReservation().GetName() != b200 {
		t.Errorf("finished delete: %v", gone)
	}

	got, err := rs.GetReservation(ctx, &loomv1.GetReservationRequest{Name: h200Res})
	if err != nil || got.GetInUse() != 2 {
		t.Errorf("GetReservation: %v %v", got, err)
	}
	list, err := rs.ListReservations(ctx, &loomv1.ListReservationsRequest{Parent: project})
	if err != nil || len(list.GetReservations()) != 2 {
		t.Errorf("ListReservations: %v %v", list, err)
	}
	capacity, err := rs.ListCapacity(ctx, &loomv1.ListCapacityRequest{Parent: project})
	if err != nil || len(capacity.GetPools()) != 3 {
		t.Errorf("ListCapacity: %v %v", capacity, err)
	}
	_, err = rs.GetReservation(ctx, &loomv1.GetReservationRequest{Name: "h200-res"})
	wantCode(t, "get by a bad name", err, codes.InvalidArgument, "name")

	if evs := testkit.Events(t, h.broker, topics.ClusterCommands); len(evs) != 3 {
		t.Errorf("cluster commands: %d events, want the two creates and the delete", len(evs))
	}
}

// TestRESTClusters checks the issue-3 REST routes: PATCH (the mask comes from
// the body), :slurmConfig, reservations and capacity.
func TestRESTClusters(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	cur := setTrain(h)
	ctx := testkit.Context(t, wait)
	do := func(method, path, body string) (int, string) {
		t.Helper()
		return h.rest(t, ctx, method, path, body)
	}
	marshal := func(m proto.Message) string {
		b, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}

	// Resize: the body holds the pools only, so the mask is compute.node_pools.
	pools := proto.Clone(cur.GetCompute()).(*loomv1.ComputeResources)
	pools.NodePools[1].NodeCount = 4
	code, body := do("PATCH", "/v1/projects/default/clusters/train", marshal(&loomv1.Cluster{Compute: pools}))
	var op struct {
		Name string `json:"name"`
		Done bool   `json:"done"`
	}
	if err := json.Unmarshal([]byte(body), &op); err != nil || code != http.StatusOK || op.Name == "" || op.Done {
		t.Fatalf("PATCH resize: HTTP %d %s (%v)", code, body, err)
	}
	ev := testkit.WaitEvent(t, h.broker, topics.ClusterCommands, wait, func(e envelope.Event) bool {
		u, ok := e.Payload.(*eventsv1.UpdateCluster)
		return ok && u.GetOperation() == op.Name
	})
	up := ev.Payload.(*eventsv1.UpdateCluster)
	if up.GetCluster().GetCompute().GetNodePools()[1].GetNodeCount() != 4 || up.GetCluster().GetDisplayName() != "training" ||
		!slices.Equal(up.GetUpdateMask(), []string{"compute.node_pools"}) {
		t.Errorf("UpdateCluster from PATCH: %v", up)
	}

	// The whole cluster as GET shows it, with a frozen field changed.
	code, body = do("GET", "/v1/projects/default/clusters/train", "")
	if code != http.StatusOK {
		t.Fatalf("GET: HTTP %d %s", code, body)
	}
	edited := strings.Replace(body, `"mtu":8896`, `"mtu":1500`, 1)
	if edited == body {
		t.Fatalf("GET body has no mtu 8896: %s", body)
	}
	code, body = do("PATCH", "/v1/projects/default/clusters/train", edited)
	if code != http.StatusBadRequest || !strings.Contains(body, "cluster.network.mtu") {
		t.Errorf("PATCH a frozen field: HTTP %d %s, want 400 naming cluster.network.mtu", code, body)
	}

	code, body = do("GET", "/v1/projects/default/clusters/train:slurmConfig", "")
	if code != http.StatusOK || !strings.Contains(body, `"slurm_conf":"ClusterName=`+trainName) {
		t.Errorf("GET :slurmConfig: HTTP %d %s", code, body)
	}
	code, body = do("POST", "/v1/projects/default/reservations?reservation_id=b200",
		`{"zone": "us-central1-b", "machine_type": "a4-highgpu-8g", "count": 8}`)
	if code != http.StatusOK || !strings.Contains(body, `"target":"projects/default/reservations/b200"`) {
		t.Errorf("POST reservation: HTTP %d %s", code, body)
	}
	code, body = do("POST", "/v1/projects/default/reservations?reservation_id=b200", `{"zone": "us-central1-b", "count": 8}`)
	if code != http.StatusBadRequest || !strings.Contains(body, "reservation.machine_type") {
		t.Errorf("POST a bad reservation: HTTP %d %s", code, body)
	}
	if code, body = do("GET", "/v1/projects/default/reservations/h200-res", ""); code != http.StatusOK || !strings.Contains(body, `"in_use":2`) {
		t.Errorf("GET reservation: HTTP %d %s", code, body)
	}
	if code, body = do("GET", "/v1/projects/default/capacity", ""); code != http.StatusOK || !strings.Contains(body, `"free":16`) {
		t.Errorf("GET capacity: HTTP %d %s", code, body)
	}
	if code, body = do("DELETE", "/v1/projects/default/reservations/h200-res", ""); code != http.StatusBadRequest {
		t.Errorf("DELETE a reservation in use: HTTP %d %s, want 400 (FAILED_PRECONDITION)", code, body)
	}
}

// TestListClustersOfEveryProject: "projects/-" lists every project's
// clusters for a cluster administrator (the refusal others get says so);
// it was refused for them too, as "'-' is not an id".
func TestListClustersOfEveryProject(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := testkit.Context(t, wait)
	all := &loomv1.ListClustersRequest{Parent: "projects/-"}
	got, err := loomv1.NewClusterServiceClient(h.as(t, "ops")).ListClusters(ctx, all)
	if err != nil || len(got.GetClusters()) == 0 {
		t.Fatalf("a cluster administrator's ListClusters of projects/-: %v, %v; want the clusters", got, err)
	}
	_, err = loomv1.NewClusterServiceClient(h.as(t, "ana")).ListClusters(ctx, all)
	wantCode(t, "a project member's ListClusters of projects/-", err, codes.PermissionDenied, "needs a cluster administrator")
	_, err = loomv1.NewClusterServiceClient(h.as(t, "ops")).ListClusters(ctx, &loomv1.ListClustersRequest{Parent: "projects/-x"})
	wantCode(t, "a malformed parent", err, codes.InvalidArgument, "parent")
}
