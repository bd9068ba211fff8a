package adapters

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
)

// TestEventKeysAndRoutes checks that every payload the agent emits is keyed
// by the entity whose order matters and lands on its topic, that the key is
// the one consumers require of a node's record of that type
// (envelope.NodeRecordKey: any other is refused, wrong-key), and that a
// payload the agent does not emit is refused.
func TestEventKeysAndRoutes(t *testing.T) {
	t.Parallel()
	const job, node = "projects/p/jobs/1", "projects/p/clusters/c/nodes/n1"
	for _, tc := range []struct {
		p          proto.Message
		topic, key string
	}{
		{&eventsv1.StepChanged{Job: job, Node: node}, topics.StepEvents, job},
		{&eventsv1.TasksChanged{Job: job, Node: node}, topics.StepEvents, job},
		{&eventsv1.AgentRegistered{Node: node}, topics.NodeTelemetry, node},
		{&eventsv1.Heartbeat{Node: node}, topics.NodeTelemetry, node},
		{&eventsv1.StepProgress{Job: job, Node: node}, topics.StepEvents, job},
		{&eventsv1.UsageReported{Job: job, Node: node}, topics.StepEvents, job},
		{&eventsv1.MetricsReported{Job: job, Node: node}, topics.StepEvents, job},
	} {
		ev, err := Event(tc.p)
		if err != nil || ev.Topic != tc.topic || ev.Key != tc.key || ev.Source != Source || ev.Payload != tc.p {
			t.Errorf("Event(%T) = %+v, %v; want topic %s key %s", tc.p, ev, err, tc.topic, tc.key)
		}
		if want, ok := envelope.NodeRecordKey(ev, node); !ok || ev.Key != want {
			t.Errorf("Event(%T) keyed %q; consumers require %q (%v)", tc.p, ev.Key, want, ok)
		}
	}
	if _, err := Event(&eventsv1.NodeDrained{Node: node}); err == nil {
		t.Error("Event(NodeDrained) succeeded; the agent does not emit it")
	}
}
