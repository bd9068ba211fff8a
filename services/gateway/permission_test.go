package gateway

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/auth"
	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/gateway/internal/adapters"
)

// TestJobPermissions: users act on their own jobs only, administrators
// (cluster admins root, slurm; project admin pat) on any; an
// administrator's hold is an admin hold (uhold a user hold), which a user
// may not release. Refusals are PermissionDenied with Slurm's
// "Access/permission denied". Who asks is the authenticated principal,
// never the request's user field.
func TestJobPermissions(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := testkit.Context(t, 2*wait)
	as := func(who string) loomv1.JobServiceClient { return loomv1.NewJobServiceClient(h.as(t, who)) }

	ana := &loomv1.Job{Name: "projects/default/jobs/40", JobId: "40", Cluster: cluster1, State: loomv1.JobState_PENDING,
		User: "ana", Partition: "all", StateReason: "Priority"}
	h.w.setJob(ana)

	for _, tc := range []struct {
		what string
		err  error
	}{
		{"bob holds ana's job", func() error {
			_, err := as("bob").UpdateJob(ctx, &loomv1.UpdateJobRequest{Name: ana.GetName(), Action: "hold"})
			return err
		}()},
		{"bob cancels ana's job", func() error {
			_, err := as("bob").CancelJob(ctx, &loomv1.CancelJobRequest{Name: ana.GetName()})
			return err
		}()},
		// Claiming another identity through the user fields changes nothing.
		{"bob, claiming to be ana, cancels ana's job", func() error {
			_, err := as("bob").CancelJob(ctx, &loomv1.CancelJobRequest{Name: ana.GetName(), User: "ana"})
			return err
		}()},
		{"bob, claiming to be root, holds ana's job", func() error {
			_, err := as("bob").UpdateJob(ctx, &loomv1.UpdateJobRequest{Name: ana.GetName(), Action: "hold", User: "root"})
			return err
		}()},
		{"a viewer updates ana's job", func() error {
			_, err := as("vic").UpdateJob(ctx, &loomv1.UpdateJobRequest{Name: ana.GetName(), Action: "update", TimeLimitSeconds: 60})
			return err
		}()},
	} {
		wantCode(t, tc.what, tc.err, codes.PermissionDenied, "Access/permission denied")
	}
	_, err := as("").UpdateJob(ctx, &loomv1.UpdateJobRequest{Name: ana.GetName(), Action: "update", TimeLimitSeconds: 60, User: "ana"})
	wantCode(t, "an anonymous caller updates ana's job", err, codes.Unauthenticated, "needs a credential")

	// The commands name the caller and whether they are an administrator
	// (the scheduler makes root's hold an admin hold, its uhold a user
	// hold), and carry the caller's principal.
	for _, tc := range []struct {
		user, action string
		admin        bool
	}{{"ana", "hold", false}, {"root", "hold", true}, {"root", "uhold", true}, {"slurm", "release", true}, {"pat", "hold", true}} {
		// The user field, even naming someone else, is not believed.
		if _, err := as(tc.user).UpdateJob(ctx, &loomv1.UpdateJobRequest{Name: ana.GetName(), Action: tc.action, User: "mallory"}); err != nil {
			t.Fatalf("%s by %s: %v", tc.action, tc.user, err)
		}
		ev := testkit.WaitEvent(t, h.broker, topics.JobCommands, wait, func(e envelope.Event) bool {
			u, ok := e.Payload.(*eventsv1.UpdateJob)
			return ok && u.GetJob() == ana.GetName() && u.GetAction() == tc.action && u.GetUser() == tc.user && u.GetAdmin() == tc.admin
		})
		if ev.Principal != auth.UserName(tc.user) {
			t.Errorf("%s by %s: the command's principal is %q", tc.action, tc.user, ev.Principal)
		}
	}

	// An admin hold: ana may not release it, root may.
	held := &loomv1.Job{Name: "projects/default/jobs/41", JobId: "41", Cluster: cluster1, State: loomv1.JobState_PENDING,
		User: "ana", Partition: "all", Hold: true, StateReason: "JobHeldAdmin"}
	h.w.setJob(held)
	_, err = as("ana").UpdateJob(ctx, &loomv1.UpdateJobRequest{Name: held.GetName(), Action: "release"})
	wantCode(t, "ana releases an admin hold", err, codes.PermissionDenied, "Access/permission denied")
	// Nor may she put a hold of her own in its place (she could release that).
	for _, a := range []string{"hold", "uhold"} {
		_, err = as("ana").UpdateJob(ctx, &loomv1.UpdateJobRequest{Name: held.GetName(), Action: a})
		wantCode(t, "ana "+a+"s an admin-held job", err, codes.PermissionDenied, "only an administrator may release it or change its hold")
	}
	if _, err := as("root").UpdateJob(ctx, &loomv1.UpdateJobRequest{Name: held.GetName(), Action: "release"}); err != nil {
		t.Fatalf("root releases an admin hold: %v", err)
	}
	// root cancels ana's job.
	if _, err := as("root").CancelJob(ctx, &loomv1.CancelJobRequest{Name: held.GetName()}); err != nil {
		t.Fatalf("root cancels ana's job: %v", err)
	}
	jobCommand(t, h, func(c *eventsv1.CancelJob) bool {
		return c.GetJob() == held.GetName() && c.GetUser() == "root" && c.GetAdmin()
	})
}

