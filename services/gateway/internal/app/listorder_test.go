package app

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/auth"
	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/paging"
	"github.com/loom-ml/loom/libs/store"
	"github.com/loom-ml/loom/libs/testkit"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/gateway/internal/adapters"
)

// liveScheduler pages its jobs as the scheduler does: in key order, or
// backwards for order_by desc, from its token's key.
type liveScheduler struct {
	loomv1.UnimplementedJobServiceServer
	jobs []*loomv1.Job
}

func (s liveScheduler) ListJobs(_ context.Context, req *loomv1.ListJobsRequest) (*loomv1.ListJobsResponse, error) {
	var v errs.Validator
	desc := paging.JobOrder(&v, req.GetOrderBy())
	size, after := paging.Check(&v, req)
	if err := v.Err(); err != nil {
		return nil, err
	}
	jobs := slices.Clone(s.jobs)
	paging.Sort(jobs, paging.JobKey)
	if desc {
		slices.Reverse(jobs)
	}
	var page []*loomv1.Job
	for _, j := range jobs {
		k := paging.JobKey(j)
		if after != "" && ((!desc && k <= after) || (desc && k >= after)) {
			continue
		}
		if len(page) == size {
			return &loomv1.ListJobsResponse{Jobs: page, NextPageToken: paging.Token(req, paging.JobKey(page[len(page)-1]))}, nil
		}
		page = append(page, j)
	}
	return &loomv1.ListJobsResponse{Jobs: page}, nil
}

// TestListJobsNewestFirst: order_by "submit_time desc" lists a project's
// jobs newest first, page after page, merging the scheduler's live jobs
// with the history and the accepted jobs it does not know yet: every job
// once, in descending order. A token of one order is refused in the other,
// and an order the list does not know is InvalidArgument naming order_by.
// Before, ListJobs had no order: a reader of its first pages got the
// oldest jobs of a big project (the console's Finished table).
func TestListJobsNewestFirst(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 30*time.Second)
	_, rdb := testkit.Redis(t)
	job := func(id int, st loomv1.JobState) *loomv1.Job {
		return &loomv1.Job{Name: "projects/p/jobs/" + strconv.Itoa(id), JobId: strconv.Itoa(id), User: "ana", State: st,
			SubmitTime: timestamppb.Now()}
	}
	var live []*loomv1.Job
	for _, id := range []int{2, 4, 6, 9, 12} {
		live = append(live, job(id, loomv1.JobState_RUNNING))
	}
	owners := serveOwners(t, func(srv *grpc.Server) { loomv1.RegisterJobServiceServer(srv, liveScheduler{jobs: live}) })
	repo := adapters.NewRepo(store.New(rdb, "gateway:"))
	tx := &store.Tx{}
	for _, id := range []int{1, 3, 5, 10, 11} {
		j := job(id, loomv1.JobState_COMPLETED)
		j.EndTime = timestamppb.Now()
		if err := adapters.PutHistory(tx, j); err != nil {
			t.Fatal(err)
		}
	}
	if err := adapters.PutJob(tx, job(13, loomv1.JobState_PENDING)); err != nil {
		t.Fatal(err)
	}
	if _, err := repo.Apply(ctx, "", tx); err != nil {
		t.Fatal(err)
	}
	g := New(repo, owners, Options{ChangeRefresh: time.Hour, Poll: 10 * time.Millisecond})
	ctx = auth.NewContext(ctx, &auth.Principal{Name: "users/vic", Kind: auth.KindUser, User: "vic",
		Roles: map[string]auth.Role{"p": auth.RoleViewer}})
	list := func(order string) (string, string) {
		t.Helper()
		var ids []string
		token, first := "", ""
		for range 20 {
			resp, err := g.ListJobs(ctx, &loomv1.ListJobsRequest{Parent: "projects/p", PageSize: 2, PageToken: token, OrderBy: order})
			if err != nil {
				t.Fatalf("order_by %q: %v", order, err)
			}
			for _, j := range resp.GetJobs() {
				ids = append(ids, j.GetJobId())
			}
			if token = resp.GetNextPageToken(); token == "" {
				break
			}
			if first == "" {
				first = token
			}
		}
		return strings.Join(ids, ","), first
	}
	got, descToken := list("submit_time desc")
	if want := "13,12,11,10,9,6,5,4,3,2,1"; got != want {
		t.Errorf("newest first: listed %s, want %s", got, want)
	}
	if got, _ := list(""); got != "1,2,3,4,5,6,9,10,11,12,13" {
		t.Errorf("in submission order: listed %s", got)
	}
	if got, _ := list("job_id DESC"); got != "13,12,11,10,9,6,5,4,3,2,1" {
		t.Errorf("job_id DESC: listed %s", got)
	}
	for _, c := range []struct{ order, token, want string }{
		{"", descToken, "page_token"},
		{"create_time desc", "", "order_by"},
		{"submit_time down", "", "order_by"},
		{"submit_time desc, job_id", "", "order_by"},
	} {
		_, err := g.ListJobs(ctx, &loomv1.ListJobsRequest{Parent: "projects/p", PageToken: c.token, OrderBy: c.order})
		if status.Code(errs.ToStatus(err)) != codes.InvalidArgument || !strings.Contains(err.Error(), c.want) {
			t.Errorf("order_by %q with token %q: %v, want InvalidArgument naming %s", c.order, c.token, err, c.want)
		}
	}
}
