package gateway

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// TestSlurmBackendRefusesEarly checks that with -scheduler-backend=slurm
// what that backend does not map (libs/slurmmap) is refused by the RPC,
// FailedPrecondition naming the feature and the doc, with nothing recorded
// (no job id taken) or published; and that the built-in backend accepts
// the same calls.
func TestSlurmBackendRefusesEarly(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"slurm", "builtin"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, func(c *Config) { c.SchedulerBackend = backend })
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			defer cancel()
			h.w.setJob(&loomv1.Job{Name: "projects/default/jobs/70", JobId: "70", Cluster: cluster1, State: loomv1.JobState_PENDING,
				User: "root", Account: "root", Qos: "normal", Partition: "all", NodeCount: 1})

			array := validJob()
			array.Job.Script, array.Job.Array = "#!/bin/sh\necho hi\n", "0-3"
			_, errArray := h.jobs().SubmitJob(ctx, array)
			_, errUpdate := h.jobs().UpdateJob(ctx, &loomv1.UpdateJobRequest{Name: "projects/default/jobs/70",
				Action: "update", TimeLimitSeconds: 600})
			want := 2 // the array's SubmitJob, the UpdateJob
			if backend == "slurm" {
				wantCode(t, "SubmitJob --array", errArray, codes.FailedPrecondition, "job arrays (--array)",
					"the slurm scheduler backend", "docs/slurm-backend.md")
				wantCode(t, "UpdateJob TimeLimit", errUpdate, codes.FailedPrecondition,
					"scontrol requeue/update (UpdateJob update)", "docs/slurm-backend.md")
				// scancel --batch of a running job, refused whatever its state
				// in Slurm.
				h.w.setJob(&loomv1.Job{Name: "projects/default/jobs/71", JobId: "71", Cluster: cluster1, State: loomv1.JobState_RUNNING,
					User: "root", Account: "root", Qos: "normal", Partition: "all", NodeCount: 1})
				_, err := h.jobs().CancelJob(ctx, &loomv1.CancelJobRequest{Name: "projects/default/jobs/71", Signal: "USR1", Batch: true})
				wantCode(t, "scancel --batch", err, codes.FailedPrecondition, "scancel --batch/--full", "docs/slurm-backend.md")
				want = 0
			} else {
				if errArray != nil {
					t.Errorf("builtin: SubmitJob --array: %v", errArray)
				}
				if errUpdate != nil {
					t.Errorf("builtin: UpdateJob TimeLimit: %v", errUpdate)
				}
			}

			// A mapped job now: the outbox publishes in order, so a refused
			// call's command would come before it, and a refused submission
			// must have taken no job id.
			ok := validJob()
			ok.Job.Script = "#!/bin/sh\necho ok\n"
			job, err := h.jobs().SubmitJob(ctx, ok)
			if err != nil {
				t.Fatalf("mapped SubmitJob: %v", err)
			}
			if backend == "slurm" && job.GetJobId() != "1" {
				t.Errorf("mapped job got id %s, want 1: a refused submission took ids", job.GetJobId())
			}
			testkit.WaitEvent(t, h.broker, topics.JobCommands, wait, func(e envelope.Event) bool {
				p, isSubmit := e.Payload.(*eventsv1.SubmitJob)
				return isSubmit && p.GetJob().GetName() == job.GetName()
			})
			if evs := testkit.Events(t, h.broker, topics.JobCommands); len(evs) != want+1 {
				t.Errorf("job commands: %d events, want %d before the mapped SubmitJob and it", len(evs), want)
			}
		})
	}
}
