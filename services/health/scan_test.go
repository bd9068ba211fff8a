package health_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/loom-ml/loom/libs/config"
	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/health"
)

// A ScanNodes command through the bus becomes one RunHealthCheck per idle
// node on loom.node.commands.v1, keyed by node, the all-reduce ring built
// from the check addresses the agents registered; a busy node is left out.
func TestScanNodesThroughTheBus(t *testing.T) {
	t.Parallel()
	broker := testkit.Broker(t)
	redisAddr, _ := testkit.Redis(t)
	cfg := health.Config{Common: config.Common{Brokers: []string{broker}, RedisAddr: redisAddr, ServiceKeyFile: testkit.ServiceKeyFile(t),
		GRPCAddr: freeAddr(t), HTTPAddr: "127.0.0.1:0", LogLevel: "warn"}, HeartbeatTimeout: time.Minute}
	testkit.Start(t, "health", func(ctx context.Context) error { return health.Run(ctx, cfg) })
	ctx := testkit.Context(t, wait)
	hosts := []string{"gpu-0001", "gpu-0002", "gpu-0003"}
	for i, h := range hosts {
		name := cluster + "/nodes/" + h
		testkit.PublishAs(t, broker, "provisioner", envelope.New(topics.NodeEvents, name, "loom/test",
			&eventsv1.NodeChanged{Node: &loomv1.Node{Name: name, Cluster: cluster, Hostname: h, State: loomv1.Node_READY}}))
		own := testkit.NodeProducer(t, broker, name, cluster, "gpu")
		evs := []envelope.Event{envelope.New(topics.NodeTelemetry, name, "loom/agent",
			&eventsv1.AgentRegistered{Node: name, Cluster: cluster, Hostname: h, BootId: "b", CheckAddr: "127.0.0.1:700" + string(rune('1'+i))})}
		if h == "gpu-0003" {
			evs = append(evs, envelope.New(topics.NodeTelemetry, name, "loom/agent", &eventsv1.Heartbeat{Node: name, Cluster: cluster, BootId: "b", RunningSteps: 1}))
		}
		if err := own.Publish(ctx, evs...); err != nil {
			t.Fatal(err)
		}
	}
	// The scan may come before the registrations are consumed: scan again
	// (a new scan id) until one sends a ring of the two idle nodes.
	var got []*eventsv1.RunHealthCheck
	n := 0
	testkit.WaitFor(t, wait, "a ring of the two idle nodes", func() (bool, error) {
		byScan := map[string][]*eventsv1.RunHealthCheck{}
		for _, ev := range testkit.Events(t, broker, topics.NodeCommands) {
			if c, ok := ev.Payload.(*eventsv1.RunHealthCheck); ok {
				if ev.Key != c.GetNode() {
					t.Fatalf("command keyed %q for %q", ev.Key, c.GetNode())
				}
				byScan[c.GetScanId()] = append(byScan[c.GetScanId()], c)
			}
		}
		for _, cs := range byScan {
			if len(cs) == 2 && len(cs[0].GetPeers()) == 2 {
				got = cs
				return true, nil
			}
		}
		n++
		testkit.PublishAs(t, broker, "gateway", envelope.New(topics.HealthCommands, cluster, "loom/gateway",
			&eventsv1.ScanNodes{Cluster: cluster, ScanId: fmt.Sprintf("s%d", n), Checks: []string{"allreduce"}}))
		return false, nil
	})
	var nodes []string
	for _, c := range got {
		nodes = append(nodes, c.GetNode())
	}
	sort.Strings(nodes)
	if strings.Join(nodes, ",") != cluster+"/nodes/gpu-0001,"+cluster+"/nodes/gpu-0002" ||
		strings.Join(got[0].GetPeers(), ",") != "127.0.0.1:7001,127.0.0.1:7002" {
		t.Fatalf("commands %v", got)
	}
}