// TestNicePermissions: anyone may lower their own job's priority with a
// positive nice, at submission or later; only an administrator may raise
// one with a negative nice (PermissionDenied naming the field); a nice
// past ±2147483645 is InvalidArgument. The update reaches the scheduler
// with the nice set.
func TestNicePermissions(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := testkit.Context(t, 2*wait)
	as := func(who string) loomv1.JobServiceClient { return loomv1.NewJobServiceClient(h.as(t, who)) }
	submit := func(who string, nice int32) (*loomv1.Job, error) {
		req := validJob()
		req.Job.Nice = nice
		return as(who).SubmitJob(ctx, req)
	}
	if j, err := submit("ana", 10); err != nil || j.GetNice() != 10 {
		t.Fatalf("ana submits with nice 10: %v, %v", j, err)
	}
	_, err := submit("ana", -5)
	wantCode(t, "ana submits with nice -5", err, codes.PermissionDenied, "job.nice", "administrator")
	_, err = submit("root", 2147483646)
	wantCode(t, "a nice past the bound", err, codes.InvalidArgument, "job.nice")
	if j, err := submit("pat", -5); err != nil || j.GetNice() != -5 {
		t.Fatalf("pat (admin) submits with nice -5: %v, %v", j, err)
	}

	ana := &loomv1.Job{Name: "projects/default/jobs/42", JobId: "42", Cluster: cluster1, State: loomv1.JobState_PENDING,
		User: "ana", Partition: "all", StateReason: "Priority"}
	h.w.setJob(ana)
	nice := func(n int32) *int32 { return &n }
	_, err = as("ana").UpdateJob(ctx, &loomv1.UpdateJobRequest{Name: ana.GetName(), Action: "update", Nice: nice(-1)})
	wantCode(t, "ana sets Nice=-1", err, codes.PermissionDenied, "nice", "administrator")
	_, err = as("ana").UpdateJob(ctx, &loomv1.UpdateJobRequest{Name: ana.GetName(), Action: "hold", Nice: nice(1)})
	wantCode(t, "a nice with hold", err, codes.InvalidArgument, "nice")
	for _, tc := range []struct {
		who  string
		nice int32
	}{{"ana", 50}, {"pat", -10}} {
		if _, err := as(tc.who).UpdateJob(ctx, &loomv1.UpdateJobRequest{Name: ana.GetName(), Action: "update", Nice: nice(tc.nice)}); err != nil {
			t.Fatalf("%s sets Nice=%d: %v", tc.who, tc.nice, err)
		}
		testkit.WaitEvent(t, h.broker, topics.JobCommands, wait, func(e envelope.Event) bool {
			u, ok := e.Payload.(*eventsv1.UpdateJob)
			return ok && u.GetJob() == ana.GetName() && u.Nice != nil && u.GetNice() == tc.nice && u.GetUser() == tc.who
		})
	}
}

