package domain

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/paging"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/scheduler/internal/domain/jobstore"

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

// TestRealStatePagesMatchASort: paging through a State's project (its
// lists, or before they are made its walk) lists exactly the jobs a sort of
// every selected job by paging.JobKey gives, each once, after loads, lists
// made before a load, and changes of state, id and presence between; job
// ids that are not numbers, with leading zeros or a sign, or past uint64;
// and a project named jobs.
func TestRealStatePagesMatchASort(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	states := []loomv1.JobState{loomv1.JobState_RUNNING, loomv1.JobState_COMPLETED, loomv1.JobState_CONFIGURING}
	projects := []string{"p0", "jobs"}
	for round := range 150 {
		s := NewState(Config{})
		if round%3 == 0 {
			s.BuildLists() // made while empty: the load must not leave them empty
		}
		mk := func(name string) *Job {
			id := strconv.Itoa(rng.IntN(40))
			switch rng.IntN(8) {
			case 0:
				id = "x" + id
			case 1:
				id = "0" + id
			case 2:
				id = "+" + id
			case 3:
				id = "99999999999999999999"
			}
			return &Job{JobRecord: jobstore.JobRecord{Job: &loomv1.Job{Name: name, JobId: id, Cluster: "c", User: []string{"a", "b"}[rng.IntN(2)],
				State: states[rng.IntN(3)]}}}
		}
		var jobs []*Job
		for i := range 1 + rng.IntN(60) {
			jobs = append(jobs, mk(fmt.Sprintf("projects/%s/jobs/%d", projects[rng.IntN(2)], i)))
		}
		s.Load(nil, nil, jobs, nil, nil, nil)
		if round%2 == 0 {
			s.BuildLists()
		}
		for range rng.IntN(20) {
			j := jobs[rng.IntN(len(jobs))]
			if rng.IntN(4) == 0 {
				s.putJob(j.Name(), nil)
				continue
			}
			s.putJob(j.Name(), mk(j.Name()))
		}
		f := views.JobFilter{Project: "projects/" + projects[rng.IntN(2)]}
		if rng.IntN(3) == 0 {
			f.Users = []string{"a"}
		}
		f.ActiveOnly = rng.IntN(2) == 0
		f.Desc = rng.IntN(2) == 0
		if rng.IntN(3) == 0 {
			f.JobIDs = []string{strconv.Itoa(rng.IntN(40)), strconv.Itoa(rng.IntN(40)) + "_1"}
			if rng.IntN(4) == 0 {
				f.JobIDs = append(f.JobIDs, "x3")
			}
		}
		var want []string
		s.EachJob(func(j *loomv1.Job) {
			if f.Keep(j) {
				want = append(want, paging.JobKey(j))
			}
		})
		slices.Sort(want)
		if f.Desc {
			slices.Reverse(want)
		}
		var got []string
		after := ""
		for range 100 {
			page, next := views.ListPage(s, f, after, 1+rng.IntN(5), time.Time{})
			for _, j := range page {
				got = append(got, paging.JobKey(j))
			}
			if next == "" {
				break
			}
			after = next
		}
		if !slices.Equal(got, want) {
			t.Fatalf("round %d (%+v, lists made %v): listed %q, want %q", round, f, s.Listed(), got, want)
		}
	}
}

// TestListJobsNewestFirst: order_by "submit_time desc" (JobFilter.Desc)
// pages a project's jobs from the newest back, each page going on from
// the previous one's last key, all of them once, from the project's
// B-tree (BuildLists) as from a walk; with a job id filter the walk ends
// at the least id asked for. Before, ListJobs listed only the oldest
// first: the newest of a big project were past every page a reader takes.
func TestListJobsNewestFirst(t *testing.T) {
	t.Parallel()
	h := newSpecHarness(t, Config{})
	const n = 45
	for id := 1; id <= n; id++ {
		h.submitJob(job(id, 1, 1))
	}
	for _, built := range []bool{false, true} {
		if built {
			h.s.BuildLists()
		}
		for _, f := range []views.JobFilter{{Desc: true}, {Project: "projects/default", Desc: true}} {
			var got []string
			after := ""
			for range n + 1 {
				page, next := views.ListPage(h.s, f, after, 7, h.now)
				for _, j := range page {
					got = append(got, j.GetJobId())
				}
				if next == "" {
					break
				}
				after = next
			}
			var want []string
			for id := n; id >= 1; id-- {
				want = append(want, strconv.Itoa(id))
			}
			if !slices.Equal(got, want) {
				t.Fatalf("lists made %v, %+v: listed %v, want %v", built, f, got, want)
			}
		}
		page, next := views.ListPage(h.s, views.JobFilter{Project: "projects/default", JobIDs: []string{"3", "20"}, Desc: true}, "", 1, h.now)
		if len(page) != 1 || page[0].GetJobId() != "20" || next == "" {
			t.Fatalf("lists made %v: job ids 3, 20 newest first: first page %v, next %q", built, page, next)
		}
		if page, next = views.ListPage(h.s, views.JobFilter{Project: "projects/default", JobIDs: []string{"3", "20"}, Desc: true}, next, 1, h.now); len(page) != 1 || page[0].GetJobId() != "3" {
			t.Fatalf("lists made %v: job ids 3, 20 newest first: second page %v, next %q", built, page, next)
		}
	}
}
