package app

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/paging"
	"github.com/loom-ml/loom/libs/store"
	"github.com/loom-ml/loom/libs/testkit"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
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
	now := time.Date(2026, 1, 31, 12, 0, 0, 0, time.UTC)
	g, repo, rdb := sweepGateway(t, &now, time.Hour, nil)

	job := func(id string, end time.Time) *loomv1.Job {
		return &loomv1.Job{Name: "projects/p/jobs/" + id, JobId: id, State: loomv1.JobState_COMPLETED,
			SubmitTime: timestamppb.New(end.Add(-time.Minute)), EndTime: timestamppb.New(end),
			Steps: []*loomv1.JobStep{{StepId: 0, Attempt: 1}}}
	}
	// As the jobs went: accepted, then ended (PutHistory takes an ended
	// job out of the accepted index; its record stays until the sweep).
	jobs := []*loomv1.Job{job("1", now.Add(-2*time.Hour)), job("2", now.Add(-10*time.Minute))}
	tx := &store.Tx{}
	for _, j := range jobs {
		if err := adapters.PutJob(tx, j); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := repo.Apply(ctx, "", tx); err != nil {
		t.Fatal(err)
	}
	tx = &store.Tx{}
	for _, j := range jobs {
		if err := adapters.PutHistory(tx, j); err != nil {
			t.Fatal(err)
		}
	}
	adapters.PutRequest(tx, adapters.RequestSubmitJob, "r1", "projects/p/jobs/2", "")
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
	if err != nil || n != 1 {
		t.Fatalf("sweep dropped %d (%v), want 1 (job 1's history record, its accepted record with it)", n, err)
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

// TestHistorySweepReadsNearTheWindowStart: once a sweep has sampled the job
// id counter, a sweep one window later reads each index only up to the ids
// that sample bounds (the jobs accepted before it), dropping every old one
// there, and not the jobs accepted since: here some of those are made to
// look old (an end before the window, which no real job accepted since can
// have) and are left alone, which shows the walk stopped at the bound. An
// index entry whose record is gone is dropped too.
func TestHistorySweepReadsNearTheWindowStart(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 30*time.Second)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := t0
	g, repo, rdb := sweepGateway(t, &now, 30*24*time.Hour, nil)
	ended := func(n int, accepted, end time.Time) {
		t.Helper()
		first, err := repo.NextJobIDs(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		tx := &store.Tx{}
		for id := first; id < first+int64(n); id++ {
			s := strconv.FormatInt(id, 10)
			j := &loomv1.Job{Name: "projects/p/jobs/" + s, JobId: s, State: loomv1.JobState_COMPLETED,
				SubmitTime: timestamppb.New(accepted), EndTime: timestamppb.New(end)}
			if err := adapters.PutHistory(tx, j); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := repo.Apply(ctx, "", tx); err != nil {
			t.Fatal(err)
		}
	}
	ended(600, t0, t0.Add(time.Minute)) // ids 1..600
	now = t0.Add(time.Hour)
	if n, err := g.SweepHistory(ctx); err != nil || n != 0 {
		t.Fatalf("first sweep: %d %v, want nothing old yet", n, err)
	}
	// Accepted after the sample; the last 5 made to look old.
	ended(700, t0.Add(2*time.Hour), t0.Add(3*time.Hour))               // ids 601..1300
	ended(5, t0.Add(2*time.Hour), t0.Add(-time.Hour))                  // ids 1301..1305
	rdb.HDel(ctx, "gateway:"+adapters.KeyHistory, "projects/p/jobs/7") // an entry whose record is gone
	now = t0.Add(30*24*time.Hour + 30*time.Minute)                     // the window starts before the sample
	n, err := g.SweepHistory(ctx)
	if err != nil || n != 599 {
		t.Fatalf("sweep a window later: dropped %d (%v), want the 599 records of ids 1..600 left", n, err)
	}
	for id, kept := range map[string]bool{"1": false, "600": false, "601": true, "1300": true, "1301": true, "1305": true} {
		_, err := repo.HistoryJob(ctx, "projects/p/jobs/"+id)
		if got := err == nil; got != kept {
			t.Errorf("job %s kept %v (%v), want %v", id, got, err, kept)
		}
	}
	if c := rdb.ZCard(ctx, "gateway:"+adapters.KeyHistoryIndexPrefix+"p").Val(); c != 705 {
		t.Errorf("history index holds %d entries, want 705 (ids 601..1305; job 7's gone with the rest)", c)
	}
}

// TestHistorySweepDamagedRecord: a history record that does not decode is
// dropped with its index entry (no list can show it), and nothing else of
// its job's goes with it: its accepted record stays while it is young.
func TestHistorySweepDamagedRecord(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 30*time.Second)
	now := time.Date(2026, 1, 31, 12, 0, 0, 0, time.UTC)
	g, repo, rdb := sweepGateway(t, &now, time.Hour, nil)
	j := &loomv1.Job{Name: "projects/p/jobs/1", JobId: "1", State: loomv1.JobState_COMPLETED,
		SubmitTime: timestamppb.New(now.Add(-2 * time.Minute)), EndTime: timestamppb.New(now.Add(-time.Minute))}
	for _, put := range []func(*store.Tx, *loomv1.Job) error{adapters.PutJob, adapters.PutHistory} {
		tx := &store.Tx{}
		if err := put(tx, j); err != nil {
			t.Fatal(err)
		}
		if _, err := repo.Apply(ctx, "", tx); err != nil {
			t.Fatal(err)
		}
	}
	rdb.HSet(ctx, "gateway:"+adapters.KeyHistory, j.GetName(), "\xff\xff not a job")
	if n, err := g.SweepHistory(ctx); err != nil || n != 0 {
		t.Fatalf("sweep: %d %v, want no record of a job dropped", n, err)
	}
	if rdb.HExists(ctx, "gateway:"+adapters.KeyHistory, j.GetName()).Val() || rdb.ZCard(ctx, "gateway:"+adapters.KeyHistoryIndexPrefix+"p").Val() != 0 {
		t.Error("the damaged history record or its index entry is still there")
	}
	if _, err := repo.AcceptedJob(ctx, j.GetName()); err != nil {
		t.Errorf("the job's accepted record went with its damaged history: %v", err)
	}
}

// TestHistorySweepSkipsARecordWrittenSince: a history record written again
// between the sweep's read and its deletion (the job ran and ended again)
// is not deleted on what the sweep read; the next sweep judges it anew.
func TestHistorySweepSkipsARecordWrittenSince(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 30*time.Second)
	now := time.Date(2026, 1, 31, 12, 0, 0, 0, time.UTC)
	g, repo, _ := sweepGateway(t, &now, time.Hour, nil)
	put := func(end time.Time) {
		t.Helper()
		tx := &store.Tx{}
		if err := adapters.PutHistory(tx, &loomv1.Job{Name: "projects/p/jobs/1", JobId: "1", State: loomv1.JobState_COMPLETED,
			SubmitTime: timestamppb.New(now.Add(-3 * time.Hour)), EndTime: timestamppb.New(end)}); err != nil {
			t.Fatal(err)
		}
		if _, err := repo.Apply(ctx, "", tx); err != nil {
			t.Fatal(err)
		}
	}
	put(now.Add(-2 * time.Hour))
	g.beforeSweepWrite = func() { put(now.Add(-time.Minute)) } // ended again, just now
	if n, err := g.SweepHistory(ctx); err != nil || n != 0 {
		t.Fatalf("sweep: dropped %d (%v), want none: the record changed after it was read", n, err)
	}
	g.beforeSweepWrite = nil
	if n, err := g.SweepHistory(ctx); err != nil || n != 0 {
		t.Fatalf("next sweep: dropped %d (%v), want none: the record is young now", n, err)
	}
	if j, err := repo.HistoryJob(ctx, "projects/p/jobs/1"); err != nil || !j.GetEndTime().AsTime().Equal(now.Add(-time.Minute)) {
		t.Errorf("the job's history: %v %v, want its second end kept", j, err)
	}
}

// sweepGateway is a gateway for the history sweep's tests: its own Redis,
// the clock *now, a job history of window, and sched as the scheduler (nil:
// owner services that are never called).
func sweepGateway(t *testing.T, now *time.Time, window time.Duration, sched loomv1.JobServiceServer) (*Gateway, *adapters.Repo, *redis.Client) {
	t.Helper()
	_, rdb := testkit.Redis(t)
	repo := adapters.NewRepo(store.New(rdb, "gateway:"))
	var owners *adapters.Owners
	if sched != nil {
		owners = serveOwners(t, func(srv *grpc.Server) { loomv1.RegisterJobServiceServer(srv, sched) })
	} else {
		var err error
		if owners, err = adapters.DialOwners("127.0.0.1:1", "127.0.0.1:1", "127.0.0.1:1"); err != nil { // never called here
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = owners.Close() })
	}
	return New(repo, owners, Options{Now: func() time.Time { return *now }, JobHistory: window}), repo, rdb
}

