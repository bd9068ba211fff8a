package domain

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
)

// TestAcceptCustomJobClearsOutputOnly: what a caller puts in the
// output-only fields of the CustomJob it creates is not kept: the create's
// answer, and a Get answered from the accepted record, would show it as
// Loom's (an output_dir that says the output is kept where it is not).
func TestAcceptCustomJobClearsOutputOnly(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0)
	in := &trainingv1.CustomJob{
		DisplayName: "train", User: "mallory", State: trainingv1.JobState_JOB_STATE_SUCCEEDED,
		StartTime: timestamppb.New(now), EndTime: timestamppb.New(now), Error: &trainingv1.Status{Code: 2},
		WebAccessUris: map[string]string{"x": "http://evil"}, RestartCount: 3,
		OutputDir: "/home/alice/private", OutputWarning: "forged",
	}
	got := AcceptCustomJob(in, TrainingParent{Project: "p", Location: "l"}, 7, "alice", now)
	if got.GetOutputDir() != "" || got.GetOutputWarning() != "" {
		t.Errorf("output_dir %q, output_warning %q: the caller's, want none until the training service says", got.GetOutputDir(), got.GetOutputWarning())
	}
	if got.GetUser() != "alice" || got.GetState() != trainingv1.JobState_JOB_STATE_QUEUED || got.GetStartTime() != nil ||
		got.GetEndTime() != nil || got.GetError() != nil || len(got.GetWebAccessUris()) != 0 || got.GetRestartCount() != 0 {
		t.Errorf("accepted %v: an output-only field kept", got)
	}
	if in.GetOutputDir() != "/home/alice/private" {
		t.Errorf("the request was changed: %v", in)
	}
}
