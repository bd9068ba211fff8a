package health_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/config"
	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/health"
)

// Health takes a node's heartbeat only from that node: another node's
// valid identity cannot keep it alive (the record is dead-lettered), its
// own can.
func TestHeartbeatOnlyFromItsNode(t *testing.T) {
	t.Parallel()
	broker := testkit.Broker(t)
	redisAddr, _ := testkit.Redis(t)
	cfg := health.Config{Common: config.Common{Brokers: []string{broker}, RedisAddr: redisAddr, ServiceKeyFile: testkit.ServiceKeyFile(t),
		GRPCAddr: freeAddr(t), HTTPAddr: "127.0.0.1:0", LogLevel: "warn"}, HeartbeatTimeout: 300 * time.Millisecond, Remediation: noRemediation}
	testkit.Start(t, "health", func(ctx context.Context) error { return health.Run(ctx, cfg) })
	ctx := testkit.Context(t, wait)
	addNode(t, broker)
	own := testkit.NodeProducer(t, broker, node, cluster, "gpu")
	beat := &eventsv1.Heartbeat{Node: node, Cluster: cluster, BootId: "b1", Time: timestamppb.Now()}
	if err := own.Publish(ctx, envelope.New(topics.NodeTelemetry, node, "loom/agent", &eventsv1.AgentRegistered{Node: node, Cluster: cluster, Hostname: "gpu-0001", BootId: "b1"}),
		envelope.New(topics.NodeTelemetry, node, "loom/agent", beat)); err != nil {
		t.Fatal(err)
	}
	testkit.WaitEvent(t, broker, topics.HealthEvents, wait, verdict(eventsv1.NodeHealth_UNHEALTHY))

	intruder := testkit.NodeProducer(t, broker, cluster+"/nodes/gpu-0002", cluster, "gpu")
	if err := intruder.Publish(ctx, envelope.New(topics.NodeTelemetry, node, "loom/agent", beat)); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, wait, "the intruder's heartbeat dead-lettered as wrong-node", func() (bool, error) {
		for _, d := range testkit.DeadLetters(t, broker, topics.NodeTelemetry) {
			if d.Reason == envelope.ReasonWrongNode {
				return true, nil
			}
		}
		return false, nil
	})
	if err := own.Publish(ctx, envelope.New(topics.NodeTelemetry, node, "loom/agent", beat)); err != nil {
		t.Fatal(err)
	}
	testkit.WaitEvent(t, broker, topics.HealthEvents, wait, verdict(eventsv1.NodeHealth_HEALTHY))
}

// A node's records past its rate (-node-rate, -node-burst) are dropped
// unhandled and counted by reason, as is a registration whose check_addr is
// not a host:port; health's lag is on /metrics.
func TestNodeFloodDroppedThroughTheBus(t *testing.T) {
	t.Parallel()
	broker := testkit.Broker(t)
	redisAddr, _ := testkit.Redis(t)
	httpAddr := freeAddr(t)
	cfg := health.Config{Common: config.Common{Brokers: []string{broker}, RedisAddr: redisAddr, ServiceKeyFile: testkit.ServiceKeyFile(t),
		GRPCAddr: freeAddr(t), HTTPAddr: httpAddr, LogLevel: "error"}, HeartbeatTimeout: time.Hour, NodeRate: 0.01, NodeBurst: 5}
	testkit.Start(t, "health", func(ctx context.Context) error { return health.Run(ctx, cfg) })
	ctx := testkit.Context(t, wait)
	addNode(t, broker)
	own := testkit.NodeProducer(t, broker, node, cluster, "gpu")
	flood := []envelope.Event{envelope.New(topics.NodeTelemetry, node, "loom/agent",
		&eventsv1.AgentRegistered{Node: node, Cluster: cluster, Hostname: "gpu-0001", BootId: "b1", CheckAddr: "169.254.169.254:80\r\nX: y"})}
	for range 30 {
		flood = append(flood, envelope.New(topics.NodeTelemetry, node, "loom/agent", &eventsv1.Heartbeat{Node: node, Cluster: cluster, BootId: "b1", Time: timestamppb.Now()}))
	}
	if err := own.Publish(ctx, flood...); err != nil {
		t.Fatal(err)
	}
	var s testkit.Samples
	testkit.WaitFor(t, wait, "the flood dropped and the bad check_addr refused, counted", func() (bool, error) {
		var err error
		s, err = testkit.ScrapeErr(httpAddr)
		return err == nil && s.Sum("loom_health_dropped_total", "reason", "rate") == 31-5 &&
			s.Sum("loom_health_dropped_total", "reason", "check-addr") == 1, nil
	})
	if len(s.Find("loom_health_behind_seconds")) != 1 {
		t.Errorf("no loom_health_behind_seconds: %v", s.Find("loom_health_behind_seconds"))
	}
}

