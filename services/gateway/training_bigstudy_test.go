package gateway

import (
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/trainingspec"
	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
)

// TestHugeStudyCancelAndDelete: a study whose trials' parameters alone pass
// gRPC's 4 MiB (400 trials of 16 categorical values of 1 KiB: about 7 MB)
// is still cancelled by its owner and by an administrator, deleted once
// ended, and refused to another user as PermissionDenied, through the
// gateway's client: cancel and delete read the study's owner and state,
// which the training service's bounded answer always carries. Get answers
// it within the bound, saying which trials it left out. Before, each of
// these was ResourceExhausted ("received message larger than max"), for
// the owner and for administrators alike.
func TestHugeStudyCancelAndDelete(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := testkit.Context(t, wait)
	value := strings.Repeat("x", trainingspec.MaxCategoricalValueBytes)
	running := &trainingv1.HyperparameterTuningJob{Name: location + "/hyperparameterTuningJobs/70", DisplayName: "huge", User: "ana",
		State: trainingv1.JobState_JOB_STATE_RUNNING, MaxTrialCount: 400, ParallelTrialCount: 4}
	for i := 1; i <= 400; i++ {
		tr := &trainingv1.Trial{Id: strconv.Itoa(i), State: trainingv1.Trial_SUCCEEDED}
		for p := range 16 {
			tr.Parameters = append(tr.Parameters, &trainingv1.Trial_Parameter{ParameterId: "p" + strconv.Itoa(p), Value: structpb.NewStringValue(value)})
		}
		running.Trials = append(running.Trials, tr)
	}
	if n := proto.Size(running); n <= 4<<20 {
		t.Fatalf("the study is %d bytes, not past gRPC's 4 MiB", n)
	}
	h.w.setTraining(running)
	ended := proto.Clone(running).(*trainingv1.HyperparameterTuningJob)
	ended.Name, ended.State = location+"/hyperparameterTuningJobs/71", trainingv1.JobState_JOB_STATE_CANCELLED
	h.w.setTraining(ended)

	for _, c := range []struct {
		who, verb, name string
		want            codes.Code
	}{
		{"bob", "cancel", running.GetName(), codes.PermissionDenied},
		{"ana", "delete", running.GetName(), codes.FailedPrecondition},
		{"ana", "cancel", running.GetName(), codes.OK},
		{"pat", "cancel", running.GetName(), codes.OK},
		{"bob", "delete", ended.GetName(), codes.PermissionDenied},
		{"ana", "cancel", ended.GetName(), codes.FailedPrecondition},
		{"pat", "delete", ended.GetName(), codes.OK},
		{"ana", "delete", ended.GetName(), codes.OK},
	} {
		tc := h.trainingAs(t, c.who)
		var err error
		if c.verb == "cancel" {
			_, err = tc.CancelHyperparameterTuningJob(ctx, &trainingv1.CancelHyperparameterTuningJobRequest{Name: c.name})
		} else {
			_, err = tc.DeleteHyperparameterTuningJob(ctx, &trainingv1.DeleteHyperparameterTuningJobRequest{Name: c.name})
		}
		if status.Code(err) != c.want {
			t.Errorf("%s %s as %s: %v, want %s", c.verb, shortID(c.name), c.who, err, c.want)
		}
	}
	got, err := h.trainingAs(t, "ana").GetHyperparameterTuningJob(ctx, &trainingv1.GetHyperparameterTuningJobRequest{Name: running.GetName()})
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	if n := proto.Size(got); n > trainingspec.MaxTuningJobAnswer || got.GetUser() != "ana" ||
		len(got.GetTrials()) == 0 || len(got.GetTrials())+len(got.GetOmittedTrials()) != 400 || got.GetOmittedTrials()[0] != "1" {
		t.Fatalf("get answered %d bytes, user %q, %d trials, %d left out", n, got.GetUser(), len(got.GetTrials()), len(got.GetOmittedTrials()))
	}
}
