package fakegw

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/loom-ml/loom/libs/paging"
	"github.com/loom-ml/loom/libs/testkit"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

const demo = "projects/default/clusters/demo"

// jobs are n jobs of demo, ids 1..n, alternately alice's (running) and
// bob's (pending).
func jobs(n int) []*loomv1.Job {
	var out []*loomv1.Job
	for i := 1; i <= n; i++ {
		id := strconv.Itoa(i)
		j := &loomv1.Job{Name: "projects/default/jobs/" + id, JobId: id, Cluster: demo, User: "alice", State: loomv1.JobState_RUNNING}
		if i%2 == 0 {
			j.User, j.State = "bob", loomv1.JobState_PENDING
		}
		out = append(out, j)
	}
	return out
}

// TestListJobsPages: a list read page by page gives every matching job
// once, in order, and the requests are recorded as sent.
func TestListJobsPages(t *testing.T) {
	t.Parallel()
	g := &Gateway{Jobs: jobs(7)}
	g.Jobs = append(g.Jobs, &loomv1.Job{Name: "projects/other/jobs/99", JobId: "99", Cluster: demo, User: "bob"})
	cl := loomv1.NewJobServiceClient(g.Dial(t))
	ctx := testkit.Context(t, 30*time.Second)

	var got []string
	pages := 0
	err := paging.Each(func(token string) (string, error) {
		resp, err := cl.ListJobs(ctx, &loomv1.ListJobsRequest{Parent: "projects/default", Cluster: demo,
			Users: []string{"bob"}, PageSize: 2, PageToken: token})
		for _, j := range resp.GetJobs() {
			got = append(got, j.GetJobId())
		}
		pages++
		return resp.GetNextPageToken(), err
	})
	if err != nil {
		t.Fatal(err)
	}
	// bob's of projects/default: 2, 4, 6 (99 is another project's).
	if want := "2 4 6"; strings.Join(got, " ") != want || pages != 2 {
		t.Fatalf("listed %v in %d pages, want %s in 2", got, pages, want)
	}
	reqs := Requests[*loomv1.ListJobsRequest](g)
	if len(reqs) != 2 || reqs[0].GetPageToken() != "" || reqs[1].GetPageToken() == "" {
		t.Fatalf("recorded %v", reqs)
	}
	// A token for other filters is refused, as the gateway refuses it.
	_, err = cl.ListJobs(ctx, &loomv1.ListJobsRequest{Parent: "projects/default", PageSize: 2, PageToken: reqs[1].GetPageToken()})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a token of another query: %v, want InvalidArgument", err)
	}
	// active_only leaves out ended jobs.
	g.Jobs[0].State = loomv1.JobState_COMPLETED
	resp, err := cl.ListJobs(ctx, &loomv1.ListJobsRequest{Parent: "projects/default", Users: []string{"alice"}, ActiveOnly: true})
	if err != nil || len(resp.GetJobs()) != 3 || resp.GetJobs()[0].GetJobId() != "3" {
		t.Fatalf("active only: %v (%v), want alice's 3, 5, 7", resp.GetJobs(), err)
	}
}

// TestOwnerChecks: with DenyOthers only a job's owner may cancel or
// update it; without, anyone may. A cancelled pending job answers
// CANCELLED, a running one its state before.
func TestOwnerChecks(t *testing.T) {
	t.Parallel()
	g := &Gateway{Jobs: jobs(2), DenyOthers: true}
	cl := loomv1.NewJobServiceClient(g.Dial(t))
	ctx := testkit.Context(t, 30*time.Second)

	if _, err := cl.CancelJob(ctx, &loomv1.CancelJobRequest{Name: "projects/default/jobs/2", User: "alice"}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("alice cancels bob's job: %v, want PermissionDenied", err)
	}
	if _, err := cl.UpdateJob(ctx, &loomv1.UpdateJobRequest{Name: "projects/default/jobs/1", User: "bob", Action: "hold"}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("bob holds alice's job: %v, want PermissionDenied", err)
	}
	if j, err := cl.GetJob(ctx, &loomv1.GetJobRequest{Name: "projects/default/jobs/2"}); err != nil || j.GetState() != loomv1.JobState_PENDING {
		t.Fatalf("a refused cancel changed the job: %v (%v)", j, err)
	}
	j, err := cl.CancelJob(ctx, &loomv1.CancelJobRequest{Name: "projects/default/jobs/2", User: "bob"})
	if err != nil || j.GetState() != loomv1.JobState_CANCELLED {
		t.Fatalf("bob cancels his pending job: %v (%v), want it CANCELLED", j, err)
	}
	if _, err := cl.CancelJob(ctx, &loomv1.CancelJobRequest{Name: "projects/default/jobs/9", User: "bob"}); status.Code(err) != codes.NotFound {
		t.Fatalf("an unknown job: %v, want NotFound", err)
	}

	g.DenyOthers = false
	j, err = cl.CancelJob(ctx, &loomv1.CancelJobRequest{Name: "projects/default/jobs/1", User: "bob"})
	if err != nil || j.GetState() != loomv1.JobState_RUNNING {
		t.Fatalf("anyone cancels a running job: %v (%v), want it answered RUNNING", j, err)
	}
	if j, _ := cl.GetJob(ctx, &loomv1.GetJobRequest{Name: "projects/default/jobs/1"}); j.GetState() != loomv1.JobState_CANCELLED {
		t.Fatalf("after the cancel the job is %v, want CANCELLED", j.GetState())
	}
	if cs := Requests[*loomv1.CancelJobRequest](g); len(cs) != 4 || cs[0].GetUser() != "alice" {
		t.Fatalf("recorded cancels %v", cs)
	}
}

