package fakegw

import (
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
