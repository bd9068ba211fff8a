package health_test

import (
	"context"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/config"
	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/health"
)

const (
	cluster = "projects/default/clusters/c1"
	node    = cluster + "/nodes/gpu-0001"
	wait    = 60 * time.Second
)

// freeAddr is an address for a health the test starts. Not a port the
// kernel handed out to a :0 listener closed at once: that one comes from the
// ephemeral range, where any outgoing connection of the packages testing
// beside this one (their Kafka and Redis clients) can take it as its local
// port before health binds it. testkit.FreeAddr picks below that range, and
// keeps the port to this test process.
func freeAddr(t *testing.T) string {
	t.Helper()
	return testkit.FreeAddr()
}

// noRemediation is health's remediation for the tests of a silence and
// its end on the real clock: off. With it on, a node silent for two timeouts
// (600 ms here) is a fault: it is drained for a reboot, and its next
// heartbeat rightly does not make it HEALTHY. These tests' steps between
// the UNHEALTHY verdict and the beat that ends the silence (reading the
// topic, publishing, a dead-letter wait) take longer than that on a loaded
// machine; what remediation does with a silent node is tested on its own.
const noRemediation = "off"

// addNode makes node (gpu-0001 of cluster) a READY member of health's
// watch, as the provisioner says it (envelope.Senders: its NodeChanged
// alone is taken).
func addNode(t *testing.T, broker string) {
	t.Helper()
	testkit.PublishAs(t, broker, "provisioner", envelope.New(topics.NodeEvents, node, "loom/provisioner",
		&eventsv1.NodeChanged{Node: &loomv1.Node{Name: node, Cluster: cluster, Hostname: "gpu-0001", State: loomv1.Node_READY}}))
}

// waitKnown waits until health lists node (addNode): topics are consumed
// independently, so the node must be a member before its agent's events
// count.
func waitKnown(t *testing.T, client loomv1.HealthServiceClient) {
	t.Helper()
	testkit.WaitFor(t, wait, "health knows the node", func() (bool, error) {
		resp, err := client.ListNodeHealth(testkit.Context(t, 5*time.Second), &loomv1.ListNodeHealthRequest{Cluster: cluster})
		return err == nil && len(resp.GetNodes()) == 1, nil
	})
}

func verdict(h eventsv1.NodeHealth) func(envelope.Event) bool {
	return func(e envelope.Event) bool {
		v, ok := e.Payload.(*eventsv1.NodeHealthChanged)
		return ok && v.GetNode() == node && v.GetHealth() == h
	}
}

func TestSilenceThenHeartbeatThroughTheBus(t *testing.T) {
	t.Parallel()
	broker := testkit.Broker(t)
	redisAddr, _ := testkit.Redis(t)
	cfg := health.Config{Common: config.Common{Brokers: []string{broker}, RedisAddr: redisAddr, ServiceKeyFile: testkit.ServiceKeyFile(t),
		GRPCAddr: freeAddr(t), HTTPAddr: "127.0.0.1:0", LogLevel: "warn"}, HeartbeatTimeout: 300 * time.Millisecond, Remediation: noRemediation}
	testkit.Start(t, "health", func(ctx context.Context) error { return health.Run(ctx, cfg) })

	// The node's agent: its reports are no service's to send.
	p := testkit.NodeProducer(t, broker, node, cluster, "gpu")
	publish := func(topic string, payload proto.Message) {
		t.Helper()
		pctx, pcancel := context.WithTimeout(context.Background(), wait)
		defer pcancel()
		if err := p.Publish(pctx, envelope.New(topic, node, "loom/agent", payload)); err != nil {
			t.Fatalf("publish %T: %v", payload, err)
		}
	}
	beat := func() {
		publish(topics.NodeTelemetry, &eventsv1.Heartbeat{Node: node, Cluster: cluster, BootId: "b1", Time: timestamppb.Now()})
	}

	addNode(t, broker)
	publish(topics.NodeTelemetry, &eventsv1.AgentRegistered{Node: node, Cluster: cluster, Hostname: "gpu-0001", BootId: "b1"})
	for range 3 {
		beat()
	}
	ev := testkit.WaitEvent(t, broker, topics.HealthEvents, wait, verdict(eventsv1.NodeHealth_UNHEALTHY))
	v := ev.Payload.(*eventsv1.NodeHealthChanged)
	if ev.Key != node || ev.Source != "loom/health" || v.GetCluster() != cluster || v.GetReason() != "no heartbeat for 300ms" {
		t.Fatalf("UNHEALTHY event: key %q source %q %v", ev.Key, ev.Source, v)
	}

	beat()
	ev = testkit.WaitEvent(t, broker, topics.HealthEvents, wait, verdict(eventsv1.NodeHealth_HEALTHY))
	// The silence was reported once, however many checks ran during it.
	unhealthy := 0
	for _, e := range testkit.Events(t, broker, topics.HealthEvents) {
		if verdict(eventsv1.NodeHealth_UNHEALTHY)(e) && e.Offset < ev.Offset {
			unhealthy++
		}
	}
	if unhealthy != 1 {
		t.Fatalf("%d UNHEALTHY events before HEALTHY, want 1", unhealthy)
	}
}

// TestSilenceOnTheFakeClock runs the check loop and the domain on a fake
// clock: a node silent for an hour of fake time is reported UNHEALTHY within
// seconds of real time, which the real clock could not do.
func TestSilenceOnTheFakeClock(t *testing.T) {
	t.Parallel()
	broker := testkit.Broker(t)
	redisAddr, _ := testkit.Redis(t)
	fc := clockwork.NewFakeClock()
	cfg := health.Config{Common: config.Common{Brokers: []string{broker}, RedisAddr: redisAddr, ServiceKeyFile: testkit.ServiceKeyFile(t),
		GRPCAddr: freeAddr(t), HTTPAddr: "127.0.0.1:0", LogLevel: "warn", Clock: fc}, HeartbeatTimeout: time.Hour}
	testkit.Start(t, "health", func(ctx context.Context) error { return health.Run(ctx, cfg) })
	addNode(t, broker)
	testkit.PublishAsNodes(t, broker, cluster,
		envelope.New(topics.NodeTelemetry, node, "loom/agent", &eventsv1.AgentRegistered{Node: node, Cluster: cluster, Hostname: "gpu-0001", BootId: "b1"}),
		envelope.New(topics.NodeTelemetry, node, "loom/agent", &eventsv1.Heartbeat{Node: node, Cluster: cluster, BootId: "b1", Time: timestamppb.New(fc.Now())}))
	var got *eventsv1.NodeHealthChanged
	// Far less real time than the hour the node must stay silent.
	testkit.WaitFor(t, 30*time.Second, "UNHEALTHY on the fake clock", func() (bool, error) {
		fc.Advance(15 * time.Minute) // one check interval (a quarter of the timeout)
		for _, e := range testkit.Events(t, broker, topics.HealthEvents) {
			if verdict(eventsv1.NodeHealth_UNHEALTHY)(e) {
				got = e.Payload.(*eventsv1.NodeHealthChanged)
				return true, nil
			}
		}
		return false, nil
	})
	if got.GetReason() != "no heartbeat for 1h0m0s" {
		t.Fatalf("reason = %q", got.GetReason())
	}
}
