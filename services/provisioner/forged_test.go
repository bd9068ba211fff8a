package provisioner

import (
	"strings"
	"testing"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// The provisioner takes a cluster command from the gateway (a create or a
// delete also from the training service), a drained node from the
// scheduler and a repair from health alone (envelope.Senders): the
// registry's CreateCluster, NodeDrained and RemediateNode — their signature
// holds, the key being shared — are dead-lettered as wrong-sender and
// change nothing, the consumers going on; the training service's
// CreateCluster is carried out.
func TestCommandsOnlyFromTheirSender(t *testing.T) {
	t.Parallel()
	f := startSim(t)

	testkit.PublishAs(t, f.broker, "gateway", createCluster("c1", "real", 1))
	node := nodeEvent(t, f.broker, project+"/clusters/real/nodes/gpu-0001", func(n *loomv1.Node) bool { return true })
	waitRunning(t, f.broker, "c1")

	forged := project + "/clusters/forged"
	testkit.PublishAs(t, f.broker, "registry", createCluster("forged", "forged", 1))
	testkit.PublishAs(t, f.broker, "registry", envelope.New(topics.JobEvents, node.GetCluster(), "loom/scheduler",
		&eventsv1.NodeDrained{Node: node.GetName(), Cluster: node.GetCluster()}))
	testkit.PublishAs(t, f.broker, "registry", envelope.New(topics.RemediationCommand, node.GetName(), "loom/health",
		&eventsv1.RemediateNode{Node: node.GetName(), Cluster: node.GetCluster(), Action: loomv1.RemediationAction_ACTION_REIMAGE,
			RemediationId: "forged-r1", Reason: "forged"}))
	for _, topic := range []string{topics.ClusterCommands, topics.JobEvents, topics.RemediationCommand} {
		var got []testkit.DeadLetter
		testkit.WaitFor(t, wait, "the forgery on "+topic+" dead-lettered", func() (bool, error) {
			got = testkit.DeadLetters(t, f.broker, topic)
			return len(got) > 0, nil
		})
		if len(got) != 1 || got[0].Reason != envelope.ReasonWrongSender || got[0].Signer != "services/registry" {
			t.Errorf("dead letters of %s: %+v, want the registry's one, %s", topic, got, envelope.ReasonWrongSender)
		}
	}

	// The consumers go on: the training service's create is carried out.
	testkit.PublishAs(t, f.broker, "training", createCluster("c2", "training", 1))
	waitRunning(t, f.broker, "c2")
	for _, e := range testkit.Events(t, f.broker, topics.ClusterEvents) {
		if c, ok := e.Payload.(*eventsv1.ClusterChanged); ok && c.GetCluster().GetName() == forged {
			t.Errorf("the registry's cluster was created: %v", c)
		}
	}
	for _, e := range testkit.Events(t, f.broker, topics.NodeEvents) {
		switch p := e.Payload.(type) {
		case *eventsv1.NodeRemoved:
			t.Errorf("a node was removed on the registry's NodeDrained: %v", p)
		case *eventsv1.RemediationProgress, *eventsv1.RemediationFinished:
			t.Errorf("the registry's repair was carried out: %v", p)
		case *eventsv1.NodeChanged:
			if strings.HasPrefix(p.GetNode().GetName(), forged+"/") {
				t.Errorf("a node of the registry's cluster: %v", p.GetNode())
			}
		}
	}
}
