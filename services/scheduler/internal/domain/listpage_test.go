package domain

import (
	"slices"
	"strings"
	"testing"
	"time"

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

// BenchmarkListPage measures one squeue page (100 jobs, the first and a
// middle one) of one project over 10,000 nodes' running jobs and 100,000
// pending ones: what a ListJobs holds the state's read lock for; and
// BuildLists, what the first list after a restart waits for once.
func BenchmarkListPage(b *testing.B) {
	s, now := benchCluster(10000, 100000, 0.95, 1)
	s.BuildLists()
	var mid string
	{
		_, keys := listedKeysForBench(s)
		mid = keys[len(keys)/2]
	}
	b.Run("build", func(b *testing.B) {
		for b.Loop() {
			s.lists = nil
			s.BuildLists()
		}
	})
	for _, c := range []struct{ name, after string }{{"first", ""}, {"middle", mid}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				page, next := views.ListPage(s, views.JobFilter{Project: "projects/default", ActiveOnly: true}, c.after, 100, now)
				if len(page) != 100 || next == "" {
					b.Fatalf("a page of %d, next %q", len(page), next)
				}
			}
		})
	}
}

// listedKeysForBench is every job's list key, sorted.
func listedKeysForBench(s *State) ([]string, []string) {
	var names, keys []string
	s.EachJob(func(j *loomv1.Job) { names, keys = append(names, j.GetName()), append(keys, paging.JobKey(j)) })
	slices.Sort(keys)
	return names, keys
}

// checkLists fails t unless the state's project lists (listindex.go) hold
// exactly its jobs, each active one in its project's active list. It makes
// them first when they are not made yet: later changes must keep them.
func checkLists(t *testing.T, s *State) {
	t.Helper()
	s.BuildLists()
	ref := NewState(Config{})
	for _, j := range s.jobs {
		ref.jobs[j.Name()] = j
	}
	ref.BuildLists()
	if got, want := listsText(s), listsText(ref); got != want {
		t.Fatalf("the project lists do not follow the jobs:\n%s\nwant\n%s", got, want)
	}
}

// TestListsFollowTheJobs: after retention prunes ended jobs and a restart
// loads the rest, the project lists hold what the jobs are, and a page of
// a project reads from them.
func TestListsFollowTheJobs(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.node("gpu-0001", 8)
	for id := 1; id <= 6; id++ {
		h.submitJob(job(id, 1, 8))
	}
	h.finish(1, 0)
	// Before the lists are made a page walks every job: the same page.
	before, _ := views.ListPage(h.s, views.JobFilter{Project: "projects/default", ActiveOnly: true}, "", 2, h.now)
	h.finish(2, 1)
	checkLists(t, h.s)
	if len(before) != 2 || before[0].GetJobId() != "2" || before[1].GetJobId() != "3" {
		t.Errorf("a page before the lists are made: %v, want jobs 2 and 3", before)
	}
	page, next := views.ListPage(h.s, views.JobFilter{Project: "projects/default", ActiveOnly: true}, "", 2, h.now)
	if len(page) != 2 || page[0].GetJobId() != "3" || page[1].GetJobId() != "4" || next == "" {
		t.Fatalf("squeue's first page: %v, next %q; want jobs 3 and 4 and more", page, next)
	}
	h.now = h.now.Add(2 * time.Hour)
	if p := h.prune(Retention{MinJobAge: time.Minute, EndedAge: time.Hour}); p.Empty() {
		t.Fatal("nothing pruned")
	}
	checkLists(t, h.s)
	if page, _ := views.ListPage(h.s, views.JobFilter{Project: "projects/default"}, "", 10, h.now); len(page) != 4 || page[0].GetJobId() != "3" {
		t.Errorf("after the prune: %d jobs from %v, want 3..6", len(page), page)
	}
}
