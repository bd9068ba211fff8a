package app

import (
	"errors"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/store"
	"github.com/loom-ml/loom/libs/testkit"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/gateway/internal/adapters"
)

// TestHistorySweepAndRequestTTL: the sweep drops ended jobs and accepted
// records older than the history window (and only those), and request
// records expire by themselves (Redis TTL), also those a crash left without
// a TTL.
func TestHistorySweepAndRequestTTL(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 30*time.Second)
	_, rdb := testkit.Redis(t)
	st := store.New(rdb, "gateway:")
	repo := adapters.NewRepo(st)
	owners, err := adapters.DialOwners("127.0.0.1:1", "127.0.0.1:1", "127.0.0.1:1") // never called here
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = owners.Close() })
	now := time.Date(2026, 1, 31, 12, 0, 0, 0, time.UTC)
	g := New(repo, owners, Options{Now: func() time.Time { return now }, JobHistory: time.Hour})

	job := func(id string, end time.Time) *loomv1.Job {
		return &loomv1.Job{Name: "projects/p/jobs/" + id, JobId: id, State: loomv1.JobState_COMPLETED,
			SubmitTime: timestamppb.New(end.Add(-time.Minute)), EndTime: timestamppb.New(end),
			Steps: []*loomv1.JobStep{{StepId: 0, Attempt: 1}}}
	}
	tx := &store.Tx{}
	for _, j := range []*loomv1.Job{job("1", now.Add(-2*time.Hour)), job("2", now.Add(-10*time.Minute))} {
		if err := adapters.PutHistory(tx, j); err != nil {
			t.Fatal(err)
		}
		if err := adapters.PutJob(tx, j); err != nil {
			t.Fatal(err)
		}
	}
	adapters.PutRequest(tx, adapters.RequestSubmitJob, "r1", "projects/p/jobs/2")
	if _, err := repo.Apply(ctx, adapters.RequestInboxID(adapters.RequestSubmitJob, "r1"), tx); err != nil {
		t.Fatal(err)
	}
	key := "gateway:" + adapters.RequestInboxID(adapters.RequestSubmitJob, "r1")
	if ttl := rdb.TTL(ctx, key).Val(); ttl <= adapters.RequestTTL-time.Minute || ttl > adapters.RequestTTL {
		t.Fatalf("request record TTL %v, want about %v", ttl, adapters.RequestTTL)
	}
	if name, err := repo.Request(ctx, adapters.RequestSubmitJob, "r1"); err != nil || name != "projects/p/jobs/2" {
		t.Fatalf("request r1: %q %v", name, err)
	}
	// A crash between the Apply and its EXPIRE leaves a record without TTL.
	rdb.Persist(ctx, key)

	n, err := g.SweepHistory(ctx)
	if err != nil || n != 2 {
		t.Fatalf("sweep dropped %d (%v), want 2 (job 1's history and accepted records)", n, err)
	}
	if _, err := repo.HistoryJob(ctx, "projects/p/jobs/1"); !errors.Is(err, errs.NotFound) {
		t.Errorf("job 1 (ended 2h ago, window 1h) still in the history: %v", err)
	}
	if _, err := repo.AcceptedJob(ctx, "projects/p/jobs/1"); !errors.Is(err, errs.NotFound) {
		t.Errorf("job 1's accepted record kept: %v", err)
	}
	if _, err := repo.HistoryJob(ctx, "projects/p/jobs/2"); err != nil {
		t.Errorf("job 2 (ended 10m ago) swept: %v", err)
	}
	// Its index entries go with it.
	for _, history := range []bool{true, false} {
		jobs, _, _, err := repo.IndexedJobs(ctx, "p", history, "", "", 10)
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range jobs {
			if j.GetJobId() == "1" {
				t.Errorf("job 1 still indexed (history %v)", history)
			}
		}
		if n, err := rdb.ZCard(ctx, "gateway:"+map[bool]string{true: adapters.KeyHistoryIndexPrefix, false: adapters.KeyJobIndexPrefix}[history]+"p").Result(); err != nil || n > 1 {
			t.Errorf("index (history %v) holds %d entries (%v), want at most job 2's", history, n, err)
		}
	}
	// A job's steps go with it.
	if steps, err := repo.HistorySteps(ctx, "projects/p/jobs/1"); err != nil || len(steps) != 0 {
		t.Errorf("job 1's steps kept: %v %v", steps, err)
	}
	if steps, err := repo.HistorySteps(ctx, "projects/p/jobs/2"); err != nil || len(steps) != 1 {
		t.Errorf("job 2's steps: %v %v, want its one step", steps, err)
	}
	if ttl := rdb.TTL(ctx, key).Val(); ttl <= 0 {
		t.Errorf("the sweep left the request record without a TTL: %v", ttl)
	}
	// Nothing more to do: a second sweep drops nothing.
	if n, err := g.SweepHistory(ctx); err != nil || n != 0 {
		t.Errorf("second sweep: %d %v", n, err)
	}
}
