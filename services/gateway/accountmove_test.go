package gateway

import (
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/testkit"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// TestMoveArrayIntoFullAccount: scontrol update JobId=A Account=lab of an
// array the scheduler has split moves every pending task, and each counts
// against lab's MaxSubmitJobs: 10 tasks do not fit a limit of 3, also when
// the first is in lab already; with 7 of them running (a running job's
// account does not change), the 3 pending do.
func TestMoveArrayIntoFullAccount(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := testkit.Context(t, 2*wait)
	ana := loomv1.NewJobServiceClient(h.as(t, "ana"))
	if _, err := h.accounts().SetAssociation(ctx, &loomv1.SetAssociationRequest{Parent: "projects/default", Association: &loomv1.Association{
		Account: "root", User: "ana"}}, h.call("pat")); err != nil {
		t.Fatal(err)
	}
	if _, err := h.accounts().CreateAccount(ctx, &loomv1.CreateAccountRequest{Parent: "projects/default", Account: &loomv1.Account{Name: "lab"}}, h.call("pat")); err != nil {
		t.Fatal(err)
	}
	if _, err := h.accounts().SetAssociation(ctx, &loomv1.SetAssociationRequest{Parent: "projects/default", Association: &loomv1.Association{
		Account: "lab", User: "ana", MaxSubmitJobs: 3}}, h.call("pat")); err != nil {
		t.Fatal(err)
	}
	submitted := timestamppb.New(time.Now())
	acc := &loomv1.Job{Name: "projects/default/jobs/50", JobId: "50", Cluster: cluster1, State: loomv1.JobState_PENDING,
		User: "ana", Account: "root", Qos: "normal", Partition: "all", Array: "0-9", SubmitTime: submitted}
	h.accept(ctx, t, acc)
	task := func(k int, st loomv1.JobState, account string) {
		id := strconv.Itoa(50 + k)
		h.w.setJob(&loomv1.Job{Name: "projects/default/jobs/" + id, JobId: id, Cluster: cluster1, State: st,
			User: "ana", Account: account, Qos: "normal", Partition: "all", Array: "0-9", ArrayJobId: "50", ArrayTaskId: int32(k),
			SubmitTime: submitted})
	}
	for k := range 10 {
		task(k, loomv1.JobState_PENDING, "root")
	}
	lab := "lab"
	move := func() error {
		_, err := ana.UpdateJob(ctx, &loomv1.UpdateJobRequest{Name: "projects/default/jobs/50", Action: "update", Account: &lab})
		return err
	}
	wantCode(t, "a 10-task array into lab", move(), codes.ResourceExhausted, "MaxSubmitJobs=3", "10 more moved to it")
	task(0, loomv1.JobState_PENDING, "lab") // moved alone before
	wantCode(t, "9 more tasks into lab, 1 there", move(), codes.ResourceExhausted, "MaxSubmitJobs=3", "9 more moved to it")
	for k := range 7 {
		task(k, loomv1.JobState_RUNNING, "root")
	}
	if err := move(); err != nil {
		t.Errorf("the 3 pending tasks into lab (7 running stay): %v", err)
	}
}