// TestSubmitJob: ids follow the largest one known, under the request's
// project; the job is then found and listed.
func TestSubmitJob(t *testing.T) {
	t.Parallel()
	g := &Gateway{Jobs: jobs(3), Now: func() time.Time { return time.Unix(100, 0) }}
	cl := loomv1.NewJobServiceClient(g.Dial(t))
	ctx := testkit.Context(t, 30*time.Second)
	j, err := cl.SubmitJob(ctx, &loomv1.SubmitJobRequest{Parent: "projects/p", Job: &loomv1.Job{Cluster: demo}})
	if err != nil || j.GetName() != "projects/p/jobs/4" || j.GetState() != loomv1.JobState_PENDING || j.GetSubmitTime().GetSeconds() != 100 {
		t.Fatalf("submitted %v (%v)", j, err)
	}
	if got, err := cl.GetJob(ctx, &loomv1.GetJobRequest{Name: j.GetName()}); err != nil || got.GetJobId() != "4" {
		t.Fatalf("get the submitted job: %v (%v)", got, err)
	}
	g.MaxArraySize = 10
	if _, err := cl.SubmitJob(ctx, &loomv1.SubmitJobRequest{Parent: "projects/p", Job: &loomv1.Job{Array: "0-10"}}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("an array past MaxArraySize: %v, want InvalidArgument", err)
	}
}

