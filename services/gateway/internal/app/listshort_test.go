package app

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/auth"
	"github.com/loom-ml/loom/libs/paging"
	"github.com/loom-ml/loom/libs/store"
	"github.com/loom-ml/loom/libs/testkit"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/gateway/internal/adapters"
)

// shortScheduler answers a first page as a scheduler that stopped testing
// jobs before it found any (views.MaxScan): no job and a token going on
// after job 50; then job 60 and the end.
type shortScheduler struct {
	loomv1.UnimplementedJobServiceServer
}

func (shortScheduler) ListJobs(_ context.Context, req *loomv1.ListJobsRequest) (*loomv1.ListJobsResponse, error) {
	if req.GetPageToken() == "" {
		fwd := proto.Clone(req).(*loomv1.ListJobsRequest)
		return &loomv1.ListJobsResponse{NextPageToken: paging.Token(fwd, paging.JobKey(&loomv1.Job{Name: "projects/p/jobs/50", JobId: "50"}))}, nil
	}
	return &loomv1.ListJobsResponse{Jobs: []*loomv1.Job{{Name: "projects/p/jobs/60", JobId: "60", State: loomv1.JobState_RUNNING, User: "ana"}}}, nil
}

// TestListJobsFollowsAShortSchedulerPage: when the scheduler's page stops
// short of its size (even empty) with a token, the gateway's merge of its
// history stops at the key that token goes on from, not at the page's last
// job (there is none), and the next page takes up the rest: every job
// once, in order.
func TestListJobsFollowsAShortSchedulerPage(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 30*time.Second)
	_, rdb := testkit.Redis(t)
	owners := serveOwners(t, func(srv *grpc.Server) { loomv1.RegisterJobServiceServer(srv, shortScheduler{}) })
	repo := adapters.NewRepo(store.New(rdb, "gateway:"))
	tx := &store.Tx{}
	for _, id := range []int{10, 70} {
		j := &loomv1.Job{Name: "projects/p/jobs/" + strconv.Itoa(id), JobId: strconv.Itoa(id), User: "ana",
			State: loomv1.JobState_COMPLETED, EndTime: timestamppb.Now()}
		if err := adapters.PutHistory(tx, j); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := repo.Apply(ctx, "", tx); err != nil {
		t.Fatal(err)
	}
	g := New(repo, owners, Options{ChangeRefresh: time.Hour, Poll: 10 * time.Millisecond})
	ctx = auth.NewContext(ctx, &auth.Principal{Name: "users/vic", Kind: auth.KindUser, User: "vic",
		Roles: map[string]auth.Role{"p": auth.RoleViewer}})
	var pages []string
	token := ""
	for range 4 {
		resp, err := g.ListJobs(ctx, &loomv1.ListJobsRequest{Parent: "projects/p", PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, j := range resp.GetJobs() {
			ids = append(ids, j.GetJobId())
		}
		pages = append(pages, strings.Join(ids, ","))
		if token = resp.GetNextPageToken(); token == "" {
			break
		}
	}
	if got := strings.Join(pages, " | "); got != "10 | 60,70" {
		t.Errorf("pages %q, want %q: the history up to the scheduler's key first, then the rest", got, "10 | 60,70")
	}
}

// emptyScheduler lists no jobs.
type emptyScheduler struct {
	loomv1.UnimplementedJobServiceServer
}

func (emptyScheduler) ListJobs(context.Context, *loomv1.ListJobsRequest) (*loomv1.ListJobsResponse, error) {
	return &loomv1.ListJobsResponse{}, nil
}

// TestFilteredListsReadOnlyRecentAcceptedJobs: a filtered list (squeue -u)
// adds only accepted jobs of the last acceptedWindow that the scheduler
// does not list; once the gateway knows the job id counter from before the
// window, it reads no older accepted record: past maxIndexScan of them
// (running jobs, say) the first page is whole, with no token, where it was
// cut at the scan's bound; a job accepted since is listed.
func TestFilteredListsReadOnlyRecentAcceptedJobs(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 60*time.Second)
	_, rdb := testkit.Redis(t)
	owners := serveOwners(t, func(srv *grpc.Server) { loomv1.RegisterJobServiceServer(srv, emptyScheduler{}) })
	repo := adapters.NewRepo(store.New(rdb, "gateway:"))
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	now := t0
	accept := func(n int, user string, at time.Time) {
		t.Helper()
		first, err := repo.NextJobIDs(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		tx, inTx := &store.Tx{}, 0
		for id := first; id < first+int64(n); id++ {
			s := strconv.FormatInt(id, 10)
			if err := adapters.PutJob(tx, &loomv1.Job{Name: "projects/p/jobs/" + s, JobId: s, User: user,
				State: loomv1.JobState_PENDING, SubmitTime: timestamppb.New(at)}); err != nil {
				t.Fatal(err)
			}
			if inTx++; inTx == 2000 {
				if _, err := repo.Apply(ctx, "", tx); err != nil {
					t.Fatal(err)
				}
				tx, inTx = &store.Tx{}, 0
			}
		}
		if _, err := repo.Apply(ctx, "", tx); err != nil {
			t.Fatal(err)
		}
	}
	accept(maxIndexScan+50, "bob", t0.Add(-time.Hour))
	g := New(repo, owners, Options{Now: func() time.Time { return now }, ChangeRefresh: time.Hour})
	ctx = auth.NewContext(ctx, &auth.Principal{Name: "users/vic", Kind: auth.KindUser, User: "vic",
		Roles: map[string]auth.Role{"p": auth.RoleViewer}})
	list := func() ([]string, string) {
		t.Helper()
		resp, err := g.ListJobs(ctx, &loomv1.ListJobsRequest{Parent: "projects/p", Users: []string{"ana"}})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, j := range resp.GetJobs() {
			ids = append(ids, j.GetJobId())
		}
		return ids, resp.GetNextPageToken()
	}
	// No sample older than the window yet: the scan is cut at its bound.
	if ids, next := list(); len(ids) != 0 || next == "" {
		t.Fatalf("first list: %v, next %q; want none and a token (the scan's bound)", ids, next)
	}
	now = now.Add(acceptedWindow + recentIDsMargin + time.Minute)
	accept(1, "ana", now)
	if ids, next := list(); len(ids) != 1 || ids[0] != strconv.Itoa(maxIndexScan+51) || next != "" {
		t.Errorf("a window later: %v, next %q; want ana's new job and no token", ids, next)
	}
}

// splitScheduler is a scheduler that takes array 10 between two of the
// gateway's reads: its filtered page (active_only) is read before it knows
// the array, the gateway's question by id after it split it into tasks 10
// and 11, running.
type splitScheduler struct {
	loomv1.UnimplementedJobServiceServer
}

func (splitScheduler) ListJobs(_ context.Context, req *loomv1.ListJobsRequest) (*loomv1.ListJobsResponse, error) {
	if req.GetActiveOnly() {
		return &loomv1.ListJobsResponse{}, nil
	}
	var out []*loomv1.Job
	for k, id := range []string{"10", "11"} {
		out = append(out, &loomv1.Job{Name: "projects/p/jobs/" + id, JobId: id, User: "ana", Array: "0-1", ArrayJobId: "10",
			ArrayTaskId: int32(k), State: loomv1.JobState_RUNNING})
	}
	return &loomv1.ListJobsResponse{Jobs: out}, nil
}

// TestFilteredListSeesAJobTheSchedulerTookMeanwhile: an accepted array the
// scheduler's page did not hold, but that it knows when the gateway asks
// about it by id (it took the job between the two reads), is listed as the
// scheduler has it now (its tasks), not dropped from both (sbatch -W of an
// array then saw no task at all and returned at once).
func TestFilteredListSeesAJobTheSchedulerTookMeanwhile(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 30*time.Second)
	_, rdb := testkit.Redis(t)
	owners := serveOwners(t, func(srv *grpc.Server) { loomv1.RegisterJobServiceServer(srv, splitScheduler{}) })
	repo := adapters.NewRepo(store.New(rdb, "gateway:"))
	tx := &store.Tx{}
	if err := adapters.PutJob(tx, &loomv1.Job{Name: "projects/p/jobs/10", JobId: "10", User: "ana", Array: "0-1",
		State: loomv1.JobState_PENDING, SubmitTime: timestamppb.Now()}); err != nil {
		t.Fatal(err)
	}
	if _, err := repo.Apply(ctx, "", tx); err != nil {
		t.Fatal(err)
	}
	g := New(repo, owners, Options{ChangeRefresh: time.Hour, Poll: 10 * time.Millisecond})
	ctx = auth.NewContext(ctx, &auth.Principal{Name: "users/ana", Kind: auth.KindUser, User: "ana",
		Roles: map[string]auth.Role{"p": auth.RoleUser}})
	resp, err := g.ListJobs(ctx, &loomv1.ListJobsRequest{Parent: "projects/p", JobIds: []string{"10"}, ActiveOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, j := range resp.GetJobs() {
		got = append(got, j.GetJobId()+":"+j.GetState().String())
	}
	if strings.Join(got, ",") != "10:RUNNING,11:RUNNING" {
		t.Errorf("active jobs of array 10: %v, want its two tasks as the scheduler has them", got)
	}
}
