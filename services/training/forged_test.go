package training

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
)

// Training takes its commands from the gateway alone (envelope.Senders):
// the registry's CreateCustomJob (which training would turn into a
// cluster and a job run as the user it names, through training's own
// SubmitJob row) and its Admin CancelTraining, their signature holding
// (the key is shared), are dead-lettered as wrong-sender and change
// nothing; the gateway's commands after them are carried out.
func TestCommandsOnlyFromTheGateway(t *testing.T) {
	t.Parallel()
	broker := testkit.Broker(t)
	redisAddr, _ := testkit.Redis(t)
	client := startInProcess(t, broker, redisAddr)
	ctx := testkit.Context(t, wait)

	testkit.PublishAs(t, broker, "gateway", createCustomJob(2, "alice", "victim"))
	testkit.WaitFor(t, wait, "the gateway's job 2 queued", func() (bool, error) {
		_, err := client.GetCustomJob(ctx, &trainingv1.GetCustomJobRequest{Name: loc + "/customJobs/2"})
		return err == nil, nil
	})
	cancel, err := envelope.Route("projects/p", "loom/gateway", &eventsv1.CancelTraining{Name: loc + "/customJobs/2", User: "root", Admin: true})
	if err != nil {
		t.Fatal(err)
	}
	testkit.PublishAs(t, broker, "registry", createCustomJob(1, "mallory", "forged"), cancel)
	var got []testkit.DeadLetter
	testkit.WaitFor(t, wait, "the forgeries dead-lettered", func() (bool, error) {
		got = testkit.DeadLetters(t, broker, topics.TrainingCommands)
		return len(got) >= 2, nil
	})
	if len(got) != 2 {
		t.Fatalf("dead letters: %+v, want the registry's two", got)
	}
	for _, d := range got {
		if d.Reason != envelope.ReasonWrongSender || d.Signer != "services/registry" {
			t.Errorf("dead letter %+v, want the registry's, %s", d, envelope.ReasonWrongSender)
		}
	}

	// The consumer goes on: the gateway's next job is created, and the
	// forged ones changed nothing.
	testkit.PublishAs(t, broker, "gateway", createCustomJob(3, "alice", "after"))
	testkit.WaitEvent(t, broker, topics.ClusterCommands, wait, func(e envelope.Event) bool {
		c, ok := e.Payload.(*eventsv1.CreateCluster)
		return ok && c.GetCluster().GetName() == "projects/p/clusters/cj-3"
	})
	if _, err := client.GetCustomJob(ctx, &trainingv1.GetCustomJobRequest{Name: loc + "/customJobs/1"}); status.Code(err) != codes.NotFound {
		t.Errorf("the registry's job 1: %v, want NotFound", err)
	}
	if j, err := client.GetCustomJob(ctx, &trainingv1.GetCustomJobRequest{Name: loc + "/customJobs/2"}); err != nil || j.GetState() == trainingv1.JobState_JOB_STATE_CANCELLED ||
		j.GetState() == trainingv1.JobState_JOB_STATE_CANCELLING {
		t.Errorf("job 2 after the registry's cancel: %v %v, want it not cancelled", j, err)
	}
	for _, e := range testkit.Events(t, broker, topics.ClusterCommands) {
		if c, ok := e.Payload.(*eventsv1.CreateCluster); ok && c.GetCluster().GetName() == "projects/p/clusters/cj-1" {
			t.Errorf("a cluster for the registry's job: %v", c)
		}
	}
}
