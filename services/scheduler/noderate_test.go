package scheduler_test

import (
	"testing"
	"time"

	"github.com/loom-ml/loom/libs/config"
	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/scheduler"
)

// The scheduler's consumer, which reads the step events a compromised node
// may write to any partition, holds each node to -bus-node-rate as every
// service's does: a node's records past its burst are dropped unhandled
// (not dead-lettered), and another node's record behind them is handled.
func TestSchedulerHoldsNodesToBusNodeRate(t *testing.T) {
	t.Parallel()
	broker := testkit.Broker(t)
	redisAddr, _ := testkit.Redis(t)
	const flood, burst = 6, 2
	in := runScheduler(t, scheduler.Config{Common: config.Common{
		Brokers: []string{broker}, RedisAddr: redisAddr, GRPCAddr: freeAddr(t), ServiceKeyFile: testkit.ServiceKeyFile(t),
		HTTPAddr: "127.0.0.1:0", LogLevel: "error", BusNodeRate: 0.001, BusNodeBurst: burst,
	}, MasterAddr: scheduler.DefaultMasterAddr, TickInterval: 100 * time.Millisecond})
	f := newFeeder(t, broker)
	f.cluster()
	f.node("gpu-0001", 4)
	f.node("gpu-0002", 4)
	f.submit(1, 1, 4)
	assigned := in.job(t, 1, loomv1.JobState_RUNNING).GetNodes()[0]
	other := "gpu-0001"
	if other == hostOf(assigned) {
		other = "gpu-0002"
	}
	exited := func(node string) envelope.Event {
		return envelope.New(topics.StepEvents, jobName(1), "loom/agent", &eventsv1.StepChanged{Job: jobName(1), Attempt: 1,
			Node: node, State: eventsv1.StepState_STEP_EXITED, Cluster: cluster})
	}
	ctx := testkit.Context(t, wait)
	// The other node floods reports about a step it does not run (each
	// handled one a dead letter, not-assigned), then the job's own node
	// completes it, on the same partition behind the flood.
	intruder := testkit.NodeProducer(t, broker, nodeName(other), cluster, "gpu")
	evs := make([]envelope.Event, flood)
	for i := range evs {
		evs[i] = exited(nodeName(other))
	}
	if err := intruder.Publish(ctx, evs...); err != nil {
		t.Fatal(err)
	}
	owner := testkit.NodeProducer(t, broker, nodeName(hostOf(assigned)), cluster, "gpu")
	if err := owner.Publish(ctx, exited(assignedName(assigned))); err != nil {
		t.Fatal(err)
	}
	testkit.WaitEvent(t, broker, topics.JobEvents, wait, jobEvent(1, loomv1.JobState_COMPLETED))
	n := 0
	for _, d := range testkit.DeadLetters(t, broker, topics.StepEvents) {
		if d.Reason == envelope.ReasonNotAssigned {
			n++
		}
	}
	if n != burst {
		t.Errorf("%d of the flooding node's %d records dead-lettered (handled), want its burst, %d: the rest dropped past -bus-node-rate", n, flood, burst)
	}
}