// arrayScheduler lists, for job ids [A], array A's active tasks: task A+1
// while live, after a first page that comes back empty with a token at A
// (the scheduler's scan bound); not live, an empty page with a token past
// the array's tasks (the project's other active jobs), which the sweep
// must not follow. It fails while down. It counts the lists.
type arrayScheduler struct {
	loomv1.UnimplementedJobServiceServer
	mu         sync.Mutex
	live, down bool
	calls      int
}

func (s *arrayScheduler) set(live, down bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.live, s.down = live, down
}

func (s *arrayScheduler) ListJobs(_ context.Context, req *loomv1.ListJobsRequest) (*loomv1.ListJobsResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	switch {
	case s.down:
		return nil, status.Error(codes.Unavailable, "scheduler down")
	case len(req.GetJobIds()) != 1 || !req.GetActiveOnly() || req.GetParent() != "projects/p":
		return nil, status.Errorf(codes.InvalidArgument, "unexpected list %v", req)
	}
	a, _ := strconv.Atoi(req.GetJobIds()[0])
	token := func(id int) string {
		fwd := proto.Clone(req).(*loomv1.ListJobsRequest)
		fwd.PageToken = ""
		return paging.Token(fwd, paging.JobKey(&loomv1.Job{Name: "projects/p/jobs/" + strconv.Itoa(id), JobId: strconv.Itoa(id)}))
	}
	switch {
	case req.GetPageToken() == "":
		return &loomv1.ListJobsResponse{NextPageToken: token(a)}, nil
	case !s.live:
		return &loomv1.ListJobsResponse{NextPageToken: token(a + 50)}, nil
	}
	id := strconv.Itoa(a + 1)
	return &loomv1.ListJobsResponse{Jobs: []*loomv1.Job{{Name: "projects/p/jobs/" + id, JobId: id,
		ArrayJobId: req.GetJobIds()[0], ArrayTaskId: 1, State: loomv1.JobState_PENDING}}}, nil
}

