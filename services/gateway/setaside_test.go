package gateway

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// limitTopic sets the broker's max.message.bytes of topic: the broker then
// refuses, for good, every record larger than that.
func limitTopic(t *testing.T, broker, topic string, bytes string) {
	t.Helper()
	c := &kafka.Client{Addr: kafka.TCP(broker), Transport: &kafka.Transport{}}
	resp, err := c.AlterConfigs(testkit.Context(t, 10*time.Second), &kafka.AlterConfigsRequest{Resources: []kafka.AlterConfigRequestResource{{
		ResourceType: kafka.ResourceTypeTopic, ResourceName: topic,
		Configs: []kafka.AlterConfigRequestConfig{{Name: "max.message.bytes", Value: bytes}},
	}}})
	if err != nil {
		t.Fatalf("limit %s: %v", topic, err)
	}
	for _, e := range resp.Errors {
		if e != nil {
			t.Fatalf("limit %s: %v", topic, e)
		}
	}
}

// The outbox poison pill, end to end: an accepted job whose SubmitJob the
// broker refuses for good (the topic's limit is below its size: the
// API's own limits would take it) ends visibly FAILED with a reason naming
// the limit, and the next job's command flows behind it.
func TestJobWhoseCommandCannotBePublishedFailsAndLaterCommandsFlow(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := testkit.Context(t, 2*wait)
	limitTopic(t, h.broker, topics.JobCommands, "4096")

	big := validJob()
	big.Job.Script = "#!/bin/sh\n" + strings.Repeat("# padding\n", 1000) // about 10 kB
	bad, err := h.jobs().SubmitJob(ctx, big)
	if err != nil {
		t.Fatalf("SubmitJob: %v", err)
	}
	testkit.WaitFor(t, wait, "the refused job ends FAILED", func() (bool, error) {
		j, err := h.jobs().GetJob(ctx, &loomv1.GetJobRequest{Name: bad.GetName()})
		return err == nil && j.GetState() == loomv1.JobState_FAILED, nil
	})
	j, _ := h.jobs().GetJob(ctx, &loomv1.GetJobRequest{Name: bad.GetName()})
	if r := j.GetStateReason(); !strings.Contains(r, "max.message.bytes") || !strings.Contains(r, "-byte record") {
		t.Fatalf("the failed job's reason %q does not name the size and the limit", r)
	}

	good, err := h.jobs().SubmitJob(ctx, validJob())
	if err != nil {
		t.Fatalf("SubmitJob after the refused one: %v", err)
	}
	testkit.WaitEvent(t, h.broker, topics.JobCommands, wait, func(e envelope.Event) bool {
		s, ok := e.Payload.(*eventsv1.SubmitJob)
		return ok && s.GetJob().GetName() == good.GetName()
	})
	for _, e := range testkit.Events(t, h.broker, topics.JobCommands) {
		if s, ok := e.Payload.(*eventsv1.SubmitJob); ok && s.GetJob().GetName() == bad.GetName() {
			t.Fatal("the refused command is on the topic")
		}
	}
	if n := h.redis.XLen(context.Background(), "gateway:outbox:dead").Val(); n != 1 {
		t.Fatalf("dead stream holds %d entries, want the refused command", n)
	}
}

// The same for an operation: a create whose command the broker refuses ends
// done with InvalidArgument naming the limit, and a later create flows.
func TestOperationWhoseCommandCannotBePublishedFailsAndLaterCommandsFlow(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := testkit.Context(t, 2*wait)
	limitTopic(t, h.broker, topics.ClusterCommands, "64") // smaller than any command

	op, err := h.clusters().CreateCluster(ctx, validCluster("refused"))
	if err != nil {
		t.Fatalf("CreateCluster: %v", err)
	}
	done, err := h.ops().WaitOperation(ctx, &loomv1.WaitOperationRequest{Name: op.GetName(), TimeoutSeconds: 30})
	if err != nil || !done.GetDone() {
		t.Fatalf("WaitOperation: %v %v, want the operation done", done, err)
	}
	if e := done.GetError(); e.GetCode() != 3 || !strings.Contains(e.GetMessage(), "max.message.bytes") {
		t.Fatalf("operation error %v, want InvalidArgument naming the limit", e)
	}

	limitTopic(t, h.broker, topics.ClusterCommands, "1048588") // the default again
	next, err := h.clusters().CreateCluster(ctx, validCluster("accepted"))
	if err != nil {
		t.Fatalf("CreateCluster after the refused one: %v", err)
	}
	testkit.WaitEvent(t, h.broker, topics.ClusterCommands, wait, func(e envelope.Event) bool {
		c, ok := e.Payload.(*eventsv1.CreateCluster)
		return ok && c.GetOperation() == next.GetName()
	})
	if again, _ := h.ops().GetOperation(ctx, &loomv1.GetOperationRequest{Name: next.GetName()}); again.GetDone() {
		t.Fatalf("the later operation ended: %v", again)
	}
}
