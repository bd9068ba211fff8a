package domain

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/paging"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"

	"github.com/loom-ml/loom/services/scheduler/internal/domain/views"
)

// TestListJobsPageBoundsBytes: jobs whose environments add up past gRPC's
// 4 MB are listed page by page, each page within paging.MaxBytes and the
// page size, all of them once, in job id order (9 before 10).
func TestListJobsPageBoundsBytes(t *testing.T) {
	t.Parallel()
	h := newSpecHarness(t, Config{})
	big := strings.Repeat("e", 200<<10)
	const n = 25 // 5 MB of environment
	for id := 1; id <= n; id++ {
		h.submitJob(job(id, 1, 1, func(j *loomv1.Job) { j.Env = map[string]string{"BIG": big} }))
	}
	for _, size := range []int{1, 7, paging.MaxSize} {
		var got []string
		after, pages := "", 0
		for {
			page, next := views.ListPage(h.s, views.JobFilter{}, after, size, h.now)
			bytes := 0
			for _, j := range page {
				bytes += proto.Size(j)
				got = append(got, j.GetJobId())
			}
			if len(page) == 0 || len(page) > size || (len(page) > 1 && bytes > paging.MaxBytes) {
				t.Fatalf("size %d: a page of %d jobs, %d bytes", size, len(page), bytes)
			}
			if pages++; next == "" || pages > n {
				break
			}
			after = next
		}
		want := make([]string, n)
		for i := range want {
			want[i] = jobName(i + 1)[len("projects/default/jobs/"):]
		}
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("size %d: listed %v, want %v", size, got, want)
		}
	}
	// A filter pages over what it selects only.
	page, next := views.ListPage(h.s, views.JobFilter{JobIDs: []string{"3", "20"}}, "", 1, h.now)
	if len(page) != 1 || page[0].GetJobId() != "3" || next == "" {
		t.Fatalf("filtered first page %v, next %q", page, next)
	}
	if page, next = views.ListPage(h.s, views.JobFilter{JobIDs: []string{"3", "20"}}, next, 1, h.now); len(page) != 1 || page[0].GetJobId() != "20" || next != "" {
		t.Fatalf("filtered second page %v, next %q; want job 20, the last", page, next)
	}
}
