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