// TestHistorySweepKeepsALiveArray: an array's record (as accepted, and its
// first task's history) stays past the window while the scheduler lists a
// task of it not ended — "scancel A" still acts on the whole array — or
// cannot be asked; it goes at the first sweep after its last task ended. A
// job that is not an array costs the sweep no question.
func TestHistorySweepKeepsALiveArray(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 30*time.Second)
	now := time.Date(2026, 1, 31, 12, 0, 0, 0, time.UTC)
	sched := &arrayScheduler{live: true}
	g, repo, _ := sweepGateway(t, &now, time.Hour, sched)
	put := func(put func(*store.Tx, *loomv1.Job) error, j *loomv1.Job) {
		t.Helper()
		tx := &store.Tx{}
		if err := put(tx, j); err != nil {
			t.Fatal(err)
		}
		if _, err := repo.Apply(ctx, "", tx); err != nil {
			t.Fatal(err)
		}
	}
	old := timestamppb.New(now.Add(-3 * time.Hour))
	// Array 5 (tasks 5..7): accepted, its first task ended 2 hours ago.
	put(adapters.PutJob, &loomv1.Job{Name: "projects/p/jobs/5", JobId: "5", Array: "0-2", State: loomv1.JobState_PENDING, SubmitTime: old})
	put(adapters.PutHistory, &loomv1.Job{Name: "projects/p/jobs/5", JobId: "5", Array: "0-2", ArrayJobId: "5",
		State: loomv1.JobState_COMPLETED, SubmitTime: old, EndTime: timestamppb.New(now.Add(-2 * time.Hour))})
	// Array 9 (tasks 9..10), pending since before the window: accepted only.
	put(adapters.PutJob, &loomv1.Job{Name: "projects/p/jobs/9", JobId: "9", Array: "1,3", State: loomv1.JobState_PENDING, SubmitTime: old})
	// A job that is no array, ended before the window.
	put(adapters.PutJob, &loomv1.Job{Name: "projects/p/jobs/2", JobId: "2", State: loomv1.JobState_PENDING, SubmitTime: old})
	put(adapters.PutHistory, &loomv1.Job{Name: "projects/p/jobs/2", JobId: "2", State: loomv1.JobState_COMPLETED,
		SubmitTime: old, EndTime: timestamppb.New(now.Add(-2 * time.Hour))})

	kept := func(want bool) {
		t.Helper()
		for _, name := range []string{"projects/p/jobs/5", "projects/p/jobs/9"} {
			if _, err := repo.AcceptedJob(ctx, name); (err == nil) != want {
				t.Errorf("%s accepted record: %v, want kept %v", name, err, want)
			}
		}
		if _, err := repo.HistoryJob(ctx, "projects/p/jobs/5"); (err == nil) != want {
			t.Errorf("array 5's first task's history: %v, want kept %v", err, want)
		}
	}
	if n, err := g.SweepHistory(ctx); err != nil || n != 1 {
		t.Fatalf("sweep: dropped %d (%v), want 1 (job 2)", n, err)
	}
	kept(true)
	if _, err := repo.HistoryJob(ctx, "projects/p/jobs/2"); !errors.Is(err, errs.NotFound) {
		t.Errorf("job 2 kept: %v", err)
	}
	sched.mu.Lock()
	if sched.calls != 4 { // two arrays, two pages each; none for job 2
		t.Errorf("the scheduler was asked %d times, want 4", sched.calls)
	}
	sched.mu.Unlock()
	ref, err := g.resolveJob(ctx, "projects/p/jobs/5", true)
	if err != nil || !ref.array {
		t.Errorf("job 5 after the sweep: %+v %v, want it an array", ref, err)
	}

	// Each later sweep comes two hours on: past the id counter's last
	// sample (the test's ids are not the counter's), so it reads every id.
	now = now.Add(2 * time.Hour)
	sched.set(false, true)
	if n, err := g.SweepHistory(ctx); err != nil || n != 0 {
		t.Fatalf("sweep, scheduler down: dropped %d (%v), want none", n, err)
	}
	kept(true)

	now = now.Add(2 * time.Hour)
	sched.set(false, false) // every task ended
	sched.mu.Lock()
	sched.calls = 0
	sched.mu.Unlock()
	if n, err := g.SweepHistory(ctx); err != nil || n != 2 {
		t.Fatalf("sweep after the tasks ended: dropped %d (%v), want 2 (array 5's history and array 9's record)", n, err)
	}
	kept(false)
	sched.mu.Lock()
	if sched.calls != 4 { // two pages each; none past the arrays' last tasks
		t.Errorf("the scheduler was asked %d times, want 4", sched.calls)
	}
	sched.mu.Unlock()
}

