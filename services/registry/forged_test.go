package registry

import (
	"testing"
	"time"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
)

// The registry takes a job's end from the scheduler alone
// (envelope.Senders): the training service's JobChanged saying job 1
// COMPLETED with a model output, its signature holding (the key is
// shared), is dead-lettered as wrong-sender and registers no version; the
// scheduler's for job 2 after it registers the only one.
func TestJobChangedOnlyFromTheScheduler(t *testing.T) {
	t.Parallel()
	broker := testkit.Broker(t)
	redisAddr, _ := testkit.Redis(t)
	client, _ := startRegistry(t, broker, redisAddr)

	testkit.PublishAs(t, broker, "training", completedJob("1"))
	var got []testkit.DeadLetter
	testkit.WaitFor(t, 30*time.Second, "the forged JobChanged dead-lettered", func() (bool, error) {
		got = testkit.DeadLetters(t, broker, topics.JobEvents)
		return len(got) >= 1, nil
	})
	if len(got) != 1 || got[0].Reason != envelope.ReasonWrongSender || got[0].Signer != "services/training" {
		t.Fatalf("dead letters: %+v, want the training service's JobChanged, %s", got, envelope.ReasonWrongSender)
	}

	testkit.PublishAs(t, broker, "scheduler", completedJob("2"))
	vs := waitVersions(t, client, 1)
	if len(vs) != 1 || vs[0].GetSourceJob() != "projects/default/jobs/2" {
		t.Fatalf("versions %v, want the scheduler's job 2's alone", vs)
	}
}