// A telemetry record the bus refuses before health's handler (another
// node's forgery, here the last record of its partition) still moves
// health's place in that partition: else the partition stayed "behind"
// for ever, and health judged no silence anywhere (the node falling
// silent here was never declared).
func TestRefusedLastRecordLeavesHealthNotBehind(t *testing.T) {
	t.Parallel()
	broker := testkit.Broker(t)
	redisAddr, _ := testkit.Redis(t)
	ctx := testkit.Context(t, wait)
	addNode(t, broker)
	beat := &eventsv1.Heartbeat{Node: node, Cluster: cluster, BootId: "b1", Time: timestamppb.Now()}
	if err := testkit.NodeProducer(t, broker, node, cluster, "gpu").Publish(ctx,
		envelope.New(topics.NodeTelemetry, node, "loom/agent", &eventsv1.AgentRegistered{Node: node, Cluster: cluster, Hostname: "gpu-0001", BootId: "b1"}),
		envelope.New(topics.NodeTelemetry, node, "loom/agent", beat)); err != nil {
		t.Fatal(err)
	}
	intruder := testkit.NodeProducer(t, broker, cluster+"/nodes/gpu-0002", cluster, "gpu")
	if err := intruder.Publish(ctx, envelope.New(topics.NodeTelemetry, node, "loom/agent", beat)); err != nil {
		t.Fatal(err)
	}
	// Health starts after all three: it fetches them together, so the
	// beat it handles shows the forgery still waiting behind it.
	cfg := health.Config{Common: config.Common{Brokers: []string{broker}, RedisAddr: redisAddr, ServiceKeyFile: testkit.ServiceKeyFile(t),
		GRPCAddr: freeAddr(t), HTTPAddr: "127.0.0.1:0", LogLevel: "error"}, HeartbeatTimeout: 300 * time.Millisecond}
	testkit.Start(t, "health", func(ctx context.Context) error { return health.Run(ctx, cfg) })
	testkit.WaitEvent(t, broker, topics.HealthEvents, wait, verdict(eventsv1.NodeHealth_UNHEALTHY))
}

// A repair's answer is taken from the provisioner alone (envelope.Senders):
// the registry's RemediationFinished (a failure, which would send the node
// on to a reimage) and the scheduler's RemediationProgress are
// dead-lettered as wrong-sender and change nothing, the consumer going on;
// the provisioner's RemediationFinished then ends the repair it answers,
// and health asks for the confirming check.
func TestRemediationAnswersOnlyFromTheProvisioner(t *testing.T) {
	t.Parallel()
	broker := testkit.Broker(t)
	redisAddr, _ := testkit.Redis(t)
	addr := freeAddr(t)
	cfg := health.Config{Common: config.Common{Brokers: []string{broker}, RedisAddr: redisAddr, ServiceKeyFile: testkit.ServiceKeyFile(t),
		GRPCAddr: addr, HTTPAddr: "127.0.0.1:0", LogLevel: "error"}, HeartbeatTimeout: time.Hour}
	testkit.Start(t, "health", func(ctx context.Context) error { return health.Run(ctx, cfg) })
	addNode(t, broker)
	client := loomv1.NewHealthServiceClient(testkit.Dial(t, addr))
	waitKnown(t, client)
	testkit.PublishAsNodes(t, broker, cluster,
		envelope.New(topics.NodeTelemetry, node, "loom/agent", &eventsv1.XidObserved{Node: node, Cluster: cluster, Gpu: 3, Xid: 79, Time: timestamppb.Now()}))
	rev := testkit.WaitEvent(t, broker, topics.RemediationCommand, wait, func(e envelope.Event) bool {
		r, ok := e.Payload.(*eventsv1.RemediateNode)
		return ok && r.GetNode() == node
	})
	id := rev.Payload.(*eventsv1.RemediateNode).GetRemediationId()

	testkit.PublishAs(t, broker, "registry", envelope.New(topics.NodeEvents, node, "loom/provisioner",
		&eventsv1.RemediationFinished{Node: node, Cluster: cluster, RemediationId: id, Ok: false, Message: "forged"}))
	testkit.PublishAs(t, broker, "scheduler", envelope.New(topics.NodeEvents, node, "loom/provisioner",
		&eventsv1.RemediationProgress{Node: node, RemediationId: id, DeadlineIn: durationpb.New(time.Hour)}))
	refused := map[string]string{} // type → reason
	testkit.WaitFor(t, wait, "both forgeries dead-lettered", func() (bool, error) {
		clear(refused)
		for _, d := range testkit.DeadLetters(t, broker, topics.NodeEvents) {
			refused[d.Type] = d.Reason
		}
		return len(refused) == 2, nil
	})
	for _, typ := range []string{envelope.TypeOf(&eventsv1.RemediationFinished{}), envelope.TypeOf(&eventsv1.RemediationProgress{})} {
		if refused[typ] != envelope.ReasonWrongSender {
			t.Errorf("%s dead-lettered with reason %q, want %q (all: %v)", typ, refused[typ], envelope.ReasonWrongSender, refused)
		}
	}

	// Had the forged failure been taken, the repair would have moved on
	// to a reimage with a new id, and this answer would be stale.
	testkit.PublishAs(t, broker, "provisioner", envelope.New(topics.NodeEvents, node, "loom/provisioner",
		&eventsv1.RemediationFinished{Node: node, Cluster: cluster, RemediationId: id, Ok: true}))
	testkit.WaitEvent(t, broker, topics.NodeCommands, wait, func(e envelope.Event) bool {
		c, ok := e.Payload.(*eventsv1.RunHealthCheck)
		return ok && c.GetNode() == node && c.GetTrigger() == "confirm"
	})
	for _, e := range testkit.Events(t, broker, topics.RemediationCommand) {
		if r, ok := e.Payload.(*eventsv1.RemediateNode); ok && r.GetRemediationId() != id {
			t.Errorf("a second repair, %v: the forged failure was taken", r)
		}
	}

	// An operator's command is the gateway's alone: the registry's resume
	// is refused the same way.
	testkit.PublishAs(t, broker, "registry", envelope.New(topics.HealthCommands, cluster, "loom/gateway",
		&eventsv1.UpdateNodeRemediation{Cluster: cluster, Hostname: "gpu-0001", Action: loomv1.RemediationAction_ACTION_RESUME, User: "mallory"}))
	testkit.WaitFor(t, wait, "the registry's UpdateNodeRemediation dead-lettered as wrong-sender", func() (bool, error) {
		for _, d := range testkit.DeadLetters(t, broker, topics.HealthCommands) {
			if d.Reason != "" {
				return d.Reason == envelope.ReasonWrongSender, nil
			}
		}
		return false, nil
	})
}