// TestUpdateBeginAndDependency: scontrol update StartTime=, Dependency=,
// QOS= and Account= reach the scheduler for a pending job; a dependency that does not parse
// is InvalidArgument naming the field, and either on a running job is
// Slurm's "Job is no longer pending execution".
func TestUpdateBeginAndDependency(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := testkit.Context(t, 2*wait)
	ana := loomv1.NewJobServiceClient(h.as(t, "ana"))
	pending := &loomv1.Job{Name: "projects/default/jobs/43", JobId: "43", Cluster: cluster1, State: loomv1.JobState_PENDING,
		User: "ana", Partition: "all", StateReason: "Priority"}
	running := &loomv1.Job{Name: "projects/default/jobs/44", JobId: "44", Cluster: cluster1, State: loomv1.JobState_RUNNING,
		User: "ana", Partition: "all"}
	h.w.setJob(pending)
	h.w.setJob(running)
	// Jobs up to 44 were issued; 45 is none.
	if err := h.redis.Set(ctx, "gateway:"+adapters.KeyJobSeq, 44, 0).Err(); err != nil {
		t.Fatal(err)
	}
	dep := func(s string) *string { return &s }
	_, err := ana.UpdateJob(ctx, &loomv1.UpdateJobRequest{Name: pending.GetName(), Action: "update", Dependency: dep("afterok:x")})
	wantCode(t, "a dependency that does not parse", err, codes.InvalidArgument, "dependency")
	_, err = ana.UpdateJob(ctx, &loomv1.UpdateJobRequest{Name: running.GetName(), Action: "update", Dependency: dep("afterok:43")})
	wantCode(t, "a running job's dependency", err, codes.FailedPrecondition, "no longer pending")
	_, err = ana.UpdateJob(ctx, &loomv1.UpdateJobRequest{Name: pending.GetName(), Action: "update", Dependency: dep("afterok:45")})
	wantCode(t, "a dependency on a job never issued", err, codes.InvalidArgument, "dependency: job 45 does not exist", "Job dependency problem")
	begin := timestamppb.New(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	if _, err := ana.UpdateJob(ctx, &loomv1.UpdateJobRequest{Name: pending.GetName(), Action: "update", Dependency: dep("afterany:44"),
		BeginTime: begin}); err != nil {
		t.Fatalf("update of the pending job: %v", err)
	}
	testkit.WaitEvent(t, h.broker, topics.JobCommands, wait, func(e envelope.Event) bool {
		u, ok := e.Payload.(*eventsv1.UpdateJob)
		return ok && u.GetJob() == pending.GetName() && u.GetDependency() == "afterany:44" && u.GetBeginTime().AsTime().Equal(begin.AsTime())
	})

	// QOS=: as at submission, one open to every member or granted to the
	// job's association; a running job's is not changed.
	qos := func(q string) *string { return &q }
	_, err = ana.UpdateJob(ctx, &loomv1.UpdateJobRequest{Name: pending.GetName(), Action: "update", Qos: qos("high")})
	wantCode(t, "ana asks for QOS high", err, codes.InvalidArgument, "qos", "Invalid qos specification")
	_, err = ana.UpdateJob(ctx, &loomv1.UpdateJobRequest{Name: running.GetName(), Action: "update", Qos: qos("low")})
	wantCode(t, "a running job's QOS", err, codes.FailedPrecondition, "no longer pending")
	if _, err := ana.UpdateJob(ctx, &loomv1.UpdateJobRequest{Name: pending.GetName(), Action: "update", Qos: qos("Low")}); err != nil {
		t.Fatalf("QOS=Low: %v", err)
	}
	testkit.WaitEvent(t, h.broker, topics.JobCommands, wait, func(e envelope.Event) bool {
		u, ok := e.Payload.(*eventsv1.UpdateJob)
		return ok && u.GetJob() == pending.GetName() && u.Qos != nil && u.GetQos() == "low"
	})
	// Granted to ana's association: allowed.
	if _, err := h.accounts().SetAssociation(ctx, &loomv1.SetAssociationRequest{Parent: "projects/default", Association: &loomv1.Association{
		Account: "root", User: "ana", Qos: []string{"high"}}}, h.call("pat")); err != nil {
		t.Fatal(err)
	}
	granted := proto.Clone(pending).(*loomv1.Job)
	granted.Name, granted.JobId, granted.Account = "projects/default/jobs/45", "45", "root"
	h.w.setJob(granted)
	if _, err := ana.UpdateJob(ctx, &loomv1.UpdateJobRequest{Name: granted.GetName(), Action: "update", Qos: qos("high")}); err != nil {
		t.Fatalf("QOS=high granted to ana's association: %v", err)
	}

	// Account=: one ana has an association with; moving a job whose QOS
	// the new account does not grant is refused naming account.
	if _, err := h.accounts().CreateAccount(ctx, &loomv1.CreateAccountRequest{Parent: "projects/default", Account: &loomv1.Account{Name: "lab"}}, h.call("pat")); err != nil {
		t.Fatal(err)
	}
	if _, err := h.accounts().SetAssociation(ctx, &loomv1.SetAssociationRequest{Parent: "projects/default", Association: &loomv1.Association{
		Account: "lab", User: "ana"}}, h.call("pat")); err != nil {
		t.Fatal(err)
	}
	_, err = ana.UpdateJob(ctx, &loomv1.UpdateJobRequest{Name: granted.GetName(), Action: "update", Account: qos("nope")})
	wantCode(t, "an account ana has no association with", err, codes.InvalidArgument, "account", "Invalid account")
	granted.Qos = "high"
	h.w.setJob(granted)
	_, err = ana.UpdateJob(ctx, &loomv1.UpdateJobRequest{Name: granted.GetName(), Action: "update", Account: qos("lab")})
	wantCode(t, "lab does not grant high", err, codes.InvalidArgument, "account", "QOS high")
	if _, err := ana.UpdateJob(ctx, &loomv1.UpdateJobRequest{Name: granted.GetName(), Action: "update", Account: qos("LAB"), Qos: qos("normal")}); err != nil {
		t.Fatalf("Account=LAB QOS=normal: %v", err)
	}
	testkit.WaitEvent(t, h.broker, topics.JobCommands, wait, func(e envelope.Event) bool {
		u, ok := e.Payload.(*eventsv1.UpdateJob)
		return ok && u.GetJob() == granted.GetName() && u.GetAccount() == "lab" && u.GetQos() == "normal"
	})
	// A job moved into an account counts against that association's
	// MaxSubmitJobs, as slurmctld's update checks it: with lab full, the
	// move is refused; a change within the job's own account is not a move.
	if _, err := h.accounts().SetAssociation(ctx, &loomv1.SetAssociationRequest{Parent: "projects/default", Association: &loomv1.Association{
		Account: "lab", User: "ana", MaxSubmitJobs: 1}}, h.call("pat")); err != nil {
		t.Fatal(err)
	}
	inLab := proto.Clone(pending).(*loomv1.Job)
	inLab.Name, inLab.JobId, inLab.Account, inLab.Qos = "projects/default/jobs/46", "46", "lab", "normal"
	h.w.setJob(inLab)
	granted.Qos = "normal"
	h.w.setJob(granted)
	_, err = ana.UpdateJob(ctx, &loomv1.UpdateJobRequest{Name: granted.GetName(), Action: "update", Account: qos("lab")})
	wantCode(t, "a move into a full account", err, codes.ResourceExhausted, "MaxSubmitJobs=1", "account=lab")
	if _, err := ana.UpdateJob(ctx, &loomv1.UpdateJobRequest{Name: inLab.GetName(), Action: "update", Account: qos("lab")}); err != nil {
		t.Errorf("Account=lab for a job already in lab: %v", err)
	}
}

// TestUpdateSizeHostsNameAndThrottle: scontrol update NumNodes=, NumTasks=,
// MinMemoryNode=, ReqNodeList=/ExcNodeList=, JobName= and
// ArrayTaskThrottle= reach the scheduler once the gateway has judged them
// against the job's cluster as at submission; what no node set could meet,
// a host the cluster lacks, a size change of a running job and a throttle
// of a job that is no array are refused, naming the field.
func TestUpdateSizeHostsNameAndThrottle(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := testkit.Context(t, 2*wait)
	ana := loomv1.NewJobServiceClient(h.as(t, "ana"))
	pending := &loomv1.Job{Name: "projects/default/jobs/43", JobId: "43", Cluster: cluster1, State: loomv1.JobState_PENDING,
		User: "ana", Partition: "all", StateReason: "Priority", NodeCount: 1, GpusPerNode: 8}
	running := &loomv1.Job{Name: "projects/default/jobs/44", JobId: "44", Cluster: cluster1, State: loomv1.JobState_RUNNING,
		User: "ana", Partition: "all", NodeCount: 1}
	task := &loomv1.Job{Name: "projects/default/jobs/45", JobId: "45", Cluster: cluster1, State: loomv1.JobState_PENDING,
		User: "ana", Partition: "all", ArrayJobId: "45", Array: "0-3%1"}
	for _, j := range []*loomv1.Job{pending, running, task} {
		h.w.setJob(j)
	}
	update := func(name string, set func(*loomv1.UpdateJobRequest)) error {
		r := &loomv1.UpdateJobRequest{Name: name, Action: "update"}
		set(r)
		_, err := ana.UpdateJob(ctx, r)
		return err
	}
	err := update(pending.GetName(), func(r *loomv1.UpdateJobRequest) { r.NodeCount = proto.Int32(3) })
	wantCode(t, "NumNodes=3 of 2 GPU nodes", err, codes.InvalidArgument, "node_count: 3 exceeds the 2 nodes in partition all")
	err = update(pending.GetName(), func(r *loomv1.UpdateJobRequest) { r.Nodelist = &loomv1.HostList{Hosts: []string{"gpu-0009"}} })
	wantCode(t, "ReqNodeList=gpu-0009", err, codes.InvalidArgument, "nodelist[0]", "Invalid node name specified")
	err = update(running.GetName(), func(r *loomv1.UpdateJobRequest) { r.NodeCount = proto.Int32(1) })
	wantCode(t, "NumNodes of a running job", err, codes.FailedPrecondition, "no longer pending")
	err = update(pending.GetName(), func(r *loomv1.UpdateJobRequest) { r.ArrayTaskThrottle = proto.Int32(2) })
	wantCode(t, "ArrayTaskThrottle of a job", err, codes.InvalidArgument, "array_task_throttle", "not an array")

	if err := update(pending.GetName(), func(r *loomv1.UpdateJobRequest) {
		r.NodeCount, r.Ntasks, r.MemMb = proto.Int32(2), proto.Int32(16), proto.Int64(1024)
		r.Exclude = &loomv1.HostList{}
	}); err != nil {
		t.Fatalf("NumNodes=2 NumTasks=16 MinMemoryNode=1G ExcNodeList=: %v", err)
	}
	if err := update(pending.GetName(), func(r *loomv1.UpdateJobRequest) { r.Exclude = &loomv1.HostList{Hosts: []string{"cpu-0001"}} }); err != nil {
		t.Fatalf("ExcNodeList=cpu-0001: %v", err)
	}
	if err := update(running.GetName(), func(r *loomv1.UpdateJobRequest) { r.JobName = proto.String("renamed") }); err != nil {
		t.Fatalf("JobName= of a running job: %v", err)
	}
	if err := update(task.GetName(), func(r *loomv1.UpdateJobRequest) { r.ArrayTaskThrottle = proto.Int32(0) }); err != nil {
		t.Fatalf("ArrayTaskThrottle=0 of an array: %v", err)
	}
	for _, want := range []func(*eventsv1.UpdateJob) bool{
		func(u *eventsv1.UpdateJob) bool {
			return u.GetJob() == pending.GetName() && u.GetNodeCount() == 2 && u.GetNtasks() == 16 && u.GetMemMb() == 1024 &&
				u.GetExclude() != nil && len(u.GetExclude().GetHosts()) == 0 && u.Nodelist == nil
		},
		func(u *eventsv1.UpdateJob) bool {
			return u.GetJob() == pending.GetName() && slices.Equal(u.GetExclude().GetHosts(), []string{"cpu-0001"}) && u.NodeCount == nil
		},
		func(u *eventsv1.UpdateJob) bool {
			return u.GetJob() == running.GetName() && u.GetJobName() == "renamed"
		},
		func(u *eventsv1.UpdateJob) bool {
			return u.GetJob() == task.GetName() && u.ArrayTaskThrottle != nil && u.GetArrayTaskThrottle() == 0
		},
	} {
		testkit.WaitEvent(t, h.broker, topics.JobCommands, wait, func(e envelope.Event) bool {
			u, ok := e.Payload.(*eventsv1.UpdateJob)
			return ok && want(u)
		})
	}
}

// TestUpdateNodelistFitsNodes: ReqNodeList= and NumNodes= are judged by
// the submission's -w rule (slurmspec.FitNodes) on the job as the update
// leaves it: a node count below the hosts is refused naming node_count
// (and nothing reaches the scheduler), and a range's minimum below them
// reaches the scheduler raised to them, as a submission's would be. The
// update kept NodeCount=1 with two hosts.
func TestUpdateNodelistFitsNodes(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := testkit.Context(t, 2*wait)
	ana := loomv1.NewJobServiceClient(h.as(t, "ana"))
	one := &loomv1.Job{Name: "projects/default/jobs/43", JobId: "43", Cluster: cluster1, State: loomv1.JobState_PENDING,
		User: "ana", Partition: "all", StateReason: "Priority", NodeCount: 1, Ntasks: 1}
	ranged := &loomv1.Job{Name: "projects/default/jobs/44", JobId: "44", Cluster: cluster1, State: loomv1.JobState_PENDING,
		User: "ana", Partition: "all", StateReason: "Priority", NodeCount: 1, MaxNodeCount: 2, Ntasks: 1}
	for _, j := range []*loomv1.Job{one, ranged} {
		h.w.setJob(j)
	}
	both := &loomv1.HostList{Hosts: []string{"gpu-0001", "cpu-0001"}}
	_, err := ana.UpdateJob(ctx, &loomv1.UpdateJobRequest{Name: one.GetName(), Action: "update", Nodelist: both})
	wantCode(t, "ReqNodeList=gpu-0001,cpu-0001 of a one-node job", err, codes.InvalidArgument,
		"node_count: 1 is below the 2 hosts nodelist names", "invalid number of nodes (-N 2-1)")
	if _, err := ana.UpdateJob(ctx, &loomv1.UpdateJobRequest{Name: ranged.GetName(), Action: "update", Nodelist: both}); err != nil {
		t.Fatalf("ReqNodeList=gpu-0001,cpu-0001 of a 1-2 node job: %v", err)
	}
	u := jobCommand(t, h, func(u *eventsv1.UpdateJob) bool { return u.GetJob() == ranged.GetName() && u.GetAction() == "update" })
	if u.NodeCount == nil || u.GetNodeCount() != 2 || u.GetMaxNodeCount() != 0 || len(u.GetNodelist().GetHosts()) != 2 {
		t.Errorf("the scheduler's update: node_count %v max %d hosts %v, want 2, 0 (2-2) and both", u.NodeCount, u.GetMaxNodeCount(), u.GetNodelist().GetHosts())
	}
	// The refused update never reached the scheduler: the one command
	// for job 43 is none.
	if _, err := ana.UpdateJob(ctx, &loomv1.UpdateJobRequest{Name: one.GetName(), Action: "update", Nodelist: &loomv1.HostList{Hosts: []string{"gpu-0001"}}}); err != nil {
		t.Fatalf("ReqNodeList=gpu-0001 of a one-node job: %v", err)
	}
	u = jobCommand(t, h, func(u *eventsv1.UpdateJob) bool { return u.GetJob() == one.GetName() && u.GetAction() == "update" })
	if len(u.GetNodelist().GetHosts()) != 1 || u.NodeCount != nil {
		t.Errorf("job 43's first update command: %v, want ReqNodeList=gpu-0001 alone (the refused one never sent)", u)
	}
}

// TestDependencyCycleRefused: an update may not make a job wait for itself,
// directly or through the jobs it would wait for (slurmctld's "Job
// dependency problem"); a dependency on a job that waits for nothing, or
// has ended, is taken.
func TestDependencyCycleRefused(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := testkit.Context(t, 2*wait)
	ana := loomv1.NewJobServiceClient(h.as(t, "ana"))
	pend := func(id, dep string, state loomv1.JobState) {
		h.w.setJob(&loomv1.Job{Name: "projects/default/jobs/" + id, JobId: id, Cluster: cluster1, State: state,
			User: "ana", Partition: "all", Dependency: dep})
	}
	// 50 waits for 51, which waits for 52; 53 ended waiting for 54.
	pend("50", "afterok:51", loomv1.JobState_PENDING)
	pend("51", "afterany:52", loomv1.JobState_PENDING)
	pend("52", "", loomv1.JobState_PENDING)
	pend("53", "afterok:52", loomv1.JobState_COMPLETED)
	if err := h.redis.Set(ctx, "gateway:"+adapters.KeyJobSeq, 60, 0).Err(); err != nil {
		t.Fatal(err)
	}
	update := func(id, dep string) error {
		_, err := ana.UpdateJob(ctx, &loomv1.UpdateJobRequest{Name: "projects/default/jobs/" + id, Action: "update", Dependency: &dep})
		return err
	}
	wantCode(t, "52 on itself", update("52", "afterany:52"), codes.InvalidArgument, "dependency", "cannot wait for itself", "Job dependency problem")
	wantCode(t, "52 on 50 (50 → 51 → 52)", update("52", "afterok:50"), codes.InvalidArgument, "dependency", "job 50 already waits for it")
	wantCode(t, "52 on 53 then 50", update("52", "afterok:53,afterany:50"), codes.InvalidArgument, "dependency", "would wait for itself")
	for _, ok := range []string{"afterok:53", "afterany:40", ""} {
		if err := update("52", ok); err != nil {
			t.Errorf("52 on %q: %v", ok, err)
		}
	}
	// A direct reference to itself is found however many jobs the spec
	// names before it (the walk's bound is for what they wait for).
	var many []string
	for id := 1; id <= 40; id++ {
		many = append(many, strconv.Itoa(id))
	}
	wantCode(t, "52 on 40 jobs, then itself", update("52", "afterany:"+strings.Join(many, ":")+":52"), codes.InvalidArgument, "cannot wait for itself")

	// Array 56 (tasks 56, 57, 58), as accepted and split.
	acc := &loomv1.Job{Name: "projects/default/jobs/56", JobId: "56", Cluster: cluster1, State: loomv1.JobState_PENDING,
		User: "ana", Partition: "all", Array: "0-2"}
	h.accept(ctx, t, acc)
	for k := range 3 {
		id := strconv.Itoa(56 + k)
		h.w.setJob(&loomv1.Job{Name: "projects/default/jobs/" + id, JobId: id, Cluster: cluster1, State: loomv1.JobState_PENDING,
			User: "ana", Partition: "all", Array: "0-2", ArrayJobId: "56", ArrayTaskId: int32(k)})
	}
	task := func(k int, dep string) error {
		_, err := ana.UpdateJob(ctx, &loomv1.UpdateJobRequest{Name: "projects/default/jobs/56_" + strconv.Itoa(k), Action: "update", Dependency: &dep})
		return err
	}
	if err := task(2, "afterok:56_1"); err != nil {
		t.Errorf("task 2 on task 1 of its array: %v", err)
	}
	wantCode(t, "task 2 on itself by its index", task(2, "afterok:56_2"), codes.InvalidArgument, "cannot wait for itself")
	wantCode(t, "task 2 on its whole array", task(2, "afterany:56"), codes.InvalidArgument, "cannot wait for itself")
	wantCode(t, "the whole array on its task 1 by its own id", update("56", "afterok:57"), codes.InvalidArgument, "cannot wait for itself")
	if err := update("56", "afterok:52"); err != nil {
		t.Errorf("the whole array on job 52: %v", err)
	}
}

// TestTimeLimitRaiseOnlyByAdmin: a user lowers their job's time limit; a
// raise is Slurm's "Access/permission denied" for them, and an
// administrator's reaches the scheduler.
func TestTimeLimitRaiseOnlyByAdmin(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := testkit.Context(t, 2*wait)
	j := &loomv1.Job{Name: "projects/default/jobs/46", JobId: "46", Cluster: cluster1, State: loomv1.JobState_RUNNING,
		User: "ana", Partition: "all", TimeLimitSeconds: 3600}
	h.w.setJob(j)
	upd := func(who string, sec int64) error {
		_, err := loomv1.NewJobServiceClient(h.as(t, who)).UpdateJob(ctx, &loomv1.UpdateJobRequest{Name: j.GetName(), Action: "update", TimeLimitSeconds: sec})
		return err
	}
	wantCode(t, "ana raises", upd("ana", 7200), codes.PermissionDenied, "Access/permission denied", "only an administrator may raise a time limit")
	if err := upd("ana", 600); err != nil {
		t.Errorf("ana lowers: %v", err)
	}
	if err := upd("pat", 7200); err != nil {
		t.Fatalf("the project's admin raises: %v", err)
	}
	testkit.WaitEvent(t, h.broker, topics.JobCommands, wait, func(e envelope.Event) bool {
		u, ok := e.Payload.(*eventsv1.UpdateJob)
		return ok && u.GetJob() == j.GetName() && u.GetTimeLimitSeconds() == 7200 && u.GetAdmin()
	})

	// A whole array: judged against each task not ended, not its first's.
	acc := &loomv1.Job{Name: "projects/default/jobs/60", JobId: "60", Cluster: cluster1, State: loomv1.JobState_PENDING,
		User: "ana", Partition: "all", Array: "0-2", TimeLimitSeconds: 3600}
	h.accept(ctx, t, acc)
	for k, lim := range []int64{3600, 600, 600} {
		id := strconv.Itoa(60 + k)
		h.w.setJob(&loomv1.Job{Name: "projects/default/jobs/" + id, JobId: id, Cluster: cluster1, State: loomv1.JobState_PENDING,
			User: "ana", Partition: "all", Array: "0-2", ArrayJobId: "60", ArrayTaskId: int32(k), TimeLimitSeconds: lim})
	}
	_, err := loomv1.NewJobServiceClient(h.as(t, "ana")).UpdateJob(ctx, &loomv1.UpdateJobRequest{Name: "projects/default/jobs/60", Action: "update", TimeLimitSeconds: 3000})
	wantCode(t, "ana raises array 60's later tasks (600 s) to 3000 s", err, codes.PermissionDenied, "job 61", "600 s now")
}