// TestJobSteps: a step is refused as the gateway refuses it, laid out on
// the job's nodes, numbered after the job's steps, played to the end the
// test set (its tasks' output written, their exit codes), listed, and
// cancelled; a polled job starts on its cluster's nodes with StartJobs.
func TestJobSteps(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	g := &Gateway{Jobs: jobs(3), StepExitCodes: []int32{0, 5}, StepEndAfter: 1, StepOutputDir: dir}
	g.Jobs[0].Nodes = []string{"gpu-1", "gpu-2", "gpu-3"}
	g.Jobs[2].State = loomv1.JobState_COMPLETED
	cl := loomv1.NewJobServiceClient(g.Dial(t))
	ctx := testkit.Context(t, 30*time.Second)
	create := func(job string, nodes, ntasks int32, requestID string) (*loomv1.JobStep, error) {
		return cl.CreateJobStep(ctx, &loomv1.CreateJobStepRequest{Parent: "projects/default/jobs/" + job, Command: []string{"train"},
			NodeCount: nodes, Ntasks: ntasks, RequestId: requestID})
	}

	for _, tc := range []struct {
		job   string
		nodes int32
		code  codes.Code
		msg   string
	}{
		{"2", 0, codes.FailedPrecondition, "Job is pending execution"},
		{"3", 0, codes.FailedPrecondition, "Job/step already completing or completed"},
		{"9", 0, codes.NotFound, "job projects/default/jobs/9 not found"},
		{"1", 4, codes.InvalidArgument, "node_count: Requested node configuration is not available: the job has 3 node(s), 4 requested"},
	} {
		if _, err := create(tc.job, tc.nodes, 0, ""); status.Code(err) != tc.code || status.Convert(err).Message() != tc.msg {
			t.Fatalf("a step of job %s on %d nodes: %v, want %v %q", tc.job, tc.nodes, err, tc.code, tc.msg)
		}
	}

	// Five tasks on two nodes: three on the first.
	s, err := create("1", 2, 5, "req-1")
	if err != nil || s.GetName() != "projects/default/jobs/1/steps/0" || s.GetState() != loomv1.JobState_RUNNING ||
		!slices.Equal(s.GetNodes(), []string{"gpu-1", "gpu-2"}) || !slices.Equal(s.GetTasksPerNode(), []int32{3, 2}) ||
		s.GetNumTasks() != 5 || s.GetOutputDir() != dir {
		t.Fatalf("created %v (%v)", s, err)
	}
	if out, err := os.ReadFile(filepath.Join(dir, "task-4.out")); err != nil || string(out) != "hello from 4\nsecond line 4" {
		t.Fatalf("task 4's output: %q (%v)", out, err)
	}
	if again, err := create("1", 2, 5, "req-1"); err != nil || again.GetStepId() != 0 || len(g.Steps) != 1 {
		t.Fatalf("a retried create: %v (%v), %d steps; want step 0 again", again, err, len(g.Steps))
	}
	// No counts: one task on each of the job's nodes, the job's next step.
	s1, err := create("1", 0, 0, "req-2")
	if err != nil || s1.GetStepId() != 1 || !slices.Equal(s1.GetTasksPerNode(), []int32{1, 1, 1}) {
		t.Fatalf("a second step: %v (%v), want step 1 with a task on each of 3 nodes", s1, err)
	}

	get := func(name string) *loomv1.JobStep {
		t.Helper()
		s, err := cl.GetJobStep(ctx, &loomv1.GetJobStepRequest{Name: name})
		if err != nil {
			t.Fatalf("get %s: %v", name, err)
		}
		return s
	}
	if s := get("projects/default/jobs/1/steps/0"); s.GetState() != loomv1.JobState_RUNNING {
		t.Fatalf("first poll: %v, want RUNNING", s.GetState())
	}
	if s := get("projects/default/jobs/1/steps/0"); s.GetState() != loomv1.JobState_FAILED || s.GetExitCode() != 5 ||
		!slices.Equal(s.GetTaskExitCodes(), []int32{0, 5, 0, 0, 0}) {
		t.Fatalf("second poll: %v, want FAILED with task 1's 5", s)
	}
	if _, err := cl.GetJobStep(ctx, &loomv1.GetJobStepRequest{Name: "projects/default/jobs/1/steps/7"}); status.Code(err) != codes.NotFound {
		t.Fatalf("an unknown step: %v, want NotFound", err)
	}
	if l, err := cl.ListJobSteps(ctx, &loomv1.ListJobStepsRequest{Parent: "projects/default/jobs/1"}); err != nil || len(l.GetSteps()) != 2 {
		t.Fatalf("list: %v (%v), want steps 0 and 1", l, err)
	}

	if _, err := cl.CancelJobStep(ctx, &loomv1.CancelJobStepRequest{Name: s.GetName()}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("cancel an ended step: %v, want FailedPrecondition", err)
	}
	if c, err := cl.CancelJobStep(ctx, &loomv1.CancelJobStepRequest{Name: s1.GetName(), Signal: "USR1"}); err != nil ||
		c.GetState() != loomv1.JobState_RUNNING || get(s1.GetName()).GetState() != loomv1.JobState_RUNNING {
		t.Fatalf("a signal: %v (%v), want the step running on", c, err)
	}
	if c, err := cl.CancelJobStep(ctx, &loomv1.CancelJobStepRequest{Name: s1.GetName()}); err != nil || c.GetState() != loomv1.JobState_RUNNING {
		t.Fatalf("cancel: %v (%v), want the step as it was", c, err)
	}
	if c := get(s1.GetName()); c.GetState() != loomv1.JobState_CANCELLED || c.GetExitCode() != 143 ||
		!slices.Equal(c.GetTaskExitCodes(), []int32{143, 143, 143}) {
		t.Fatalf("after the cancel: %v, want CANCELLED, every task 143", c)
	}
	if names := Requests[*loomv1.CancelJobStepRequest](g); len(names) != 3 {
		t.Fatalf("recorded step cancels %v", names)
	}

	// StartJobs: job 2 is PENDING to its first poll, then runs on two of
	// demo's nodes.
	g.StartJobs, g.PendingPolls = true, 1
	g.Jobs[1].NodeCount = 2
	g.Nodes = []*loomv1.Node{{Name: demo + "/nodes/a", Cluster: demo, Hostname: "a"}, {Name: demo + "/nodes/b", Cluster: demo, Hostname: "b"},
		{Name: demo + "/nodes/c", Cluster: demo, Hostname: "c"}}
	for _, want := range []loomv1.JobState{loomv1.JobState_PENDING, loomv1.JobState_RUNNING} {
		j, err := cl.GetJob(ctx, &loomv1.GetJobRequest{Name: "projects/default/jobs/2"})
		if err != nil || j.GetState() != want {
			t.Fatalf("job 2: %v (%v), want %v", j, err, want)
		}
		if want == loomv1.JobState_RUNNING && !slices.Equal(j.GetNodes(), []string{"a", "b"}) {
			t.Fatalf("job 2 runs on %v, want a and b", j.GetNodes())
		}
	}
}
