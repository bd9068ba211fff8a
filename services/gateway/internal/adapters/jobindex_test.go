package adapters

import (
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/paging"
	"github.com/loom-ml/loom/libs/store"
	"github.com/loom-ml/loom/libs/testkit"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// TestEnsureJobIndexes: a store written before the job indexes were kept
// (records only) gets them built once: the history by project, and the
// accepted jobs that have not ended; later writes keep them (an ended
// job leaves the accepted index for the history's).
func TestEnsureJobIndexes(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 30*time.Second)
	_, rdb := testkit.Redis(t)
	st := store.New(rdb, "gateway:")
	repo := NewRepo(st)
	job := func(p, id string) *loomv1.Job {
		return &loomv1.Job{Name: "projects/" + p + "/jobs/" + id, JobId: id}
	}
	// As an earlier release wrote them: the hashes alone.
	tx := &store.Tx{}
	for _, w := range []struct {
		key string
		j   *loomv1.Job
	}{{KeyJobs, job("a", "1")}, {KeyJobs, job("a", "2")}, {KeyHistory, job("a", "2")}, {KeyJobs, job("b", "3")}} {
		b, err := proto.Marshal(w.j)
		if err != nil {
			t.Fatal(err)
		}
		tx.HSet(w.key, w.j.GetName(), b)
	}
	// A job that ended while the build read the records: its accepted
	// entry is there although its history is (the build's second look
	// takes it out).
	tx.ZAdd(KeyJobIndexPrefix+"a", paging.JobKey(job("a", "2")))
	if _, err := st.Apply(ctx, "", tx); err != nil {
		t.Fatal(err)
	}
	names := func(p string, history bool) []string {
		t.Helper()
		jobs, _, _, err := repo.IndexedJobs(ctx, p, history, "", "", 100)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, j := range jobs {
			out = append(out, j.GetJobId())
		}
		return out
	}
	if got := names("a", false); len(got) != 1 || got[0] != "2" {
		t.Fatalf("indexed before the build: %v, want the planted entry only", got)
	}
	for range 2 { // the second is a no-op
		if err := repo.EnsureJobIndexes(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if a, h, b := names("a", false), names("a", true), names("b", false); len(a) != 1 || a[0] != "1" || len(h) != 1 || h[0] != "2" || len(b) != 1 || b[0] != "3" {
		t.Fatalf("project a: accepted %v, history %v; project b: accepted %v", a, h, b)
	}
	// Job 1 ends: from the accepted index to the history's.
	tx = &store.Tx{}
	if err := PutHistory(tx, job("a", "1")); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Apply(ctx, "", tx); err != nil {
		t.Fatal(err)
	}
	if a, h := names("a", false), names("a", true); len(a) != 0 || len(h) != 2 || h[0] != "1" {
		t.Fatalf("after job 1 ended: accepted %v, history %v", a, h)
	}
}

// TestEnsureJobProjects: a store whose indexes were written before the
// projects' set was kept gets the set filled from the index keys, once;
// later writes add their projects.
func TestEnsureJobProjects(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 30*time.Second)
	_, rdb := testkit.Redis(t)
	st := store.New(rdb, "gateway:")
	repo := NewRepo(st)
	tx := &store.Tx{}
	tx.ZAdd(KeyJobIndexPrefix+"a", "00000000000000000001 projects/a/jobs/1")
	tx.ZAdd(KeyHistoryIndexPrefix+"b", "00000000000000000002 projects/b/jobs/2")
	if _, err := st.Apply(ctx, "", tx); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := repo.EnsureJobProjects(ctx); err != nil {
			t.Fatal(err)
		}
	}
	tx = &store.Tx{}
	if err := PutJob(tx, &loomv1.Job{Name: "projects/c/jobs/3", JobId: "3"}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Apply(ctx, "", tx); err != nil {
		t.Fatal(err)
	}
	ps, err := repo.JobProjects(ctx)
	slices.Sort(ps)
	if err != nil || !slices.Equal(ps, []string{"a", "b", "c"}) {
		t.Errorf("projects %v (%v), want a, b and c", ps, err)
	}
}
