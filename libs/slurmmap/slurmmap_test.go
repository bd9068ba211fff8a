package slurmmap

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/errs"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// TestCommand checks the predicate the gateway and the backend share:
// each command the backend has no mapping for is named, what it carries
// out is not, and what is not a job command is left alone.
func TestCommand(t *testing.T) {
	t.Parallel()
	script := &loomv1.Job{Name: "projects/p/jobs/1", Script: "#!/bin/sh\n", NodeCount: 1}
	for _, tc := range []struct {
		cmd  proto.Message
		want string // "" when carried out
	}{
		{&eventsv1.SubmitJob{Job: script}, ""},
		{&eventsv1.SubmitJob{Job: &loomv1.Job{Script: "#!/bin/sh\n", Array: "0-3"}}, "--array"},
		{&eventsv1.UpdateJob{Job: "projects/p/jobs/1", Action: ActionHold, User: "ana"}, ""},
		{&eventsv1.UpdateJob{Job: "projects/p/jobs/1", Action: ActionRelease, Admin: true}, ""},
		{&eventsv1.UpdateJob{Job: "projects/p/jobs/1", Action: "requeue"}, "UpdateJob requeue"},
		{&eventsv1.UpdateJob{Job: "projects/p/jobs/1", Action: ActionHold, TimeLimitSeconds: 60}, "hold with fields to change"},
		{&eventsv1.CancelJob{Job: "projects/p/jobs/1"}, ""},
		{&eventsv1.CancelJob{Job: "projects/p/jobs/1", Signal: "USR1"}, ""},
		{&eventsv1.CancelJob{Job: "projects/p/jobs/1", Batch: true}, "scancel --batch/--full"},
		{&eventsv1.CancelJob{Job: "projects/p/jobs/1", Full: true}, "scancel --batch/--full"},
		{&eventsv1.CancelJob{Job: "projects/p/jobs/1", ExitCode: proto.Int32(3)}, "exit code"},
		{&eventsv1.CreateJobStep{}, "srun --jobid"},
		{&eventsv1.CancelJobStep{}, "scancel JOB.STEP"},
		{&eventsv1.UpdateSlurmNode{}, "scontrol update node"},
		// Kept by the gateway for its own checks: not judged here.
		{&eventsv1.AccountChanged{}, ""},
		{&eventsv1.JobChanged{}, ""},
	} {
		got := Command(tc.cmd)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("Command(%T %v) = %q, want %q", tc.cmd, tc.cmd, got, tc.want)
		}
	}
}

// TestRefuse checks the refusal's text and code: what, the backend, the
// doc, and FailedPrecondition (the gRPC code the gateway answers).
func TestRefuse(t *testing.T) {
	t.Parallel()
	err := Refuse("job arrays (--array)")
	if !errors.Is(err, errs.FailedPrecondition) {
		t.Errorf("Refuse: %v does not wrap errs.FailedPrecondition", err)
	}
	for _, w := range []string{"job arrays (--array)", Name, "docs/slurm-backend.md"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("Refuse: %q does not name %q", err, w)
		}
	}
}