// TestHistoryKeepsOnlyTheJobsEnd: a run's end the scheduler requeues in
// the same change (requeue_follows) is not the job's end: the history does
// not record the job as ended FAILED while it runs again.
func TestHistoryKeepsOnlyTheJobsEnd(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 30*time.Second)
	now := time.Date(2026, 1, 31, 12, 0, 0, 0, time.UTC)
	g, repo, _ := sweepGateway(t, &now, time.Hour, nil)
	failed := &loomv1.Job{Name: "projects/p/jobs/1", JobId: "1", State: loomv1.JobState_FAILED, StateReason: "NonZeroExitCode",
		EndTime: timestamppb.New(now), Runs: []*loomv1.JobRun{{Attempt: 1, State: loomv1.JobState_FAILED}}}
	if err := g.HandleHistoryEvent(ctx, envelope.Event{ID: "e1", Payload: &eventsv1.JobChanged{Job: failed, Attempt: 1, RequeueFollows: true}}); err != nil {
		t.Fatal(err)
	}
	if j, err := repo.HistoryJob(ctx, "projects/p/jobs/1"); !errors.Is(err, errs.NotFound) {
		t.Fatalf("a retried run's end went to the history: %v %v", j.GetState(), err)
	}
	if err := g.HandleHistoryEvent(ctx, envelope.Event{ID: "e2", Payload: &eventsv1.JobChanged{Job: failed, Attempt: 2}}); err != nil {
		t.Fatal(err)
	}
	if j, err := repo.HistoryJob(ctx, "projects/p/jobs/1"); err != nil || j.GetState() != loomv1.JobState_FAILED {
		t.Fatalf("the job's end: %v %v, want FAILED in the history", j.GetState(), err)
	}
}
