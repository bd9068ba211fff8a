package scheduler_test

import (
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/loom-ml/loom/libs/auth"
	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// A StepChanged that would complete a running job — unsigned, from another
// node's valid identity about its own (unassigned) step, or about the
// assigned node's, or from a service (the registry's, about the assigned
// node: a node's report is no service's to send, envelope.Senders) —
// changes nothing and is dead-lettered with the reason; the assigned
// node's own report completes it.
func TestForgedStepChangedIsDeadLettered(t *testing.T) {
	t.Parallel()
	broker := testkit.Broker(t)
	redisAddr, _ := testkit.Redis(t)
	in := startScheduler(t, broker, redisAddr)
	f := newFeeder(t, broker)
	f.cluster()
	f.node("gpu-0001", 4)
	f.node("gpu-0002", 4)
	f.submit(1, 1, 4) // fills one node; the other stays free
	j := in.job(t, 1, loomv1.JobState_RUNNING)
	assigned := j.GetNodes()[0]
	other := "gpu-0001"
	if other == hostOf(assigned) {
		other = "gpu-0002"
	}
	exited := func(node string) envelope.Event {
		return envelope.New(topics.StepEvents, jobName(1), "loom/agent", &eventsv1.StepChanged{Job: jobName(1), Attempt: 1,
			Node: node, State: eventsv1.StepState_STEP_EXITED, Cluster: cluster})
	}
	ctx := testkit.Context(t, wait)

	unsigned, err := envelope.Encode(exited(assignedName(assigned)))
	if err != nil {
		t.Fatal(err)
	}
	testkit.PublishMessages(t, broker, unsigned)
	intruder := testkit.NodeProducer(t, broker, nodeName(other), cluster, "gpu")
	if err := intruder.Publish(ctx, exited(nodeName(other)), exited(assignedName(assigned))); err != nil {
		t.Fatal(err)
	}
	testkit.PublishAs(t, broker, "registry", exited(assignedName(assigned)))

	reasons := map[string]int{}
	testkit.WaitFor(t, wait, "four dead letters", func() (bool, error) {
		clear(reasons)
		for _, d := range testkit.DeadLetters(t, broker, topics.StepEvents) {
			if d.Reason != "" {
				reasons[d.Reason]++
			}
		}
		return len(reasons) == 4, nil
	})
	want := map[string]int{envelope.ReasonUnsigned: 1, envelope.ReasonNotAssigned: 1, envelope.ReasonWrongNode: 1, envelope.ReasonWrongSender: 1}
	for r, n := range want {
		if reasons[r] != n {
			t.Errorf("dead letters: %v, want %v", reasons, want)
			break
		}
	}
	if got := in.job(t, 1, loomv1.JobState_RUNNING); got.GetState() != loomv1.JobState_RUNNING {
		t.Fatalf("job 1 is %v after forged reports", got.GetState())
	}

	// The node it runs on completes it.
	owner := testkit.NodeProducer(t, broker, nodeName(hostOf(assigned)), cluster, "gpu")
	if err := owner.Publish(ctx, exited(assignedName(assigned))); err != nil {
		t.Fatal(err)
	}
	testkit.WaitEvent(t, broker, topics.JobEvents, wait, jobEvent(1, loomv1.JobState_COMPLETED))
}

// assignedName is the full node name of a job's node entry (a hostname or
// a full name).
func assignedName(n string) string {
	if len(n) > len(cluster) && n[:len(cluster)] == cluster {
		return n
	}
	return nodeName(n)
}

// hostOf is the hostname of a job's node entry.
func hostOf(n string) string {
	full := assignedName(n)
	return full[len(cluster+"/nodes/"):]
}

// The scheduler's API is internal: a call without a service token, or with
// a token another secret keyed, is Unauthenticated; health checks need none.
func TestInternalAPIWantsAServiceToken(t *testing.T) {
	t.Parallel()
	broker := testkit.Broker(t)
	redisAddr, _ := testkit.Redis(t)
	in := startScheduler(t, broker, redisAddr)
	ctx := testkit.Context(t, wait)
	testkit.WaitFor(t, wait, "ListJobs with the service token", func() (bool, error) {
		_, err := in.client.ListJobs(ctx, &loomv1.ListJobsRequest{Parent: "projects/default"})
		if status.Code(err) == codes.Unavailable {
			return false, nil
		}
		return err == nil, err
	})
	other, _ := auth.NewServiceTokenIssuer(make([]byte, 32), nil)
	for name, opts := range map[string][]grpc.DialOption{
		"no token":      nil,
		"foreign token": {grpc.WithPerRPCCredentials(auth.ServiceTokenSource(other, "gateway"))},
	} {
		conn, err := grpc.NewClient(in.conn.Target(), append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := loomv1.NewJobServiceClient(conn).ListJobs(ctx, &loomv1.ListJobsRequest{Parent: "projects/default"}); status.Code(err) != codes.Unauthenticated {
			t.Errorf("%s: ListJobs = %v, want Unauthenticated", name, err)
		}
		if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
			t.Errorf("%s: health check = %v, want it answered", name, err)
		}
	}
}
