package ports

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/paging"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/scheduler/internal/domain/views"
)

// listRecorder is the Jobs of a JobServer that records the lists asked of it.
type listRecorder struct {
	Jobs
	afters []string
}

func (r *listRecorder) ListJobs(_ views.JobFilter, after string, _ int) ([]*loomv1.Job, string) {
	r.afters = append(r.afters, after)
	return nil, ""
}

// TestListJobsRefusesAForgedPageToken: a page token's hash is no signature,
// so a caller can make one that goes on from any string. One that is no
// job's list key is InvalidArgument naming page_token, and never reaches
// the state (where it would walk every job of every project); a token
// the list made itself goes through.
func TestListJobsRefusesAForgedPageToken(t *testing.T) {
	t.Parallel()
	rec := &listRecorder{}
	s := NewJobServer(rec)
	for _, order := range []string{"", "submit_time desc"} {
		req := &loomv1.ListJobsRequest{Parent: "projects/p", OrderBy: order}
		forged := proto(req)
		forged.PageToken = paging.Token(req, "not a job key")
		_, err := s.ListJobs(context.Background(), forged)
		if status.Code(errs.ToStatus(err)) != codes.InvalidArgument || !strings.Contains(err.Error(), "page_token") {
			t.Fatalf("ListJobs(order_by %q) with a forged token = %v; want InvalidArgument naming page_token", order, err)
		}
		if len(rec.afters) != 0 {
			t.Fatalf("a forged token reached the state: %q", rec.afters)
		}
		good := proto(req)
		good.PageToken = paging.Token(req, paging.JobKey(&loomv1.Job{JobId: "12", Name: "projects/p/jobs/12"}))
		if _, err := s.ListJobs(context.Background(), good); err != nil {
			t.Fatalf("ListJobs with a job's key: %v", err)
		}
		rec.afters = nil
	}
}

func proto(r *loomv1.ListJobsRequest) *loomv1.ListJobsRequest {
	return &loomv1.ListJobsRequest{Parent: r.GetParent(), OrderBy: r.GetOrderBy()}
}
